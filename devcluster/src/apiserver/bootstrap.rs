//! Objects every cluster has from the start: the system namespaces and the default `kubernetes`
//! ServiceCIDR.

use serde_json::json;

use super::objects::{self, Part, PatchKind, Target};
use super::query::Query;
use super::state::ApiState;
use super::status::ApiError;

/// Creates default, kube-system, kube-public and kube-node-lease unless they exist.
///
/// # Errors
/// etcd failures.
pub async fn system_namespaces(st: &ApiState) -> Result<(), ApiError> {
    let Some(info) = st.registry.lookup("", "v1", "namespaces") else {
        return Ok(());
    };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let t = Target::new(
            info.clone(),
            None,
            None,
            Query::default(),
            "kube-apiserver".into(),
        );
        let body = serde_json::to_vec(&json!({"metadata": {"name": name}})).unwrap_or_default();
        match objects::create(st, &t, &body).await {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The service range devcluster allocates clusterIPs from (see `services`).
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";

/// Creates the ServiceCIDR `kubernetes` over [`SERVICE_CLUSTER_IP_RANGE`] unless it exists, Ready as
/// kube-apiserver's `kubernetes-service-cidr-controller` leaves it: condition `Ready` `True` with
/// its message and no reason.
///
/// # Errors
/// etcd failures.
pub async fn default_service_cidr(st: &ApiState) -> Result<(), ApiError> {
    let Some(info) = st
        .registry
        .lookup("networking.k8s.io", "v1", "servicecidrs")
    else {
        return Ok(());
    };
    let target = |name: Option<String>, manager: &str| {
        Target::new(info.clone(), None, name, Query::default(), manager.into())
    };
    let body =
        json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": [SERVICE_CLUSTER_IP_RANGE]}});
    match objects::create(
        st,
        &target(None, "kube-apiserver"),
        &body.to_string().into_bytes(),
    )
    .await
    {
        Ok(_) => {}
        Err(e) if e.code == 409 => return Ok(()),
        Err(e) => return Err(e),
    }
    let now = super::meta::now();
    let status = json!({"status": {"conditions": [{
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": now,
        "reason": "",
        "message": "Kubernetes default Service CIDR is ready",
    }]}});
    objects::patch(
        st,
        &target(
            Some("kubernetes".into()),
            "kubernetes-service-cidr-controller",
        ),
        Part::Status,
        PatchKind::Merge,
        &status.to_string().into_bytes(),
    )
    .await
    .map(|_| ())
}
