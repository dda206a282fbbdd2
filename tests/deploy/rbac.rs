//! `flotilla rbac` as a user runs it: both roles in YAML, one role in JSON, a bad selection refused.

use flotilla_sdk::k8s_openapi::api::rbac::v1::PolicyRule;

use super::binaries::{describe, flotilla};

#[tokio::test]
async fn rbac_prints_both_roles_rules_in_yaml_and_one_roles_in_json() {
    let both = flotilla(&["rbac", "--controllers", "replicaset,serviceaccount"]).await;
    assert!(both.status.success(), "{}", describe(&both));
    #[derive(serde::Deserialize)]
    struct Both {
        coordinator: Vec<PolicyRule>,
        worker: Vec<PolicyRule>,
    }
    let parsed: Both = serde_saphyr::from_str(&String::from_utf8_lossy(&both.stdout)).unwrap();
    let resources = |rules: &[PolicyRule]| -> Vec<String> {
        rules
            .iter()
            .flat_map(|r| r.resources.clone().unwrap_or_default())
            .collect()
    };
    assert_eq!(
        resources(&parsed.coordinator),
        ["namespaces", "pods", "serviceaccounts", "replicasets"]
    );
    assert!(resources(&parsed.worker).contains(&"replicasets/status".to_owned()));

    let json = flotilla(&[
        "rbac",
        "--controllers=replicaset,serviceaccount",
        "--role",
        "worker",
        "-o",
        "json",
    ])
    .await;
    assert!(json.status.success(), "{}", describe(&json));
    let worker: Vec<PolicyRule> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(worker, parsed.worker);

    let refused = flotilla(&["rbac", "--controllers", "bogus"]).await;
    assert!(!refused.status.success(), "{}", describe(&refused));
}
