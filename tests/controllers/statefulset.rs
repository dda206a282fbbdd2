//! The `statefulset` controller on simulated nodes, against what kube-controller-manager v1.32
//! writes (`kube-fixtures/kcm-v1.32/statefulset/`): a StatefulSet with a volumeClaimTemplate scaled
//! 0 → 3 → 1 under OrderedReady, every pod watch event checked against the order (no pod N before
//! N-1 is Running and Ready, scale-down from the highest ordinal, one at a time); its pods' identity,
//! labels and claims; a partitioned rolling update (partition 1 updates only ordinals ≥ 1, highest
//! first, then partition 0 the rest); claims owned as `persistentVolumeClaimRetentionPolicy` Delete/Delete
//! says (the set while in range, the pod once scaled away, so the garbage collector takes them); the
//! ControllerRevisions, status and Events as KCM writes them. A Parallel set with `ordinals.start` 1
//! makes and deletes pods that never become Ready all at once, and replaces a pod whose phase turns
//! Failed.
//!
//! On a real cluster (`FLOTILLA_TEST_KUBECONFIG`) the claims need a default StorageClass to bind, or
//! the pods stay Pending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::cluster::TestCluster;
use crate::support::fleet::Fleet;
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

const CONVERGE: Duration = Duration::from_secs(30);

fn web(replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "web"}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "nginx", "image": "registry.k8s.io/nginx-slim:0.27",
                        "volumeMounts": [{"name": "data", "mountPath": "/usr/share/nginx/html"}],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))
    .unwrap()
}

fn ordinal(name: &str) -> i32 {
    name.rsplit_once('-').unwrap().1.parse().unwrap()
}

fn running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn revision_of(pod: &Pod) -> String {
    pod.labels()
        .get("controller-revision-hash")
        .cloned()
        .unwrap_or_default()
}

/// What the pod watch saw: violations of the OrderedReady order, and the order in which pods started
/// terminating.
#[derive(Default)]
struct Order {
    pods: BTreeMap<String, Pod>,
    violations: Vec<String>,
    terminations: Vec<String>,
}

impl Order {
    fn observe(&mut self, event: WatchEvent<Pod>) {
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                let name = pod.name_any();
                let n = ordinal(&name);
                let known = self.pods.get(&name);
                if known.is_none() && n > 0 {
                    // A new pod N: pod N-1 must be Running, Ready and staying.
                    let previous = self.pods.get(&format!("web-{}", n - 1));
                    let ok = previous.is_some_and(|p| {
                        running_and_ready(p) && p.metadata.deletion_timestamp.is_none()
                    });
                    if !ok {
                        self.violations
                            .push(format!("{name} created before web-{} was ready", n - 1));
                    }
                }
                let newly_terminating = pod.metadata.deletion_timestamp.is_some()
                    && known.is_none_or(|k| k.metadata.deletion_timestamp.is_none());
                if newly_terminating {
                    // One at a time: no other pod may be terminating meanwhile.
                    let others: Vec<&String> = self
                        .pods
                        .iter()
                        .filter(|(other, p)| {
                            **other != name && p.metadata.deletion_timestamp.is_some()
                        })
                        .map(|(other, _)| other)
                        .collect();
                    if !others.is_empty() {
                        self.violations
                            .push(format!("{name} deleted while {others:?} terminate"));
                    }
                    self.terminations.push(name.clone());
                }
                self.pods.insert(name, pod);
            }
            WatchEvent::Deleted(pod) => {
                self.pods.remove(&pod.name_any());
            }
            _ => {}
        }
    }
}

async fn status_is(
    sets: &Api<StatefulSet>,
    what: &str,
    check: impl Fn(&StatefulSet) -> bool,
) -> StatefulSet {
    wait_for(CONVERGE, what, || async {
        let set = sets.get("web").await.ok()?;
        let observed = set.status.as_ref()?.observed_generation == set.metadata.generation;
        (observed && check(&set)).then_some(set)
    })
    .await
}

