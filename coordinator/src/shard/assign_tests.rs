//! Tests of shard assignment.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn fleet(weights: &[u32]) -> Vec<WorkerWeight> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &weight)| WorkerWeight {
            id: WorkerId::from(format!("worker-{i}")),
            weight,
        })
        .collect()
}

fn counts(assignment: &[WorkerId]) -> HashMap<WorkerId, u32> {
    let mut counts = HashMap::new();
    for id in assignment {
        *counts.entry(id.clone()).or_insert(0) += 1;
    }
    counts
}

fn current(assignment: &[WorkerId]) -> Vec<Option<WorkerId>> {
    assignment.iter().cloned().map(Some).collect()
}

/// Shards whose owner changed, as (shard, before, after).
fn changes(before: &[WorkerId], after: &[WorkerId]) -> Vec<(usize, WorkerId, WorkerId)> {
    before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(s, (a, b))| (s, a.clone(), b.clone()))
        .collect()
}

#[test]
fn no_workers_or_no_shards_means_an_empty_assignment() {
    assert!(assign(256, &[], &[]).is_empty());
    assert!(assign(0, &fleet(&[1, 1]), &[]).is_empty());
}

#[test]
fn eight_equal_workers_get_thirty_two_of_256_shards_each() {
    let workers = fleet(&[1; 8]);
    let assignment = assign(256, &workers, &[]);
    assert_eq!(assignment.len(), 256);
    let counts = counts(&assignment);
    for w in &workers {
        assert_eq!(counts.get(&w.id), Some(&32), "{}", w.id);
    }
}

#[test]
fn shares_follow_weights() {
    let workers = fleet(&[1, 2, 5]);
    let counts = counts(&assign(256, &workers, &[]));
    // Shares 32, 64 and 160 exactly.
    assert_eq!(counts[&workers[0].id], 32);
    assert_eq!(counts[&workers[1].id], 64);
    assert_eq!(counts[&workers[2].id], 160);
}

#[test]
fn a_fourth_worker_takes_a_quarter_of_the_shards_and_is_the_only_one_to_gain() {
    let three = fleet(&[1; 3]);
    let before = assign(256, &three, &[]);
    let four = fleet(&[1; 4]);
    let after = assign(256, &four, &current(&before));
    let changed = changes(&before, &after);
    assert!(
        (38..=90).contains(&changed.len()),
        "{} of 256 moved",
        changed.len()
    );
    assert_eq!(changed.len(), 64);
    assert!(
        changed.iter().all(|(_, _, to)| *to == four[3].id),
        "{changed:?}"
    );
    assert_eq!(moved(&before, &after), 64);
}

#[test]
fn when_a_worker_leaves_only_its_shards_move() {
    let five = fleet(&[1; 5]);
    let before = assign(256, &five, &[]);
    let four: Vec<WorkerWeight> = five
        .iter()
        .filter(|w| w.id != five[2].id)
        .cloned()
        .collect();
    let after = assign(256, &four, &current(&before));
    let changed = changes(&before, &after);
    assert_eq!(changed.len(), counts(&before)[&five[2].id] as usize);
    assert!(
        changed.iter().all(|(_, from, _)| *from == five[2].id),
        "{changed:?}"
    );
}

#[test]
fn shards_of_dead_or_unknown_owners_are_reassigned() {
    let workers = fleet(&[1, 1]);
    let mut stale: Vec<Option<WorkerId>> = vec![Some(WorkerId::from("gone")); 10];
    stale[0] = Some(workers[0].id.clone());
    stale.truncate(8);
    let assignment = assign(16, &workers, &stale);
    assert_eq!(assignment.len(), 16);
    assert_eq!(
        assignment[0], workers[0].id,
        "a live owner within quota keeps its shard"
    );
    assert!(
        assignment
            .iter()
            .all(|id| *id == workers[0].id || *id == workers[1].id)
    );
    assert_eq!(counts(&assignment)[&workers[1].id], 8);
}

