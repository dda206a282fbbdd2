//! Least privilege, proven: a devcluster authorizing with RBAC, a fleet whose coordinator and
//! workers each present a ServiceAccount token bound only to `flotilla rbac`'s rules for their role.
//! With `--controllers '*'` it rolls out Deployments and a ReplicationController, runs a Job, has a
//! CronJob start one, scales a StatefulSet with a claim up and away, runs a DaemonSet, gives a bare Node its pod CIDR and TTL, keeps a PodDisruptionBudget's
//! status, keeps a Service's EndpointSlice, evicts a pod from a node tainted `NoExecute`, garbage-collects (a Deployment deleted with background propagation takes its ReplicaSets
//! and pods; a ConfigMap owned by a deleted ConfigMap goes) and deletes a namespace. With the narrow controllers only
//! (`deployment,replicaset,replicationcontroller,serviceaccount`: no garbage collector or namespace
//! controller, whose wildcards cover much of the others' rules) it rolls out and adopts orphans; the
//! garbage collector alone handles each propagation policy; the namespace controller alone empties
//! and removes a namespace; the node-lifecycle controller (with seconds of grace) marks a silent node
//! Unknown, taints it and marks its pod not ready, twice.
//!
//! Then every rule is shown to be needed: devcluster records each authorization decision with every
//! rule that allowed it, and each verb of each rule of each role must have allowed some request of
//! its role that no other rule allowed — and no request of the fleet may have been denied (the rules
//! are enough). Finally one rule is removed for real (`deployments/status` `update`), and a worker's
//! log must show upstream's 403 for it.
//!
//! It found `patch` of Deployments granted but never needed (the deployment controller's fallback for
//! servers that drop annotations on `deployments/status`, which kube-apiserver does not); the grant is
//! gone from `controllers/src/rbac/worker.rs` and the chart.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flotilla_devcluster::{Decision, SimConfig};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod};
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

/// `flotilla rbac --controllers <controllers> --role <role> -o json`: the rules as the chart renders them.
fn rbac_rules(controllers: &str, role: &str) -> Vec<Value> {
    let out = std::process::Command::new(binary("flotilla"))
        .args([
            "rbac",
            "--controllers",
            controllers,
            "--role",
            role,
            "-o",
            "json",
        ])
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

/// Rollouts: a Deployment rolled out, its template changed (a second ReplicaSet, the first scaled
/// down and deleted, as no history is kept), its minReadySeconds changed; a ReplicationController.
async fn roll_out(admin: &kube::Client, ns: &str) {
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

    // Scaled 2 → 3 → 2 → 3: the second "from 2 to 3" repeats an Event, which is patched (count 2).
    for replicas in [3, 2, 3] {
        let scale = json!({"spec": {"replicas": replicas}});
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap();
        wait_for(CONVERGE, &format!("web scaled to {replicas}"), || async {
            let sets = sets
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            sets.items
                .iter()
                .any(|rs| rs.spec.as_ref().and_then(|s| s.replicas) == Some(replicas))
                .then_some(())
        })
        .await;
    }
    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    wait_for(
        CONVERGE,
        "the repeated scale-up Event patched to count 2",
        || async {
            let events = events.list(&ListParams::default()).await.ok()?;
            events
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("ScalingReplicaSet")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.ends_with("from 2 to 3"))
                        && e.count == Some(2)
                })
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
}

/// Garbage collection: a Deployment deleted with background propagation takes its ReplicaSets and
/// pods; a ConfigMap whose owner (another ConfigMap) is deleted goes.
async fn collect_garbage(admin: &kube::Client, ns: &str) {
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
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
/// `excused` names (resource of the rule, verb, why) that no run on devcluster can need: a fallback
/// for servers unlike it. The resource `*` excuses the verb in every rule.
fn assert_every_rule_needed(
    decisions: &[Decision],
    user: &str,
    role: &str,
    rules: &[Value],
    excused: &[(&str, &str, &str)],
) {
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
            let excuse = excused.iter().find(|(resource, v, _)| {
                (*resource == "*" || rule["resources"] == json!([resource])) && *v == verb.as_str()
            });
            match (alone.get(&(i, verb.clone())), excuse) {
                (Some(request), _) => {
                    eprintln!("{role} rule {i} {rule}: {verb} needed by {request}")
                }
                (None, Some((_, _, why))) => {
                    eprintln!("{role} rule {i} {rule}: {verb} not needed in this run: {why}")
                }
                (None, None) => unneeded.push(format!("{rule} {verb}")),
            }
        }
    }
    assert!(
        unneeded.is_empty(),
        "verbs of {role}'s rules that no request of {user} needed alone: {unneeded:#?}"
    );
}

