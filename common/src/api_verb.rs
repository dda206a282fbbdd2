//! The Kubernetes verb and resource of an API request, read from its method, path and query the way
//! kube-apiserver's request-info resolver names them (`apiserver_request_total`'s `verb` and
//! `resource` labels): `get` / `list` / `watch` / `create` / `update` / `patch` / `delete` /
//! `deletecollection`, and `replicasets` or `replicasets/status`.

use http::{Method, Uri};

/// The verb and resource of a request; `("other", "")` for paths that name no resource (discovery,
/// `/version`).
pub fn verb_and_resource(method: &Method, uri: &Uri) -> (&'static str, String) {
    let mut parts = uri.path().trim_matches('/').split('/');
    // `/api/v1/…` or `/apis/<group>/<version>/…`.
    let rest: Vec<&str> = match parts.next() {
        Some("api") => parts.skip(1).collect(),
        Some("apis") => parts.skip(2).collect(),
        _ => return ("other", String::new()),
    };
    // Then `namespaces/<ns>/<resource>…`, or a cluster-scoped `<resource>…` (`namespaces` itself
    // included: `namespaces/<name>` alone, or with `status` or `finalize`, is the Namespace object).
    let rest = match rest.as_slice() {
        // A Namespace's own subresources, as upstream's `namespaceSubresources`.
        ["namespaces", _, "status" | "finalize"] => (Some("namespaces"), &rest[1..]),
        ["namespaces", _, resource, tail @ ..] => (Some(*resource), tail),
        [resource, tail @ ..] => (Some(*resource), tail),
        [] => (None, &[][..]),
    };
    let (Some(resource), tail) = rest else {
        return ("other", String::new());
    };
    let (named, resource) = match tail {
        [] => (false, resource.to_owned()),
        [_name] => (true, resource.to_owned()),
        [_name, subresource, ..] => (true, format!("{resource}/{subresource}")),
    };
    let watching = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    let verb = match (method.as_str(), named) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> (&'static str, String) {
        verb_and_resource(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_named_as_kube_apiserver_names_them() {
        let cases = [
            (
                Method::GET,
                "/apis/apps/v1/namespaces/ns/replicasets/web",
                "get",
                "replicasets",
            ),
            (
                Method::GET,
                "/apis/apps/v1/namespaces/ns/replicasets?labelSelector=a",
                "list",
                "replicasets",
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=7",
                "watch",
                "pods",
            ),
            (Method::POST, "/api/v1/namespaces/ns/pods", "create", "pods"),
            (
                Method::PUT,
                "/apis/apps/v1/namespaces/ns/deployments/web/status",
                "update",
                "deployments/status",
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/ns/pods/p",
                "patch",
                "pods",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods/p",
                "delete",
                "pods",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods",
                "deletecollection",
                "pods",
            ),
            (Method::GET, "/api/v1/nodes/n1", "get", "nodes"),
            (
                Method::PUT,
                "/api/v1/namespaces/ns/finalize",
                "update",
                "namespaces/finalize",
            ),
            (Method::GET, "/api/v1/namespaces/ns", "get", "namespaces"),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/ns/events",
                "create",
                "events",
            ),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(of(method, uri), (verb, resource.to_owned()), "{uri}");
        }
        assert_eq!(of(Method::GET, "/version"), ("other", String::new()));
        assert_eq!(of(Method::GET, "/apis/apps/v1"), ("other", String::new()));
    }
}