#[test]
fn a_worker_listed_twice_counts_once_with_its_larger_weight() {
    let mut workers = fleet(&[1, 1]);
    workers.push(WorkerWeight {
        id: workers[1].id.clone(),
        weight: 3,
    });
    let counts = counts(&assign(16, &workers, &[]));
    assert_eq!(counts.len(), 2);
    assert_eq!(counts[&workers[0].id], 4);
    assert_eq!(counts[&workers[1].id], 12);
}

#[test]
fn a_zero_weight_counts_as_one() {
    let workers = fleet(&[0, 1]);
    let counts = counts(&assign(16, &workers, &[]));
    assert_eq!(counts[&workers[0].id], 8);
}

#[test]
fn moved_counts_differing_and_missing_shards() {
    let a = WorkerId::from("a");
    let b = WorkerId::from("b");
    let one = vec![a.clone()];
    assert_eq!(moved(&[a.clone(), a.clone()], &[a.clone(), b.clone()]), 1);
    assert_eq!(moved(&one, &[a, b]), 1);
    assert_eq!(moved(&[], &[]), 0);
}

/// A fleet of 1..=16 workers with weights 1..=8, a shard count, and a random current assignment (indices past
/// the fleet are workers that died).
fn scenario() -> impl Strategy<Value = (Vec<u32>, u32, Vec<Option<usize>>)> {
    (
        proptest::collection::vec(1u32..=8, 1..=16),
        prop_oneof![Just(16u32), Just(64), Just(256), Just(1024)],
    )
        .prop_flat_map(|(weights, shards)| {
            let n = weights.len();
            let current =
                proptest::collection::vec(proptest::option::of(0..n + 2), 0..=shards as usize);
            (Just(weights), Just(shards), current)
        })
}

/// Like [`scenario`] with `n` equal-weight workers.
fn equal_scenario() -> impl Strategy<Value = (usize, u32, Vec<Option<usize>>)> {
    (
        1usize..=16,
        prop_oneof![Just(16u32), Just(64), Just(256), Just(1024)],
    )
        .prop_flat_map(|(n, shards)| {
            let current =
                proptest::collection::vec(proptest::option::of(0..n + 2), 0..=shards as usize);
            (Just(n), Just(shards), current)
        })
}

fn ids(current: &[Option<usize>]) -> Vec<Option<WorkerId>> {
    current
        .iter()
        .map(|o| o.map(|i| WorkerId::from(format!("worker-{i}"))))
        .collect()
}

