//! A cuttable TCP proxy for partition tests: put one in front of a link (a process's etcd, its
//! Kubernetes API, a coordinator's gRPC listener) and cut, blackhole, delay or throttle it while the
//! processes at both ends keep running.
//!
//! Each accepted connection is forwarded to the proxy's upstream by two tasks, one per direction.
//! A fault change is published on a `watch` channel that every direction task selects on, so it
//! applies to open connections at once, not only to new ones. A fault can target every client or
//! only the connections whose client socket belongs to one process ([`Clients::Pid`]): the proxy
//! finds the socket's inode in `/proc/net/tcp{,6}` and the process that holds it in
//! `/proc/<pid>/fd`, at accept and again whenever a per-process fault is set.
//!
//! The proxy owns every task it starts: dropping the [`FaultProxy`] stops accepting and closes every
//! connection.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What the proxy does to the bytes of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything as it comes.
    #[default]
    Pass,
    /// Open connections are reset (RST) at once and new ones are reset on accept, whatever the
    /// direction the fault was set for: TCP cannot cut one direction of a connection.
    Cut,
    /// Bytes are read and dropped: nothing forwarded, nothing closed, no RST, so the peer sees a
    /// silent network until its own timeouts fire. Bytes already queued are held, not lost, and
    /// flow again when the fault is lifted; an end-of-stream seen meanwhile is forwarded then too.
    Blackhole,
    /// Every byte is forwarded this long after it was read: latency, not a bandwidth limit.
    Delay(Duration),
    /// At most this many bytes per second are forwarded; the rest waits (up to a bounded buffer,
    /// then the sender is pushed back by TCP flow control). Zero is treated as one.
    Throttle {
        /// The forwarding rate.
        bytes_per_sec: u64,
    },
}

/// Which way through the proxy a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Both ways.
    Both,
    /// From the client to the upstream.
    ToUpstream,
    /// From the upstream to the client.
    ToClient,
}

/// Which connections a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clients {
    /// Every connection.
    All,
    /// The connections whose client socket is held by this process (found through `/proc`; on a
    /// system without `/proc`, no connection matches).
    Pid(u32),
}

/// A TCP proxy on loopback whose links can be faulted at run time. Dropping it stops accepting
/// and closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1:0 and forwards each accepted connection to `upstream`.
    ///
    /// # Errors
    ///
    /// Binding the listener failed.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (changed, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            proxy_addr: addr,
            state: Mutex::new(State {
                upstream,
                all: [Fault::Pass; 2],
                by_pid: HashMap::new(),
                conns: HashMap::new(),
            }),
            changed,
            next_id: AtomicU64::new(0),
        });
        let stop = CancellationToken::new();
        let accept = tokio::spawn(
            accept_loop(listener, shared.clone(), stop.clone())
                .instrument(tracing::debug_span!("fault_proxy", %addr)),
        );
        Ok(FaultProxy {
            addr,
            shared,
            stop,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// New connections go to `upstream` from now on (an upstream restarted on another port).
    /// Open connections stay with the old one.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        self.shared.state.lock().upstream = upstream;
    }

    /// Every client, both directions; applies to open connections at once and to new ones.
    /// Replaces every per-process fault.
    pub fn set(&self, fault: Fault) {
        self.set_for(Clients::All, Direction::Both, fault);
    }

    /// Only `clients`, only `dir`; applies to open connections at once and to new ones. A fault for
    /// [`Clients::All`] replaces the per-process faults of the same direction; a per-process fault
    /// overrides the fault for all clients on that process's connections.
    pub fn set_for(&self, clients: Clients, dir: Direction, fault: Fault) {
        let slots: &[usize] = match dir {
            Direction::Both => &[UP, DOWN],
            Direction::ToUpstream => &[UP],
            Direction::ToClient => &[DOWN],
        };
        {
            let mut state = self.shared.state.lock();
            match clients {
                Clients::All => {
                    for &slot in slots {
                        state.all[slot] = fault;
                    }
                    for faults in state.by_pid.values_mut() {
                        for &slot in slots {
                            faults[slot] = None;
                        }
                    }
                    state
                        .by_pid
                        .retain(|_, faults| faults.iter().any(Option::is_some));
                }
                Clients::Pid(pid) => {
                    let faults = state.by_pid.entry(pid).or_default();
                    for &slot in slots {
                        faults[slot] = Some(fault);
                    }
                    // The process may hold connections accepted before it had a fault of its own.
                    let unresolved: Vec<(u64, u64)> = state
                        .conns
                        .iter()
                        .filter(|(_, c)| c.owner.is_none())
                        .filter_map(|(id, c)| c.inode.map(|inode| (*id, inode)))
                        .collect();
                    if !unresolved.is_empty() {
                        let held = socket_inodes_of(pid);
                        for (id, inode) in unresolved {
                            if held.contains(&inode)
                                && let Some(conn) = state.conns.get_mut(&id)
                            {
                                conn.owner = Some(pid);
                            }
                        }
                    }
                }
            }
        }
        self.shared
            .changed
            .send_modify(|generation| *generation += 1);
    }

    /// Back to [`Fault::Pass`] everywhere.
    pub fn heal(&self) {
        self.set(Fault::Pass);
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.state.lock().conns.len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.accept.abort();
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

// === impl Shared ===

/// Index of the client-to-upstream direction in per-direction arrays.
const UP: usize = 0;
/// Index of the upstream-to-client direction in per-direction arrays.
const DOWN: usize = 1;

/// What the handle and the connection tasks share.
struct Shared {
    proxy_addr: SocketAddr,
    state: Mutex<State>,
    /// Bumped on every fault change; direction tasks re-read their fault when it moves.
    changed: watch::Sender<u64>,
    next_id: AtomicU64,
}

/// The faults in force and the connections open.
struct State {
    upstream: SocketAddr,
    /// The fault for every client, per direction (`UP`, `DOWN`).
    all: [Fault; 2],
    /// Per-process overrides, per direction; `None` falls back to `all`.
    by_pid: HashMap<u32, [Option<Fault>; 2]>,
    /// Open connections by id; an entry lives as long as either direction task.
    conns: HashMap<u64, Conn>,
}

/// What the proxy knows of one connection's client.
struct Conn {
    /// The inode of the client's socket, when `/proc/net/tcp` showed it.
    inode: Option<u64>,
    /// The process found holding that socket, among the processes that have a fault of their own.
    owner: Option<u32>,
}

impl Shared {
    /// The fault in force for connection `id` in direction `slot`.
    fn fault(&self, id: u64, slot: usize) -> Fault {
        let state = self.state.lock();
        state.fault(id, slot)
    }
}

impl State {
    fn fault(&self, id: u64, slot: usize) -> Fault {
        self.conns
            .get(&id)
            .and_then(|c| c.owner)
            .and_then(|pid| self.by_pid.get(&pid))
            .and_then(|faults| faults[slot])
            .unwrap_or(self.all[slot])
    }
}

/// Removes its connection from the table when the last direction task ends.
struct ConnGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.shared.state.lock().conns.remove(&self.id);
    }
}

