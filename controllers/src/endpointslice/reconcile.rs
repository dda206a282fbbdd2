//! One sync of a Service's EndpointSlices (upstream `syncService`, `Reconcile` and `finalize`): read
//! its pods, its slices and their Nodes from the cache, plan the fewest writes per address family,
//! set hints and the trigger-time annotation on what is written, then create, update and delete.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use flotilla_sdk::k8s_openapi::api::core::v1::{Node, Pod, Service};
use flotilla_sdk::k8s_openapi::api::discovery::v1::EndpointSlice;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use flotilla_sdk::{Action, CacheError, CacheQuery, Context, EventType, Request};
use serde_json::Value;

use super::endpoint::{AddressType, PortKey, address_types, endpoint, ports, should_be_in_slices};
use super::hints;
use super::plan::{Desired, Plan, plan};
use super::slice_meta::{MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use super::trigger_time::{ANNOTATION, Tracker, format};
use crate::events::publish;

/// What the reconciles of one controller on one worker share.
#[derive(Debug)]
pub struct Shared {
    /// `--max-endpoints-per-slice`.
    pub max_endpoints_per_slice: usize,
    /// What the last sync of each Service saw (for the trigger-time annotation).
    pub tracker: Tracker,
}

/// Errors of one sync; the key is retried with the fleet's rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Service lacks a namespace.
    #[error("service {0} has no namespace")]
    Incomplete(String),
    /// The cache could not be read.
    #[error("cannot read the cache")]
    Cache(#[from] CacheError),
    /// A slice could not be encoded for the API.
    #[error("cannot encode an endpointslice")]
    Encode(#[from] serde_json::Error),
    /// The API refused a write.
    #[error("failed to {action} EndpointSlice {name}")]
    Write {
        /// `create`, `update` or `delete`.
        action: &'static str,
        /// The slice's name (the generated prefix for a create).
        name: String,
        /// Why.
        source: kube::Error,
    },
    /// Pods were left out because their Node is not known; the slices were written without them and
    /// the Service is retried (upstream's behaviour, so a pod on a vanished Node cannot wedge it).
    #[error("skipping pods whose Node is not found: {0}")]
    NodesNotFound(String),
}

/// Syncs the slices of the Service of `request`.
///
/// # Errors
/// [`Error`]; the Service gets a `FailedToUpdateEndpointSlices` Warning Event as upstream's does.
pub async fn reconcile(
    request: Request<Service>,
    ctx: Context,
    shared: Arc<Shared>,
) -> Result<Action, Error> {
    let key = request.key().to_owned();
    let Some(service) = request.object().cloned() else {
        shared.tracker.forget(&key);
        return Ok(Action::await_change());
    };
    let spec = service.spec.clone().unwrap_or_default();
    // ExternalName Services get no endpoints; selectorless ones get theirs out of band (the
    // mirroring controller copies a hand-written Endpoints).
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Action::await_change());
    }
    let Some(selector) = spec.selector.as_ref() else {
        return Ok(Action::await_change());
    };
    let namespace = request
        .namespace()
        .ok_or_else(|| Error::Incomplete(key.clone()))?
        .to_owned();
    match sync(&service, selector, &namespace, &key, &ctx, &shared).await {
        Ok(()) => Ok(Action::await_change()),
        Err(err) => {
            let message = format!(
                "Error updating Endpoint Slices for Service {key}: {}",
                chain(&err)
            );
            publish(
                &ctx,
                service.as_ref(),
                EventType::Warning,
                "FailedToUpdateEndpointSlices",
                message,
            );
            Err(err)
        }
    }
}

/// `err` with its sources, for the Event's message.
fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