fn share(shards: u32, weights: &[u32], i: usize) -> f64 {
    f64::from(shards) * f64::from(weights[i]) / f64::from(weights.iter().sum::<u32>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_shard_goes_to_a_live_worker_in_numbers_matching_its_share((weights, shards, cur) in scenario()) {
        let workers = fleet(&weights);
        let assignment = assign(shards, &workers, &ids(&cur));
        prop_assert_eq!(assignment.len(), shards as usize);
        let counts = counts(&assignment);
        prop_assert!(counts.keys().all(|id| workers.iter().any(|w| w.id == *id)), "a dead worker got shards");
        for (i, w) in workers.iter().enumerate() {
            let share = share(shards, &weights, i);
            let got = f64::from(counts.get(&w.id).copied().unwrap_or(0));
            prop_assert!(got == share.floor() || got == share.ceil(), "{} got {} for a share of {}", w.id, got, share);
            if share >= 10.0 {
                prop_assert!((got - share).abs() <= share * 0.1, "{} got {} for a share of {}", w.id, got, share);
            }
        }
    }

    #[test]
    fn the_order_of_workers_does_not_matter(
        (weights, shards, cur, order) in scenario().prop_flat_map(|(weights, shards, cur)| {
            let order = Just((0..weights.len()).collect::<Vec<usize>>()).prop_shuffle();
            (Just(weights), Just(shards), Just(cur), order)
        }),
    ) {
        let workers = fleet(&weights);
        let shuffled: Vec<WorkerWeight> = order.iter().map(|&i| workers[i].clone()).collect();
        let current = ids(&cur);
        prop_assert_eq!(assign(shards, &workers, &current), assign(shards, &shuffled, &current));
    }

    #[test]
    fn with_equal_weights_a_joining_worker_is_the_only_one_to_gain_shards((n, shards, cur) in equal_scenario()) {
        let workers = fleet(&vec![1; n]);
        let before = assign(shards, &workers, &ids(&cur));
        let joined = fleet(&vec![1; n + 1]);
        let newcomer = joined[n].id.clone();
        let after = assign(shards, &joined, &current(&before));
        let changed = changes(&before, &after);
        prop_assert_eq!(changed.len(), counts(&after).get(&newcomer).copied().unwrap_or(0) as usize);
        prop_assert!(changed.iter().all(|(_, _, to)| *to == newcomer), "{:?}", changed);
    }

    #[test]
    fn with_equal_weights_a_leaving_worker_is_the_only_one_to_lose_shards(
        (n, shards, cur) in equal_scenario(),
        leaver in any::<usize>(),
    ) {
        prop_assume!(n >= 2);
        let workers = fleet(&vec![1; n]);
        let before = assign(shards, &workers, &ids(&cur));
        let gone = workers[leaver % n].id.clone();
        let rest: Vec<WorkerWeight> = workers.iter().filter(|w| w.id != gone).cloned().collect();
        let after = assign(shards, &rest, &current(&before));
        let changed = changes(&before, &after);
        prop_assert_eq!(changed.len(), counts(&before).get(&gone).copied().unwrap_or(0) as usize);
        prop_assert!(changed.iter().all(|(_, from, _)| *from == gone), "{:?}", changed);
    }

    /// With unequal weights, rounding every quota to a whole shard can force an old worker to take or give
    /// one shard; never more.
    #[test]
    fn with_weights_a_join_mostly_feeds_the_newcomer_and_an_old_worker_gains_at_most_one_shard(
        (weights, shards, cur) in scenario(),
        new_weight in 1u32..=8,
    ) {
        let workers = fleet(&weights);
        let before = assign(shards, &workers, &ids(&cur));
        let mut joined = workers.clone();
        joined.push(WorkerWeight { id: WorkerId::from("newcomer"), weight: new_weight });
        let after = assign(shards, &joined, &current(&before));
        let newcomer_count = counts(&after).get(&WorkerId::from("newcomer")).copied().unwrap_or(0) as usize;
        let changed = changes(&before, &after);
        let to_newcomer = changed.iter().filter(|(_, _, to)| to.as_str() == "newcomer").count();
        prop_assert_eq!(to_newcomer, newcomer_count);
        let mut gains: HashMap<WorkerId, usize> = HashMap::new();
        for (_, _, to) in changed.iter().filter(|(_, _, to)| to.as_str() != "newcomer") {
            *gains.entry(to.clone()).or_default() += 1;
        }
        prop_assert!(gains.values().all(|&g| g <= 1), "{:?}", gains);
    }

    #[test]
    fn with_weights_a_leave_moves_all_the_leavers_shards_and_a_survivor_loses_at_most_one(
        (weights, shards, cur) in scenario(),
        leaver in any::<usize>(),
    ) {
        let workers = fleet(&weights);
        prop_assume!(workers.len() >= 2);
        let before = assign(shards, &workers, &ids(&cur));
        let gone = workers[leaver % workers.len()].id.clone();
        let rest: Vec<WorkerWeight> = workers.iter().filter(|w| w.id != gone).cloned().collect();
        let after = assign(shards, &rest, &current(&before));
        let changed = changes(&before, &after);
        let from_leaver = changed.iter().filter(|(_, from, _)| *from == gone).count();
        prop_assert_eq!(from_leaver, counts(&before).get(&gone).copied().unwrap_or(0) as usize);
        let mut losses: HashMap<WorkerId, usize> = HashMap::new();
        for (_, from, _) in changed.iter().filter(|(_, from, _)| *from != gone) {
            *losses.entry(from.clone()).or_default() += 1;
        }
        prop_assert!(losses.values().all(|&l| l <= 1), "{:?}", losses);
    }
}
