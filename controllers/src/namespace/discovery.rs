//! Which namespaced resources the API server serves that the namespace controller can delete, found
//! through legacy discovery of each group's preferred version (upstream's
//! `ServerPreferredNamespacedResources` filtered by the `delete` verb).
//!
//! A group that fails discovery does not stop the others: what was found is still deleted, and the
//! failure is reported (condition `NamespaceDeletionDiscoveryFailure`) so the namespace is not finalized
//! while content may be hidden.

use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use flotilla_sdk::kube;
use flotilla_sdk::kube::core::ApiResource;
use futures::future::join_all;

/// A namespaced resource that supports `delete`, with the collection verbs it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletable {
    /// The resource, for a dynamic client.
    pub resource: ApiResource,
    /// Whether `list` is served (else its content cannot be enumerated nor verified).
    pub list: bool,
    /// Whether `deletecollection` is served (else each item is deleted on its own).
    pub deletecollection: bool,
}

impl Deletable {
    /// `plural.group`, as upstream names a resource in its condition messages (`configmaps.`).
    pub fn display_name(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }
}

/// What discovery found.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Every deletable namespaced resource of every group that answered.
    pub resources: Vec<Deletable>,
    /// Why discovery was incomplete, as upstream words it; `None` when every group answered.
    pub failure: Option<String>,
    /// A groupVersion that does not parse, as upstream words it; `None` when all parsed.
    pub parsing_failure: Option<String>,
}

/// A groupVersion string that is neither `version` nor `group/version`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unexpected GroupVersion string: {0}")]
pub struct GroupVersionError(String);

/// Splits `v1` or `apps/v1` into group and version.
///
/// # Errors
/// [`GroupVersionError`] for an empty string or one with more than one `/`.
pub fn parse_group_version(group_version: &str) -> Result<(&str, &str), GroupVersionError> {
    let invalid = || GroupVersionError(group_version.to_owned());
    match group_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] if !version.is_empty() => Ok(("", version)),
        [group, version] if !group.is_empty() && !version.is_empty() => Ok((group, version)),
        _ => Err(invalid()),
    }
}

/// The deletable namespaced resources of one discovery document: namespaced, not a subresource, and
/// serving `delete`.
///
/// # Errors
/// [`GroupVersionError`] when the document's groupVersion does not parse.
pub fn deletable(list: &APIResourceList) -> Result<Vec<Deletable>, GroupVersionError> {
    let (group, version) = parse_group_version(&list.group_version)?;
    Ok(list
        .resources
        .iter()
        .filter(|r| r.namespaced && !r.name.contains('/'))
        .filter(|r| r.verbs.iter().any(|v| v == "delete"))
        .map(|r| Deletable {
            resource: ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: list.group_version.clone(),
                kind: r.kind.clone(),
                plural: r.name.clone(),
            },
            list: r.verbs.iter().any(|v| v == "list"),
            deletecollection: r.verbs.iter().any(|v| v == "deletecollection"),
        })
        .collect())
}

/// Discovers the deletable namespaced resources through `client`. Never fails as a whole: failures
/// are in [`Discovered::failure`] and [`Discovered::parsing_failure`].
pub async fn discover(client: &kube::Client) -> Discovered {
    let mut discovered = Discovered::default();
    let mut group_versions = Vec::new();
    let mut root_errors = Vec::new();
    match client.list_core_api_versions().await {
        // The legacy group lists its versions newest-preferred first (only `v1` in practice).
        Ok(core) => group_versions.extend(core.versions.into_iter().take(1)),
        Err(err) => root_errors.push(format!("/api: {err}")),
    }
    match client.list_api_groups().await {
        Ok(groups) => group_versions.extend(groups.groups.into_iter().filter_map(|g| {
            g.preferred_version
                .map(|p| p.group_version)
                .or_else(|| g.versions.into_iter().next().map(|v| v.group_version))
        })),
        Err(err) => root_errors.push(format!("/apis: {err}")),
    }
    let answers = join_all(group_versions.iter().map(|gv| async move {
        let answer = if gv.contains('/') {
            client.list_api_group_resources(gv).await
        } else {
            client.list_core_api_resources(gv).await
        };
        (gv, answer)
    }))
    .await;
    let mut failed_groups = Vec::new();
    for (gv, answer) in answers {
        match answer {
            Ok(list) => match deletable(&list) {
                Ok(resources) => discovered.resources.extend(resources),
                Err(err) => {
                    discovered.parsing_failure.get_or_insert(err.to_string());
                }
            },
            Err(err) => failed_groups.push(format!("{gv}: {err}")),
        }
    }
    discovered.failure = failure_message(&root_errors, failed_groups);
    discovered
}

