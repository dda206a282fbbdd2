//! The label keys, annotation-free constants and strategy names the StatefulSet controller shares
//! with upstream (`k8s.io/api/apps/v1`).

/// The pod label naming the ControllerRevision a pod was made from (`StatefulSetRevisionLabel`,
/// `controller-revision-hash`, the key a DaemonSet's revisions carry their hash in).
pub const REVISION_LABEL: &str = super::super::history::DAEMONSET_HASH_LABEL;

/// The pod label carrying the pod's own name, for a per-pod Service (`StatefulSetPodNameLabel`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// The pod label carrying the pod's ordinal (`PodIndexLabel`, on by default since v1.28).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// `spec.podManagementPolicy` that creates and deletes pods without waiting for one another.
pub const PARALLEL: &str = "Parallel";

/// `spec.updateStrategy.type` that leaves replacing pods to whoever deletes them.
pub const ON_DELETE: &str = "OnDelete";

/// A retention policy value that deletes the claims.
pub const DELETE: &str = "Delete";
