//! The dispatcher's invariants, asserted in one place: [`Dispatcher::check`]. Built only for tests; the
//! unit tests' harness calls it after every step, so a decision that breaks exclusivity fails at the
//! step that made it, whatever the workers happened to run. Never on a release path: it walks every
//! item, queue and backlog.
//!
//! What it asserts:
//!
//! - accounting: every item is listed at its (known) worker and counted once in that worker's in-flight
//!   count of its controller and once in its shard's out count, and nothing else is counted;
//! - exclusivity: no (controller, key) is out twice (so never at two workers, nor a foreign run beside
//!   a run of this term); an item of this term is out only at the owner of its shard as etcd knows it
//!   (`Owned`, or the `from` of a move), or on an unowned shard (a foreign item may be anywhere: the
//!   new leader may read its shard as another worker's, and the key stays foreign until it ends);
//! - foreign keys: every foreign item (of an earlier term, or of a controller retired since it went
//!   out) has a foreign key, every foreign key is out or held, every deferred key is foreign, and no
//!   other item has a foreign key;
//! - processing: a key processing in its queue has exactly one reason — an item of this term, a
//!   deferral, a hold, a worker's backlog or a parked entry — and every one of those is processing;
//! - routing: a backlog entry waits at the owner of its shard, and entries sit on their key's shard;
//! - credits never exceed what a worker advertised less what it holds;
//! - a shard whose write is with etcd (`committing`) is not dispatchable, and a move in commit has no
//!   item of its shard out.

use std::collections::HashMap;

use super::super::shards::ShardState;
use super::Dispatcher;
use super::items::ItemId;
use crate::shard::shard_of;

