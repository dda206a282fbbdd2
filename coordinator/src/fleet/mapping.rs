//! Which controller keys an informer event touches: the object itself for its controllers' primary kind,
//! its controller owner for owned kinds, and declared selector, field and fan-out mappings for the
//! rest. Selector mappings are answered from a [`SelectorIndex`] per (primary kind, selector path),
//! built on first use and kept current by [`Routes::observe`]; fan-out reads the primary kind's keys
//! from its store.
//!
//! Each key comes with the rule that produced it ([`Via`]), so the event's `enqueue` span can say why.
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

/// The rules that produced one (controller, key) of one event, a set with a fixed order: `self` (the
/// primary object itself), `owner`, `field`, `selector`, `fan-out`, `owner-graph`. An event may reach
/// a key through several rules (a pod owned by, and selected by, one ReplicaSet): the dispatcher
/// queues the key once and names them all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Via(u8);

impl Via {
    /// The primary object itself.
    pub const SELF: Self = Self(1);
    /// The object's controller ownerReference.
    pub const OWNER: Self = Self(1 << 1);
    /// A field of the object naming the primary.
    pub const FIELD: Self = Self(1 << 2);
    /// A primary's selector matching the object's labels.
    pub const SELECTOR: Self = Self(1 << 3);
    /// Every primary.
    pub const FAN_OUT: Self = Self(1 << 4);
    /// The ownerReference graph (the garbage collector's keys).
    pub const OWNER_GRAPH: Self = Self(1 << 5);

    const NAMES: [&'static str; 6] = [
        "self",
        "owner",
        "field",
        "selector",
        "fan-out",
        "owner-graph",
    ];

    /// The rule of a mapping.
    pub fn of(rule: &MappingRule) -> Self {
        match rule {
            MappingRule::Owner => Self::OWNER,
            MappingRule::Field { .. } => Self::FIELD,
            MappingRule::Selector { .. } => Self::SELECTOR,
            MappingRule::FanOut => Self::FAN_OUT,
        }
    }

    /// Both sets of rules.
    #[must_use]
    pub fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The `mapping` attribute: the rules' names joined with `,` in the fixed order.
    pub fn label(self) -> String {
        let mut out = String::new();
        for (bit, name) in Self::NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(name);
            }
        }
        out
    }
}

/// A (controller, key) an event queues, with the rule that produced it.
pub type RoutedKey = (String, String, Via);