/// A PodDisruptionBudget of `minAvailable: 50%` over Deployment web's pods: the disruption
/// controller reads the ReplicaSet and the Deployment for the expected count and writes the budget's
/// status through `poddisruptionbudgets/status`.
async fn keep_a_budget(admin: &kube::Client, ns: &str) {
    let path = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets");
    let budget = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
    });
    raw::post(admin, &path, &budget).await.expect_ok(201);
    wait_for(CONVERGE, "PodDisruptionBudget web's status", || async {
        let pdb = raw::get(admin, &format!("{path}/web")).await.expect_ok(200);
        let status = &pdb["status"];
        (status["observedGeneration"] == 1 && status["expectedPods"].as_i64() > Some(0))
            .then_some(())
    })
    .await;
}

/// A Service whose first pod comes after it: the endpointslice controller creates the empty
/// placeholder slice (its controller reference carries `blockOwnerDeletion`: `services/finalizers`
/// `update`), then rewrites it with the pod once the pod is Ready (`endpointslices` `update`).
async fn serve_endpoints(admin: &kube::Client, ns: &str) {
    let services = format!("/api/v1/namespaces/{ns}/services");
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "lp-web"},
        "spec": {"selector": {"app": "lp-web"}, "ports": [{"port": 80}]},
    });
    raw::post(admin, &services, &service).await.expect_ok(201);
    let slices = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dlp-web"
    );
    let endpoints = || async {
        let list = raw::get(admin, &slices).await.expect_ok(200);
        let items = list["items"].as_array().cloned().unwrap_or_default();
        (items.len() == 1).then(|| items[0]["endpoints"].as_array().map_or(0, Vec::len))
    };
    wait_for(CONVERGE, "Service lp-web's placeholder slice", || async {
        (endpoints().await == Some(0)).then_some(())
    })
    .await;
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lp-web", "labels": {"app": "lp-web"}},
        "spec": {"nodeName": "sim-node-0",
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    });
    raw::post(admin, &format!("/api/v1/namespaces/{ns}/pods"), &pod)
        .await
        .expect_ok(201);
    wait_for(
        CONVERGE,
        "Service lp-web's slice to hold its pod",
        || async { (endpoints().await == Some(1)).then_some(()) },
    )
    .await;
}

/// Hand-made Endpoints of a Service without a selector: the endpointslice-mirroring controller
/// mirrors them into a slice (its controller reference to the Endpoints carries
/// `blockOwnerDeletion`: `endpoints/finalizers` `update`) and rewrites it when they change. (The
/// endpoint controller writes the Endpoints of [`serve_endpoints`]'s Service: `endpoints` `create`
/// and `update`.)
async fn mirror_endpoints(admin: &kube::Client, ns: &str) {
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "lp-manual"},
        "spec": {"ports": [{"port": 80}]},
    });
    let services = format!("/api/v1/namespaces/{ns}/services");
    raw::post(admin, &services, &service).await.expect_ok(201);
    let endpoints = |ip: &str| {
        json!({
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "lp-manual"},
            "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": 80}]}],
        })
    };
    let path = format!("/api/v1/namespaces/{ns}/endpoints");
    raw::post(admin, &path, &endpoints("192.168.30.1"))
        .await
        .expect_ok(201);
    let slices = format!(
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dlp-manual"
    );
    let mirrored = |ip: &'static str| {
        let slices = slices.clone();
        async move {
            let list = raw::get(admin, &slices).await.expect_ok(200);
            let items = list["items"].as_array().cloned().unwrap_or_default();
            (items.len() == 1 && items[0]["endpoints"][0]["addresses"][0] == ip).then_some(())
        }
    };
    wait_for(CONVERGE, "Endpoints lp-manual mirrored", || {
        mirrored("192.168.30.1")
    })
    .await;
    raw::patch(
        admin,
        &format!("{path}/lp-manual"),
        "application/merge-patch+json",
        &json!({"subsets": [{"addresses": [{"ip": "192.168.30.2"}], "ports": [{"port": 80}]}]}),
    )
    .await
    .expect_ok(200);
    wait_for(CONVERGE, "the mirrored slice updated", || {
        mirrored("192.168.30.2")
    })
    .await;
}

