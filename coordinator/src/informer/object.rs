//! An object as the cache holds it: parsed once when it arrives, serialized once for every worker.

use std::collections::BTreeMap;

use bytes::Bytes;
use flotilla_common::ResourceKind;
use serde_json::Value;

use super::InformerError;

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
    /// The kind of the object.
    pub kind: ResourceKind,
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
    pub labels: BTreeMap<String, String>,
    /// The ownerReference with `controller: true`, if any.
    pub controller_owner: Option<OwnerRef>,
    /// Every ownerReference, the controller's included.
    pub owners: Vec<OwnerRef>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `spec.nodeName` of a core Pod; `None` for other kinds and unbound pods.
    pub node_name: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The object without `metadata.managedFields`, with `apiVersion` and `kind` filled in (list
    /// items may lack them, and typed clients need them).
    pub value: Value,
    /// `value` serialized: what workers receive, as is.
    pub json: Bytes,
}

impl CachedObject {
    /// The object's key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        self.kind.object_key(self.namespace.as_deref(), &self.name)
    }

    /// The non-empty string at dotted `path` of the object (`spec.volumeName`), if there is one.
    pub fn string_at(&self, path: &str) -> Option<&str> {
        flotilla_common::string_at(&self.value, path)
    }

    /// Parses an object of `kind` as the API server sent it, strips `metadata.managedFields` and
    /// serializes the result once.
    ///
    /// # Errors
    /// [`InformerError`] when the value is not an object, or `metadata.name`/`metadata.uid` is
    /// missing, or labels, ownerReferences or `spec.nodeName` have the wrong JSON types.
    pub fn from_value(kind: &ResourceKind, mut value: Value) -> Result<Self, InformerError> {
        let bad = |field, expected| InformerError::BadField {
            kind: kind.to_string(),
            field,
            expected,
        };
        let object = value
            .as_object_mut()
            .ok_or_else(|| InformerError::NotAnObject {
                kind: kind.to_string(),
            })?;
        if !object.get("apiVersion").is_some_and(Value::is_string) {
            object.insert("apiVersion".into(), Value::String(kind.api_version()));
        }
        if !object.get("kind").is_some_and(Value::is_string) {
            object.insert("kind".into(), Value::String(kind.kind.clone()));
        }
        let metadata = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| bad("metadata", "an object"))?;
        metadata.remove("managedFields");

        let string =
            |field: &'static str, v: Option<&Value>| -> Result<Option<String>, InformerError> {
                match v {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(bad(field, "a string")),
                }
            };
        let name = string("metadata.name", metadata.get("name"))?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("metadata.name", "a non-empty string"))?;
        let uid = string("metadata.uid", metadata.get("uid"))?
            .ok_or_else(|| bad("metadata.uid", "a string"))?;
        let namespace =
            string("metadata.namespace", metadata.get("namespace"))?.filter(|ns| !ns.is_empty());
        let resource_version = match string("metadata.resourceVersion", metadata.get("resourceVersion"))? {
            Some(rv) => rv.parse().unwrap_or_else(|_| {
                tracing::warn!(%kind, %name, resource_version = %rv, "resourceVersion is not a number; caching it as 0");
                0
            }),
            None => 0,
        };
        let labels = match metadata.get("labels") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(labels) => serde_json::from_value(labels.clone())
                .map_err(|_| bad("metadata.labels", "an object of strings"))?,
        };
        let owners = owner_refs(metadata.get("ownerReferences"))
            .ok_or_else(|| bad("metadata.ownerReferences", "a list of owner references"))?;
        let controller_owner = owners.iter().find(|o| o.controller).cloned();
        let finalizers = match metadata.get("finalizers") {
            None | Some(Value::Null) => Vec::new(),
            Some(finalizers) => serde_json::from_value(finalizers.clone())
                .map_err(|_| bad("metadata.finalizers", "a list of strings"))?,
        };
        let deleting = !metadata.get("deletionTimestamp").is_none_or(Value::is_null);
        let node_name = if kind.group.is_empty() && kind.kind == "Pod" {
            string(
                "spec.nodeName",
                object.get("spec").and_then(|s| s.get("nodeName")),
            )?
            .filter(|n| !n.is_empty())
        } else {
            None
        };
        let json = serde_json::to_vec(&value).map_err(|e| InformerError::Serialize {
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
            controller_owner,
            owners,
            finalizers,
            node_name,
            deleting,
            value,
            json: Bytes::from(json),
        })
    }
}

/// The `ownerReferences`; `None` when malformed (not a list, or an entry lacking a string apiVersion,
/// kind, name or uid).
fn owner_refs(refs: Option<&Value>) -> Option<Vec<OwnerRef>> {
    let refs = match refs {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Array(refs)) => refs,
        Some(_) => return None,
    };
    refs.iter()
        .map(|r| {
            let field = |name: &str| r.get(name).and_then(Value::as_str).map(str::to_owned);
            Some(OwnerRef {
                api_version: field("apiVersion")?,
                kind: field("kind")?,
                name: field("name")?,
                uid: field("uid")?,
                controller: r.get("controller").and_then(Value::as_bool) == Some(true),
            })
        })
        .collect()
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
        assert!(obj.value["metadata"].get("managedFields").is_none());
        let reparsed: Value = serde_json::from_slice(&obj.json).unwrap();
        assert_eq!(reparsed, obj.value);
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
        assert_eq!(
            obj.controller_owner.as_ref().map(|o| o.uid.as_str()),
            Some("u-rs")
        );
        let owner_uids: Vec<&str> = obj.owners.iter().map(|o| o.uid.as_str()).collect();
        assert_eq!(owner_uids, ["ux", "u-rs"]);
        assert_eq!(obj.node_name.as_deref(), Some("node-1"));
        assert!(obj.deleting);
        assert_eq!(
            obj.value["apiVersion"], "v1",
            "list items lack apiVersion; the cache fills it in"
        );
        assert_eq!(obj.value["kind"], "Pod");
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
