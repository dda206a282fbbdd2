//! The phases of `bench scale`, in order, each reading what the module documentation of `scale`
//! lists: build the objects, restart cold, force a relist, kill the leader. On a given cluster
//! (`--kubeconfig`) the relist is not forced, and [`Readings::not_measured`] says so.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;

use super::super::chaos::fleet::ChaosFleet;
use super::super::chaos::schedule::Link;
use super::super::create_many::create_all;
use super::super::local_fleet::BenchScope;
use super::super::run_report::Unit;
use super::ScaleArgs;
use super::probe::{MemorySampler, Metrics, poll_until, reset_peak};

/// How often the phases poll.
const POLL: Duration = Duration::from_millis(25);

/// The figure a given cluster cannot give, and why: the relist is forced by compacting the
/// devcluster's etcd (and cutting the leader's API link through the devcluster's proxy).
pub(super) const RELIST: (&str, &str) = ("forced relist", "needs the devcluster's etcd");

/// What one run read.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct Readings {
    pub create_s: f64,
    pub rss_empty_mib: f64,
    pub rss_deployments_mib: f64,
    pub rss_pods_mib: f64,
    pub cold_start_s: f64,
    /// Each kind's time from the coordinator's start to its first complete list.
    pub kind_synced_s: BTreeMap<String, f64>,
    pub cold_first_dispatch_s: f64,
    /// The relist's figures; `None` when not measured (see `not_measured`).
    pub relist_steady_mib: Option<f64>,
    pub relist_peak_mib: Option<f64>,
    pub relist_s: Option<f64>,
    pub failover_cold_s: Vec<f64>,
    pub failover_hot_s: Vec<f64>,
    /// Keys the new leader re-dispatched after each hot failover, and how fast.
    pub redispatch_keys: u64,
    pub redispatch_keys_per_s: Vec<f64>,
    /// The leader's resident memory over the cold start and the relist, `(s, MiB)`.
    pub timeline: Vec<(f64, f64)>,
    /// Named moments of the timeline, `(s, what)`.
    pub marks: Vec<(f64, String)>,
    /// Figures this run could not measure, each with the reason (`"forced relist"` → `"needs the
    /// devcluster's etcd"` on a given cluster); their fields above are `None`, never a made-up number.
    pub not_measured: BTreeMap<String, String>,
}

