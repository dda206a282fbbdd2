//! One sync of a Service's Endpoints (upstream `syncService`): from the cached Service and the
//! cached pods it selects, the subsets the Endpoints should hold; written only when they, the labels
//! or the over-capacity mark differ from the cached Endpoints (the trigger-time annotation alone never
//! causes a write). The fleet's read-your-writes replaces upstream's stale-Endpoints tracker: the key
//! is not dispatched again before the cache holds the last write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, DeleteParams, PostParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Reason, Request};

use super::capacity::{self, OVER_CAPACITY, TRUNCATED};
use super::pods::{address, find_port, should_be_in_endpoints};
use super::repack::repack_subsets;
use super::trigger_time::{self, TriggerTimeTracker};
use crate::events;
use crate::pod_ready::is_ready;

/// The annotation holding the trigger time (`v1.EndpointsLastChangeTriggerTime`).
pub(crate) const LAST_CHANGE_TRIGGER_TIME: &str =
    "endpoints.kubernetes.io/last-change-trigger-time";

/// The label on a headless Service's Endpoints (`v1.IsHeadlessService`).
const HEADLESS: &str = "service.kubernetes.io/headless";

/// The annotation of a leader-election record kept in an Endpoints (`resourcelock`'s), which is
/// never deleted for lack of a Service.
pub(crate) const LEADER_ELECTION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The resource of pods as a [`Reason`] names it.
const PODS: &str = "v1/pods";

/// The resource of Endpoints as a [`Reason`] names it.
const ENDPOINTS: &str = "v1/endpoints";

/// What every sync of the controller on one worker shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The trigger times of the Services this worker synced.
    tracker: TriggerTimeTracker,
    /// `--endpoint-updates-batch-period`.
    batch_period: Duration,
}

impl Shared {
    /// State for a controller with `--endpoint-updates-batch-period` `batch_period`.
    pub(crate) fn new(batch_period: Duration) -> Self {
        Self {
            tracker: TriggerTimeTracker::default(),
            batch_period,
        }
    }
}

/// Errors of one sync; the key is retried with the fleet's rate limiter, as upstream's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache could not be read.
    #[error("cannot read the cache for service {key}")]
    Cache {
        /// `namespace/name`.
        key: String,
        /// Why.
        source: CacheError,
    },
    /// Writing the Endpoints failed.
    #[error("cannot {verb} endpoints {key}")]
    Write {
        /// `create`, `update` or `delete`.
        verb: &'static str,
        /// `namespace/name`.
        key: String,
        /// Why.
        source: kube::Error,
    },
}

