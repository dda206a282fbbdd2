//! Taints and tolerations as the DaemonSet controller sees them (upstream `v1helper` and
//! `daemon/util`): the tolerations every daemon pod gets, whether a toleration tolerates a taint, and
//! the first taint of a node that a pod does not tolerate.

use flotilla_sdk::k8s_openapi::api::core::v1::{PodSpec, Taint, Toleration};

/// `node.kubernetes.io/not-ready`, put on a node whose Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`, put on a node whose Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `node.kubernetes.io/disk-pressure`.
pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// `node.kubernetes.io/memory-pressure`.
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// `node.kubernetes.io/pid-pressure`.
pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
/// `node.kubernetes.io/unschedulable`, the taint a cordoned node (`spec.unschedulable`) carries:
/// daemon pods tolerate it, so a cordon does not stop them (upstream has no other check of
/// `spec.unschedulable`).
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// `node.kubernetes.io/network-unavailable`, tolerated by host-network daemon pods only.
pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// `NoSchedule`: no new pod that does not tolerate it.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// `NoExecute`: no pod that does not tolerate it, running ones included.
pub const NO_EXECUTE: &str = "NoExecute";

/// Upstream `AddOrUpdateDaemonPodTolerations`: daemon pods survive node problems, so they tolerate
/// not-ready and unreachable (`NoExecute`, forever), the pressure conditions and cordons
/// (`NoSchedule`), and, with the host's network, a node whose network is not set up yet. In
/// upstream's order; a toleration the spec has already (same key, operator, value and effect) is
/// replaced in place.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        (NOT_READY, NO_EXECUTE),
        (UNREACHABLE, NO_EXECUTE),
        (DISK_PRESSURE, NO_SCHEDULE),
        (MEMORY_PRESSURE, NO_SCHEDULE),
        (PID_PRESSURE, NO_SCHEDULE),
        (UNSCHEDULABLE, NO_SCHEDULE),
    ];
    if spec.host_network == Some(true) {
        wanted.push((NETWORK_UNAVAILABLE, NO_SCHEDULE));
    }
    for (key, effect) in wanted {
        add_or_update(
            spec,
            Toleration {
                key: Some(key.to_owned()),
                operator: Some("Exists".to_owned()),
                effect: Some(effect.to_owned()),
                ..Toleration::default()
            },
        );
    }
}

/// Upstream `AddOrUpdateTolerationInPodSpec`: replaces the tolerations that match `toleration` (same
/// key, operator, value, effect) with it, or appends it.
fn add_or_update(spec: &mut PodSpec, toleration: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let mut updated = false;
    for existing in tolerations.iter_mut() {
        if same_toleration(existing, &toleration) {
            *existing = toleration.clone();
            updated = true;
        }
    }
    if !updated {
        tolerations.push(toleration);
    }
}

/// Upstream `Toleration.MatchToleration`: key, operator, value and effect equal (tolerationSeconds
/// aside).
fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    s(&a.key) == s(&b.key)
        && s(&a.operator) == s(&b.operator)
        && s(&a.value) == s(&b.value)
        && s(&a.effect) == s(&b.effect)
}

/// Upstream `Toleration.ToleratesTaint`: an empty effect or key matches any; `Exists` tolerates any
/// value, `Equal` (or no operator) the same value; an unknown operator tolerates nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `FindMatchingUntoleratedTaint`: the first of `taints` that `effects` names and no
/// toleration tolerates.
pub fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, op: &str, value: Option<&str>, effect: &str) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.into()),
            operator: (!op.is_empty()).then(|| op.into()),
            value: value.map(Into::into),
            effect: (!effect.is_empty()).then(|| effect.into()),
            toleration_seconds: None,
        }
    }

    #[test]
    fn every_daemon_pod_tolerates_node_problems_in_upstreams_order() {
        let mut spec = PodSpec::default();
        add_daemon_tolerations(&mut spec);
        let keys: Vec<_> = spec
            .tolerations
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| (t.key.clone().unwrap(), t.effect.clone().unwrap()))
            .collect();
        let expected = [
            (NOT_READY, NO_EXECUTE),
            (UNREACHABLE, NO_EXECUTE),
            (DISK_PRESSURE, NO_SCHEDULE),
            (MEMORY_PRESSURE, NO_SCHEDULE),
            (PID_PRESSURE, NO_SCHEDULE),
            (UNSCHEDULABLE, NO_SCHEDULE),
        ];
        assert_eq!(keys.len(), expected.len());
        for ((k, e), (ek, ee)) in keys.iter().zip(expected) {
            assert_eq!((k.as_str(), e.as_str()), (ek, ee));
        }
        // Adding them again changes nothing.
        let before = spec.clone();
        add_daemon_tolerations(&mut spec);
        assert_eq!(spec, before);
    }

    #[test]
    fn host_network_pods_also_tolerate_an_unavailable_network() {
        let mut spec = PodSpec {
            host_network: Some(true),
            ..PodSpec::default()
        };
        add_daemon_tolerations(&mut spec);
        let last = spec.tolerations.unwrap().pop().unwrap();
        assert_eq!(last.key.as_deref(), Some(NETWORK_UNAVAILABLE));
    }

    #[test]
    fn a_template_toleration_with_a_time_limit_is_replaced_by_the_unlimited_one() {
        let mut limited = toleration(NOT_READY, "Exists", None, NO_EXECUTE);
        limited.toleration_seconds = Some(300);
        let mut spec = PodSpec {
            tolerations: Some(vec![limited]),
            ..PodSpec::default()
        };
        add_daemon_tolerations(&mut spec);
        let tolerations = spec.tolerations.unwrap();
        assert_eq!(tolerations.len(), 6);
        assert_eq!(tolerations[0].toleration_seconds, None);
    }

    #[test]
    fn tolerations_match_taints_by_key_value_effect_and_operator() {
        let t = taint("dedicated", Some("x"), NO_SCHEDULE);
        assert!(tolerates(
            &toleration("dedicated", "Equal", Some("x"), NO_SCHEDULE),
            &t
        ));
        assert!(tolerates(&toleration("dedicated", "", Some("x"), ""), &t));
        assert!(!tolerates(
            &toleration("dedicated", "Equal", Some("y"), NO_SCHEDULE),
            &t
        ));
        assert!(tolerates(&toleration("dedicated", "Exists", None, ""), &t));
        assert!(!tolerates(
            &toleration("dedicated", "Exists", None, NO_EXECUTE),
            &t
        ));
        assert!(
            tolerates(&toleration("", "Exists", None, ""), &t),
            "tolerates everything"
        );
        assert!(!tolerates(&toleration("other", "Exists", None, ""), &t));
        assert!(!tolerates(
            &toleration("dedicated", "Lt", Some("x"), ""),
            &t
        ));
    }

    #[test]
    fn only_taints_of_the_given_effects_count_as_untolerated() {
        let taints = [
            taint("soft", None, "PreferNoSchedule"),
            taint("dedicated", Some("x"), NO_SCHEDULE),
            taint("evict", None, NO_EXECUTE),
        ];
        let none: [Toleration; 0] = [];
        assert_eq!(
            untolerated(&taints, &none, &[NO_SCHEDULE, NO_EXECUTE]).map(|t| t.key.as_str()),
            Some("dedicated")
        );
        assert_eq!(
            untolerated(&taints, &none, &[NO_EXECUTE]).map(|t| t.key.as_str()),
            Some("evict")
        );
        let all = [toleration("", "Exists", None, "")];
        assert!(untolerated(&taints, &all, &[NO_SCHEDULE, NO_EXECUTE]).is_none());
    }
}