/// Runs every phase on `fleet` (two coordinators, one worker, just started), making the namespaces
/// of the objects in `scope` (which the caller cleans up).
pub(super) async fn measure(
    args: &ScaleArgs,
    fleet: &mut ChaosFleet,
    scope: &mut BenchScope,
) -> anyhow::Result<Readings> {
    let mut r = Readings::default();
    let leader = fleet.leader_slot().await.context("no coordinator leads")?;
    let rss = |fleet: &ChaosFleet, c: usize| -> anyhow::Result<f64> {
        super::super::process_stats::rss_mib(fleet.coordinator(c).context("the leader is gone")?)
    };
    r.rss_empty_mib = rss(fleet, leader)?;

    // Build: the Deployments first (the fleet gives each its ReplicaSet), then the pods.
    let created = Instant::now();
    let mut namespaces = Vec::with_capacity(args.namespaces);
    for n in 0..args.namespaces {
        namespaces.push(
            scope
                .create_namespace(&fleet.client, &format!("scale-{n}"))
                .await?,
        );
    }
    let per_ns =
        |total: usize, n: usize| total / args.namespaces + usize::from(n < total % args.namespaces);
    for (n, ns) in namespaces.iter().enumerate() {
        let api = Api::<Deployment>::namespaced(fleet.client.clone(), ns);
        create_all(&api, DEPLOYMENT, per_ns(args.deployments, n), deployment).await?;
    }
    let expected_rs = args.deployments as f64;
    settle(fleet, leader, args.timeout, |m| {
        kind_count(m, "replicasets") >= expected_rs
    })
    .await?;
    r.rss_deployments_mib = rss(fleet, leader)?;
    for (n, ns) in namespaces.iter().enumerate() {
        let api = Api::<Pod>::namespaced(fleet.client.clone(), ns);
        create_all(&api, POD, per_ns(args.pods, n), pod).await?;
    }
    r.create_s = created.elapsed().as_secs_f64();
    let expected_pods = args.pods as f64;
    settle(fleet, leader, args.timeout, |m| {
        kind_count(m, "pods") >= expected_pods
    })
    .await?;
    r.rss_pods_mib = rss(fleet, leader)?;
    let full = Metrics::read(fleet.coordinator(leader).context("the leader is gone")?).await?;

    // Cold start: both coordinators stopped, one started.
    let sampler = MemorySampler::start();
    let standby = 1 - leader;
    fleet.stop_coordinator(standby);
    fleet.stop_coordinator(leader);
    r.marks.push((sampler.now(), "cold start".to_owned()));
    let started = Instant::now();
    fleet.start_coordinator(leader)?;
    let process = fleet
        .coordinator(leader)
        .context("the coordinator did not start")?;
    sampler.follow(process.pid());
    let mut first_dispatch = None;
    let deadline = started + args.timeout;
    loop {
        if let Ok(m) = Metrics::read(process).await {
            for (kind, lists) in &m.lists_done {
                if *lists >= 1.0 && full.objects.contains_key(kind) {
                    r.kind_synced_s
                        .entry(kind.clone())
                        .or_insert_with(|| started.elapsed().as_secs_f64());
                }
            }
            if m.assigned > 0.0 {
                first_dispatch.get_or_insert_with(|| started.elapsed().as_secs_f64());
            }
            if r.kind_synced_s.len() == full.objects.len() && first_dispatch.is_some() {
                break;
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the cold coordinator did not sync every informer within {:?}",
                args.timeout
            );
        }
        tokio::time::sleep(POLL).await;
    }
    r.cold_start_s = r.kind_synced_s.values().copied().fold(0.0, f64::max);
    r.cold_first_dispatch_s = first_dispatch.unwrap_or_default();
    r.marks.push((sampler.now(), "synced".to_owned()));
    fleet.start_coordinator(standby)?;
    settle(fleet, leader, args.timeout, |m| {
        kind_count(m, "pods") >= expected_pods
    })
    .await?;

    if args.kubeconfig.is_some() {
        let (figure, why) = RELIST;
        r.not_measured.insert(figure.to_owned(), why.to_owned());
    } else {
        relist(args, fleet, leader, scope, &sampler, &mut r).await?;
    }
    r.timeline = sampler.samples();
    drop(sampler);

    // Failover, from a cold standby and then from a hot one.
    for hot in [false, true] {
        let mut flags = scope.coordinator_flags();
        if hot {
            flags.push("--hot-standby".to_owned());
        }
        fleet.set_coordinator_flags(flags);
        let leader = fleet.leader_slot().await.context("no coordinator leads")?;
        fleet.stop_coordinator(1 - leader);
        fleet.start_coordinator(1 - leader)?;
        for _ in 0..args.failovers {
            let (seconds, redispatch) = failover(fleet, hot, &full, args.timeout).await?;
            if hot {
                r.failover_hot_s.push(seconds);
                if let Some((keys, per_s)) = redispatch {
                    r.redispatch_keys = keys;
                    r.redispatch_keys_per_s.push(per_s);
                }
            } else {
                r.failover_cold_s.push(seconds);
            }
        }
    }
    Ok(r)
}

/// A forced relist: the leader's watches broken while etcd compacts past them. Needs the
/// devcluster's etcd.
async fn relist(
    args: &ScaleArgs,
    fleet: &mut ChaosFleet,
    leader: usize,
    scope: &mut BenchScope,
    sampler: &MemorySampler,
    r: &mut Readings,
) -> anyhow::Result<()> {
    let process = fleet.coordinator(leader).context("the leader is gone")?;
    let steady = super::super::process_stats::rss_mib(process)?;
    let before = Metrics::read(process).await?;
    reset_peak(process.pid())?;
    r.marks.push((sampler.now(), "relist".to_owned()));
    let relist = Instant::now();
    fleet.cut(Link::CoordinatorApi(leader));
    // A write, so the compaction passes the revision every broken watch resumes from.
    scope
        .create_namespace(&fleet.client, "scale-relist")
        .await
        .context("cannot create the relist's namespace")?;
    fleet.compact().await?;
    fleet.heal(Link::CoordinatorApi(leader));
    let process = fleet.coordinator(leader).context("the leader is gone")?;
    poll_until(process, POLL, args.timeout, "the forced relist", |m| {
        before
            .lists_done
            .iter()
            .all(|(kind, n)| m.lists_done.get(kind).is_some_and(|now| now > n))
    })
    .await?;
    r.relist_steady_mib = Some(steady);
    r.relist_s = Some(relist.elapsed().as_secs_f64());
    r.relist_peak_mib = Some(super::super::process_stats::peak_rss_mib(process)?);
    r.marks.push((sampler.now(), "relisted".to_owned()));
    Ok(())
}

