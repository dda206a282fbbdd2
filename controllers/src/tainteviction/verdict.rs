//! What becomes of one pod on a node with `NoExecute` taints, decided from the objects alone: the
//! taints' times, the pod's tolerations and its creation. Pure, so the deadlines are the same on any
//! worker that holds the node's key.

use flotilla_sdk::k8s_openapi::api::core::v1::{Pod, Taint};
use flotilla_sdk::k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::tolerations::{Stay, stay};

/// A `NoExecute` taint of the node and when it was put there: its `timeAdded`, or when this worker
/// first saw it when it has none (see [`super::memory`]).
#[derive(Debug, Clone, Copy)]
pub struct TimedTaint<'a> {
    /// The taint.
    pub taint: &'a Taint,
    /// When it was added.
    pub since: Timestamp,
}

/// What happens to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It stays: no `NoExecute` taint, or every one tolerated forever.
    Keep,
    /// It goes now: some taint is not tolerated.
    Untolerated,
    /// It goes now: its time is up (upstream's timed eviction fires).
    Due,
    /// It goes at this instant, unless things change before.
    At(Timestamp),
}

/// The verdict on `pod` with the node's `NoExecute` `taints` at `now`. A tolerated pod stays for the
/// smallest `tolerationSeconds` of the tolerations it uses, counted from the earliest of the taints'
/// times — or from the pod's creation when the pod came later, since upstream counts from when it
/// first saw the pod on the tainted node. A deadline past what time can hold counts as forever.
pub fn verdict(taints: &[TimedTaint<'_>], pod: &Pod, now: Timestamp) -> Verdict {
    let Some(tainted_since) = taints.iter().map(|t| t.since).min() else {
        return Verdict::Keep;
    };
    let only: Vec<&Taint> = taints.iter().map(|t| t.taint).collect();
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let allowed = match stay(&only, tolerations) {
        Stay::Untolerated => return Verdict::Untolerated,
        Stay::Forever => return Verdict::Keep,
        Stay::For(allowed) => allowed,
    };
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let start = created.map_or(tainted_since, |c| c.max(tainted_since));
    let deadline = SignedDuration::try_from(allowed)
        .ok()
        .and_then(|d| start.checked_add(d).ok());
    match deadline {
        None => Verdict::Keep,
        Some(deadline) if deadline <= now => Verdict::Due,
        Some(deadline) => Verdict::At(deadline),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        }
    }

    fn pod(created: i64, tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns",
                "creationTimestamp": at(created).to_string()},
            "spec": {"containers": [], "tolerations": tolerations},
        }))
        .unwrap()
    }

    fn tolerating(seconds: Option<i64>) -> serde_json::Value {
        json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}])
    }

    #[test]
    fn a_pod_tolerating_for_a_while_goes_that_long_after_the_taint_was_added() {
        let k = taint("k");
        let taints = [TimedTaint {
            taint: &k,
            since: at(100),
        }];
        let p = pod(0, tolerating(Some(3)));
        assert_eq!(verdict(&taints, &p, at(101)), Verdict::At(at(103)));
        assert_eq!(verdict(&taints, &p, at(103)), Verdict::Due);
        assert_eq!(verdict(&taints, &p, at(200)), Verdict::Due);
    }

    #[test]
    fn a_pod_that_came_after_the_taint_gets_its_whole_toleration() {
        let k = taint("k");
        let taints = [TimedTaint {
            taint: &k,
            since: at(100),
        }];
        let p = pod(150, tolerating(Some(3)));
        assert_eq!(verdict(&taints, &p, at(151)), Verdict::At(at(153)));
    }

    #[test]
    fn untolerated_goes_now_forever_stays_and_no_taint_keeps_everyone() {
        let k = taint("k");
        let other = taint("other");
        let taints = [
            TimedTaint {
                taint: &k,
                since: at(0),
            },
            TimedTaint {
                taint: &other,
                since: at(0),
            },
        ];
        assert_eq!(
            verdict(&taints, &pod(0, tolerating(Some(3))), at(1)),
            Verdict::Untolerated
        );
        assert_eq!(
            verdict(&taints[..1], &pod(0, tolerating(None)), at(1)),
            Verdict::Keep
        );
        assert_eq!(verdict(&[], &pod(0, json!([])), at(1)), Verdict::Keep);
        assert_eq!(
            verdict(&taints[..1], &pod(0, json!([])), at(1)),
            Verdict::Untolerated
        );
    }

    #[test]
    fn the_earliest_taint_starts_the_clock_and_an_absurd_toleration_is_forever() {
        let k = taint("k");
        let later = taint("k");
        let taints = [
            TimedTaint {
                taint: &k,
                since: at(10),
            },
            TimedTaint {
                taint: &later,
                since: at(50),
            },
        ];
        assert_eq!(
            verdict(&taints, &pod(0, tolerating(Some(60))), at(20)),
            Verdict::At(at(70))
        );
        assert_eq!(
            verdict(&taints, &pod(0, tolerating(Some(i64::MAX))), at(20)),
            Verdict::Keep
        );
    }
}
