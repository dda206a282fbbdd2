//! Objects every cluster has from the start: the system namespaces.

use serde_json::json;

use super::objects::{self, Target};
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
