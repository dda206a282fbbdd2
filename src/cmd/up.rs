//! `flotilla up`: the local demo. Starts etcd, the devcluster (with simulated nodes) and two fleets, each
//! process a real one: `demo`, two coordinators and three workers running the example `greeting`
//! controller, and `builtins`, a coordinator and two `flotilla worker --controllers *` workers running
//! kube-controller-manager's controllers. Applies the Greeting CRD, sample Greetings, sample
//! Deployments and one of each other workload ([`Workloads`]: a Job, a CronJob, a DaemonSet and a
//! StatefulSet), and shows its progress as a list of steps ticked off ([`Progress`]) and a live count
//! until every Greeting is reconciled, every Deployment is Available and every workload finished.
//! With `--keep-running` it then shows `flotilla status --watch`'s live view of the `demo` fleet (on a
//! terminal) until Ctrl-C, and stops every process it started.
//!
//! In traces each child is its own `service.instance.id` (its fleet id) under a `service.name` per
//! role, even when the user's `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` would otherwise name
//! every child alike ([`child_otel_env`]).

use std::io::IsTerminal;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_devcluster::EtcdServer;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::procs::{
    fleet_flags, free_port, sibling, spawn, spawn_with_env, stop_all, wait_for_api,
};
use super::up_progress::Progress;
use super::up_workloads::{WorkloadProgress, Workloads};

/// The Greeting CRD of the example controller.
const GREETING_CRD: &str = include_str!("../../examples/greeting/crd.yaml");

/// Flags of `flotilla up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Coordinators to start (one leads, the others stand by).
    #[arg(long, default_value_t = 2)]
    pub coordinators: usize,
    /// Workers running the greeting controller.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Sample Greetings to create.
    #[arg(long, default_value_t = 50)]
    pub greetings: usize,
    /// Workers of the `builtins` fleet, running every built-in controller.
    #[arg(long, default_value_t = 2)]
    pub builtin_workers: usize,
    /// Sample Deployments (3 replicas each) to create.
    #[arg(long, default_value_t = 3)]
    pub deployments: usize,
    /// Also run a Job, a CronJob, a DaemonSet and a StatefulSet to completion (`--workloads=false`
    /// to skip them; the CronJob's first Job waits for the next wall-clock minute).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub workloads: bool,
    /// Simulated nodes in the devcluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Keep everything running after the samples are reconciled, until Ctrl-C.
    #[arg(long)]
    pub keep_running: bool,
    /// Give up when the samples are not reconciled within this long.
    #[arg(long, default_value = "180s", value_parser = flotilla_common::parse_duration)]
    pub timeout: Duration,
    /// Trace export the demo's coordinators and workers get (`--otlp-endpoint http://localhost:4317`
    /// with a Jaeger all-in-one running).
    #[command(flatten)]
    pub tracing: flotilla_common::TraceFlags,
}

/// A child's role, for its `service.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Coordinator,
    Worker,
}

impl Role {
    fn suffix(self) -> &'static str {
        match self {
            Self::Coordinator => "coordinator",
            Self::Worker => "worker",
        }
    }
}

/// The OpenTelemetry environment of the child `id` of `role`, given the user's `OTEL_SERVICE_NAME`
/// (`service_name`) and `OTEL_RESOURCE_ATTRIBUTES` (`resource`), which every child would otherwise
/// inherit as they are, naming every process alike:
/// - `OTEL_RESOURCE_ATTRIBUTES`: the user's attributes without `service.name` and
///   `service.instance.id`, then `service.instance.id=<id>` (the child's fleet id, unique in the demo);
/// - `OTEL_SERVICE_NAME`: `<name>-coordinator` / `<name>-worker` when the user named the service
///   (either way; `OTEL_SERVICE_NAME` first, as the specification ranks them); otherwise unset, so each
///   process names itself (`flotilla-coordinator`, `flotilla-worker`, a custom controller's name).
fn child_otel_env(
    role: Role,
    id: &str,
    service_name: Option<&str>,
    resource: Option<&str>,
) -> Vec<(String, String)> {
    let is = |entry: &str, key: &str| entry.split_once('=').is_some_and(|(k, _)| k.trim() == key);
    let entries: Vec<&str> = resource
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .collect();
    let user_name = service_name
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            entries
                .iter()
                .find(|e| is(e, "service.name"))
                .and_then(|e| e.split_once('='))
                .map(|(_, v)| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        });
    let mut attributes: Vec<String> = entries
        .iter()
        .filter(|e| !is(e, "service.name") && !is(e, "service.instance.id"))
        .map(|e| (*e).to_owned())
        .collect();
    attributes.push(format!("service.instance.id={id}"));
    let mut env = vec![("OTEL_RESOURCE_ATTRIBUTES".to_owned(), attributes.join(","))];
    if let Some(name) = user_name {
        env.push((
            "OTEL_SERVICE_NAME".to_owned(),
            format!("{name}-{}", role.suffix()),
        ));
    }
    env
}