// === accept ===

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let (client, peer) = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or the like: back off rather than spin.
                    tracing::warn!(%error, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let inode = client_socket_inode(peer, shared.proxy_addr);
        let (upstream, cut) = {
            let mut state = shared.state.lock();
            let owner = inode.and_then(|inode| {
                state
                    .by_pid
                    .keys()
                    .copied()
                    .find(|&pid| socket_inodes_of(pid).contains(&inode))
            });
            state.conns.insert(id, Conn { inode, owner });
            let cut = state.fault(id, UP) == Fault::Cut || state.fault(id, DOWN) == Fault::Cut;
            (state.upstream, cut)
        };
        let guard = Arc::new(ConnGuard {
            shared: shared.clone(),
            id,
        });
        if cut {
            reset(&client);
            drop(client);
            drop(guard);
            continue;
        }
        let stop = stop.child_token();
        tokio::spawn(
            connect_and_pump(client, upstream, guard, stop)
                .instrument(tracing::debug_span!("conn", id, %peer)),
        );
    }
}

/// Dials the upstream and starts one task per direction; a client whose upstream cannot be
/// reached is reset, as a refused connection would be.
async fn connect_and_pump(
    client: TcpStream,
    upstream: SocketAddr,
    guard: Arc<ConnGuard>,
    stop: CancellationToken,
) {
    let upstream = tokio::select! {
        biased;
        () = stop.cancelled() => return,
        dialed = TcpStream::connect(upstream) => match dialed {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, %upstream, "fault proxy upstream unreachable");
                reset(&client);
                return;
            }
        },
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let up = Pump {
        shared: guard.shared.clone(),
        id: guard.id,
        slot: UP,
        from: client_read,
        to: upstream_write,
        stop: stop.clone(),
        _guard: guard.clone(),
    };
    let down = Pump {
        shared: guard.shared.clone(),
        id: guard.id,
        slot: DOWN,
        from: upstream_read,
        to: client_write,
        stop,
        _guard: guard,
    };
    tokio::spawn(up.run().instrument(tracing::debug_span!("to_upstream")));
    tokio::spawn(down.run().instrument(tracing::debug_span!("to_client")));
}

/// Makes the socket send RST instead of FIN when its last handle is dropped.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

// === impl Pump ===

/// Bytes read but not yet forwarded, past which the pump stops reading so TCP pushes back on the
/// sender. Large enough to keep a delayed loopback link near full speed.
const MAX_QUEUED: usize = 4 << 20;
/// Largest single read.
const READ_BUF: usize = 64 << 10;