/// Syncs the Endpoints of one Service.
///
/// # Errors
/// [`Error`] when the cache cannot be read or a write fails.
pub async fn reconcile(
    request: Request<Service>,
    ctx: Context,
    shared: Arc<Shared>,
) -> Result<Action, Error> {
    let Some(namespace) = request.namespace() else {
        return Ok(Action::await_change());
    };
    let name = request.name();
    let key = request.key().to_owned();
    let caused_by = |resource: &str| matches!(request.reason(), Reason::ObjectChanged { kind, .. } if kind == resource);
    if !shared.batch_period.is_zero() && caused_by(PODS) {
        return Ok(Action::requeue(shared.batch_period));
    }
    let cache_err = |source| Error::Cache {
        key: key.clone(),
        source,
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client(), namespace);

    let Some(service) = request.object() else {
        shared.tracker.delete(namespace, name);
        // Upstream acts on the deletion of a Service (and of an Endpoints, which finds nothing to
        // delete); an Endpoints written while no Service exists is not its business then.
        if caused_by(ENDPOINTS) {
            return Ok(Action::await_change());
        }
        let cached: Option<Endpoints> = ctx
            .cache()
            .get(Some(namespace), name)
            .await
            .map_err(cache_err)?;
        let Some(cached) = cached else {
            return Ok(Action::await_change());
        };
        if has_annotation(&cached, LEADER_ELECTION) {
            return Ok(Action::await_change());
        }
        return match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(Action::await_change()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
            Err(source) => Err(Error::Write {
                verb: "delete",
                key,
                source,
            }),
        };
    };
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Action::await_change());
    }
    // An empty selector is no selector: kube-apiserver stores the two alike.
    let Some(selector) = spec.selector.as_ref().filter(|s| !s.is_empty()) else {
        return Ok(Action::await_change());
    };
    let selector: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let query = CacheQuery::all()
        .namespace(namespace)
        .labels(&selector.join(","));
    let pods: Vec<Pod> = ctx.cache().list(&query).await.map_err(cache_err)?;
    // Computed before the comparison, so the tracker moves on even when nothing is written.
    let trigger = shared.tracker.compute(namespace, service, &pods);
    let subsets = desired_subsets(service, &pods);

    let current: Option<Endpoints> = ctx
        .cache()
        .get(Some(namespace), name)
        .await
        .map_err(cache_err)?;
    let service_labels = service.metadata.labels.clone().unwrap_or_default();
    if let Some(current) = &current {
        let current_subsets = current.subsets.clone().unwrap_or_default();
        let mut labels = current.metadata.labels.clone().unwrap_or_default();
        labels.remove(HEADLESS);
        if subsets_equal(&current_subsets, &subsets)
            && labels == service_labels
            && capacity::annotation_set_correctly(
                current.metadata.annotations.as_ref(),
                &current_subsets,
            )
        {
            return Ok(Action::await_change());
        }
    }

    let endpoints = desired_endpoints(namespace, name, service, current.as_ref(), subsets, trigger);
    let result = match &current {
        None => api.create(&PostParams::default(), &endpoints).await,
        Some(_) => api.replace(name, &PostParams::default(), &endpoints).await,
    };
    match result {
        Ok(_) => Ok(Action::await_change()),
        Err(source) => {
            let create = current.is_none();
            if create && is_namespace_terminating(&source) {
                return Ok(Action::await_change());
            }
            let (reason, message) = if create {
                (
                    "FailedToCreateEndpoint",
                    format!("Failed to create endpoint for service {key}: {source}"),
                )
            } else {
                (
                    "FailedToUpdateEndpoint",
                    format!("Failed to update endpoint {key}: {source}"),
                )
            };
            events::publish(&ctx, &endpoints, EventType::Warning, reason, message);
            Err(Error::Write {
                verb: if create { "create" } else { "update" },
                key,
                source,
            })
        }
    }
}

/// The subsets the Service's Endpoints should hold, repacked: one (address, port) per listed pod and
/// Service port that resolves on it; a headless Service without ports lists addresses without ports.
pub(crate) fn desired_subsets(service: &Service, pods: &[Pod]) -> Vec<EndpointSubset> {
    let spec = service.spec.clone().unwrap_or_default();
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let ports = spec.ports.unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let mut raw = Vec::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(addr) = address(service, pod) else {
            continue;
        };
        let ready = publish || is_ready(pod);
        let subset = |port: Option<EndpointPort>| {
            let list = Some(vec![addr.clone()]);
            EndpointSubset {
                addresses: if ready { list.clone() } else { None },
                not_ready_addresses: if ready { None } else { list },
                ports: Some(port.into_iter().collect()),
            }
        };
        if ports.is_empty() {
            if headless {
                raw.push(subset(None));
            }
            continue;
        }
        for service_port in &ports {
            let Some(number) = find_port(pod, service_port) else {
                continue;
            };
            raw.push(subset(Some(EndpointPort {
                name: service_port.name.clone().filter(|n| !n.is_empty()),
                port: number,
                protocol: service_port.protocol.clone(),
                app_protocol: service_port.app_protocol.clone(),
            })));
        }
    }
    repack_subsets(&raw)
}