/// Collapses one event's routed keys to one per (controller, key), in first-seen order, each with
/// every rule that produced it. Queueing these leaves the queue as queueing every repeat would have:
/// client-go's dirty set keeps one entry per key, with the first add's reason, so a repeat within one
/// event only ever coalesced. What changes is the trace: one `enqueue` per key, naming its rules.
pub fn distinct(keys: Vec<RoutedKey>) -> Vec<RoutedKey> {
    if keys.len() < 2 {
        return keys;
    }
    // An event routes to a handful of keys but for fan-out: a scan needs no hashing.
    if keys.len() <= 16 {
        let mut out: Vec<RoutedKey> = Vec::with_capacity(keys.len());
        for (controller, key, via) in keys {
            match out
                .iter_mut()
                .find(|(c, k, _)| *c == controller && *k == key)
            {
                Some(seen) => seen.2 = seen.2.with(via),
                None => out.push((controller, key, via)),
            }
        }
        return out;
    }
    // For each pair, the index of its first occurrence, and there the union of the rules.
    let mut first_of: std::collections::HashMap<(&str, &str), usize> =
        std::collections::HashMap::with_capacity(keys.len());
    let mut first = Vec::with_capacity(keys.len());
    let mut via: Vec<Via> = keys.iter().map(|(_, _, v)| *v).collect();
    for (i, (controller, key, v)) in keys.iter().enumerate() {
        let at = *first_of
            .entry((controller.as_str(), key.as_str()))
            .or_insert(i);
        if at != i {
            via[at] = via[at].with(*v);
        }
        first.push(at);
    }
    if first.iter().enumerate().all(|(i, &at)| i == at) {
        return keys;
    }
    keys.into_iter()
        .enumerate()
        .filter(|(i, _)| first[*i] == *i)
        .map(|(i, (controller, key, _))| (controller, key, via[i]))
        .collect()
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
                InformerEvent::Applied { new, .. } if *new.kind == *kind => index.apply(new),
                InformerEvent::Deleted { old, .. } if *old.kind == *kind => index.remove(old),
                _ => {}
            }
        }
    }

    /// The (controller, key) pairs an event on `object` enqueues, each with its rule; a pair may
    /// come more than once (through several rules, or from an update's old and new object).
    pub fn keys_for(
        &mut self,
        object: &CachedObject,
        informers: &Informers,
        out: &mut Vec<RoutedKey>,
    ) {
        let Some(routes) = self.by_kind.get(&object.kind) else {
            return;
        };
        for (controller, role) in routes {
            match role {
                Role::Primary => out.push((controller.clone(), object.key(), Via::SELF)),
                Role::Mapped { primary, rule } => {
                    let via = Via::of(rule);
                    map_related(
                        object,
                        primary,
                        rule,
                        informers,
                        &mut self.selectors,
                        |key| out.push((controller.clone(), key, via)),
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
            if let Some(owner) = object.controller_owner()
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
        let mut keys: Vec<String> = out.into_iter().map(|(_, key, _)| key).collect();
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
    async fn an_event_reaching_a_key_through_several_rules_queues_it_once_naming_every_rule() {
        let replicasets = ResourceKind::new("apps", "v1", "ReplicaSet", "replicasets", true);
        let pods = kind("Pod", "pods", true);
        let web = object(
            &replicasets,
            Some("a"),
            "web",
            json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}}),
        );
        let informers = informers(&[web]);
        let mut routes = Routes::default();
        routes.add(&spec(
            replicasets,
            vec![
                (pods.clone(), MappingRule::Owner),
                (
                    pods.clone(),
                    MappingRule::Selector {
                        selector_path: "spec.selector".into(),
                    },
                ),
            ],
        ));
        let pod = object(
            &pods,
            Some("a"),
            "web-1",
            json!({"metadata": {"labels": {"app": "web"}, "ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "web", "uid": "uid-web", "controller": true}]}}),
        );
        // An update: the old and the new pod both route, through both rules.
        let mut out = Vec::new();
        routes.keys_for(&pod, &informers, &mut out);
        routes.keys_for(&pod, &informers, &mut out);
        assert_eq!(out.len(), 4);
        let keys = distinct(out);
        assert_eq!(
            keys,
            [(
                "c".to_owned(),
                "a/web".to_owned(),
                Via::OWNER.with(Via::SELECTOR)
            )]
        );
        assert_eq!(keys[0].2.label(), "owner,selector");
    }

    #[test]
    fn distinct_keys_keep_their_first_order_and_rules_are_named_in_a_fixed_order() {
        let k = |c: &str, key: &str, via| (c.to_owned(), key.to_owned(), via);
        let keys = distinct(vec![
            k("a", "x", Via::SELECTOR),
            k("b", "x", Via::SELF),
            k("a", "y", Via::FIELD),
            k("a", "x", Via::OWNER),
            k("b", "x", Via::SELF),
        ]);
        assert_eq!(
            keys,
            [
                k("a", "x", Via::OWNER.with(Via::SELECTOR)),
                k("b", "x", Via::SELF),
                k("a", "y", Via::FIELD)
            ]
        );
        let all = [
            Via::OWNER_GRAPH,
            Via::FAN_OUT,
            Via::SELECTOR,
            Via::FIELD,
            Via::OWNER,
            Via::SELF,
        ]
        .into_iter()
        .fold(Via::default(), Via::with);
        assert_eq!(all.label(), "self,owner,field,selector,fan-out,owner-graph");
        assert_eq!(Via::FAN_OUT.label(), "fan-out");

        // Past the scan's size, the same answer.
        let mut many: Vec<RoutedKey> = (0..40)
            .map(|n| k("a", &format!("k{}", n % 20), Via::FAN_OUT))
            .collect();
        many.push(k("a", "k3", Via::SELF));
        let keys = distinct(many);
        assert_eq!(keys.len(), 20);
        assert_eq!(keys[0], k("a", "k0", Via::FAN_OUT));
        assert_eq!(keys[3], k("a", "k3", Via::SELF.with(Via::FAN_OUT)));
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