/// A Job runs to completion: the job controller creates its pod (carrying `blockOwnerDeletion`, hence
/// `jobs/finalizers` `update`), removes the pod's tracking finalizer and patches the Job's status.
async fn run_a_job(admin: &kube::Client, ns: &str) {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.k8s.io/busybox:1.36", "command": ["true"]}],
        }}},
    });
    raw::post(admin, &format!("/apis/batch/v1/namespaces/{ns}/jobs"), &job)
        .await
        .expect_ok(201);
    let path = format!("/apis/batch/v1/namespaces/{ns}/jobs/once");
    wait_for(CONVERGE, "Job once to complete", || async {
        let job = raw::get(admin, &path).await.expect_ok(200);
        let conditions = job["status"]["conditions"].as_array()?.clone();
        conditions
            .iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True")
            .then_some(())
    })
    .await;
}

/// A CronJob starts a Job (carrying `blockOwnerDeletion`, hence `cronjobs/finalizers` `update`) and
/// records it in its status (`cronjobs/status` `update`); the workers' schedule minute is a second
/// (`--cronjob-minute`), and the Job is suspended so nothing else runs for it.
async fn run_a_cronjob(admin: &kube::Client, ns: &str) {
    let cronjob = json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "tick"},
        "spec": {"schedule": "*/1 * * * *", "jobTemplate": {"spec": {
            "suspend": true,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.k8s.io/busybox:1.36", "command": ["true"]}],
            }},
        }}},
    });
    let path = format!("/apis/batch/v1/namespaces/{ns}/cronjobs");
    raw::post(admin, &path, &cronjob).await.expect_ok(201);
    wait_for(CONVERGE, "CronJob tick to start a Job", || async {
        let cronjob = raw::get(admin, &format!("{path}/tick"))
            .await
            .expect_ok(200);
        cronjob["status"]["lastScheduleTime"].as_str().map(|_| ())
    })
    .await;
    let suspend = json!({"spec": {"suspend": true}});
    let merge = "application/merge-patch+json";
    raw::patch(admin, &format!("{path}/tick"), merge, &suspend)
        .await
        .expect_ok(200);
}

/// A StatefulSet of one pod with a claim, both claim policies Delete, scaled to none: the statefulset
/// controller creates its revision, claim and pod (the claim owned by the set, carrying
/// `blockOwnerDeletion`, as the pod: `statefulsets/finalizers` `update`), then hands the claim to the
/// scaled-away pod (`pods/finalizers` `update`) so the garbage collector deletes it with the pod.
async fn run_a_statefulset(admin: &kube::Client, ns: &str) {
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "db"}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    });
    let path = format!("/apis/apps/v1/namespaces/{ns}/statefulsets");
    raw::post(admin, &path, &set).await.expect_ok(201);
    wait_for(CONVERGE, "StatefulSet db's pod to be ready", || async {
        let set = raw::get(admin, &format!("{path}/db")).await.expect_ok(200);
        (set["status"]["readyReplicas"] == 1).then_some(())
    })
    .await;
    let scale = json!({"spec": {"replicas": 0}});
    let merge = "application/merge-patch+json";
    raw::patch(admin, &format!("{path}/db"), merge, &scale)
        .await
        .expect_ok(200);
    let claim = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims/data-db-0");
    wait_for(
        CONVERGE,
        "the claim of the scaled-away pod to be deleted",
        || async {
            let claim = raw::get(admin, &claim).await;
            (claim.status == 404 || claim.json()["metadata"]["deletionTimestamp"].is_string())
                .then_some(())
        },
    )
    .await;
}

