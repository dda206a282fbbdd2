//! One sync of a DaemonSet (upstream `syncDaemonSet`): claim its pods and revisions, settle the
//! current revision, create and delete pods toward one per eligible node, advance a RollingUpdate,
//! trim the history, write the status. No expectations: the fleet holds the key until the cache has
//! seen this sync's writes, so the rolling update runs only in a sync that had nothing else to do
//! (upstream's "expectations satisfied").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod};
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, ContextError, EventType, Request};

use super::super::claim::{candidates, claim};
use super::super::controller_ref::{ClaimError, adopt, recheck_owner, release};
use super::super::events::publish;
use super::backoff::FailedPodBackoff;
use super::manage::{self, Daemon};
use super::nodes::{Fit, fit};
use super::pods::{self, available_at, new_pod, template_generation};
use super::revisions::{self, RevisionError};
use super::rolling::{self, RollingError, Rollout};
use super::status;

/// At most this many creates and as many deletes per sync (upstream `BurstReplicas`).
const BURST: usize = 250;

/// Errors of one sync; the key is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The DaemonSet from the cache lacks a uid or namespace.
    #[error("{0} lacks a uid or namespace")]
    Incomplete(String),
    /// The objects shipped with the item are unreadable.
    #[error("cannot read prefetched objects")]
    Prefetched(#[source] ContextError),
    /// Listing the nodes from the cache failed.
    #[error("cannot list nodes")]
    Nodes(#[source] CacheError),
    /// Adopting or releasing a pod or revision failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// Keeping the history failed.
    #[error(transparent)]
    Revisions(#[from] RevisionError),
    /// The rolling update cannot be planned.
    #[error(transparent)]
    Rolling(#[from] RollingError),
    /// Creating or deleting pods failed (each failure is also an Event).
    #[error("{failed} pod creates or deletes failed, the first: {first}")]
    Pods {
        /// How many failed.
        failed: usize,
        /// The first error.
        first: String,
    },
    /// Writing the status failed.
    #[error("cannot update the status")]
    Status(#[source] kube::Error),
}

/// Syncs one DaemonSet; `backoff` is the worker's memory of failed pods per node.
///
/// # Errors
/// [`Error`] when a read, claim or write fails.
pub async fn reconcile(
    request: Request<DaemonSet>,
    ctx: Context,
    backoff: Arc<FailedPodBackoff>,
) -> Result<Action, Error> {
    let Some(ds) = request.object() else {
        // Its pods and revisions go with it through their owner references.
        return Ok(Action::await_change());
    };
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = ds.namespace().ok_or_else(incomplete)?;
    let uid = ds.uid().ok_or_else(incomplete)?;
    let selector = match ds
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
        None => return Ok(Action::await_change()),
    };
    if selector.is_everything() {
        let note = "This daemon set is selecting all pods. A non-empty selector is required.";
        publish(
            &ctx,
            ds.as_ref(),
            EventType::Warning,
            "SelectingAll",
            note.to_owned(),
        );
        return Ok(Action::await_change());
    }
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }

    let nodes: Vec<Node> = ctx
        .cache()
        .list(&CacheQuery::all())
        .await
        .map_err(Error::Nodes)?;
    let pods_api: Api<Pod> = Api::namespaced(ctx.client(), &namespace);
    let revisions_api: Api<ControllerRevision> = Api::namespaced(ctx.client(), &namespace);
    let ds_api: Api<DaemonSet> = Api::namespaced(ctx.client(), &namespace);

    let mut rechecked = false;
    let pods = claimed::<Pod>(
        &ctx,
        &pods_api,
        &ds_api,
        ds.as_ref(),
        &namespace,
        &uid,
        &selector,
        &mut rechecked,
    )
    .await?;
    let owned_revisions = claimed::<ControllerRevision>(
        &ctx,
        &revisions_api,
        &ds_api,
        ds.as_ref(),
        &namespace,
        &uid,
        &selector,
        &mut rechecked,
    )
    .await?;
    let history = revisions::construct(
        &revisions_api,
        &pods_api,
        ds.as_ref(),
        owned_revisions,
        &pods,
    )
    .await?;
    if let Some(count) = history.raised_collision_count {
        ds_api
            .patch_status(
                request.name(),
                &PatchParams::default(),
                &Patch::Merge(status::collision_patch(count)),
            )
            .await
            .map_err(Error::Status)?;
    }
    let hash = revisions::hash_of(&history.current);
    let generation = template_generation(ds.as_ref());
    let template_spec = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    let fits: BTreeMap<String, Fit> = nodes
        .iter()
        .map(|n| (n.name_any(), fit(n, &template_spec)))
        .collect();
    let by_node = pods::by_node(&pods, false);
    let min_ready_seconds = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let now = Timestamp::now();

    let daemon = Daemon {
        uid: &uid,
        namespace: &namespace,
        hash: &hash,
        allows_surge: rolling::allows_surge(ds.as_ref()),
        min_ready_seconds,
    };
    let plan = manage::plan(&daemon, &fits, &by_node, &backoff, now, Instant::now());
    for note in &plan.notes {
        let type_ = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(&ctx, ds.as_ref(), type_, note.reason, note.message.clone());
    }
    let writer = PodWriter {
        ctx: &ctx,
        api: &pods_api,
        ds: ds.as_ref(),
        hash: &hash,
        generation,
    };
    let mut outcome = writer.sync(&plan.create_on, &plan.delete).await;
    if outcome.writes == 0 && outcome.errors.is_empty() && rolling::is_rolling(ds.as_ref()) {
        let rollout = Rollout {
            hash: &hash,
            generation,
            min_ready_seconds,
        };
        let step = rolling::step(ds.as_ref(), &rollout, &fits, &by_node, now)?;
        outcome = writer.sync(&step.create_on, &step.delete).await;
    }

    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .map_or(10, |l| usize::try_from(l).unwrap_or(0));
    for name in revisions::to_clean_up(&history.old, limit, &pods::by_node(&pods, true)) {
        revisions::delete(&revisions_api, &name).await?;
    }

    let counts = status::count(&fits, &by_node, &hash, generation, min_ready_seconds, now);
    let observed = ds.metadata.generation;
    if !status::unchanged(ds.status.as_ref(), &counts, observed) {
        ds_api
            .patch_status(
                request.name(),
                &PatchParams::default(),
                &Patch::Merge(status::patch(&counts, observed)),
            )
            .await
            .map_err(Error::Status)?;
    }
    if let Some(first) = outcome.errors.first() {
        return Err(Error::Pods {
            failed: outcome.errors.len(),
            first: first.clone(),
        });
    }
    let wake = pods
        .iter()
        .filter_map(|p| available_at(p, min_ready_seconds, now))
        .min()
        .map(|at| {
            // Availability is judged strictly after the moment; a little later it holds.
            Duration::try_from(at.duration_since(now)).unwrap_or_default()
                + Duration::from_millis(100)
        });
    match [plan.requeue_after, wake].into_iter().flatten().min() {
        Some(after) => Ok(Action::requeue(after)),
        None => Ok(Action::await_change()),
    }
}

/// The objects of kind `T` the DaemonSet claims (upstream `ClaimPods`/`ClaimControllerRevisions`):
/// its own that match, plus matching orphans it adopts after a live re-check of the DaemonSet; its
/// own that stopped matching are released.
#[allow(clippy::too_many_arguments)]
async fn claimed<T>(
    ctx: &Context,
    api: &Api<T>,
    ds_api: &Api<DaemonSet>,
    ds: &DaemonSet,
    namespace: &str,
    uid: &str,
    selector: &LabelSelector,
    rechecked: &mut bool,
) -> Result<Vec<T>, Error>
where
    T: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    T::Scope: flotilla_sdk::KindScope,
{
    let owned = ctx.prefetched::<T>().map_err(Error::Prefetched)?;
    let matching: Vec<T> = candidates(ctx, namespace, selector, false).await;
    let claims = claim(owned, matching, selector, false);
    for object in &claims.release {
        release(api, object, uid).await?;
    }
    let mut mine = claims.keep;
    if !claims.adopt.is_empty() && !*rechecked {
        recheck_owner(ds_api, ds).await?;
        *rechecked = true;
    }
    for object in claims.adopt {
        mine.extend(adopt(api, object, ds).await?);
    }
    Ok(mine)
}

/// Upstream `syncNodes`: creates pods for nodes (slow start: batches of 1, 2, 4, … stopping at the
/// first batch with a failure) and deletes pods, at most [`BURST`] of each, with an Event for each.
struct PodWriter<'a> {
    ctx: &'a Context,
    api: &'a Api<Pod>,
    ds: &'a DaemonSet,
    hash: &'a str,
    generation: Option<i64>,
}

/// What a [`PodWriter::sync`] did.
#[derive(Debug, Default)]
struct Outcome {
    /// Creates and deletes that succeeded.
    writes: usize,
    /// The failures' messages.
    errors: Vec<String>,
}

impl PodWriter<'_> {
    async fn sync(&self, create_on: &[String], delete: &[String]) -> Outcome {
        let mut outcome = Outcome::default();
        let create_on = &create_on[..create_on.len().min(BURST)];
        let mut position = 0;
        let mut batch = 1;
        while position < create_on.len() {
            let end = (position + batch).min(create_on.len());
            let results = futures::future::join_all(
                create_on[position..end]
                    .iter()
                    .map(|node| self.create(node)),
            )
            .await;
            let before = outcome.errors.len();
            for result in results {
                match result {
                    Ok(()) => outcome.writes += 1,
                    Err(err) => outcome.errors.push(err),
                }
            }
            if outcome.errors.len() > before {
                // The rest would likely fail alike (quota, admission); the next sync tries again.
                break;
            }
            position = end;
            batch *= 2;
        }
        let delete = &delete[..delete.len().min(BURST)];
        let results = futures::future::join_all(delete.iter().map(|name| self.delete(name))).await;
        for result in results {
            match result {
                Ok(true) => outcome.writes += 1,
                Ok(false) => {}
                Err(err) => outcome.errors.push(err),
            }
        }
        outcome
    }

    async fn create(&self, node: &str) -> Result<(), String> {
        let Some(pod) = new_pod(self.ds, node, self.hash, self.generation) else {
            return Err("the daemonset has no uid".to_owned());
        };
        match self.api.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                let note = format!("Created pod: {}", created.name_any());
                publish(
                    self.ctx,
                    self.ds,
                    EventType::Normal,
                    "SuccessfulCreate",
                    note,
                );
                Ok(())
            }
            Err(err) => {
                let note = format!("Error creating: {err}");
                publish(self.ctx, self.ds, EventType::Warning, "FailedCreate", note);
                Err(err.to_string())
            }
        }
    }

    /// Deletes pod `name`: `Ok(true)` when deleted, `Ok(false)` when already gone.
    async fn delete(&self, name: &str) -> Result<bool, String> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                let note = format!("Deleted pod: {name}");
                publish(
                    self.ctx,
                    self.ds,
                    EventType::Normal,
                    "SuccessfulDelete",
                    note,
                );
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(err) => {
                let note = format!("Error deleting: {err}");
                publish(self.ctx, self.ds, EventType::Warning, "FailedDelete", note);
                Err(err.to_string())
            }
        }
    }
}