/// The set's status counters (replicas, ready, current, updated, available).
fn counters(set: &StatefulSet) -> (i32, i32, i32, i32, i32) {
    let s = set.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.ready_replicas.unwrap_or(0),
        s.current_replicas.unwrap_or(0),
        s.updated_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

async fn scale(sets: &Api<StatefulSet>, replicas: i32) {
    let patch = json!({"spec": {"replicas": replicas}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn live_pods(pods: &Api<Pod>) -> Vec<Pod> {
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
}

/// Whether claim `name` is gone or being deleted (its `pvc-protection` finalizer may hold it).
async fn claim_deleted(claims: &Api<PersistentVolumeClaim>, name: &str) -> bool {
    match claims.get_opt(name).await.unwrap() {
        None => true,
        Some(claim) => claim.metadata.deletion_timestamp.is_some(),
    }
}

fn controller_kind(claim: &PersistentVolumeClaim) -> Option<(String, String)> {
    claim
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ordered_statefulset_scales_rolls_out_by_partition_and_keeps_its_claims_as_its_policy_says()
 {
    let cluster = TestCluster::builder().with_nodes(2).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "statefulset,garbagecollector", 2).await;
    let ns = unique_namespace(&client, "sts").await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    // Every pod event from the start, checked against the order as it arrives.
    let order = Arc::new(Mutex::new(Order::default()));
    let sink = order.clone();
    let watched = pods.clone();
    let watch = tokio::spawn(async move {
        let Ok(stream) = watched.watch(&WatchParams::default(), "0").await else {
            return;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(event)) = stream.next().await {
            sink.lock().observe(event);
        }
    });

    sets.create(&PostParams::default(), &web(0)).await.unwrap();
    let set = status_is(&sets, "web's first status", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.update_revision.as_ref())
            .is_some()
    })
    .await;
    assert_eq!(counters(&set), (0, 0, 0, 0, 0));
    let first = set.status.clone().unwrap();
    assert_eq!(first.current_revision, first.update_revision);
    assert_eq!(first.collision_count, Some(0));

    // 0 → 3, one pod at a time.
    scale(&sets, 3).await;
    let set = status_is(&sets, "web to have 3 ready pods", |s| {
        counters(s) == (3, 3, 3, 3, 3)
    })
    .await;
    let rev1 = set.status.clone().unwrap().update_revision.unwrap();
    let listed = live_pods(&pods).await;
    assert_eq!(listed.len(), 3);
    for pod in &listed {
        let name = pod.name_any();
        let n = ordinal(&name);
        let labels = pod.labels();
        assert_eq!(labels["statefulset.kubernetes.io/pod-name"], name);
        assert_eq!(labels["apps.kubernetes.io/pod-index"], n.to_string());
        assert_eq!(labels["controller-revision-hash"], rev1);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "data")
            .unwrap();
        let claim_name = format!("data-web-{n}");
        assert_eq!(
            volume
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some(claim_name.as_str())
        );
        let claim = claims.get(&claim_name).await.unwrap();
        assert_eq!(claim.labels()["app"], "web");
        // whenDeleted: Delete — the set is the claim's controller while the pod is in range.
        assert_eq!(
            controller_kind(&claim),
            Some(("StatefulSet".into(), "web".into()))
        );
    }
    let revision = revisions.get(&rev1).await.unwrap();
    assert_eq!(revision.revision, 1);
    assert!(rev1.ends_with(&revision.labels()["controller.kubernetes.io/hash"]));
    assert_eq!(
        revision.data.as_ref().unwrap().0["spec"]["template"]["$patch"],
        "replace"
    );

    // A new template with partition 1: web-2 then web-1 are replaced, web-0 stays.
    let patch = json!({"spec": {
        "template": {"metadata": {"annotations": {"rollout": "2"}}},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
    }});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let set = status_is(&sets, "web's partitioned update", |s| {
        counters(s) == (3, 3, 1, 2, 3)
    })
    .await;
    let status = set.status.clone().unwrap();
    let rev2 = status.update_revision.clone().unwrap();
    assert_ne!(rev1, rev2);
    assert_eq!(status.current_revision.as_deref(), Some(rev1.as_str()));
    let by_name: BTreeMap<String, String> = live_pods(&pods)
        .await
        .iter()
        .map(|p| (p.name_any(), revision_of(p)))
        .collect();
    assert_eq!(by_name["web-0"], rev1, "below the partition");
    assert_eq!(by_name["web-1"], rev2);
    assert_eq!(by_name["web-2"], rev2);
    assert_eq!(order.lock().terminations, ["web-2", "web-1"]);

    let patch = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let set = status_is(&sets, "web's completed update", |s| {
        counters(s) == (3, 3, 3, 3, 3)
            && s.status
                .as_ref()
                .is_some_and(|st| st.current_revision == st.update_revision)
    })
    .await;
    assert_eq!(
        set.status.unwrap().current_revision.as_deref(),
        Some(rev2.as_str())
    );
    assert_eq!(order.lock().terminations, ["web-2", "web-1", "web-0"]);
    let kept: BTreeSet<String> = revisions
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(kept, BTreeSet::from([rev1.clone(), rev2.clone()]));

    // 3 → 1, highest ordinal first; whenScaled: Delete hands the claims of web-1 and web-2 to their
    // pods, so they go with them.
    scale(&sets, 1).await;
    status_is(&sets, "web to have 1 pod", |s| {
        counters(s) == (1, 1, 1, 1, 1)
    })
    .await;
    wait_for(
        CONVERGE,
        "the claims of web-1 and web-2 to be deleted",
        || async {
            (claim_deleted(&claims, "data-web-1").await
                && claim_deleted(&claims, "data-web-2").await)
                .then_some(())
        },
    )
    .await;
    let kept = claims.get("data-web-0").await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert_eq!(
        controller_kind(&kept),
        Some(("StatefulSet".into(), "web".into()))
    );
    {
        let order = order.lock();
        assert_eq!(
            order.terminations,
            ["web-2", "web-1", "web-0", "web-2", "web-1"]
        );
        assert!(order.violations.is_empty(), "{:#?}", order.violations);
    }

    // Events as kube-controller-manager words them.
    let recorded: Vec<(String, String)> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("web"))
        .map(|e| {
            assert_eq!(
                e.source.as_ref().and_then(|s| s.component.as_deref()),
                Some("statefulset-controller")
            );
            (e.reason.unwrap_or_default(), e.message.unwrap_or_default())
        })
        .collect();
    for wanted in [
        (
            "SuccessfulCreate",
            "create Claim data-web-0 Pod web-0 in StatefulSet web success",
        ),
        (
            "SuccessfulCreate",
            "create Pod web-0 in StatefulSet web successful",
        ),
        (
            "SuccessfulCreate",
            "create Pod web-2 in StatefulSet web successful",
        ),
        (
            "SuccessfulDelete",
            "delete Pod web-2 in StatefulSet web successful",
        ),
        (
            "SuccessfulDelete",
            "delete Pod web-1 in StatefulSet web successful",
        ),
    ] {
        assert!(
            recorded
                .iter()
                .any(|(r, m)| (r.as_str(), m.as_str()) == wanted),
            "no Event {wanted:?} in {recorded:#?}"
        );
    }

    // whenDeleted: Delete — the last claim goes with the set.
    sets.delete("web", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        CONVERGE,
        "the claim of web-0 to go with the set",
        || async { claim_deleted(&claims, "data-web-0").await.then_some(()) },
    )
    .await;
    watch.abort();
}

