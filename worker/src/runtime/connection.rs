//! One Dispatch stream to the leader: a channel to its address (mutual TLS, or plaintext with
//! `--insecure-plaintext`), the outgoing messages fed from an mpsc (as in tonic's streaming example),
//! and the incoming stream.

use std::time::Duration;

use flotilla_common::tls::ClientTransport;
use flotilla_proto as proto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// Errors of opening a stream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The leader's address is not a usable URI.
    #[error("leader address {0:?} is not a valid address")]
    Address(String),
    /// No connection could be made (the TLS handshake's error, such as a certificate the leader's CA
    /// did not sign, is in the chain).
    #[error("cannot connect to the leader: {}", chain(.0))]
    Transport(tonic::transport::Error),
    /// The leader refused the stream.
    #[error("the leader refused the stream: {0}")]
    Refused(tonic::Status),
    /// Connecting took too long.
    #[error("connecting to the leader timed out")]
    Timeout,
}

/// An error and its sources, `: `-separated: tonic's transport error says only "transport error", the
/// reason (a refused certificate, a refused connection) is in its sources.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An open stream.
pub(crate) struct Connection {
    pub(crate) channel: Channel,
    /// Outgoing messages. Unbounded on purpose: the sender is the worker's loop, which must never wait
    /// on the network — it has to see a lost lease at once to fence itself. What waits here is bounded
    /// by the credits anyway: Dones of at most the items held (the advertised concurrency), and at
    /// most one Credit per controller per flush.
    tx: mpsc::UnboundedSender<proto::WorkerMessage>,
    pub(crate) incoming: tonic::Streaming<proto::CoordinatorMessage>,
}

impl Connection {
    /// Connects to `address` (`host:port`) over `transport` and opens `Dispatch.Work`, sending `hello`
    /// first.
    ///
    /// # Errors
    /// See [`ConnectError`].
    pub(crate) async fn open(
        transport: &ClientTransport,
        address: &str,
        hello: proto::Hello,
        timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let opened = async {
            let endpoint = Endpoint::from_shared(format!("http://{address}"))
                .map_err(|_| ConnectError::Address(address.to_owned()))?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(5))
                .keep_alive_timeout(Duration::from_secs(5));
            let channel = transport
                .connect(endpoint)
                .await
                .map_err(ConnectError::Transport)?;
            let (tx, rx) = mpsc::unbounded_channel();
            // The coordinator may wait for Hello before answering the call, so Hello goes in first.
            let hello = proto::WorkerMessage {
                msg: Some(proto::worker_message::Msg::Hello(hello)),
            };
            tx.send(hello).map_err(|_| ConnectError::Timeout)?;
            let mut client = proto::dispatch_client::DispatchClient::new(channel.clone())
                .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(proto::MAX_MESSAGE_BYTES);
            let response = client
                .work(UnboundedReceiverStream::new(rx))
                .await
                .map_err(ConnectError::Refused)?;
            Ok(Self {
                channel,
                tx,
                incoming: response.into_inner(),
            })
        };
        tokio::time::timeout(timeout, opened)
            .await
            .map_err(|_| ConnectError::Timeout)?
    }

    /// Ends the stream politely: half-closes the worker's side so everything queued is sent, then waits
    /// (at most `timeout`) for the leader to end its side. Dropping the stream instead could reset it
    /// before the last Dones left.
    pub(crate) async fn close(self, timeout: Duration) {
        let Self {
            channel: _,
            tx,
            mut incoming,
        } = self;
        drop(tx);
        let _ = tokio::time::timeout(timeout, async {
            while let Ok(Some(_)) = incoming.message().await {}
        })
        .await;
    }

    /// Queues a message; `false` when the stream is gone.
    pub(crate) fn send(&self, message: proto::WorkerMessage) -> bool {
        self.tx.send(message).is_ok()
    }
}
