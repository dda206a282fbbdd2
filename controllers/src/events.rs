//! Events the built-in controllers record on the objects they manage, with upstream's reasons and notes.

use flotilla_sdk::kube::Resource;
use flotilla_sdk::kube::runtime::events::{Event, EventType};

use flotilla_sdk::Context;

/// Records an event on `object`. An event is a courtesy: failing to publish it must not fail the
/// reconcile, so a failure is only logged.
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: reason.to_owned(),
        secondary: None,
    };
    if let Err(err) = ctx
        .recorder()
        .publish(&event, &object.object_ref(&()))
        .await
    {
        tracing::debug!(error = %err, "cannot publish an event");
    }
}
