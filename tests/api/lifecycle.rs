//! Object lifecycle (fixtures `lifecycle/*`): finalizers, propagation policies, generation, and the
//! status subresource.

use serde_json::{Value, json};

use super::common::{SOON, configmaps, create, deployment, deployments, get_ok, rv, setup};
use crate::support::raw;
use crate::support::watch::{RawWatch, event_type};

#[tokio::test]
async fn an_object_with_a_finalizer_is_only_marked_and_goes_with_its_last_finalizer() {
    // Fixtures lifecycle/finalizer-0*.json and finalizer-watch.json (Surprise 19).
    let (_cluster, client, ns) = setup("life-fin").await;
    let body = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    create(&client, &configmaps(&ns), &body).await;
    let path = format!("{}/held", configmaps(&ns));
    let list = get_ok(&client, &configmaps(&ns)).await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{}?watch=true&resourceVersion={}",
            configmaps(&ns),
            rv(&list)
        ),
    )
    .await;

    let marked = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(
        marked["kind"], "ConfigMap",
        "a marked object is returned, not a Status: {marked}"
    );
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let event = watch.next(SOON, "MODIFIED with deletionTimestamp").await;
    assert_eq!(event_type(&event), "MODIFIED");
    assert!(event["object"]["metadata"]["deletionTimestamp"].is_string());
    get_ok(&client, &path).await;

    // Other changes are still allowed while deleting; new finalizers are not.
    let labelled = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(labelled["metadata"]["labels"]["x"], "y");
    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/another"]}});
    let status = raw::patch(&client, &path, "application/merge-patch+json", &more)
        .await
        .expect_status(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("no new finalizers can be added if the object is being deleted"),
        "{status}"
    );
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.finalizers"
    );

    let cleared = raw::patch(
        &client,
        &path,
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/metadata/finalizers", "value": []}]),
    )
    .await
    .expect_ok(200);
    assert!(
        cleared["metadata"]
            .get("finalizers")
            .is_none_or(|f| f.as_array().is_some_and(Vec::is_empty))
    );
    raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
    let deleted = watch
        .next_matching(SOON, "DELETED held", |e| event_type(e) == "DELETED")
        .await;
    assert_eq!(deleted["object"]["metadata"]["name"], "held");
    assert!(
        rv(&deleted["object"]) > rv(&labelled),
        "the DELETED event carries a new resourceVersion"
    );
}

async fn delete_with(client: &kube::Client, path: &str, policy: &str) -> Value {
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy});
    raw::delete(client, path, Some(&options))
        .await
        .expect_ok(200)
}

#[tokio::test]
async fn foreground_and_orphan_deletes_add_their_finalizer_and_bump_generation() {
    // Fixtures lifecycle/delete-deployment-foreground*.json and -orphan*.json (Surprises 17, 18).
    let (_cluster, client, ns) = setup("life-policy").await;
    for (name, policy, finalizer) in [
        ("fg", "Foreground", "foregroundDeletion"),
        ("or", "Orphan", "orphan"),
    ] {
        create(&client, &deployments(&ns), &deployment(name)).await;
        let path = format!("{}/{name}", deployments(&ns));
        let marked = delete_with(&client, &path, policy).await;
        assert_eq!(marked["kind"], "Deployment", "{policy}: {marked}");
        assert_eq!(
            marked["metadata"]["finalizers"],
            json!([finalizer]),
            "{policy}"
        );
        assert!(
            marked["metadata"]["deletionTimestamp"].is_string(),
            "{policy}"
        );
        assert_eq!(
            marked["metadata"]["deletionGracePeriodSeconds"], 0,
            "{policy}"
        );
        assert_eq!(
            marked["metadata"]["generation"], 2,
            "{policy}: deletionTimestamp bumps generation"
        );
        let still = get_ok(&client, &path).await;
        assert_eq!(still["metadata"]["finalizers"], json!([finalizer]));
    }
}

