//! One module per `flotilla` subcommand: flags and the process life of that role.

pub mod bench;
pub mod coordinator;
pub mod devcluster;
pub mod kcm_flags;
pub mod procs;
pub mod rbac;
pub mod selection;
pub mod simnodes;
pub mod status;
pub mod status_watch;
pub mod up;
pub mod up_progress;
pub mod up_workloads;
pub mod worker;
