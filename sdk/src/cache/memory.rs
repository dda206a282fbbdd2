//! An in-memory [`CacheBackend`] for unit tests of reconciles: objects put in by the test, answered the
//! way the coordinator's `Cache` service answers (same key rules, same indexes — the built-in ones and
//! the named ones a test declares as its controller does — same errors).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flotilla_apimachinery::{LabelSelector, ResourceKind, SelectorError, string_at};
use futures::future::BoxFuture;
use kube::Resource;
use parking_lot::RwLock;
use serde::Serialize;

use super::backend::CacheBackend;
use super::client::CacheError;
use super::query::CacheQuery;
use crate::kind::{KindScope, kind_of};
use crate::spec::ControllerSpec;

/// Why a [`MemoryCache`] refused a List (the source of [`CacheError::Request`]).
#[derive(Debug, thiserror::Error)]
pub enum MemoryCacheError {
    /// The query names an index the coordinator does not keep: neither a built-in one nor one declared
    /// for the kind ([`MemoryCache::with_index`]).
    #[error(
        "unknown index {0:?}: expected \"namespace\", \"owner-uid\", \"node-name\" or an index declared for the kind"
    )]
    UnknownIndex(String),
    /// The query's label selector does not parse.
    #[error("bad label selector")]
    BadSelector(#[source] SelectorError),
}

/// Objects a test put in, by kind (group, version, plural) and object key; cheap to clone, clones share
/// the objects, so a test may change them between reconciles.
///
/// ```
/// # use flotilla_sdk::{CacheQuery, Context, MemoryCache};
/// # use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut configmap = ConfigMap::default();
/// configmap.metadata.name = Some("a".into());
/// configmap.metadata.namespace = Some("ns".into());
/// let ctx = Context::for_test()
///     .cache(MemoryCache::default().with(&configmap))
///     .build();
/// let found: Vec<ConfigMap> = ctx.cache().list(&CacheQuery::all().namespace("ns")).await.unwrap();
/// assert_eq!(found.len(), 1);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryCache {
    objects: Arc<RwLock<BTreeMap<(Resource3, String), Stored>>>,
    /// (kind, index name) → the dotted path it indexes.
    indexes: Arc<RwLock<BTreeMap<(Resource3, String), String>>>,
}

/// A kind as the cache compares kinds: group, version and plural.
type Resource3 = (String, String, String);

struct Stored {
    json: Bytes,
    /// The object as JSON, for named indexes (`Null` when it did not serialize).
    value: serde_json::Value,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    controller_uid: Option<String>,
    node_name: Option<String>,
}

fn resource3(kind: &ResourceKind) -> Resource3 {
    (
        kind.group.clone(),
        kind.version.clone(),
        kind.plural.clone(),
    )
}

