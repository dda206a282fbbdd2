//! What a pod contributes to its Service's Endpoints (upstream `ShouldPodBeInEndpoints`,
//! `podToEndpointAddressForService`, `ShouldSetHostname`, `podutil.FindPort`): whether it is listed
//! at all, the address it is listed under, and the port a Service port resolves to on it.

use std::net::IpAddr;

use flotilla_sdk::k8s_openapi::api::core::v1::{
    Container, EndpointAddress, ObjectReference, Pod, Service, ServicePort,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Whether `pod` is listed at all: not terminal (Succeeded or Failed), has an IP, and is not being
/// deleted unless `include_terminating` (the Service's `publishNotReadyAddresses`).
pub(crate) fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    let has_ip = status.is_some_and(|s| {
        s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
            || s.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty())
    });
    if !has_ip {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// The address `pod` is listed under for `service`: the pod IP of the Service's first IP family
/// (from `spec.ipFamilies`, else its cluster IP, else for a headless Service the pod's IP), its node
/// and a reference to it, with the pod's hostname when [`should_set_hostname`]. `None` when the pod
/// has no IP of that family (a dual-stack upgrade), as upstream skips it.
pub(crate) fn address(service: &Service, pod: &Pod) -> Option<EndpointAddress> {
    let spec = service.spec.as_ref();
    let status = pod.status.as_ref()?;
    let want_v6 = match spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
    {
        Some(family) => family == "IPv6",
        None => {
            let cluster_ip = spec
                .and_then(|s| s.cluster_ip.as_deref())
                .unwrap_or_default();
            if !cluster_ip.is_empty() && cluster_ip != "None" {
                is_ipv6(cluster_ip)
            } else {
                is_ipv6(status.pod_ip.as_deref().unwrap_or_default())
            }
        }
    };
    // kube-apiserver keeps `podIPs[0]` equal to `podIP`; a pod with only `podIP` is read as that one.
    let mut ips: Vec<&str> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.as_str())
        .collect();
    if ips.is_empty() {
        ips.extend(status.pod_ip.as_deref());
    }
    let ip = ips.into_iter().find(|ip| is_ipv6(ip) == want_v6)?;
    let pod_spec = pod.spec.as_ref();
    Some(EndpointAddress {
        ip: ip.to_owned(),
        hostname: should_set_hostname(pod, service)
            .then(|| pod_spec.and_then(|s| s.hostname.clone()))
            .flatten(),
        node_name: Some(
            pod_spec
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        ),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
    })
}

/// Whether the address carries the pod's hostname: the pod has one and its subdomain names the
/// Service, in the Service's namespace (upstream does not look at whether the Service is headless).
pub(crate) fn should_set_hostname(pod: &Pod, service: &Service) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.hostname.as_deref().is_some_and(|h| !h.is_empty())
        && spec.subdomain.as_deref().unwrap_or_default()
            == service.metadata.name.as_deref().unwrap_or_default()
        && pod.metadata.namespace == service.metadata.namespace
}

/// The port `service_port` reaches on `pod`: a numeric `targetPort` as is (the port itself when
/// unset), a named one resolved from the pod's containers (then its restartable init containers,
/// the sidecars) by name and protocol. `None` when the name is not found: the pod is then not listed
/// for that port.
pub(crate) fn find_port(pod: &Pod, service_port: &ServicePort) -> Option<i32> {
    let name = match &service_port.target_port {
        None => return Some(service_port.port),
        Some(IntOrString::Int(n)) => return Some(*n),
        Some(IntOrString::String(name)) => name,
    };
    let protocol = service_port.protocol.as_deref().unwrap_or("TCP");
    let spec = pod.spec.as_ref()?;
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let found = |c: &Container| {
        c.ports.iter().flatten().find_map(|p| {
            (p.name.as_deref() == Some(name.as_str())
                && p.protocol.as_deref().unwrap_or("TCP") == protocol)
                .then_some(p.container_port)
        })
    };
    spec.containers.iter().chain(sidecars).find_map(found)
}

