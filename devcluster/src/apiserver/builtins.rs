//! The built-in kinds devcluster serves, as registry data (group/version/resource, scope, subresources, hooks).

use super::defaults as d;
use super::defaults_scaling_network as dsn;
use super::registry::{GcDefault, Generation, NameRule, ResourceInfo, ScalePaths, Subresources};
use super::validation as v;
use super::validation_batch as vb;
use super::validation_discovery as vd;
use super::validation_networking as vn;

struct Spec {
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    prefix: &'static str,
}

fn base(s: Spec) -> ResourceInfo {
    ResourceInfo {
        group: s.group.to_string(),
        version: "v1".to_string(),
        resource: s.resource.to_string(),
        singular: s.singular.to_string(),
        kind: s.kind.to_string(),
        namespaced: s.namespaced,
        short_names: s.short.iter().map(|x| x.to_string()).collect(),
        categories: if s.all {
            vec!["all".to_string()]
        } else {
            Vec::new()
        },
        storage_prefix: format!("/registry/{}", s.prefix),
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
    }
}

fn status() -> Subresources {
    Subresources {
        status: true,
        ..Default::default()
    }
}

fn scalable(selector: &str) -> Subresources {
    Subresources {
        status: true,
        scale: Some(ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: Some(selector.into()),
        }),
        ..Default::default()
    }
}

macro_rules! spec {
    ($g:expr, $r:expr, $s:expr, $k:expr, $ns:expr, $short:expr, $all:expr, $p:expr) => {
        base(Spec {
            group: $g,
            resource: $r,
            singular: $s,
            kind: $k,
            namespaced: $ns,
            short: $short,
            all: $all,
            prefix: $p,
        })
    };
}

