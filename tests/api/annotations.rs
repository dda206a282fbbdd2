//! The annotation size limit: an object's annotations, and a workload's pod template annotations,
//! may hold at most 256 KiB of keys plus values (apimachinery's `ValidateAnnotationsSize`,
//! `TotalAnnotationSizeLimitB`); more is 422 Invalid on create, update and patch alike.
//!
//! Regression: devcluster stored a ReplicaSet whose pod template carried a 1 MiB annotation (and any
//! object's own oversized annotations), which kube-apiserver refuses. Messages follow
//! `field.TooLong` as v1.36 words it (fixture `errors/configmap-over-1mib-422.json` shows the same
//! wording for ConfigMap data); a pod template's path has no `.metadata`, as upstream's
//! `ValidatePodTemplateSpec` reports it.

use serde_json::{Value, json};

use super::common::{configmap, configmaps, create, setup};
use crate::support::raw;

/// Upstream's `TotalAnnotationSizeLimitB`.
const LIMIT: usize = 256 * 1024;

/// The cause upstream gives for annotations over the limit at `field`.
fn too_long(field: &str) -> Value {
    json!({"reason": "FieldValueTooLong", "message": "Too long: may not be more than 262144 bytes",
        "field": field})
}

/// A ConfigMap `name` whose annotations are `annotations`.
fn annotated(name: &str, annotations: Value) -> Value {
    let mut cm = configmap(name, json!({}));
    cm["metadata"]["annotations"] = annotations;
    cm
}

/// A ReplicaSet `name` whose pod template carries `annotations`.
fn replicaset(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    })
}

#[tokio::test]
async fn annotations_totalling_more_than_256_kib_are_422_on_create_update_and_patch() {
    let (_cluster, client, ns) = setup("annotations").await;
    let cms = configmaps(&ns);

    // Exactly at the limit (key "a" plus its value) is fine.
    let at_limit = annotated("at-limit", json!({"a": "x".repeat(LIMIT - 1)}));
    create(&client, &cms, &at_limit).await;

    // One byte more is not, on create...
    let over = annotated("over", json!({"a": "x".repeat(LIMIT)}));
    let status = raw::post(&client, &cms, &over)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes"
    );
    assert_eq!(
        status["details"],
        json!({"name": "over", "kind": "ConfigMap", "causes": [too_long("metadata.annotations")]})
    );

    // ...where the limit is on the total, not on each annotation...
    let spread = annotated(
        "spread",
        json!({"a": "x".repeat(LIMIT / 2), "b": "x".repeat(LIMIT / 2)}),
    );
    raw::post(&client, &cms, &spread)
        .await
        .expect_status(422, "Invalid");

    // ...on update...
    let path = format!("{cms}/at-limit");
    let mut grown = raw::get(&client, &path).await.expect_ok(200);
    grown["metadata"]["annotations"]["b"] = json!("y");
    let status = raw::put(&client, &path, &grown)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["details"]["causes"],
        json!([too_long("metadata.annotations")])
    );

    // ...and on patch; nothing was stored.
    let patch = json!({"metadata": {"annotations": {"c": "z"}}});
    raw::patch(&client, &path, "application/merge-patch+json", &patch)
        .await
        .expect_status(422, "Invalid");
    let stored = raw::get(&client, &path).await.expect_ok(200);
    let keys: Vec<&String> = stored["metadata"]["annotations"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["a"]);
}

#[tokio::test]
async fn a_pod_templates_annotations_over_256_kib_are_422_like_the_objects_own() {
    // The probe's case: a ReplicaSet whose template carries a 1 MiB annotation.
    let (_cluster, client, ns) = setup("annotations-tmpl").await;
    let rss = format!("/apis/apps/v1/namespaces/{ns}/replicasets");
    let big = replicaset("big", json!({"note": "x".repeat(1024 * 1024)}));
    let status = raw::post(&client, &rss, &big)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["message"],
        "ReplicaSet.apps \"big\" is invalid: spec.template.annotations: Too long: may not be more than 262144 bytes"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([too_long("spec.template.annotations")])
    );

    // Growing a stored template's annotations past the limit is refused as well.
    let small = replicaset("small", json!({"note": "x"}));
    let mut stored = create(&client, &rss, &small).await;
    stored["spec"]["template"]["metadata"]["annotations"]["note"] = json!("x".repeat(LIMIT));
    let status = raw::put(&client, &format!("{rss}/small"), &stored)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["details"]["causes"],
        json!([too_long("spec.template.annotations")])
    );

    // A CronJob's pod template sits deeper, and is checked there.
    let cronjob = json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {"note": "x".repeat(LIMIT)}},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox"}]},
            }}},
        },
    });
    let status = raw::post(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/cronjobs"),
        &cronjob,
    )
    .await
    .expect_status(422, "Invalid");
    let causes = status["details"]["causes"].as_array().unwrap();
    assert!(
        causes.contains(&too_long("spec.jobTemplate.spec.template.annotations")),
        "{causes:?}"
    );
}