/// The Endpoints to write: the current one (or a new one named like the Service) with the subsets,
/// the Service's labels (plus the headless label when it has no cluster IP), the trigger time (or
/// none) and the over-capacity mark when the subsets had to be truncated.
fn desired_endpoints(
    namespace: &str,
    name: &str,
    service: &Service,
    current: Option<&Endpoints>,
    mut subsets: Vec<EndpointSubset>,
    trigger: Option<flotilla_sdk::k8s_openapi::jiff::Timestamp>,
) -> Endpoints {
    let mut endpoints = current.cloned().unwrap_or_else(|| Endpoints {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Endpoints::default()
    });
    endpoints.metadata.namespace = Some(namespace.to_owned());
    let mut annotations = endpoints.metadata.annotations.take().unwrap_or_default();
    match trigger {
        Some(time) => {
            annotations.insert(
                LAST_CHANGE_TRIGGER_TIME.to_owned(),
                trigger_time::format(time),
            );
        }
        None => {
            annotations.remove(LAST_CHANGE_TRIGGER_TIME);
        }
    }
    if capacity::truncate(&mut subsets) {
        annotations.insert(OVER_CAPACITY.to_owned(), TRUNCATED.to_owned());
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or_default();
    if cluster_ip.is_empty() || cluster_ip == "None" {
        labels.insert(HEADLESS.to_owned(), String::new());
    } else {
        labels.remove(HEADLESS);
    }
    endpoints.metadata.annotations = non_empty(annotations);
    endpoints.metadata.labels = non_empty(labels);
    endpoints.subsets = (!subsets.is_empty()).then_some(subsets);
    endpoints
}

fn non_empty(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

fn has_annotation(endpoints: &Endpoints, key: &str) -> bool {
    endpoints
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

/// Upstream's `endpointSubsetsEqualIgnoreResourceVersion` under semantic equality: in order, absent
/// and empty lists alike, empty hostnames and port names alike, target resourceVersions ignored.
pub(crate) fn subsets_equal(a: &[EndpointSubset], b: &[EndpointSubset]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| normal(x) == normal(y))
}

fn normal(subset: &EndpointSubset) -> EndpointSubset {
    let addresses = |list: &Option<Vec<EndpointAddress>>| {
        let list: Vec<EndpointAddress> = list
            .iter()
            .flatten()
            .map(|a| {
                let mut a = a.clone();
                a.hostname = a.hostname.filter(|h| !h.is_empty());
                if let Some(r) = a.target_ref.as_mut() {
                    r.resource_version = None;
                }
                a
            })
            .collect();
        (!list.is_empty()).then_some(list)
    };
    let ports: Vec<EndpointPort> = subset
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            ..p.clone()
        })
        .collect();
    EndpointSubset {
        addresses: addresses(&subset.addresses),
        not_ready_addresses: addresses(&subset.not_ready_addresses),
        ports: (!ports.is_empty()).then_some(ports),
    }
}

