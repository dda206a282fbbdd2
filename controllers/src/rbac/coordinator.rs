//! What a coordinator lists and watches for a set of controllers, as RBAC grants: the rules of its
//! ClusterRole, derived from the controllers' specs (the kinds the leader keeps informers for), so
//! they follow every change of a spec without a second list to keep in step.

use flotilla_sdk::host::ControllerSpec;

use super::rules::{ALL, Rules};

/// The rules of a coordinator whose fleet runs controllers with `specs`: `list` and `watch` of every
/// kind a spec names (primary, mapped, prefetched, read, indexed), of every resource for an
/// owner-graph controller (the garbage collector: the leader discovers and watches every deletable
/// resource, custom resources included), and of Namespaces, which `--namespaces` and
/// `--namespace-selector` watch whatever the controllers. Informers never `get` and the coordinator
/// writes nothing to the API.
pub fn coordinator_rules<'a>(specs: impl IntoIterator<Item = &'a ControllerSpec>) -> Rules {
    const INFORMER: &[&str] = &["list", "watch"];
    let mut rules = Rules::new().grant("", &["namespaces"], INFORMER);
    for spec in specs {
        if spec.owner_graph() {
            rules = rules.grant(ALL, &[ALL], INFORMER);
        }
        for kind in spec.kinds() {
            rules = rules.grant(&kind.group, &[kind.plural.as_str()], INFORMER);
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use flotilla_sdk::k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use flotilla_sdk::kube::api::DynamicObject;
    use flotilla_sdk::{Action, Context, Controller, DynController, Request};

    use super::*;

    async fn noop<K>(_: Request<K>, _: Context) -> Result<Action, std::io::Error> {
        Ok(Action::await_change())
    }

    #[test]
    fn every_kind_a_spec_names_is_listed_and_watched_and_nothing_else() {
        let controller: DynController = Controller::<Deployment>::new("d")
            .owns::<ReplicaSet>()
            .reads::<Pod>()
            .reconcile(noop)
            .into();
        let rules = coordinator_rules([controller.spec()]);
        for (group, resource) in [
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("", "pods"),
            ("", "namespaces"),
        ] {
            assert!(rules.allows(group, resource, "list"), "{resource}");
            assert!(rules.allows(group, resource, "watch"), "{resource}");
            assert!(!rules.allows(group, resource, "get"), "{resource}");
        }
        assert!(!rules.allows("", "configmaps", "list"));
        assert!(!rules.allows("", "pods", "create"));
    }

    #[test]
    fn an_owner_graph_controller_makes_the_coordinator_watch_every_resource() {
        let gc: DynController = Controller::<DynamicObject>::owner_graph("gc")
            .reconcile(noop)
            .into();
        let other: DynController = Controller::<ConfigMap>::new("c").reconcile(noop).into();
        let rules = coordinator_rules([gc.spec(), other.spec()]);
        assert!(rules.allows("example.com", "widgets", "watch"));
        assert_eq!(rules.policy_rules().len(), 1, "{:?}", rules.policy_rules());
    }
}
