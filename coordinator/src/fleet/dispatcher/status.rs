//! The term's view of the fleet for `Admin.Status`.

use flotilla_proto as proto;
use tokio::time::Instant;

use super::Dispatcher;

impl Dispatcher {
    pub(super) fn status(&self) -> proto::StatusResponse {
        let mut workers: Vec<proto::WorkerStatus> = self
            .membership
            .iter()
            .map(|w| proto::WorkerStatus {
                id: w.id.clone(),
                connected: w.is_dispatchable(),
                capacity: w.capacity,
                in_flight: w.in_flight_total(),
                shards: u32::try_from(self.handover.table().owned_by(&w.id).len())
                    .unwrap_or(u32::MAX),
                lacking: if w.handshaken {
                    let mut lacking: Vec<String> = self
                        .running
                        .names()
                        .into_iter()
                        .filter(|c| !w.concurrency.contains_key(c))
                        .collect();
                    lacking.sort();
                    lacking
                } else {
                    Vec::new()
                },
            })
            .collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        let mut queues: Vec<proto::QueueStatus> = self
            .running
            .iter()
            .map(|(name, c)| {
                let routed: usize = self
                    .membership
                    .iter()
                    .map(|w| w.backlog.get(name).map_or(0, |b| b.len()))
                    .sum();
                proto::QueueStatus {
                    controller: name.clone(),
                    depth: (c.queue.len() + routed) as u64,
                    processing: c.queue.processing_len() as u64,
                    waiting: 0,
                    done: c.counters.success.get()
                        + c.counters.requeue_after.get()
                        + c.counters.error.get(),
                }
            })
            .collect();
        queues.sort_by(|a, b| a.controller.cmp(&b.controller));
        let informers = self
            .ctx
            .informers
            .kinds()
            .into_iter()
            .map(|s| proto::InformerStatus {
                kind: s.kind.to_string(),
                synced: s.synced,
                objects: s.objects as u64,
                unserved: s.unserved,
            })
            .collect();
        let now = Instant::now();
        let retired = self
            .retired
            .iter()
            .map(|(controller, at)| proto::RetiredController {
                controller: controller.clone(),
                seconds_ago: now.saturating_duration_since(*at).as_secs(),
            })
            .collect();
        proto::StatusResponse {
            leader_id: self.ctx.leader.id.clone(),
            leader_address: self.ctx.leader.address.clone(),
            term: self.term,
            workers,
            queues,
            informers,
            shard_count: self.handover.table().count(),
            retired,
        }
    }
}
