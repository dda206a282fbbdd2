//! The fleet's shard count, validated once at start-up.

/// A shard count that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// Outside `1..=65536`.
    #[error("shard count must be between 1 and {max}, got {got}", max = ShardCount::MAX)]
    InvalidShardCount {
        /// The rejected count.
        got: u32,
    },
}

/// How many shards the keys of a fleet are hashed into (`S`). Fixed for the life of a fleet: changing it moves
/// almost every key to another shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardCount(u32);

impl ShardCount {
    /// The largest count accepted: far more shards than workers, while a shard map stays small in etcd.
    pub const MAX: u32 = 65_536;

    /// Checks that `n` is in `1..=65536`.
    ///
    /// # Errors
    /// [`ShardError::InvalidShardCount`] otherwise.
    pub fn new(n: u32) -> Result<Self, ShardError> {
        if (1..=Self::MAX).contains(&n) {
            Ok(Self(n))
        } else {
            Err(ShardError::InvalidShardCount { got: n })
        }
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for ShardCount {
    /// 256: enough that each of up to ~25 workers gets within ±10 % of its share, small enough that a shard
    /// map is a few KiB.
    fn default() -> Self {
        Self(256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outside_one_to_65536_are_rejected() {
        assert_eq!(
            ShardCount::new(0),
            Err(ShardError::InvalidShardCount { got: 0 })
        );
        assert_eq!(
            ShardCount::new(65_537),
            Err(ShardError::InvalidShardCount { got: 65_537 })
        );
        assert_eq!(ShardCount::new(1).map(ShardCount::get), Ok(1));
        assert_eq!(ShardCount::new(65_536).map(ShardCount::get), Ok(65_536));
        assert_eq!(ShardCount::default().get(), 256);
    }
}