/// Go's `utilnet.IsIPv6String`: an IPv6 address that is not an IPv4-mapped one.
pub(crate) fn is_ipv6(ip: &str) -> bool {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    fn web(http: i32) -> Pod {
        pod(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "web", "ports": [
                {"name": "http", "containerPort": http, "protocol": "TCP"},
                {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
            "status": {"phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}]},
        }))
    }

    fn port(target: serde_json::Value, protocol: &str) -> ServicePort {
        serde_json::from_value(json!({"port": 80, "targetPort": target, "protocol": protocol}))
            .unwrap()
    }

    #[test]
    fn a_named_target_port_resolves_per_pod_by_name_and_protocol() {
        assert_eq!(
            find_port(&web(8080), &port(json!("http"), "TCP")),
            Some(8080)
        );
        assert_eq!(
            find_port(&web(8081), &port(json!("http"), "TCP")),
            Some(8081)
        );
        assert_eq!(find_port(&web(8080), &port(json!("http"), "UDP")), None);
        assert_eq!(find_port(&web(8080), &port(json!("dns"), "UDP")), Some(53));
        assert_eq!(find_port(&web(8080), &port(json!("nope"), "TCP")), None);
        assert_eq!(find_port(&web(8080), &port(json!(9090), "TCP")), Some(9090));
    }

    #[test]
    fn a_sidecars_named_port_counts_and_a_plain_init_containers_does_not() {
        let mut p = web(8080);
        let spec = p.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![
            serde_json::from_value(
                json!({"name": "init", "ports": [{"name": "side", "containerPort": 1}]}),
            )
            .unwrap(),
            serde_json::from_value(json!({"name": "proxy", "restartPolicy": "Always",
                "ports": [{"name": "side", "containerPort": 15001}]}))
            .unwrap(),
        ]);
        assert_eq!(find_port(&p, &port(json!("side"), "TCP")), Some(15001));
    }

    #[test]
    fn terminal_ip_less_and_deleted_pods_are_left_out_unless_published() {
        let running = web(8080);
        assert!(should_be_in_endpoints(&running, false));
        let mut deleting = web(8080);
        deleting.metadata.deletion_timestamp = Some(
            flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                flotilla_sdk::k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        );
        assert!(!should_be_in_endpoints(&deleting, false));
        assert!(should_be_in_endpoints(&deleting, true));
        let mut done = web(8080);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!should_be_in_endpoints(&done, true));
        let mut pending = web(8080);
        pending.status = None;
        assert!(!should_be_in_endpoints(&pending, true));
    }

    #[test]
    fn the_address_has_the_ip_of_the_services_family_and_the_hostname_of_its_subdomain() {
        let svc = service(json!({"metadata": {"name": "db", "namespace": "ns"},
            "spec": {"clusterIP": "None", "ipFamilies": ["IPv4"]}}));
        let mut p = web(8080);
        p.status.as_mut().unwrap().pod_ips = Some(vec![
            serde_json::from_value(json!({"ip": "fd00::5"})).unwrap(),
            serde_json::from_value(json!({"ip": "10.1.0.5"})).unwrap(),
        ]);
        let a = address(&svc, &p).unwrap();
        assert_eq!(a.ip, "10.1.0.5");
        assert_eq!(a.hostname, None);
        assert_eq!(a.node_name.as_deref(), Some("node-a"));
        assert_eq!(a.target_ref.unwrap().uid.as_deref(), Some("u1"));
        let spec = p.spec.as_mut().unwrap();
        spec.hostname = Some("db-0".into());
        spec.subdomain = Some("db".into());
        assert_eq!(address(&svc, &p).unwrap().hostname.as_deref(), Some("db-0"));
        let v6 = service(json!({"metadata": {"name": "db", "namespace": "ns"},
            "spec": {"ipFamilies": ["IPv6"]}}));
        assert_eq!(address(&v6, &p).unwrap().ip, "fd00::5");
        let only_v4 = web(8080);
        assert!(address(&v6, &only_v4).is_none());
        assert!(is_ipv6("fd00::1") && !is_ipv6("::ffff:10.0.0.1") && !is_ipv6("10.0.0.1"));
    }
}