impl MemoryCache {
    /// The same cache answering the named index `name` of `T` (the `T`s by the string at
    /// `field_path`), as the coordinator does for a controller built with
    /// [`Controller::index`](crate::Controller::index)`::<T>(name, field_path)`.
    pub fn with_index<T>(self, name: &str, field_path: &str) -> Self
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        self.indexes.write().insert(
            (resource3(&kind_of::<T>()), name.to_owned()),
            field_path.to_owned(),
        );
        self
    }

    /// The same cache answering every named index `spec` declares (a controller's
    /// [`DynController::spec`](crate::DynController::spec)).
    pub fn with_indexes(self, spec: &ControllerSpec) -> Self {
        {
            let mut indexes = self.indexes.write();
            for index in &spec.indexes {
                indexes.insert(
                    (resource3(&index.kind), index.name.clone()),
                    index.field_path.clone(),
                );
            }
        }
        self
    }

    /// The same cache with `object` put in.
    pub fn with<T>(self, object: &T) -> Self
    where
        T: Resource<DynamicType = ()> + Serialize,
        T::Scope: KindScope,
    {
        self.insert(object);
        self
    }

    /// Puts `object` in (replacing the object of the same kind and key). An object that cannot be
    /// serialized is kept empty, so reading it fails with [`CacheError::Decode`] naming its kind.
    pub fn insert<T>(&self, object: &T)
    where
        T: Resource<DynamicType = ()> + Serialize,
        T::Scope: KindScope,
    {
        self.insert_as(&kind_of::<T>(), object);
    }

    /// Puts `object` in as an object of `kind` (for dynamic objects and kinds without a Rust type).
    pub fn insert_as<T: Resource + Serialize>(&self, kind: &ResourceKind, object: &T) {
        let meta = object.meta();
        let json = serde_json::to_vec(object).unwrap_or_default();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
        let node_name = if kind.group.is_empty() && kind.kind == "Pod" {
            string_at(&value, "spec.nodeName").map(str::to_owned)
        } else {
            None
        };
        let namespace = meta.namespace.clone().filter(|ns| !ns.is_empty());
        let key = kind.object_key(
            namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let stored = Stored {
            json: Bytes::from(json),
            value,
            namespace,
            labels: meta.labels.clone().unwrap_or_default(),
            controller_uid: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone()),
            node_name,
        };
        self.objects.write().insert((resource3(kind), key), stored);
    }

    /// Takes the object `namespace/name` of `T` out, as a delete the informer saw.
    pub fn remove<T>(&self, namespace: Option<&str>, name: &str)
    where
        T: Resource<DynamicType = ()>,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        let key = kind.object_key(namespace, name);
        self.objects.write().remove(&(resource3(&kind), key));
    }

    fn list_now(&self, kind: &ResourceKind, query: &CacheQuery) -> Result<Vec<Bytes>, CacheError> {
        let refuse = |e: MemoryCacheError| CacheError::Request(Box::new(e));
        let selector = LabelSelector::parse(query.label_filter().unwrap_or_default())
            .map_err(|e| refuse(MemoryCacheError::BadSelector(e)))?;
        let namespace = query.namespace_filter().filter(|ns| !ns.is_empty());
        let wanted = resource3(kind);
        // As the coordinator: no index (or the namespace index without a value) lists by the query's
        // namespace, which the filter below applies anyway.
        let index: Box<dyn Fn(&Stored) -> bool> = match query.index_filter() {
            None | Some(("namespace", "")) => Box::new(|_| true),
            Some(("namespace", v)) => Box::new(move |s| s.namespace.as_deref() == Some(v)),
            Some(("owner-uid", v)) => Box::new(move |s| s.controller_uid.as_deref() == Some(v)),
            Some(("node-name", v)) => Box::new(move |s| s.node_name.as_deref() == Some(v)),
            Some((name, v)) => {
                let path = self
                    .indexes
                    .read()
                    .get(&(wanted.clone(), name.to_owned()))
                    .cloned()
                    .ok_or_else(|| refuse(MemoryCacheError::UnknownIndex(name.to_owned())))?;
                Box::new(move |s| string_at(&s.value, &path) == Some(v))
            }
        };
        Ok(self
            .objects
            .read()
            .iter()
            .filter(|((resource, _), _)| *resource == wanted)
            .map(|(_, stored)| stored)
            .filter(|s| index(s))
            .filter(|s| namespace.is_none_or(|ns| s.namespace.as_deref() == Some(ns)))
            .filter(|s| selector.matches(&s.labels))
            .map(|s| s.json.clone())
            .collect())
    }
}