#[tokio::test]
async fn the_foreground_policy_can_come_as_a_query_parameter() {
    // Fixture lifecycle/delete-deployment-foreground-via-query.json.
    let (_cluster, client, ns) = setup("life-query").await;
    create(&client, &deployments(&ns), &deployment("q")).await;
    let path = format!("{}/q?propagationPolicy=Foreground", deployments(&ns));
    let marked = raw::delete(&client, &path, None).await.expect_ok(200);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
}

#[tokio::test]
async fn a_background_delete_removes_at_once_and_answers_a_status() {
    // Fixture lifecycle/delete-deployment-background.json.
    let (_cluster, client, ns) = setup("life-bg").await;
    let created = create(&client, &deployments(&ns), &deployment("bg")).await;
    let path = format!("{}/bg", deployments(&ns));
    let reply = delete_with(&client, &path, "Background").await;
    assert_eq!(reply["kind"], "Status");
    assert_eq!(reply["status"], "Success");
    assert_eq!(
        reply["details"],
        json!({"name": "bg", "group": "apps", "kind": "deployments", "uid": created["metadata"]["uid"]})
    );
    let status = raw::get(&client, &path)
        .await
        .expect_status(404, "NotFound");
    assert_eq!(status["message"], "deployments.apps \"bg\" not found");
}