/// A bare Node (the simulated ones bring their own `podCIDR`): the nodeipam controller lists Nodes
/// live and patches its range in; the ttl controller annotates it.
async fn allocate_a_node_cidr(admin: &kube::Client) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let name = format!("lp-bare-{}", random_suffix(5));
    let node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_for(CONVERGE, "the bare node's pod CIDR and ttl", || async {
        let node = nodes.get(&name).await.ok()?;
        let annotated = node
            .metadata
            .annotations
            .is_some_and(|a| a.contains_key("node.alpha.kubernetes.io/ttl"));
        let cidr = node.spec?.pod_cidr.filter(|c| !c.is_empty())?;
        annotated.then_some(cidr)
    })
    .await;
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// A DaemonSet on one node (its nodeSelector names the first simulated node, which the node
/// simulator's binder honours): the daemonset controller creates its revision and its pod (both
/// carrying `blockOwnerDeletion`: `daemonsets/finalizers` `update`) and writes its status.
async fn run_a_daemonset(admin: &kube::Client, ns: &str) {
    let node = "sim-node-0";
    let ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    });
    let path = format!("/apis/apps/v1/namespaces/{ns}/daemonsets");
    raw::post(admin, &path, &ds).await.expect_ok(201);
    wait_for(CONVERGE, "DaemonSet agent's pod to be ready", || async {
        let ds = raw::get(admin, &format!("{path}/agent"))
            .await
            .expect_ok(200);
        (ds["status"]["numberReady"] == 1 && ds["status"]["desiredNumberScheduled"] == 1)
            .then_some(())
    })
    .await;
}

/// A pod on a node tainted `NoExecute` (a key of this test's own, untolerated) is evicted by the
/// taint-eviction controller: its `DisruptionTarget` condition (`pods/status` `patch`), the delete,
/// the Event. The taint goes once the pod has; other pods it evicted meanwhile are replaced by their
/// controllers.
async fn evict_by_taint(admin: &kube::Client, ns: &str) {
    let node = "sim-node-1";
    let key = format!("flotilla.dev/lp-{}", random_suffix(5));
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "tainted"},
        "spec": {"nodeName": node,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let path = format!("/api/v1/nodes/{node}");
    let taints = |taints: Value| json!({"spec": {"taints": taints}});
    let added =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let tainted = json!([{"key": key, "effect": "NoExecute", "timeAdded": added}]);
    raw::patch(
        admin,
        &path,
        "application/merge-patch+json",
        &taints(tainted),
    )
    .await
    .expect_ok(200);
    wait_for(
        CONVERGE,
        "the pod on the tainted node to be evicted",
        || async {
            match pods.get_opt("tainted").await.ok()? {
                None => Some(()),
                Some(p) => p.metadata.deletion_timestamp.map(drop),
            }
        },
    )
    .await;
    raw::patch(
        admin,
        &path,
        "application/merge-patch+json",
        &taints(Value::Null),
    )
    .await
    .expect_ok(200);
}
/// Orphans adopted: a pod by a ReplicaSet and by a ReplicationController (each reads its owner live
/// first, then patches the pod), and a ReplicaSet by a Deployment.
async fn adopt_orphans(admin: &kube::Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let owned_by = |kind: &'static str, name: &'static str| {
        let pods = pods.clone();
        async move {
            let pod = pods.get(name).await.ok()?;
            pod.metadata
                .owner_references?
                .iter()
                .any(|r| r.kind == kind && r.controller == Some(true))
                .then_some(())
        }
    };
    let orphan = |name: &str, label: (&str, &str)| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {label.0: label.1}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
        }))
        .unwrap()
    };
    pods.create(&PostParams::default(), &orphan("stray-rs", ("app", "bare")))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &orphan("stray-rc", ("rc", "adopter")),
    )
    .await
    .unwrap();
    let bare = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "bare", "labels": {"app": "bare"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bare"}},
                 "template": {"metadata": {"labels": {"app": "bare"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}},
    });
    raw::post(
        admin,
        &format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        &bare,
    )
    .await
    .expect_ok(201);
    raw::post(
        admin,
        &format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
        &replication_controller("adopter", 1),
    )
    .await
    .expect_ok(201);
    wait_for(CONVERGE, "the ReplicaSet to adopt its orphan pod", || {
        owned_by("ReplicaSet", "stray-rs")
    })
    .await;
    wait_for(
        CONVERGE,
        "the ReplicationController to adopt its orphan pod",
        || owned_by("ReplicationController", "stray-rc"),
    )
    .await;

    let adoptee = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "adoptee", "labels": {"app": "adoptee"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "adoptee"}},
                 "template": {"metadata": {"labels": {"app": "adoptee"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}},
    });
    raw::post(
        admin,
        &format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        &adoptee,
    )
    .await
    .expect_ok(201);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    deployments
        .create(&PostParams::default(), &deployment("adoptee", 1))
        .await
        .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(admin.clone(), ns);
    wait_for(
        CONVERGE,
        "the Deployment to adopt the orphan ReplicaSet",
        || async {
            let rs = sets.get("adoptee").await.ok()?;
            rs.metadata
                .owner_references?
                .iter()
                .any(|r| r.kind == "Deployment" && r.name == "adoptee")
                .then_some(())
        },
    )
    .await;
}

