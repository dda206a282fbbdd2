//! client-go's `EventCorrelator`, which kube-controller-manager's event broadcaster runs every Event
//! through before writing it: what becomes a new core/v1 Event, what becomes a patch of an earlier one
//! (its `count` and `lastTimestamp`), and what is dropped.
//!
//! In client-go's order, for each Event:
//! 1. **Aggregate.** Events about one object with the same source, type and reason but different
//!    messages are counted per 10-minute window; from the 10th distinct message on they are folded into
//!    one Event `(combined from similar events): <latest message>`.
//! 2. **Observe.** An Event seen before (same source, object, type, reason and message — or the combined
//!    Event of step 1) becomes a patch of the earlier Event: `count` + 1, `lastTimestamp`, `message`.
//! 3. **Filter.** Each object gets a burst of 25 Events, then one per 5 minutes ([`SpamFilter`]);
//!    what is over is dropped.
//!
//! Everything is remembered in LRU caches of 4,096 entries, as in client-go. Intervals are measured on
//! tokio's clock (tests run it paused); the timestamps written into Events are wall-clock time.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use lru::LruCache;
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

use crate::spam_filter::{SPAM_MAX_OBJECTS, SpamFilter};

/// client-go's `defaultAggregateMaxEvents`: distinct messages of one reason before they are combined.
pub const AGGREGATE_MAX_EVENTS: usize = 10;

/// client-go's `defaultAggregateIntervalInSeconds`: the window over which distinct messages count.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);

/// The prefix of a combined Event's message (client-go's `EventAggregatorByReasonMessageFunc`).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What to do with one Event.
#[derive(Debug, Clone, PartialEq)]
pub enum Correlated {
    /// Create this Event.
    Create(Event),
    /// Strategic-merge-patch the Event named in `event` with `patch`; if it is gone, create `event`.
    Patch {
        /// The Event as it now stands: name, namespace and the raised count.
        event: Event,
        /// `{"count", "lastTimestamp", "message"}`.
        patch: serde_json::Value,
    },
    /// The object has had its burst of Events: drop it.
    Skip,
}

/// One correlator per event sink; safe to share.
#[derive(Debug)]
pub struct EventCorrelator {
    aggregator: Mutex<LruCache<String, AggregateRecord>>,
    observed: Mutex<LruCache<String, Observation>>,
    spam: SpamFilter<String>,
}

/// The distinct messages of one aggregate key in the current window.
#[derive(Debug)]
struct AggregateRecord {
    messages: HashSet<String>,
    last: Instant,
}

/// What was last written for one event key (client-go's `eventLog`).
#[derive(Debug, Clone)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

impl Default for EventCorrelator {
    /// client-go's defaults.
    fn default() -> Self {
        let entries = NonZeroUsize::new(SPAM_MAX_OBJECTS).unwrap_or(NonZeroUsize::MIN);
        Self {
            aggregator: Mutex::new(LruCache::new(entries)),
            observed: Mutex::new(LruCache::new(entries)),
            spam: SpamFilter::default(),
        }
    }
}

impl EventCorrelator {
    /// Runs `event` (a fresh Event: count 1, first and last timestamp now) through aggregation,
    /// observation and the spam filter.
    pub fn correlate(&self, event: Event) -> Correlated {
        let (event, key) = self.aggregate(event);
        let spam = spam_key(&event);
        let observed = self.observe(event, &key);
        if self.spam.allow(&spam) {
            observed
        } else {
            Correlated::Skip
        }
    }

    /// Remembers the Event the API server returned for a create or patch, so that the next repeat
    /// patches it (client-go's `UpdateState`).
    pub fn update_state(&self, written: &Event) {
        self.observed
            .lock()
            .put(event_key(written), Observation::of(written));
    }