/// Every built-in kind, in the order discovery lists them.
pub fn builtins() -> Vec<ResourceInfo> {
    let workload = |mut r: ResourceInfo, def: fn(&mut serde_json::Value), prep, val, generation| {
        r.defaulter = def;
        r.prepare_create = prep;
        r.validate = val;
        r.generation = generation;
        r.pod_templates = &["/spec/template"];
        r
    };
    vec![
        // core/v1
        spec!(
            "",
            "configmaps",
            "configmap",
            "ConfigMap",
            true,
            &["cm"],
            false,
            "configmaps"
        )
        .with(|r| r.validate = v::configmap),
        spec!(
            "",
            "endpoints",
            "endpoints",
            "Endpoints",
            true,
            &["ep"],
            false,
            "services/endpoints"
        )
        .with(|r| {
            r.defaulter = vd::endpoints_defaults;
            r.validate = vd::endpoints_object;
        }),
        spec!(
            "",
            "events",
            "event",
            "Event",
            true,
            &["ev"],
            false,
            "events"
        )
        .with(|r| {
            r.name_rule = NameRule::PathSegment;
            // Upstream's event field set (what `kubectl describe` selects an object's Events by);
            // `source` is `source.component`, or `reportingComponent` without one.
            r.field_labels = [
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
            ]
            .map(String::from)
            .to_vec();
        }),
        spec!(
            "",
            "namespaces",
            "namespace",
            "Namespace",
            false,
            &["ns"],
            false,
            "namespaces"
        )
        .with(|r| {
            r.subresources = Subresources {
                status: true,
                finalize: true,
                ..Default::default()
            };
            r.defaulter = d::namespace;
            r.prepare_create = d::namespace_create;
            r.name_rule = NameRule::Label1123;
            r.namespace_lifecycle = true;
            r.deletecollection = false;
            r.field_labels = vec!["status.phase".into()];
        }),
        spec!(
            "",
            "nodes",
            "node",
            "Node",
            false,
            &["no"],
            false,
            "minions"
        )
        .with(|r| {
            r.subresources = status();
            r.prepare_create = d::node_create;
            r.field_labels = vec!["spec.unschedulable".into()];
        }),
        spec!(
            "",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            false,
            "persistentvolumeclaims"
        )
        .with(|r| {
            r.subresources = status();
            r.defaulter = d::pvc;
            r.prepare_create = d::pvc_create;
        }),
        spec!("", "pods", "pod", "Pod", true, &["po"], true, "pods").with(|r| {
            r.subresources = Subresources {
                status: true,
                binding: true,
                eviction: true,
                ..Default::default()
            };
            r.defaulter = d::pod;
            r.prepare_create = d::pod_create;
            r.validate = v::pod;
            r.generation = Generation::Spec;
            r.graceful_delete = true;
            r.field_labels = vec![
                "spec.nodeName".into(),
                "spec.restartPolicy".into(),
                "spec.schedulerName".into(),
                "spec.serviceAccountName".into(),
                "status.phase".into(),
                "status.podIP".into(),
                "status.nominatedNodeName".into(),
            ];
        }),
        workload(
            spec!(
                "",
                "replicationcontrollers",
                "replicationcontroller",
                "ReplicationController",
                true,
                &["rc"],
                true,
                "controllers"
            ),
            d::replication_controller,
            d::replicas_status_create,
            v::nothing,
            Generation::Spec,
        )
        .with(|r| {
            r.subresources = scalable("/spec/selector");
            r.field_labels = vec!["status.replicas".into()];
        }),
        spec!(
            "",
            "resourcequotas",
            "resourcequota",
            "ResourceQuota",
            true,
            &["quota"],
            false,
            "resourcequotas"
        )
        .with(|r| {
            r.subresources = status();
            r.prepare_create = super::quota::prepare_create;
        }),
        spec!(
            "",
            "secrets",
            "secret",
            "Secret",
            true,
            &[],
            false,
            "secrets"
        )
        .with(|r| {
            r.defaulter = d::secret;
            r.field_labels = vec!["type".into()];
        }),
        spec!(
            "",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
            &["sa"],
            false,
            "serviceaccounts"
        ),
        spec!(
            "",
            "services",
            "service",
            "Service",
            true,
            &["svc"],
            true,
            "services/specs"
        )
        .with(|r| {
            r.subresources = status();
            r.defaulter = d::service;
            r.prepare_create = d::service_create;
            r.validate = v::service;
            r.name_rule = NameRule::Label1035;
            r.allocates_service_ips = true;
        }),
        // apps/v1
        spec!(
            "apps",
            "controllerrevisions",
            "controllerrevision",
            "ControllerRevision",
            true,
            &[],
            false,
            "controllerrevisions"
        ),
        workload(
            spec!(
                "apps",
                "daemonsets",
                "daemonset",
                "DaemonSet",
                true,
                &["ds"],
                true,
                "daemonsets"
            ),
            d::daemonset,
            d::daemonset_create,
            v::selector_workload,
            Generation::Spec,
        )
        .with(|r| {
            r.subresources = status();
            r.prepare_update = d::daemonset_update;
        }),
        workload(
            spec!(
                "apps",
                "deployments",
                "deployment",
                "Deployment",
                true,
                &["deploy"],
                true,
                "deployments"
            ),
            d::deployment,
            d::empty_status_create,
            v::selector_workload,
            Generation::SpecAndAnnotations,
        )
        .with(|r| r.subresources = scalable("/spec/selector")),
        workload(
            spec!(
                "apps",
                "replicasets",
                "replicaset",
                "ReplicaSet",
                true,
                &["rs"],
                true,
                "replicasets"
            ),
            d::replicaset,
            d::replicas_status_create,
            v::selector_workload,
            Generation::Spec,
        )
        .with(|r| r.subresources = scalable("/spec/selector")),
        workload(
            spec!(
                "apps",
                "statefulsets",
                "statefulset",
                "StatefulSet",
                true,
                &["sts"],
                true,
                "statefulsets"
            ),
            d::statefulset,
            d::statefulset_create,
            v::selector_workload,
            Generation::Spec,
        )
        .with(|r| r.subresources = scalable("/spec/selector")),
        // batch/v1
        workload(
            spec!(
                "batch",
                "cronjobs",
                "cronjob",
                "CronJob",
                true,
                &["cj"],
                true,
                "cronjobs"
            ),
            d::cronjob,
            d::empty_status_create,
            vb::cronjob,
            Generation::Spec,
        )
        .with(|r| {
            r.subresources = status();
            r.pod_templates = &["/spec/jobTemplate/spec/template"];
        }),
        workload(
            spec!("batch", "jobs", "job", "Job", true, &[], true, "jobs"),
            d::job,
            d::job_create,
            vb::job,
            Generation::Spec,
        )
        .with(|r| {
            r.validate_update = vb::job_update;
            r.subresources = status();
            r.gc_default = GcDefault::Orphan;
            r.field_labels = vec!["status.successful".into()];
        }),
        // coordination.k8s.io/v1
        spec!(
            "coordination.k8s.io",
            "leases",
            "lease",
            "Lease",
            true,
            &[],
            false,
            "leases"
        )
        .with(|r| {
            r.name_rule = NameRule::PathSegment;
            r.defaulter = d::lease;
        }),
        // discovery.k8s.io/v1
        spec!(
            "discovery.k8s.io",
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
            &[],
            false,
            "endpointslices"
        )
        .with(|r| {
            r.defaulter = d::endpointslice;
            r.validate = vd::endpoint_slice;
            r.validate_update = vd::endpoint_slice_update;
            r.generation = Generation::AllButMetadataAndStatus;
            r.field_labels = vec!["addressType".into()];
        }),
        // events.k8s.io/v1
        spec!(
            "events.k8s.io",
            "events",
            "event",
            "Event",
            true,
            &["ev"],
            false,
            "events.k8s.io/events"
        )
        .with(|r| r.name_rule = NameRule::PathSegment),
        // autoscaling/v2
        spec!(
            "autoscaling",
            "horizontalpodautoscalers",
            "horizontalpodautoscaler",
            "HorizontalPodAutoscaler",
            true,
            &["hpa"],
            true,
            "horizontalpodautoscalers"
        )
        .with(|r| {
            r.version = "v2".into();
            r.subresources = status();
            r.defaulter = dsn::horizontal_pod_autoscaler;
            r.prepare_create = dsn::horizontal_pod_autoscaler_create;
            r.validate = v::horizontal_pod_autoscaler;
            r.generation = Generation::Spec;
        }),
        // networking.k8s.io/v1
        spec!(
            "networking.k8s.io",
            "networkpolicies",
            "networkpolicy",
            "NetworkPolicy",
            true,
            &["netpol"],
            false,
            "networkpolicies"
        )
        .with(|r| {
            r.defaulter = dsn::network_policy;
            r.generation = Generation::Spec;
        }),
        spec!(
            "networking.k8s.io",
            "ipaddresses",
            "ipaddress",
            "IPAddress",
            false,
            &["ip"],
            false,
            "ipaddresses"
        )
        .with(|r| {
            // Named by an IP (`2001:db8::1` is no subdomain); `validate` checks the name.
            r.name_rule = NameRule::PathSegment;
            r.validate = vn::ip_address;
            r.validate_update = vn::ip_address_update;
        }),
        spec!(
            "networking.k8s.io",
            "servicecidrs",
            "servicecidr",
            "ServiceCIDR",
            false,
            &[],
            false,
            "servicecidrs"
        )
        .with(|r| {
            r.subresources = status();
            r.prepare_create = d::empty_status_create;
            r.validate = vn::service_cidr;
            r.validate_update = vn::service_cidr_update;
        }),
        // policy/v1
        spec!(
            "policy",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            true,
            &["pdb"],
            false,
            "poddisruptionbudgets"
        )
        .with(|r| {
            r.subresources = status();
            r.prepare_create = d::pdb_create;
            r.generation = Generation::Spec;
        }),
        // rbac.authorization.k8s.io/v1 (enforced in RBAC mode, see `auth`)
        spec!(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            false,
            &[],
            false,
            "clusterrolebindings"
        )
        .with(|r| {
            r.defaulter = d::role_binding;
            r.validate_update = v::role_binding_update;
            r.name_rule = NameRule::PathSegment;
        }),
        spec!(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            false,
            &[],
            false,
            "clusterroles"
        )
        .with(|r| r.name_rule = NameRule::PathSegment),
        spec!(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            true,
            &[],
            false,
            "rolebindings"
        )
        .with(|r| {
            r.defaulter = d::role_binding;
            r.validate_update = v::role_binding_update;
            r.name_rule = NameRule::PathSegment;
        }),
        spec!(
            "rbac.authorization.k8s.io",
            "roles",
            "role",
            "Role",
            true,
            &[],
            false,
            "roles"
        )
        .with(|r| r.name_rule = NameRule::PathSegment),
        // scheduling.k8s.io/v1
        spec!(
            "scheduling.k8s.io",
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            false,
            &["pc"],
            false,
            "priorityclasses"
        )
        .with(|r| r.defaulter = d::priority_class),
        // apiextensions.k8s.io/v1
        spec!(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            false,
            "apiextensions.k8s.io/customresourcedefinitions"
        )
        .with(|r| {
            r.subresources = status();
            r.defaulter = d::crd;
            r.prepare_create = d::crd_create;
            r.validate = v::crd;
            r.categories = vec!["api-extensions".into()];
            r.generation = Generation::AllButMetadataAndStatus;
        }),
    ]
}

trait With: Sized {
    fn with(self, f: impl FnOnce(&mut Self)) -> Self;
}

impl With for ResourceInfo {
    fn with(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}
