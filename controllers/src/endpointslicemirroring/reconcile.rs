//! One sync of an Endpoints' mirrored slices (upstream `syncEndpoints` and `finalize`): decide from
//! the cached Endpoints, Service and slices whether to mirror at all, then create, update and delete
//! slices as [`super::desired::plan`] says. The fleet's read-your-writes replaces upstream's slice
//! tracker: the key is not dispatched again before the cache holds the last writes.

use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::{Endpoints, Service};
use flotilla_sdk::k8s_openapi::api::discovery::v1::EndpointSlice;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, DeleteParams, PostParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Reason, Request};

use super::desired::{CONTROLLER_NAME, MANAGED_BY, SERVICE_NAME, SKIP_MIRROR, desired, plan};
use crate::events;

/// The annotation of a leader-election record kept in an Endpoints: never mirrored.
const LEADER_ELECTION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The resource of EndpointSlices as a [`Reason`] names it.
const SLICES: &str = "discovery.k8s.io/v1/endpointslices";

/// What every sync of the controller on one worker shares: its flags.
#[derive(Debug)]
pub(crate) struct Shared {
    /// `--mirroring-max-endpoints-per-subset`, at least 1.
    pub(crate) max_per_subset: usize,
    /// `--mirroring-endpointslice-updates-batch-period`.
    pub(crate) batch_period: Duration,
}

/// Errors of one sync; the key is retried with the fleet's rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not be read.
    #[error("cannot read the cache for endpoints {key}")]
    Cache {
        /// `namespace/name`.
        key: String,
        /// Why.
        source: CacheError,
    },
    /// A write of a slice failed.
    #[error("cannot {verb} an EndpointSlice mirroring endpoints {key}")]
    Write {
        /// `create`, `update` or `delete`.
        verb: &'static str,
        /// `namespace/name` of the Endpoints.
        key: String,
        /// Why.
        source: kube::Error,
    },
}

/// Syncs the mirrored slices of one Endpoints.
///
/// # Errors
/// [`Error`] when the cache cannot be read or a write fails.
pub async fn reconcile(
    request: Request<Endpoints>,
    ctx: Context,
    shared: Arc<Shared>,
) -> Result<Action, Error> {
    let Some(namespace) = request.namespace() else {
        return Ok(Action::await_change());
    };
    let name = request.name();
    let key = request.key().to_owned();
    if !shared.batch_period.is_zero()
        && matches!(request.reason(), Reason::ObjectChanged { kind, .. } if kind == SLICES)
    {
        return Ok(Action::requeue(shared.batch_period));
    }
    let cache_err = |source| Error::Cache {
        key: key.clone(),
        source,
    };
    let query = CacheQuery::all().namespace(namespace).labels(&format!(
        "{SERVICE_NAME}={name},{MANAGED_BY}={CONTROLLER_NAME}"
    ));
    let existing: Vec<EndpointSlice> = ctx.cache().list(&query).await.map_err(cache_err)?;
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client(), namespace);

    let endpoints = request.object().filter(|e| should_mirror(e));
    let service: Option<Service> = match endpoints {
        Some(_) => ctx
            .cache()
            .get(Some(namespace), name)
            .await
            .map_err(cache_err)?,
        None => None,
    };
    // A Service with a selector has its Endpoints written by the endpoints controller.
    let selectorless = service.as_ref().is_some_and(|s| {
        s.spec
            .as_ref()
            .and_then(|spec| spec.selector.as_ref())
            .is_none_or(|sel| sel.is_empty())
    });
    let Some(endpoints) = endpoints.filter(|_| selectorless) else {
        for slice in &existing {
            delete(&slices, slice, &key).await?;
        }
        return Ok(Action::await_change());
    };

    let (groups, invalid, skipped) = desired(endpoints, shared.max_per_subset);
    if invalid > 0 {
        events::publish(
            &ctx,
            endpoints.as_ref(),
            EventType::Warning,
            "InvalidIPAddress",
            format!("Skipped {invalid} invalid IP addresses when mirroring to EndpointSlices"),
        );
    }
    if skipped > invalid {
        events::publish(
            &ctx,
            endpoints.as_ref(),
            EventType::Warning,
            "TooManyAddressesToMirror",
            format!(
                "A max of {} addresses can be mirrored to EndpointSlices per Endpoints subset. {skipped} addresses were skipped",
                shared.max_per_subset
            ),
        );
    }
    let plan = plan(endpoints, &groups, &existing, shared.max_per_subset);
    // No new slices for an Endpoints being deleted.
    if endpoints.metadata.deletion_timestamp.is_none() {
        for slice in &plan.create {
            match slices.create(&PostParams::default(), slice).await {
                Ok(_) => {}
                Err(kube::Error::Api(status))
                    if status.code == 403 && status.message.contains("being terminated") =>
                {
                    return Ok(Action::await_change());
                }
                Err(source) => {
                    return Err(Error::Write {
                        verb: "create",
                        key,
                        source,
                    });
                }
            }
        }
    }
    for slice in &plan.update {
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        slices
            .replace(&slice_name, &PostParams::default(), slice)
            .await
            .map_err(|source| Error::Write {
                verb: "update",
                key: key.clone(),
                source,
            })?;
    }
    for slice in &plan.delete {
        delete(&slices, slice, &key).await?;
    }
    Ok(Action::await_change())
}

/// Upstream `shouldMirror`: not labelled `skip-mirror: "true"`, no leader-election record.
fn should_mirror(endpoints: &Endpoints) -> bool {
    let skip = endpoints
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SKIP_MIRROR))
        .is_some_and(|v| v == "true");
    let leader = endpoints
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LEADER_ELECTION));
    !skip && !leader
}

async fn delete(api: &Api<EndpointSlice>, slice: &EndpointSlice, key: &str) -> Result<(), Error> {
    let name = slice.metadata.name.clone().unwrap_or_default();
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Write {
            verb: "delete",
            key: key.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn skip_mirror_and_leader_election_records_are_not_mirrored() {
        let plain: Endpoints = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
        assert!(should_mirror(&plain));
        let skip: Endpoints = serde_json::from_value(json!({"metadata": {"name": "a",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}}))
        .unwrap();
        assert!(!should_mirror(&skip));
        let not_true: Endpoints = serde_json::from_value(json!({"metadata": {"name": "a",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "false"}}}))
        .unwrap();
        assert!(should_mirror(&not_true));
        let leader: Endpoints = serde_json::from_value(json!({"metadata": {"name": "a",
            "annotations": {"control-plane.alpha.kubernetes.io/leader": "{}"}}}))
        .unwrap();
        assert!(!should_mirror(&leader));
    }
}
