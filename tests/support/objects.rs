//! Objects the end-to-end tests create more than once.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;

/// A Deployment `name` of `replicas` pause pods labelled `app=<name>`, with the API's defaults for the
/// rest (RollingUpdate, 25 % surge and unavailability).
pub fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            },
        }
    }))
    .expect("a valid Deployment")
}
