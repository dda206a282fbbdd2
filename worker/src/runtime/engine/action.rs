//! What the session's state machine asks its loop to do, and how a session ends. The machine never
//! awaits: it returns these, in order, and the loop carries them out in that order. An action whose
//! I/O fails is answered at once with the matching event (`Connect` with `on_connected` or
//! `on_connect_failed`, `Send` with `on_send_failed`), and the actions of that answer run before the
//! rest of the batch: the machine's later actions may rely on it having seen the outcome.

use flotilla_proto as proto;

use super::super::ledger::Assigned;

/// One thing for the loop to do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Open a stream to the leader at `address`, Hello first. Only the worker being killed and the
    /// lease being lost are watched meanwhile; the loop then answers with `on_connected` or
    /// `on_connect_failed`.
    Connect {
        /// The leader's `host:port`.
        address: String,
        /// The Hello to open with: the worker's controllers, the newest term it knows and what it holds.
        hello: proto::Hello,
    },
    /// Queue these messages, in order, on the open stream; `on_send_failed` if it is gone.
    Send(Vec<proto::WorkerMessage>),
    /// The stream was welcomed: reconciles read through this leader's cache from now on.
    UseLeaderCache,
    /// Drop the stream, if one is open, and forget the leader's cache.
    Disconnect,
    /// Half-close the stream so what was queued leaves, and wait (bounded) for the leader to end it.
    CloseGracefully,
    /// Start reconciling an item now.
    Spawn(Box<Assigned>),
    /// Cancel every reconcile this session started.
    CancelReconciles,
    /// The session is over; nothing follows this action.
    End(End),
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The lease was lost: everything was cancelled and forgotten; start a new session.
    Lost,
    /// A graceful shutdown finished draining (or its grace period ran out): revoke the lease and stop.
    Shutdown,
    /// Killed: stop at once, the lease expires on its own.
    Killed,
}
