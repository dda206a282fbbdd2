//! Events the built-in controllers record on the objects they manage, with upstream's reasons and
//! messages.

use flotilla_sdk::kube::Resource;
use flotilla_sdk::{Context, EventType};

/// Records an Event on `object` (written in the background; an Event is a courtesy, so nothing waits
/// for it and a failure to write it is only logged).
pub fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    message: String,
) {
    ctx.recorder().event(object, type_, reason, message);
}
