//! Authentication and RBAC: a ServiceAccount bound to a Role may do what the Role allows (verbs,
//! resources, resourceNames) and gets upstream's 403 Status otherwise; the TokenRequest API issues a
//! token that authenticates as the ServiceAccount; an unknown token gets upstream's 401. Run against
//! devcluster with `--authorization-mode RBAC`, or any cluster (which authorizes with RBAC itself).
//!
//! The 403 body is upstream's `responsewriters.Forbidden` (`apierrors.NewForbidden`): the recordings
//! in `kube-fixtures/` hold only an admission 403 (`errors/create-in-terminating-namespace-403.json`),
//! whose Status shape (`details` with `name`, `group` only when not core, `kind` the plural) this
//! matches; the message is RBAC's `User "…" cannot <verb> resource "…" in API group "…" in the
//! namespace "…"`.

use serde_json::{Value, json};

use crate::api::common::{SOON, configmap, configmaps, create};
use crate::support::cluster::TestCluster;
use crate::support::namespace::unique_namespace;
use crate::support::raw;
use crate::support::tokens::{client_with_token, service_account_token};
use crate::support::wait::wait_for;

/// A cluster with RBAC, its admin client, a fresh namespace, and a client presenting the token of
/// ServiceAccount `bot` there, bound by RoleBinding `bot` to Role `configmap-reader`: get and list
/// of ConfigMaps, and update of the ConfigMap `mine` only.
async fn setup_bot() -> (TestCluster, kube::Client, String, kube::Client) {
    let cluster = TestCluster::builder().with_rbac().start().await;
    let admin = cluster.client();
    let ns = unique_namespace(&admin, "rbac").await;
    create(
        &admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "bot"}}),
    )
    .await;
    create(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        &json!({
            "metadata": {"name": "configmap-reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"],
                 "verbs": ["update"]},
            ],
        }),
    )
    .await;
    create(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        &json!({
            "metadata": {"name": "bot"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "configmap-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": ns}],
        }),
    )
    .await;
    let token = service_account_token(&admin, &ns, "bot").await;
    let bot = client_with_token(cluster.kubeconfig_path(), &token).await;
    // A real API server's RBAC authorizer learns of the binding through an informer: wait for it.
    wait_for(SOON, "the RoleBinding to take effect", || async {
        (raw::get(&bot, &configmaps(&ns)).await.status == 200).then_some(())
    })
    .await;
    (cluster, admin, ns, bot)
}

/// Upstream's 403 Status for a denial, as `responsewriters.Forbidden` writes it.
fn forbidden(message: &str, details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Forbidden", "details": details, "code": 403})
}

#[tokio::test]
async fn a_service_account_may_do_what_its_role_allows() {
    let (_cluster, admin, ns, bot) = setup_bot().await;
    create(
        &admin,
        &configmaps(&ns),
        &configmap("mine", json!({"k": "v"})),
    )
    .await;
    let listed = raw::get(&bot, &configmaps(&ns)).await.expect_ok(200);
    assert!(
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["metadata"]["name"] == "mine")
    );
    let mut mine = raw::get(&bot, &format!("{}/mine", configmaps(&ns)))
        .await
        .expect_ok(200);
    mine["data"]["k"] = json!("w");
    let updated = raw::put(&bot, &format!("{}/mine", configmaps(&ns)), &mine)
        .await
        .expect_ok(200);
    assert_eq!(updated["data"]["k"], "w");
}

