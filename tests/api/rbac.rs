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

/// `/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{resource}`.
fn rbac_path(ns: &str, resource: &str) -> String {
    format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{resource}")
}

/// A RoleBinding `name` of `kind`/`role` to ServiceAccount `account`.
fn role_binding(name: &str, kind: &str, role: &str, account: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account}],
    })
}

/// A cluster with RBAC, its admin client, a fresh namespace, and ServiceAccount `mallory`'s user name
/// and client: bound to Role `rbac-editor`, which may write Roles and RoleBindings in the namespace
/// and read its ConfigMaps — and nothing else.
async fn setup_rbac_editor() -> (TestCluster, kube::Client, String, String, kube::Client) {
    let cluster = TestCluster::builder().with_rbac().start().await;
    let admin = cluster.client();
    let ns = unique_namespace(&admin, "escalation").await;
    create(
        &admin,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "mallory"}}),
    )
    .await;
    create(
        &admin,
        &rbac_path(&ns, "roles"),
        &json!({
            "metadata": {"name": "rbac-editor"},
            "rules": [
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
                 "verbs": ["get", "list", "create", "update", "patch"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            ],
        }),
    )
    .await;
    create(
        &admin,
        &rbac_path(&ns, "rolebindings"),
        &role_binding("mallory", "Role", "rbac-editor", "mallory"),
    )
    .await;
    let token = service_account_token(&admin, &ns, "mallory").await;
    let mallory = client_with_token(cluster.kubeconfig_path(), &token).await;
    wait_for(SOON, "mallory's RoleBinding to take effect", || async {
        (raw::get(&mallory, &rbac_path(&ns, "roles")).await.status == 200).then_some(())
    })
    .await;
    let user = format!("system:serviceaccount:{ns}:mallory");
    (cluster, admin, ns, user, mallory)
}

#[tokio::test]
async fn a_user_who_may_write_roles_and_bindings_cannot_grant_herself_what_she_lacks() {
    // Regression for an outside probe: with create/update on roles and rolebindings in one
    // namespace, a user bound cluster-admin to herself, created a */* Role, changed a binding's
    // roleRef, and then read Secrets. kube-apiserver's escalation check
    // (pkg/registry/rbac/*/policybased, ConfirmNoEscalation) refuses each.
    let (_cluster, admin, ns, user, mallory) = setup_rbac_editor().await;
    let not_held = format!(
        "user \"{user}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:{ns}\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"
    );
    let everything = r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#;
    let all_urls = r#"{NonResourceURLs:["*"], Verbs:["*"]}"#;
    let details = |kind: &str, name: &str| json!({"name": name, "group": "rbac.authorization.k8s.io", "kind": kind});

    // 1. Binding cluster-admin to herself.
    let reply = raw::post(
        &mallory,
        &rbac_path(&ns, "rolebindings"),
        &role_binding("mallory-admin", "ClusterRole", "cluster-admin", "mallory"),
    )
    .await;
    reply.expect_status(403, "Forbidden");
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "rolebindings.rbac.authorization.k8s.io \"mallory-admin\" is forbidden: {not_held}{everything}\n{all_urls}"
            ),
            details("rolebindings", "mallory-admin"),
        )
    );

    // 2. A Role granting everything; and one granting a little more than she holds, where only
    //    the difference is listed.
    let reply = raw::post(
        &mallory,
        &rbac_path(&ns, "roles"),
        &json!({"metadata": {"name": "everything"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
    )
    .await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "roles.rbac.authorization.k8s.io \"everything\" is forbidden: {not_held}{everything}"
            ),
            details("roles", "everything"),
        )
    );
    let reply = raw::post(
        &mallory,
        &rbac_path(&ns, "roles"),
        &json!({"metadata": {"name": "reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"],
                           "verbs": ["get", "list"]}]}),
    )
    .await;
    reply.expect_status(403, "Forbidden");
    assert_eq!(
        reply.json()["message"],
        format!(
            "roles.rbac.authorization.k8s.io \"reader\" is forbidden: {not_held}{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}}"
        )
    );

    // 3. Changing the roleRef of a binding she may update: to cluster-admin the escalation check
    //    refuses first (403, as upstream checks before validating); to a role she holds, the
    //    validation does (422: roleRef is immutable).
    create(
        &admin,
        &rbac_path(&ns, "roles"),
        &json!({"metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
    )
    .await;
    create(
        &admin,
        &rbac_path(&ns, "rolebindings"),
        &role_binding("mallory-cm", "Role", "cm-reader", "mallory"),
    )
    .await;
    let path = format!("{}/mallory-cm", rbac_path(&ns, "rolebindings"));
    let mut binding = raw::get(&mallory, &path).await.expect_ok(200);
    binding["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"});
    let reply = raw::put(&mallory, &path, &binding).await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "rolebindings.rbac.authorization.k8s.io \"mallory-cm\" is forbidden: {not_held}{everything}\n{all_urls}"
            ),
            details("rolebindings", "mallory-cm"),
        )
    );
    binding["roleRef"] =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rbac-editor"});
    let status = raw::put(&mallory, &path, &binding)
        .await
        .expect_status(422, "Invalid");
    assert_eq!(
        status["message"],
        "RoleBinding.rbac.authorization.k8s.io \"mallory-cm\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"rbac-editor\"}: cannot change roleRef"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "roleRef");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );
    // Not even an administrator may change it.
    let reply = raw::put(&admin, &path, &binding).await;
    reply.expect_status(422, "Invalid");

    // 4. So the Secrets stay out of reach, and nothing she tried was stored.
    let reply = raw::get(&mallory, &format!("/api/v1/namespaces/{ns}/secrets")).await;
    assert_eq!(
        reply.json(),
        forbidden(
            &format!(
                "secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
            ),
            json!({"kind": "secrets"}),
        )
    );
    for (resource, name) in [("rolebindings", "mallory-admin"), ("roles", "everything")] {
        raw::get(&admin, &format!("{}/{name}", rbac_path(&ns, resource)))
            .await
            .expect_status(404, "NotFound");
    }
    let stored = raw::get(&admin, &path).await.expect_ok(200);
    assert_eq!(stored["roleRef"]["name"], "cm-reader");
}

