//! Partitions around one worker: its etcd link cut or blackholed while its coordinator stream stays
//! up, its coordinator link cut while its etcd lease lives, its coordinator link throttled to a
//! trickle. Every process's links go through proxies (`support::links`); every test checks the
//! workers' reconcile journal (`--reconcile-journal`, which also records reconciles the worker
//! cancelled) for overlapping reconciles of one key, and the journal controller's own journal (a line
//! per completed reconcile only) for keys not reconciled after their last change.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::common::{JOURNAL_LABEL, create_configmaps, touch};
use super::journal::{Interval, intervals, now_ns, overlaps, read, stale_keys};
use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, LEASE};
use crate::support::links::{self, Clients, Direction, Fault, LinkedCoordinator, LinkedWorker};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// The two journals of a test's workers.
struct Journals {
    /// The workers' `--reconcile-journal`: a start line and an end line per reconcile, cancelled
    /// ones included, so intervals end when the reconcile really stopped.
    reconciles: PathBuf,
    /// The journal controller's `--journal`: an end line only for a reconcile that completed.
    completed: PathBuf,
}

impl Journals {
    fn in_dir(dir: &Path) -> Journals {
        Journals {
            reconciles: dir.join("reconcile-journal.jsonl"),
            completed: dir.join("journal.jsonl"),
        }
    }

    /// Every reconcile so far; one still running is open until now.
    fn reconciles(&self) -> Vec<Interval> {
        intervals(&read(&self.reconciles), &HashMap::new(), now_ns())
    }

    /// Every completed reconcile so far.
    fn completed(&self) -> Vec<Interval> {
        intervals(&read(&self.completed), &HashMap::new(), now_ns())
            .into_iter()
            .filter(|i| !i.open)
            .collect()
    }

    /// Fails on any two reconciles of one key that overlapped.
    fn assert_no_overlap(&self) {
        let found = overlaps(&self.reconciles());
        assert!(
            found.is_empty(),
            "{} overlapping reconciles, e.g. {:?}",
            found.len(),
            &found[..found.len().min(5)]
        );
    }

