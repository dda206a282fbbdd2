//! The Kubernetes verb and resource of an API request, read from its method, path and query the way
//! kube-apiserver's request-info resolver names them (`apiserver_request_total`'s `verb` and
//! `resource` labels): `get` / `list` / `watch` / `create` / `update` / `patch` / `delete` /
//! `deletecollection`, and `replicasets` or `replicasets/status`; and the object a request names
//! ([`object_of`]: group, version, resource, namespace and name, read from the path alone).

use http::{Method, Uri};

/// The object a request's path names: `/apis/apps/v1/namespaces/ns/replicasets/web/status` names the
/// ReplicaSet `ns/web` (a subresource names its object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiObject {
    /// The API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// The API version (`v1`).
    pub version: String,
    /// The resource, plural and without a subresource (`replicasets`).
    pub resource: String,
    /// The namespace; empty for a cluster-scoped object (a Namespace itself included).
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

/// The object `uri`'s path names, or `None` when it names none: a collection (a create by
/// `generateName` or a list), a discovery or non-resource path (`/api/v1`, `/version`). Only the path is
/// read: a create whose name is in its body names no object here.
pub fn object_of(uri: &Uri) -> Option<ApiObject> {
    let mut parts = uri.path().trim_matches('/').split('/');
    let (group, version) = match parts.next()? {
        "api" => ("", parts.next()?),
        "apis" => (parts.next()?, parts.next()?),
        _ => return None,
    };
    let rest: Vec<&str> = parts.collect();
    let (namespace, resource, name) = match rest.as_slice() {
        // A Namespace itself (with `status` or `finalize`): cluster-scoped.
        ["namespaces", name] | ["namespaces", name, "status" | "finalize"] => {
            ("", "namespaces", *name)
        }
        ["namespaces", namespace, resource, name, ..] if !namespace.is_empty() => {
            (*namespace, *resource, *name)
        }
        ["namespaces", ..] => return None,
        [resource, name, ..] => ("", *resource, *name),
        _ => return None,
    };
    if [version, resource, name].iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(ApiObject {
        group: group.to_owned(),
        version: version.to_owned(),
        resource: resource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

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

    fn object(uri: &str) -> Option<(String, String, String, String, String)> {
        object_of(&uri.parse().unwrap())
            .map(|o| (o.group, o.version, o.resource, o.namespace, o.name))
    }

    fn named(
        g: &str,
        v: &str,
        r: &str,
        ns: &str,
        n: &str,
    ) -> Option<(String, String, String, String, String)> {
        Some((g.into(), v.into(), r.into(), ns.into(), n.into()))
    }

    #[test]
    fn a_path_that_names_an_object_gives_its_group_version_resource_namespace_and_name() {
        assert_eq!(
            object("/apis/apps/v1/namespaces/ns/replicasets/web"),
            named("apps", "v1", "replicasets", "ns", "web")
        );
        assert_eq!(
            object("/apis/apps/v1/namespaces/ns/deployments/web/status?fieldManager=x"),
            named("apps", "v1", "deployments", "ns", "web"),
            "a subresource names its object"
        );
        assert_eq!(
            object("/api/v1/namespaces/ns/pods/p/eviction"),
            named("", "v1", "pods", "ns", "p")
        );
        assert_eq!(
            object("/api/v1/nodes/n1"),
            named("", "v1", "nodes", "", "n1")
        );
        assert_eq!(
            object("/api/v1/namespaces/ns"),
            named("", "v1", "namespaces", "", "ns")
        );
        assert_eq!(
            object("/api/v1/namespaces/ns/finalize"),
            named("", "v1", "namespaces", "", "ns")
        );
        assert_eq!(
            object("/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"),
            named(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                "",
                "admin"
            )
        );
    }

    #[test]
    fn collections_discovery_and_non_resource_paths_name_no_object() {
        for uri in [
            "/api/v1/namespaces/ns/pods",
            "/apis/apps/v1/namespaces/ns/replicasets?labelSelector=a",
            "/api/v1/nodes",
            "/api/v1/namespaces",
            "/api/v1",
            "/api",
            "/apis",
            "/apis/apps/v1",
            "/apis/apps",
            "/version",
            "/healthz",
            "/",
            "/api/v1/namespaces//pods/p",
            "/api/v1/namespaces/ns/pods/",
        ] {
            assert_eq!(object(uri), None, "{uri}");
        }
    }
}
