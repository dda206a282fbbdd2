//! The rules of a fleet running a set of built-in controllers: its workers' and its coordinators'.

use crate::registry::Builtin;

use super::coordinator::coordinator_rules;
use super::rules::Rules;

/// The two ClusterRoles' rules of a fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetRules {
    /// What a worker running the controllers asks of the API: the union of each one's needs.
    pub worker: Rules,
    /// What a coordinator lists and watches for them.
    pub coordinator: Rules,
}

/// The rules of a fleet whose workers run `builtins` (as `--controllers` selected them).
pub fn fleet_rules<'a>(builtins: impl IntoIterator<Item = &'a Builtin>) -> FleetRules {
    let builtins: Vec<&Builtin> = builtins.into_iter().collect();
    let controllers: Vec<_> = builtins.iter().map(|b| b.controller()).collect();
    FleetRules {
        worker: builtins.iter().map(|b| b.worker_rules()).collect(),
        coordinator: coordinator_rules(controllers.iter().map(|c| c.spec())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::ALL;
    use super::*;
    use crate::{builtin, builtins};

    #[test]
    fn every_builtins_rules_are_the_union_of_each_ones() {
        let all = fleet_rules(builtins());
        let mut worker = Rules::new();
        let mut coordinator = Rules::new();
        for b in builtins() {
            let one = fleet_rules([b]);
            assert!(!one.worker.is_empty(), "{} needs nothing?", b.name);
            worker.extend(&one.worker);
            coordinator.extend(&one.coordinator);
        }
        assert_eq!(all.worker.policy_rules(), worker.policy_rules());
        assert_eq!(all.coordinator.policy_rules(), coordinator.policy_rules());
    }

    #[test]
    fn a_fleet_without_the_garbage_collector_watches_only_its_controllers_kinds() {
        let rules = fleet_rules([
            builtin("deployment").unwrap(),
            builtin("replicaset").unwrap(),
        ]);
        for (group, resource) in [
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("", "pods"),
            ("", "namespaces"),
        ] {
            assert!(
                rules.coordinator.allows(group, resource, "watch"),
                "{resource}"
            );
        }
        assert!(!rules.coordinator.allows("", "serviceaccounts", "watch"));
        assert!(!rules.coordinator.allows(ALL, ALL, "watch"));
        assert!(rules.worker.allows("", "pods", "create"));
        assert!(!rules.worker.allows("", "serviceaccounts", "create"));
    }

    #[test]
    fn the_garbage_collector_makes_the_coordinator_watch_everything() {
        let rules = fleet_rules([builtin("garbagecollector").unwrap()]);
        assert!(rules.coordinator.allows("example.com", "widgets", "list"));
        assert!(rules.coordinator.allows("example.com", "widgets", "watch"));
        assert!(!rules.coordinator.allows("example.com", "widgets", "get"));
    }
}