/// Runs the demo.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("flotilla-up-").tempdir()?;
    let logs = dir.path().to_path_buf();
    println!("flotilla up: logs in {}", logs.display());
    let mut progress = Progress::stdout();

    progress.step("starting etcd");
    let etcd = EtcdServer::start().await?;
    let endpoints = etcd.endpoints().join(",");
    progress.done(&endpoints);

    let flotilla = std::env::current_exe()?;
    let kubeconfig = logs.join("kubeconfig");
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    progress.step("starting the local Kubernetes API (devcluster)");
    let mut children = vec![spawn(
        &logs,
        "devcluster",
        &flotilla,
        &[
            "devcluster".into(),
            "--etcd-endpoints".into(),
            endpoints.clone(),
            "--listen".into(),
            api.to_string(),
            "--nodes".into(),
            args.nodes.to_string(),
            "--write-kubeconfig".into(),
            kubeconfig.display().to_string(),
        ],
    )?];
    let client = wait_for_api(&kubeconfig).await?;
    progress.done(&format!(
        "http://{api} ({} simulated nodes), kubeconfig {}",
        args.nodes,
        kubeconfig.display()
    ));

    let fleet = "demo";
    let builtins = "builtins";
    // Every coordinator and worker exports its traces where `--otlp-endpoint` says.
    let shared = |fleet: &str| {
        let mut flags = fleet_flags(fleet, &endpoints, &kubeconfig);
        flags.extend(args.tracing.to_args());
        flags
    };
    let (user_service, user_resource) = (
        std::env::var("OTEL_SERVICE_NAME").ok(),
        std::env::var("OTEL_RESOURCE_ATTRIBUTES").ok(),
    );
    let otel = |role: Role, id: &str| {
        child_otel_env(role, id, user_service.as_deref(), user_resource.as_deref())
    };
    let coordinator = |id: &str, fleet: &str| -> Vec<String> {
        let mut args: Vec<String> = ["coordinator", "--id", id, "--listen", "127.0.0.1:0"]
            .map(String::from)
            .to_vec();
        args.extend(shared(fleet));
        args
    };
    progress.step(&format!("starting fleet {fleet:?}: coordinators"));
    for i in 0..args.coordinators {
        let id = format!("coordinator-{i}");
        children.push(spawn_with_env(
            &logs,
            &id,
            &flotilla,
            &coordinator(&id, fleet),
            &otel(Role::Coordinator, &id),
        )?);
    }
    progress.done(&format!("{} coordinators", args.coordinators));
    progress.step(&format!("starting fleet {fleet:?}: workers"));
    let greeting = sibling("greeting-controller")?;
    for i in 0..args.workers {
        let id = format!("worker-{i}");
        let mut worker_args = vec!["--worker-id".to_owned(), id.clone()];
        worker_args.extend(shared(fleet));
        children.push(spawn_with_env(
            &logs,
            &id,
            &greeting,
            &worker_args,
            &otel(Role::Worker, &id),
        )?);
    }
    progress.done(&format!(
        "{} workers running the greeting controller",
        args.workers
    ));
    // The built-in controllers run in a fleet of their own: every worker of a fleet runs the same
    // controllers.
    progress.step(&format!(
        "starting fleet {builtins:?}: coordinator and workers"
    ));
    let id = format!("{builtins}-coordinator-0");
    children.push(spawn_with_env(
        &logs,
        &id,
        &flotilla,
        &coordinator(&id, builtins),
        &otel(Role::Coordinator, &id),
    )?);
    for i in 0..args.builtin_workers {
        let id = format!("{builtins}-worker-{i}");
        let mut worker_args: Vec<String> = ["worker", "--controllers", "*", "--worker-id", &id]
            .map(String::from)
            .to_vec();
        worker_args.extend(shared(builtins));
        children.push(spawn_with_env(
            &logs,
            &id,
            &flotilla,
            &worker_args,
            &otel(Role::Worker, &id),
        )?);
    }
    progress.done(&format!(
        "1 coordinator, {} workers running every built-in controller",
        args.builtin_workers
    ));

    progress.step("applying the sample workload");
    let greetings = apply_samples(&client, args.greetings).await?;
    let deployments = apply_deployments(&client, args.deployments).await?;
    let workloads = Workloads::new(client.clone(), args.nodes);
    if args.workloads {
        workloads.apply().await?;
    }
    progress.done(&format!(
        "Greeting CRD, {} Greetings and {} Deployments{} in namespace demo",
        args.greetings,
        args.deployments,
        if args.workloads {
            ", a Job, a CronJob, a DaemonSet, a StatefulSet and a Service"
        } else {
            ""
        }
    ));
    progress.step("waiting for the fleets to reconcile the samples");

    let started = Instant::now();
    loop {
        let done = reconciled(&client, &greetings).await;
        let available = available(&client, &deployments).await;
        let finished = if args.workloads {
            Some(workloads.progress().await)
        } else {
            None
        };
        let workloads_line = finished
            .map(|p| format!("; {}", p.line()))
            .unwrap_or_default();
        let fleet_line = match super::status::fetch(&etcd.endpoints(), fleet).await {
            Ok(s) => format!(
                "leader {} (term {}), {} workers connected",
                s.leader_id,
                s.term,
                s.workers.iter().filter(|w| w.connected).count()
            ),
            Err(_) => "no leader yet".into(),
        };
        progress.line(&format!(
            "{done}/{} Greetings reconciled, {available}/{} Deployments available{workloads_line}; {fleet_line}",
            args.greetings, args.deployments
        ));
        if done == args.greetings
            && available == args.deployments
            && finished.as_ref().is_none_or(WorkloadProgress::all)
        {
            progress.done(&format!(
                "all {} Greetings reconciled and {} Deployments available{}",
                args.greetings,
                args.deployments,
                if finished.is_some() {
                    "; the Job, the CronJob's first Job, the DaemonSet and the StatefulSet done, the Service has endpoints"
                } else {
                    ""
                }
            ));
            break;
        }
        if started.elapsed() > args.timeout {
            progress.finish_line();
            bail!(
                "timed out after {:?}: {done}/{} Greetings reconciled, {available}/{} Deployments available{workloads_line}; see the logs in {}",
                args.timeout,
                args.greetings,
                args.deployments,
                logs.display()
            );
        }
        for child in &mut children {
            child.check_running()?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if args.keep_running {
        println!(
            "running; try: KUBECONFIG={} kubectl get greetings,configmaps,deployments,jobs,cronjobs,daemonsets,statefulsets,services,endpointslices,pods -n demo",
            kubeconfig.display()
        );
        // The demo's fleets speak plaintext gRPC on loopback (`fleet_flags` passes
        // --insecure-plaintext), so `flotilla status` must too.
        println!(
            "         flotilla status --insecure-plaintext --fleet {fleet} --etcd-endpoints {endpoints}"
        );
        println!(
            "         flotilla status --insecure-plaintext --fleet {builtins} --etcd-endpoints {endpoints}"
        );
        println!("press Ctrl-C to stop");
        if std::io::stdout().is_terminal() {
            // The live view returns on Ctrl-C (or SIGTERM) and gives the terminal back.
            let endpoints = etcd.endpoints();
            let fetch = || super::status::fetch(&endpoints, fleet);
            super::status_watch::run(fleet, Duration::from_secs(1), fetch).await?;
        } else {
            flotilla_common::shutdown_signal().await;
        }
        println!("stopping every process flotilla up started");
    }
    // Workers first, so they hand back their leases cleanly; then coordinators; then the API.
    stop_all(&mut children);
    let _ = dir.keep();
    Ok(())
}

fn greeting_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.flotilla.dev", "v1", "Greeting"),
        "greetings",
    )
}

