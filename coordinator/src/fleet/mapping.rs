//! Which controller keys an informer event touches: the object itself for its controllers' primary kind,
//! its controller owner for owned kinds, and declared selector, field and fan-out mappings for the
//! rest. Selector mappings are answered from a [`SelectorIndex`] per (primary kind, selector path),
//! built on first use and kept current by [`Routes::observe`]; fan-out reads the primary kind's keys
//! from its store.
//!
//! Keys follow the primary's scope: `namespace/name` for a namespaced primary, `name` for a
//! cluster-scoped one whatever the related object's scope. A rule that would name a namespaced primary
//! without a namespace (a cluster-scoped object owned by, or naming by field, a namespaced primary
//! with no namespace path) names nothing.

use std::collections::BTreeMap;

use flotilla_common::ResourceKind;

use super::messages::{ControllerSpec, MappingRule, Primary};
use super::selector_index::SelectorIndex;
use crate::informer::{CachedObject, InformerEvent, Informers};

/// For one kind, what each interested controller does with its events.
#[derive(Debug, Default)]
pub struct Routes {
    /// kind → (controller, role).
    by_kind: BTreeMap<ResourceKind, Vec<(String, Role)>>,
    /// (primary kind, selector path) → the primaries' selectors, once a lookup needed them.
    selectors: BTreeMap<(ResourceKind, String), SelectorIndex>,
}

#[derive(Debug, Clone)]
enum Role {
    Primary,
    Mapped {
        primary: ResourceKind,
        rule: MappingRule,
    },
}

impl Routes {
    /// Adds the routes of a newly registered controller of one primary kind; an owner-graph
    /// controller is routed by `super::OwnerGraph` instead.
    pub fn add(&mut self, spec: &ControllerSpec) {
        let Primary::Kind(primary) = &spec.primary else {
            return;
        };
        self.by_kind
            .entry(primary.clone())
            .or_default()
            .push((spec.name.clone(), Role::Primary));
        for m in &spec.mappings {
            self.by_kind.entry(m.kind.clone()).or_default().push((
                spec.name.clone(),
                Role::Mapped {
                    primary: primary.clone(),
                    rule: m.rule.clone(),
                },
            ));
        }
    }

    /// Removes every route of `controller` (it was retired), and the selector indexes no route uses
    /// any more.
    pub fn remove(&mut self, controller: &str) {
        for routes in self.by_kind.values_mut() {
            routes.retain(|(c, _)| c != controller);
        }
        self.by_kind.retain(|_, routes| !routes.is_empty());
        let used: Vec<(ResourceKind, String)> = self
            .by_kind
            .values()
            .flatten()
            .filter_map(|(_, role)| match role {
                Role::Mapped {
                    primary,
                    rule:
                        MappingRule::Selector {
                            selector_path: path,
                        },
                } => Some((primary.clone(), path.clone())),
                _ => None,
            })
            .collect();
        self.selectors.retain(|slot, _| used.contains(slot));
    }

    /// Keeps the selector indexes current with an informer event; call it for every event, before
    /// [`Routes::keys_for`].
    pub fn observe(&mut self, event: &InformerEvent) {
        for ((kind, _), index) in &mut self.selectors {
            match event {
                InformerEvent::Applied { new, .. } if &new.kind == kind => index.apply(new),
                InformerEvent::Deleted { old, .. } if &old.kind == kind => index.remove(old),
                _ => {}
            }
        }
    }

    /// The (controller, key) pairs an event on `object` enqueues.
    pub fn keys_for(
        &mut self,
        object: &CachedObject,
        informers: &Informers,
        out: &mut Vec<(String, String)>,
    ) {
        let Some(routes) = self.by_kind.get(&object.kind) else {
            return;
        };
        for (controller, role) in routes {
            match role {
                Role::Primary => out.push((controller.clone(), object.key())),
                Role::Mapped { primary, rule } => {
                    map_related(
                        object,
                        primary,
                        rule,
                        informers,
                        &mut self.selectors,
                        |key| out.push((controller.clone(), key)),
                    );
                }
            }
        }
    }
}

