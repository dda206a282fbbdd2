//! The etcd key layout of one fleet: where the leader, the workers and the shard owners live.

/// Key names under `<prefix>/<fleet>/` (`--etcd-prefix`, default `/flotilla`).
///
/// - `leader`: the election prefix; the newest key under it with the lowest create revision leads.
/// - `workers/<id>`: one key per live worker, on that worker's lease; its value describes the worker.
/// - `shards/<n>`: the worker owning shard `n`, on the owner's lease, so a dead worker's shards free
///   themselves when its lease expires.
/// - `controllers/<name>`: the spec of each controller the fleet runs (protobuf `ControllerSpec`).
#[derive(Debug, Clone)]
pub struct FleetKeys {
    root: String,
}

impl FleetKeys {
    /// Keys of fleet `fleet` under the default prefix, `/flotilla`.
    pub fn new(fleet: &str) -> Self {
        Self::with_prefix(crate::etcd::DEFAULT_ETCD_PREFIX, fleet)
    }

    /// Keys of fleet `fleet` under `prefix` (`/flotilla`; a trailing `/` is ignored). Every key this
    /// type names starts with `<prefix>/<fleet>/`, so an etcd role granted that prefix (or `<prefix>/`
    /// for every fleet) covers all Flotilla reads and writes.
    pub fn with_prefix(prefix: &str, fleet: &str) -> Self {
        Self {
            root: format!("{}/{fleet}/", prefix.trim_end_matches('/')),
        }
    }

    /// The prefix every key of the fleet starts with: `<prefix>/<fleet>/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The election name coordinators campaign on.
    pub fn election(&self) -> String {
        format!("{}leader", self.root)
    }

    /// Prefix of all worker registrations.
    pub fn workers_prefix(&self) -> String {
        format!("{}workers/", self.root)
    }

    /// The registration key of worker `id`.
    pub fn worker(&self, id: &str) -> String {
        format!("{}{id}", self.workers_prefix())
    }

    /// Prefix of all shard ownership keys.
    pub fn shards_prefix(&self) -> String {
        format!("{}shards/", self.root)
    }

    /// The ownership key of shard `n`; zero-padded so keys sort by shard number.
    pub fn shard(&self, n: u32) -> String {
        format!("{}{n:05}", self.shards_prefix())
    }

    /// Prefix of the controller specs the fleet runs (written by the leader, read by a new leader and by
    /// hot standbys so they can start informers before any worker connects).
    pub fn controllers_prefix(&self) -> String {
        format!("{}controllers/", self.root)
    }

    /// The spec key of controller `name`.
    pub fn controller(&self, name: &str) -> String {
        format!("{}{name}", self.controllers_prefix())
    }

    /// Parses the shard number out of an ownership key.
    pub fn parse_shard(&self, key: &[u8]) -> Option<u32> {
        std::str::from_utf8(key)
            .ok()?
            .strip_prefix(&self.shards_prefix())?
            .parse()
            .ok()
    }

    /// Parses the worker id out of a registration key.
    pub fn parse_worker<'a>(&self, key: &'a [u8]) -> Option<&'a str> {
        let key = std::str::from_utf8(key).ok()?;
        key.strip_prefix(self.workers_prefix().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_keys_round_trip_and_sort_by_number() {
        let keys = FleetKeys::new("f");
        assert_eq!(keys.parse_shard(keys.shard(42).as_bytes()), Some(42));
        assert!(keys.shard(9) < keys.shard(10));
        assert_eq!(keys.parse_shard(b"/flotilla/other/shards/00001"), None);
    }

    #[test]
    fn every_key_lives_under_the_prefix_and_the_fleet() {
        let keys = FleetKeys::with_prefix("/tenants/a/", "f");
        assert_eq!(keys.root(), "/tenants/a/f/");
        for key in [
            keys.election(),
            keys.worker("w"),
            keys.shard(1),
            keys.controller("c"),
        ] {
            assert!(key.starts_with("/tenants/a/f/"), "{key}");
        }
        assert_eq!(FleetKeys::new("f").root(), "/flotilla/f/");
        let other = FleetKeys::with_prefix("/tenants/b", "f");
        assert_eq!(other.parse_shard(keys.shard(3).as_bytes()), None);
        assert_eq!(other.parse_worker(keys.worker("w").as_bytes()), None);
    }

    #[test]
    fn worker_keys_round_trip() {
        let keys = FleetKeys::new("f");
        assert_eq!(
            keys.parse_worker(keys.worker("w-1").as_bytes()),
            Some("w-1")
        );
    }
}
