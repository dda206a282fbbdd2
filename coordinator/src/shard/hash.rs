//! Stable hashing of workqueue keys to shards: the same answer in every process, on every platform and every
//! Rust version, so a coordinator and its successor agree on which shard a key is in.

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Separates the two hashed strings; never occurs in UTF-8, so ("ab", "c") and ("a", "bc") differ.
const SEPARATOR: u8 = 0xff;

fn fnv1a(mut state: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        state ^= u64::from(byte);
        state = state.wrapping_mul(FNV_PRIME);
    }
    state
}

/// splitmix64's finalizer: FNV alone mixes its last bytes poorly, which would cluster keys that differ only
/// at the end (`pod-1`, `pod-2`, …) into neighbouring shards.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of a workqueue key of `controller`: FNV-1a 64 over `controller`, a 0xff byte and `key`, then
/// splitmix64's finalizer. Fixed forever: changing it reshuffles every key of a running fleet.
pub fn stable_hash(controller: &str, key: &str) -> u64 {
    let state = fnv1a(FNV_OFFSET, controller.as_bytes());
    let state = fnv1a(state, &[SEPARATOR]);
    finalize(fnv1a(state, key.as_bytes()))
}

/// The shard of a key: `stable_hash(controller, key) mod shards`. Returns 0 when `shards` is 0; validate the
/// count once with [`super::ShardCount`] instead of relying on that.
pub fn shard_of(controller: &str, key: &str, shards: u32) -> u32 {
    let shard = stable_hash(controller, key)
        .checked_rem(u64::from(shards))
        .unwrap_or(0);
    // The remainder is below `shards`, a u32.
    u32::try_from(shard).unwrap_or(0)
}

/// The FNV state after a worker's id and the separator, so scoring one worker against many shards hashes its
/// id once.
pub(super) fn rendezvous_prefix(worker: &str) -> u64 {
    fnv1a(fnv1a(FNV_OFFSET, worker.as_bytes()), &[SEPARATOR])
}

/// The hash behind a worker's rendezvous score for a shard: FNV-1a 64 over the worker id, 0xff and the shard
/// as 4 little-endian bytes, then the finalizer; `prefix` comes from [`rendezvous_prefix`].
pub(super) fn rendezvous_hash(prefix: u64, shard: u32) -> u64 {
    finalize(fnv1a(prefix, &shard.to_le_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_keys_keep_their_hashes() {
        // Pinned: if one of these changes, every running fleet would reshuffle its shards on upgrade.
        assert_eq!(stable_hash("", ""), PINNED[0]);
        assert_eq!(stable_hash("replicaset", "default/web-7d9f8"), PINNED[1]);
        assert_eq!(stable_hash("deployment", "kube-system/coredns"), PINNED[2]);
        assert_eq!(
            shard_of("replicaset", "default/web-7d9f8", 256),
            (PINNED[1] % 256) as u32
        );
        assert_eq!(rendezvous_hash(rendezvous_prefix("worker-0"), 7), PINNED[3]);
    }

    /// Computed independently (a few lines of Python) from the definition in the docs.
    const PINNED: [u64; 4] = [
        0x4f2d_b50f_1240_40cd,
        0xdc9e_85cf_2f87_e414,
        0x6c4a_a770_6680_3e0f,
        0xf540_4071_f6d1_5fe4,
    ];

    #[test]
    fn the_separator_keeps_controller_and_key_apart() {
        assert_ne!(stable_hash("ab", "c"), stable_hash("a", "bc"));
        assert_ne!(stable_hash("job", "x"), stable_hash("cronjob", "x"));
    }

    #[test]
    fn no_shards_means_shard_zero_rather_than_a_panic() {
        assert_eq!(shard_of("job", "a/b", 0), 0);
    }

    /// Pearson's chi-square statistic of `n` keys over 256 shards.
    fn chi_square(controller: &str, prefix: &str, n: u32) -> f64 {
        let mut counts = [0u32; 256];
        for i in 0..n {
            counts[shard_of(controller, &format!("{prefix}{i}"), 256) as usize] += 1;
        }
        let expected = f64::from(n) / 256.0;
        counts
            .iter()
            .map(|&c| (f64::from(c) - expected).powi(2) / expected)
            .sum()
    }

    #[test]
    fn sequential_keys_spread_evenly_over_256_shards() {
        // 255 degrees of freedom: mean 255, standard deviation about 22.6; 400 is more than 6 sigma out.
        let chi = chi_square("replicaset", "default/web-", 100_000);
        assert!(chi < 400.0, "chi-square {chi}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn any_key_family_spreads_evenly_over_256_shards(controller in "[a-z]{1,12}", prefix in "[a-z0-9/-]{0,20}") {
            let chi = chi_square(&controller, &prefix, 100_000);
            prop_assert!(chi < 400.0, "chi-square {}", chi);
        }
    }
}
