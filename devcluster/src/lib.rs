//! A local Kubernetes API server stored in etcd the way kube-apiserver stores it, plus a kwok-like node
//! simulator: the test and demo fixture of Flotilla. Production points at a real cluster instead.

mod apiserver;
mod etcd;
mod fault_proxy;
mod simnodes;

pub use apiserver::{
    Attributes, AuthConfig, AuthorizationMode, Decision, DevCluster, DevClusterConfig,
    DevClusterError, RuleRef, Serving, TlsError, UserInfo,
};

pub use etcd::{ETCD_BIN_ENV, EtcdError, EtcdServer, EtcdServerTls};
pub use fault_proxy::{Clients, Direction, Fault, FaultProxy};
pub use simnodes::{
    ConditionsChange, NODE_LEASE_NAMESPACE, NodeConditions, NodeControl, NodeSimulator,
    SIMULATED_LABEL, SimConfig, SimError, SimNodesHandle, control_router, serve_control,
};
