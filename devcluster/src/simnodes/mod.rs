//! The kwok-like node simulator: simulated nodes with heartbeats, a trivial binder for pending pods
//! (which waits, as the scheduler does, for the PersistentVolumeClaims a pod mounts),
//! and per-node "kubelets" that report pods Running, Failed or Succeeded — all through the public
//! Kubernetes API. Nodes can be stopped and started, and made to report pressure or an unavailable
//! network (see [`control_router`] for the HTTP routes); pod IPs come from each Node's `spec.podCIDR`,
//! which the simulator assigns itself unless told to leave it to a node-ipam controller
//! ([`SimConfig::assign_pod_cidrs`]).

mod claims;
mod config;
mod control;
mod error;
mod kubelet;
mod node_conditions;
mod nodes;
mod placement;
mod pod_range;
mod pod_status;
mod simulator;
mod timers;

pub use config::SimConfig;
pub use control::{NodeControl, control_router, serve_control};
pub use error::SimError;
pub use node_conditions::{ConditionsChange, NodeConditions};
pub use nodes::{NODE_LEASE_NAMESPACE, SIMULATED_LABEL};
pub use simulator::{NodeSimulator, SimNodesHandle};