impl CacheBackend for MemoryCache {
    fn get<'a>(
        &'a self,
        kind: &'a ResourceKind,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Bytes>, CacheError>> {
        let key = (resource3(kind), kind.object_key(namespace, name));
        let found = self.objects.read().get(&key).map(|s| s.json.clone());
        Box::pin(std::future::ready(Ok(found)))
    }

    fn list<'a>(
        &'a self,
        kind: &'a ResourceKind,
        query: &'a CacheQuery,
    ) -> BoxFuture<'a, Result<Vec<Bytes>, CacheError>> {
        Box::pin(std::future::ready(self.list_now(kind, query)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;
    use crate::cache::CacheClient;

    fn pod(ns: &str, name: &str, app: &str, owner: &str, node: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some(ns.into());
        pod.metadata.labels = Some(BTreeMap::from([("app".into(), app.into())]));
        pod.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        });
        pod
    }

    fn client() -> CacheClient {
        let cache = MemoryCache::default()
            .with(&pod("a", "web-1", "web", "rs-web", "n1"))
            .with(&pod("a", "db-1", "db", "rs-db", "n2"))
            .with(&pod("b", "web-2", "web", "rs-web2", "n1"));
        CacheClient::new(Some(Arc::new(cache)))
    }

    async fn names(query: CacheQuery) -> Vec<String> {
        let pods: Vec<Pod> = client().list(&query).await.unwrap();
        pods.into_iter().filter_map(|p| p.metadata.name).collect()
    }

    #[tokio::test]
    async fn lists_narrow_by_index_namespace_and_labels_as_the_coordinator_does() {
        assert_eq!(
            names(CacheQuery::all().index("node-name", "n1")).await,
            ["web-1", "web-2"]
        );
        assert_eq!(
            names(CacheQuery::all().namespace("b").index("node-name", "n1")).await,
            ["web-2"]
        );
        assert_eq!(names(CacheQuery::all().owned_by("rs-db")).await, ["db-1"]);
        assert_eq!(
            names(CacheQuery::all().namespace("a").labels("app=web")).await,
            ["web-1"]
        );
        assert!(
            names(CacheQuery::all().index("namespace", "b").labels("app!=web"))
                .await
                .is_empty()
        );
    }

    #[tokio::test]
    async fn an_unknown_index_or_a_bad_selector_is_an_error_even_with_nothing_cached() {
        let empty = CacheClient::new(Some(Arc::new(MemoryCache::default())));
        let err = empty
            .list::<Pod>(&CacheQuery::all().index("color", "red"))
            .await
            .unwrap_err();
        assert!(matches!(err, CacheError::Request(_)));
        assert!(
            client()
                .list::<Pod>(&CacheQuery::all().labels("a in ("))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_declared_index_lists_by_the_string_at_its_path_and_only_for_its_kind() {
        use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};
        let claim = |ns: &str, name: &str, volume: Option<&str>| {
            let mut pvc = PersistentVolumeClaim::default();
            pvc.metadata.name = Some(name.into());
            pvc.metadata.namespace = Some(ns.into());
            pvc.spec = Some(PersistentVolumeClaimSpec {
                volume_name: volume.map(str::to_owned),
                ..Default::default()
            });
            pvc
        };
        let controller = crate::Controller::<Node>::new("volumes")
            .index::<PersistentVolumeClaim>("by-volume", "spec.volumeName");
        let cache = MemoryCache::default()
            .with_indexes(&controller.spec)
            .with(&claim("a", "data", Some("pv-1")))
            .with(&claim("b", "logs", Some("pv-1")))
            .with(&claim("b", "unbound", None));
        let client = CacheClient::new(Some(Arc::new(cache.clone())));
        let names = |claims: Vec<PersistentVolumeClaim>| -> Vec<String> {
            claims.into_iter().filter_map(|c| c.metadata.name).collect()
        };
        let by_volume = CacheQuery::all().index("by-volume", "pv-1");
        assert_eq!(
            names(client.list(&by_volume).await.unwrap()),
            ["data", "logs"]
        );
        assert_eq!(
            names(
                client
                    .list(&by_volume.clone().namespace("b"))
                    .await
                    .unwrap()
            ),
            ["logs"]
        );
        cache.insert(&claim("a", "data", Some("pv-2")));
        assert_eq!(names(client.list(&by_volume).await.unwrap()), ["logs"]);
        let err = client.list::<Pod>(&by_volume).await.unwrap_err();
        assert!(
            matches!(err, CacheError::Request(_)),
            "an index of another kind is unknown"
        );
        let declared_directly = MemoryCache::default()
            .with_index::<PersistentVolumeClaim>("by-volume", "spec.volumeName")
            .with(&claim("a", "data", Some("pv-1")));
        let client = CacheClient::new(Some(Arc::new(declared_directly)));
        assert_eq!(names(client.list(&by_volume).await.unwrap()), ["data"]);
    }

    #[tokio::test]
    async fn get_finds_by_key_and_ignores_the_namespace_of_cluster_scoped_kinds() {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        let cache = MemoryCache::default().with(&node);
        let client = CacheClient::new(Some(Arc::new(cache.clone())));
        let found: Option<Node> = client.get(Some("ignored"), "n1").await.unwrap();
        assert!(found.is_some());
        let other_kind: Option<ConfigMap> = client.get(None, "n1").await.unwrap();
        assert!(other_kind.is_none(), "kinds do not mix");
        cache.remove::<Node>(None, "n1");
        assert!(client.get::<Node>(None, "n1").await.unwrap().is_none());
    }
}