async fn apply_samples(client: &kube::Client, n: usize) -> anyhow::Result<Vec<String>> {
    let crd: Value = serde_saphyr::from_str(GREETING_CRD)
        .context("examples/greeting/crd.yaml is not valid YAML")?;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?)
        .await
        .context("cannot create the Greeting CRD")?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "demo"}}))?,
        )
        .await
        .context("cannot create namespace demo")?;
    let greetings: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "demo", &greeting_resource());
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("hello-{i}");
        let object = json!({
            "apiVersion": "example.flotilla.dev/v1",
            "kind": "Greeting",
            "metadata": {"name": name},
            "spec": {"message": format!("hello from greeting {i}")},
        });
        // The CRD is served a moment after it is created; retry the first create briefly.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match greetings
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(object.clone())?,
                )
                .await
            {
                Ok(_) => break,
                Err(err) if Instant::now() < deadline => {
                    tracing::debug!(error = %err, "Greeting not accepted yet; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => return Err(err).context("cannot create a Greeting"),
            }
        }
        names.push(name);
    }
    Ok(names)
}

/// How many Greetings have their ConfigMap with the right message and an up-to-date observedGeneration.
async fn reconciled(client: &kube::Client, names: &[String]) -> usize {
    let greetings: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "demo", &greeting_resource());
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "demo");
    let (Ok(gs), Ok(cms)) = (
        greetings.list(&Default::default()).await,
        configmaps.list(&Default::default()).await,
    ) else {
        return 0;
    };
    gs.items
        .iter()
        .filter(|g| names.iter().any(|n| Some(n) == g.metadata.name.as_ref()))
        .filter(|g| {
            let name = g.metadata.name.clone().unwrap_or_default();
            let message = g.data.pointer("/spec/message").and_then(Value::as_str);
            let observed = g
                .data
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            let cm_ok = cms.items.iter().any(|cm| {
                cm.metadata.name.as_deref() == Some(&format!("{name}-greeting"))
                    && cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("message"))
                        .map(String::as_str)
                        == message
            });
            cm_ok && observed.is_some() && observed == g.metadata.generation
        })
        .count()
}