/// A Parallel set whose ordinals start at 1 and whose pods never become Ready (on devcluster an
/// image ending in `:fail` crash-loops; elsewhere it cannot be pulled).
fn parallel(replicas: i32) -> StatefulSet {
    let mut set = web(replicas);
    let spec = set.spec.as_mut().unwrap();
    spec.pod_management_policy = Some("Parallel".into());
    spec.ordinals = Some(k8s_openapi::api::apps::v1::StatefulSetOrdinals { start: Some(1) });
    spec.volume_claim_templates = None;
    spec.persistent_volume_claim_retention_policy = None;
    let pod = spec.template.spec.as_mut().unwrap();
    pod.containers[0].image = Some("registry.k8s.io/pause:fail".into());
    pod.containers[0].volume_mounts = None;
    set
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parallel_statefulset_creates_and_deletes_pods_at_once_and_replaces_a_failed_pod() {
    let cluster = TestCluster::builder().with_nodes(1).start().await;
    let client = cluster.client();
    let (_fleet, _procs) = Fleet::of_controllers(&cluster, "statefulset", 1).await;
    let ns = unique_namespace(&client, "sts-par").await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // None of the pods is ever Ready, yet all three are made: Parallel does not wait.
    sets.create(&PostParams::default(), &parallel(3))
        .await
        .unwrap();
    status_is(&sets, "web to have 3 pods", |s| counters(s).0 == 3).await;
    let listed = live_pods(&pods).await;
    let names: BTreeSet<String> = listed.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["web-1", "web-2", "web-3"].map(String::from))
    );
    assert!(listed.iter().all(|p| !running_and_ready(p)));

    // A Failed pod (as an eviction leaves it) is deleted and made again.
    let failed = pods.get("web-2").await.unwrap();
    let patch = json!({"status": {"phase": "Failed"}});
    pods.patch_status("web-2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for(CONVERGE, "web-2 to be made again", || async {
        let pod = pods.get_opt("web-2").await.ok()??;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        (pod.uid() != failed.uid() && phase.as_deref() != Some("Failed")).then_some(())
    })
    .await;

    // 3 → 0 deletes the unready pods all at once.
    scale(&sets, 0).await;
    status_is(&sets, "web to have no pods", |s| {
        counters(s) == (0, 0, 0, 0, 0)
    })
    .await;
    wait_for(CONVERGE, "web's pods to be gone", || async {
        live_pods(&pods).await.is_empty().then_some(())
    })
    .await;
}
