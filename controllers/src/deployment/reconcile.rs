//! One sync of a Deployment (upstream `syncDeployment`): claim the ReplicaSets its selector matches,
//! then scale, roll out or only report, by its state and strategy. No expectations: the fleet holds the
//! key until the cache has seen this sync's writes, so the cache is read as it is.

use std::sync::Arc;

use flotilla_sdk::EventType;
use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::Api;

use super::super::claim::candidates;
use super::Error;
use super::adoption::claim_replica_sets;
use super::spec::{self, RECREATE};
use super::sync::Sync;
use flotilla_sdk::{Action, Context, Request};

/// Syncs one Deployment.
///
/// # Errors
/// [`Error`] when reading, claiming or writing fails; the key is retried.
pub async fn reconcile(request: Request<Deployment>, ctx: Context) -> Result<Action, Error> {
    let Some(d) = request.object() else {
        // Its ReplicaSets go with it through their owner references (garbage collection).
        return Ok(Action::await_change());
    };
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = d.namespace().ok_or_else(incomplete)?;
    d.uid().ok_or_else(incomplete)?;
    let selector = match d
        .spec
        .as_ref()
        .map(|s| LabelSelector::from_label_selector(&s.selector))
    {
        Some(Ok(selector)) => selector,
        Some(Err(err)) => {
            // Retrying cannot fix the spec; its next edit re-triggers the sync (as upstream).
            tracing::warn!(error = %err, key = request.key(), "invalid selector");
            return Ok(Action::await_change());
        }
        None => return Err(incomplete()),
    };
    if selector.is_everything() {
        return selecting_all(&ctx, d.clone()).await;
    }

    let replica_sets: Api<ReplicaSet> = Api::namespaced(ctx.client(), &namespace);
    let owned = ctx.prefetched::<ReplicaSet>().map_err(Error::Prefetched)?;
    let deleting = d.metadata.deletion_timestamp.is_some();
    let matching = candidates(&ctx, &namespace, &selector, deleting).await;
    let rss = claim_replica_sets(&replica_sets, d, owned, matching, &selector).await?;

    let mut sync = Sync::new(ctx, d.clone(), rss);
    if d.metadata.deletion_timestamp.is_some() {
        return sync.status_only().await;
    }
    sync.check_paused_conditions();
    if spec::paused(d) || sync.is_scaling_event().await? {
        return sync.scale_only().await;
    }
    if spec::strategy(d) == RECREATE {
        sync.recreate().await
    } else {
        sync.rolling().await
    }
}

/// A Deployment selecting every pod is refused, as upstream does: a warning event and, for a new
/// generation, the observed generation.
async fn selecting_all(ctx: &Context, d: Arc<Deployment>) -> Result<Action, Error> {
    let mut sync = Sync::new(ctx.clone(), d.clone(), Vec::new());
    let note =
        "This deployment is selecting all pods. A non-empty selector is required.".to_owned();
    sync.publish(EventType::Warning, "SelectingAll", note);
    let mut status = d.status.clone().unwrap_or_default();
    if status.observed_generation < d.metadata.generation {
        status.observed_generation = d.metadata.generation;
        sync.write_status(status).await?;
    }
    Ok(Action::await_change())
}
