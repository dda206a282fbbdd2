//! What each built-in controller's reconcile asks of the Kubernetes API, as RBAC grants: the rules of
//! a worker's ClusterRole. A worker reads through the coordinator's cache, so only the live reads a
//! controller makes (re-checks before adoption, a taken name, an owner's existence) need `get`; lists
//! and watches are the coordinator's ([`super::coordinator_rules`]).
//!
//! Each function is named after its controller and is referenced once, from the registry. When a
//! reconcile starts making a new request, its grant goes here, with the reason.

use super::rules::{ALL, Rules};

/// Events are core/v1 Events, as kube-controller-manager writes them: created, and patched with a
/// raised count when one repeats.
fn events() -> Rules {
    Rules::new().grant("", &["events"], &["create", "patch"])
}

/// Creates the `default` ServiceAccount of a namespace (its existence is read from the cache).
pub(crate) fn serviceaccount() -> Rules {
    Rules::new().grant("", &["serviceaccounts"], &["create"])
}

/// The replica controllers, for owner resource `owners` in `group`: pods are created and deleted,
/// adopted and released (merge patches of their ownerReferences); the owner is read live before an
/// adoption and its status merge-patched; `<owners>/finalizers` `update` lets the pods it creates
/// and adopts carry `blockOwnerDeletion`, which the `OwnerReferencesPermissionEnforcement`
/// admission plugin requires where it is enabled (upstream's roles grant it for that reason).
fn replicas(group: &str, owners: &str) -> Rules {
    let status = format!("{owners}/status");
    let finalizers = format!("{owners}/finalizers");
    let mut rules = Rules::new()
        .grant("", &["pods"], &["create", "delete", "patch"])
        .grant(group, &[owners], &["get"])
        .grant(group, &[&status], &["patch"])
        .grant(group, &[&finalizers], &["update"]);
    rules.extend(&events());
    rules
}

/// ReplicaSets' pods (see [`replicas`]).
pub(crate) fn replicaset() -> Rules {
    replicas("apps", "replicasets")
}

/// ReplicationControllers' pods (see [`replicas`]).
pub(crate) fn replicationcontroller() -> Rules {
    replicas("", "replicationcontrollers")
}

