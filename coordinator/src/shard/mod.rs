//! Sharding of workqueue keys: a stable hash from key to shard, and the assignment of shards to workers.

mod assign;
mod count;
mod hash;

pub use assign::{WorkerId, WorkerWeight, assign, moved};
pub use count::{ShardCount, ShardError};
pub use hash::{shard_of, stable_hash};
