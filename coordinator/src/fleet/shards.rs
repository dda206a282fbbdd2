//! The leader's shard table: who owns each shard, which shards are moving, how many items of each shard
//! are out at workers, and the keys parked while a shard has no owner it can dispatch to.

use std::collections::VecDeque;

/// Ownership of one shard, as this leader knows it. The etcd key `shards/<n>` is the truth; this mirrors
/// it, plus the moves in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardState {
    /// No owner in etcd: the shard can be claimed.
    Unowned,
    /// Owned by this worker in etcd; its keys go to it.
    Owned(String),
    /// Owned by `from` in etcd, to be handed to `to` once `from` holds no item of it. Nothing of the
    /// shard is dispatched meanwhile: this is what keeps two workers off one key during a rebalance.
    Moving { from: String, to: String },
}

/// A key waiting for its shard to get a dispatchable owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub controller: String,
    pub key: String,
}

/// Per-shard state. Invariant: `in_flight[s]` is the number of items of shard `s` that some worker holds
/// (assigned by this leader or reported held from an earlier one).
#[derive(Debug)]
pub struct ShardTable {
    states: Vec<ShardState>,
    in_flight: Vec<u32>,
    parked: Vec<VecDeque<Parked>>,
}

impl ShardTable {
    /// `count` shards, all unowned.
    pub fn new(count: u32) -> Self {
        let n = count as usize;
        Self {
            states: vec![ShardState::Unowned; n],
            in_flight: vec![0; n],
            parked: vec![VecDeque::new(); n],
        }
    }

    /// Number of shards.
    pub fn count(&self) -> u32 {
        u32::try_from(self.states.len()).unwrap_or(u32::MAX)
    }

    /// State of shard `s`.
    pub fn state(&self, s: u32) -> &ShardState {
        &self.states[s as usize]
    }

    /// Sets the state of shard `s`.
    pub fn set_state(&mut self, s: u32, state: ShardState) {
        self.states[s as usize] = state;
    }

    /// The worker that may receive items of shard `s` now.
    pub fn dispatch_owner(&self, s: u32) -> Option<&str> {
        match &self.states[s as usize] {
            ShardState::Owned(w) => Some(w),
            _ => None,
        }
    }

    /// Owner for assignment purposes: the owner, or the target of a move.
    pub fn intended_owner(&self, s: u32) -> Option<&str> {
        match &self.states[s as usize] {
            ShardState::Owned(w) | ShardState::Moving { to: w, .. } => Some(w),
            ShardState::Unowned => None,
        }
    }

    /// Shards owned by `worker` in etcd (including those moving away from it).
    pub fn owned_by(&self, worker: &str) -> Vec<u32> {
        (0..self.count())
            .filter(|&s| match &self.states[s as usize] {
                ShardState::Owned(w) | ShardState::Moving { from: w, .. } => w == worker,
                ShardState::Unowned => false,
            })
            .collect()
    }

    /// An item of shard `s` went out to a worker.
    pub fn item_out(&mut self, s: u32) {
        self.in_flight[s as usize] += 1;
    }

    /// An item of shard `s` came back; returns how many are still out.
    pub fn item_back(&mut self, s: u32) -> u32 {
        let n = &mut self.in_flight[s as usize];
        *n = n.saturating_sub(1);
        *n
    }

    /// Items of shard `s` out at workers.
    pub fn in_flight(&self, s: u32) -> u32 {
        self.in_flight[s as usize]
    }

    /// Parks a key until shard `s` can be dispatched.
    pub fn park(&mut self, s: u32, item: Parked) {
        self.parked[s as usize].push_back(item);
    }

    /// Takes every key parked on shard `s`.
    pub fn unpark(&mut self, s: u32) -> VecDeque<Parked> {
        std::mem::take(&mut self.parked[s as usize])
    }

    /// Keys parked on shard `s`.
    #[cfg(test)]
    pub fn parked_in(&self, s: u32) -> usize {
        self.parked[s as usize].len()
    }

    /// The keys parked on shard `s`.
    #[cfg(test)]
    pub fn parked(&self, s: u32) -> impl Iterator<Item = &Parked> {
        self.parked[s as usize].iter()
    }

    /// Keys parked on any shard.
    pub fn parked_len(&self) -> usize {
        self.parked.iter().map(VecDeque::len).sum()
    }
}