/// Deployments: ReplicaSets are created, read when their name is taken, updated (annotations and
/// `minReadySeconds`), scaled, adopted and released (merge patches), and deleted by the history
/// cleanup; the Deployment is read live before an adoption, its status replaced through
/// `deployments/status` (the revision annotation with it: kube-apiserver's status strategy resets
/// only spec and labels there), and `deployments/finalizers` `update` lets its ReplicaSets carry
/// `blockOwnerDeletion` (see [`replicas`]). No `patch` of the Deployment: the controller's fallback
/// that merge-patches the revision annotation runs only against a server that drops annotations on
/// the status subresource, which kube-apiserver never does (the least-privilege test found the grant
/// unused).
pub(crate) fn deployment() -> Rules {
    let mut rules = Rules::new()
        .grant(
            "apps",
            &["replicasets"],
            &["create", "delete", "get", "patch", "update"],
        )
        .grant("apps", &["deployments"], &["get"])
        .grant("apps", &["deployments/status"], &["update"])
        .grant("apps", &["deployments/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The garbage collector acts on every resource of the owner graph, custom resources included: a
/// live `get` of each owner, merge patches of ownerReferences and finalizers, and deletes. Which
/// resources is discovered at run time, hence the wildcards (upstream's role has them too).
pub(crate) fn garbagecollector() -> Rules {
    Rules::new().grant(ALL, &[ALL], &["delete", "get", "patch"])
}

/// The namespace controller reads the terminating namespace live, lists and deletes (one by one or
/// by collection) the content of every namespaced resource discovery lists — custom resources
/// included, hence the wildcards — writes the deletion conditions through `namespaces/status` and
/// removes its finalizer through `namespaces/finalize`.
pub(crate) fn namespace() -> Rules {
    Rules::new()
        .grant("", &["namespaces"], &["get"])
        .grant(
            "",
            &["namespaces/status", "namespaces/finalize"],
            &["update"],
        )
        .grant(ALL, &[ALL], &["delete", "deletecollection", "list"])
}

/// The job controller creates and deletes a Job's pods, strategic-merge-patches them (removing the
/// `batch.kubernetes.io/job-tracking` finalizer) and merge-patches them to adopt or release; it lists
/// them live when the cache may not have seen its last writes (an item taken from a lost worker, a
/// new leader's first pass); it reads the Job live before an adoption, merge-patches `jobs/status`,
/// and `jobs/finalizers` `update` lets its pods carry `blockOwnerDeletion` (see [`replicas`]).
pub(crate) fn job() -> Rules {
    let mut rules = Rules::new()
        .grant("", &["pods"], &["create", "delete", "list", "patch"])
        .grant("batch", &["jobs"], &["get"])
        .grant("batch", &["jobs/status"], &["patch"])
        .grant("batch", &["jobs/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The TTL-after-finished controller re-reads an expired Job live before deleting it (the cache may
/// be stale), then deletes it; no Events.
pub(crate) fn ttlafterfinished() -> Rules {
    Rules::new().grant("batch", &["jobs"], &["delete", "get"])
}

/// The pod GC re-reads a node missing from the cache live before deleting its pods, marks pods that
/// are not yet terminal Failed through a strategic merge patch of `pods/status`, and deletes pods;
/// no Events.
pub(crate) fn podgc() -> Rules {
    Rules::new()
        .grant("", &["nodes"], &["get"])
        .grant("", &["pods/status"], &["patch"])
        .grant("", &["pods"], &["delete"])
}

/// The taint-eviction controller adds the `DisruptionTarget` condition with a strategic merge patch
/// of `pods/status`, deletes pods (guarded by their UID) and records Events; a node's pods come from
/// the cache.
pub(crate) fn tainteviction() -> Rules {
    let mut rules =
        Rules::new()
            .grant("", &["pods/status"], &["patch"])
            .grant("", &["pods"], &["delete"]);
    rules.extend(&events());
    rules
}

/// The cronjob controller creates a CronJob's Jobs and deletes them (history limits, `Replace`);
/// it reads a Job live when the cache lacks one that `status.active` lists (gone, or not yet
/// seen?), before replacing it, and when its create finds the name taken; it reads the CronJob
/// live when a running Job it controls is missing from `status.active`; it writes the status with
/// an update of `cronjobs/status`, as upstream; `cronjobs/finalizers` `update` lets its Jobs carry
/// `blockOwnerDeletion` (see [`replicas`]). The Jobs it controls come with each item: no list.
pub(crate) fn cronjob() -> Rules {
    let mut rules = Rules::new()
        .grant("batch", &["jobs"], &["create", "delete", "get"])
        .grant("batch", &["cronjobs"], &["get"])
        .grant("batch", &["cronjobs/status"], &["update"])
        .grant("batch", &["cronjobs/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The disruption controller replaces `poddisruptionbudgets/status` (guarded by resourceVersion, as
/// upstream's update); it reads the controllers of a budget's pods live when the budget is a
/// percentage or a `maxUnavailable` (ReplicaSets and Deployments by object, every other kind through
/// its `/scale` subresource, custom resources included, hence the wildcard); it re-reads a pod live
/// before resetting a stale `DisruptionTarget` condition through an update of `pods/status`.
pub(crate) fn disruption() -> Rules {
    let mut rules = Rules::new()
        .grant("policy", &["poddisruptionbudgets/status"], &["update"])
        .grant("apps", &["replicasets", "deployments"], &["get"])
        .grant(ALL, &["*/scale"], &["get"])
        .grant("", &["pods"], &["get"])
        .grant("", &["pods/status"], &["update"]);
    rules.extend(&events());
    rules
}

/// The statefulset controller creates, deletes and merge-patches a set's pods (adoption, release,
/// a repaired identity); creates its PersistentVolumeClaims and merge-patches their ownerReferences
/// for the retention policy; creates its ControllerRevisions (reading one whose name is taken), merge-
/// patches them (adoption, a rollback's renumbering) and deletes them beyond the history limit; reads
/// the set live before an adoption and merge-patches `statefulsets/status`. `statefulsets/finalizers`
/// `update` lets its pods, revisions and claims carry `blockOwnerDeletion` to the set, `pods/finalizers`
/// `update` a claim of a scaled-away pod to its pod (`whenScaled: Delete`), see [`replicas`].
pub(crate) fn statefulset() -> Rules {
    let mut rules = Rules::new()
        .grant("", &["pods"], &["create", "delete", "patch"])
        .grant("", &["persistentvolumeclaims"], &["create", "patch"])
        .grant("", &["pods/finalizers"], &["update"])
        .grant(
            "apps",
            &["controllerrevisions"],
            &["create", "delete", "get", "patch"],
        )
        .grant("apps", &["statefulsets"], &["get"])
        .grant("apps", &["statefulsets/status"], &["patch"])
        .grant("apps", &["statefulsets/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The daemonset controller creates and deletes a DaemonSet's pods, merge-patches them (adoption,
/// release, the hash label of a deduplicated revision); creates its ControllerRevisions (reading one
/// whose name is taken), merge-patches them (adoption, release, the hash label, renumbering) and
/// deletes them beyond the history limit; reads the DaemonSet live before an adoption and
/// merge-patches `daemonsets/status` (counts and `collisionCount`). `daemonsets/finalizers` `update`
/// lets its pods and revisions carry `blockOwnerDeletion` (see [`replicas`]).
pub(crate) fn daemonset() -> Rules {
    let mut rules = Rules::new()
        .grant("", &["pods"], &["create", "delete", "patch"])
        .grant(
            "apps",
            &["controllerrevisions"],
            &["create", "delete", "get", "patch"],
        )
        .grant("apps", &["daemonsets"], &["get"])
        .grant("apps", &["daemonsets/status"], &["patch"])
        .grant("apps", &["daemonsets/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// EndpointSlices: created, replaced and deleted (read from the cache, never live); each carries a
/// controller reference to its Service with `blockOwnerDeletion`, hence `services/finalizers`
/// `update`; a failed sync is reported as an Event on the Service.
pub(crate) fn endpointslice() -> Rules {
    let mut rules = Rules::new()
        .grant(
            "discovery.k8s.io",
            &["endpointslices"],
            &["create", "delete", "update"],
        )
        .grant("", &["services/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The endpoints controller creates, replaces and deletes Endpoints (read from the cache, never
/// live; no ownerReferences, so no finalizers grant) and reports a failed write as an Event.
pub(crate) fn endpoints() -> Rules {
    let mut rules = Rules::new().grant("", &["endpoints"], &["create", "delete", "update"]);
    rules.extend(&events());
    rules
}

/// The endpointslice-mirroring controller creates, replaces and deletes the EndpointSlices it
/// mirrors (read from the cache); each carries a controller reference to its Endpoints with
/// `blockOwnerDeletion`, hence `endpoints/finalizers` `update`; skipped addresses are reported as
/// Events on the Endpoints.
pub(crate) fn endpointslicemirroring() -> Rules {
    let mut rules = Rules::new()
        .grant(
            "discovery.k8s.io",
            &["endpointslices"],
            &["create", "delete", "update"],
        )
        .grant("", &["endpoints/finalizers"], &["update"]);
    rules.extend(&events());
    rules
}

/// The node-lifecycle controller merge-patches `nodes/status` (the kubelet's conditions set
/// Unknown, conditional on the resourceVersion) and `nodes` (its NoSchedule and NoExecute taints,
/// likewise conditional), reads a node's Lease live before marking it Unknown (the cache may lag) or
/// when the cache has none, strategic-merge-patches `pods/status` (a pod's Ready condition False)
/// and records Events.
pub(crate) fn nodelifecycle() -> Rules {
    let mut rules = Rules::new()
        .grant("", &["nodes", "nodes/status", "pods/status"], &["patch"])
        .grant("coordination.k8s.io", &["leases"], &["get"]);
    rules.extend(&events());
    rules
}

/// The node-ipam controller lists Nodes live (a quorum read before each allocation) and
/// strategic-merge-patches their `podCIDR`/`podCIDRs`; Events on Nodes (`CIDRNotAvailable`,
/// `CIDRAssignmentFailed`).
pub(crate) fn nodeipam() -> Rules {
    let mut rules = Rules::new().grant("", &["nodes"], &["list", "patch"]);
    rules.extend(&events());
    rules
}

/// The ttl controller strategic-merge-patches the `node.alpha.kubernetes.io/ttl` annotation of
/// Nodes; no Events.
pub(crate) fn ttl() -> Rules {
    Rules::new().grant("", &["nodes"], &["patch"])
}

/// The service-cidr controller adds and removes its finalizer with strategic merge patches of
/// ServiceCIDRs and server-side applies their `Ready` condition to `servicecidrs/status`; an Event
/// when that fails.
pub(crate) fn servicecidrs() -> Rules {
    let mut rules = Rules::new().grant(
        "networking.k8s.io",
        &["servicecidrs", "servicecidrs/status"],
        &["patch"],
    );
    rules.extend(&events());
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disruption_controller_writes_budget_status_and_reads_scales() {
        let rules = disruption();
        assert!(rules.allows("policy", "poddisruptionbudgets/status", "update"));
        assert!(!rules.allows("policy", "poddisruptionbudgets", "update"));
        let scale = rules
            .policy_rules()
            .into_iter()
            .find(|r| r.resources.as_deref() == Some(&["*/scale".to_owned()][..]));
        let scale = scale.expect("the scale of every kind, as upstream's role");
        assert_eq!(scale.api_groups.as_deref(), Some(&["*".to_owned()][..]));
        assert_eq!(scale.verbs, ["get"]);
        assert!(rules.allows("", "pods/status", "update"));
        assert!(!rules.allows("", "pods", "delete"));
    }

    #[test]
    fn the_endpoint_controllers_write_endpoints_and_their_mirrored_slices_only() {
        let rules = endpoints();
        for verb in ["create", "delete", "update"] {
            assert!(rules.allows("", "endpoints", verb), "{verb}");
        }
        assert!(!rules.allows("", "endpoints", "get"), "read from the cache");
        assert!(!rules.allows("discovery.k8s.io", "endpointslices", "create"));
        let mirroring = endpointslicemirroring();
        for verb in ["create", "delete", "update"] {
            assert!(mirroring.allows("discovery.k8s.io", "endpointslices", verb));
        }
        assert!(mirroring.allows("", "endpoints/finalizers", "update"));
        assert!(
            !mirroring.allows("", "endpoints", "update"),
            "never the Endpoints"
        );
    }

    #[test]
    fn the_serviceaccount_controller_only_creates_serviceaccounts() {
        let rules = serviceaccount();
        assert!(rules.allows("", "serviceaccounts", "create"));
        assert!(!rules.allows("", "serviceaccounts", "delete"));
        assert!(!rules.allows("", "namespaces", "get"));
    }

    #[test]
    fn the_replicaset_controller_manages_pods_and_writes_its_owners_status() {
        let rules = replicaset();
        for verb in ["create", "delete", "patch"] {
            assert!(rules.allows("", "pods", verb), "{verb} pods");
        }
        assert!(!rules.allows("", "pods", "update"));
        assert!(
            !rules.allows("", "pods", "list"),
            "lists come from the cache"
        );
        assert!(rules.allows("apps", "replicasets", "get"));
        assert!(rules.allows("apps", "replicasets/status", "patch"));
        assert!(rules.allows("apps", "replicasets/finalizers", "update"));
        assert!(!rules.allows("apps", "replicasets", "patch"));
        assert!(rules.allows("", "events", "create"));
        assert!(rules.allows("", "events", "patch"));
        assert!(
            !rules.allows("events.k8s.io", "events", "create"),
            "Events are core/v1 Events, as kube-controller-manager's"
        );
    }

    #[test]
    fn the_replicationcontroller_controller_writes_the_core_groups_owners() {
        let rules = replicationcontroller();
        assert!(rules.allows("", "replicationcontrollers", "get"));
        assert!(rules.allows("", "replicationcontrollers/status", "patch"));
        assert!(rules.allows("", "replicationcontrollers/finalizers", "update"));
        assert!(!rules.allows("apps", "replicasets", "get"));
        assert!(rules.allows("", "pods", "create"));
    }

    #[test]
    fn the_deployment_controller_manages_replicasets_and_its_status() {
        let rules = deployment();
        for verb in ["create", "delete", "get", "patch", "update"] {
            assert!(
                rules.allows("apps", "replicasets", verb),
                "{verb} replicasets"
            );
        }
        assert!(rules.allows("apps", "deployments", "get"));
        assert!(!rules.allows("apps", "deployments", "patch"));
        assert!(!rules.allows("apps", "deployments", "update"));
        assert!(rules.allows("apps", "deployments/status", "update"));
        assert!(rules.allows("apps", "deployments/finalizers", "update"));
        assert!(
            !rules.allows("", "pods", "create"),
            "pods are the ReplicaSets'"
        );
        assert!(rules.allows("", "events", "create"));
    }

    #[test]
    fn the_garbage_collector_reads_patches_and_deletes_anything_but_never_lists() {
        let rules = garbagecollector();
        for verb in ["get", "patch", "delete"] {
            assert!(rules.allows("example.com", "widgets", verb), "{verb}");
        }
        assert!(!rules.allows("example.com", "widgets", "list"));
        assert!(!rules.allows("example.com", "widgets", "update"));
        assert!(!rules.allows("", "pods", "create"));
    }

    #[test]
    fn the_job_controller_manages_pods_and_patches_its_jobs_status() {
        let rules = job();
        for verb in ["create", "delete", "list", "patch"] {
            assert!(rules.allows("", "pods", verb), "{verb} pods");
        }
        assert!(!rules.allows("", "pods", "update"));
        assert!(rules.allows("batch", "jobs", "get"));
        assert!(!rules.allows("batch", "jobs", "update"));
        assert!(rules.allows("batch", "jobs/status", "patch"));
        assert!(rules.allows("batch", "jobs/finalizers", "update"));
        assert!(rules.allows("", "events", "create"));
        assert!(rules.allows("", "events", "patch"));
    }

    #[test]
    fn the_namespace_controller_empties_and_finalizes_namespaces() {
        let rules = namespace();
        for verb in ["list", "delete", "deletecollection"] {
            assert!(rules.allows("example.com", "widgets", verb), "{verb}");
        }
        assert!(rules.allows("", "namespaces", "get"));
        assert!(rules.allows("", "namespaces/status", "update"));
        assert!(rules.allows("", "namespaces/finalize", "update"));
        assert!(!rules.allows("", "namespaces", "update"));
        assert!(!rules.allows("", "pods", "create"));
        assert!(!rules.allows("", "pods", "patch"));
    }

    #[test]
    fn the_ttl_after_finished_controller_reads_and_deletes_jobs_only() {
        let rules = ttlafterfinished();
        assert!(rules.allows("batch", "jobs", "get"));
        assert!(rules.allows("batch", "jobs", "delete"));
        assert!(!rules.allows("batch", "jobs", "patch"));
        assert!(!rules.allows("", "events", "create"), "it writes no Events");
        assert!(!rules.allows("", "pods", "delete"), "pods go by the GC");
    }

    #[test]
    fn the_cronjob_controller_manages_jobs_and_updates_its_cronjobs_status() {
        let rules = cronjob();
        for verb in ["create", "delete", "get"] {
            assert!(rules.allows("batch", "jobs", verb), "{verb} jobs");
        }
        assert!(
            !rules.allows("batch", "jobs", "list"),
            "jobs come with the item"
        );
        assert!(!rules.allows("batch", "jobs", "patch"));
        assert!(rules.allows("batch", "cronjobs", "get"));
        assert!(!rules.allows("batch", "cronjobs", "update"));
        assert!(rules.allows("batch", "cronjobs/status", "update"));
        assert!(rules.allows("batch", "cronjobs/finalizers", "update"));
        assert!(rules.allows("", "events", "create"));
        assert!(rules.allows("", "events", "patch"));
        assert!(
            !rules.allows("", "pods", "delete"),
            "pods go with their Jobs"
        );
    }

    #[test]
    fn the_node_lifecycle_controller_patches_nodes_and_pod_readiness_and_reads_leases() {
        let rules = nodelifecycle();
        for resource in ["nodes", "nodes/status", "pods/status"] {
            assert!(rules.allows("", resource, "patch"), "{resource}");
            assert!(!rules.allows("", resource, "update"), "{resource}");
        }
        assert!(rules.allows("coordination.k8s.io", "leases", "get"));
        assert!(!rules.allows("coordination.k8s.io", "leases", "update"));
        assert!(
            !rules.allows("", "pods", "delete"),
            "evictions are taint-eviction's"
        );
        assert!(rules.allows("", "events", "create"));
    }

    #[test]
    fn node_ipam_lists_and_patches_nodes_ttl_only_patches_and_service_cidr_patches_its_kind() {
        let ipam = nodeipam();
        assert!(ipam.allows("", "nodes", "list"));
        assert!(ipam.allows("", "nodes", "patch"));
        assert!(!ipam.allows("", "nodes", "update"));
        assert!(ipam.allows("", "events", "create"));
        let ttl = ttl();
        assert!(ttl.allows("", "nodes", "patch"));
        assert!(!ttl.allows("", "nodes", "list"));
        assert!(!ttl.allows("", "events", "create"), "it writes no Events");
        let cidrs = servicecidrs();
        for resource in ["servicecidrs", "servicecidrs/status"] {
            assert!(
                cidrs.allows("networking.k8s.io", resource, "patch"),
                "{resource}"
            );
        }
        assert!(!cidrs.allows("networking.k8s.io", "ipaddresses", "delete"));
    }

    #[test]
    fn the_pod_gc_reads_nodes_marks_pods_failed_and_deletes_them() {
        let rules = podgc();
        assert!(rules.allows("", "nodes", "get"));
        assert!(rules.allows("", "pods/status", "patch"));
        assert!(rules.allows("", "pods", "delete"));
        assert!(!rules.allows("", "pods", "patch"));
        assert!(!rules.allows("", "nodes", "delete"));
        assert!(!rules.allows("", "events", "create"), "it writes no Events");
    }

    #[test]
    fn the_taint_eviction_controller_marks_and_deletes_pods_and_records_events() {
        let rules = tainteviction();
        assert!(rules.allows("", "pods/status", "patch"));
        assert!(rules.allows("", "pods", "delete"));
        assert!(rules.allows("", "events", "create"));
        assert!(
            !rules.allows("", "pods", "list"),
            "pods come from the cache"
        );
        assert!(!rules.allows("", "pods", "patch"));
        assert!(
            !rules.allows("", "nodes", "patch"),
            "it never touches the node"
        );
    }
}