/// Upstream's wording: a failed root list is reported as is; failed groups as
/// `Discovery failed for some groups, N failing: unable to retrieve the complete list of server APIs:
/// g/v: err, …`.
fn failure_message(root_errors: &[String], mut failed_groups: Vec<String>) -> Option<String> {
    if !root_errors.is_empty() {
        return Some(root_errors.join(", "));
    }
    if failed_groups.is_empty() {
        return None;
    }
    failed_groups.sort();
    Some(format!(
        "Discovery failed for some groups, {} failing: unable to retrieve the complete list of server APIs: {}",
        failed_groups.len(),
        failed_groups.join(", ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    use super::*;

    fn resource(name: &str, kind: &str, namespaced: bool, verbs: &[&str]) -> APIResource {
        APIResource {
            name: name.into(),
            kind: kind.into(),
            namespaced,
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..APIResource::default()
        }
    }

    fn all_verbs() -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    #[test]
    fn only_namespaced_top_level_resources_that_serve_delete_are_deletable() {
        let list = APIResourceList {
            group_version: "v1".into(),
            resources: vec![
                resource("configmaps", "ConfigMap", true, &all_verbs()),
                resource("namespaces", "Namespace", false, &all_verbs()),
                resource("pods/status", "Pod", true, &["get", "patch", "update"]),
                resource("serviceaccounts/token", "TokenRequest", true, &["create"]),
                resource("bindings", "Binding", true, &["create"]),
                resource("events", "Event", true, &all_verbs()),
            ],
        };
        let names: Vec<String> = deletable(&list)
            .unwrap()
            .iter()
            .map(Deletable::display_name)
            .collect();
        assert_eq!(names, ["configmaps.", "events."]);
    }

    #[test]
    fn a_resource_without_deletecollection_is_deleted_item_by_item() {
        let list = APIResourceList {
            group_version: "example.flotilla.dev/v1".into(),
            resources: vec![resource(
                "greetings",
                "Greeting",
                true,
                &["delete", "get", "list"],
            )],
        };
        let found = deletable(&list).unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].list);
        assert!(!found[0].deletecollection);
        assert_eq!(found[0].resource.group, "example.flotilla.dev");
        assert_eq!(found[0].resource.version, "v1");
        assert_eq!(found[0].resource.api_version, "example.flotilla.dev/v1");
        assert_eq!(found[0].display_name(), "greetings.example.flotilla.dev");
    }

    #[test]
    fn a_malformed_group_version_is_a_parsing_failure() {
        assert_eq!(parse_group_version("apps/v1").unwrap(), ("apps", "v1"));
        assert_eq!(parse_group_version("v1").unwrap(), ("", "v1"));
        let err = parse_group_version("a/b/c").unwrap_err();
        assert_eq!(err.to_string(), "unexpected GroupVersion string: a/b/c");
        assert!(parse_group_version("").is_err());
        let list = APIResourceList {
            group_version: "a/b/c".into(),
            resources: vec![],
        };
        assert!(deletable(&list).is_err());
    }

    #[test]
    fn failed_groups_are_reported_sorted_and_counted_as_upstream_does() {
        assert_eq!(failure_message(&[], vec![]), None);
        let message = failure_message(&[], vec!["b/v1: boom".into(), "a/v1: bang".into()]).unwrap();
        assert_eq!(
            message,
            "Discovery failed for some groups, 2 failing: unable to retrieve the complete list of server APIs: a/v1: bang, b/v1: boom"
        );
        let root = failure_message(&["/apis: down".into()], vec!["x/v1: y".into()]).unwrap();
        assert_eq!(root, "/apis: down");
    }
}