#[tokio::test]
async fn a_service_account_gets_upstreams_403_for_what_its_role_does_not_allow() {
    let (_cluster, admin, ns, bot) = setup_bot().await;
    create(&admin, &configmaps(&ns), &configmap("theirs", json!({}))).await;
    let user = format!("system:serviceaccount:{ns}:bot");

    let reply = raw::post(&bot, &configmaps(&ns), &configmap("new", json!({}))).await;
    reply.expect_status(403, "Forbidden");
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "configmaps is forbidden: User \"{user}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
            ),
            json!({"kind": "configmaps"}),
        )
    );

    // resourceNames: update is granted on `mine` only.
    let mut theirs = raw::get(&bot, &format!("{}/theirs", configmaps(&ns)))
        .await
        .expect_ok(200);
    theirs["data"] = json!({"k": "v"});
    let reply = raw::put(&bot, &format!("{}/theirs", configmaps(&ns)), &theirs).await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "configmaps \"theirs\" is forbidden: User \"{user}\" cannot update resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
            ),
            json!({"name": "theirs", "kind": "configmaps"}),
        )
    );

    // Another group, the cluster scope.
    let reply = raw::get(&bot, "/apis/apps/v1/deployments").await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "deployments.apps is forbidden: User \"{user}\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
            ),
            json!({"group": "apps", "kind": "deployments"}),
        )
    );

    // A RoleBinding grants nothing outside its namespace.
    let reply = raw::get(&bot, "/api/v1/namespaces/default/configmaps?watch=true").await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "configmaps is forbidden: User \"{user}\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"default\""
            ),
            json!({"kind": "configmaps"}),
        )
    );

    // Discovery is every authenticated user's (system:discovery).
    for path in ["/api", "/apis", "/version"] {
        raw::get(&bot, path).await.expect_ok(200);
    }
}

#[tokio::test]
async fn a_token_request_issues_a_token_that_authenticates_as_the_service_account() {
    let cluster = TestCluster::builder().with_rbac().start().await;
    let admin = cluster.client();
    let ns = unique_namespace(&admin, "token").await;
    create(
        &admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "robot"}}),
    )
    .await;
    let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/robot/token");
    let reply = raw::post(
        &admin,
        &path,
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": 600}}),
    )
    .await;
    let issued = reply.expect_ok(201);
    assert_eq!(issued["kind"], "TokenRequest");
    assert_eq!(issued["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(issued["metadata"]["name"], "robot");
    assert_eq!(issued["spec"]["expirationSeconds"], 600);
    assert!(
        issued["status"]["expirationTimestamp"].is_string(),
        "{issued}"
    );
    let token = issued["status"]["token"].as_str().unwrap();
    assert!(!token.is_empty());

    // Who the token is shows in a denial's message.
    let robot = client_with_token(cluster.kubeconfig_path(), token).await;
    let denied = raw::get(&robot, &format!("/api/v1/namespaces/{ns}/secrets")).await;
    denied.expect_status(403, "Forbidden");
    assert_eq!(
        denied.json()["message"],
        format!(
            "secrets is forbidden: User \"system:serviceaccount:{ns}:robot\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        )
    );

    // Its groups: a binding to the group system:serviceaccounts:<ns> grants it.
    create(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        &json!({"metadata": {"name": "secret-lister"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}),
    )
    .await;
    create(
        &admin,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        &json!({
            "metadata": {"name": "accounts-list-secrets"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "secret-lister"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": format!("system:serviceaccounts:{ns}")}],
        }),
    )
    .await;
    wait_for(SOON, "the group's RoleBinding to take effect", || async {
        (raw::get(&robot, &format!("/api/v1/namespaces/{ns}/secrets"))
            .await
            .status
            == 200)
            .then_some(())
    })
    .await;

    // A token for a ServiceAccount that does not exist is refused.
    let missing = raw::post(
        &admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/nobody/token"),
        &json!({"spec": {}}),
    )
    .await;
    assert_eq!(
        missing.expect_status(404, "NotFound")["message"],
        "serviceaccounts \"nobody\" not found"
    );

    // Too short a lifetime is invalid.
    let short = raw::post(&admin, &path, &json!({"spec": {"expirationSeconds": 599}})).await;
    short.expect_status(422, "Invalid");
}

#[tokio::test]
async fn an_unknown_token_gets_upstreams_401() {
    let cluster = TestCluster::builder().with_rbac().start().await;
    let stranger = client_with_token(cluster.kubeconfig_path(), "not-a-token-anyone-issued").await;
    let reply = raw::get(&stranger, "/api/v1/namespaces").await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    assert_eq!(
        reply.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
}

#[tokio::test]
async fn without_rbac_a_request_without_a_token_is_the_admins_and_a_bad_token_still_401() {
    let cluster = TestCluster::start().await;
    crate::skip_unless_devcluster!(cluster, "a cluster without authorization");
    raw::get(&cluster.client(), "/api/v1/namespaces")
        .await
        .expect_ok(200);
    let stranger = client_with_token(cluster.kubeconfig_path(), "unknown").await;
    raw::get(&stranger, "/api/v1/namespaces")
        .await
        .expect_status(401, "Unauthorized");
}
