//! The gRPC `Dispatch` service: one bidirectional stream per worker. This is the edge: protocol messages
//! are checked and converted here, and every refusal is a clear status, a metric and a log line.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flotilla_proto as proto;
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info_span, warn};

use flotilla_common::Verdict;
use flotilla_common::tls::check_worker_identity;

use crate::fleet::{Command, Credit, Done, Hello, HelloRefused, Limits, WriteIntent};
use crate::leader_slot::LeaderSlot;
use crate::metrics::FleetMetrics;

/// The `Dispatch` service.
pub struct DispatchService {
    slot: LeaderSlot,
    metrics: FleetMetrics,
    hello_timeout: Duration,
    limits: Limits,
    next_conn: AtomicU64,
}

impl DispatchService {
    /// A service that forwards to whatever dispatcher `slot` holds, refusing what exceeds `limits`.
    pub fn new(
        slot: LeaderSlot,
        metrics: FleetMetrics,
        hello_timeout: Duration,
        limits: Limits,
    ) -> Self {
        Self {
            slot,
            metrics,
            hello_timeout,
            limits,
            next_conn: AtomicU64::new(1),
        }
    }

    /// The tonic server, with the fleet's message size limits.
    pub fn into_server(self) -> proto::dispatch_server::DispatchServer<Self> {
        proto::dispatch_server::DispatchServer::new(self)
            .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(proto::MAX_MESSAGE_BYTES)
    }

    /// Counts a refused stream of `peer` and logs it (rate-limited per peer and reason).
    fn refuse(&self, peer: &str, reason: &str, status: Status) -> Status {
        if let Verdict::Log { suppressed } = self.metrics.refused(peer, reason) {
            warn!(
                peer,
                reason,
                suppressed,
                message = status.message(),
                "refusing a worker stream"
            );
        }
        status
    }
}

/// The status a refused Hello ends its stream with.
fn refusal(refused: HelloRefused) -> Status {
    let message = refused.to_string();
    match refused {
        HelloRefused::NewerTerm { .. } => Status::failed_precondition(message),
        HelloRefused::Unregistered { .. } | HelloRefused::LostRegistration { .. } => {
            Status::permission_denied(message)
        }
        HelloRefused::RegistryUnavailable => Status::unavailable(message),
    }
}

/// The readable intents of a batch, or `None` if none is. Intents only serve tracing: a garbled one
/// is dropped (counted, a debug line), never a reason to refuse the stream.
fn write_intents(
    batch: proto::WriteIntentBatch,
    metrics: &FleetMetrics,
) -> Option<Vec<WriteIntent>> {
    let mut intents = Vec::with_capacity(batch.items.len());
    let mut garbled = 0;
    for intent in batch.items {
        match WriteIntent::try_from(intent) {
            Ok(intent) => intents.push(intent),
            Err(error) => {
                garbled += 1;
                debug!(%error, "unreadable write intent; dropped");
            }
        }
    }
    metrics.intents_dropped("garbled", garbled);
    (!intents.is_empty()).then_some(intents)
}

type WorkStream = Pin<Box<dyn Stream<Item = Result<proto::CoordinatorMessage, Status>> + Send>>;

#[tonic::async_trait]
impl proto::dispatch_server::Dispatch for DispatchService {
    type WorkStream = WorkStream;

