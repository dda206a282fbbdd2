//! The built-in kinds devcluster serves, as registry data (group/version/resource, scope, subresources,
//! hooks), one builder chain per kind: each row names what it declares, anything it does not name keeps
//! the default of [`Builtin::new`].

use super::defaults as d;
use super::defaults_scaling_network as dsn;
use super::registry::{
    DefaultFn, GcDefault, Generation, NameRule, PrepareUpdateFn, ResourceInfo, ScalePaths,
    Subresources, ValidateFn, ValidateUpdateFn,
};
use super::validation as v;
use super::validation_batch as vb;
use super::validation_discovery as vd;
use super::validation_networking as vn;

/// Every built-in kind, in the order discovery lists them.
pub fn builtins() -> Vec<ResourceInfo> {
    // Events: upstream's field set (what `kubectl describe` selects an object's Events by); `source`
    // is `source.component`, or `reportingComponent` without one.
    const EVENT_FIELDS: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    const POD_FIELDS: &[&str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    const TEMPLATE: &[&str] = &["/spec/template"];
    [
        // core/v1
        Builtin::new("", "configmaps", "ConfigMap")
            .namespaced()
            .short(&["cm"])
            .validate(v::configmap),
        Builtin::new("", "endpoints", "Endpoints")
            .namespaced()
            .short(&["ep"])
            .stored_under("services/endpoints")
            .defaults(vd::endpoints_defaults)
            .validate(vd::endpoints_object),
        Builtin::new("", "events", "Event")
            .namespaced()
            .short(&["ev"])
            .names(NameRule::PathSegment)
            .field_labels(EVENT_FIELDS),
        Builtin::new("", "namespaces", "Namespace")
            .short(&["ns"])
            .status()
            .finalize()
            .defaults(d::namespace)
            .on_create(d::namespace_create)
            .names(NameRule::Label1123)
            .namespace_lifecycle()
            .no_deletecollection()
            .field_labels(&["status.phase"]),
        Builtin::new("", "nodes", "Node")
            .short(&["no"])
            .stored_under("minions")
            .status()
            .on_create(d::node_create)
            .field_labels(&["spec.unschedulable"]),
        Builtin::new("", "persistentvolumeclaims", "PersistentVolumeClaim")
            .namespaced()
            .short(&["pvc"])
            .status()
            .defaults(d::pvc)
            .on_create(d::pvc_create),
        Builtin::new("", "pods", "Pod")
            .namespaced()
            .short(&["po"])
            .in_all()
            .status()
            .binding()
            .eviction()
            .defaults(d::pod)
            .on_create(d::pod_create)
            .validate(v::pod)
            .generation(Generation::Spec)
            .graceful_delete()
            .field_labels(POD_FIELDS),
        Builtin::new("", "replicationcontrollers", "ReplicationController")
            .namespaced()
            .short(&["rc"])
            .in_all()
            .stored_under("controllers")
            .scale("/spec/selector")
            .defaults(d::replication_controller)
            .on_create(d::replicas_status_create)
            .pod_templates(TEMPLATE)
            .generation(Generation::Spec)
            .field_labels(&["status.replicas"]),
        Builtin::new("", "resourcequotas", "ResourceQuota")
            .namespaced()
            .short(&["quota"])
            .status()
            .on_create(super::quota::prepare_create),
        Builtin::new("", "secrets", "Secret")
            .namespaced()
            .defaults(d::secret)
            .field_labels(&["type"]),
        Builtin::new("", "serviceaccounts", "ServiceAccount")
            .namespaced()
            .short(&["sa"]),
        Builtin::new("", "services", "Service")
            .namespaced()
            .short(&["svc"])
            .in_all()
            .stored_under("services/specs")
            .status()
            .defaults(d::service)
            .on_create(d::service_create)
            .validate(v::service)
            .names(NameRule::Label1035)
            .allocates_service_ips(),
        // apps/v1
        Builtin::new("apps", "controllerrevisions", "ControllerRevision").namespaced(),
        Builtin::new("apps", "daemonsets", "DaemonSet")
            .namespaced()
            .short(&["ds"])
            .in_all()
            .status()
            .defaults(d::daemonset)
            .on_create(d::daemonset_create)
            .on_update(d::daemonset_update)
            .validate(v::selector_workload)
            .pod_templates(TEMPLATE)
            .generation(Generation::Spec),
        Builtin::new("apps", "deployments", "Deployment")
            .namespaced()
            .short(&["deploy"])
            .in_all()
            .scale("/spec/selector")
            .defaults(d::deployment)
            .on_create(d::empty_status_create)
            .validate(v::selector_workload)
            .pod_templates(TEMPLATE)
            .generation(Generation::SpecAndAnnotations),
        Builtin::new("apps", "replicasets", "ReplicaSet")
            .namespaced()
            .short(&["rs"])
            .in_all()
            .scale("/spec/selector")
            .defaults(d::replicaset)
            .on_create(d::replicas_status_create)
            .validate(v::selector_workload)
            .pod_templates(TEMPLATE)
            .generation(Generation::Spec),
        Builtin::new("apps", "statefulsets", "StatefulSet")
            .namespaced()
            .short(&["sts"])
            .in_all()
            .scale("/spec/selector")
            .defaults(d::statefulset)
            .on_create(d::statefulset_create)
            .validate(v::selector_workload)
            .pod_templates(TEMPLATE)
            .generation(Generation::Spec),
        // batch/v1
        Builtin::new("batch", "cronjobs", "CronJob")
            .namespaced()
            .short(&["cj"])
            .in_all()
            .status()
            .defaults(d::cronjob)
            .on_create(d::empty_status_create)
            .validate(vb::cronjob)
            .pod_templates(&["/spec/jobTemplate/spec/template"])
            .generation(Generation::Spec),
        Builtin::new("batch", "jobs", "Job")
            .namespaced()
            .in_all()
            .status()
            .defaults(d::job)
            .on_create(d::job_create)
            .validate(vb::job)
            .validate_update(vb::job_update)
            .pod_templates(TEMPLATE)
            .generation(Generation::Spec)
            .orphan_by_default()
            .field_labels(&["status.successful"]),
        // coordination.k8s.io/v1
        Builtin::new("coordination.k8s.io", "leases", "Lease")
            .namespaced()
            .names(NameRule::PathSegment)
            .defaults(d::lease),
        // discovery.k8s.io/v1
        Builtin::new("discovery.k8s.io", "endpointslices", "EndpointSlice")
            .namespaced()
            .defaults(d::endpointslice)
            .validate(vd::endpoint_slice)
            .validate_update(vd::endpoint_slice_update)
            .generation(Generation::AllButMetadataAndStatus)
            .field_labels(&["addressType"]),
        // events.k8s.io/v1
        Builtin::new("events.k8s.io", "events", "Event")
            .namespaced()
            .short(&["ev"])
            .stored_under("events.k8s.io/events")
            .names(NameRule::PathSegment),
        // autoscaling/v2
        Builtin::new(
            "autoscaling",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
        )
        .version("v2")
        .namespaced()
        .short(&["hpa"])
        .in_all()
        .status()
        .defaults(dsn::horizontal_pod_autoscaler)
        .on_create(dsn::horizontal_pod_autoscaler_create)
        .validate(v::horizontal_pod_autoscaler)
        .generation(Generation::Spec),
        // networking.k8s.io/v1
        Builtin::new("networking.k8s.io", "networkpolicies", "NetworkPolicy")
            .namespaced()
            .short(&["netpol"])
            .defaults(dsn::network_policy)
            .generation(Generation::Spec),
        // Named by an IP (`2001:db8::1` is no subdomain); `validate` checks the name.
        Builtin::new("networking.k8s.io", "ipaddresses", "IPAddress")
            .short(&["ip"])
            .names(NameRule::PathSegment)
            .validate(vn::ip_address)
            .validate_update(vn::ip_address_update),
        Builtin::new("networking.k8s.io", "servicecidrs", "ServiceCIDR")
            .status()
            .on_create(d::empty_status_create)
            .validate(vn::service_cidr)
            .validate_update(vn::service_cidr_update),
        // policy/v1
        Builtin::new("policy", "poddisruptionbudgets", "PodDisruptionBudget")
            .namespaced()
            .short(&["pdb"])
            .status()
            .on_create(d::pdb_create)
            .generation(Generation::Spec),
        // rbac.authorization.k8s.io/v1 (enforced in RBAC mode, see `auth`)
        Builtin::new(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
        )
        .defaults(d::role_binding)
        .validate_update(v::role_binding_update)
        .names(NameRule::PathSegment),
        Builtin::new("rbac.authorization.k8s.io", "clusterroles", "ClusterRole")
            .names(NameRule::PathSegment),
        Builtin::new("rbac.authorization.k8s.io", "rolebindings", "RoleBinding")
            .namespaced()
            .defaults(d::role_binding)
            .validate_update(v::role_binding_update)
            .names(NameRule::PathSegment),
        Builtin::new("rbac.authorization.k8s.io", "roles", "Role")
            .namespaced()
            .names(NameRule::PathSegment),
        // scheduling.k8s.io/v1
        Builtin::new("scheduling.k8s.io", "priorityclasses", "PriorityClass")
            .short(&["pc"])
            .defaults(d::priority_class),
        // apiextensions.k8s.io/v1
        Builtin::new(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        )
        .short(&["crd", "crds"])
        .category("api-extensions")
        .stored_under("apiextensions.k8s.io/customresourcedefinitions")
        .status()
        .defaults(d::crd)
        .on_create(d::crd_create)
        .validate(v::crd)
        .generation(Generation::AllButMetadataAndStatus),
    ]
    .into_iter()
    .map(|b| b.0)
    .collect()
}

/// A built-in kind being declared: a [`ResourceInfo`] with one setter per field a row may name.
struct Builtin(ResourceInfo);

impl Builtin {
    /// A cluster-scoped `v1` kind of `group`, stored under `/registry/<resource>`, singular name the
    /// lower-cased kind (true of every built-in), with no short names, categories, subresources,
    /// hooks, generation or field labels; names are DNS subdomains, deletion propagates in the
    /// background and deletecollection is served.
    fn new(group: &str, resource: &str, kind: &str) -> Self {
        Builtin(ResourceInfo {
            group: group.to_string(),
            version: "v1".to_string(),
            resource: resource.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            namespaced: false,
            short_names: Vec::new(),
            categories: Vec::new(),
            storage_prefix: format!("/registry/{resource}"),
            subresources: Subresources::default(),
            defaulter: d::nothing,
            prepare_create: d::nothing,
            prepare_update: d::nothing_on_update,
            validate: v::nothing,
            validate_update: v::nothing_on_update,
            pod_templates: &[],
            name_rule: NameRule::Subdomain,
            field_labels: Vec::new(),
            generation: Generation::None,
            gc_default: GcDefault::Background,
            graceful_delete: false,
            namespace_lifecycle: false,
            allocates_service_ips: false,
            deletecollection: true,
            schema: None,
            printer_columns: Vec::new(),
            custom: false,
        })
    }

    fn version(mut self, version: &str) -> Self {
        self.0.version = version.to_string();
        self
    }

    fn namespaced(mut self) -> Self {
        self.0.namespaced = true;
        self
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.0.short_names = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// In the `all` category (`kubectl get all`).
    fn in_all(self) -> Self {
        self.category("all")
    }

    fn category(mut self, category: &str) -> Self {
        self.0.categories.push(category.to_string());
        self
    }

    /// Stored under `/registry/<prefix>` rather than `/registry/<resource>` (upstream's keys).
    fn stored_under(mut self, prefix: &str) -> Self {
        self.0.storage_prefix = format!("/registry/{prefix}");
        self
    }

    fn status(mut self) -> Self {
        self.0.subresources.status = true;
        self
    }

    /// `/scale` (and `/status`) over `spec.replicas` / `status.replicas`, reporting the selector at
    /// the pointer `selector`.
    fn scale(mut self, selector: &str) -> Self {
        self.0.subresources.status = true;
        self.0.subresources.scale = Some(ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: Some(selector.into()),
        });
        self
    }

    fn binding(mut self) -> Self {
        self.0.subresources.binding = true;
        self
    }

    fn eviction(mut self) -> Self {
        self.0.subresources.eviction = true;
        self
    }

    fn finalize(mut self) -> Self {
        self.0.subresources.finalize = true;
        self
    }

    fn defaults(mut self, f: DefaultFn) -> Self {
        self.0.defaulter = f;
        self
    }

    fn on_create(mut self, f: DefaultFn) -> Self {
        self.0.prepare_create = f;
        self
    }

    fn on_update(mut self, f: PrepareUpdateFn) -> Self {
        self.0.prepare_update = f;
        self
    }

    fn validate(mut self, f: ValidateFn) -> Self {
        self.0.validate = f;
        self
    }

    fn validate_update(mut self, f: ValidateUpdateFn) -> Self {
        self.0.validate_update = f;
        self
    }

    fn pod_templates(mut self, pointers: &'static [&'static str]) -> Self {
        self.0.pod_templates = pointers;
        self
    }

    fn names(mut self, rule: NameRule) -> Self {
        self.0.name_rule = rule;
        self
    }

    fn field_labels(mut self, fields: &[&str]) -> Self {
        self.0.field_labels = fields.iter().map(|f| f.to_string()).collect();
        self
    }

    fn generation(mut self, generation: Generation) -> Self {
        self.0.generation = generation;
        self
    }

    /// A DELETE naming no propagation orphans dependents (batch/v1 Job).
    fn orphan_by_default(mut self) -> Self {
        self.0.gc_default = GcDefault::Orphan;
        self
    }

    fn graceful_delete(mut self) -> Self {
        self.0.graceful_delete = true;
        self
    }

    fn namespace_lifecycle(mut self) -> Self {
        self.0.namespace_lifecycle = true;
        self
    }

    fn allocates_service_ips(mut self) -> Self {
        self.0.allocates_service_ips = true;
        self
    }

    fn no_deletecollection(mut self) -> Self {
        self.0.deletecollection = false;
        self
    }
}
