//! An object as the cache holds it: parsed once when it arrives into the fields the cache indexes by,
//! and kept as the JSON every worker receives — once, not beside a parsed copy (a `serde_json::Value`
//! of an object takes several times its JSON's size). A field the indexes do not hold is read from the
//! JSON on demand.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_common::ResourceKind;
use kube::api::{DynamicObject, TypeMeta};
use serde_json::Value;

use super::{InformerError, Labels};

/// One ownerReference of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerRef {
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// `kind` of the owner.
    pub kind: String,
    /// Name of the owner (same namespace as the object).
    pub name: String,
    /// UID of the owner.
    pub uid: String,
    /// `controller: true`.
    pub controller: bool,
}

/// An object as cached. Immutable once built; shared as `Arc<CachedObject>`.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedObject {
    /// The kind of the object, shared with every other object of its informer.
    pub kind: Arc<ResourceKind>,
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` parsed as a number (an etcd revision in practice); 0 if it is
    /// not a number, which is logged.
    pub resource_version: u64,
    /// `metadata.labels`.
    pub labels: Labels,
    /// Every ownerReference, the controller's included.
    pub owners: Vec<OwnerRef>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `spec.nodeName` of a core Pod; `None` for other kinds and unbound pods.
    pub node_name: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Only the metadata was listed (a metadata-only informer, see `Informers::ensure_metadata`):
    /// the object has `apiVersion`, `kind` and `metadata`, no spec, status or data.
    pub partial: bool,
    /// The object without `metadata.managedFields`, with `apiVersion` and `kind` filled in (list
    /// items may lack them, and typed clients need them), serialized: what workers receive, as is.
    pub json: Bytes,
}

impl CachedObject {
    /// The ownerReference with `controller: true`, if any (the API server allows at most one).
    pub fn controller_owner(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// The object's key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        self.kind.object_key(self.namespace.as_deref(), &self.name)
    }

    /// The value at dotted `path` of the object (`spec.selector`), read from its JSON (only that
    /// field is built).
    pub fn field(&self, path: &str) -> Option<Value> {
        super::json_field::field(&self.json, path)
    }

    /// The non-empty string at dotted `path` of the object (`spec.volumeName`), if there is one.
    pub fn string_at(&self, path: &str) -> Option<String> {
        match self.field(path) {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// The whole object, parsed from its JSON: for tests and diagnostics, not for paths that run per
    /// event (use [`CachedObject::field`]).
    pub fn to_value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// [`CachedObject::from_dynamic`] of a JSON value (tests, and callers holding a value).
    ///
    /// # Errors
    /// [`InformerError::Decode`] when the value is not an object with valid metadata; otherwise as
    /// [`CachedObject::from_dynamic`].
    pub fn from_value(kind: &ResourceKind, value: Value) -> Result<Self, InformerError> {
        let object = serde_json::from_value(value).map_err(|e| InformerError::Decode {
            kind: kind.to_string(),
            message: e.to_string(),
        })?;
        Self::from_dynamic(&Arc::new(kind.clone()), object)
    }

    /// Takes an object of `kind` as a watcher decoded it: reads the indexed fields from its typed
    /// metadata, strips `metadata.managedFields`, fills in `apiVersion` and `kind`, and serializes it
    /// once — no `serde_json::Value` of the whole object is built.
    ///
    /// # Errors
    /// [`InformerError`] when `metadata.name` or `metadata.uid` is missing, an owner reference lacks
    /// a field, or a pod's `spec.nodeName` is not a string.
    pub fn from_dynamic(
        kind: &Arc<ResourceKind>,
        mut object: DynamicObject,
    ) -> Result<Self, InformerError> {
        let bad = |field, expected| InformerError::BadField {
            kind: kind.to_string(),
            field,
            expected,
        };
        object.metadata.managed_fields = None;
        let types = object.types.get_or_insert_with(TypeMeta::default);
        if types.api_version.is_empty() {
            types.api_version = kind.api_version();
        }
        if types.kind.is_empty() {
            types.kind = kind.kind.clone();
        }
        let meta = &object.metadata;
        let name = meta
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("metadata.name", "a non-empty string"))?;
        let uid = meta
            .uid
            .clone()
            .ok_or_else(|| bad("metadata.uid", "a string"))?;
        let namespace = meta.namespace.clone().filter(|ns| !ns.is_empty());
        let resource_version = match &meta.resource_version {
            Some(rv) => rv.parse().unwrap_or_else(|_| {
                tracing::warn!(%kind, %name, resource_version = %rv, "resourceVersion is not a number; caching it as 0");
                0
            }),
            None => 0,
        };
        let labels = Labels::from(meta.labels.clone().unwrap_or_default());
        let owners: Vec<OwnerRef> = meta
            .owner_references
            .iter()
            .flatten()
            .map(|o| OwnerRef {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller == Some(true),
            })
            .collect();
        // The API server validates references; a cache fed something else refuses the object rather
        // than index owners by an empty uid.
        if owners.iter().any(|o| {
            o.api_version.is_empty() || o.kind.is_empty() || o.name.is_empty() || o.uid.is_empty()
        }) {
            return Err(bad(
                "metadata.ownerReferences",
                "a list of owner references with apiVersion, kind, name and uid",
            ));
        }
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let deleting = meta.deletion_timestamp.is_some();
        let node_name = if kind.group.is_empty() && kind.kind == "Pod" {
            match object.data.get("spec").and_then(|s| s.get("nodeName")) {
                None | Some(Value::Null) => None,
                Some(Value::String(n)) => Some(n.clone()).filter(|n| !n.is_empty()),
                Some(_) => return Err(bad("spec.nodeName", "a string")),
            }
        } else {
            None
        };
        let json = serde_json::to_vec(&object).map_err(|e| InformerError::Serialize {
            kind: kind.to_string(),
            message: e.to_string(),
        })?;
        Ok(Self {
            kind: kind.clone(),
            namespace,
            name,
            uid,
            resource_version,
            labels,
            owners,
            finalizers,
            node_name,
            deleting,
            partial: false,
            // Exactly the JSON's length: the serializer's buffer grew by doubling, and a `Bytes` of
            // the `Vec` would keep its spare capacity (up to as much again) for the object's life.
            json: Bytes::from(json.into_boxed_slice()),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pods() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    #[test]
    fn managed_fields_are_stripped_before_caching() {
        let obj = CachedObject::from_value(
            &pods(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            }}),
        )
        .unwrap();
        assert!(obj.to_value()["metadata"].get("managedFields").is_none());
        assert_eq!(obj.field("metadata.uid"), Some(Value::from("u1")));
        assert!(!String::from_utf8_lossy(&obj.json).contains("managedFields"));
    }

    #[test]
    fn the_indexed_fields_are_parsed_once() {
        let obj = CachedObject::from_value(
            &pods(),
            json!({"metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": {"app": "web"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "ux"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs", "controller": true},
                ],
            }, "spec": {"nodeName": "node-1"}}),
        )
        .unwrap();
        assert_eq!(obj.key(), "ns/p");
        assert_eq!(obj.resource_version, 42);
        assert_eq!(obj.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(obj.controller_owner().map(|o| o.uid.as_str()), Some("u-rs"));
        let owner_uids: Vec<&str> = obj.owners.iter().map(|o| o.uid.as_str()).collect();
        assert_eq!(owner_uids, ["ux", "u-rs"]);
        assert_eq!(obj.node_name.as_deref(), Some("node-1"));
        assert!(obj.deleting);
        assert_eq!(
            obj.to_value()["apiVersion"],
            "v1",
            "list items lack apiVersion; the cache fills it in"
        );
        assert_eq!(obj.string_at("kind").as_deref(), Some("Pod"));
    }

    #[test]
    fn an_unparseable_resource_version_is_cached_as_zero() {
        let obj = CachedObject::from_value(
            &pods(),
            json!({"metadata": {"name": "p", "uid": "u", "resourceVersion": "abc"}}),
        )
        .unwrap();
        assert_eq!(obj.resource_version, 0);
    }

    #[test]
    fn cluster_scoped_objects_are_keyed_by_name() {
        let nodes = ResourceKind::new("", "v1", "Node", "nodes", false);
        let obj = CachedObject::from_value(
            &nodes,
            json!({"metadata": {"name": "n1", "uid": "u", "namespace": ""}}),
        )
        .unwrap();
        assert_eq!(obj.key(), "n1");
        assert_eq!(obj.namespace, None);
    }

    #[test]
    fn garbled_objects_are_errors_not_panics() {
        let cases = [
            json!("a string"),
            json!({"metadata": 5}),
            json!({"metadata": {"uid": "u"}}),
            json!({"metadata": {"name": "", "uid": "u"}}),
            json!({"metadata": {"name": "p"}}),
            json!({"metadata": {"name": 7, "uid": "u"}}),
            json!({"metadata": {"name": "p", "uid": "u", "labels": {"a": 1}}}),
            json!({"metadata": {"name": "p", "uid": "u", "ownerReferences": {"a": 1}}}),
            json!({"metadata": {"name": "p", "uid": "u", "ownerReferences": [{"controller": true, "name": "x"}]}}),
            json!({"metadata": {"name": "p", "uid": "u"}, "spec": {"nodeName": ["n"]}}),
            json!({"metadata": {"name": "p", "uid": "u", "finalizers": "orphan"}}),
        ];
        for case in cases {
            assert!(
                CachedObject::from_value(&pods(), case.clone()).is_err(),
                "{case} should be rejected"
            );
        }
    }
}
