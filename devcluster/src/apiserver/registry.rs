//! The resource registry: every served kind as data (GVR, scope, subresources, hooks) — built-ins plus CRD-defined kinds.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use super::status::{Cause, Gr};

/// Defaulting hook: fills in defaults in place (runs on every write, so it must be idempotent).
pub type DefaultFn = fn(&mut Value);
/// Validation hook: returns field causes; empty means valid.
pub type ValidateFn = fn(&Value) -> Vec<Cause>;
/// Update-only validation hook, given the new object and the stored one (immutable fields).
pub type ValidateUpdateFn = fn(&Value, &Value) -> Vec<Cause>;
/// Update preparation: `(new, old)`; changes `new` from what changed (upstream's strategy
/// `PrepareForUpdate`).
pub type PrepareUpdateFn = fn(&mut Value, &Value);

/// How `metadata.generation` is maintained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The kind has no generation (ConfigMap, Service, ...).
    None,
    /// Bumped when `spec` changes.
    Spec,
    /// Bumped when `spec` or `metadata.annotations` change (apps/v1 Deployment).
    SpecAndAnnotations,
    /// Bumped when anything but `metadata` and `status` changes (custom resources, CRDs).
    AllButMetadataAndStatus,
}

/// The default deletion propagation when a DELETE names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcDefault {
    /// Background: the object goes at once, the garbage collector deletes dependents.
    Background,
    /// Orphan: the `orphan` finalizer is added (batch/v1 Job).
    Orphan,
}

/// The rule for `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain (most kinds).
    Subdomain,
    /// DNS-1123 label (Pods? no — namespaces).
    Label1123,
    /// DNS-1035 label (Services).
    Label1035,
    /// Any path segment (no `/`, not `.` or `..`) — Events, Nodes' hostnames are subdomains but leases allow more.
    PathSegment,
}

/// Where the replicas of a scalable kind live (for `/scale`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// JSON pointer of the desired replicas, e.g. `/spec/replicas`.
    pub spec_replicas: String,
    /// JSON pointer of the observed replicas.
    pub status_replicas: String,
    /// JSON pointer of the label selector (a LabelSelector object or a map, see `selector_is_map`).
    pub label_selector: Option<String>,
}

/// Subresources a kind serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subresources {
    /// `/status`.
    pub status: bool,
    /// `/scale`.
    pub scale: Option<ScalePaths>,
    /// `/binding` (pods).
    pub binding: bool,
    /// `/eviction` (pods; see `eviction`).
    pub eviction: bool,
    /// `/finalize` (namespaces).
    pub finalize: bool,
}

/// One served resource: everything the generic storage path and the HTTP layer need to know about a kind.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// etcd key prefix without trailing slash, e.g. `/registry/configmaps`.
    pub storage_prefix: String,
    /// Subresources served.
    pub subresources: Subresources,
    /// Defaulting (every write).
    pub defaulter: DefaultFn,
    /// Create-only preparation (status reset, generated fields).
    pub prepare_create: DefaultFn,
    /// Update-only preparation of the main resource (a DaemonSet's template generation), before the
    /// generation is bumped.
    pub prepare_update: PrepareUpdateFn,
    /// Validation.
    pub validate: ValidateFn,
    /// Validation of updates only (fields that may not change), after `validate`.
    pub validate_update: ValidateUpdateFn,
    /// JSON pointers of embedded pod templates (`/spec/template`), whose labels and annotations are
    /// validated like the object's own (upstream's `ValidatePodTemplateSpec`).
    pub pod_templates: &'static [&'static str],
    /// `metadata.name` rule.
    pub name_rule: NameRule,
    /// Field-selector fields beyond `metadata.name` / `metadata.namespace` (dotted paths into the object).
    pub field_labels: Vec<String>,
    /// Generation policy.
    pub generation: Generation,
    /// Default deletion propagation.
    pub gc_default: GcDefault,
    /// Pods: a DELETE of a bound object is graceful (deletionTimestamp in the future, grace period kept).
    pub graceful_delete: bool,
    /// Namespaces: DELETE marks Terminating, `/finalize` releases.
    pub namespace_lifecycle: bool,
    /// Services: allocate clusterIP / nodePorts on create.
    pub allocates_service_ips: bool,
    /// Whether the main resource allows deletecollection.
    pub deletecollection: bool,
    /// Custom resources: the CRD's openAPIV3Schema for the version (None for built-ins).
    pub schema: Option<Value>,
    /// Custom resources: additionalPrinterColumns of the version.
    pub printer_columns: Vec<Value>,
    /// Whether this kind comes from a CRD.
    pub custom: bool,
}

impl ResourceInfo {
    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The group/resource pair used in Status messages.
    pub fn gr(&self) -> Gr<'_> {
        Gr {
            group: &self.group,
            resource: &self.resource,
        }
    }

    /// The etcd key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}/{ns}/{name}", self.storage_prefix),
            _ => format!("{}/{name}", self.storage_prefix),
        }
    }

    /// The etcd prefix of a collection (all namespaces when `namespace` is None), with a trailing slash.
    pub fn collection_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}/{ns}/", self.storage_prefix),
            _ => format!("{}/", self.storage_prefix),
        }
    }

    /// The list kind, e.g. `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

/// The set of served resources; shared by the HTTP layer and the CRD machinery.
#[derive(Debug, Default)]
pub struct Registry {
    entries: RwLock<Vec<Arc<ResourceInfo>>>,
}

impl Registry {
    /// A registry holding `builtins`.
    pub fn new(builtins: Vec<ResourceInfo>) -> Self {
        Registry {
            entries: RwLock::new(builtins.into_iter().map(Arc::new).collect()),
        }
    }

    /// The resource served at group/version/resource.
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.entries
            .read()
            .iter()
            .find(|r| r.group == group && r.version == version && r.resource == resource)
            .cloned()
    }

    /// Whether any resource is served in `group` (any version).
    pub fn has_group(&self, group: &str) -> bool {
        self.entries.read().iter().any(|r| r.group == group)
    }

    /// Whether any resource is served in group/version.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.entries
            .read()
            .iter()
            .any(|r| r.group == group && r.version == version)
    }

    /// All resources of group/version, in registration order.
    pub fn resources_of(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.entries
            .read()
            .iter()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    /// Named groups (not core) in registration order, each with its versions.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.entries.read().iter().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version.clone());
                    }
                }
                None => out.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        out
    }

    /// Replaces every custom resource defined by the CRD `crd_name` with `entries` (empty: stop serving it).
    pub fn set_custom(&self, crd_name: &str, entries: Vec<ResourceInfo>) {
        let mut all = self.entries.write();
        all.retain(|r| !(r.custom && format!("{}.{}", r.resource, r.group) == crd_name));
        all.extend(entries.into_iter().map(Arc::new));
    }
}
