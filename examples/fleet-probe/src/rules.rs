//! The `rules` probe: shows the mapping rules and named indexes on a real fleet. Its primary kind is
//! cluster-scoped — Namespaces, of which it journals those labelled `flotilla.dev/probe=rules` — and
//! it declares
//!
//! - `watches_all::<Node>()`: an event on any Node reconciles every Namespace (fan-out);
//! - `watches_field::<ConfigMap>("data.target")`: a ConfigMap in any namespace names the Namespace
//!   to reconcile (a namespaced object naming a cluster-scoped primary);
//! - `index::<ConfigMap>("rules-target", "data.target")`: each reconcile lists, from the named index,
//!   the ConfigMaps naming its Namespace.
//!
//! Each reconcile of a labelled Namespace appends one line to the journal: the key, why it ran, and
//! the keys of the ConfigMaps the index listed.

use std::sync::Arc;

use flotilla_sdk::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use flotilla_sdk::kube::ResourceExt;
use flotilla_sdk::{Action, CacheQuery, Context, Controller, Request};
use serde::Serialize;

use crate::PROBE_LABEL;
use crate::journal::{Journal, JournalError};

/// The named index of ConfigMaps by the Namespace their `data.target` names.
pub const TARGET_INDEX: &str = "rules-target";
/// Where a ConfigMap names its target Namespace.
pub const TARGET_PATH: &str = "data.target";

/// Errors of the rules probe.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The named index could not be listed.
    #[error("cannot list the {TARGET_INDEX} index")]
    Cache(#[from] flotilla_sdk::CacheError),
    /// The line could not be journalled.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// One line of the rules journal.
#[derive(Debug, Serialize)]
pub struct RulesEntry<'a> {
    /// The reconciled Namespace.
    pub key: &'a str,
    /// The worker that ran it.
    pub worker: &'a str,
    /// Why it ran (`Request::reason`, displayed).
    pub reason: &'a str,
    /// The keys of the ConfigMaps the index listed under the Namespace, sorted.
    pub indexed: Vec<String>,
}

/// Whether a Namespace is meant for the rules probe.
pub fn is_probed(namespace: &Namespace) -> bool {
    namespace
        .labels()
        .get(PROBE_LABEL)
        .is_some_and(|v| v == "rules")
}

/// The rules controller, journalling to `journal`.
pub fn controller(journal: Arc<Journal>) -> Controller<Namespace> {
    Controller::<Namespace>::new("rules")
        .watches_all::<Node>()
        .watches_field::<ConfigMap>(TARGET_PATH)
        .index::<ConfigMap>(TARGET_INDEX, TARGET_PATH)
        .reconcile(move |request: Request<Namespace>, ctx: Context| {
            let journal = journal.clone();
            async move { reconcile(&request, &ctx, &journal).await }
        })
}

async fn reconcile(
    request: &Request<Namespace>,
    ctx: &Context,
    journal: &Journal,
) -> Result<Action, RulesError> {
    if !request.object().is_some_and(|n| is_probed(n)) {
        return Ok(Action::await_change());
    }
    let naming: Vec<ConfigMap> = ctx
        .cache()
        .list(&CacheQuery::all().index(TARGET_INDEX, request.name()))
        .await?;
    let mut indexed: Vec<String> = naming
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    indexed.sort();
    journal.append(&RulesEntry {
        key: request.key(),
        worker: ctx.worker_id(),
        reason: &request.reason().to_string(),
        indexed,
    })?;
    Ok(Action::await_change())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_sdk::{DynController, MemoryCache};

    use super::*;

    fn configmap(ns: &str, name: &str, target: &str) -> ConfigMap {
        let mut configmap = ConfigMap::default();
        configmap.metadata.name = Some(name.into());
        configmap.metadata.namespace = Some(ns.into());
        configmap.data = Some(BTreeMap::from([("target".to_owned(), target.to_owned())]));
        configmap
    }

    #[tokio::test]
    async fn a_reconcile_journals_the_configmaps_the_named_index_lists_for_its_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules.jsonl");
        let journal = Arc::new(Journal::open(&path).unwrap());
        let controller = DynController::from(controller(journal.clone()));
        let cache = MemoryCache::default()
            .with_indexes(controller.spec())
            .with(&configmap("a", "one", "team"))
            .with(&configmap("b", "two", "team"))
            .with(&configmap("b", "other", "elsewhere"));
        let ctx = Context::for_test().cache(cache).build();
        let mut team = Namespace::default();
        team.metadata.name = Some("team".into());
        team.labels_mut().insert(PROBE_LABEL.into(), "rules".into());
        let request = Request::new(None, "team").with_object(team);
        reconcile(&request, &ctx, &journal).await.unwrap();
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        assert_eq!(line["key"], "team");
        assert_eq!(line["indexed"], serde_json::json!(["a/one", "b/two"]));
    }

    #[test]
    fn the_spec_fans_out_from_nodes_maps_configmaps_by_field_and_declares_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Journal::open(&dir.path().join("j")).unwrap());
        let controller = DynController::from(controller(journal));
        let spec = controller.spec();
        assert!(spec.primary.as_ref().is_some_and(|k| !k.namespaced));
        let mapped: Vec<&str> = spec.mappings.iter().map(|m| m.kind.kind.as_str()).collect();
        assert_eq!(mapped, ["Node", "ConfigMap"]);
        assert_eq!(spec.indexes[0].name, TARGET_INDEX);
    }
}
