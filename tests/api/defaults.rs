//! Defaulting of the built-in types (fixtures `defaulting/*`): the values controllers rely on.

use serde_json::{Value, json};

use super::common::{create, deployment, setup};

fn containers() -> Value {
    json!([{"name": "c", "image": "busybox"}])
}

fn pod_template(restart: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    if let Some(restart) = restart {
        spec["restartPolicy"] = json!(restart);
    }
    json!({"metadata": {"labels": {"app": "web"}}, "spec": spec})
}

#[track_caller]
fn assert_pod_spec_defaults(spec: &Value, restart: &str) {
    assert_eq!(spec["restartPolicy"], restart, "{spec}");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30, "{spec}");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst", "{spec}");
    assert_eq!(spec["schedulerName"], "default-scheduler", "{spec}");
    let container = &spec["containers"][0];
    assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(container["terminationMessagePolicy"], "File");
}

#[tokio::test]
async fn deployment_defaults() {
    // Fixture defaulting/deployment.json.
    let (_cluster, client, ns) = setup("def-deploy").await;
    let created = create(
        &client,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &deployment("web"),
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["progressDeadlineSeconds"], 600);
    assert_pod_spec_defaults(&spec["template"]["spec"], "Always");
    assert_eq!(created["status"], json!({}));
}

