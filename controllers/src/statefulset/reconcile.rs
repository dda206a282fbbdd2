//! One sync of a StatefulSet (upstream `sync` and `UpdateStatefulSet`): claim its pods, resolve its
//! revisions, create, repair and delete pods in the order [`super::plan`] decides, write the status,
//! trim the revision history. No expectations: the fleet holds the key until its cache has seen this
//! sync's writes, so the next sync sees the pods and claims this one made.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_sdk::apimachinery::LabelSelector;
use flotilla_sdk::k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use flotilla_sdk::k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams};
use flotilla_sdk::kube::{self, ResourceExt};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, ContextError, Request};
use futures::future::join_all;

use super::super::claim::{candidates, claim};
use super::super::controller_ref::{ClaimError, adopt, recheck_owner, release};
use super::claims::Retention;
use super::identity::{identity_matches, new_pod, storage_matches};
use super::names::{ON_DELETE, PARALLEL};
use super::ordinals::{OrdinalRange, member_ordinal, pod_name};
use super::plan::{Input, Phase, Step, Strategy, plan};
use super::pod_control::{PodControl, PodControlError};
use super::pods::{available_at, revision};
use super::revision_control::{self, RevisionControlError, Revisions};
use super::revisions::{RevisionError, template_of};
use super::status::Status;

/// The most replicas a set may ask for here: far beyond any real StatefulSet, low enough that the
/// per-ordinal slots of one sync stay a few megabytes.
const MAX_REPLICAS: i32 = 1_000_000;