/// A fleet of one coordinator and two `flotilla worker --controllers <controllers>` on a devcluster
/// with RBAC, each role presenting the token of a ServiceAccount bound only to `flotilla rbac`'s rules.
struct LeastFleet {
    cluster: TestCluster,
    admin: kube::Client,
    fleet: Fleet,
    workers: Vec<crate::support::fleet::Proc>,
    prefix: String,
    worker_user: String,
    coordinator_user: String,
    worker_rules: Vec<Value>,
    coordinator_rules: Vec<Value>,
}

impl LeastFleet {
    async fn start(controllers: &str) -> Self {
        let sim = SimConfig {
            nodes: 2,
            ..SimConfig::default()
        };
        Self::start_with(controllers, sim, &[]).await
    }

    /// [`Self::start`] with the node simulator configured by `sim` and `extra` worker flags.
    async fn start_with(controllers: &str, sim: SimConfig, extra: &[&str]) -> Self {
        let cluster = TestCluster::builder()
            .with_rbac()
            .with_sim_config(sim)
            .start()
            .await;
        let admin = cluster.client();
        let system = unique_namespace(&admin, "lp-system").await;
        let prefix = format!("flotilla-lp-{}", random_suffix(5));
        let worker_rules = rbac_rules(controllers, "worker");
        let coordinator_rules = rbac_rules(controllers, "coordinator");
        let mut fleet = Fleet::new(cluster.etcd_endpoints(), cluster.kubeconfig_path());
        let dir = fleet.dir().to_path_buf();
        let kubeconfig = cluster.kubeconfig_path();
        let (coordinator_config, coordinator_user) = account(
            &admin,
            kubeconfig,
            &dir,
            &system,
            &prefix,
            "coordinator",
            &coordinator_rules,
        )
        .await;
        let (worker_config, worker_user) = account(
            &admin,
            kubeconfig,
            &dir,
            &system,
            &prefix,
            "worker",
            &worker_rules,
        )
        .await;
        fleet.kubeconfig = coordinator_config;
        let mut workers = vec![fleet.coordinator("c0", &[])];
        fleet.kubeconfig = worker_config;
        for id in ["w0", "w1"] {
            // Schedule minutes of a second, so a CronJob starts its Job at once (a test-only flag).
            let mut args = vec![
                "worker",
                "--controllers",
                controllers,
                "--cronjob-minute",
                "1s",
                // Node CIDRs, so the nodeipam controller has work (off by default, as upstream).
                "--allocate-node-cidrs",
                "--cluster-cidr",
                "10.244.0.0/16",
            ];
            args.extend_from_slice(extra);
            workers.push(fleet.worker("flotilla", id, &args));
        }
        fleet.wait_for_workers(2, Duration::from_secs(60)).await;
        LeastFleet {
            cluster,
            admin,
            fleet,
            workers,
            prefix,
            worker_user,
            coordinator_user,
            worker_rules,
            coordinator_rules,
        }
    }

    /// Asserts that each role's every rule was needed (on devcluster, which records decisions), but
    /// for the worker's `excused` (see [`assert_every_rule_needed`]).
    fn assert_every_rule_needed(&self, excused: &[(&str, &str, &str)]) {
        let Some(decisions) = self.cluster.authorization_decisions() else {
            eprintln!(
                "the cluster records no authorization decisions: the rules were enough, but not shown each needed"
            );
            return;
        };
        assert_every_rule_needed(
            &decisions,
            &self.worker_user,
            &format!("{}-worker", self.prefix),
            &self.worker_rules,
            excused,
        );
        assert_every_rule_needed(
            &decisions,
            &self.coordinator_user,
            &format!("{}-coordinator", self.prefix),
            &self.coordinator_rules,
            &[(
                "*",
                "list",
                "devcluster streams lists (WatchList), so the coordinator's informers list only \
                 on servers that do not",
            )],
        );
    }
}