    async fn work(
        &self,
        request: Request<Streaming<proto::WorkerMessage>>,
    ) -> Result<Response<WorkStream>, Status> {
        let Some(dispatcher) = self.slot.dispatcher() else {
            return Err(self.slot.not_leader());
        };
        // Until the Hello names the worker, the peer is its IP (not the port: every stream has its own).
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string());
        // With mTLS, the client certificate the connection was made with (`None` in plaintext).
        let peer_certs = request.peer_certs();
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(self.hello_timeout, inbound.message()).await {
            Err(_) => {
                return Err(self.refuse(
                    &peer,
                    "no_hello",
                    Status::deadline_exceeded(format!("no Hello within {:?}", self.hello_timeout)),
                ));
            }
            Ok(Err(status)) => {
                return Err(self.refuse(
                    &peer,
                    "garbled_message",
                    Status::invalid_argument(format!("unreadable message: {}", status.message())),
                ));
            }
            Ok(Ok(None)) => return Err(Status::cancelled("stream closed before Hello")),
            Ok(Ok(Some(message))) => message,
        };
        let hello = match first.msg {
            Some(proto::worker_message::Msg::Hello(hello)) => {
                Hello::from_proto(hello, &self.limits).map_err(|e| {
                    self.refuse(
                        &peer,
                        "invalid_hello",
                        Status::invalid_argument(format!("invalid Hello: {e}")),
                    )
                })?
            }
            _ => {
                return Err(self.refuse(
                    &peer,
                    "no_hello",
                    Status::invalid_argument("the first message must be Hello"),
                ));
            }
        };
        // The certificate must name the worker the Hello claims to be, so a worker cannot take over
        // another's stream, shards or items.
        if let Err(err) =
            check_worker_identity(peer_certs.as_deref().map(Vec::as_slice), &hello.worker_id)
        {
            return Err(self.refuse(
                &peer,
                "tls_identity_mismatch",
                Status::permission_denied(format!("worker identity refused: {err}")),
            ));
        }
        let worker = hello.worker_id.clone();
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        // Unbounded: the dispatcher must never wait on a worker (see `Outbound`, fleet/workers.rs).
        let (tx, rx) = mpsc::unbounded_channel();
        let (reply_tx, reply_rx) = oneshot::channel();
        if !dispatcher
            .send(Command::Connect {
                hello,
                conn_id,
                tx: tx.clone(),
                reply: reply_tx,
            })
            .await
        {
            return Err(self.slot.not_leader());
        }
        let welcome = reply_rx
            .await
            .map_err(|_| self.slot.not_leader())?
            .map_err(refusal)?;
        let term = welcome.term;
        let _ = tx.send(proto::CoordinatorMessage {
            msg: Some(proto::coordinator_message::Msg::Welcome(welcome)),
        });
        drop(tx);
        let metrics = self.metrics.clone();
        let limits = self.limits;
        let span = info_span!("worker_stream", worker = %worker, term, conn = conn_id);
        tokio::spawn(
            async move {
                // Every refusal is counted exactly; its log line is rate-limited per worker and reason.
                let refused = |reason: &str| match metrics.refused(&worker, reason) {
                    Verdict::Log { suppressed } => Some(suppressed),
                    Verdict::Suppress => None,
                };
                loop {
                    let message = match inbound.message().await {
                        Ok(Some(message)) => message,
                        Ok(None) => break,
                        Err(status) => {
                            if let Some(suppressed) = refused("garbled_message") {
                                warn!(suppressed, error = %status.message(), "worker stream failed; closing it");
                            }
                            break;
                        }
                    };
                    let cmd = match message.msg {
                        Some(proto::worker_message::Msg::Credit(c)) => {
                            match Credit::from_proto(c, &limits) {
                                Ok(credit) => Command::Credit {
                                    worker: worker.clone(),
                                    conn_id,
                                    credit,
                                },
                                Err(e) => {
                                    if let Some(suppressed) = refused("invalid_credit") {
                                        warn!(suppressed, error = %e, "invalid Credit; ignored");
                                    }
                                    continue;
                                }
                            }
                        }
                        Some(proto::worker_message::Msg::Done(batch)) => {
                            let mut done = Vec::with_capacity(batch.items.len());
                            for d in batch.items {
                                match Done::try_from(d) {
                                    Ok(mut d) => {
                                        for e in d.invalid_writes.drain(..) {
                                            if let Some(suppressed) = refused("invalid_write") {
                                                warn!(suppressed, error = %e, "unreadable write in a Done; finishing the item without waiting for it");
                                            }
                                        }
                                        done.push(d);
                                    }
                                    // Keep the item held: a Done we cannot read must not free a key.
                                    // The worker's next Hello (or its lease) settles it.
                                    Err(e) => {
                                        if let Some(suppressed) = refused("invalid_done") {
                                            warn!(suppressed, error = %e, "unreadable Done; the item stays held");
                                        }
                                    }
                                }
                            }
                            Command::Done {
                                worker: worker.clone(),
                                conn_id,
                                done,
                            }
                        }
                        Some(proto::worker_message::Msg::Intents(batch)) => {
                            match write_intents(batch, &metrics) {
                                Some(intents) => Command::Intents { intents },
                                None => continue,
                            }
                        }
                        Some(proto::worker_message::Msg::Hello(_)) => {
                            if let Some(suppressed) = refused("second_hello") {
                                warn!(suppressed, "a second Hello on one stream; closing it");
                            }
                            break;
                        }
                        None => {
                            refused("empty_message");
                            continue;
                        }
                    };
                    // Waits while the dispatcher's command channel is full, and so stops reading this
                    // stream: gRPC flow control then holds the worker's sends back.
                    if !dispatcher.send(cmd).await {
                        break;
                    }
                }
                dispatcher
                    .send(Command::Disconnected { worker, conn_id })
                    .await;
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(
            UnboundedReceiverStream::new(rx).map(Ok),
        )))
    }
}
