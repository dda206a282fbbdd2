//! The metadata the controller gives its slices (upstream `newEndpointSlice`,
//! `setEndpointSliceLabels`, `ownedBy`, `getEndpointSlicePrefix`): the Service's labels plus the
//! reserved `kubernetes.io/service-name`, `endpointslice.kubernetes.io/managed-by` and, for a
//! headless Service, `service.kubernetes.io/headless`; a controller reference to the Service; a name
//! generated from the Service's.

use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::core::v1::Service;
use flotilla_sdk::k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::endpoint::AddressType;
use crate::controller_ref::controller_ref;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming a slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`], kube-controller-manager's.
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The label marking the slices of a headless Service (empty value).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

fn reserved(key: &str) -> bool {
    key == SERVICE_NAME_LABEL || key == MANAGED_BY_LABEL || key == HEADLESS_LABEL
}

/// Whether the Service has a cluster IP (not headless, not unset).
fn has_cluster_ip(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// The labels a slice of `service` must carry, and whether `current` (the slice's labels now) differs
/// from them in the Service's own labels. Changes of the reserved labels alone do not count, as
/// upstream: they are rewritten whenever the slice is.
pub fn labels(
    current: Option<&BTreeMap<String, String>>,
    service: &Service,
) -> (BTreeMap<String, String>, bool) {
    let own = |labels: Option<&BTreeMap<String, String>>| -> BTreeMap<String, String> {
        labels
            .into_iter()
            .flatten()
            .filter(|(k, _)| !reserved(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let mut wanted = own(service.metadata.labels.as_ref());
    let changed = own(current) != wanted;
    if !has_cluster_ip(service) {
        wanted.insert(HEADLESS_LABEL.to_owned(), String::new());
    }
    wanted.insert(
        SERVICE_NAME_LABEL.to_owned(),
        service.metadata.name.clone().unwrap_or_default(),
    );
    wanted.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    (wanted, changed)
}

/// The `generateName` of a slice: `<service>-`, or the bare name when the dash would make it too
/// long for a name.
fn generate_name(service_name: &str) -> String {
    if service_name.len() < 253 {
        format!("{service_name}-")
    } else {
        service_name.to_owned()
    }
}

/// A new, empty slice of `service` for `ports` and `family` (not yet named: the API server generates
/// the name).
pub fn new_slice(service: &Service, ports: &[EndpointPort], family: AddressType) -> EndpointSlice {
    let name = service.metadata.name.clone().unwrap_or_default();
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(generate_name(&name)),
            namespace: service.metadata.namespace.clone(),
            labels: Some(labels(None, service).0),
            owner_references: controller_ref(service).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        address_type: family.as_str().to_owned(),
        endpoints: Vec::new(),
        ports: Some(ports.to_vec()),
    }
}

/// Whether `slice` has an ownerReference to `service` (its uid, kind Service, apiVersion v1).
pub fn owned_by(slice: &EndpointSlice, service: &Service) -> bool {
    let Some(uid) = service.metadata.uid.as_deref() else {
        return false;
    };
    slice
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == uid && r.kind == "Service" && r.api_version == "v1")
}

/// Whether `slice` is, in all that matters, the empty placeholder `placeholder` (upstream's
/// `placeholderSliceCompare`: namespace, labels, ownerReferences, addressType, no endpoints, no
/// ports), so it is kept rather than deleted and created again.
pub fn same_placeholder(slice: &EndpointSlice, placeholder: &EndpointSlice) -> bool {
    let refs = |s: &EndpointSlice| s.metadata.owner_references.clone().unwrap_or_default();
    let labels = |s: &EndpointSlice| s.metadata.labels.clone().unwrap_or_default();
    slice.metadata.namespace == placeholder.metadata.namespace
        && labels(slice) == labels(placeholder)
        && refs(slice) == refs(placeholder)
        && slice.address_type == placeholder.address_type
        && slice.endpoints.is_empty()
        && placeholder.endpoints.is_empty()
        && slice.ports.as_ref().is_none_or(Vec::is_empty)
        && placeholder.ports.as_ref().is_none_or(Vec::is_empty)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn slices_carry_the_service_labels_and_the_reserved_ones_which_alone_do_not_count_as_a_change()
    {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u",
                         "labels": {"team": "a", SERVICE_NAME_LABEL: "spoof"}},
            "spec": {"clusterIP": "None"}}))
        .unwrap();
        let (wanted, changed) = labels(None, &svc);
        assert!(changed);
        assert_eq!(wanted["team"], "a");
        assert_eq!(wanted[SERVICE_NAME_LABEL], "web");
        assert_eq!(wanted[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(wanted[HEADLESS_LABEL], "");
        let mut current = wanted.clone();
        current.remove(HEADLESS_LABEL);
        assert!(!labels(Some(&current), &svc).1);
        let slice = new_slice(&svc, &[], AddressType::V4);
        assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
        assert!(owned_by(&slice, &svc));
        let mut other = slice.clone();
        other.metadata.owner_references.as_mut().unwrap()[0].uid = "old".into();
        assert!(!owned_by(&other, &svc));
        assert!(same_placeholder(
            &slice,
            &new_slice(&svc, &[], AddressType::V4)
        ));
        assert!(!same_placeholder(
            &slice,
            &new_slice(&svc, &[], AddressType::V6)
        ));
    }
}
