//! The kwok-like node simulator: simulated nodes with heartbeats, a trivial binder for pending pods
//! (which waits, as the scheduler does, for the PersistentVolumeClaims a pod mounts),
//! and per-node "kubelets" that report pods Running, Failed or Succeeded — all through the public
//! Kubernetes API.

mod claims;
mod config;
mod control;
mod error;
mod kubelet;
mod nodes;
mod placement;
mod pod_status;
mod simulator;
mod timers;

pub use config::SimConfig;
pub use control::{NodeControl, control_router};
pub use error::SimError;
pub use nodes::{NODE_LEASE_NAMESPACE, SIMULATED_LABEL};
pub use simulator::{NodeSimulator, SimNodesHandle};
