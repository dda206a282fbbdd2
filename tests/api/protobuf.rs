//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`, what kubectl's typed generators
//! send): every `kubectl create <kind>` works and stores what the same object sent as JSON stores;
//! garbled protobuf gets a 400/415 Status, never a panic. Regression for the bug where all of them
//! failed with 415 "the body of the request was in an unknown format".

use std::path::Path;

use http::Method;
use serde_json::{Value, json};

use super::common::{SOON, assert_still_serving, configmap, configmaps, create, get_ok, setup};
use super::crd::{CRDS, crd, established};
use super::kubectl::{kubectl, kubectl_installed, run};
use crate::support::namespace::random_suffix;
use crate::support::raw;
use crate::support::wait::within;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A `kubectl create` generator: what to create and how to read it back.
struct Case {
    /// What the case is, for failure messages.
    what: &'static str,
    /// The resource for `kubectl get`.
    resource: &'static str,
    /// `kubectl create` arguments for an object named `name` in namespace `ns`.
    args: fn(name: &str, ns: &str) -> Vec<String>,
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// `args` with `flags` added before a `--` (after which kubectl passes everything to the container).
fn with_flags(mut args: Vec<String>, flags: &[&str]) -> Vec<String> {
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.splice(at..at, flags.iter().map(|f| f.to_string()));
    args
}

const CASES: &[Case] = &[
    Case {
        what: "namespace",
        resource: "namespace",
        args: |name, _| words(&format!("namespace {name}")),
    },
    Case {
        what: "deployment",
        resource: "deployment",
        args: |name, _| {
            words(&format!(
                "deployment {name} --image=nginx:1.27 --port=80 --replicas=2"
            ))
        },
    },
    Case {
        // `replicas` is a Go pointer: its zero must survive protobuf (and not default to 1).
        what: "deployment with zero replicas",
        resource: "deployment",
        args: |name, _| words(&format!("deployment {name} --image=nginx --replicas=0")),
    },
    Case {
        what: "configmap",
        resource: "configmap",
        args: |name, _| {
            words(&format!(
                "configmap {name} --from-literal=k=v --from-literal=empty="
            ))
        },
    },
    Case {
        what: "secret generic",
        resource: "secret",
        args: |name, _| {
            words(&format!(
                "secret generic {name} --from-literal=password=s3cret"
            ))
        },
    },
    Case {
        what: "serviceaccount",
        resource: "serviceaccount",
        args: |name, _| words(&format!("serviceaccount {name}")),
    },
    Case {
        what: "job",
        resource: "job",
        args: |name, _| words(&format!("job {name} --image=busybox -- echo hello")),
    },
    Case {
        what: "cronjob",
        resource: "cronjob",
        args: |name, _| {
            let mut args = words(&format!("cronjob {name} --image=busybox --schedule"));
            args.push("*/5 * * * *".into());
            args.extend(words("-- echo hello"));
            args
        },
    },
    Case {
        what: "service clusterip",
        resource: "service",
        args: |name, _| {
            words(&format!(
                "service clusterip {name} --tcp=80:8080 --tcp=443:https"
            ))
        },
    },
    Case {
        what: "role",
        resource: "role",
        args: |name, _| {
            words(&format!(
                "role {name} --verb=get,list,watch --resource=pods,deployments.apps"
            ))
        },
    },
    Case {
        what: "rolebinding",
        resource: "rolebinding",
        args: |name, ns| {
            words(&format!(
                "rolebinding {name} --role=viewer --user=alice --group=devs --serviceaccount={ns}:robot"
            ))
        },
    },
    Case {
        what: "quota",
        resource: "resourcequota",
        args: |name, _| words(&format!("quota {name} --hard=pods=4,count/configmaps=10")),
    },
    Case {
        what: "priorityclass",
        resource: "priorityclass",
        args: |name, _| {
            words(&format!(
                "priorityclass {name} --value=1000 --description=batch"
            ))
        },
    },
    Case {
        what: "poddisruptionbudget",
        resource: "poddisruptionbudget",
        args: |name, _| {
            words(&format!(
                "poddisruptionbudget {name} --selector=app=web --min-available=50%"
            ))
        },
    },
];

/// A stored object with what differs between two creates of the same thing taken out: server-set
/// metadata, the name (wherever it shows, e.g. in labels) and the uid (e.g. in a Job's selector), the
/// allocated cluster IPs, and a ResourceQuota's status (kept by a background task, so it may not have
/// caught up with both objects at the same moment).
fn normalised(mut object: Value, name: &str) -> Value {
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(meta) = object["metadata"].as_object_mut() {
        for key in [
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "managedFields",
        ] {
            meta.remove(key);
        }
    }
    if let Some(spec) = object["spec"].as_object_mut()
        && spec.contains_key("clusterIP")
    {
        spec.insert("clusterIP".into(), json!("IP"));
        spec.insert("clusterIPs".into(), json!(["IP"]));
    }
    if object["kind"] == "ResourceQuota"
        && let Some(quota) = object.as_object_mut()
    {
        quota.remove("status");
    }
    let mut text = object.to_string().replace(name, "NAME");
    if !uid.is_empty() {
        text = text.replace(&uid, "UID");
    }
    serde_json::from_str(&text).unwrap()
}

/// Runs one case: creates `pb-…` with the typed generator (protobuf) and `js-…` from the generator's
/// JSON; returns why they differ, if they do.
async fn check(kubeconfig: &Path, ns: &str, case: &Case) -> Result<(), String> {
    let suffix = random_suffix(6);
    let (pb_name, js_name) = (format!("pb{suffix}"), format!("js{suffix}"));

    // -v=8 logs the request headers: proof that this create really went as protobuf.
    let mut typed = kubectl(kubeconfig, ns);
    typed
        .arg("create")
        .args(with_flags((case.args)(&pb_name, ns), &["-v=8"]));
    let (ok, out, err) = run(typed, None).await;
    if !ok {
        return Err(format!("kubectl create failed: {out}{}", tail(&err)));
    }
    if !err.contains(&format!("Content-Type: {PROTOBUF}")) {
        return Err(format!(
            "kubectl did not send protobuf, so this case tests nothing: {}",
            tail(&err)
        ));
    }

    let mut dry_run = kubectl(kubeconfig, ns);
    dry_run.arg("create").args(with_flags(
        (case.args)(&js_name, ns),
        &["--dry-run=client", "-o", "json"],
    ));
    let (ok, manifest, err) = run(dry_run, None).await;
    if !ok {
        return Err(format!("kubectl create --dry-run failed: {err}"));
    }
    let mut from_json = kubectl(kubeconfig, ns);
    from_json.args(["create", "-f", "-"]);
    let (ok, out, err) = run(from_json, Some(&manifest)).await;
    if !ok {
        return Err(format!("kubectl create -f (JSON) failed: {out}{err}"));
    }

    let mut stored = Vec::new();
    for name in [&pb_name, &js_name] {
        let mut get = kubectl(kubeconfig, ns);
        get.args(["get", case.resource, name, "-o", "json"]);
        let (ok, out, err) = run(get, None).await;
        if !ok {
            return Err(format!(
                "kubectl get {} {name} failed: {err}",
                case.resource
            ));
        }
        let object: Value =
            serde_json::from_str(&out).map_err(|e| format!("kubectl get printed no JSON: {e}"))?;
        stored.push(normalised(object, name));
    }
    if stored[0] != stored[1] {
        return Err(format!(
            "stored objects differ\n  from protobuf: {}\n  from JSON:     {}",
            stored[0], stored[1]
        ));
    }
    Ok(())
}

/// The last lines of kubectl's log, enough to see the request that failed.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[tokio::test]
async fn kubectl_typed_creates_store_what_the_same_objects_sent_as_json_store() {
    if !kubectl_installed() {
        eprintln!("skipped: kubectl is not installed");
        return;
    }
    let (cluster, _client, ns) = setup("pb-kubectl").await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let mut failures = Vec::new();
    for case in CASES {
        if let Err(why) = check(&kubeconfig, &ns, case).await {
            failures.push(format!("{}: {why}", case.what));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// A protobuf encoder just big enough for hand-made bodies: length-delimited fields only.

fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(tag << 3) | 2];
    let mut len = bytes.len();
    while len >= 0x80 {
        out.push((len & 0x7f) as u8 | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(bytes);
    out
}

/// `k8s\0` + runtime.Unknown{typeMeta{apiVersion, kind}, raw}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
}

/// A core/v1 ConfigMap message: metadata{name} (1) and data entries (2).
fn configmap_message(name: &str, data: &[(&str, &str)]) -> Vec<u8> {
    let mut raw = field(1, &field(1, name.as_bytes()));
    for (k, v) in data {
        raw.extend(field(
            2,
            &[field(1, k.as_bytes()), field(2, v.as_bytes())].concat(),
        ));
    }
    raw
}

async fn post_protobuf(client: &kube::Client, path: &str, body: Vec<u8>) -> raw::Reply {
    raw::request(client, Method::POST, path, Some(PROTOBUF), body).await
}

#[tokio::test]
async fn a_hand_encoded_protobuf_configmap_is_stored_like_its_json_twin() {
    let (_cluster, client, ns) = setup("pb-cm").await;
    let cms = configmaps(&ns);
    let body = envelope(
        "v1",
        "ConfigMap",
        &configmap_message("frompb", &[("k", "v"), ("empty", "")]),
    );
    let created = post_protobuf(&client, &cms, body).await.expect_ok(201);
    let twin = create(
        &client,
        &cms,
        &configmap("fromjs", json!({"k": "v", "empty": ""})),
    )
    .await;
    assert_eq!(
        normalised(created, "frompb"),
        normalised(twin, "fromjs"),
        "protobuf and JSON creates differ"
    );
    let stored = get_ok(&client, &format!("{cms}/frompb")).await;
    assert_eq!(stored["data"], json!({"k": "v", "empty": ""}));
}

#[tokio::test]
async fn garbled_protobuf_bodies_get_a_400_status_and_the_server_keeps_serving() {
    let (_cluster, client, ns) = setup("pb-bad").await;
    let cms = configmaps(&ns);
    let good = envelope("v1", "ConfigMap", &configmap_message("x", &[("k", "v")]));

    let bad: [(&str, Vec<u8>); 5] = [
        ("no k8s magic", br#"{"kind":"ConfigMap"}"#.to_vec()),
        ("an empty body", Vec::new()),
        ("a truncated envelope", good[..good.len() - 3].to_vec()),
        ("a bare magic", b"k8s\0\x0a\xff".to_vec()),
        (
            "an object that is not a ConfigMap message",
            envelope("v1", "ConfigMap", b"\x0a\x7f\x01"),
        ),
    ];
    for (what, body) in bad {
        let reply = within(SOON, what, post_protobuf(&client, &cms, body)).await;
        let status = reply.expect_status(400, "BadRequest");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("must be of type ConfigMap"),
            "{what}: unclear message {message:?}"
        );
    }

    // A well-formed body of the wrong kind for the URL.
    let deployment = envelope("apps/v1", "Deployment", &field(1, &field(1, b"web")));
    let status = post_protobuf(&client, &cms, deployment)
        .await
        .expect_status(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("Deployment")),
        "{status}"
    );
    assert_still_serving(&client, &ns).await;
}

#[tokio::test]
async fn protobuf_for_a_custom_resource_gets_415_like_upstream() {
    let (_cluster, client, ns) = setup("pb-cr").await;
    let group = format!("g{}.pbtest.flotilla.dev", random_suffix(5));
    create(
        &client,
        CRDS,
        &crd(&group, "greetings", "Greeting", "Namespaced", false),
    )
    .await;
    established(&client, &format!("greetings.{group}")).await;
    let collection = format!("/apis/{group}/v1/namespaces/{ns}/greetings");
    let body = envelope(
        &format!("{group}/v1"),
        "Greeting",
        &field(1, &field(1, b"hi")),
    );
    let status = post_protobuf(&client, &collection, body)
        .await
        .expect_status(415, "UnsupportedMediaType");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the body of the request was in an unknown format")
            && !message.contains(PROTOBUF),
        "{message}"
    );
}

/// Sends `method path` with a JSON body (if any) and the given Accept header; returns the status
/// code, the response Content-Type and the body.
async fn send_accepting(
    client: &kube::Client,
    method: Method,
    path: &str,
    accept: &str,
    body: Option<Value>,
) -> (u16, String, Vec<u8>) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::ACCEPT, accept);
    if body.is_some() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let response = client
        .send(request.body(kube::client::Body::from(bytes)).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (code, content_type, body)
}

#[tokio::test]
async fn a_client_accepting_only_protobuf_gets_406_and_nothing_is_created() {
    let (cluster, client, ns) = setup("pb-accept").await;
    // A real kube-apiserver answers in protobuf instead.
    crate::skip_unless_devcluster!(cluster, "devcluster answers in JSON only");
    let cms = configmaps(&ns);
    let (code, _, body) = send_accepting(
        &client,
        Method::POST,
        &cms,
        PROTOBUF,
        Some(configmap("notmade", json!({}))),
    )
    .await;
    assert_eq!(code, 406, "{}", String::from_utf8_lossy(&body));
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NotAcceptable");
    assert_eq!(status["code"], 406);
    let gone = raw::get(&client, &format!("{cms}/notmade")).await;
    assert_eq!(gone.status, 404, "{}", gone.text);

    // kubectl's own Accept header (protobuf first, JSON as a fallback) is answered in JSON.
    let (code, content_type, body) = send_accepting(
        &client,
        Method::GET,
        &cms,
        "application/vnd.kubernetes.protobuf,application/json",
        None,
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, "application/json"));
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
}
