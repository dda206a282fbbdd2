//! One ServiceCIDR (upstream `sync`): a live one gets the finalizer and `Ready` `True`; a deleting
//! one loses the finalizer once nothing would be orphaned and the grace period has passed, or shows
//! `Ready` `False` `Terminating` while IPAddresses still need it.

use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Request};
use serde_json::{Value, json};

use super::orphans::orphan;

/// The finalizer (upstream `ServiceCIDRProtectionFinalizer`).
pub const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";
/// The condition type.
pub const READY: &str = "Ready";
/// The message of `Ready` `True`.
pub const READY_MESSAGE: &str = "Kubernetes Service CIDR is ready";
/// The reason of `Ready` `False` while IPAddresses block the deletion.
pub const TERMINATING: &str = "Terminating";
/// Its message.
pub const TERMINATING_MESSAGE: &str = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";
/// The field manager of its status writes (upstream's controller name).
pub const FIELD_MANAGER: &str = "service-cidr-controller";
/// How long after its deletion began a ServiceCIDR keeps its finalizer at least (upstream
/// `deletionGracePeriod`): kube-apiserver's allocators must have seen the deletion first.
pub const DELETION_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Errors of one ServiceCIDR; the key is retried with the fleet's rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not list ServiceCIDRs or IPAddresses.
    #[error("cannot read the cache")]
    Cache(#[source] CacheError),
    /// A write of the ServiceCIDR failed.
    #[error("cannot {what} of servicecidr {name}")]
    Write {
        /// What was written.
        what: &'static str,
        /// The ServiceCIDR.
        name: String,
        /// Why.
        source: kube::Error,
    },
}

/// Syncs one ServiceCIDR.
///
/// # Errors
/// [`Error`] when the cache cannot be read or a write fails.
pub async fn reconcile(request: Request<ServiceCIDR>, ctx: Context) -> Result<Action, Error> {
    let Some(cidr) = request.object() else {
        return Ok(Action::await_change());
    };
    let name = request.name().to_owned();
    let api: Api<ServiceCIDR> = Api::all(ctx.client());
    let has_finalizer = cidr
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER));
    if let Some(deleted_at) = &cidr.metadata.deletion_timestamp {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let cache = ctx.cache();
        let all: Vec<ServiceCIDR> = cache.list(&CacheQuery::all()).await.map_err(Error::Cache)?;
        let ips: Vec<IPAddress> = cache.list(&CacheQuery::all()).await.map_err(Error::Cache)?;
        if let Some(ip) = orphan(cidr, &all, &ips) {
            tracing::info!(servicecidr = %name, ip = ?ip.metadata.name, "deleting ServiceCIDR blocked by IP address");
            if !has_condition(cidr, "False", Some(TERMINATING), TERMINATING_MESSAGE) {
                let condition = condition("False", Some(TERMINATING), TERMINATING_MESSAGE);
                apply_status(&api, &name, condition).await?;
            }
            // An IPAddress or ServiceCIDR event re-evaluates it.
            return Ok(Action::await_change());
        }
        let since = Timestamp::now().duration_since(deleted_at.0);
        let elapsed = Duration::try_from(since).unwrap_or_default();
        if let Some(left) = DELETION_GRACE_PERIOD
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())
        {
            return Ok(Action::requeue(left));
        }
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}});
        return patch_main(&api, &name, &patch, "remove the finalizer").await;
    }
    if !has_finalizer {
        let patch = json!({"metadata": {"finalizers": [FINALIZER]}});
        patch_main(&api, &name, &patch, "add the finalizer").await?;
    }
    if !has_condition(cidr, "True", None, READY_MESSAGE) {
        let condition = condition("True", None, READY_MESSAGE);
        if let Err(err) = apply_status(&api, &name, condition).await {
            ctx.recorder().event(
                cidr.as_ref(),
                EventType::Warning,
                "KubernetesServiceCIDRError",
                "The ServiceCIDR Status can not be set to Ready=True",
            );
            return Err(err);
        }
    }
    Ok(Action::await_change())
}

/// Whether the ServiceCIDR's `Ready` condition already says this.
fn has_condition(cidr: &ServiceCIDR, status: &str, reason: Option<&str>, message: &str) -> bool {
    cidr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == READY))
        .is_some_and(|c| {
            c.status == status
                && (reason.is_none() || Some(c.reason.as_str()) == reason)
                && c.message == message
        })
}

/// The `Ready` condition as upstream applies it (no reason when `True`), transitioning now.
fn condition(status: &str, reason: Option<&str>, message: &str) -> Value {
    let mut condition = json!({
        "type": READY,
        "status": status,
        "message": message,
        "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    if let Some(reason) = reason {
        condition["reason"] = json!(reason);
    }
    condition
}

/// Server-side applies the status with `condition`, as the controller's field manager, forced.
async fn apply_status(api: &Api<ServiceCIDR>, name: &str, condition: Value) -> Result<(), Error> {
    let body = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "status": {"conditions": [condition]},
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api.patch_status(name, &params, &Patch::Apply(&body)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Write {
            what: "set the status",
            name: name.to_owned(),
            source,
        }),
    }
}

/// A strategic merge patch of the ServiceCIDR's metadata; gone meanwhile is fine, as upstream.
async fn patch_main(
    api: &Api<ServiceCIDR>,
    name: &str,
    patch: &Value,
    what: &'static str,
) -> Result<Action, Error> {
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(source) => Err(Error::Write {
            what,
            name: name.to_owned(),
            source,
        }),
    }
}
