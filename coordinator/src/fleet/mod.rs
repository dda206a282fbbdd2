//! The fleet core of the leader: the dispatcher (queues, shards, workers, read-your-writes) and the
//! domain types its gRPC edge converts peer messages into.

mod access;
mod claim_retry;
mod dispatcher;
mod expectations;
#[cfg(test)]
mod fuzz_tests;
mod mapping;
mod messages;
mod owner_graph;
mod progress;
mod selector_index;
mod shards;
mod spec_codec;
mod workers;
mod write_intents;

pub use access::{AccessDenied, CacheAccess, WorkerReads};
pub use dispatcher::{Command, DISCOVERY_PERIOD, DispatcherHandle, TermContext, spawn};
pub use messages::{Credit, Done, Hello, HelloRefused, Limits, WriteIntent};
pub use progress::DispatchProgress;

/// What a stored controller spec (etcd `controllers/<name>`) needs informers for: the kinds it names,
/// and whether it works on the owner graph (so needs every discovered deletable resource too). Nothing
/// when the spec is unreadable.
pub fn spec_informers(encoded: &[u8]) -> (Vec<flotilla_common::ResourceKind>, bool) {
    use prost::Message;
    flotilla_proto::ControllerSpec::decode(encoded)
        .ok()
        .and_then(|p| messages::ControllerSpec::try_from(p).ok())
        .map(|s| (s.kinds(), s.primary == messages::Primary::OwnerGraph))
        .unwrap_or_default()
}