/// One `kill -9` of the leader once the standby is ready (with `hot`, its informers hold what the
/// leader's do): seconds to the new leader's first dispatch, and the keys it re-dispatched with their
/// rate.
async fn failover(
    fleet: &mut ChaosFleet,
    hot: bool,
    full: &Metrics,
    bound: Duration,
) -> anyhow::Result<(f64, Option<(u64, f64)>)> {
    let leader = fleet.leader_slot().await.context("no coordinator leads")?;
    let standby = 1 - leader;
    let process = fleet.coordinator(standby).context("the standby is gone")?;
    poll_until(process, POLL, bound, "the standby's readiness", |m| {
        !hot || full
            .objects
            .iter()
            .all(|(kind, n)| m.objects.get(kind).is_some_and(|have| have >= n))
    })
    .await?;
    settle(fleet, leader, bound, |_| true).await?;
    let killed = Instant::now();
    fleet.kill_coordinator(leader);
    let process = fleet.coordinator(standby).context("the standby is gone")?;
    let first = poll_until(
        process,
        POLL,
        bound,
        "the new leader's first dispatch",
        |m| m.assigned > 0.0,
    )
    .await?;
    let seconds = killed.elapsed().as_secs_f64();
    // The killed one comes back as the next standby.
    fleet.start_coordinator(leader)?;
    let process = fleet
        .coordinator(standby)
        .context("the new leader is gone")?;
    if !hot {
        return Ok((seconds, None));
    }
    // Every Deployment and every ReplicaSet is enqueued again when the term starts.
    let keys = kind_count(full, "deployments") + kind_count(full, "replicasets");
    let from = Instant::now();
    let last = poll_until(process, POLL, bound, "the re-dispatch of every key", |m| {
        m.assigned >= keys
    })
    .await?;
    let per_s = (last.assigned - first.assigned) / from.elapsed().as_secs_f64();
    Ok((seconds, Some((last.assigned as u64, per_s))))
}

/// Waits until `ready` holds of the leader's metrics and its fleet has nothing queued or running,
/// twice in a row a second apart.
async fn settle(
    fleet: &ChaosFleet,
    leader: usize,
    bound: Duration,
    mut ready: impl FnMut(&Metrics) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + bound;
    let mut quiet = 0;
    while quiet < 2 {
        if Instant::now() > deadline {
            bail!("the fleet did not settle within {bound:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let process = fleet.coordinator(leader).context("the leader is gone")?;
        let Ok(metrics) = Metrics::read(process).await else {
            quiet = 0;
            continue;
        };
        let idle = fleet.status().await.is_ok_and(|s| {
            s.informers.iter().all(|i| i.synced)
                && s.queues.iter().all(|q| q.depth == 0 && q.processing == 0)
        });
        quiet = if idle && ready(&metrics) {
            quiet + 1
        } else {
            0
        };
    }
    Ok(())
}

/// Cached objects of the kinds of plural `resource` (`pods`, `replicasets`), whatever their group.
fn kind_count(m: &Metrics, resource: &str) -> f64 {
    m.objects
        .iter()
        .filter(|(kind, _)| {
            kind.split('/')
                .next_back()
                .is_some_and(|plural| plural == resource)
        })
        .map(|(_, n)| n)
        .sum()
}

const DEPLOYMENT: Unit = Unit {
    one: "Deployment",
    many: "Deployments",
    key: "deployment",
    done: "created",
};

const POD: Unit = Unit {
    one: "pod",
    many: "pods",
    key: "pod",
    done: "created",
};

/// Deployment `i` of a namespace: 0 replicas, so it gets a ReplicaSet and no pod.
fn deployment(i: usize) -> serde_json::Value {
    let app = format!("dep-{i}");
    json!({
        "metadata": {"name": app, "labels": {"bench": "scale"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// Bare pod `i` of a namespace, with labels no Deployment selects.
fn pod(i: usize) -> serde_json::Value {
    json!({
        "metadata": {"name": format!("pod-{i}"), "labels": {"bench": "scale", "group": format!("g-{}", i % 10)}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    })
}