    /// Waits until every key of `last_write` completed a reconcile of its last write: none lost.
    async fn wait_none_lost(&self, last_write: &HashMap<String, u64>, timeout: Duration) {
        wait_for(
            timeout,
            "every key reconciled after its last change",
            || async {
                stale_keys(&self.completed(), last_write)
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
    }
}

/// A `fleet-probe` journal worker with its links through proxies.
async fn probe_worker(
    fleet: &Fleet,
    journals: &Journals,
    id: &str,
    reconcile_ms: u64,
    concurrency: u32,
) -> LinkedWorker {
    let completed = journals.completed.display().to_string();
    let reconciles = journals.reconciles.display().to_string();
    let reconcile_ms = reconcile_ms.to_string();
    let concurrency = concurrency.to_string();
    links::worker(
        fleet,
        "fleet-probe",
        id,
        &[
            // Fence 1 s before the lease can expire (as the test coordinators do), not the default
            // 0.5 s: the fence is asserted against the lease, and a loaded machine takes the margin.
            "--lease-renew-deadline",
            "2s",
            "--controllers",
            "journal",
            "--journal",
            &completed,
            "--reconcile-ms",
            &reconcile_ms,
            "--concurrent-journal-syncs",
            &concurrency,
            "--reconcile-journal",
            &reconciles,
        ],
    )
    .await
}

/// The keys of `keys` that `worker` is reconciling now.
fn running_on(journals: &Journals, worker: &str, keys: &HashMap<String, u64>) -> HashSet<String> {
    journals
        .reconciles()
        .into_iter()
        .filter(|i| i.worker == worker && i.open && keys.contains_key(&i.key))
        .map(|i| i.key)
        .collect()
}

/// A fleet of one coordinator and a slow worker `a` (reconciles of `slow_ms`) beside a fast one `b`,
/// with `keys` ConfigMaps created once both are connected; returns once `a` runs some of them.
struct Scenario {
    _cluster: TestCluster,
    client: kube::Client,
    fleet: Fleet,
    journals: Journals,
    coordinator: LinkedCoordinator,
    a: LinkedWorker,
    b: LinkedWorker,
    last_write: HashMap<String, u64>,
}

impl Scenario {
    async fn start(prefix: &str, slow_ms: u64, keys: usize) -> Scenario {
        let cluster = TestCluster::start().await;
        let client = cluster.client();
        let ns = unique_namespace(&client, prefix).await;
        let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
        let journals = Journals::in_dir(fleet.dir());
        let coordinator = links::coordinator(&fleet, "c0", &[]).await;
        let a = probe_worker(&fleet, &journals, "a", slow_ms, 50).await;
        let b = probe_worker(&fleet, &journals, "b", 5, 10).await;
        fleet.wait_for_workers(2, Duration::from_secs(60)).await;
        let last_write = create_configmaps(&client, &ns, "k", keys, JOURNAL_LABEL).await;
        let scenario = Scenario {
            _cluster: cluster,
            client,
            fleet,
            journals,
            coordinator,
            a,
            b,
            last_write,
        };
        scenario.wait_a_holds_keys().await;
        scenario
    }

    /// Waits until `a` runs some of the keys and returns them.
    async fn wait_a_holds_keys(&self) -> HashSet<String> {
        wait_for(
            Duration::from_secs(30),
            "the slow worker to be reconciling some keys",
            || async {
                let held = running_on(&self.journals, "a", &self.last_write);
                (!held.is_empty()).then_some(held)
            },
        )
        .await
    }

    /// Writes every key again (the next round) and remembers the writes.
    async fn touch_all(&mut self, round: usize) {
        let keys: Vec<String> = self.last_write.keys().cloned().collect();
        self.last_write
            .extend(touch(&self.client, &keys, round).await);
    }

    /// Waits until `b` completed a reconcile, started after `after_ns`, of each of `keys`; returns
    /// those reconciles.
    async fn wait_b_completed(
        &self,
        keys: &HashSet<String>,
        after_ns: u64,
        timeout: Duration,
        what: &str,
    ) -> Vec<Interval> {
        wait_for(timeout, what, || async {
            let done: Vec<Interval> = self
                .journals
                .completed()
                .into_iter()
                .filter(|i| i.worker == "b" && i.start_ns > after_ns && keys.contains(&i.key))
                .collect();
            let seen: HashSet<&str> = done.iter().map(|i| i.key.as_str()).collect();
            (seen.len() == keys.len()).then_some(done)
        })
        .await
    }
}

/// Whether the leader reports worker `id` connected; `None` while it does not answer or does not
/// know the worker.
async fn worker_connected(fleet: &Fleet, id: &str) -> Option<bool> {
    let status = fleet.status().await?;
    status
        .workers
        .iter()
        .find(|w| w.id == id)
        .map(|w| w.connected)
}

/// Nanoseconds from `from` to `to` as a duration (zero when `to` is earlier).
fn since(from: u64, to: u64) -> Duration {
    Duration::from_nanos(to.saturating_sub(from))
}

/// Tests 1 and 5: worker `a` loses etcd (`fault`: cut or blackhole) while its coordinator stream
/// stays up. It must cancel its reconciles before its lease can expire, its keys must run on `b`
/// only after the lease could have expired, and once healed it must come back with nothing lost.
async fn worker_loses_etcd(fault: Fault, prefix: &str) {
    // Reconciles of 8 s: the keys `a` holds are still running when the fence must stop them.
    let mut s = Scenario::start(prefix, 8_000, 20).await;
    let held = s.wait_a_holds_keys().await;
    let cut_at = now_ns();
    s.a.links.etcd.set(fault);

    let moved = s
        .wait_b_completed(
            &held,
            cut_at,
            LEASE + Duration::from_secs(10),
            "every key the partitioned worker held reconciled by the other worker",
        )
        .await;
    // The stream to the coordinator never broke by itself: `a` stopped because it fenced itself.
    let stopped: Vec<Interval> = s
        .journals
        .reconciles()
        .into_iter()
        .filter(|i| i.worker == "a" && held.contains(&i.key) && i.start_ns < cut_at)
        .collect();
    assert!(
        stopped.iter().all(|i| !i.open),
        "the worker cut from etcd still runs {:?}",
        stopped
            .iter()
            .filter(|i| i.open)
            .map(|i| &i.key)
            .collect::<Vec<_>>()
    );
    let last_stop = stopped.iter().map(|i| i.end_ns).max().unwrap_or(0);
    assert!(
        since(cut_at, last_stop) <= LEASE,
        "the worker cut from etcd reconciled until {:?} after the cut, past its lease ({LEASE:?})",
        since(cut_at, last_stop)
    );
    let first_move = moved.iter().map(|i| i.start_ns).min().unwrap_or(0);
    // The lease was renewed at most one renew interval (500 ms) before the cut.
    assert!(
        since(cut_at, first_move) >= LEASE - Duration::from_secs(1),
        "a key ran elsewhere {:?} after the cut, before the lease could expire",
        since(cut_at, first_move)
    );
    assert!(
        first_move >= last_stop,
        "a key ran elsewhere before the partitioned worker stopped"
    );
    s.journals.assert_no_overlap();
    eprintln!(
        "{fault:?}: fenced {:?} after the cut; keys moved after {:?}",
        since(cut_at, last_stop),
        since(cut_at, first_move)
    );

    s.a.links.heal();
    s.fleet.wait_for_workers(2, Duration::from_secs(20)).await;
    s.touch_all(1).await;
    s.journals
        .wait_none_lost(&s.last_write, Duration::from_secs(30))
        .await;
    s.journals.assert_no_overlap();
    drop((s.coordinator, s.b));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_cut_from_etcd_stops_before_its_lease_can_expire_and_its_keys_move_only_after() {
    worker_loses_etcd(Fault::Cut, "pw-etcd-cut").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_whose_etcd_is_blackholed_stops_and_hands_over_within_the_same_bounds_as_a_cut() {
    worker_loses_etcd(Fault::Blackhole, "pw-etcd-hole").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_cut_from_its_coordinator_keeps_its_keys_until_it_reports_them_or_its_lease_ends()
{
    // Reconciles of 6 s, the coordinator's reconnect grace 5 s (support::fleet): a cut of at most
    // 3 s is shorter than both.
    let mut s = Scenario::start("pw-grpc", 6_000, 20).await;
    let cut = |s: &Scenario, fault| {
        s.coordinator
            .grpc
            .set_for(Clients::Pid(s.a.proc.pid()), Direction::Both, fault)
    };

    // A cut shorter than the grace: nothing `a` holds runs elsewhere; it keeps running them, and
    // reports them in its next Hello.
    let held = s.wait_a_holds_keys().await;
    let cut_at = now_ns();
    cut(&s, Fault::Cut);
    // The cut broke the stream (the test's own status calls pass: only `a`'s connections are cut).
    wait_for(
        Duration::from_secs(3),
        "the coordinator to see the cut worker disconnected",
        || async { (!worker_connected(&s.fleet, "a").await?).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(since(cut_at, now_ns()))).await;
    s.coordinator.grpc.heal();
    let healed_at = now_ns();
    let finished = wait_for(
        Duration::from_secs(15),
        "the worker cut from its coordinator to finish what it held",
        || async {
            // The first completion after the cut of each held key.
            let mut done: HashMap<String, Interval> = HashMap::new();
            for i in s.journals.completed() {
                if i.worker == "a" && held.contains(&i.key) && i.end_ns > cut_at {
                    let first = done.entry(i.key.clone()).or_insert_with(|| i.clone());
                    if i.end_ns < first.end_ns {
                        *first = i;
                    }
                }
            }
            (done.len() == held.len()).then(|| done.into_values().collect::<Vec<_>>())
        },
    )
    .await;
    assert!(
        finished.iter().all(|i| i.end_ns > healed_at),
        "the held reconciles were meant to outlast the cut"
    );
    let elsewhere: Vec<Interval> = s
        .journals
        .reconciles()
        .into_iter()
        .filter(|i| i.worker != "a" && held.contains(&i.key) && i.start_ns > cut_at)
        .filter(|i| {
            finished
                .iter()
                .any(|f| f.key == i.key && i.start_ns < f.end_ns)
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "re-dispatched while the cut worker held them: {elsewhere:?}"
    );
    s.fleet.wait_for_workers(2, Duration::from_secs(20)).await;
    s.journals.assert_no_overlap();

    // A cut past the grace: the coordinator revokes the silent worker's lease, so it fences, and
    // its keys move once it has certainly stopped.
    s.touch_all(1).await;
    let held = s.wait_a_holds_keys().await;
    let cut_at = now_ns();
    cut(&s, Fault::Cut);
    let moved = s
        .wait_b_completed(
            &held,
            cut_at,
            Duration::from_secs(25),
            "the keys of the worker silent past the grace reconciled by the other worker",
        )
        .await;
    s.coordinator.grpc.heal();
    let stopped: Vec<Interval> = s
        .journals
        .reconciles()
        .into_iter()
        .filter(|i| i.worker == "a" && held.contains(&i.key) && i.start_ns < cut_at)
        .collect();
    let first_move = moved.iter().map(|i| i.start_ns).min().unwrap_or(0);
    assert!(
        stopped.iter().all(|i| !i.open && i.end_ns <= first_move),
        "a key moved before the silent worker stopped it"
    );
    // The leader revoked the silent worker's lease, so the worker's session ended (it fenced).
    assert!(
        s.a.proc.log_text().contains("lease lost"),
        "the worker silent past the grace kept its session"
    );
    eprintln!(
        "silent past the grace: keys moved {:?} after the cut",
        since(cut_at, first_move)
    );
    s.fleet.wait_for_workers(2, Duration::from_secs(20)).await;
    s.touch_all(2).await;
    s.journals
        .wait_none_lost(&s.last_write, Duration::from_secs(30))
        .await;
    s.journals.assert_no_overlap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_throttled_to_a_trickle_does_not_stall_dispatch_to_the_others() {
    // Both workers fast: what is slow is only `a`'s link.
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "pw-slow").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journals = Journals::in_dir(fleet.dir());
    let coordinator = links::coordinator(&fleet, "c0", &[]).await;
    let a = probe_worker(&fleet, &journals, "a", 5, 10).await;
    let _b = probe_worker(&fleet, &journals, "b", 5, 10).await;
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    let mut last_write = create_configmaps(&client, &ns, "k", 200, JOURNAL_LABEL).await;
    journals
        .wait_none_lost(&last_write, Duration::from_secs(30))
        .await;
    // Whose keys are whose, from the first round.
    let of_b: HashSet<String> = journals
        .completed()
        .into_iter()
        .filter(|i| i.worker == "b" && last_write.contains_key(&i.key))
        .map(|i| i.key)
        .collect();
    assert!(!of_b.is_empty() && of_b.len() < last_write.len());

    coordinator.grpc.set_for(
        Clients::Pid(a.proc.pid()),
        Direction::Both,
        Fault::Throttle { bytes_per_sec: 300 },
    );
    let keys: Vec<String> = last_write.keys().cloned().collect();
    for round in 1..=3 {
        let touched_at = now_ns();
        last_write.extend(touch(&client, &keys, round).await);
        let want: HashMap<String, u64> = last_write
            .iter()
            .filter(|(k, _)| of_b.contains(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        journals
            .wait_none_lost(&want, Duration::from_secs(15))
            .await;
        eprintln!(
            "round {round}: the {} keys of the fast worker done {:?} after the writes began",
            want.len(),
            since(touched_at, now_ns())
        );
    }
    // The trickle was real: the throttled worker's own keys are still behind.
    let behind = stale_keys(&journals.completed(), &last_write).len();
    assert!(
        behind > 0,
        "the throttled worker kept up; the throttle did not apply"
    );
    eprintln!("{behind} keys of the throttled worker still behind");

    coordinator.grpc.heal();
    journals
        .wait_none_lost(&last_write, Duration::from_secs(30))
        .await;
    journals.assert_no_overlap();
}

/// Whether coordinator `proc` says it leads (`flotilla_is_leader`); `None` while it does not answer.
async fn leads(proc: &crate::support::fleet::Proc) -> Option<bool> {
    let text = proc.metrics_text().await;
    (!text.is_empty()).then(|| crate::support::fleet::metric(&text, "flotilla_is_leader ") == 1.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_etcd_is_blackholed_stops_leading_before_its_lease_can_expire_and_a_standby_takes_over()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let ns = unique_namespace(&client, "pw-leader-hole").await;
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let journals = Journals::in_dir(fleet.dir());
    // A renew deadline 1.5 s inside the 3 s lease (the test default is 2 s): stopping, and this test
    // seeing it through a metrics poll, must fit before the lease can expire on a loaded machine too.
    let renew = ["--leader-elect-renew-deadline", "1500ms"];
    let c0 = links::coordinator(&fleet, "c0", &renew).await;
    let c1 = links::coordinator(&fleet, "c1", &renew).await;
    let _a = probe_worker(&fleet, &journals, "a", 5, 10).await;
    let _b = probe_worker(&fleet, &journals, "b", 5, 10).await;
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;
    let mut last_write = create_configmaps(&client, &ns, "k", 100, JOURNAL_LABEL).await;
    journals
        .wait_none_lost(&last_write, Duration::from_secs(30))
        .await;

    let old = super::common::leader_id(&fleet).await;
    let (leader, standby) = if old == "c0" { (&c0, &c1) } else { (&c1, &c0) };
    let cut_at = now_ns();
    leader.links.etcd.set(Fault::Blackhole);
    wait_for(
        LEASE + Duration::from_secs(2),
        "the leader whose etcd is blackholed to stop leading",
        || async { (leads(&leader.proc).await == Some(false)).then_some(()) },
    )
    .await;
    let stopped = since(cut_at, now_ns());
    // Its election lease was renewed at most one retry period (500 ms) before the blackhole.
    assert!(
        stopped < LEASE - Duration::from_millis(500),
        "the leader led {stopped:?} into the blackhole, when its lease ({LEASE:?}) could expire"
    );
    let new = wait_for(
        LEASE + Duration::from_secs(5),
        "the standby to lead",
        || async {
            let leads_now = leads(&standby.proc).await == Some(true);
            let named = fleet.leader().await.map(|l| l.info.id);
            (leads_now && named.as_deref() != Some(old.as_str())).then_some(named)
        },
    )
    .await;
    let took = since(cut_at, now_ns());
    eprintln!("blackholed leader stopped after {stopped:?}; {new:?} led after {took:?}");

    // The workers follow the new leader; nothing written meanwhile is lost.
    let keys: Vec<String> = last_write.keys().cloned().collect();
    last_write.extend(touch(&client, &keys, 1).await);
    journals
        .wait_none_lost(&last_write, Duration::from_secs(30))
        .await;
    leader.links.heal();
    last_write.extend(touch(&client, &keys, 2).await);
    journals
        .wait_none_lost(&last_write, Duration::from_secs(30))
        .await;
    journals.assert_no_overlap();
}