#[tokio::test]
async fn a_fleet_bound_only_to_flotilla_rbacs_rules_does_its_work_and_needs_every_rule() {
    let lp = LeastFleet::start("*").await;
    let admin = &lp.admin;
    let ns = unique_namespace(admin, "lp").await;
    roll_out(admin, &ns).await;
    keep_a_budget(admin, &ns).await;
    run_a_job(admin, &ns).await;
    run_a_cronjob(admin, &ns).await;
    run_a_statefulset(admin, &ns).await;
    run_a_daemonset(admin, &ns).await;
    allocate_a_node_cidr(admin).await;
    serve_endpoints(admin, &ns).await;
    mirror_endpoints(admin, &ns).await;
    collect_garbage(admin, &ns).await;
    evict_by_taint(admin, &ns).await;
    delete_a_namespace(admin).await;
    lp.assert_every_rule_needed(&[(
        "pods/status",
        "update",
        "the disruption controller resets a stale DisruptionTarget condition only after 2 minutes",
    )]);

    // One rule removed for real: the Deployment's status can no longer be written, and the worker
    // says why in upstream's words.
    let without: Vec<&Value> = lp
        .worker_rules
        .iter()
        .filter(|r| r["resources"] != json!(["deployments/status"]))
        .collect();
    assert_eq!(
        without.len() + 1,
        lp.worker_rules.len(),
        "{:#?}",
        lp.worker_rules
    );
    let role = format!(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/{}-worker",
        lp.prefix
    );
    let mut current = raw::get(admin, &role).await.expect_ok(200);
    current["rules"] = json!(without);
    raw::put(admin, &role, &current).await.expect_ok(200);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment("after", 1))
        .await
        .unwrap();
    let wanted = format!(
        "deployments.apps \"after\" is forbidden: User \"{}\" cannot update resource \"deployments/status\" in API group \"apps\" in the namespace \"{ns}\"",
        lp.worker_user
    );
    let escaped = wanted.replace('"', "\\\"");
    wait_for(
        CONVERGE,
        "a worker to log the 403 of deployments/status",
        || async {
            lp.workers
                .iter()
                .any(|w| {
                    let log = w.log_text();
                    log.contains(&wanted) || log.contains(&escaped)
                })
                .then_some(())
        },
    )
    .await;
    drop(lp.fleet);
}

/// Without the garbage collector's and the namespace controller's wildcards, each controller's own
/// narrow rules show: the replica controllers' live reads and pod patches of adoptions, the
/// Deployment's ReplicaSet management, a repeated Event patched.
#[tokio::test]
async fn a_fleet_of_narrow_controllers_needs_every_rule_of_its_own() {
    let lp = LeastFleet::start("deployment,replicaset,replicationcontroller,serviceaccount").await;
    let admin = &lp.admin;
    let ns = unique_namespace(admin, "lp").await;
    roll_out(admin, &ns).await;
    adopt_orphans(admin, &ns).await;
    lp.assert_every_rule_needed(&[]);
}

/// A ConfigMap `name` in `ns`, owned by `owner` when given (blocking its deletion).
async fn configmap(
    admin: &kube::Client,
    ns: &str,
    name: &str,
    owner: Option<&ConfigMap>,
) -> ConfigMap {
    let mut metadata = json!({"name": name});
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": owner.metadata.name.clone().unwrap_or_default(),
            "uid": owner.metadata.uid.clone().unwrap_or_default(),
            "blockOwnerDeletion": true,
        }]);
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": metadata})).unwrap(),
        )
        .await
        .unwrap()
}

