//! The worker runtime: sessions and self-fencing, following the leader, the Dispatch stream with
//! batched Done and Credit, running reconciles, the recording and rate-limited Kubernetes client,
//! metrics and shutdown. It implements what the SDK's `host` module declares: the recording,
//! rate-limited Kubernetes clients and the gRPC cache backend.

mod api_trace;
mod cache_client;
mod config;
mod connection;
mod custom;
mod engine;
mod flags;
#[cfg(test)]
mod fuzz_tests;
mod kube_stack;
mod ledger;
mod metrics;
mod outbox;
mod prefetch;
mod rate_limit;
mod reconcile_journal;
mod recording;
mod registration;
mod selection;
mod stream_health;
mod wire;
mod worker;
mod write_intents;

pub use config::{ConfigError, WorkerConfig};
pub use custom::{run_custom, run_with_flags};
pub use flags::{
    WorkerFlags, concurrency_arg, concurrency_flag, concurrency_value, default_worker_id,
};
pub use kube_stack::KubeStackError;
pub use selection::{SelectionError, select_controllers};
pub use worker::{Worker, WorkerError, run};