/// Creates `n` Deployments of 3 replicas (`web-0`, `web-1`, …) in namespace demo.
async fn apply_deployments(client: &kube::Client, n: usize) -> anyhow::Result<Vec<String>> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("web-{i}");
        let deployment = json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        });
        deployments
            .create(&PostParams::default(), &serde_json::from_value(deployment)?)
            .await
            .context("cannot create a Deployment")?;
        names.push(name);
    }
    Ok(names)
}

/// How many of the named Deployments are Available with every replica up to date.
async fn available(client: &kube::Client, names: &[String]) -> usize {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let Ok(list) = deployments.list(&Default::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|d| names.iter().any(|n| Some(n) == d.metadata.name.as_ref()))
        .filter(|d| {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            d.status.as_ref().is_some_and(|s| {
                s.updated_replicas == Some(want)
                    && s.available_replicas == Some(want)
                    && s.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Available" && c.status == "True")
            })
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(
        role: Role,
        id: &str,
        name: Option<&str>,
        resource: Option<&str>,
    ) -> Vec<(String, String)> {
        child_otel_env(role, id, name, resource)
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn each_child_gets_its_own_instance_id_and_names_itself_when_the_user_named_nothing() {
        assert_eq!(
            env(Role::Coordinator, "coordinator-0", None, None),
            [pair(
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.instance.id=coordinator-0"
            )]
        );
        assert_eq!(
            env(Role::Worker, "builtins-worker-1", Some(""), Some("")),
            [pair(
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.instance.id=builtins-worker-1"
            )]
        );
    }

    #[test]
    fn a_service_name_the_user_set_gets_the_role_and_never_folds_children_together() {
        assert_eq!(
            env(Role::Coordinator, "coordinator-1", Some("demo"), None),
            [
                pair(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "service.instance.id=coordinator-1"
                ),
                pair("OTEL_SERVICE_NAME", "demo-coordinator"),
            ]
        );
        assert_eq!(
            env(Role::Worker, "worker-0", Some("demo"), None)[1],
            pair("OTEL_SERVICE_NAME", "demo-worker")
        );
        // Named in the resource attributes only: the same, and the user's instance id is replaced.
        assert_eq!(
            env(
                Role::Worker,
                "worker-2",
                None,
                Some("deployment.environment=dev, service.name=shop,service.instance.id=one")
            ),
            [
                pair(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=dev,service.instance.id=worker-2"
                ),
                pair("OTEL_SERVICE_NAME", "shop-worker"),
            ]
        );
        // OTEL_SERVICE_NAME ranks above the resource attributes, as in the specification.
        assert_eq!(
            env(Role::Worker, "w", Some("a"), Some("service.name=b"))[1],
            pair("OTEL_SERVICE_NAME", "a-worker")
        );
    }
}
