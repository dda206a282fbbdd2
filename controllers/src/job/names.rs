//! The names the job controller shares with the API and with kube-controller-manager: the tracking
//! finalizer, the labels and annotations on a Job's pods, and its condition types, reasons and
//! messages, spelled exactly as upstream's `batch/v1` constants.

/// The finalizer every pod of a Job carries until the controller has recorded it in the Job's status
/// (upstream `batch.JobTrackingFinalizer`): a finished pod cannot vanish before it is counted.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// The annotation (and, since the `PodIndexLabel` feature, the label) holding an Indexed Job pod's
/// completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The environment variable an Indexed Job's containers read their index from.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// `Complete`: the Job's pods succeeded as many times as it asked.
pub const COMPLETE: &str = "Complete";
/// `Failed`: the Job gave up.
pub const FAILED: &str = "Failed";
/// `Suspended`: the Job's `spec.suspend` is (True) or was (False) honoured.
pub const SUSPENDED: &str = "Suspended";
/// `FailureTarget`: the Job will be `Failed` once its remaining pods are accounted for.
pub const FAILURE_TARGET: &str = "FailureTarget";
/// `SuccessCriteriaMet`: the Job will be `Complete` once its remaining pods are accounted for.
pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";

/// Reason of `SuccessCriteriaMet` and `Complete` when `completions` pods succeeded.
pub const COMPLETIONS_REACHED: &str = "CompletionsReached";
/// Message of `SuccessCriteriaMet` and `Complete` when `completions` pods succeeded.
pub const COMPLETIONS_REACHED_MESSAGE: &str = "Reached expected number of succeeded pods";
/// Reason of `FailureTarget` and `Failed` once more pods failed than `backoffLimit` allows.
pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
/// Message of [`BACKOFF_LIMIT_EXCEEDED`].
pub const BACKOFF_LIMIT_EXCEEDED_MESSAGE: &str = "Job has reached the specified backoff limit";
/// Reason of `FailureTarget` and `Failed` once the Job ran longer than `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Message of [`DEADLINE_EXCEEDED`].
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "Job was active longer than specified deadline";
/// Reason of `FailureTarget` and `Failed` when a `podFailurePolicy` rule with action `FailJob` matched.
pub const POD_FAILURE_POLICY: &str = "PodFailurePolicy";
/// Reason of `SuccessCriteriaMet` and `Complete` when a `successPolicy` rule matched.
pub const SUCCESS_POLICY: &str = "SuccessPolicy";
/// Reason of `FailureTarget` and `Failed` once an index failed and every index is done.
pub const FAILED_INDEXES: &str = "FailedIndexes";
/// Message of [`FAILED_INDEXES`].
pub const FAILED_INDEXES_MESSAGE: &str = "Job has failed indexes";
/// Reason of `FailureTarget` and `Failed` once more indexes failed than `maxFailedIndexes`.
pub const MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
/// Message of [`MAX_FAILED_INDEXES_EXCEEDED`].
pub const MAX_FAILED_INDEXES_EXCEEDED_MESSAGE: &str =
    "Job has exceeded the specified maximal number of failed indexes";
/// `spec.managedBy` of the Jobs this controller syncs (or none): upstream's built-in controller.
pub const MANAGED_BY_US: &str = "kubernetes.io/job-controller";