    /// Step 1: the Event itself and its full key, or, from the 10th distinct message of its reason in
    /// the window on, a combined Event and the aggregate key.
    fn aggregate(&self, event: Event) -> (Event, String) {
        let now = Instant::now();
        let aggregate = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();
        let mut records = self.aggregator.lock();
        let record = records.get_or_insert_mut(aggregate.clone(), || AggregateRecord {
            messages: HashSet::new(),
            last: now,
        });
        if now.saturating_duration_since(record.last) > AGGREGATE_INTERVAL {
            record.messages.clear();
        }
        record.messages.insert(message);
        record.last = now;
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            let key = event_key(&event);
            return (event, key);
        }
        // client-go pops an arbitrary message so that the set stays at the bound.
        if let Some(any) = record.messages.iter().next().cloned() {
            record.messages.remove(&any);
        }
        let stamp = event.last_timestamp.clone();
        let combined = Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(event_name(
                    event.involved_object.name.as_deref().unwrap_or_default(),
                    stamp.as_ref(),
                )),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: stamp.clone(),
            last_timestamp: stamp,
            involved_object: event.involved_object.clone(),
            message: Some(format!(
                "{COMBINED_PREFIX}{}",
                event.message.as_deref().unwrap_or_default()
            )),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            ..Default::default()
        };
        (combined, aggregate)
    }

    /// Step 2: a repeat of an Event written before becomes a patch of it.
    fn observe(&self, mut event: Event, key: &str) -> Correlated {
        let mut observed = self.observed.lock();
        let last = observed.get(key).filter(|o| o.count > 0).cloned();
        let Some(last) = last else {
            observed.put(key.to_owned(), Observation::of(&event));
            return Correlated::Create(event);
        };
        event.metadata.name = last.name;
        event.metadata.resource_version = last.resource_version;
        event.first_timestamp = last.first_timestamp;
        event.count = Some(last.count.saturating_add(1));
        observed.put(key.to_owned(), Observation::of(&event));
        let patch = json!({
            "count": event.count,
            "lastTimestamp": event.last_timestamp,
            "message": event.message.clone().unwrap_or_default(),
        });
        Correlated::Patch { event, patch }
    }
}

impl Observation {
    fn of(event: &Event) -> Self {
        Self {
            count: event.count.unwrap_or(0),
            first_timestamp: event.first_timestamp.clone(),
            name: event.metadata.name.clone(),
            resource_version: event.metadata.resource_version.clone(),
        }
    }
}

/// An Event's name as client-go makes it: the object's name, a dot, and the time in nanoseconds since
/// the epoch in lowercase hex.
pub fn event_name(object: &str, at: Option<&Time>) -> String {
    let nanos = at.map_or(0, |t| t.0.as_nanosecond());
    format!("{object}.{nanos:x}")
}

