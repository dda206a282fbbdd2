//! The Helm chart's renders (`helm template` over every `deploy/helm/flotilla/ci/*-values.yaml`, saved
//! by `deploy/helm/check.sh` into the directory `FLOTILLA_HELM_RENDERS` names): every manifest parses
//! into its Kubernetes type and serializes back to the same JSON (so no field is misspelt or misplaced,
//! which a plain parse would silently drop); every container command passes the binary's
//! `--check-config`; every built-in fleet's ClusterRole equals `flotilla rbac`'s rules; workers outlive
//! their shutdown grace period; every reference to a ServiceAccount or ClusterRole resolves.

use std::collections::BTreeSet;
use std::path::PathBuf;

use flotilla_sdk::k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use flotilla_sdk::k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use flotilla_sdk::k8s_openapi::api::core::v1::{Container, Service, ServiceAccount};
use flotilla_sdk::k8s_openapi::api::networking::v1::NetworkPolicy;
use flotilla_sdk::k8s_openapi::api::policy::v1::PodDisruptionBudget;
use flotilla_sdk::k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::binaries::{describe, flotilla, run};

/// The environment variable naming the directory of renders.
const RENDERS: &str = "FLOTILLA_HELM_RENDERS";

/// What the kubelet substitutes for `$(POD_IP)` in a coordinator's arguments.
const POD_IP: &str = "10.0.0.7";

/// What the kubelet substitutes for `$(POD_NAME)` in a worker's `--worker-id`.
const POD_NAME: &str = "flotilla-builtins-worker-5d9c7b6f4-x7k2p";

/// Where the chart mounts a pod's TLS Secret; `--check-config` reads certificates of the test CA there
/// instead.
const TLS_DIR: &str = "/etc/flotilla/tls";

/// Where the chart mounts the etcd client TLS Secret and the etcd password; `--check-config` reads the
/// test CA's files (`ca.crt`, `tls.crt`, `tls.key`) and a test `password` there instead.
const ETCD_DIRS: [&str; 2] = ["/etc/flotilla/etcd-tls", "/etc/flotilla/etcd-auth"];