/// The garbage collector alone: each propagation policy on a ConfigMap owning another (background:
/// the dependent goes; orphan: it stays without the reference; foreground: it goes first).
#[tokio::test]
async fn a_garbage_collector_fleet_needs_every_rule_of_its_own() {
    let lp = LeastFleet::start("garbagecollector").await;
    let admin = &lp.admin;
    let ns = unique_namespace(admin, "lp").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for policy in [
        PropagationPolicy::Background,
        PropagationPolicy::Orphan,
        PropagationPolicy::Foreground,
    ] {
        let owner_name = format!("{policy:?}").to_lowercase();
        let dependent_name = format!("{owner_name}-dependent");
        let owner = configmap(admin, &ns, &owner_name, None).await;
        configmap(admin, &ns, &dependent_name, Some(&owner)).await;
        configmaps
            .delete(
                &owner_name,
                &DeleteParams {
                    propagation_policy: Some(policy.clone()),
                    ..DeleteParams::default()
                },
            )
            .await
            .unwrap();
        wait_for(CONVERGE, &format!("{owner_name} to be gone"), || async {
            configmaps
                .get_opt(&owner_name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
        wait_for(CONVERGE, &format!("{dependent_name} handled"), || async {
            let dependent = configmaps.get_opt(&dependent_name).await.ok()?;
            match policy {
                PropagationPolicy::Orphan => dependent?
                    .metadata
                    .owner_references
                    .unwrap_or_default()
                    .is_empty()
                    .then_some(()),
                _ => dependent.is_none().then_some(()),
            }
        })
        .await;
    }
    lp.assert_every_rule_needed(&[]);
}

/// The namespace controller alone: a namespace holding ConfigMaps and a Secret is emptied and goes.
#[tokio::test]
async fn a_namespace_controller_fleet_needs_every_rule_of_its_own() {
    let lp = LeastFleet::start("namespace").await;
    let admin = &lp.admin;
    let doomed = unique_namespace(admin, "lp-doomed").await;
    for name in ["a", "b"] {
        configmap(admin, &doomed, name, None).await;
    }
    raw::post(
        admin,
        &format!("/api/v1/namespaces/{doomed}/secrets"),
        &json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
    )
    .await
    .expect_ok(201);
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
    lp.assert_every_rule_needed(&[(
        "*",
        "delete",
        "items are deleted one by one only where deletecollection is not served, and every \
         namespaced resource of devcluster (as of kube-apiserver 1.36's built-ins) serves it",
    )]);
}

/// The node-lifecycle controller alone, with seconds of grace: a simulated node stops heartbeating
/// and is marked Unknown (`nodes/status` `patch`, after its Lease is read live: `leases` `get`),
/// tainted (`nodes` `patch`) and its pod marked not ready (`pods/status` `patch`, an Event); it comes
/// back, is untainted, and goes dark once more, so its `NodeNotReady` Event repeats (`events` `patch`).
#[tokio::test]
async fn a_node_lifecycle_fleet_needs_every_rule_of_its_own() {
    let sim = SimConfig {
        nodes: 2,
        lease_renew_interval: Duration::from_millis(500),
        ..SimConfig::default()
    };
    let flags = [
        "--node-monitor-grace-period",
        "3s",
        "--node-monitor-period",
        "500ms",
    ];
    // With the serviceaccount controller, whose informer needs the coordinator's `namespaces`
    // `list`/`watch` (granted whatever the controllers; a fleet of node controllers alone, unscoped,
    // never watches namespaces).
    let lp = LeastFleet::start_with("nodelifecycle,serviceaccount", sim, &flags).await;
    let admin = &lp.admin;
    let ns = unique_namespace(admin, "lp").await;
    let dark = "sim-node-0";
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-dark"},
        "spec": {"nodeName": dark,
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    });
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    raw::post(admin, &pods, &pod).await.expect_ok(201);
    let ready = |status: &'static str| {
        let path = format!("{pods}/on-dark");
        async move {
            let pod = raw::get(admin, &path).await.expect_ok(200);
            pod["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == status)
                .then_some(())
        }
    };
    wait_for(CONVERGE, "pod on-dark to be ready", || ready("True")).await;
    let node_path = format!("/api/v1/nodes/{dark}");
    let node_ready = |status: &'static str| {
        let path = node_path.clone();
        async move {
            let node = raw::get(admin, &path).await.expect_ok(200);
            let ready = node["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == status);
            let tainted = node["spec"]["taints"]
                .as_array()
                .is_some_and(|t| !t.is_empty());
            (ready && tainted == (status != "True")).then_some(())
        }
    };
    for round in 0..2 {
        lp.cluster.stop_node(dark);
        wait_for(
            CONVERGE,
            &format!("{dark} Unknown and tainted ({round})"),
            || node_ready("Unknown"),
        )
        .await;
        wait_for(CONVERGE, "pod on-dark to be marked not ready", || {
            ready("False")
        })
        .await;
        lp.cluster.start_node(dark);
        wait_for(
            CONVERGE,
            &format!("{dark} Ready and untainted ({round})"),
            || node_ready("True"),
        )
        .await;
    }
    let events =
        format!("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{dark}");
    wait_for(CONVERGE, "NodeNotReady counted twice", || async {
        let list = raw::get(admin, &events).await.expect_ok(200);
        list["items"]
            .as_array()?
            .iter()
            .any(|e| e["reason"] == "NodeNotReady" && e["count"] == 2)
            .then_some(())
    })
    .await;
    lp.assert_every_rule_needed(&[]);
}
