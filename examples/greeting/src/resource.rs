//! The `Greeting` custom resource (`crd.yaml` is its manifest).

use flotilla_sdk::kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a Greeting asks for.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.flotilla.dev",
    version = "v1",
    kind = "Greeting",
    namespaced,
    status = "GreetingStatus",
    shortname = "gr",
    printcolumn(name = "Message", type_ = "string", json_path = ".spec.message"),
    // The kube crates as the SDK re-exports them: the controller pins no kube version of its own.
    crates(
        kube_core = "::flotilla_sdk::kube::core",
        k8s_openapi = "::flotilla_sdk::k8s_openapi"
    )
)]
pub struct GreetingSpec {
    /// The message the Greeting's ConfigMap carries.
    pub message: String,
}

/// What the controller reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// The `metadata.generation` the ConfigMap was last brought in line with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::kube::CustomResourceExt;

    use super::*;

    #[test]
    fn the_derived_crd_names_what_crd_yaml_and_the_recorded_fixture_name() {
        let crd = Greeting::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("greetings.example.flotilla.dev")
        );
        assert_eq!(crd.spec.group, "example.flotilla.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, "greetings");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["gr".to_owned()][..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let manifest = include_str!("../crd.yaml");
        for needle in [
            "name: greetings.example.flotilla.dev",
            "plural: greetings",
            "kind: Greeting",
            "scope: Namespaced",
            "observedGeneration:",
            "status: {}",
        ] {
            assert!(manifest.contains(needle), "crd.yaml lacks {needle:?}");
        }
    }
}
