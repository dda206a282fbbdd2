//! The demo's sample workloads beyond Deployments, one per workload controller of the `builtins`
//! fleet: a Job of three completions, a CronJob that starts a Job every minute, a DaemonSet on every
//! simulated node, a StatefulSet of three replicas with a claim each (and its headless Service), and
//! a Service `web` in front of a Deployment of three replicas.
//! [`Workloads::progress`] reads how far each has come; the demo waits until every one is finished:
//! the Job Complete, the CronJob's first Job succeeded, the DaemonSet and the StatefulSet ready and up
//! to date, and the Service's Endpoints and EndpointSlices listing every one of its pods as ready.
//!
//! The CronJob runs on the wall clock, as kube-controller-manager's does, so the demo waits up to a
//! minute for its first Job.

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The namespace the samples go to.
const NAMESPACE: &str = "demo";

/// Replicas of the Deployment behind the sample Service.
const WEB_REPLICAS: usize = 3;

/// A pod template that the node simulator runs to success about a second after it starts.
fn finishing_pod() -> Value {
    json!({"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "work", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 1"]}],
    }})
}

/// The samples, by kind. Each is created once by [`Workloads::apply`].
pub struct Workloads {
    client: kube::Client,
    /// Simulated nodes: the DaemonSet's desired pod count.
    nodes: usize,
}

/// How far the samples have come: each field is true once that sample is finished.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadProgress {
    /// The Job has the Complete condition.
    pub job: bool,
    /// The CronJob has a `lastSuccessfulTime`: a Job it started has completed.
    pub cronjob: bool,
    /// The DaemonSet has a ready, up-to-date pod on every node.
    pub daemonset: bool,
    /// The StatefulSet's replicas are ready and at its update revision.
    pub statefulset: bool,
    /// The Service `web` has every pod of its Deployment as a ready address in its Endpoints and
    /// as a ready endpoint in its EndpointSlices.
    pub service: bool,
}

impl WorkloadProgress {
    /// Every sample is finished.
    pub fn all(&self) -> bool {
        self.job && self.cronjob && self.daemonset && self.statefulset && self.service
    }

    /// One line for the demo's progress: each sample and whether it is finished.
    pub fn line(&self) -> String {
        let mark = |done: bool| if done { "done" } else { "running" };
        format!(
            "Job {}, CronJob {}, DaemonSet {}, StatefulSet {}, Service {}",
            mark(self.job),
            if self.cronjob {
                "ran a Job"
            } else {
                "waiting for its minute"
            },
            mark(self.daemonset),
            mark(self.statefulset),
            if self.service {
                "has endpoints"
            } else {
                "waiting for endpoints"
            },
        )
    }
}

impl Workloads {
    /// The samples of a devcluster of `nodes` simulated nodes.
    pub fn new(client: kube::Client, nodes: usize) -> Self {
        Self { client, nodes }
    }

    /// Creates the samples (the StatefulSet's headless Service and the Service's Deployment too) in
    /// namespace demo, which must exist.
    ///
    /// # Errors
    /// When the API refuses one.
    pub async fn apply(&self) -> anyhow::Result<()> {
        self.create::<Job>(json!({
            "metadata": {"name": "batch"},
            "spec": {"completions": 3, "parallelism": 3, "template": finishing_pod()},
        }))
        .await?;
        self.create::<CronJob>(json!({
            "metadata": {"name": "every-minute"},
            "spec": {
                "schedule": "* * * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"template": finishing_pod()}},
            },
        }))
        .await?;
        self.create::<DaemonSet>(json!({
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "agent", "image": "busybox:1.36"}]},
                },
            },
        }))
        .await?;
        self.create::<Service>(json!({
            "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]},
        }))
        .await?;
        self.create::<StatefulSet>(json!({
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 3,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{
                        "name": "db", "image": "postgres:17",
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql"}],
                    }]},
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }],
            },
        }))
        .await?;
        self.create::<Deployment>(json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": WEB_REPLICAS,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web", "image": "nginx:1.27",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }]},
                },
            },
        }))
        .await?;
        self.create::<Service>(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        }))
        .await?;
        Ok(())
    }

    /// The Service `web` lists every pod of its Deployment as ready, in its Endpoints (the
    /// `endpoint` controller's) and in its EndpointSlices (the `endpointslice` controller's).
    async fn service_ready(&self) -> bool {
        let endpoints = self.get::<Endpoints>("web").await.is_some_and(|e| {
            let subsets = e.subsets.unwrap_or_default();
            let ready: usize = subsets
                .iter()
                .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
                .sum();
            ready == WEB_REPLICAS
        });
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), NAMESPACE);
        let selector = ListParams::default().labels("kubernetes.io/service-name=web");
        let sliced = slices.list(&selector).await.is_ok_and(|list| {
            let ready = list
                .items
                .iter()
                .flat_map(|s| &s.endpoints)
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            ready == WEB_REPLICAS
        });
        endpoints && sliced
    }

    async fn create<K>(&self, object: Value) -> anyhow::Result<()>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        let api: Api<K> = Api::namespaced(self.client.clone(), NAMESPACE);
        let object: K = serde_json::from_value(object)
            .with_context(|| format!("the sample {kind} does not parse"))?;
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("cannot create the sample {kind}"))?;
        Ok(())
    }

    /// How far the samples have come; a sample that cannot be read counts as not finished.
    pub async fn progress(&self) -> WorkloadProgress {
        let job = self
            .get::<Job>("batch")
            .await
            .and_then(|j| j.status)
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        let cronjob = self
            .get::<CronJob>("every-minute")
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| s.last_successful_time.is_some());
        let nodes = i32::try_from(self.nodes).unwrap_or(i32::MAX);
        let daemonset = self
            .get::<DaemonSet>("agent")
            .await
            .and_then(|d| d.status)
            .is_some_and(|s| {
                s.desired_number_scheduled == nodes
                    && s.number_ready == nodes
                    && s.updated_number_scheduled == Some(nodes)
            });
        let statefulset = self.get::<StatefulSet>("db").await.is_some_and(|set| {
            let want = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            set.status.is_some_and(|s| {
                s.ready_replicas == Some(want)
                    && s.updated_replicas == Some(want)
                    && s.current_revision.is_some()
                    && s.current_revision == s.update_revision
            })
        });
        WorkloadProgress {
            job,
            cronjob,
            daemonset,
            statefulset,
            service: self.service_ready().await,
        }
    }

    async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), NAMESPACE);
        api.get_opt(name).await.ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_each_sample_and_all_needs_every_one() {
        let mut progress = WorkloadProgress {
            job: true,
            cronjob: false,
            daemonset: true,
            statefulset: true,
            service: true,
        };
        assert!(!progress.all());
        assert_eq!(
            progress.line(),
            "Job done, CronJob waiting for its minute, DaemonSet done, StatefulSet done, Service has endpoints"
        );
        progress.cronjob = true;
        assert!(progress.all());
        progress.service = false;
        assert!(!progress.all());
        assert!(progress.line().contains("Service waiting for endpoints"));
        progress.service = true;
        assert!(progress.line().contains("CronJob ran a Job"));
    }
}