/// The fields client-go's keys join, in its order, with a separator (client-go joins without one).
fn join(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn source_and_object(event: &Event) -> [&str; 7] {
    let source = event.source.as_ref();
    let object = &event.involved_object;
    [
        source
            .and_then(|s| s.component.as_deref())
            .unwrap_or_default(),
        source.and_then(|s| s.host.as_deref()).unwrap_or_default(),
        object.kind.as_deref().unwrap_or_default(),
        object.namespace.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default(),
        object.uid.as_deref().unwrap_or_default(),
        object.api_version.as_deref().unwrap_or_default(),
    ]
}

/// client-go's `getEventKey`: source, object (with its field path), type, reason and message.
fn event_key(event: &Event) -> String {
    let [component, host, kind, namespace, name, uid, api_version] = source_and_object(event);
    join(&[
        component,
        host,
        kind,
        namespace,
        name,
        event
            .involved_object
            .field_path
            .as_deref()
            .unwrap_or_default(),
        uid,
        api_version,
        event.type_.as_deref().unwrap_or_default(),
        event.reason.as_deref().unwrap_or_default(),
        event.message.as_deref().unwrap_or_default(),
    ])
}

/// client-go's `EventAggregatorByReasonFunc` key: source, object, type, reason and reporter.
fn aggregate_key(event: &Event) -> String {
    let mut parts = source_and_object(event).to_vec();
    parts.extend([
        event.type_.as_deref().unwrap_or_default(),
        event.reason.as_deref().unwrap_or_default(),
        event.reporting_component.as_deref().unwrap_or_default(),
        event.reporting_instance.as_deref().unwrap_or_default(),
    ]);
    join(&parts)
}

/// client-go's `getSpamKey`: source and object.
fn spam_key(event: &Event) -> String {
    join(&source_and_object(event))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn fresh(object: &str, reason: &str, message: &str) -> Event {
        let now = Some(Time(Timestamp::now()));
        Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(event_name(object, now.as_ref())),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("ReplicaSet".into()),
                api_version: Some("apps/v1".into()),
                namespace: Some("ns".into()),
                name: Some(object.into()),
                uid: Some(format!("uid-{object}")),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some("replicaset-controller".into()),
                host: None,
            }),
            reporting_component: Some("replicaset-controller".into()),
            reporting_instance: Some(String::new()),
            first_timestamp: now.clone(),
            last_timestamp: now,
            count: Some(1),
            ..Default::default()
        }
    }

    /// The API server's answer to a create or patch: the Event with a resourceVersion.
    fn written(event: &Event, rv: &str) -> Event {
        let mut event = event.clone();
        event.metadata.resource_version = Some(rv.into());
        event
    }

    #[tokio::test(start_paused = true)]
    async fn distinct_messages_are_separate_events_and_a_repeat_patches_the_first_with_its_count() {
        let c = EventCorrelator::default();
        let first = match c.correlate(fresh("web", "SuccessfulCreate", "Created pod: web-a")) {
            Correlated::Create(e) => e,
            other => panic!("a first event is created: {other:?}"),
        };
        c.update_state(&written(&first, "7"));
        assert!(matches!(
            c.correlate(fresh("web", "SuccessfulCreate", "Created pod: web-b")),
            Correlated::Create(_)
        ));
        match c.correlate(fresh("web", "SuccessfulCreate", "Created pod: web-a")) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.metadata.name, first.metadata.name);
                assert_eq!(event.metadata.resource_version.as_deref(), Some("7"));
                assert_eq!(event.first_timestamp, first.first_timestamp);
                assert_eq!(event.count, Some(2));
                let fields: Vec<_> = patch.as_object().unwrap().keys().cloned().collect();
                assert_eq!(fields, ["count", "lastTimestamp", "message"]);
                assert_eq!(patch["count"], 2);
            }
            other => panic!("a repeat is a patch: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_tenth_distinct_message_of_a_reason_becomes_one_combined_event_then_patches() {
        let c = EventCorrelator::default();
        for i in 0..9 {
            let e = fresh("web", "FailedCreate", &format!("quota {i}"));
            assert!(matches!(c.correlate(e), Correlated::Create(_)), "event {i}");
        }
        let combined = match c.correlate(fresh("web", "FailedCreate", "quota 9")) {
            Correlated::Create(e) => e,
            other => panic!("the 10th is a new combined event: {other:?}"),
        };
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): quota 9")
        );
        assert_eq!(combined.count, Some(1));
        assert!(combined.metadata.name.unwrap().starts_with("web."));
        assert_eq!(
            combined.reporting_component, None,
            "client-go's copy drops it"
        );
        match c.correlate(fresh("web", "FailedCreate", "quota 10")) {
            Correlated::Patch { event, patch } => {
                assert_eq!(event.count, Some(2));
                assert_eq!(patch["message"], "(combined from similar events): quota 10");
            }
            other => panic!("the 11th patches the combined event: {other:?}"),
        }
        assert!(
            matches!(
                c.correlate(fresh("web", "FailedDelete", "other reason")),
                Correlated::Create(_)
            ),
            "another reason is counted apart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn distinct_messages_count_only_within_ten_minutes() {
        let c = EventCorrelator::default();
        for i in 0..9 {
            c.correlate(fresh("web", "FailedCreate", &format!("m{i}")));
        }
        tokio::time::advance(AGGREGATE_INTERVAL + Duration::from_secs(1)).await;
        match c.correlate(fresh("web", "FailedCreate", "m9")) {
            Correlated::Create(e) => assert_eq!(e.message.as_deref(), Some("m9")),
            other => panic!("a quiet window starts the count again: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_gets_25_events_then_one_per_five_minutes() {
        let c = EventCorrelator::default();
        let kept = (0..30)
            .filter(|i| {
                let e = fresh("web", "SuccessfulCreate", &format!("Created pod: web-{i}"));
                c.correlate(e) != Correlated::Skip
            })
            .count();
        assert_eq!(kept, 25);
        let other = fresh("api", "SuccessfulCreate", "Created pod: api-0");
        assert_ne!(c.correlate(other), Correlated::Skip, "each object its own");
        tokio::time::advance(Duration::from_secs(300)).await;
        let late = fresh("web", "SuccessfulCreate", "Created pod: web-late");
        assert_ne!(c.correlate(late), Correlated::Skip);
    }

    #[test]
    fn an_event_is_named_after_its_object_and_the_time_in_hex_nanoseconds() {
        let at = Time(Timestamp::from_nanosecond(0x18ea_544c_473d_3717).unwrap());
        assert_eq!(event_name("web", Some(&at)), "web.18ea544c473d3717");
    }
}