#[tokio::test]
async fn pod_defaults() {
    // Fixtures defaulting/pod.json and pod-generatename.json (Surprise 11).
    let (_cluster, client, ns) = setup("def-pod").await;
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let untagged = create(&client, &pods, &super::common::pod("p")).await;
    let spec = &untagged["spec"];
    assert_pod_spec_defaults(spec, "Always");
    assert_eq!(
        spec["containers"][0]["imagePullPolicy"], "Always",
        "untagged image"
    );
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    let tolerations = spec["tolerations"].as_array().unwrap();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        assert!(
            tolerations.iter().any(|t| t["key"] == key
                && t["operator"] == "Exists"
                && t["effect"] == "NoExecute"
                && t["tolerationSeconds"] == 300),
            "toleration {key}: {tolerations:?}"
        );
    }
    assert_eq!(untagged["status"]["phase"], "Pending");
    assert_eq!(untagged["status"]["qosClass"], "BestEffort");
    let tagged = json!({"metadata": {"generateName": "gen-"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
    let tagged = create(&client, &pods, &tagged).await;
    assert_eq!(
        tagged["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent",
        "tagged image"
    );
}

#[tokio::test]
async fn job_defaults() {
    // Fixture defaulting/job.json (Surprise 12).
    let (_cluster, client, ns) = setup("def-job").await;
    let body = json!({"metadata": {"name": "job1"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": containers()}}}});
    let created = create(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs"),
        &body,
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["parallelism"], 1);
    assert_eq!(spec["completions"], 1);
    assert_eq!(spec["backoffLimit"], 6);
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["manualSelector"], false);
    assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    let expected_labels = json!({
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "job1",
        "controller-uid": uid, "job-name": "job1",
    });
    assert_eq!(created["metadata"]["labels"], expected_labels);
    assert_eq!(spec["template"]["metadata"]["labels"], expected_labels);
}

#[tokio::test]
async fn cronjob_defaults() {
    // Fixture defaulting/cronjob.json.
    let (_cluster, client, ns) = setup("def-cron").await;
    let body = json!({"metadata": {"name": "cron1"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template":
        {"spec": {"restartPolicy": "Never", "containers": containers()}}}}}});
    let created = create(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/cronjobs"),
        &body,
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Allow");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["successfulJobsHistoryLimit"], 3);
    assert_eq!(spec["failedJobsHistoryLimit"], 1);
    assert_pod_spec_defaults(&spec["jobTemplate"]["spec"]["template"]["spec"], "Never");
}

#[tokio::test]
async fn statefulset_defaults() {
    // Fixture defaulting/statefulset.json.
    let (_cluster, client, ns) = setup("def-sts").await;
    let body = json!({"metadata": {"name": "sts1"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(None)}});
    let created = create(
        &client,
        &format!("/apis/apps/v1/namespaces/{ns}/statefulsets"),
        &body,
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(
        created["status"],
        json!({"replicas": 0, "availableReplicas": 0})
    );
}

#[tokio::test]
async fn daemonset_defaults() {
    // Fixture defaulting/daemonset.json.
    let (_cluster, client, ns) = setup("def-ds").await;
    let body = json!({"metadata": {"name": "ds1"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(None)}});
    let created = create(
        &client,
        &format!("/apis/apps/v1/namespaces/{ns}/daemonsets"),
        &body,
    )
    .await;
    let spec = &created["spec"];
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(
        created["metadata"]["annotations"]["deprecated.daemonset.template.generation"],
        "1"
    );
}

#[tokio::test]
async fn replicaset_and_replicationcontroller_defaults() {
    // Fixtures defaulting/replicaset.json and replicationcontroller.json.
    let (_cluster, client, ns) = setup("def-rs").await;
    let rs = json!({"metadata": {"name": "web-rs"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(None)}});
    let created = create(
        &client,
        &format!("/apis/apps/v1/namespaces/{ns}/replicasets"),
        &rs,
    )
    .await;
    assert_eq!(created["spec"]["replicas"], 1);
    assert_eq!(created["status"], json!({"replicas": 0}));
    let rc = json!({"metadata": {"name": "rc1"}, "spec": {"template": pod_template(None)}});
    let created = create(
        &client,
        &format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
        &rc,
    )
    .await;
    assert_eq!(created["spec"]["replicas"], 1);
    assert_eq!(created["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(created["metadata"]["labels"], json!({"app": "web"}));
}

#[tokio::test]
async fn a_cluster_ip_service_gets_an_allocated_ip_and_port_defaults() {
    // Fixtures defaulting/service-clusterip.json, service-headless.json, service-nodeport.json.
    let (_cluster, client, ns) = setup("def-svc").await;
    let services = format!("/api/v1/namespaces/{ns}/services");
    let svc = create(&client, &services, &json!({"metadata": {"name": "svc1"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})).await;
    let spec = &svc["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    let ip: std::net::IpAddr = spec["clusterIP"].as_str().unwrap().parse().unwrap();
    assert!(!ip.is_unspecified());
    assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
    assert_eq!(
        spec["ports"][0],
        json!({"protocol": "TCP", "port": 80, "targetPort": 80})
    );
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(svc["status"], json!({"loadBalancer": {}}));
    assert!(svc["metadata"].get("generation").is_none());

    let other = create(
        &client,
        &services,
        &json!({"metadata": {"name": "svc2"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_ne!(
        other["spec"]["clusterIP"], spec["clusterIP"],
        "each Service gets its own IP"
    );
    let headless = create(&client, &services, &json!({"metadata": {"name": "svc4"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})).await;
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    let nodeport = create(&client, &services, &json!({"metadata": {"name": "svc3"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}})).await;
    let port = nodeport["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&port), "nodePort {port}");
    assert_eq!(nodeport["spec"]["externalTrafficPolicy"], "Cluster");
}

#[tokio::test]
async fn pvc_node_lease_configmap_and_endpointslice_defaults() {
    // Fixtures defaulting/persistentvolumeclaim.json, node.json, lease.json, configmap.json,
    // endpointslice.json, endpointslice-no-endpoints-field.json.
    let (_cluster, client, ns) = setup("def-misc").await;
    let pvc = json!({"metadata": {"name": "pvc1"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let pvc = create(
        &client,
        &format!("/api/v1/namespaces/{ns}/persistentvolumeclaims"),
        &pvc,
    )
    .await;
    assert_eq!(
        pvc["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"]["phase"], "Pending");

    let name = format!("def-node-{}", crate::support::namespace::random_suffix(5));
    let node = create(
        &client,
        "/api/v1/nodes",
        &json!({"metadata": {"name": name}}),
    )
    .await;
    assert_eq!(
        node["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    );
    assert!(
        node["metadata"].get("managedFields").is_none(),
        "a name-only create records no managedFields"
    );
    crate::support::raw::delete(&client, &format!("/api/v1/nodes/{name}"), None)
        .await
        .expect_ok(200);

    let lease = create(
        &client,
        &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
        &json!({"metadata": {"name": "lease1"}}),
    )
    .await;
    assert_eq!(lease["spec"], json!({}));
    assert!(lease["metadata"].get("generation").is_none());

    let cm = create(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &json!({"metadata": {"name": "cm"}}),
    )
    .await;
    assert!(
        cm.get("data").is_none() && cm["metadata"].get("managedFields").is_none(),
        "{cm}"
    );

    let slices = format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices");
    let slice = json!({"metadata": {"name": "eps1"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"]}], "ports": [{"port": 80}]});
    let slice = create(&client, &slices, &slice).await;
    assert_eq!(slice["ports"][0]["protocol"], "TCP");
    let bare = create(
        &client,
        &slices,
        &json!({"metadata": {"name": "eps2"}, "addressType": "IPv4"}),
    )
    .await;
    assert_eq!(bare["endpoints"], Value::Null, "{bare}");
}
