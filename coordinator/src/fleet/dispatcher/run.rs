//! The loop of one term: the only part of the dispatcher that awaits. It reads what etcd holds, feeds
//! commands, informer events, registry events and etcd results to the [`Dispatcher`] one at a time, and
//! runs the etcd work the dispatcher queued beside itself ([`EtcdWorker`]).

use super::etcd_work::{
    ETCD_DONE_CAPACITY, EtcdWorker, REGISTRY_CAPACITY, read_term_start, watch_registry,
};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{
    COMMAND_CAPACITY, Command, Dispatcher, DispatcherHandle, TermContext, TermEnv, TermError,
};

/// Owner-graph discoveries report to the loop on a channel of this capacity. Back-pressure: a discovery
/// task (one per term, reporting every 30 s) waits; the loop never waits on it.
const DISCOVERY_CAPACITY: usize = 4;

/// Starts the dispatcher of one term; it runs until `stop` is cancelled or the term ends on its own
/// (deposed, or etcd lost). The returned handle serves the gRPC services.
pub fn spawn(
    ctx: TermContext,
    stop: CancellationToken,
) -> (
    DispatcherHandle,
    tokio::task::JoinHandle<Result<(), TermError>>,
) {
    let (tx, rx) = mpsc::channel(COMMAND_CAPACITY);
    let task = tokio::spawn(run(ctx, rx, stop));
    (DispatcherHandle { tx }, task)
}

async fn run(
    ctx: TermContext,
    mut commands: mpsc::Receiver<Command>,
    stop: CancellationToken,
) -> Result<(), TermError> {
    let TermContext {
        config,
        etcd,
        election,
        elected,
        leader,
        informers,
        metrics,
        queue_metrics,
        access,
        progress,
        api_link,
    } = ctx;
    let keys = config.etcd.fleet_keys(&config.fleet);
    let (discovered_tx, mut discovered) = mpsc::channel(DISCOVERY_CAPACITY);
    let (etcd_tx, mut etcd_done) = mpsc::channel(ETCD_DONE_CAPACITY);
    let etcd_work = EtcdWorker {
        etcd: etcd.clone(),
        election,
        elected: elected.clone(),
        keys: keys.clone(),
        done: etcd_tx,
        stop: stop.child_token(),
    };
    let mut events = informers.subscribe();
    let env = TermEnv {
        config,
        term: elected.term(),
        leader,
        informers,
        metrics,
        queue_metrics,
        access,
        progress,
        api_link,
    };
    let mut d = Dispatcher::new(env, discovered_tx);
    let _tasks_guard = d.term_tasks.clone().drop_guard();
    let start = tokio::select! {
        biased;
        () = stop.cancelled() => return Ok(()),
        start = read_term_start(&etcd, &keys) => start.map_err(TermError::Etcd)?,
    };
    let revision = start.revision;
    d.start(start);
    let (reg_tx, mut registry) = mpsc::channel(REGISTRY_CAPACITY);
    let watch_stop = stop.child_token();
    let _watch_guard = watch_stop.clone().drop_guard();
    tokio::spawn(watch_registry(etcd, keys, revision + 1, reg_tx, watch_stop));
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    info!(
        term = d.term,
        workers = d.membership.len(),
        controllers = d.running.len(),
        "leading"
    );
    loop {
        let deadline = d.running.next_deadline();
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { break };
                d.handle(cmd);
                for _ in 0..4096 {
                    match commands.try_recv() {
                        Ok(cmd) => d.handle(cmd),
                        Err(_) => break,
                    }
                }
            }
            ev = events.recv() => {
                if let Some(ev) = ev {
                    d.on_informer_event(ev);
                    for _ in 0..4096 {
                        match events.try_recv() {
                            Ok(ev) => d.on_informer_event(ev),
                            Err(_) => break,
                        }
                    }
                }
            }
            Some(kinds) = discovered.recv() => d.on_discovered(kinds),
            reg = registry.recv() => match reg {
                Some((revision, reg)) => d.on_registry(revision, reg),
                None => return Err(TermError::Etcd(etcd_client::Error::WatchError("worker registry watch ended".into()))),
            },
            Some(done) = etcd_done.recv() => d.on_etcd_done(done)?,
            () = sleep_until_opt(deadline) => d.running.promote_due(Instant::now()),
            _ = tick.tick() => d.periodic(),
        }
        d.end_turn();
        for work in d.take_etcd_work() {
            etcd_work.spawn(work);
        }
    }
    Ok(())
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
