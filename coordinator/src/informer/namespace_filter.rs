//! The namespaces that match `--namespace-selector`, kept current by one watch on every Namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_common::LabelSelector;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The set of matching namespace names; `None` until the first list of Namespaces completed.
pub(crate) type MatchingNamespaces = watch::Receiver<Option<Arc<BTreeSet<String>>>>;

/// Starts the task that watches every Namespace and publishes the names whose labels match
/// `selector`, each time that set changes (never twice the same set). It lists cluster-wide, because
/// the API server can filter Namespaces by label but would then not say when one stops matching
/// (a watch with a label selector sends no event for an object whose labels change out of it on
/// every server version). Runs until `cancel`.
///
/// # Panics
/// Outside a Tokio runtime.
pub(crate) fn start(
    client: kube::Client,
    selector: LabelSelector,
    cancel: CancellationToken,
) -> MatchingNamespaces {
    let (tx, rx) = watch::channel(None);
    let api: Api<Namespace> = Api::all(client);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    let task = async move {
        let mut events = std::pin::pin!(events);
        let mut matcher = Matcher::new(selector);
        loop {
            let event = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                None => return,
                Some(Ok(event)) => {
                    if let Some(set) = matcher.handle(event) {
                        tracing::info!(namespaces = ?set, "namespaces in scope");
                        tx.send_replace(Some(Arc::new(set)));
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "namespace watch failed; retrying with backoff");
                }
            }
        }
    };
    tokio::spawn(task.instrument(tracing::info_span!("namespace_scope")));
    rx
}

/// The namespaces' labels and the set that matches, fed by watcher events.
struct Matcher {
    selector: LabelSelector,
    /// Name → whether it matches, as last listed or watched.
    matching: BTreeMap<String, bool>,
    /// The (re)list in progress.
    listing: BTreeMap<String, bool>,
    /// The set last published (`None` before the first complete list).
    published: Option<BTreeSet<String>>,
}

impl Matcher {
    fn new(selector: LabelSelector) -> Self {
        Self {
            selector,
            matching: BTreeMap::new(),
            listing: BTreeMap::new(),
            published: None,
        }
    }

    /// Applies one event; returns the matching set when it is to be published (the first complete
    /// list, then every change).
    fn handle(&mut self, event: watcher::Event<Namespace>) -> Option<BTreeSet<String>> {
        match event {
            watcher::Event::Init => {
                self.listing.clear();
                return None;
            }
            watcher::Event::InitApply(ns) => {
                if let Some((name, matches)) = self.judge(&ns) {
                    self.listing.insert(name, matches);
                }
                return None;
            }
            watcher::Event::InitDone => self.matching = std::mem::take(&mut self.listing),
            watcher::Event::Apply(ns) => {
                if let Some((name, matches)) = self.judge(&ns) {
                    self.matching.insert(name, matches);
                }
                self.published.as_ref()?;
            }
            watcher::Event::Delete(ns) => {
                if let Some(name) = ns.metadata.name {
                    self.matching.remove(&name);
                }
                self.published.as_ref()?;
            }
        }
        let set: BTreeSet<String> = self
            .matching
            .iter()
            .filter(|(_, m)| **m)
            .map(|(n, _)| n.clone())
            .collect();
        if self.published.as_ref() == Some(&set) {
            return None;
        }
        self.published = Some(set.clone());
        Some(set)
    }

    fn judge(&self, ns: &Namespace) -> Option<(String, bool)> {
        let name = ns.metadata.name.clone()?;
        let labels = ns.metadata.labels.clone().unwrap_or_default();
        Some((name, self.selector.matches(&labels)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ns(name: &str, team: &str) -> Namespace {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": {"team": team}}}),
        )
        .unwrap()
    }

    fn set(names: &[&str]) -> Option<BTreeSet<String>> {
        Some(names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn the_set_is_published_after_the_first_list_and_then_only_when_it_changes() {
        let mut m = Matcher::new(LabelSelector::parse("team=a").unwrap());
        assert_eq!(m.handle(watcher::Event::Init), None);
        assert_eq!(m.handle(watcher::Event::InitApply(ns("x", "a"))), None);
        assert_eq!(m.handle(watcher::Event::InitApply(ns("y", "b"))), None);
        assert_eq!(m.handle(watcher::Event::InitDone), set(&["x"]));
        assert_eq!(
            m.handle(watcher::Event::Apply(ns("y", "b"))),
            None,
            "nothing changed"
        );
        assert_eq!(
            m.handle(watcher::Event::Apply(ns("y", "a"))),
            set(&["x", "y"])
        );
        assert_eq!(m.handle(watcher::Event::Apply(ns("x", "c"))), set(&["y"]));
        assert_eq!(m.handle(watcher::Event::Delete(ns("y", "a"))), set(&[]));
    }

    #[test]
    fn a_relist_replaces_what_was_known() {
        let mut m = Matcher::new(LabelSelector::parse("team=a").unwrap());
        m.handle(watcher::Event::Init);
        m.handle(watcher::Event::InitApply(ns("x", "a")));
        m.handle(watcher::Event::InitDone);
        m.handle(watcher::Event::Init);
        m.handle(watcher::Event::InitApply(ns("z", "a")));
        assert_eq!(m.handle(watcher::Event::InitDone), set(&["z"]));
    }
}