fn map_related(
    object: &CachedObject,
    primary: &ResourceKind,
    rule: &MappingRule,
    informers: &Informers,
    selectors: &mut BTreeMap<(ResourceKind, String), SelectorIndex>,
    mut emit: impl FnMut(String),
) {
    let ns = object.namespace.as_deref();
    // A namespaced primary's key needs a namespace.
    let names_primary = |namespace: Option<&str>| !primary.namespaced || namespace.is_some();
    match rule {
        MappingRule::Owner => {
            if let Some(owner) = &object.controller_owner
                && owner.kind == primary.kind
                && owner.api_version == primary.api_version()
                && names_primary(ns)
            {
                emit(primary.object_key(ns, &owner.name));
            }
        }
        MappingRule::Field {
            field_path: name_path,
            namespace_path,
        } => {
            let Some(name) = object.string_at(name_path) else {
                return;
            };
            let named_namespace = namespace_path.as_ref().map(|path| object.string_at(path));
            let namespace = match &named_namespace {
                Some(named) => named.as_deref(),
                None => ns,
            };
            if names_primary(namespace) {
                emit(primary.object_key(namespace, &name));
            }
        }
        MappingRule::FanOut => {
            if let Some(store) = informers.store(primary) {
                store.keys().into_iter().for_each(emit);
            }
        }
        MappingRule::Selector {
            selector_path: path,
        } => {
            let slot = (primary.clone(), path.clone());
            if !selectors.contains_key(&slot) {
                let Some(store) = informers.store(primary) else {
                    return;
                };
                let primaries = store.list();
                let index = SelectorIndex::build(path, primaries.iter().map(AsRef::as_ref));
                selectors.insert(slot.clone(), index);
            }
            let Some(index) = selectors.get(&slot) else {
                return;
            };
            let scope = ns.filter(|_| primary.namespaced);
            index.matching(scope, &object.labels, |key| emit(key.to_owned()));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::fleet::messages::Mapping;

    fn kind(kind: &str, plural: &str, namespaced: bool) -> ResourceKind {
        ResourceKind::new("", "v1", kind, plural, namespaced)
    }

    fn nodes() -> ResourceKind {
        kind("Node", "nodes", false)
    }

    fn pvs() -> ResourceKind {
        kind("PersistentVolume", "persistentvolumes", false)
    }

    fn pvcs() -> ResourceKind {
        kind("PersistentVolumeClaim", "persistentvolumeclaims", true)
    }

    fn object(kind: &ResourceKind, ns: Option<&str>, name: &str, rest: Value) -> Arc<CachedObject> {
        let mut value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
            "resourceVersion": "1"}});
        if let (Some(value), Value::Object(rest)) = (value.as_object_mut(), rest) {
            for (k, v) in rest {
                if k == "metadata" {
                    if let (Some(meta), Value::Object(extra)) =
                        (value["metadata"].as_object_mut(), v)
                    {
                        meta.extend(extra);
                    }
                } else {
                    value.insert(k, v);
                }
            }
        }
        Arc::new(CachedObject::from_value(kind, value).unwrap())
    }

    fn spec(primary: ResourceKind, mappings: Vec<(ResourceKind, MappingRule)>) -> ControllerSpec {
        ControllerSpec {
            name: "c".into(),
            primary: Primary::Kind(primary),
            mappings: mappings
                .into_iter()
                .map(|(kind, rule)| Mapping { kind, rule })
                .collect(),
            prefetch_owned: vec![],
            watches: vec![],
            resync: None,
            rate_limiter: Default::default(),
            indexes: vec![],
        }
    }

    fn field(name_path: &str, namespace_path: Option<&str>) -> MappingRule {
        MappingRule::Field {
            field_path: name_path.into(),
            namespace_path: namespace_path.map(str::to_owned),
        }
    }

    /// Informers whose stores hold `objects` (never synced: the server is unreachable).
    fn informers(objects: &[Arc<CachedObject>]) -> Informers {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let informers = Informers::new(
            kube::Client::try_from(config).unwrap(),
            &mut Default::default(),
        );
        for o in objects {
            informers.ensure(&o.kind);
            informers.store(&o.kind).unwrap().apply(o.clone());
        }
        informers
    }

    fn keys(routes: &mut Routes, informers: &Informers, object: &CachedObject) -> Vec<String> {
        let mut out = Vec::new();
        routes.keys_for(object, informers, &mut out);
        let mut keys: Vec<String> = out.into_iter().map(|(_, key)| key).collect();
        keys.sort();
        keys
    }

    #[tokio::test]
    async fn the_owner_rule_keys_a_cluster_scoped_primary_by_name_whatever_the_dependents_scope() {
        let clusters = ResourceKind::new("example.dev", "v1", "Cluster", "clusters", false);
        let owned = |kind: &ResourceKind, ns: Option<&str>| {
            let owner = json!([{"apiVersion": "example.dev/v1", "kind": "Cluster", "name": "prod",
                "uid": "u-prod", "controller": true}]);
            object(
                kind,
                ns,
                "child",
                json!({"metadata": {"ownerReferences": owner}}),
            )
        };
        let configmaps = kind("ConfigMap", "configmaps", true);
        let roles = ResourceKind::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
        );
        let mut routes = Routes::default();
        routes.add(&spec(
            clusters,
            vec![
                (configmaps.clone(), MappingRule::Owner),
                (roles.clone(), MappingRule::Owner),
            ],
        ));
        let informers = informers(&[]);
        assert_eq!(
            keys(&mut routes, &informers, &owned(&configmaps, Some("a"))),
            ["prod"]
        );
        assert_eq!(
            keys(&mut routes, &informers, &owned(&roles, None)),
            ["prod"]
        );
    }

    #[tokio::test]
    async fn the_owner_rule_names_no_namespaced_primary_for_a_cluster_scoped_object() {
        let replicasets = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let owned = |ns: Option<&str>| {
            let owner = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "u-rs", "controller": true}]);
            object(
                &nodes(),
                ns,
                "n1",
                json!({"metadata": {"ownerReferences": owner}}),
            )
        };
        let mut routes = Routes::default();
        routes.add(&spec(replicasets, vec![(nodes(), MappingRule::Owner)]));
        let informers = informers(&[]);
        assert!(keys(&mut routes, &informers, &owned(None)).is_empty());
    }

    #[tokio::test]
    async fn field_rules_reach_across_kinds_and_scopes() {
        let pods = kind("Pod", "pods", true);
        let leases = ResourceKind::new("coordination.k8s.io", "v1", "Lease", "leases", true);
        let informers = informers(&[]);

        // PVC spec.volumeName → PV (namespaced → cluster-scoped).
        let mut routes = Routes::default();
        routes.add(&spec(pvs(), vec![(pvcs(), field("spec.volumeName", None))]));
        let claim = object(
            &pvcs(),
            Some("a"),
            "data",
            json!({"spec": {"volumeName": "pv-1"}}),
        );
        assert_eq!(keys(&mut routes, &informers, &claim), ["pv-1"]);
        let unbound = object(&pvcs(), Some("a"), "pending", json!({"spec": {}}));
        assert!(keys(&mut routes, &informers, &unbound).is_empty());

        // PV spec.claimRef → PVC (cluster-scoped → namespaced, the namespace from the object).
        let mut routes = Routes::default();
        routes.add(&spec(
            pvcs(),
            vec![(
                pvs(),
                field("spec.claimRef.name", Some("spec.claimRef.namespace")),
            )],
        ));
        let bound = object(
            &pvs(),
            None,
            "pv-1",
            json!({"spec": {"claimRef": {"namespace": "a", "name": "data"}}}),
        );
        assert_eq!(keys(&mut routes, &informers, &bound), ["a/data"]);
        let released = object(
            &pvs(),
            None,
            "pv-2",
            json!({"spec": {"claimRef": {"name": "data"}}}),
        );
        assert!(
            keys(&mut routes, &informers, &released).is_empty(),
            "no namespace, no key"
        );

        // A cluster-scoped object naming a namespaced primary without a namespace path: nothing.
        let mut routes = Routes::default();
        routes.add(&spec(
            pvcs(),
            vec![(pvs(), field("spec.claimRef.name", None))],
        ));
        assert!(keys(&mut routes, &informers, &bound).is_empty());

        // Lease in kube-node-lease metadata.name → Node; Pod spec.nodeName → Node.
        let mut routes = Routes::default();
        routes.add(&spec(
            nodes(),
            vec![
                (leases.clone(), field("metadata.name", None)),
                (pods.clone(), field("spec.nodeName", None)),
            ],
        ));
        let lease = object(&leases, Some("kube-node-lease"), "n1", json!({}));
        assert_eq!(keys(&mut routes, &informers, &lease), ["n1"]);
        let pod = object(&pods, Some("a"), "p", json!({"spec": {"nodeName": "n2"}}));
        assert_eq!(keys(&mut routes, &informers, &pod), ["n2"]);

        // Same namespace by default for a namespaced primary.
        let mut routes = Routes::default();
        routes.add(&spec(
            pvcs(),
            vec![(pods.clone(), field("metadata.labels.claim", None))],
        ));
        let pod = object(
            &pods,
            Some("b"),
            "p",
            json!({"metadata": {"labels": {"claim": "logs"}}}),
        );
        assert_eq!(keys(&mut routes, &informers, &pod), ["b/logs"]);
    }

    #[tokio::test]
    async fn fan_out_enqueues_every_primary_of_every_namespace() {
        let daemonsets = ResourceKind::new("apps", "v1", "DaemonSet", "daemonsets", true);
        let informers = informers(&[
            object(&daemonsets, Some("a"), "logs", json!({})),
            object(&daemonsets, Some("b"), "metrics", json!({})),
            object(&daemonsets, Some("a"), "dns", json!({})),
        ]);
        let mut routes = Routes::default();
        routes.add(&spec(daemonsets, vec![(nodes(), MappingRule::FanOut)]));
        let node = object(&nodes(), None, "n1", json!({}));
        assert_eq!(
            keys(&mut routes, &informers, &node),
            ["a/dns", "a/logs", "b/metrics"]
        );
    }

    #[tokio::test]
    async fn a_selector_mapping_is_answered_from_its_index_kept_by_events_not_from_a_scan() {
        let services = kind("Service", "services", true);
        let pods = kind("Pod", "pods", true);
        let web = object(
            &services,
            Some("a"),
            "web",
            json!({"spec": {"selector": {"app": "web"}}}),
        );
        let informers = informers(&[web]);
        let mut routes = Routes::default();
        routes.add(&spec(
            services.clone(),
            vec![(
                pods.clone(),
                MappingRule::Selector {
                    selector_path: "spec.selector".into(),
                },
            )],
        ));
        let pod = object(
            &pods,
            Some("a"),
            "p",
            json!({"metadata": {"labels": {"app": "web"}}}),
        );
        assert_eq!(keys(&mut routes, &informers, &pod), ["a/web"]);
        // A primary the index learns of from its event alone (the store never sees it): a lookup that
        // scanned the store would miss it.
        let api = object(
            &services,
            Some("a"),
            "api",
            json!({"spec": {"selector": {"app": "web"}}}),
        );
        routes.observe(&InformerEvent::Applied {
            old: None,
            new: api,
        });
        assert_eq!(keys(&mut routes, &informers, &pod), ["a/api", "a/web"]);
    }
}
