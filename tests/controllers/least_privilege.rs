//! Least privilege, proven: a devcluster authorizing with RBAC, a fleet whose coordinator and
//! workers each present a ServiceAccount token bound only to `flotilla rbac --controllers '*'`'s rules
//! for their role, rolling out Deployments and a ReplicationController, garbage-collecting (a
//! Deployment deleted with background propagation takes its ReplicaSets and pods; a ConfigMap owned
//! by a deleted ConfigMap goes) and deleting a namespace.
//!
//! Then every rule is shown to be needed: devcluster records each authorization decision with every
//! rule that allowed it, and each verb of each rule of each role must have allowed some request of
//! its role that no other rule allowed — and no request of the fleet may have been denied (the rules
//! are enough).
//! Finally one rule is removed for real (`deployments/status` `update`), and the worker's log must
//! show upstream's 403 for it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flotilla_devcluster::Decision;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, binary};
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::objects::deployment;
use crate::support::raw;
use crate::support::tokens::{service_account_token, write_kubeconfig_with_token};
use crate::support::wait::wait_for;

/// How long a controller's work may take to show.
const CONVERGE: Duration = Duration::from_secs(90);

/// `flotilla rbac --controllers '*' --role <role> -o json`: the rules as the chart renders them.
fn rbac_rules(role: &str) -> Vec<Value> {
    let out = std::process::Command::new(binary("flotilla"))
        .args(["rbac", "--controllers", "*", "--role", role, "-o", "json"])
        .output()
        .unwrap_or_else(|err| panic!("cannot run flotilla rbac: {err}"));
    assert!(
        out.status.success(),
        "flotilla rbac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("flotilla rbac -o json prints a list of rules")
}

/// A ServiceAccount `role` in `ns`, bound by a ClusterRoleBinding to ClusterRole `<prefix>-<role>`
/// holding `rules`; returns a kubeconfig file in `dir` presenting its token, and its user name.
async fn account(
    admin: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
    ns: &str,
    prefix: &str,
    role: &str,
    rules: &[Value],
) -> (std::path::PathBuf, String) {
    let name = format!("{prefix}-{role}");
    raw::post(
        admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": role}}),
    )
    .await
    .expect_ok(201);
    raw::post(
        admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await
    .expect_ok(201);
    raw::post(
        admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": role, "namespace": ns}],
        }),
    )
    .await
    .expect_ok(201);
    let token = service_account_token(admin, ns, role).await;
    let path = dir.join(format!("{role}.kubeconfig"));
    write_kubeconfig_with_token(kubeconfig, &token, &path);
    (path, format!("system:serviceaccount:{ns}:{role}"))
}

/// A ReplicationController of `replicas` pause pods labelled `rc=<name>`.
fn replication_controller(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"rc": name},
            "template": {
                "metadata": {"labels": {"rc": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    })
}

/// The work the fleet must do with its least privileges.
async fn exercise(admin: &kube::Client, ns: &str) {
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);

    // A rollout, then a template change: a second ReplicaSet, the first scaled down and, with no
    // history kept, deleted.
    let mut web = deployment("web", 2);
    if let Some(spec) = web.spec.as_mut() {
        spec.revision_history_limit = Some(0);
    }
    deployments
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    wait_for(CONVERGE, "Deployment web to be available", || async {
        let d = deployments.get("web").await.ok()?;
        let status = d.status?;
        (status.available_replicas == Some(2) && status.updated_replicas == Some(2)).then_some(())
    })
    .await;
    let change = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .unwrap();
    wait_for(CONVERGE, "Deployment web's second rollout", || async {
        let d = deployments.get("web").await.ok()?;
        let status = d.status?;
        let sets = sets
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (status.observed_generation == Some(2)
            && status.updated_replicas == Some(2)
            && status.available_replicas == Some(2)
            && sets.items.len() == 1)
            .then_some(())
    })
    .await;

    // A changed minReadySeconds is written into the current ReplicaSet (an update).
    let slower = json!({"spec": {"minReadySeconds": 1}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&slower))
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        "web's ReplicaSet to take minReadySeconds",
        || async {
            let sets = sets
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            sets.items
                .iter()
                .any(|rs| rs.spec.as_ref().and_then(|s| s.min_ready_seconds) == Some(1))
                .then_some(())
        },
    )
    .await;

    // A ReplicationController.
    raw::post(
        admin,
        &format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
        &replication_controller("legacy", 1),
    )
    .await
    .expect_ok(201);
    wait_for(CONVERGE, "the ReplicationController's pod", || async {
        let pods = pods
            .list(&ListParams::default().labels("rc=legacy"))
            .await
            .ok()?;
        (pods.items.len() == 1).then_some(())
    })
    .await;

    // Garbage collection: background propagation takes the ReplicaSet and the pods.
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
    wait_for(
        CONVERGE,
        "web's ReplicaSets and pods to be collected",
        || async {
            let sets = sets
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            let pods = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            (sets.items.is_empty() && pods.items.is_empty()).then_some(())
        },
    )
    .await;
    // …and a ConfigMap whose owner, another ConfigMap, is gone.
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let owner = configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner.metadata.uid.clone().unwrap_or_default()}]}});
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(dependent).unwrap(),
        )
        .await
        .unwrap();
    configmaps
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        "the orphaned ConfigMap to be collected",
        || async {
            configmaps
                .get_opt("dependent")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// Deletes a fresh namespace holding a Deployment and a ConfigMap and waits until it is gone.
async fn delete_a_namespace(admin: &kube::Client) {
    let doomed = unique_namespace(admin, "lp-doomed").await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &doomed);
    deployments
        .create(&PostParams::default(), &deployment("inside", 1))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &doomed);
    wait_for(CONVERGE, "the doomed namespace's pod", || async {
        (pods.list(&ListParams::default()).await.ok()?.items.len() == 1).then_some(())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        &format!("namespace {doomed} to be gone"),
        || async {
            namespaces
                .get_opt(&doomed)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// A request as the proof reports it.
fn describe(d: &Decision) -> String {
    let a = &d.attributes;
    if a.resource_request {
        let sub = if a.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", a.subresource)
        };
        format!(
            "{} {}/{}{sub} ns={:?} name={:?}",
            a.verb, a.api_group, a.resource, a.namespace, a.name
        )
    } else {
        format!("{} {}", a.verb, a.path)
    }
}

/// Asserts that `user` was never denied and that every verb of every rule of ClusterRole `role`
/// allowed some request of `user` that no other rule allowed.
fn assert_every_rule_needed(decisions: &[Decision], user: &str, role: &str, rules: &[Value]) {
    let mine: Vec<&Decision> = decisions.iter().filter(|d| d.user == user).collect();
    let denied: Vec<String> = mine
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| describe(d))
        .collect();
    assert!(
        denied.is_empty(),
        "{user} was denied (a rule is missing from flotilla rbac): {denied:#?}"
    );
    // (rule index, verb) → a request only that rule allowed.
    let mut alone: BTreeMap<(usize, String), String> = BTreeMap::new();
    for d in &mine {
        if let [single] = d.rules.as_slice()
            && single.role == role
        {
            alone
                .entry((single.index, d.attributes.verb.clone()))
                .or_insert_with(|| describe(d));
        }
    }
    let mut unneeded = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let verbs: Vec<String> = rule["verbs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        for verb in verbs {
            match alone.get(&(i, verb.clone())) {
                Some(request) => eprintln!("{role} rule {i} {rule}: {verb} needed by {request}"),
                None => unneeded.push(format!("{rule} {verb}")),
            }
        }
    }
    assert!(
        unneeded.is_empty(),
        "verbs of {role}'s rules that no request of {user} needed alone: {unneeded:#?}"
    );
}

