//! The fleet core of the leader: the dispatcher (queues, shards, workers, read-your-writes) and the
//! domain types its gRPC edge converts peer messages into.

mod dispatcher;
mod expectations;
mod mapping;
mod messages;
mod owner_graph;
mod shards;
mod spec_codec;
mod workers;

pub use dispatcher::{Command, DispatcherHandle, TermContext, spawn};
pub use messages::{Done, Hello};

/// The kinds a stored controller spec (etcd `controllers/<name>`) needs informers for; empty when the
/// spec is unreadable.
pub fn spec_kinds(encoded: &[u8]) -> Vec<flotilla_common::ResourceKind> {
    use prost::Message;
    flotilla_proto::ControllerSpec::decode(encoded)
        .ok()
        .and_then(|p| messages::ControllerSpec::try_from(p).ok())
        .map(|s| s.kinds())
        .unwrap_or_default()
}
