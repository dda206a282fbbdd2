//! The order a StatefulSet sync works in (upstream `updateStatefulSet` with `processReplica`,
//! `processCondemned` and the rolling update), decided without I/O: which pods to create, repair,
//! delete or replace, and where an OrderedReady set must stop and wait.
//!
//! The sync runs in phases — replicas in ordinal order, claims of condemned pods, condemned pods in
//! reverse ordinal order, then the rolling update — and under OrderedReady (`monotonic`) a phase that
//! has to wait (a pod being created, not yet Running and Ready, not yet available, terminating) ends
//! the sync there. Under Parallel every step of a phase runs, and only a failure stops the sync.

use flotilla_sdk::k8s_openapi::api::core::v1::Pod;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;

use super::ordinals::OrdinalRange;
use super::pods::{
    is_created, is_finished, is_pending, is_running_and_ready, is_terminating, is_unavailable,
    revision,
};

/// How pods move to a new revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Only a pod someone deletes is recreated at the update revision.
    OnDelete,
    /// Pods at slots `>= partition` are replaced, highest ordinal first. `max_unavailable` is
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable` resolved against the replicas; `None` when
    /// unset, which is kube-controller-manager v1.32's default behaviour (its `MaxUnavailableStatefulSet`
    /// gate is off, so one pod at a time, waiting for each to be available).
    RollingUpdate {
        /// `rollingUpdate.partition` (0 when unset).
        partition: i32,
        /// Pods that may be unavailable at once during the update, at least 1.
        max_unavailable: Option<i32>,
        /// Without a `rollingUpdate` block upstream makes new pods below `status.currentReplicas` at
        /// the current revision; with one, below the partition.
        explicit: bool,
    },
}

/// What one sync sees.
#[derive(Debug)]
pub struct Input<'a> {
    /// The ordinals the set keeps.
    pub range: OrdinalRange,
    /// The pod at each slot of the range (`None`: missing).
    pub replicas: Vec<Option<&'a Pod>>,
    /// Pods of the set outside the range, highest ordinal first, with their ordinals.
    pub condemned: Vec<(i32, &'a Pod)>,
    /// OrderedReady: one pod at a time, each waiting for its predecessors.
    pub monotonic: bool,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i32,
    /// The time availability is judged at.
    pub now: Timestamp,
    /// The name of the update revision.
    pub update_revision: &'a str,
    /// The name of the current revision.
    pub current_revision: &'a str,
    /// `status.currentReplicas` before this sync.
    pub current_replicas: i32,
    /// The update strategy.
    pub strategy: Strategy,
    /// The set is being deleted: nothing is done but the status.
    pub deleting: bool,
    /// Per slot: a missing pod's claims carry another pod's uid (it must wait for them to go).
    pub stale_claims: Vec<bool>,
    /// Per slot: the existing pod's identity, storage and claim owners agree with the set.
    pub conforms: Vec<bool>,
    /// Per condemned pod: its claims' owners agree with the retention policy.
    pub condemned_claims_ok: Vec<bool>,
}

/// One write the sync makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Delete the Failed or Succeeded pod at this ordinal; it is recreated once gone.
    DeleteFinished(i32),
    /// Create the claims and pod at this ordinal, at the current revision (`current`) or the update
    /// revision.
    Create {
        /// The ordinal.
        ordinal: i32,
        /// At the current revision rather than the update revision.
        current: bool,
    },
    /// Create the claims a Pending pod at this ordinal is missing.
    CreateMissingClaims(i32),
    /// Restore the identity, storage and claim owners of the pod at this ordinal.
    Repair(i32),
    /// Set the owners of the claims of the condemned pod at this ordinal for the retention policy.
    ReleaseClaims(i32),
    /// Delete the condemned pod at this ordinal (scale-down).
    DeleteCondemned(i32),
    /// Delete the pod at this ordinal to recreate it at the update revision.
    DeleteForUpdate(i32),
}

/// A batch of steps; under OrderedReady `stop` ends the sync after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phase {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Stop after this phase (something must be waited for).
    pub stop: bool,
}

/// The phases of one sync, in order; empty for a set being deleted.
pub fn plan(input: &Input<'_>) -> Vec<Phase> {
    if input.deleting {
        return Vec::new();
    }
    let replicas = replicas_phase(input);
    if replicas.stop {
        return vec![replicas];
    }
    let claims = Phase {
        steps: input
            .condemned
            .iter()
            .zip(&input.condemned_claims_ok)
            .filter(|(_, ok)| !**ok)
            .map(|((ordinal, _), _)| Step::ReleaseClaims(*ordinal))
            .collect(),
        stop: false,
    };
    let condemned = condemned_phase(input);
    let mut phases = vec![replicas, claims];
    let stop = condemned.stop;
    phases.push(condemned);
    if !stop {
        phases.push(update_phase(input));
    }
    phases
}

/// Whether a pod created at `ordinal` gets the current revision (upstream
/// `newVersionedStatefulSetPod`).
fn created_at_current(input: &Input<'_>, ordinal: i32) -> bool {
    let start = i64::from(input.range.start);
    match input.strategy {
        Strategy::RollingUpdate {
            explicit: false, ..
        } => i64::from(ordinal) < start + i64::from(input.current_replicas),
        Strategy::RollingUpdate {
            explicit: true,
            partition,
            ..
        } => i64::from(ordinal) < start + i64::from(partition),
        Strategy::OnDelete => false,
    }
}

fn replicas_phase(input: &Input<'_>) -> Phase {
    let mut phase = Phase::default();
    let monotonic = input.monotonic;
    for (slot, pod) in input.replicas.iter().enumerate() {
        let ordinal = input.range.ordinal(slot);
        let Some(pod) = pod else {
            if input.stale_claims.get(slot).copied().unwrap_or(false) {
                // Its claims still belong to a pod that was scaled away: wait for the garbage
                // collector.
                phase.stop = monotonic;
            } else {
                phase.steps.push(Step::Create {
                    ordinal,
                    current: created_at_current(input, ordinal),
                });
                phase.stop = monotonic;
            }
            if monotonic {
                return phase;
            }
            continue;
        };
        if is_finished(pod) {
            if !is_terminating(pod) {
                phase.steps.push(Step::DeleteFinished(ordinal));
            }
            if monotonic {
                phase.stop = true;
                return phase;
            }
            continue;
        }
        if !is_created(pod) {
            continue;
        }
        if is_pending(pod) {
            phase.steps.push(Step::CreateMissingClaims(ordinal));
        }
        if monotonic
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || is_unavailable(pod, input.min_ready_seconds, input.now))
        {
            phase.stop = true;
            return phase;
        }
        if !input.conforms.get(slot).copied().unwrap_or(true) {
            phase.steps.push(Step::Repair(ordinal));
        }
    }
    phase
}

/// The first unavailable pod, replicas in ordinal order (a missing one counts), then condemned pods
/// from the lowest ordinal: the one pod an OrderedReady scale-down may delete although unhealthy.
fn first_unavailable(input: &Input<'_>) -> Option<i32> {
    let unavailable = |p: &Pod| is_unavailable(p, input.min_ready_seconds, input.now);
    input
        .replicas
        .iter()
        .enumerate()
        .find(|(_, pod)| pod.is_none_or(unavailable))
        .map(|(slot, _)| input.range.ordinal(slot))
        .or_else(|| {
            input
                .condemned
                .iter()
                .rev()
                .find(|(_, p)| unavailable(p))
                .map(|(ordinal, _)| *ordinal)
        })
}

fn condemned_phase(input: &Input<'_>) -> Phase {
    let mut phase = Phase::default();
    let first_unhealthy = first_unavailable(input);
    for (ordinal, pod) in &input.condemned {
        if is_terminating(pod) {
            if input.monotonic {
                phase.stop = true;
                return phase;
            }
            continue;
        }
        let blocked = first_unhealthy != Some(*ordinal)
            && (!is_running_and_ready(pod)
                || is_unavailable(pod, input.min_ready_seconds, input.now));
        if input.monotonic && blocked {
            phase.stop = true;
            return phase;
        }
        phase.steps.push(Step::DeleteCondemned(*ordinal));
        if input.monotonic {
            // One deletion at a time; the next waits for this one to finish terminating.
            phase.stop = true;
            return phase;
        }
    }
    phase
}

fn update_phase(input: &Input<'_>) -> Phase {
    let mut phase = Phase {
        steps: Vec::new(),
        stop: true,
    };
    let Strategy::RollingUpdate {
        partition,
        max_unavailable,
        ..
    } = input.strategy
    else {
        return phase;
    };
    let min = usize::try_from(partition).unwrap_or(0);
    // A missing pod is about to be created, at the revision `created_at_current` picks.
    let slot_revision = |slot: usize| match input.replicas[slot] {
        Some(pod) => revision(pod),
        None if created_at_current(input, input.range.ordinal(slot)) => input.current_revision,
        None => input.update_revision,
    };
    let unavailable = |slot: usize| {
        input.replicas[slot].is_none_or(|p| is_unavailable(p, input.min_ready_seconds, input.now))
    };
    let outdated = |slot: usize| {
        slot_revision(slot) != input.update_revision
            && input.replicas[slot].is_some_and(|p| !is_terminating(p))
    };
    let slots = (min..input.replicas.len()).rev();
    match max_unavailable {
        None => {
            for slot in slots {
                if outdated(slot) {
                    phase
                        .steps
                        .push(Step::DeleteForUpdate(input.range.ordinal(slot)));
                    return phase;
                }
                if unavailable(slot) {
                    return phase;
                }
            }
        }
        Some(max) => {
            let down = (0..input.replicas.len())
                .filter(|s| unavailable(*s))
                .count();
            let budget = usize::try_from(max.max(1))
                .unwrap_or(1)
                .saturating_sub(down);
            phase.steps.extend(
                slots
                    .filter(|s| outdated(*s))
                    .take(budget)
                    .map(|s| Step::DeleteForUpdate(input.range.ordinal(s))),
            );
        }
    }
    phase
}

#[cfg(test)]
mod tests {
    use flotilla_sdk::k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::super::names::REVISION_LABEL;
    use super::*;

    #[derive(Clone, Copy)]
    enum State {
        Pending,
        Ready,
        NotReady,
        Failed,
        Terminating,
    }

    fn pod(name: &str, state: State, rev: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.labels = Some([(REVISION_LABEL.to_owned(), rev.to_owned())].into());
        let (phase, ready) = match state {
            State::Pending => ("Pending", false),
            State::Ready | State::Terminating => ("Running", true),
            State::NotReady => ("Running", false),
            State::Failed => ("Failed", false),
        };
        if matches!(state, State::Terminating) {
            pod.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    /// A set named `web` of `replicas`, with `pods` (ordinal, state, revision) existing.
    fn scenario(
        replicas: i32,
        pods: &[(i32, State, &str)],
        monotonic: bool,
        strategy: Strategy,
        check: impl FnOnce(Vec<Phase>),
    ) {
        let owned: Vec<(i32, Pod)> = pods
            .iter()
            .map(|(o, s, r)| (*o, pod(&format!("web-{o}"), *s, r)))
            .collect();
        let range = OrdinalRange { start: 0, replicas };
        let mut slots: Vec<Option<&Pod>> = vec![None; usize::try_from(replicas).unwrap()];
        let mut condemned = Vec::new();
        for (o, p) in &owned {
            match range.slot(*o) {
                Some(s) => slots[s] = Some(p),
                None => condemned.push((*o, p)),
            }
        }
        condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
        let n = slots.len();
        let c = condemned.len();
        let input = Input {
            range,
            replicas: slots,
            condemned,
            monotonic,
            min_ready_seconds: 0,
            now: Timestamp::UNIX_EPOCH,
            update_revision: "new",
            current_revision: "old",
            current_replicas: 0,
            strategy,
            deleting: false,
            stale_claims: vec![false; n],
            conforms: vec![true; n],
            condemned_claims_ok: vec![true; c],
        };
        check(plan(&input));
    }

    fn rolling(partition: i32) -> Strategy {
        Strategy::RollingUpdate {
            partition,
            max_unavailable: None,
            explicit: true,
        }
    }

    fn steps(phases: &[Phase]) -> Vec<Step> {
        phases.iter().flat_map(|p| p.steps.clone()).collect()
    }

    use State::*;

    #[test]
    fn ordered_ready_creates_only_the_lowest_missing_ordinal() {
        scenario(3, &[], true, rolling(0), |p| {
            assert_eq!(
                steps(&p),
                [Step::Create {
                    ordinal: 0,
                    current: false
                }]
            );
        });
        scenario(3, &[(0, Ready, "new")], true, rolling(0), |p| {
            assert_eq!(
                steps(&p),
                [Step::Create {
                    ordinal: 1,
                    current: false
                }]
            );
        });
    }

    #[test]
    fn ordered_ready_waits_for_the_previous_pod_to_be_running_and_ready() {
        for state in [Pending, NotReady, Terminating] {
            scenario(3, &[(0, state, "new")], true, rolling(0), |p| {
                assert!(
                    !steps(&p).iter().any(|s| matches!(s, Step::Create { .. })),
                    "{p:?}"
                );
                assert!(p.last().unwrap().stop);
            });
        }
    }

    #[test]
    fn a_pending_pod_gets_its_missing_claims_before_the_sync_waits_for_it() {
        scenario(2, &[(0, Pending, "new")], true, rolling(0), |p| {
            assert_eq!(steps(&p), [Step::CreateMissingClaims(0)]);
        });
    }

    #[test]
    fn parallel_creates_every_missing_pod_at_once() {
        scenario(3, &[(1, Pending, "new")], false, rolling(0), |p| {
            assert_eq!(
                steps(&p),
                [
                    Step::Create {
                        ordinal: 0,
                        current: false
                    },
                    Step::CreateMissingClaims(1),
                    Step::Create {
                        ordinal: 2,
                        current: false
                    },
                ]
            );
        });
    }

    #[test]
    fn a_failed_pod_is_deleted_to_be_recreated() {
        scenario(
            2,
            &[(0, Failed, "new"), (1, Ready, "new")],
            true,
            rolling(0),
            |p| {
                assert_eq!(steps(&p), [Step::DeleteFinished(0)]);
            },
        );
    }

    #[test]
    fn ordered_ready_scales_down_from_the_highest_ordinal_one_at_a_time() {
        let pods = [(0, Ready, "new"), (1, Ready, "new"), (2, Ready, "new")];
        scenario(1, &pods, true, rolling(0), |p| {
            assert_eq!(steps(&p), [Step::DeleteCondemned(2)]);
        });
        let pods = [
            (0, Ready, "new"),
            (1, Ready, "new"),
            (2, Terminating, "new"),
        ];
        scenario(1, &pods, true, rolling(0), |p| {
            assert!(steps(&p).is_empty(), "waits for web-2 to go: {p:?}");
        });
    }

    #[test]
    fn ordered_ready_does_not_scale_down_past_an_unhealthy_pod_unless_it_is_the_first() {
        // web-1 is the first unhealthy pod: it may go, but only after web-2 (highest first).
        let pods = [(0, Ready, "new"), (1, NotReady, "new"), (2, Ready, "new")];
        scenario(1, &pods, true, rolling(0), |p| {
            assert_eq!(steps(&p), [Step::DeleteCondemned(2)]);
        });
        let pods = [
            (0, Ready, "new"),
            (1, Ready, "new"),
            (2, NotReady, "new"),
            (3, NotReady, "new"),
        ];
        scenario(1, &pods, true, rolling(0), |p| {
            assert!(
                steps(&p).is_empty(),
                "web-3 is unhealthy and not the first: {p:?}"
            );
        });
    }

    #[test]
    fn parallel_scales_down_every_condemned_pod_at_once() {
        let pods = [(0, Ready, "new"), (1, NotReady, "new"), (2, Ready, "new")];
        scenario(0, &pods, false, rolling(0), |p| {
            assert_eq!(
                steps(&p),
                [
                    Step::DeleteCondemned(2),
                    Step::DeleteCondemned(1),
                    Step::DeleteCondemned(0)
                ]
            );
        });
    }

    #[test]
    fn a_rolling_update_replaces_the_highest_outdated_ordinal_first_down_to_the_partition() {
        let all_old = [(0, Ready, "old"), (1, Ready, "old"), (2, Ready, "old")];
        scenario(3, &all_old, true, rolling(0), |p| {
            assert_eq!(steps(&p), [Step::DeleteForUpdate(2)]);
        });
        let two_new = [(0, Ready, "old"), (1, Ready, "old"), (2, Ready, "new")];
        scenario(3, &two_new, true, rolling(1), |p| {
            assert_eq!(steps(&p), [Step::DeleteForUpdate(1)]);
        });
        let done = [(0, Ready, "old"), (1, Ready, "new"), (2, Ready, "new")];
        scenario(3, &done, true, rolling(1), |p| {
            assert!(steps(&p).is_empty(), "web-0 is below the partition: {p:?}");
        });
    }

    #[test]
    fn a_rolling_update_waits_for_the_replaced_pod_to_be_available() {
        let pods = [(0, Ready, "old"), (1, Ready, "old"), (2, NotReady, "new")];
        scenario(3, &pods, false, rolling(0), |p| {
            assert!(steps(&p).is_empty(), "{p:?}");
        });
    }

    #[test]
    fn max_unavailable_replaces_several_pods_at_once_within_its_budget() {
        let strategy = Strategy::RollingUpdate {
            partition: 0,
            max_unavailable: Some(2),
            explicit: true,
        };
        let pods = [(0, Ready, "old"), (1, Ready, "old"), (2, Ready, "old")];
        scenario(3, &pods, false, strategy, |p| {
            assert_eq!(
                steps(&p),
                [Step::DeleteForUpdate(2), Step::DeleteForUpdate(1)]
            );
        });
        let pods = [(0, Ready, "old"), (1, Ready, "old"), (2, NotReady, "new")];
        scenario(3, &pods, false, strategy, |p| {
            assert_eq!(steps(&p), [Step::DeleteForUpdate(1)]);
        });
    }

    #[test]
    fn on_delete_never_replaces_pods() {
        let pods = [(0, Ready, "old"), (1, Ready, "old")];
        scenario(2, &pods, true, Strategy::OnDelete, |p| {
            assert!(steps(&p).is_empty());
        });
    }

    #[test]
    fn pods_below_the_partition_are_created_at_the_current_revision() {
        scenario(
            3,
            &[(1, Ready, "new"), (2, Ready, "new")],
            true,
            rolling(1),
            |p| {
                assert_eq!(
                    steps(&p),
                    [Step::Create {
                        ordinal: 0,
                        current: true
                    }]
                );
            },
        );
    }

    #[test]
    fn a_pod_with_another_pods_claims_waits_and_nothing_is_deleted_meanwhile() {
        let owned = [pod("web-1", Ready, "new")];
        let input = Input {
            range: OrdinalRange {
                start: 0,
                replicas: 1,
            },
            replicas: vec![None],
            condemned: vec![(1, &owned[0])],
            monotonic: true,
            min_ready_seconds: 0,
            now: Timestamp::UNIX_EPOCH,
            update_revision: "new",
            current_revision: "new",
            current_replicas: 0,
            strategy: rolling(0),
            deleting: false,
            stale_claims: vec![true],
            conforms: vec![true],
            condemned_claims_ok: vec![false],
        };
        assert!(steps(&plan(&input)).is_empty());
        let parallel = Input {
            monotonic: false,
            ..input
        };
        assert_eq!(
            steps(&plan(&parallel)),
            [Step::ReleaseClaims(1), Step::DeleteCondemned(1)]
        );
    }
}