/// The parts of a cert-manager Certificate the chart writes; unknown fields are refused.
#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Certificate {
    api_version: String,
    kind: String,
    metadata: flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: CertificateSpec,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CertificateSpec {
    secret_name: String,
    duration: String,
    renew_before: String,
    private_key: CertificatePrivateKey,
    dns_names: Vec<String>,
    usages: Vec<String>,
    issuer_ref: IssuerRef,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CertificatePrivateKey {
    algorithm: String,
    size: u32,
    rotation_policy: String,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct IssuerRef {
    name: String,
    kind: String,
    group: String,
}

/// The parts of a prometheus-operator ServiceMonitor the chart writes; unknown fields are refused.
#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitor {
    api_version: String,
    kind: String,
    metadata: flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: ServiceMonitorSpec,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorSpec {
    selector: flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    namespace_selector: NamespaceSelector,
    endpoints: Vec<Endpoint>,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NamespaceSelector {
    match_names: Vec<String>,
}

#[derive(serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Endpoint {
    port: String,
    path: String,
    interval: String,
}

/// One scenario's manifests, typed.
#[derive(Default)]
struct Render {
    name: String,
    deployments: Vec<Deployment>,
    cluster_roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
    service_accounts: Vec<ServiceAccount>,
    others: usize,
}

/// The renders, or `None` (the test then says it skipped) when `FLOTILLA_HELM_RENDERS` is unset.
fn renders() -> Option<Vec<Render>> {
    let Some(dir) = std::env::var_os(RENDERS) else {
        eprintln!(
            "skipped: {RENDERS} is unset (deploy/helm/check.sh renders the chart and sets it)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{RENDERS}={}: {err}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.yaml renders in {}", dir.display());
    Some(files.iter().map(|f| parse_render(f)).collect())
}

fn parse_render(file: &std::path::Path) -> Render {
    let text = std::fs::read_to_string(file).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_str_multiple(&text)
        .unwrap_or_else(|err| panic!("{} is not YAML: {err}", file.display()));
    let mut render = Render {
        name: file.display().to_string(),
        ..Render::default()
    };
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        let kind = format!("{} {}", document["apiVersion"], document["kind"]);
        let at = format!("{}: {kind} {}", render.name, document["metadata"]["name"]);
        match (document["apiVersion"].as_str(), document["kind"].as_str()) {
            (Some("apps/v1"), Some("Deployment")) => render.deployments.push(typed(&document, &at)),
            (Some("rbac.authorization.k8s.io/v1"), Some("ClusterRole")) => {
                render.cluster_roles.push(typed(&document, &at))
            }
            (Some("rbac.authorization.k8s.io/v1"), Some("ClusterRoleBinding")) => {
                render.bindings.push(typed(&document, &at))
            }
            (Some("v1"), Some("ServiceAccount")) => {
                render.service_accounts.push(typed(&document, &at))
            }
            (Some("v1"), Some("Service")) => counted::<Service>(&mut render, &document, &at),
            // The bundled etcd (etcd.bundled.enabled).
            (Some("apps/v1"), Some("StatefulSet")) => {
                counted::<StatefulSet>(&mut render, &document, &at)
            }
            (Some("policy/v1"), Some("PodDisruptionBudget")) => {
                counted::<PodDisruptionBudget>(&mut render, &document, &at)
            }
            (Some("autoscaling/v2"), Some("HorizontalPodAutoscaler")) => {
                counted::<HorizontalPodAutoscaler>(&mut render, &document, &at)
            }
            (Some("networking.k8s.io/v1"), Some("NetworkPolicy")) => {
                counted::<NetworkPolicy>(&mut render, &document, &at)
            }
            (Some("monitoring.coreos.com/v1"), Some("ServiceMonitor")) => {
                counted::<ServiceMonitor>(&mut render, &document, &at)
            }
            (Some("cert-manager.io/v1"), Some("Certificate")) => {
                counted::<Certificate>(&mut render, &document, &at)
            }
            _ => panic!("{at}: a kind the chart should not render"),
        }
    }
    render
}

/// `document` as a `T`, which must serialize back to the same JSON: a field the type does not know
/// (a typo, a wrong indentation) would be dropped by the parse and shows up here.
fn typed<T: DeserializeOwned + Serialize>(document: &Value, at: &str) -> T {
    let object: T = serde_json::from_value(document.clone())
        .unwrap_or_else(|err| panic!("{at} does not parse: {err}"));
    let back = serde_json::to_value(&object).unwrap();
    assert_eq!(
        &back, document,
        "{at} loses or changes fields when parsed (left: parsed and serialized back)"
    );
    object
}

fn counted<T: DeserializeOwned + Serialize>(render: &mut Render, document: &Value, at: &str) {
    let _: T = typed(document, at);
    render.others += 1;
}

fn name_of<T: flotilla_sdk::kube::Resource>(object: &T) -> String {
    object.meta().name.clone().unwrap_or_default()
}

/// The container's command and arguments as the kubelet runs them: `$(POD_IP)` expanded.
fn argv(container: &Container) -> Vec<String> {
    container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|a| a.replace("$(POD_IP)", POD_IP))
        .collect()
}

#[tokio::test]
async fn every_rendered_manifest_parses_into_its_kubernetes_type_without_losing_a_field() {
    let Some(renders) = renders() else { return };
    for render in &renders {
        assert!(
            render.deployments.len() >= 2 && !render.cluster_roles.is_empty() && render.others > 0,
            "{}: a coordinator and a worker Deployment, ClusterRoles and the rest expected",
            render.name
        );
    }
}

#[tokio::test]
async fn every_rendered_container_command_passes_check_config() {
    let Some(renders) = renders() else { return };
    // The mounted TLS Secret's files, from the test CA: a server certificate serves both roles here,
    // as --check-config only loads them.
    let pki = crate::pki::Pki::new();
    pki.server("tls");
    std::fs::write(pki.dir().join("password"), "etcd-password\n").unwrap();
    let tls_dir = pki.dir().to_str().unwrap();
    let mut checked = 0;
    for render in &renders {
        for deployment in &render.deployments {
            let spec = deployment.spec.as_ref().unwrap();
            let pod = spec.template.spec.as_ref().unwrap();
            for container in &pod.containers {
                let argv: Vec<String> = argv(container)
                    .iter()
                    .map(|a| {
                        ETCD_DIRS
                            .iter()
                            .fold(a.replace("$(POD_NAME)", POD_NAME), |a, dir| {
                                a.replace(dir, tls_dir)
                            })
                            .replace(TLS_DIR, tls_dir)
                    })
                    .collect();
                let (program, args) = argv.split_first().unwrap_or_else(|| {
                    panic!("{}: {} has no command", render.name, name_of(deployment))
                });
                let mut args = args.to_vec();
                args.push("--check-config".to_owned());
                let output = run(program, &args).await;
                assert!(
                    output.status.success()
                        && String::from_utf8_lossy(&output.stdout).trim() == "configuration ok",
                    "{}: {} runs `{}`, which --check-config refuses: {}",
                    render.name,
                    name_of(deployment),
                    argv.join(" "),
                    describe(&output)
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0, "no container command in the renders");
}

#[tokio::test]
async fn every_builtin_fleets_cluster_role_equals_flotilla_rbac() {
    let Some(renders) = renders() else { return };
    let mut compared = 0;
    for render in &renders {
        for role in &render.cluster_roles {
            let annotations = role.metadata.annotations.clone().unwrap_or_default();
            let which = annotations
                .get("flotilla.dev/role")
                .unwrap_or_else(|| panic!("{}: {} has no role", render.name, name_of(role)));
            let Some(controllers) = annotations.get("flotilla.dev/controllers") else {
                // A custom controller's fleet: its rules come from its values.
                continue;
            };
            let output = flotilla(&[
                "rbac",
                &format!("--controllers={controllers}"),
                "--role",
                which,
                "-o",
                "json",
            ])
            .await;
            assert!(output.status.success(), "{}", describe(&output));
            let expected: Vec<PolicyRule> = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(
                role.rules.clone().unwrap_or_default(),
                expected,
                "{}: ClusterRole {} differs from `flotilla rbac --controllers={controllers} --role {which}` \
                 (left: the chart; fix deploy/helm/flotilla/templates/_rbac.tpl)",
                render.name,
                name_of(role)
            );
            compared += 1;
        }
    }
    assert!(
        compared > 0,
        "no built-in fleet's ClusterRole in the renders"
    );
}

#[tokio::test]
async fn workers_outlive_their_shutdown_grace_period_and_every_reference_resolves() {
    let Some(renders) = renders() else { return };
    for render in &renders {
        let accounts: BTreeSet<String> = render.service_accounts.iter().map(name_of).collect();
        let roles: BTreeSet<String> = render.cluster_roles.iter().map(name_of).collect();
        for binding in &render.bindings {
            assert!(
                roles.contains(&binding.role_ref.name),
                "{}: {}",
                render.name,
                name_of(binding)
            );
            for subject in binding.subjects.iter().flatten() {
                assert!(
                    accounts.contains(&subject.name),
                    "{}: {}",
                    render.name,
                    subject.name
                );
            }
        }
        for deployment in &render.deployments {
            let pod = deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap();
            let account = pod.service_account_name.clone().unwrap_or_default();
            assert!(accounts.contains(&account), "{}: {account}", render.name);
            let bound = render
                .bindings
                .iter()
                .any(|b| b.subjects.iter().flatten().any(|s| s.name == account));
            assert!(
                bound,
                "{}: {account} has no ClusterRoleBinding",
                render.name
            );
            for container in &pod.containers {
                let grace = argv(container).iter().find_map(|a| {
                    a.strip_prefix("--shutdown-grace-period=")
                        .map(|d| flotilla_common::parse_duration(d).unwrap())
                });
                if let Some(grace) = grace {
                    let termination = pod.termination_grace_period_seconds.unwrap_or(30);
                    assert!(
                        u64::try_from(termination).unwrap() > grace.as_secs(),
                        "{}: {} is killed {termination}s after SIGTERM, within its {grace:?} drain",
                        render.name,
                        name_of(deployment)
                    );
                }
            }
        }
    }
}