/// One direction of one connection: reads `from`, applies the fault, writes `to`.
struct Pump {
    shared: Arc<Shared>,
    id: u64,
    slot: usize,
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    stop: CancellationToken,
    _guard: Arc<ConnGuard>,
}

/// Why a pump ended.
enum End {
    /// The source ended and everything read was forwarded.
    Done,
    /// A cut: reset both sockets, and stop the other direction too.
    Reset,
    /// The proxy was dropped, or a socket failed.
    Closed,
}

impl Pump {
    async fn run(mut self) {
        match self.pump().await {
            End::Done => {
                let _ = self.to.shutdown().await;
            }
            End::Reset => {
                reset(self.from.as_ref());
                reset(self.to.as_ref());
                // The other direction holds the other halves: stop it so they are dropped too.
                self.stop.cancel();
            }
            End::Closed => self.stop.cancel(),
        }
    }

    async fn pump(&mut self) -> End {
        let mut changed = self.shared.changed.subscribe();
        let mut fault = self.shared.fault(self.id, self.slot);
        let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut queued = 0usize;
        let mut eof = false;
        // Throttle: the earliest time the next write may start.
        let mut next_write = Instant::now();
        let mut buf = vec![0u8; READ_BUF];
        loop {
            if fault == Fault::Cut {
                return End::Reset;
            }
            let holding = fault == Fault::Blackhole;
            if eof && queue.is_empty() && !holding {
                return End::Done;
            }
            let can_read = !eof && queued < MAX_QUEUED;
            // What to write next and when, if anything.
            let write = (!holding)
                .then(|| queue.front())
                .flatten()
                .map(|(due, bytes)| {
                    let (at, len) = match fault {
                        Fault::Throttle { bytes_per_sec } => {
                            let chunk = usize::try_from((bytes_per_sec / 10).max(1))
                                .unwrap_or(usize::MAX)
                                .min(bytes.len());
                            ((*due).max(next_write), chunk)
                        }
                        _ => (*due, bytes.len()),
                    };
                    (at, &bytes[..len])
                });
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return End::Closed,
                res = changed.changed() => {
                    if res.is_err() {
                        return End::Closed;
                    }
                    fault = self.shared.fault(self.id, self.slot);
                }
                written = async {
                    let Some((at, bytes)) = write else {
                        return std::future::pending().await;
                    };
                    tokio::time::sleep_until(at).await;
                    self.to.write(bytes).await
                }, if write.is_some() => {
                    let n = match written {
                        Ok(0) | Err(_) => return End::Closed,
                        Ok(n) => n,
                    };
                    if let Fault::Throttle { bytes_per_sec } = fault {
                        let secs = n as f64 / bytes_per_sec.max(1) as f64;
                        next_write = Instant::now() + Duration::from_secs_f64(secs);
                    }
                    queued -= n;
                    let Some((_, front)) = queue.front_mut() else { continue };
                    if n >= front.len() {
                        queue.pop_front();
                    } else {
                        front.drain(..n);
                    }
                }
                read = self.from.read(&mut buf), if can_read => {
                    match read {
                        Err(_) => return End::Closed,
                        Ok(0) => eof = true,
                        Ok(n) => {
                            if holding {
                                continue;
                            }
                            let delay = match fault {
                                Fault::Delay(delay) => delay,
                                _ => Duration::ZERO,
                            };
                            queue.push_back((Instant::now() + delay, buf[..n].to_vec()));
                            queued += n;
                        }
                    }
                }
            }
        }
    }
}

// === /proc lookup ===

/// The inode of the client's socket of a connection the proxy accepted from `peer` on `local`:
/// the `/proc/net/tcp{,6}` row whose local end is `peer` and remote end is `local`. `None` when
/// `/proc` is not there or the row is gone.
fn client_socket_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|path| {
        let table = std::fs::read_to_string(path).ok()?;
        table.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local_field, remote_field, inode) =
                (fields.get(1)?, fields.get(2)?, fields.get(9)?);
            (port_of(local_field)? == peer.port() && port_of(remote_field)? == local.port())
                .then(|| inode.parse().ok())
                .flatten()
        })
    })
}

/// The port of a `/proc/net/tcp` address field (`0100007F:1F90`).
fn port_of(field: &str) -> Option<u16> {
    let (_, port) = field.rsplit_once(':')?;
    u16::from_str_radix(port, 16).ok()
}

/// The inodes of the sockets process `pid` holds open (empty when it is gone or not readable).
fn socket_inodes_of(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| {
        let target = std::fs::read_link(fd.ok()?.path()).ok()?;
        let target = target.to_str()?;
        target
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
    .collect()
}

#[cfg(test)]
mod tests;