/// Errors of one sync; each retries the key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The set from the cache lacks a uid or namespace, so nothing can point at it.
    #[error("{0} lacks a uid or namespace")]
    Incomplete(String),
    /// The owned pods shipped with the item are unreadable.
    #[error("cannot read prefetched pods")]
    Prefetched(#[source] ContextError),
    /// The cache could not list the namespace's claims.
    #[error("cannot list the persistent volume claims")]
    Claims(#[source] CacheError),
    /// Adopting or releasing a pod failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// Keeping the revisions failed.
    #[error(transparent)]
    Revisions(#[from] RevisionControlError),
    /// A revision holds no usable template.
    #[error(transparent)]
    Revision(#[from] RevisionError),
    /// A write on a pod or claim failed.
    #[error(transparent)]
    Pods(#[from] PodControlError),
    /// Writing the status failed.
    #[error("cannot update the status")]
    Status(#[source] kube::Error),
}

/// Syncs one StatefulSet.
///
/// # Errors
/// [`Error`] when a read or write fails; the key is retried with backoff.
pub async fn reconcile(request: Request<StatefulSet>, ctx: Context) -> Result<Action, Error> {
    let Some(set) = request.object() else {
        // Its pods and revisions go with it through their owner references.
        return Ok(Action::await_change());
    };
    let set = set.as_ref();
    let incomplete = || Error::Incomplete(request.key().to_owned());
    let namespace = set.namespace().ok_or_else(incomplete)?;
    let uid = set.uid().ok_or_else(incomplete)?;
    let selector = set
        .spec
        .as_ref()
        .map(|s| LabelSelector::from_label_selector(&s.selector))
        .transpose();
    let selector = match selector {
        Ok(Some(selector)) => selector,
        Ok(None) => LabelSelector::nothing(),
        Err(err) => {
            // Retrying cannot fix the spec; the next edit of the set re-triggers it (as upstream).
            tracing::warn!(error = %err, key = request.key(), "invalid selector");
            return Ok(Action::await_change());
        }
    };
    let replicas = OrdinalRange::of(set).replicas;
    if replicas > MAX_REPLICAS {
        // A slot per replica is held in memory; a spec this large would exhaust a worker, not make
        // pods. The next edit of the set re-triggers it.
        tracing::warn!(
            key = request.key(),
            replicas,
            "too many replicas; the set is left alone"
        );
        return Ok(Action::await_change());
    }
    let revisions_api: Api<ControllerRevision> = Api::namespaced(ctx.client(), &namespace);
    let revisions = revision_control::resolve(&ctx, set, &selector, &revisions_api).await?;

    let pods_api: Api<Pod> = Api::namespaced(ctx.client(), &namespace);
    let pods = claim_pods(&ctx, set, &selector, &uid, &namespace, &pods_api).await?;

    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client(), &namespace);
    let claims = cached_claims(&ctx, set, &namespace).await?;
    let control = PodControl {
        ctx: &ctx,
        set,
        range: OrdinalRange::of(set),
        policy: Retention::of(set),
        claims: &claims,
        pods_api,
        claims_api,
    };
    let sync = Sync {
        set,
        control: &control,
        revisions: &revisions,
        now: Timestamp::now(),
    };
    let (status, result) = sync.run(&pods).await;

    // The status is written even when a step failed, as upstream.
    let previous = Status::of(set);
    let status_result = if status != previous {
        let sets: Api<StatefulSet> = Api::namespaced(ctx.client(), &namespace);
        sets.patch_status(
            request.name(),
            &PatchParams::default(),
            &Patch::Merge(status.patch()),
        )
        .await
        .map(|_| ())
        .map_err(Error::Status)
    } else {
        Ok(())
    };
    let pod_revisions: BTreeSet<&str> = pods.iter().map(revision).collect();
    let truncated =
        revision_control::truncate(&revisions_api, set, &revisions, &pod_revisions).await;
    result?;
    status_result?;
    truncated?;

    // Nothing announces that a ready pod became available: look again when the first one does.
    let min_ready = min_ready_seconds(set);
    let now = Timestamp::now();
    let next = pods
        .iter()
        .filter_map(|p| available_at(p, min_ready, now))
        .min();
    Ok(match next {
        Some(at) => {
            let wait = at.duration_since(now).unsigned_abs();
            Action::requeue(wait.max(Duration::from_millis(10)))
        }
        None => Action::await_change(),
    })
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// The set's pods (upstream `getPodsForStatefulSet`): its own pods that still match the selector and
/// are named `<set>-<ordinal>`; those that no longer do are released, matching orphans so named are
/// adopted.
async fn claim_pods(
    ctx: &Context,
    set: &StatefulSet,
    selector: &LabelSelector,
    uid: &str,
    namespace: &str,
    pods_api: &Api<Pod>,
) -> Result<Vec<Pod>, Error> {
    let set_name = set.name_any();
    let member = |p: &Pod| member_ordinal(&set_name, &p.name_any()).is_some();
    let deleting = set.metadata.deletion_timestamp.is_some();
    let owned = ctx.prefetched::<Pod>().map_err(Error::Prefetched)?;
    let (owned, foreign): (Vec<Pod>, Vec<Pod>) = owned.into_iter().partition(member);
    let matching: Vec<Pod> = candidates(ctx, namespace, selector, deleting)
        .await
        .into_iter()
        .filter(member)
        .collect();
    let claims = claim(owned, matching, selector, deleting);
    if !deleting {
        for pod in foreign
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            release(pods_api, pod, uid).await?;
        }
    }
    for pod in &claims.release {
        release(pods_api, pod, uid).await?;
    }
    let mut mine = claims.keep;
    if !claims.adopt.is_empty() {
        let sets: Api<StatefulSet> = Api::namespaced(ctx.client(), namespace);
        recheck_owner(&sets, set).await?;
    }
    for pod in claims.adopt {
        mine.extend(adopt(pods_api, pod, set).await?);
    }
    Ok(mine)
}

/// The claims of the namespace labelled with the set's matchLabels (every claim the set makes
/// carries them), by name.
async fn cached_claims(
    ctx: &Context,
    set: &StatefulSet,
    namespace: &str,
) -> Result<BTreeMap<String, PersistentVolumeClaim>, Error> {
    let labels: Vec<String> = set
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut query = CacheQuery::all().namespace(namespace);
    if !labels.is_empty() {
        query = query.labels(&labels.join(","));
    }
    let listed: Vec<PersistentVolumeClaim> =
        ctx.cache().list(&query).await.map_err(Error::Claims)?;
    Ok(listed.into_iter().map(|c| (c.name_any(), c)).collect())
}

/// The strategy of `set`, with `maxUnavailable` resolved against `replicas`.
fn strategy(set: &StatefulSet, replicas: i32) -> Strategy {
    let strategy = set.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some(ON_DELETE) {
        return Strategy::OnDelete;
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let max_unavailable = rolling
        .and_then(|r| r.max_unavailable.as_ref())
        .map(|m| resolve_max_unavailable(m, replicas));
    Strategy::RollingUpdate {
        partition: rolling.and_then(|r| r.partition).unwrap_or(0).max(0),
        max_unavailable,
        explicit: rolling.is_some(),
    }
}

/// `maxUnavailable` as a count: a percentage of `replicas` rounded down, at least 1 (upstream
/// `getStatefulSetMaxUnavailable`).
fn resolve_max_unavailable(value: &IntOrString, replicas: i32) -> i32 {
    let n = match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map_or(1, |p| {
                i32::try_from(p * i64::from(replicas) / 100).unwrap_or(i32::MAX)
            }),
    };
    n.max(1)
}

/// One sync's state.
struct Sync<'a> {
    set: &'a StatefulSet,
    control: &'a PodControl<'a>,
    revisions: &'a Revisions,
    now: Timestamp,
}

impl Sync<'_> {
    /// Runs the plan; the status to write, and the first failure.
    async fn run(&self, pods: &[Pod]) -> (Status, Result<(), Error>) {
        let set = self.set;
        let range = self.control.range;
        let min_ready = min_ready_seconds(set);
        let mut status = Status {
            observed_generation: set.metadata.generation.unwrap_or(0),
            current_revision: self.revisions.current.name_any(),
            update_revision: self.revisions.update.name_any(),
            collision_count: self.revisions.collision_count,
            ..Status::default()
        };
        let set_name = set.name_any();
        let mut replicas: Vec<Option<&Pod>> =
            vec![None; usize::try_from(range.replicas).unwrap_or(0)];
        let mut condemned: Vec<(i32, &Pod)> = Vec::new();
        for pod in pods {
            let Some(ordinal) = member_ordinal(&set_name, &pod.name_any()) else {
                continue;
            };
            match range.slot(ordinal) {
                Some(slot) => replicas[slot] = Some(pod),
                None => condemned.push((ordinal, pod)),
            }
        }
        condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
        let counted: Vec<&Pod> = replicas
            .iter()
            .flatten()
            .copied()
            .chain(condemned.iter().map(|(_, p)| *p))
            .collect();
        status.count(&counted, min_ready, self.now);

        let stale_claims = replicas
            .iter()
            .enumerate()
            .map(|(slot, pod)| {
                let ordinal = range.ordinal(slot);
                pod.is_none()
                    && self
                        .control
                        .claims_stale(&pod_name(&set_name, ordinal), ordinal)
            })
            .collect();
        let conforms = replicas
            .iter()
            .enumerate()
            .map(|(slot, pod)| {
                pod.is_none_or(|p| {
                    identity_matches(set, p)
                        && storage_matches(set, p)
                        && self.control.claims_match(p, range.ordinal(slot))
                })
            })
            .collect();
        let condemned_claims_ok = condemned
            .iter()
            .map(|(ordinal, pod)| self.control.claims_match(pod, *ordinal))
            .collect();
        let strategy = strategy(set, range.replicas);
        let previous_current = set
            .status
            .as_ref()
            .and_then(|s| s.current_replicas)
            .unwrap_or(0);
        let input = Input {
            range,
            replicas,
            condemned,
            monotonic: set
                .spec
                .as_ref()
                .and_then(|s| s.pod_management_policy.as_deref())
                != Some(PARALLEL),
            min_ready_seconds: min_ready,
            now: self.now,
            update_revision: &status.update_revision,
            current_revision: &status.current_revision,
            current_replicas: previous_current,
            strategy,
            deleting: set.metadata.deletion_timestamp.is_some(),
            stale_claims,
            conforms,
            condemned_claims_ok,
        };
        let phases = plan(&input);
        let result = self.execute(&input, &phases).await;
        let deleted_for_update = match &result {
            Ok(n) => *n,
            Err((n, _)) => *n,
        };
        let mut status = status.clone();
        status.current_replicas -= deleted_for_update;
        status.complete_rolling_update(
            matches!(strategy, Strategy::RollingUpdate { .. }),
            range.replicas,
        );
        (status, result.map(|_| ()).map_err(|(_, e)| e))
    }

    /// Runs the phases: the steps of a phase one after another under OrderedReady, in slow-start
    /// batches (1, 2, 4, …) under Parallel; the first failure ends the sync. The number of pods deleted
    /// for the update (they leave `currentReplicas`).
    async fn execute(&self, input: &Input<'_>, phases: &[Phase]) -> Result<i32, (i32, Error)> {
        let mut deleted_for_update = 0;
        for phase in phases {
            let mut remaining = phase.steps.as_slice();
            let mut batch = 1;
            while !remaining.is_empty() {
                let size = if input.monotonic {
                    1
                } else {
                    batch.min(remaining.len())
                };
                let (now, rest) = remaining.split_at(size);
                remaining = rest;
                batch *= 2;
                let results = join_all(now.iter().map(|step| self.step(input, *step))).await;
                for (step, result) in now.iter().zip(&results) {
                    if matches!(step, Step::DeleteForUpdate(_)) && result.is_ok() {
                        deleted_for_update += 1;
                    }
                }
                if let Some(err) = results.into_iter().find_map(Result::err) {
                    return Err((deleted_for_update, err));
                }
            }
            if phase.stop {
                break;
            }
        }
        Ok(deleted_for_update)
    }

    fn pod_at(input: &Input<'_>, ordinal: i32) -> Option<Pod> {
        match input.range.slot(ordinal) {
            Some(slot) => input.replicas[slot].cloned(),
            None => input
                .condemned
                .iter()
                .find(|(o, _)| *o == ordinal)
                .map(|(_, p)| (*p).clone()),
        }
    }

    async fn step(&self, input: &Input<'_>, step: Step) -> Result<(), Error> {
        let control = self.control;
        match step {
            Step::Create { ordinal, current } => {
                let (revision, template) = if current {
                    (
                        &self.revisions.current,
                        self.template(&self.revisions.current)?,
                    )
                } else {
                    (
                        &self.revisions.update,
                        self.template(&self.revisions.update)?,
                    )
                };
                let Some(pod) = new_pod(self.set, &template, ordinal, &revision.name_any()) else {
                    return Err(Error::Incomplete(self.set.name_any()));
                };
                control.create_pod(&pod, ordinal).await?;
            }
            Step::CreateMissingClaims(ordinal) => {
                if let Some(pod) = Self::pod_at(input, ordinal) {
                    control.create_missing_claims(&pod, ordinal).await?;
                }
            }
            Step::Repair(ordinal) => {
                if let Some(pod) = Self::pod_at(input, ordinal) {
                    control.repair(&pod, ordinal).await?;
                }
            }
            Step::ReleaseClaims(ordinal) => {
                if let Some(pod) = Self::pod_at(input, ordinal) {
                    control.update_claims_for_retention(&pod, ordinal).await?;
                }
            }
            Step::DeleteFinished(ordinal)
            | Step::DeleteCondemned(ordinal)
            | Step::DeleteForUpdate(ordinal) => {
                if let Some(pod) = Self::pod_at(input, ordinal) {
                    control.delete_pod(&pod).await?;
                }
            }
        }
        Ok(())
    }

    /// The template a revision restores; the set's own for the update revision, which is the set's
    /// template by construction.
    fn template(&self, revision: &ControllerRevision) -> Result<PodTemplateSpec, RevisionError> {
        if revision.metadata.name == self.revisions.update.metadata.name
            && let Some(spec) = self.set.spec.as_ref()
        {
            return Ok(spec.template.clone());
        }
        template_of(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_unavailable_percentages_round_down_but_never_below_one() {
        assert_eq!(resolve_max_unavailable(&IntOrString::Int(3), 10), 3);
        assert_eq!(
            resolve_max_unavailable(&IntOrString::String("25%".into()), 10),
            2
        );
        assert_eq!(
            resolve_max_unavailable(&IntOrString::String("10%".into()), 5),
            1
        );
        assert_eq!(resolve_max_unavailable(&IntOrString::Int(0), 5), 1);
    }
}