/// Whether the API refused a create because the namespace is being deleted.
fn is_namespace_terminating(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status)
        if status.code == 403 && status.message.contains("being terminated"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Fixture `file` of what kube-controller-manager v1.32 wrote; `None` where the fixtures are not
    /// checked out (the tests using them then pass vacuously).
    fn fixture(file: &str) -> Option<Value> {
        let path = format!(
            "{}/../../shared/kube-fixtures/kcm-v1.32/endpoints/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    fn body<T: serde::de::DeserializeOwned>(file: &str) -> T {
        serde_json::from_value(fixture(file).unwrap()["response"]["body"].clone()).unwrap()
    }

    /// The pods as fixture `file`'s kubelet patch left them: the created pod with the binding's node
    /// and the patched status.
    fn pod(created: &str, node: &str, status: &str) -> Pod {
        let mut pod: Pod = body(created);
        pod.spec.as_mut().unwrap().node_name = Some(node.into());
        let patch = fixture(status).unwrap()["response"]["body"]["status"].clone();
        pod.status = Some(serde_json::from_value(patch).unwrap());
        pod
    }

    #[test]
    fn the_subsets_are_fixture_08s_and_10s_and_17s() {
        if fixture("01-create-service.json").is_none() {
            return;
        }
        let service: Service = body("01-create-service.json");
        let web1 = pod(
            "03-create-pod-web-1.json",
            "node-a",
            "05b-kubelet-web-1-running-ready.json",
        );
        let web2 = pod(
            "03b-create-pod-web-2.json",
            "node-b",
            "06b-kubelet-web-2-running-ready.json",
        );
        let web3 = pod(
            "03c-create-pod-web-3.json",
            "node-a",
            "07b-kubelet-web-3-running-notready.json",
        );
        let want: Endpoints = body("08-endpoints-two-ready-one-not.json");
        let got = desired_subsets(&service, &[web3.clone(), web1.clone(), web2.clone()]);
        assert_eq!(Some(got), want.subsets);

        let web3 = pod(
            "03c-create-pod-web-3.json",
            "node-a",
            "09-kubelet-web-3-running-ready.json",
        );
        let want: Endpoints = body("10-endpoints-all-ready.json");
        let got = desired_subsets(&service, &[web1.clone(), web2.clone(), web3.clone()]);
        assert_eq!(Some(got), want.subsets);

        let alt = pod(
            "15-create-pod-web-alt.json",
            "node-b",
            "16b-kubelet-web-alt-running-ready.json",
        );
        let want: Endpoints = body("17-endpoints-named-port-differs.json");
        let got = desired_subsets(&service, &[alt, web2, web3]);
        assert!(subsets_equal(&got, want.subsets.as_deref().unwrap()));
        assert_eq!(Some(got), want.subsets);
    }

    #[test]
    fn a_terminating_pod_is_dropped_unless_not_ready_addresses_are_published() {
        if fixture("01-create-service.json").is_none() {
            return;
        }
        let mut service: Service = body("01-create-service.json");
        let mut web1 = pod(
            "03-create-pod-web-1.json",
            "node-a",
            "05b-kubelet-web-1-running-ready.json",
        );
        web1.metadata.deletion_timestamp = web1.metadata.creation_timestamp.clone();
        assert!(desired_subsets(&service, &[web1.clone()]).is_empty());
        service.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let got = desired_subsets(&service, &[web1]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].addresses.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_headless_service_gets_the_label_and_a_new_endpoints_no_subsets_when_no_pod_is_up() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns", "labels": {"team": "a"}},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}},
        }))
        .unwrap();
        let e = desired_endpoints("ns", "db", &service, None, Vec::new(), None);
        assert_eq!(e.subsets, None);
        assert_eq!(
            e.metadata.labels,
            Some(BTreeMap::from([
                ("service.kubernetes.io/headless".to_owned(), String::new()),
                ("team".to_owned(), "a".to_owned()),
            ]))
        );
        assert_eq!(e.metadata.annotations, None);
        assert_eq!(e.metadata.name.as_deref(), Some("db"));
    }

    #[test]
    fn over_a_thousand_addresses_the_endpoints_is_truncated_and_marked() {
        if fixture("01-create-service.json").is_none() {
            return;
        }
        let service: Service = body("01-create-service.json");
        let pods: Vec<Pod> = (0..1001)
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "endpoints", "uid": format!("u{i}")},
                    "spec": {"nodeName": "n", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 80}]}]},
                    "status": {"phase": "Running", "podIP": format!("10.2.{}.{}", i / 250, i % 250),
                        "conditions": [{"type": "Ready", "status": "True"}]},
                }))
                .unwrap()
            })
            .collect();
        let subsets = desired_subsets(&service, &pods);
        assert!(!capacity::annotation_set_correctly(None, &subsets));
        let e = desired_endpoints("endpoints", "web", &service, None, subsets, None);
        let total: usize = e
            .subsets
            .iter()
            .flatten()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!(total, capacity::MAX_CAPACITY);
        assert_eq!(
            e.metadata
                .annotations
                .unwrap()
                .get(OVER_CAPACITY)
                .map(String::as_str),
            Some(TRUNCATED)
        );
    }

    #[test]
    fn equality_ignores_target_resource_versions_and_empty_lists() {
        if fixture("01-create-service.json").is_none() {
            return;
        }
        let want: Endpoints = body("10-endpoints-all-ready.json");
        let mut other = want.subsets.clone().unwrap();
        other[0].addresses.as_mut().unwrap()[0]
            .target_ref
            .as_mut()
            .unwrap()
            .resource_version = Some("42".into());
        other[0].not_ready_addresses = Some(Vec::new());
        assert!(subsets_equal(want.subsets.as_deref().unwrap(), &other));
        other[0].addresses.as_mut().unwrap().pop();
        assert!(!subsets_equal(want.subsets.as_deref().unwrap(), &other));
    }
}