#[tokio::test]
async fn holding_the_permissions_or_escalate_and_bind_lets_a_user_write_roles_and_bindings() {
    let (_cluster, admin, ns, _user, mallory) = setup_rbac_editor().await;

    // What she holds she may hand on: a Role within her ConfigMap rights, and a binding to it.
    let created = raw::post(
        &mallory,
        &rbac_path(&ns, "roles"),
        &json!({"metadata": {"name": "cm-lister"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    created.expect_ok(201);
    raw::post(
        &mallory,
        &rbac_path(&ns, "rolebindings"),
        &role_binding("helper-lists", "Role", "cm-lister", "helper"),
    )
    .await
    .expect_ok(201);

    // `escalate` on roles and `bind` on the cluster-admin ClusterRole lift the check.
    create(
        &admin,
        &rbac_path(&ns, "roles"),
        &json!({
            "metadata": {"name": "delegator"},
            "rules": [
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                 "verbs": ["escalate"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                 "resourceNames": ["cluster-admin"], "verbs": ["bind"]},
            ],
        }),
    )
    .await;
    create(
        &admin,
        &rbac_path(&ns, "rolebindings"),
        &role_binding("mallory-delegates", "Role", "delegator", "mallory"),
    )
    .await;
    // A real API server's authorizer learns of the binding through an informer: retry until then.
    let everything = json!({"metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let admin_binding = role_binding("mallory-admin", "ClusterRole", "cluster-admin", "mallory");
    for (resource, body) in [("roles", &everything), ("rolebindings", &admin_binding)] {
        wait_for(SOON, "escalate and bind to take effect", || async {
            let reply = raw::post(&mallory, &rbac_path(&ns, resource), body).await;
            match reply.status {
                201 => Some(()),
                403 => None,
                other => panic!("creating {resource} answered {other}: {}", reply.text),
            }
        })
        .await;
    }
    wait_for(
        SOON,
        "the cluster-admin RoleBinding to take effect",
        || async {
            (raw::get(&mallory, &format!("/api/v1/namespaces/{ns}/secrets"))
                .await
                .status
                == 200)
                .then_some(())
        },
    )
    .await;
}