async fn sync(
    service: &Service,
    selector: &BTreeMap<String, String>,
    namespace: &str,
    key: &str,
    ctx: &Context,
    shared: &Shared,
) -> Result<(), Error> {
    let cache = ctx.cache();
    let mut query = CacheQuery::all().namespace(namespace);
    if !selector.is_empty() {
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        query = query.labels(&labels.join(","));
    }
    let pods: Vec<Pod> = cache.list(&query).await?;
    let name = service.metadata.name.clone().unwrap_or_default();
    let managed = format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}");
    let slices: Vec<EndpointSlice> = cache
        .list::<EndpointSlice>(&CacheQuery::all().namespace(namespace).labels(&managed))
        .await?
        .into_iter()
        // A slice being deleted is not counted on, or the sync could wait on it forever.
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let trigger = shared.tracker.observe(key, service, &pods);

    let mut nodes: HashMap<String, Option<Node>> = HashMap::new();
    for pod in pods.iter().filter(|p| should_be_in_slices(p)) {
        let node = node_name(pod).to_owned();
        if let Entry::Vacant(slot) = nodes.entry(node) {
            let found = if slot.key().is_empty() {
                None
            } else {
                cache.get::<Node>(None, slot.key()).await?
            };
            slot.insert(found);
        }
    }
    let mode = hints::mode(service);
    let zones = if mode == hints::Mode::Auto {
        hints::cpu_by_zone(&cache.list::<Node>(&CacheQuery::all()).await?)
    } else {
        None
    };
    let publish_not_ready = service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);

    let families = address_types(service);
    let mut missing = BTreeSet::new();
    let mut plans = Vec::new();
    for family in &families {
        let existing: Vec<EndpointSlice> = slices
            .iter()
            .filter(|s| AddressType::parse(&s.address_type) == Some(*family))
            .cloned()
            .collect();
        let mut desired: BTreeMap<PortKey, Desired> = BTreeMap::new();
        for pod in pods.iter().filter(|p| should_be_in_slices(p)) {
            let pod_ports = ports(service, pod);
            let group = desired.entry(PortKey::of(&pod_ports)).or_default();
            group.ports = pod_ports;
            let node = nodes.get(node_name(pod)).and_then(Option::as_ref);
            if node.is_none() && !publish_not_ready {
                missing.insert(format!(
                    "{}/{} (Node {:?})",
                    namespace,
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    node_name(pod)
                ));
                continue;
            }
            let endpoint = endpoint(pod, node, service, *family);
            if !endpoint.addresses.is_empty() {
                group
                    .endpoints
                    .insert(super::endpoint::EndpointKey::of(&endpoint), endpoint);
            }
        }
        let mut plan = plan(
            service,
            *family,
            &existing,
            desired,
            shared.max_endpoints_per_slice,
        );
        let written: BTreeSet<Option<String>> = plan
            .update
            .iter()
            .chain(&plan.delete)
            .map(|s| s.metadata.name.clone())
            .collect();
        let unchanged: Vec<EndpointSlice> = existing
            .into_iter()
            .filter(|s| !written.contains(&s.metadata.name))
            .collect();
        if hints::apply(mode, &mut plan, &unchanged, zones.as_ref()) {
            tracing::debug!(service = %key, family = family.as_str(), "topology hints refused");
        }
        tracing::debug!(service = %key, family = family.as_str(), writes = plan.writes(), "endpointslice plan");
        plans.push(plan);
    }
    // Slices of a family the Service no longer has.
    let dropped: Vec<EndpointSlice> = slices
        .iter()
        .filter(|s| !AddressType::parse(&s.address_type).is_some_and(|f| families.contains(&f)))
        .cloned()
        .collect();

    let api = Api::<DynamicObject>::namespaced_with(
        ctx.client(),
        namespace,
        &ApiResource::erase::<EndpointSlice>(&()),
    );
    for plan in plans {
        write(&api, service, plan, trigger).await?;
    }
    for slice in dropped {
        delete(&api, &slice).await?;
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::NodesNotFound(
            missing.into_iter().collect::<Vec<_>>().join(", "),
        ))
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

/// Makes `plan`'s writes (upstream `finalize`): no creates while the Service is being deleted (the
/// garbage collector is removing its slices); the trigger time on every slice written.
async fn write(
    api: &Api<DynamicObject>,
    service: &Service,
    plan: Plan,
    trigger: Option<flotilla_sdk::k8s_openapi::jiff::Timestamp>,
) -> Result<(), Error> {
    if service.metadata.deletion_timestamp.is_none() {
        for mut slice in plan.create {
            annotate(&mut slice, trigger);
            let body = encode(&slice)?;
            match api.create(&PostParams::default(), &body).await {
                Ok(_) => {}
                // The namespace is going away: creates keep failing, so the item is dropped.
                Err(kube::Error::Api(status))
                    if status.code == 403 && status.message.contains("being terminated") =>
                {
                    return Ok(());
                }
                Err(source) => {
                    return Err(Error::Write {
                        action: "create",
                        name: slice.metadata.generate_name.unwrap_or_default(),
                        source,
                    });
                }
            }
        }
    }
    for mut slice in plan.update {
        annotate(&mut slice, trigger);
        let name = slice.metadata.name.clone().unwrap_or_default();
        let body = encode(&slice)?;
        if let Err(source) = api.replace(&name, &PostParams::default(), &body).await {
            return Err(Error::Write {
                action: "update",
                name,
                source,
            });
        }
    }
    for slice in plan.delete {
        delete(api, &slice).await?;
    }
    Ok(())
}

/// Deletes `slice`; one already gone is fine.
async fn delete(api: &Api<DynamicObject>, slice: &EndpointSlice) -> Result<(), Error> {
    let name = slice.metadata.name.clone().unwrap_or_default();
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Write {
            action: "delete",
            name,
            source,
        }),
    }
}

fn annotate(
    slice: &mut EndpointSlice,
    trigger: Option<flotilla_sdk::k8s_openapi::jiff::Timestamp>,
) {
    let annotations = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match trigger {
        Some(at) => {
            annotations.insert(ANNOTATION.to_owned(), format(at));
        }
        None => {
            annotations.remove(ANNOTATION);
        }
    }
}

/// The slice as the API's JSON, empty `endpoints` and `ports` left out: kube-apiserver stores those
/// as absent (they read back `null`), and so the slice reads back the same from any server.
fn encode(slice: &EndpointSlice) -> Result<DynamicObject, serde_json::Error> {
    let mut value = serde_json::to_value(slice)?;
    if let Value::Object(map) = &mut value {
        for field in ["endpoints", "ports"] {
            if map
                .get(field)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                map.remove(field);
            }
        }
        if map
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object)
            .is_some_and(serde_json::Map::is_empty)
            && let Some(Value::Object(meta)) = map.get_mut("metadata")
        {
            meta.remove("annotations");
        }
    }
    serde_json::from_value(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_placeholder_is_sent_without_endpoints_or_ports() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"generateName": "web-", "annotations": {}}, "addressType": "IPv4",
            "endpoints": [], "ports": []}))
        .unwrap();
        let body = serde_json::to_value(encode(&slice).unwrap()).unwrap();
        assert!(body.get("endpoints").is_none() && body.get("ports").is_none());
        assert!(body["metadata"].get("annotations").is_none());
        assert_eq!(body["addressType"], "IPv4");
        assert_eq!(body["kind"], "EndpointSlice");
    }
}
