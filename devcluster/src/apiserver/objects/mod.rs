//! The generic verbs over the one storage path — create, get, list, update (main / status /
//! finalize), patch, delete, deletecollection and the scale and binding subresources. Every kind
//! goes through here; kind-specific behaviour comes from registry data ([`ResourceInfo`]).
//!
//! One file per verb: `decode` (request bodies), `create`, `get_list`, `update` (the shared
//! read-check-write pipeline every write but create and delete goes through), `patch`, `delete`,
//! `subresources` (`/scale`, `/binding`). This file holds the request type and the helpers they share.

use std::sync::Arc;

use serde_json::{Value, json};

use super::auth::UserInfo;
use super::crd;
use super::meta;
use super::query::Query;
use super::registry::{Generation, ResourceInfo};
use super::state::ApiState;
use super::status::{ApiError, Cause};
use super::storage::StorageError;
use super::validation;

mod create;
mod decode;
mod delete;
mod get_list;
mod patch;
mod subresources;
mod update;

pub use create::create;
pub use decode::decode_body;
pub use delete::{DeleteOptions, delete, delete_collection};
pub use get_list::{get, list, parse_rv, selectors};
pub use patch::{PatchKind, patch};
pub use subresources::{bind, to_scale, update_scale};
pub use update::{guaranteed_update, update};

/// How many times a write re-reads the object after losing a compare-and-swap race before it
/// answers 409 (a client that keeps losing should back off, as upstream's retry loop makes it).
const MAX_ATTEMPTS: usize = 16;

/// One resolved request against a resource.
pub struct Target {
    /// The resource.
    pub info: Arc<ResourceInfo>,
    /// Namespace from the URL.
    pub namespace: Option<String>,
    /// Object name from the URL.
    pub name: Option<String>,
    /// Query parameters.
    pub query: Query,
    /// Field manager for writes.
    pub manager: String,
    /// Warnings for the response (`Warning: 299 - "..."` headers).
    pub warnings: parking_lot::Mutex<Vec<String>>,
    /// Who asked, when an HTTP request did (None for devcluster's own writes, which, like
    /// upstream's loopback client, may write any RBAC object).
    pub user: Option<UserInfo>,
}

impl Target {
    /// A target with no warnings yet.
    pub fn new(
        info: Arc<ResourceInfo>,
        namespace: Option<String>,
        name: Option<String>,
        query: Query,
        manager: String,
    ) -> Self {
        Target {
            info,
            namespace,
            name,
            query,
            manager,
            warnings: parking_lot::Mutex::new(Vec::new()),
            user: None,
        }
    }

    /// The same target, asked for by `user`.
    pub fn with_user(mut self, user: Option<UserInfo>) -> Self {
        self.user = user;
        self
    }

    /// Whether the request is a dry run (`dryRun=All`): everything is checked, nothing is stored.
    fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }

    /// The name from the URL ("" for a collection).
    fn object_name(&self) -> String {
        self.name.clone().unwrap_or_default()
    }

    /// The etcd key of the object the URL names.
    fn key(&self) -> String {
        self.info.key(
            self.namespace.as_deref(),
            self.name.as_deref().unwrap_or(""),
        )
    }
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: status is kept from storage when the kind has a status subresource.
    Main,
    /// `/status`: only status changes.
    Status,
    /// `/finalize` (namespaces): only spec.finalizers changes.
    Finalize,
}

/// A storage failure as the API answers it: a compacted revision is 410 Expired, anything else 500.
pub(crate) fn internal(e: StorageError) -> ApiError {
    match e {
        StorageError::Compacted => {
            ApiError::expired("The resourceVersion for the provided list is too old.")
        }
        other => ApiError::internal(other.to_string()),
    }
}

/// 409 for a write that kept losing compare-and-swap races ([`MAX_ATTEMPTS`]).
fn too_many_conflicts(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::conflict(info.gr(), name, "too many concurrent writes; please retry")
}

/// Puts `kind` and `apiVersion` first, set to the resource's.
fn stamp_type(info: &ResourceInfo, v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), json!(info.kind));
        out.insert("apiVersion".into(), json!(info.api_version()));
        for (k, val) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, val);
            }
        }
        *m = out;
    }
}

fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(&info.group, &info.kind, name, causes)
}

/// Validates `obj` (a create when `old` is None, else an update of `old`): metadata, the kind's rules,
/// its pod templates' metadata, update-only rules, a custom resource's schema.
fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let mut causes = validation::metadata(info.name_rule, obj);
    causes.extend((info.validate)(obj));
    for pointer in info.pod_templates {
        if let Some(template) = obj.pointer(pointer).filter(|t| t.is_object()) {
            let field = pointer.trim_start_matches('/').replace('/', ".");
            causes.extend(validation::pod_template(&field, template));
        }
    }
    if let Some(old) = old {
        causes.extend((info.validate_update)(obj, old));
    }
    if let Some(schema) = &info.schema {
        causes.extend(crd::validate(schema, obj));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(info, meta::name(obj), causes))
    }
}

/// A listed item: built-in kinds drop `kind` and `apiVersion` (the list carries them), custom
/// resources keep them, as upstream.
fn strip_for_list(info: &ResourceInfo, mut v: Value) -> Value {
    if !info.custom
        && let Some(m) = v.as_object_mut()
    {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

/// Puts metadata keys in upstream's order (name, generateName, namespace, uid, resourceVersion, generation,
/// creationTimestamp, deletion*, labels, annotations, ownerReferences, finalizers, managedFields).
pub fn reorder_metadata(obj: &mut Value) {
    const ORDER: &[&str] = &[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ];
    let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut old = std::mem::take(m);
    for k in ORDER {
        if let Some(v) = old.remove(*k) {
            m.insert((*k).to_string(), v);
        }
    }
    m.append(&mut old);
}

/// Bumps `metadata.generation` of `new` when the kind's [`Generation`] policy says the change from
/// `old` counts, or when this write starts the deletion.
fn bump_generation(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let changed = |a: &Value, b: &Value, key: &str| a.get(key) != b.get(key);
    let bump = match info.generation {
        Generation::None => false,
        Generation::Spec => changed(old, new, "spec"),
        Generation::SpecAndAnnotations => {
            changed(old, new, "spec") || changed(&old["metadata"], &new["metadata"], "annotations")
        }
        Generation::AllButMetadataAndStatus => {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    m.remove("status");
                }
                v
            };
            strip(old) != strip(new)
        }
    };
    let deleting_now = meta::deleting(new) && !meta::deleting(old);
    if info.generation != Generation::None && (bump || deleting_now) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta::set(new, "generation", json!(g));
    }
}

/// Whether a namespace still has `spec.finalizers` (which keep it Terminating).
fn namespace_spec_finalizers(ns: &Value) -> bool {
    ns["spec"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// What follows an object's removal from storage: a Service's IPs and ports go back to their ranges.
async fn after_removal(st: &ApiState, info: &ResourceInfo, obj: &Value) {
    if info.allocates_service_ips {
        super::services::release_of(st, obj).await;
    }
}