#[tokio::test]
async fn generation_bumps_on_spec_and_annotation_changes_only() {
    // Fixtures lifecycle/generation-0*.json and generation-replicaset-annotation-only.json (Surprise 15).
    let (_cluster, client, ns) = setup("life-gen").await;
    let created = create(&client, &deployments(&ns), &deployment("gen")).await;
    assert_eq!(created["metadata"]["generation"], 1);
    let path = format!("{}/gen", deployments(&ns));
    let mut spec_change = created.clone();
    spec_change["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    let changed = raw::put(&client, &path, &spec_change).await.expect_ok(200);
    assert_eq!(changed["metadata"]["generation"], 2, "spec change");
    let labelled = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"tier": "x"}}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(labelled["metadata"]["generation"], 2, "label-only change");
    let annotated = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"annotations": {"note": "y"}}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(
        annotated["metadata"]["generation"], 3,
        "a Deployment's annotation change bumps generation"
    );

    let rs = json!({"metadata": {"name": "rs"}, "spec": {"selector": {"matchLabels": {"app": "rs"}},
        "template": {"metadata": {"labels": {"app": "rs"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let replicasets = format!("/apis/apps/v1/namespaces/{ns}/replicasets");
    create(&client, &replicasets, &rs).await;
    let rs_annotated = raw::patch(
        &client,
        &format!("{replicasets}/rs"),
        "application/merge-patch+json",
        &json!({"metadata": {"annotations": {"n": "1"}}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(
        rs_annotated["metadata"]["generation"], 1,
        "a ReplicaSet's annotation change does not"
    );
}

#[tokio::test]
async fn status_changes_only_through_the_status_subresource() {
    // Fixtures lifecycle/status-put-ignores-spec.json, main-put-ignores-status.json (Surprise 16).
    let (_cluster, client, ns) = setup("life-status").await;
    let created = create(&client, &deployments(&ns), &deployment("s")).await;
    let path = format!("{}/s", deployments(&ns));

    let mut main = created.clone();
    main["status"] = json!({"observedGeneration": 7, "replicas": 5});
    let after_main = raw::put(&client, &path, &main).await.expect_ok(200);
    assert_eq!(
        after_main["status"],
        json!({}),
        "PUT on the main resource ignores status"
    );

    let mut via_status = after_main.clone();
    via_status["status"] = json!({"observedGeneration": 1, "replicas": 2});
    via_status["spec"]["replicas"] = json!(9);
    via_status["metadata"]["labels"] = json!({"sneaky": "yes"});
    // Upstream's deployment status strategy resets spec and labels only: the deployment controller
    // writes its revision annotation this way, without a generation bump.
    via_status["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "2"});
    let after_status = raw::put(&client, &format!("{path}/status"), &via_status)
        .await
        .expect_ok(200);
    assert_eq!(after_status["status"]["replicas"], 2);
    assert_eq!(after_status["status"]["observedGeneration"], 1);
    assert_eq!(
        after_status["spec"]["replicas"], 1,
        "PUT /status ignores spec"
    );
    assert!(
        after_status["metadata"]
            .get("labels")
            .is_none_or(|l| l.get("sneaky").is_none()),
        "and labels"
    );
    assert_eq!(
        after_status["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2",
        "but keeps annotation edits"
    );
    assert_eq!(
        after_status["metadata"]["generation"], 1,
        "status writes never bump generation"
    );

    let patched = raw::patch(
        &client,
        &format!("{path}/status"),
        "application/merge-patch+json",
        &json!({"status": {"readyReplicas": 1}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(patched["status"]["readyReplicas"], 1);
    assert_eq!(
        get_ok(&client, &format!("{path}/status")).await["status"]["readyReplicas"],
        1,
        "GET /status"
    );
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_replicas() {
    // Fixtures kcm/30-get-scale.json, 31-put-scale.json, 32-patch-scale-back.json.
    let (_cluster, client, ns) = setup("life-scale").await;
    create(&client, &deployments(&ns), &deployment("web")).await;
    let path = format!("{}/web/scale", deployments(&ns));
    let scale = get_ok(&client, &path).await;
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=web");
    let mut up = scale.clone();
    up["spec"]["replicas"] = json!(3);
    let put = raw::put(&client, &path, &up).await.expect_ok(200);
    assert_eq!(put["spec"]["replicas"], 3);
    let deploy = get_ok(&client, &format!("{}/web", deployments(&ns))).await;
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(deploy["metadata"]["generation"], 2);
    let back = raw::patch(
        &client,
        &path,
        "application/merge-patch+json",
        &json!({"spec": {"replicas": 2}}),
    )
    .await
    .expect_ok(200);
    assert_eq!(back["spec"]["replicas"], 2);
}

#[tokio::test]
async fn pod_deletion_is_immediate_when_unbound_and_graceful_when_bound() {
    // Fixtures kcm/40-43 and 44-watch-pod-deletions.json (Surprise 21).
    let (_cluster, client, ns) = setup("life-pods").await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let created = create(&client, &pods, &super::common::pod("p-unbound")).await;
    let mut bound = super::common::pod("p-bound");
    bound["spec"]["nodeName"] = json!("node-x");
    create(&client, &pods, &bound).await;
    let mut watch = RawWatch::open(
        &client,
        &format!(
            "{pods}?watch=1&fieldSelector=metadata.name%3Dp-unbound&resourceVersion={}",
            rv(&created)
        ),
    )
    .await;

    let unbound = raw::delete(&client, &format!("{pods}/p-unbound"), None)
        .await
        .expect_ok(200);
    assert_eq!(unbound["kind"], "Pod");
    assert_eq!(unbound["metadata"]["deletionGracePeriodSeconds"], 0);
    let marked = watch.next(SOON, "the grace-0 mark of p-unbound").await;
    let deleted = watch.next(SOON, "the deletion of p-unbound").await;
    assert_eq!(
        (event_type(&marked), event_type(&deleted)),
        ("MODIFIED", "DELETED")
    );
    assert_eq!(
        rv(&unbound),
        rv(&deleted["object"]),
        "the answer carries the deletion's resourceVersion (kcm/40, 44)"
    );
    raw::get(&client, &format!("{pods}/p-unbound"))
        .await
        .expect_status(404, "NotFound");

    let graceful = raw::delete(&client, &format!("{pods}/p-bound"), None)
        .await
        .expect_ok(200);
    assert_eq!(graceful["metadata"]["deletionGracePeriodSeconds"], 30);
    let still = get_ok(&client, &format!("{pods}/p-bound")).await;
    assert!(still["metadata"]["deletionTimestamp"].is_string());
    raw::delete(
        &client,
        &format!("{pods}/p-bound?gracePeriodSeconds=0"),
        None,
    )
    .await
    .expect_ok(200);
    raw::get(&client, &format!("{pods}/p-bound"))
        .await
        .expect_status(404, "NotFound");
}

#[tokio::test]
async fn binding_a_pod_sets_its_node_name_once() {
    let (_cluster, client, ns) = setup("life-bind").await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    create(&client, &pods, &super::common::pod("p")).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let reply = raw::post(&client, &format!("{pods}/p/binding"), &binding).await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json()["status"], "Success");
    assert_eq!(
        get_ok(&client, &format!("{pods}/p")).await["spec"]["nodeName"],
        "node-1"
    );
    let again = raw::post(&client, &format!("{pods}/p/binding"), &binding).await;
    let status = again.expect_status(409, "Conflict");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("is already assigned to node"),
        "{status}"
    );
}

#[tokio::test]
async fn every_status_and_scale_subresource_answers_get_and_update() {
    // Discovery fixtures: */status on pods, services, PVCs, RCs, nodes, namespaces and the apps and
    // batch workloads; */scale on deployments, replicasets, statefulsets and replicationcontrollers.
    let (_cluster, client, ns) = setup("life-subres").await;
    let core = |plural: &str| format!("/api/v1/namespaces/{ns}/{plural}");
    let apps = |plural: &str| format!("/apis/apps/v1/namespaces/{ns}/{plural}");
    let batch = |plural: &str| format!("/apis/batch/v1/namespaces/{ns}/{plural}");
    let template = json!({"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let job_template = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}});
    let selector = json!({"matchLabels": {"app": "s"}});
    let workload =
        json!({"metadata": {"name": "s"}, "spec": {"selector": selector, "template": template}});
    let cases: Vec<(String, Value, bool)> = vec![
        (core("pods"), super::common::pod("s"), false),
        (
            core("services"),
            json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
            false,
        ),
        (
            core("persistentvolumeclaims"),
            json!({"metadata": {"name": "s"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            false,
        ),
        (
            core("replicationcontrollers"),
            json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "s"}, "template": template}}),
            true,
        ),
        (apps("deployments"), workload.clone(), true),
        (apps("replicasets"), workload.clone(), true),
        (apps("statefulsets"), workload.clone(), true),
        (apps("daemonsets"), workload, false),
        (
            batch("jobs"),
            json!({"metadata": {"name": "s"}, "spec": {"template": job_template}}),
            false,
        ),
        (
            batch("cronjobs"),
            json!({"metadata": {"name": "s"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": job_template}}}}),
            false,
        ),
        (
            "/api/v1/nodes".to_string(),
            json!({"metadata": {"name": format!("subres-{ns}")}}),
            false,
        ),
    ];
    for (collection, body, scalable) in cases {
        let created = create(&client, &collection, &body).await;
        let name = created["metadata"]["name"].as_str().unwrap().to_string();
        let item = format!("{collection}/{name}");
        let status = get_ok(&client, &format!("{item}/status")).await;
        assert_eq!(status["kind"], created["kind"], "{item}/status");
        let updated = raw::put(&client, &format!("{item}/status"), &status).await;
        assert_eq!(updated.status, 200, "PUT {item}/status: {}", updated.text);
        if scalable {
            let mut scale = get_ok(&client, &format!("{item}/scale")).await;
            assert_eq!(scale["kind"], "Scale", "{item}/scale");
            assert_eq!(scale["status"]["selector"], "app=s", "{item}/scale");
            scale["spec"]["replicas"] = json!(2);
            raw::put(&client, &format!("{item}/scale"), &scale)
                .await
                .expect_ok(200);
            assert_eq!(
                get_ok(&client, &item).await["spec"]["replicas"],
                2,
                "{item} after /scale"
            );
        } else {
            let reply = raw::get(&client, &format!("{item}/scale")).await;
            assert_eq!(
                reply.status, 404,
                "{item} has no scale subresource: {}",
                reply.text
            );
        }
    }
    let ns_status = get_ok(&client, &format!("/api/v1/namespaces/{ns}/status")).await;
    assert_eq!(ns_status["status"]["phase"], "Active");
}
