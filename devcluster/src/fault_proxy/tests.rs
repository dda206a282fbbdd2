//! Tests of the fault proxy against a loopback echo server: each fault, per-process targeting with
//! a child process, and healing. Time bounds are loose on purpose (CI shares two cores).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};

use super::{Clients, Direction, Fault, FaultProxy};

/// Long enough that a loaded CI machine is not mistaken for a fault.
const PROMPT: Duration = Duration::from_secs(5);

/// An upstream that echoes every byte back, on every connection.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

/// An upstream that sends `len` bytes on every connection, then waits for the client to close.
async fn talker(len: usize) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(&vec![b'x'; len]).await;
                let mut sink = Vec::new();
                let _ = stream.read_to_end(&mut sink).await;
            });
        }
    });
    addr
}

/// Writes `msg` and reads the same number of bytes back.
async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    stream.write_all(msg).await?;
    let mut back = vec![0; msg.len()];
    stream.read_exact(&mut back).await?;
    Ok(back)
}

/// True once a read on `stream` fails or sees end-of-stream, within [`PROMPT`].
async fn closes_promptly(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        timeout(PROMPT, stream.read(&mut byte)).await,
        Ok(Err(_) | Ok(0))
    )
}

async fn wait_connections(proxy: &FaultProxy, n: usize) {
    let deadline = Instant::now() + PROMPT;
    while proxy.connections() != n {
        assert!(
            Instant::now() < deadline,
            "proxy has {} connections, want {n}",
            proxy.connections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn pass_forwards_both_ways() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"hello").await.unwrap(), b"hello");
    wait_connections(&proxy, 1).await;
}

#[tokio::test]
async fn cut_resets_open_connections_and_new_ones_until_healed() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"a").await.unwrap(), b"a");

    proxy.set(Fault::Cut);
    assert!(
        closes_promptly(&mut open).await,
        "open connection survived a cut"
    );
    let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(
        closes_promptly(&mut fresh).await,
        "new connection survived a cut"
    );
    wait_connections(&proxy, 0).await;

    proxy.heal();
    let mut healed = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut healed, b"b").await.unwrap(), b"b");
}

#[tokio::test]
async fn a_cut_in_one_direction_still_resets_the_connection() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"a").await.unwrap(), b"a");
    proxy.set_for(Clients::All, Direction::ToClient, Fault::Cut);
    assert!(closes_promptly(&mut open).await);
}

#[tokio::test]
async fn blackhole_swallows_bytes_without_closing_and_heal_restores() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"a").await.unwrap(), b"a");

    proxy.set(Fault::Blackhole);
    stream.write_all(b"lost").await.unwrap();
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_millis(300), stream.read(&mut byte))
            .await
            .is_err(),
        "a blackhole answered or closed"
    );
    assert_eq!(proxy.connections(), 1);

    proxy.heal();
    assert_eq!(round_trip(&mut stream, b"back").await.unwrap(), b"back");
}

#[tokio::test]
async fn delay_delays_each_direction() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"a").await.unwrap(), b"a");

    // Long enough that a healed round trip, however loaded the machine, stays under a delayed one.
    proxy.set(Fault::Delay(Duration::from_millis(500)));
    let delayed = Duration::from_millis(950);
    let started = Instant::now();
    assert_eq!(round_trip(&mut stream, b"slow").await.unwrap(), b"slow");
    let took = started.elapsed();
    assert!(took >= delayed, "round trip took {took:?}");
    assert!(took < PROMPT, "round trip took {took:?}");

    proxy.heal();
    let started = Instant::now();
    assert_eq!(round_trip(&mut stream, b"fast").await.unwrap(), b"fast");
    assert!(started.elapsed() < delayed);
}

#[tokio::test]
async fn throttle_limits_the_rate_of_one_direction() {
    let proxy = FaultProxy::start(talker(1500).await).await.unwrap();
    proxy.set_for(
        Clients::All,
        Direction::ToClient,
        Fault::Throttle {
            bytes_per_sec: 1000,
        },
    );
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let started = Instant::now();
    let mut got = vec![0; 1500];
    timeout(Duration::from_secs(10), stream.read_exact(&mut got))
        .await
        .expect("throttled bytes never arrived")
        .unwrap();
    let took = started.elapsed();
    // 1500 bytes at 1000 B/s, the first tenth at once: about 1.4 s.
    assert!(took >= Duration::from_millis(1000), "took {took:?}");

    // The other direction was not throttled.
    let started = Instant::now();
    stream.write_all(&[b'y'; 4096]).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn a_per_process_fault_applies_only_to_that_process() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let port = proxy.addr().port();

    // This test process: cut before it connects, so it is resolved at accept.
    proxy.set_for(
        Clients::Pid(std::process::id()),
        Direction::Both,
        Fault::Cut,
    );
    let mut own = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(closes_promptly(&mut own).await, "own connection survived");

    // A child process connected while only this process had a fault: it passes.
    let mut child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port}; echo ready >&3; cat <&3"
        ))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    timeout(PROMPT, out.read_exact(&mut ready))
        .await
        .expect("child never echoed")
        .unwrap();
    assert_eq!(&ready, b"ready\n");
    wait_connections(&proxy, 1).await;

    // Cutting the child's process afterwards resolves its open connection and resets it.
    proxy.set_for(
        Clients::Pid(child.id().unwrap()),
        Direction::Both,
        Fault::Cut,
    );
    let status = timeout(PROMPT, child.wait())
        .await
        .expect("child's connection survived its cut")
        .unwrap();
    assert!(status.code().is_some());
    wait_connections(&proxy, 0).await;

    // Healing lifts the per-process faults too.
    proxy.heal();
    let mut own = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut own, b"ok").await.unwrap(), b"ok");
}

#[tokio::test]
async fn set_upstream_moves_new_connections_only() {
    let first = echo_server().await;
    let proxy = FaultProxy::start(first).await.unwrap();
    let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut old, b"a").await.unwrap(), b"a");

    proxy.set_upstream(talker(3).await);
    let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut got = [0u8; 3];
    new.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"xxx");
    assert_eq!(round_trip(&mut old, b"b").await.unwrap(), b"b");
}

#[tokio::test]
async fn drop_closes_every_connection_and_the_listener() {
    let proxy = FaultProxy::start(echo_server().await).await.unwrap();
    let addr = proxy.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"a").await.unwrap(), b"a");
    drop(proxy);
    assert!(closes_promptly(&mut stream).await);
    let deadline = Instant::now() + PROMPT;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "listener still open after drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
