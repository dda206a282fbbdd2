//! Which Namespace key runs the fleet's one pod GC pass: `kube-system` where the fleet sees it (every
//! cluster has it and kube-apiserver refuses to delete it), otherwise — a fleet scoped to some
//! namespaces — the first of those by name. When a scoped fleet's first namespace is deleted, the
//! next one takes over at its next event (its key has nothing else to wake it).

/// The namespace whose key runs the pass wherever the fleet sees it.
pub const ANCHOR_NAMESPACE: &str = "kube-system";

/// Whether the key of namespace `name` (present in the cache) runs the pass, given whether the cache
/// holds [`ANCHOR_NAMESPACE`] and, when it does not, the first cached namespace name.
pub fn runs_the_pass(name: &str, anchor_cached: bool, first_cached: Option<&str>) -> bool {
    if anchor_cached {
        name == ANCHOR_NAMESPACE
    } else {
        first_cached == Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_system_runs_the_pass_wherever_the_fleet_sees_it() {
        assert!(runs_the_pass("kube-system", true, Some("default")));
        assert!(!runs_the_pass("default", true, Some("default")));
    }

    #[test]
    fn a_scoped_fleet_runs_the_pass_on_its_first_namespace_by_name() {
        assert!(runs_the_pass("team-a", false, Some("team-a")));
        assert!(!runs_the_pass("team-b", false, Some("team-a")));
        assert!(!runs_the_pass("team-b", false, None));
    }
}
