//! Taints and tolerations as upstream's taint manager reads them: a node's `NoExecute` taints
//! (`getNoExecuteTaints`), the tolerations a pod uses for them (`v1helper.GetMatchingTolerations`)
//! and how long those let it stay (`getMinTolerationTime`).

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::{Taint, Toleration};

/// Upstream `Toleration.ToleratesTaint`, which the daemonset controller also judges nodes by.
pub use crate::daemonset::tolerations::tolerates;

/// `NoExecute`: the effect that evicts running pods.
pub const NO_EXECUTE: &str = "NoExecute";

/// How long a pod's tolerations let it stay on a node with the taints they tolerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stay {
    /// Some taint is not tolerated: the pod goes now.
    Untolerated,
    /// Every taint is tolerated, for at least this long (zero: the pod goes now, as a
    /// `tolerationSeconds` of zero or less says).
    For(Duration),
    /// Every taint is tolerated and no toleration used has `tolerationSeconds`.
    Forever,
}

/// The `NoExecute` taints among `taints`, in their order.
pub fn no_execute(taints: &[Taint]) -> Vec<&Taint> {
    taints.iter().filter(|t| t.effect == NO_EXECUTE).collect()
}

/// How long `tolerations` let a pod stay with `taints` (all `NoExecute`): for each taint the first
/// toleration that tolerates it is used (upstream's `GetMatchingTolerations`, so a later, longer or
/// shorter one for the same taint does not count), and the pod stays for the smallest
/// `tolerationSeconds` among those used (upstream's `getMinTolerationTime`). No taints: forever.
pub fn stay(taints: &[&Taint], tolerations: &[Toleration]) -> Stay {
    let mut least: Option<i64> = None;
    for taint in taints {
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Stay::Untolerated;
        };
        if let Some(seconds) = used.toleration_seconds {
            least = Some(least.map_or(seconds, |l| l.min(seconds)));
        }
    }
    match least {
        None => Stay::Forever,
        Some(seconds) => Stay::For(Duration::from_secs(u64::try_from(seconds).unwrap_or(0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(str::to_owned),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(
        key: Option<&str>,
        operator: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
        seconds: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: operator.map(str::to_owned),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            toleration_seconds: seconds,
        }
    }

    #[test]
    fn only_no_execute_taints_count() {
        let taints = [
            taint("a", None, "NoSchedule"),
            taint("b", None, NO_EXECUTE),
            taint("c", None, "PreferNoSchedule"),
        ];
        let keys: Vec<&str> = no_execute(&taints).iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["b"]);
    }

    #[test]
    fn a_toleration_matches_by_key_value_operator_and_effect_as_upstream() {
        let t = taint("k", Some("v"), NO_EXECUTE);
        assert!(tolerates(
            &toleration(None, Some("Exists"), None, None, None),
            &t
        ));
        assert!(tolerates(
            &toleration(Some("k"), None, Some("v"), None, None),
            &t
        ));
        assert!(tolerates(
            &toleration(Some("k"), Some("Equal"), Some("v"), Some(NO_EXECUTE), None),
            &t
        ));
        assert!(!tolerates(
            &toleration(Some("k"), Some("Equal"), Some("w"), None, None),
            &t
        ));
        assert!(!tolerates(
            &toleration(Some("k"), Some("Exists"), None, Some("NoSchedule"), None),
            &t
        ));
        assert!(!tolerates(
            &toleration(Some("other"), Some("Exists"), None, None, None),
            &t
        ));
        assert!(!tolerates(
            &toleration(Some("k"), Some("Gt"), Some("v"), None, None),
            &t
        ));
    }

    #[test]
    fn the_smallest_toleration_seconds_of_the_tolerations_used_decides() {
        let a = taint("a", None, NO_EXECUTE);
        let b = taint("b", None, NO_EXECUTE);
        let tolerations = [
            toleration(Some("a"), Some("Exists"), None, None, Some(30)),
            toleration(Some("b"), Some("Exists"), None, None, Some(3)),
            toleration(Some("c"), Some("Exists"), None, None, Some(1)),
        ];
        assert_eq!(
            stay(&[&a, &b], &tolerations),
            Stay::For(Duration::from_secs(3))
        );
        assert_eq!(
            stay(&[&a], &tolerations),
            Stay::For(Duration::from_secs(30))
        );
    }

    #[test]
    fn one_untolerated_taint_means_now_and_no_seconds_means_forever() {
        let a = taint("a", None, NO_EXECUTE);
        let b = taint("b", None, NO_EXECUTE);
        let forever = [toleration(Some("a"), Some("Exists"), None, None, None)];
        assert_eq!(stay(&[&a, &b], &forever), Stay::Untolerated);
        assert_eq!(stay(&[&a], &forever), Stay::Forever);
        assert_eq!(stay(&[&a], &[]), Stay::Untolerated);
        assert_eq!(stay(&[], &[]), Stay::Forever);
    }

    #[test]
    fn the_first_matching_toleration_is_used_and_negative_seconds_mean_now() {
        let a = taint("a", None, NO_EXECUTE);
        let first_forever = [
            toleration(Some("a"), Some("Exists"), None, None, None),
            toleration(None, Some("Exists"), None, None, Some(5)),
        ];
        assert_eq!(stay(&[&a], &first_forever), Stay::Forever);
        let negative = [toleration(Some("a"), Some("Exists"), None, None, Some(-1))];
        assert_eq!(stay(&[&a], &negative), Stay::For(Duration::ZERO));
    }
}