#[tokio::test]
async fn a_fleet_bound_only_to_flotilla_rbacs_rules_does_its_work_and_needs_every_rule() {
    let cluster = TestCluster::builder()
        .with_rbac()
        .with_nodes(2)
        .start()
        .await;
    let admin = cluster.client();
    let system = unique_namespace(&admin, "lp-system").await;
    let prefix = format!("flotilla-lp-{}", random_suffix(5));
    let worker_rules = rbac_rules("worker");
    let coordinator_rules = rbac_rules("coordinator");

    let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
    let dir = fleet.dir().to_path_buf();
    let (coordinator_config, coordinator_user) = account(
        &admin,
        cluster.kubeconfig_path(),
        &dir,
        &system,
        &prefix,
        "coordinator",
        &coordinator_rules,
    )
    .await;
    let (worker_config, worker_user) = account(
        &admin,
        cluster.kubeconfig_path(),
        &dir,
        &system,
        &prefix,
        "worker",
        &worker_rules,
    )
    .await;

    fleet.kubeconfig = coordinator_config;
    let _coordinator = fleet.coordinator("c0", &[]);
    fleet.kubeconfig = worker_config;
    let workers = [
        fleet.worker("flotilla", "w0", &["worker", "--controllers", "*"]),
        fleet.worker("flotilla", "w1", &["worker", "--controllers", "*"]),
    ];
    fleet.wait_for_workers(2, Duration::from_secs(60)).await;

    let ns = unique_namespace(&admin, "lp").await;
    exercise(&admin, &ns).await;
    delete_a_namespace(&admin).await;

    if let Some(decisions) = cluster.authorization_decisions() {
        assert_every_rule_needed(
            &decisions,
            &worker_user,
            &format!("{prefix}-worker"),
            &worker_rules,
        );
        assert_every_rule_needed(
            &decisions,
            &coordinator_user,
            &format!("{prefix}-coordinator"),
            &coordinator_rules,
        );
    } else {
        eprintln!(
            "the cluster records no authorization decisions: the rules were enough, but not shown each needed"
        );
    }

    // One rule removed for real: the Deployment's status can no longer be written, and the worker
    // says why in upstream's words.
    let without: Vec<&Value> = worker_rules
        .iter()
        .filter(|r| r["resources"] != json!(["deployments/status"]))
        .collect();
    assert_eq!(without.len() + 1, worker_rules.len(), "{worker_rules:#?}");
    let role = format!("{prefix}-worker");
    let mut current = raw::get(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}"),
    )
    .await
    .expect_ok(200);
    current["rules"] = json!(without);
    raw::put(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}"),
        &current,
    )
    .await
    .expect_ok(200);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment("after", 1))
        .await
        .unwrap();
    let wanted = format!(
        "deployments.apps \\\"after\\\" is forbidden: User \\\"{worker_user}\\\" cannot update resource \\\"deployments/status\\\" in API group \\\"apps\\\" in the namespace \\\"{ns}\\\""
    );
    let plain = wanted.replace("\\\"", "\"");
    wait_for(
        CONVERGE,
        "the worker to log the 403 of deployments/status",
        || async {
            workers
                .iter()
                .any(|w| {
                    let log = w.log_text();
                    log.contains(&wanted) || log.contains(&plain)
                })
                .then_some(())
        },
    )
    .await;
}