impl Dispatcher {
    /// Checks every invariant listed in the module documentation; the first broken one, described.
    ///
    /// # Errors
    /// A description of the broken invariant.
    pub(super) fn check(&self) -> Result<(), String> {
        let count = self.handover.table().count();
        let mut out_per_shard = vec![0u32; count as usize];
        let mut at_worker: HashMap<&str, HashMap<&str, u32>> = HashMap::new();
        let mut by_key: HashMap<(&str, &str), (ItemId, bool)> = HashMap::new();
        // Reasons a key of each controller is processing.
        let mut reasons: HashMap<&str, usize> = HashMap::new();
        let foreign = self.items.foreign();
        for (&id, item) in self.items.iter() {
            let what = format!(
                "item {id:?} ({}/{}) at {}",
                item.controller, item.key, item.worker
            );
            let Some(w) = self.membership.get(&item.worker) else {
                return Err(format!("{what}: its worker is unknown"));
            };
            if !w.items.contains(&id) {
                return Err(format!("{what}: not in its worker's items"));
            }
            *at_worker
                .entry(item.worker.as_str())
                .or_default()
                .entry(item.controller.as_str())
                .or_default() += 1;
            if item.shard >= count || item.shard != shard_of(&item.controller, &item.key, count) {
                return Err(format!("{what}: wrong shard {}", item.shard));
            }
            out_per_shard[item.shard as usize] += 1;
            if let Some((other, _)) = by_key.insert(
                (item.controller.as_str(), item.key.as_str()),
                (id, item.foreign),
            ) {
                return Err(format!("{what}: its key is also out as item {other:?}"));
            }
            let pair = (item.controller.clone(), item.key.clone());
            if item.foreign {
                // Of an earlier term, or of this one when its controller retired since.
                if id.0 > self.term {
                    return Err(format!("{what}: foreign, of a term after {}", self.term));
                }
                if !foreign.contains(&pair) {
                    return Err(format!("{what}: foreign item of a key not foreign"));
                }
            } else {
                if id.0 != self.term || id.1 >= self.items.peek_next_id() {
                    return Err(format!("{what}: an id this term never handed out"));
                }
                if foreign.contains(&pair) {
                    return Err(format!("{what}: of this term, while its key is foreign"));
                }
                if let Some(state) = self.running.get(&item.controller) {
                    if !state.queue.is_processing(&item.key) {
                        return Err(format!("{what}: out, and not processing in its queue"));
                    }
                    *reasons.entry(item.controller.as_str()).or_default() += 1;
                }
            }
            match self.handover.table().state(item.shard) {
                ShardState::Owned(o) | ShardState::Moving { from: o, .. }
                    if *o != item.worker && !item.foreign =>
                {
                    return Err(format!("{what}: shard {} belongs to {o}", item.shard));
                }
                _ => {}
            }
        }
        for w in self.membership.iter() {
            let counts = at_worker.remove(w.id.as_str()).unwrap_or_default();
            let total: u32 = counts.values().sum();
            if w.items.len() != total as usize {
                return Err(format!(
                    "worker {}: lists {} items, {total} are out at it",
                    w.id,
                    w.items.len()
                ));
            }
            for (c, &n) in &w.in_flight {
                if counts.get(c.as_str()).copied().unwrap_or(0) != n {
                    return Err(format!(
                        "worker {}: in flight {n} of {c}, {counts:?} out",
                        w.id
                    ));
                }
            }
            for (c, &n) in &counts {
                if w.in_flight.get(*c).copied().unwrap_or(0) != n {
                    return Err(format!(
                        "worker {}: {n} of {c} out, in flight {:?}",
                        w.id, w.in_flight
                    ));
                }
            }
            for (c, &credits) in &w.credits {
                let limit = w.concurrency.get(c).copied().unwrap_or(0);
                let held = w.in_flight.get(c).copied().unwrap_or(0);
                if credits > limit.saturating_sub(held) {
                    return Err(format!(
                        "worker {}: {credits} credits of {c}, {held} held of {limit}",
                        w.id
                    ));
                }
            }
            for (c, backlog) in &w.backlog {
                for (key, s) in backlog {
                    let what = format!("backlog entry {c}/{key} at {}", w.id);
                    if *s != shard_of(c, key, count) {
                        return Err(format!("{what}: wrong shard {s}"));
                    }
                    if self.handover.table().state(*s) != &ShardState::Owned(w.id.clone()) {
                        return Err(format!(
                            "{what}: shard {s} is {:?}",
                            self.handover.table().state(*s)
                        ));
                    }
                    self.processing(c, key, &what, &mut reasons)?;
                }
            }
        }
        if let Some((worker, _)) = at_worker.into_iter().next() {
            return Err(format!("items out at unknown worker {worker}"));
        }
        for s in 0..count {
            if self.handover.table().in_flight(s) != out_per_shard[s as usize] {
                return Err(format!(
                    "shard {s}: counts {} out, {} are",
                    self.handover.table().in_flight(s),
                    out_per_shard[s as usize]
                ));
            }
            for parked in self.handover.table().parked(s) {
                let what = format!("parked {}/{}", parked.controller, parked.key);
                if s != shard_of(&parked.controller, &parked.key, count) {
                    return Err(format!("{what}: parked on shard {s}"));
                }
                self.processing(&parked.controller, &parked.key, &what, &mut reasons)?;
            }
            if self.handover.is_committing(s) {
                match self.handover.table().state(s) {
                    ShardState::Owned(o) => {
                        return Err(format!("shard {s}: committing, yet owned by {o}"));
                    }
                    ShardState::Moving { .. } if out_per_shard[s as usize] > 0 => {
                        return Err(format!("shard {s}: its move commits with items out"));
                    }
                    _ => {}
                }
            }
        }
        for (c, k) in self.items.deferred() {
            if !foreign.contains(&(c.clone(), k.clone())) {
                return Err(format!("deferred {c}/{k}: not foreign"));
            }
            self.processing(c, k, &format!("deferred {c}/{k}"), &mut reasons)?;
        }
        let held: Vec<&(String, String)> = self.items.held().collect();
        for (c, k) in foreign {
            let out = by_key
                .get(&(c.as_str(), k.as_str()))
                .is_some_and(|(_, f)| *f);
            if !out && !held.contains(&&(c.clone(), k.clone())) {
                return Err(format!("foreign {c}/{k}: neither out nor held"));
            }
        }
        for (c, k) in held {
            if !foreign.contains(&(c.clone(), k.clone())) {
                self.processing(c, k, &format!("held {c}/{k}"), &mut reasons)?;
            }
        }
        for (name, state) in self.running.iter() {
            let accounted = reasons.get(name.as_str()).copied().unwrap_or(0);
            if state.queue.processing_len() != accounted {
                return Err(format!(
                    "queue {name}: {} keys processing, {accounted} accounted for (out, deferred, held, backlog, parked)",
                    state.queue.processing_len()
                ));
            }
        }
        Ok(())
    }

    /// `controller`'s `key` must be processing in its queue (when the controller still runs): counts one
    /// reason for it.
    fn processing<'a>(
        &self,
        controller: &'a str,
        key: &str,
        what: &str,
        reasons: &mut HashMap<&'a str, usize>,
    ) -> Result<(), String> {
        let Some(state) = self.running.get(controller) else {
            return Ok(());
        };
        if !state.queue.is_processing(&key.to_owned()) {
            return Err(format!("{what}: not processing in its queue"));
        }
        *reasons.entry(controller).or_default() += 1;
        Ok(())
    }
}
