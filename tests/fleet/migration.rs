//! Migrating from kube-controller-manager controller by controller: a fleet runs the controllers
//! `flotilla kcm-flags` takes away from KCM, a second process runs exactly what the printed flag leaves
//! KCM, and together they do KCM's whole job with no controller running in both.
//!
//! No kube-controller-manager can run here, so the second process is a second fleet started with the
//! controllers KCM would keep — read from the printed flag the way KCM reads its `--controllers`.

use std::collections::BTreeSet;
use std::time::Duration;

use flotilla_controllers::builtins;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc, binary};
use crate::support::namespace::unique_namespace;
use crate::support::objects::deployment;
use crate::support::wait::wait_for;

/// A step of the workload: a few requests per object at the workers' default budget.
const STEP: Duration = Duration::from_secs(60);

/// The controllers the migrated fleet takes over from kube-controller-manager.
const MIGRATED: &str = "deployment,replicaset";

/// What `flotilla kcm-flags --controllers <fleet>` prints: `--controllers=…`'s value.
fn kcm_flag(fleet: &str) -> String {
    let out = std::process::Command::new(binary("flotilla"))
        .args(["kcm-flags", "--controllers", fleet])
        .output()
        .expect("run flotilla kcm-flags");
    assert!(out.status.success(), "kcm-flags failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.trim()
        .strip_prefix("--controllers=")
        .unwrap_or_else(|| panic!("kcm-flags printed no --controllers flag: {text:?}"))
        .to_owned()
}

/// The built-ins kube-controller-manager runs under `flag`, by the fleet's names: `*` keeps every
/// controller on by default (all of ours are), `-name` turns one off, by canonical name or alias.
fn kcm_keeps(flag: &str) -> Vec<&'static str> {
    let entries: Vec<&str> = flag.split(',').collect();
    let named =
        |name: &str, b: &flotilla_controllers::Builtin| name == b.name || name == b.kcm_name;
    builtins()
        .iter()
        .filter(|b| {
            let off = entries
                .iter()
                .any(|e| e.strip_prefix('-').is_some_and(|n| named(n, b)));
            let on = entries.iter().any(|e| *e == "*" || named(e, b));
            on && !off
        })
        .map(|b| b.name)
        .collect()
}

/// The controllers that reconciled something in the worker `proc`, from its metrics.
async fn reconciled(proc: &Proc) -> BTreeSet<String> {
    proc.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with("flotilla_worker_reconciles_total{"))
        .filter(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0))
        .filter_map(|l| {
            let rest = l.split("controller=\"").nth(1)?;
            Some(rest.split('"').next()?.to_owned())
        })
        .collect()
}

/// One fleet of one coordinator and one worker running `controllers`.
async fn fleet_of(cluster: &TestCluster, controllers: &str) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let coordinator = fleet.coordinator("c0", &[]);
    let worker = fleet.worker("flotilla", "w0", &["worker", "--controllers", controllers]);
    fleet.wait_for_workers(1, STEP).await;
    (fleet, coordinator, worker)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_beside_what_kcm_flags_leaves_kcm_does_kcms_whole_job_with_no_controller_in_both() {
    let cluster = TestCluster::start().await;
    let client = cluster.client();

    let flag = kcm_flag(MIGRATED);
    let kept = kcm_keeps(&flag);
    let migrated: Vec<&str> = MIGRATED.split(',').collect();
    assert!(
        kept.iter().all(|k| !migrated.contains(k)),
        "--controllers={flag} leaves kube-controller-manager a migrated controller: {kept:?}"
    );
    assert_eq!(
        kept.len() + migrated.len(),
        builtins().len(),
        "--controllers={flag} must leave kube-controller-manager every controller the fleet does not run"
    );

    let (_fleet, _fc, fleet_worker) = fleet_of(&cluster, MIGRATED).await;
    let (_kcm, _kc, kcm_worker) = fleet_of(&cluster, &kept.join(",")).await;

    // KCM's serviceaccount controller gives the namespace its `default` ServiceAccount; the fleet
    // rolls the Deployment out.
    let ns = unique_namespace(&client, "migration").await;
    wait_for(STEP, &format!("{ns}/default ServiceAccount"), || async {
        Api::<ServiceAccount>::namespaced(client.clone(), &ns)
            .get_opt("default")
            .await
            .ok()
            .flatten()
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for(STEP, &format!("{ns}/web's 2 pods"), || async {
        let d = deployments.get("web").await.ok()?;
        let updated = d.status?.updated_replicas == Some(2);
        let n = pods.list(&ListParams::default()).await.ok()?.items.len();
        (updated && n == 2).then_some(())
    })
    .await;

    // KCM's garbage collector removes what the fleet's controllers made once its owner is gone.
    deployments
        .delete(
            "web",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    wait_for(
        STEP,
        &format!("{ns}'s ReplicaSets and pods to be collected"),
        || async {
            let rs = replicasets.list(&ListParams::default()).await.ok()?.items;
            let p = pods.list(&ListParams::default()).await.ok()?.items;
            (rs.is_empty() && p.is_empty()).then_some(())
        },
    )
    .await;

    // KCM's namespace controller finishes a namespace deletion.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(STEP, &format!("namespace {ns} to be removed"), || async {
        namespaces
            .get_opt(&ns)
            .await
            .ok()
            .and_then(|n| n.is_none().then_some(()))
    })
    .await;

    // Each process ran only its own controllers, and each of the job's controllers ran somewhere.
    let by_fleet = reconciled(&fleet_worker).await;
    let by_kcm = reconciled(&kcm_worker).await;
    assert_eq!(
        by_fleet,
        BTreeSet::from(["deployment".to_owned(), "replicaset".to_owned()]),
        "the fleet must reconcile with exactly the migrated controllers"
    );
    assert!(
        by_kcm.is_disjoint(&by_fleet),
        "a controller ran in both: fleet {by_fleet:?}, kcm's stand-in {by_kcm:?}"
    );
    for needed in ["serviceaccount", "garbagecollector", "namespace"] {
        assert!(
            by_kcm.contains(needed),
            "kcm's stand-in never ran {needed}: {by_kcm:?}"
        );
    }
}
