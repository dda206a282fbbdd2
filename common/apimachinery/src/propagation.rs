//! The finalizers of deletion propagation: the API server adds them for the `Orphan` and `Foreground`
//! policies, and the garbage collector removes them once the dependents are orphaned or gone.

/// The finalizer of an object whose dependents are orphaned before it goes.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// The finalizer of an object whose blocking dependents are deleted before it goes.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
