//! `helm install` of the chart into a cluster (devcluster, or the cluster `FLOTILLA_TEST_KUBECONFIG`
//! names), once per `ci/*-values.yaml` scenario: the install succeeds, every object of the release's
//! manifest reads back from the API server holding what the chart rendered (defaults may add fields,
//! none may change or drop one), and `helm uninstall` removes the cluster-scoped objects too.
//!
//! Needs the helm binary named by `FLOTILLA_HELM` (`deploy/helm/check.sh` sets it); skips, saying so,
//! without it. The kinds of cert-manager and the Prometheus operator that scenarios render are
//! installed first as permissive CRDs, as a cluster running those operators has them.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::namespace::{random_suffix, unique_namespace};
use crate::support::raw;

/// The environment variable naming the helm binary.
const HELM: &str = "FLOTILLA_HELM";
const CHART: &str = "deploy/helm/flotilla";

/// (group, kind, plural) of the operators' kinds the chart can render.
const OPERATOR_KINDS: &[(&str, &str, &str)] = &[
    ("cert-manager.io", "Certificate", "certificates"),
    ("cert-manager.io", "Issuer", "issuers"),
    ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs helm against the cluster behind `kubeconfig`; its stdout, or a panic with its output.
fn helm(helm: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(helm)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm.display()));
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// Creates a permissive CRD for each operator kind (a 409 means the cluster has it already).
async fn operator_crds(client: &kube::Client) {
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    for (group, kind, plural) in OPERATOR_KINDS {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {
                "group": group, "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        });
        let created = raw::post(client, CRDS, &crd).await;
        assert!(
            matches!(created.status, 201 | 409),
            "creating the {kind} CRD: {created:?}"
        );
    }
    // Established before helm asks discovery for them.
    for (group, kind, _) in OPERATOR_KINDS {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        crate::support::wait::wait_for(
            std::time::Duration::from_secs(30),
            &format!("{kind} to be served"),
            || async { discovery::pinned_kind(client, &gvk).await.ok() },
        )
        .await;
    }
}

/// Where `rendered` is not contained in `stored`: every field the chart rendered must be there with
/// the same value; the server may add fields (defaults, status, metadata).
fn differences(path: &str, rendered: &Value, stored: &Value, out: &mut Vec<String>) {
    match (rendered, stored) {
        (Value::Object(r), Value::Object(s)) => {
            for (key, value) in r {
                let here = format!("{path}.{key}");
                match s.get(key) {
                    Some(stored) => differences(&here, value, stored, out),
                    None if value.is_null() => {}
                    None => out.push(format!(
                        "{here}: rendered {value}, absent from the stored object"
                    )),
                }
            }
        }
        (Value::Array(r), Value::Array(s)) if r.len() == s.len() => {
            for (i, (r, s)) in r.iter().zip(s).enumerate() {
                differences(&format!("{path}[{i}]"), r, s, out);
            }
        }
        (r, s) if r == s => {}
        (r, s) => out.push(format!("{path}: rendered {r}, stored {s}")),
    }
}

/// The documents of a multi-document YAML stream, without the empty ones.
fn documents(yaml: &str) -> Vec<Value> {
    yaml.split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// Reads `object` back from the cluster.
async fn read_back(client: &kube::Client, namespace: &str, object: &Value) -> Option<Value> {
    let (group, version) = match object["apiVersion"].as_str()?.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", object["apiVersion"].as_str()?),
    };
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str()?);
    let (resource, caps) = discovery::pinned_kind(client, &gvk).await.ok()?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let stored = api
        .get_opt(object["metadata"]["name"].as_str()?)
        .await
        .ok()??;
    serde_json::to_value(stored).ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_scenario_installs_reads_back_as_rendered_and_uninstalls() {
    let Some(helm_bin) = std::env::var_os(HELM).map(PathBuf::from) else {
        eprintln!("skipped: {HELM} is unset (deploy/helm/check.sh obtains helm and sets it)");
        return;
    };
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    operator_crds(&client).await;

    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(repo().join(CHART).join("ci"))
        .expect("the chart's ci/ directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    scenarios.sort();
    assert!(!scenarios.is_empty(), "no {CHART}/ci/*-values.yaml");

    for values in &scenarios {
        let scenario = values.file_name().unwrap().to_string_lossy().into_owned();
        let namespace = unique_namespace(&client, "helm").await;
        let release = format!("flotilla-{}", random_suffix(5));
        let values = values.to_string_lossy().into_owned();
        helm(
            &helm_bin,
            &kubeconfig,
            &["install", &release, CHART, "-n", &namespace, "-f", &values],
        );
        let manifest = helm(
            &helm_bin,
            &kubeconfig,
            &["get", "manifest", &release, "-n", &namespace],
        );
        let objects = documents(&manifest);
        assert!(
            !objects.is_empty(),
            "{scenario}: the release has no objects"
        );
        let mut cluster_scoped = Vec::new();
        for object in &objects {
            let what = format!(
                "{scenario}: {} {}",
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["name"].as_str().unwrap_or("?")
            );
            let stored = read_back(&client, &namespace, object)
                .await
                .unwrap_or_else(|| panic!("{what} does not read back"));
            let mut diff = Vec::new();
            differences("", object, &stored, &mut diff);
            assert!(
                diff.is_empty(),
                "{what} is not stored as rendered:\n{}",
                diff.join("\n")
            );
            if stored["metadata"].get("namespace").is_none() {
                cluster_scoped.push(object.clone());
            }
        }
        helm(
            &helm_bin,
            &kubeconfig,
            &["uninstall", &release, "-n", &namespace, "--wait"],
        );
        for object in &cluster_scoped {
            assert!(
                read_back(&client, &namespace, object).await.is_none(),
                "{scenario}: {} {} outlived helm uninstall",
                object["kind"],
                object["metadata"]["name"]
            );
        }
    }
}
