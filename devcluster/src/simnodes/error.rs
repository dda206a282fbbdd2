//! Errors of the node simulator.

/// Errors of the node simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is unusable.
    #[error("invalid node simulator configuration: {0}")]
    InvalidConfig(String),
    /// The node is not one of the simulated nodes.
    #[error("{0} is not a simulated node")]
    UnknownNode(String),
    /// A call to the Kubernetes API failed.
    #[error("cannot {what}")]
    Api {
        /// What the simulator was doing.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}
