//! An HTTP request as upstream's authorizer sees it (`RequestInfoFactory`): a resource request's verb,
//! API group, resource, subresource, namespace and name, or a non-resource request's path and verb.

use axum::http::Method;
use serde::Serialize;

use super::super::query::Query;

/// What authorization decides about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`; for a
    /// non-resource request the lowercase HTTP method.
    pub verb: String,
    /// Whether this is a request under `/api/v1` or `/apis/<group>/<version>` naming a resource.
    pub resource_request: bool,
    /// API group (`""` for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`, `finalize`, `token`, …).
    pub subresource: String,
    /// Namespace (a Namespace's own name for requests on a Namespace, as upstream).
    pub namespace: String,
    /// Object name (also from a `metadata.name=` field selector of a list or watch).
    pub name: String,
    /// The URL path.
    pub path: String,
}

impl Attributes {
    /// The attributes of a request, parsed like upstream's `RequestInfoFactory.NewRequestInfo`.
    pub fn of(method: &Method, path: &str, query: &Query) -> Self {
        let mut a = Attributes {
            verb: method.as_str().to_lowercase(),
            path: path.to_owned(),
            ..Attributes::default()
        };
        let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return a;
        }
        let groupless = parts[0] == "api";
        parts.remove(0);
        if !groupless {
            if parts.len() < 3 {
                return a;
            }
            a.api_group = parts.remove(0).to_owned();
        }
        a.resource_request = true;
        a.api_version = parts.remove(0).to_owned();
        if matches!(parts[0], "watch" | "proxy") {
            if parts.len() < 2 {
                a.resource_request = false;
                return a;
            }
            a.verb = parts.remove(0).to_owned();
        } else {
            a.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_owned();
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            a.namespace = parts[1].to_owned();
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts.drain(..2);
            }
        }
        if parts.len() >= 3 && a.verb != "proxy" {
            a.subresource = parts[2].to_owned();
        }
        if parts.len() >= 2 {
            a.name = parts[1].to_owned();
        }
        a.resource = parts[0].to_owned();
        if a.name.is_empty() && a.verb == "get" {
            a.verb = if parse_bool(query.get("watch")) {
                "watch"
            } else {
                "list"
            }
            .to_owned();
        }
        if a.name.is_empty()
            && matches!(a.verb.as_str(), "list" | "watch")
            && let Some(name) = exact_name(query.get("fieldSelector"))
        {
            a.name = name;
        }
        if a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".into();
        }
        a
    }
}

/// Go's `strconv.ParseBool` truth values.
fn parse_bool(v: Option<&str>) -> bool {
    matches!(v, Some("1" | "t" | "T" | "true" | "TRUE" | "True"))
}

/// The name a field selector requires exactly (`metadata.name=x` or `==`, alone or among other
/// terms), when it is a valid path segment.
fn exact_name(selector: Option<&str>) -> Option<String> {
    selector?.split(',').find_map(|term| {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        let valid = !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains('/')
            && !value.contains('%');
        valid.then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, path_and_query: &str) -> Attributes {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Attributes::of(&method, path, &Query::parse(Some(query)))
    }

    #[test]
    fn a_get_without_a_name_is_a_list_or_a_watch() {
        let a = of(Method::GET, "/api/v1/namespaces/ns/pods");
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("list", "pods", "ns")
        );
        assert!(a.resource_request);
        assert_eq!(of(Method::GET, "/api/v1/pods?watch=true").verb, "watch");
        assert_eq!(of(Method::GET, "/api/v1/pods?watch=1").verb, "watch");
        let w = of(Method::GET, "/apis/apps/v1/watch/namespaces/ns/deployments");
        assert_eq!(
            (w.verb.as_str(), w.api_group.as_str(), w.resource.as_str()),
            ("watch", "apps", "deployments")
        );
    }

    #[test]
    fn a_name_field_selector_names_the_object_of_a_list() {
        let a = of(
            Method::GET,
            "/api/v1/namespaces?fieldSelector=metadata.name%3Dteam-a&watch=true",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "team-a"));
    }

    #[test]
    fn subresources_and_namespaces_parse_as_upstream() {
        let a = of(
            Method::PUT,
            "/apis/apps/v1/namespaces/ns/deployments/web/status",
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.name.as_str(),
                a.subresource.as_str()
            ),
            ("update", "deployments", "web", "status")
        );
        let n = of(Method::PUT, "/api/v1/namespaces/doomed/finalize");
        assert_eq!(
            (
                n.resource.as_str(),
                n.name.as_str(),
                n.subresource.as_str(),
                n.namespace.as_str()
            ),
            ("namespaces", "doomed", "finalize", "doomed")
        );
        let t = of(
            Method::POST,
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
        );
        assert_eq!(
            (t.verb.as_str(), t.subresource.as_str()),
            ("create", "token")
        );
        assert_eq!(
            of(Method::DELETE, "/api/v1/namespaces/ns/pods").verb,
            "deletecollection"
        );
        assert_eq!(of(Method::PATCH, "/api/v1/nodes/n1").namespace, "");
    }

    #[test]
    fn discovery_and_health_paths_are_non_resource_requests() {
        for path in [
            "/api",
            "/apis",
            "/apis/apps",
            "/version",
            "/healthz",
            "/openapi/v3",
        ] {
            let a = of(Method::GET, path);
            assert!(!a.resource_request, "{path}");
            assert_eq!(a.verb, "get");
        }
        assert!(!of(Method::GET, "/api/v1").resource_request);
        assert!(of(Method::GET, "/apis/apps/v1/deployments").resource_request);
        assert!(!of(Method::GET, "/apis/apps/v1").resource_request);
    }
}
