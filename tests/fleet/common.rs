//! Shared steps of the fleet tests: ConfigMaps to reconcile, touched in rounds, and a fleet-probe worker.

use std::collections::HashMap;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::fleet::{Fleet, Proc};

/// Label that makes the journal controller journal a ConfigMap.
pub const JOURNAL_LABEL: (&str, &str) = ("flotilla.dev/probe", "journal");

/// Creates `n` ConfigMaps `{prefix}-{i}` with `labels`, 16 at a time; returns key → resourceVersion.
pub async fn create_configmaps(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    n: usize,
    label: (&str, &str),
) -> HashMap<String, u64> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {label.0: label.1}},
                    "data": {"round": "0"},
                }))
                .expect("configmap");
                let created = api.create(&PostParams::default(), &cm).await?;
                Ok::<_, kube::Error>((format!("{ns}/{name}"), rv(&created)))
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .expect("create configmaps")
}

/// Patches every key's `data.round`; returns key → the resourceVersion of the write.
pub async fn touch(client: &kube::Client, keys: &[String], round: usize) -> HashMap<String, u64> {
    stream::iter(keys.iter().cloned())
        .map(|key| {
            let client = client.clone();
            async move {
                let (ns, name) = key.split_once('/').expect("namespaced key");
                let api: Api<ConfigMap> = Api::namespaced(client, ns);
                let patched = api
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"round": round.to_string()}})),
                    )
                    .await?;
                Ok::<_, kube::Error>((key, rv(&patched)))
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .expect("touch configmaps")
}

fn rv(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

/// A fleet-probe worker running the journal controller.
pub fn journal_worker(
    fleet: &Fleet,
    id: &str,
    journal: &std::path::Path,
    reconcile_ms: u64,
    concurrency: u32,
) -> Proc {
    fleet.worker(
        "fleet-probe",
        id,
        &[
            "--controllers",
            "journal",
            "--journal",
            &journal.display().to_string(),
            "--reconcile-ms",
            &reconcile_ms.to_string(),
            "--concurrent-journal-syncs",
            &concurrency.to_string(),
        ],
    )
}

/// The id of the coordinator leading `fleet` now.
pub async fn leader_id(fleet: &Fleet) -> String {
    crate::support::wait::wait_for(std::time::Duration::from_secs(30), "a leader", || async {
        fleet.leader().await.map(|l| l.info.id)
    })
    .await
}

/// Waits until the journal has a finished reconcile of `key`; returns its start (ns since the epoch).
pub async fn reconciled(journal: &std::path::Path, key: &str, timeout: std::time::Duration) -> u64 {
    crate::support::wait::wait_for(timeout, &format!("a reconcile of {key}"), || async {
        super::journal::intervals(
            &super::journal::read(journal),
            &Default::default(),
            super::journal::now_ns(),
        )
        .into_iter()
        .find(|i| i.key == key && !i.open)
        .map(|i| i.start_ns)
    })
    .await
}

/// A fleet of one coordinator and one journal worker, as the bad-input tests use it.
pub struct JournalFleet {
    /// The fleet.
    pub fleet: Fleet,
    /// The journal the worker writes.
    pub journal: std::path::PathBuf,
    /// The coordinator, `c0`.
    pub coordinator: Proc,
    /// The worker, `w0` (5 ms reconciles, 10 at once).
    pub worker: Proc,
    /// The leader's gRPC address.
    pub addr: String,
}

/// Starts a [`JournalFleet`] on `cluster` with `coordinator_flags`; returns once the worker is connected.
pub async fn journal_fleet(
    cluster: &crate::support::cluster::TestCluster,
    coordinator_flags: &[&str],
) -> JournalFleet {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    start_journal_fleet(fleet, coordinator_flags).await
}

/// Starts a [`JournalFleet`] as [`journal_fleet`] does, on a `fleet` made (and its etcd keys perhaps
/// seeded) beforehand.
pub async fn start_journal_fleet(fleet: Fleet, coordinator_flags: &[&str]) -> JournalFleet {
    let journal = fleet.dir().join("journal.jsonl");
    let coordinator = fleet.coordinator("c0", coordinator_flags);
    let worker = journal_worker(&fleet, "w0", &journal, 5, 10);
    fleet
        .wait_for_workers(1, std::time::Duration::from_secs(60))
        .await;
    let addr = fleet.leader().await.expect("a leader").info.address;
    JournalFleet {
        fleet,
        journal,
        coordinator,
        worker,
        addr,
    }
}
