//! Discovery of the resources an owner-graph controller (the garbage collector) covers: every resource
//! the API server serves, at its group's preferred version, that supports `list`, `watch` and `delete`
//! (upstream's `GetDeletableResources`), CRDs included, without the high-churn kinds upstream's garbage
//! collector ignores (core and `events.k8s.io` Events).

use flotilla_common::ResourceKind;
use kube::discovery::{Discovery, Scope, verbs};

/// Resources the owner graph never covers, as (group, plural): kube-controller-manager's default
/// `ignoredResources` of the garbage collector.
const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// The deletable resources the API server serves now, sorted.
///
/// Uses aggregated discovery (two requests) and falls back to per-group discovery on servers without
/// it.
///
/// # Errors
/// The API's error when neither discovery succeeds.
pub async fn deletable_resources(client: &kube::Client) -> Result<Vec<ResourceKind>, kube::Error> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => discovery,
        Err(err) => {
            tracing::debug!(error = %err, "aggregated discovery failed; discovering group by group");
            Discovery::new(client.clone()).run().await?
        }
    };
    let mut kinds: Vec<ResourceKind> = discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .filter(|(resource, caps)| {
            [verbs::LIST, verbs::WATCH, verbs::DELETE]
                .iter()
                .all(|verb| caps.supports_operation(verb))
                && !IGNORED.contains(&(resource.group.as_str(), resource.plural.as_str()))
        })
        .map(|(resource, caps)| {
            ResourceKind::new(
                &resource.group,
                &resource.version,
                &resource.kind,
                &resource.plural,
                caps.scope == Scope::Namespaced,
            )
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    Ok(kinds)
}
