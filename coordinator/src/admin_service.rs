//! The gRPC `Admin` service: the leader's view of the fleet for `flotilla status` and scripts.

use flotilla_proto as proto;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::fleet::Command;
use crate::leader_slot::LeaderSlot;

/// The `Admin` service; answers only on the leader.
pub struct AdminService {
    slot: LeaderSlot,
}

impl AdminService {
    /// A service that asks whatever dispatcher `slot` holds.
    pub fn new(slot: LeaderSlot) -> Self {
        Self { slot }
    }

    /// The tonic server.
    pub fn into_server(self) -> proto::admin_server::AdminServer<Self> {
        proto::admin_server::AdminServer::new(self)
    }
}

#[tonic::async_trait]
impl proto::admin_server::Admin for AdminService {
    async fn status(
        &self,
        _request: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let Some(dispatcher) = self.slot.dispatcher() else {
            return Err(self.slot.not_leader());
        };
        let (reply, rx) = oneshot::channel();
        if !dispatcher.send(Command::Status { reply }).await {
            return Err(self.slot.not_leader());
        }
        rx.await
            .map(Response::new)
            .map_err(|_| self.slot.not_leader())
    }
}
