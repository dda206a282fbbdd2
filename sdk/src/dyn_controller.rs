//! A controller with its kind erased, as a runtime runs it: its spec, its concurrency and one function
//! from an item (key, object bytes, attempt) and a [`Context`] to an [`Outcome`]. Decoding the item into
//! a typed [`Request`] happens here, so a malformed object becomes an error outcome, never a panic.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_apimachinery::{KindedKey, Reason, split_key};
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::controller::{Controller, ReconcileError};
use crate::outcome::Outcome;
use crate::request::Request;
use crate::spec::ControllerSpec;

/// An item as the runtime hands it to a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The workqueue key: `namespace/name`, `name`, or a kinded key for an owner-graph controller.
    pub key: String,
    /// The primary object as JSON; empty when it is gone.
    pub object: Bytes,
    /// How many times the key failed in a row before this attempt.
    pub attempt: u32,
    /// Why the key runs.
    pub reason: Reason,
}

type RunFn = Arc<dyn Fn(WorkItem, Context) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A controller with its kind erased, as the runtime runs it. Made from a [`Controller`] with `into()`.
#[derive(Clone)]
pub struct DynController {
    spec: ControllerSpec,
    concurrency: u32,
    event_source: Option<String>,
    run: Option<RunFn>,
}

impl DynController {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The source its Events report ([`Controller::event_source`]; the name unless given).
    pub fn event_source(&self) -> &str {
        self.event_source.as_deref().unwrap_or(&self.spec.name)
    }

    /// The same controller reporting its Events as `component`.
    pub fn with_event_source(mut self, component: &str) -> Self {
        self.event_source = Some(component.to_owned());
        self
    }

    /// How many items it reconciles at once.
    pub fn concurrency_limit(&self) -> u32 {
        self.concurrency
    }

    /// The same controller with another concurrency (what `--concurrent-<name>-syncs` does).
    pub fn with_concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Whether a reconcile function was given; a runtime refuses a controller without one.
    pub fn has_reconcile(&self) -> bool {
        self.run.is_some()
    }

    /// What the controller declared, for the runtime to announce to the fleet.
    pub fn spec(&self) -> &ControllerSpec {
        &self.spec
    }

    /// Runs one item with `ctx`; never panics on bad input: an object that is not a valid primary
    /// object, or a key that does not parse, is an error outcome (a rate-limited retry).
    ///
    /// # Cancel safety
    /// Dropping the future stops the reconcile at its next await point; writes it already made stay
    /// made (and recorded in the context's journal).
    pub fn run(&self, item: WorkItem, ctx: Context) -> BoxFuture<'static, Outcome> {
        match &self.run {
            Some(run) => run(item, ctx),
            None => Box::pin(std::future::ready(Outcome::error(
                "controller has no reconcile function".into(),
            ))),
        }
    }
}

impl<K> From<Controller<K>> for DynController
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    fn from(c: Controller<K>) -> Self {
        let kind = c
            .spec
            .primary
            .as_ref()
            .map_or_else(|| "object".to_owned(), |k| k.kind.clone());
        let kinded = c.spec.owner_graph();
        let run = c.reconcile.map(|reconcile| {
            let policy = c.error_policy.clone();
            Arc::new(move |item: WorkItem, ctx: Context| {
                let request = match decode::<K>(&item, &kind, kinded) {
                    Ok(request) => request,
                    Err(message) => {
                        tracing::warn!(key = %item.key, error = %message, "cannot decode the object of an item");
                        return Box::pin(std::future::ready(Outcome::error(message))) as BoxFuture<'static, Outcome>;
                    }
                };
                let fut = reconcile(request, ctx.clone());
                let policy = policy.clone();
                Box::pin(async move {
                    match fut.await {
                        Ok(action) => Outcome::from_action(action),
                        Err(err) => {
                            let message = error_chain(err.as_ref());
                            match &policy {
                                Some(policy) => Outcome::from_policy(policy(err.as_ref(), &ctx), message),
                                None => Outcome::error(message),
                            }
                        }
                    }
                }) as BoxFuture<'static, Outcome>
            }) as RunFn
        });
        Self {
            spec: c.spec,
            concurrency: c.concurrency,
            event_source: c.event_source,
            run,
        }
    }
}

fn decode<K: DeserializeOwned>(
    item: &WorkItem,
    kind: &str,
    kinded: bool,
) -> Result<Request<K>, String> {
    let object = if item.object.is_empty() {
        None
    } else {
        let object: K = serde_json::from_slice(&item.object).map_err(|err| {
            format!(
                "object {} is not a valid {kind}: {}",
                item.key,
                decode_error(&err)
            )
        })?;
        Some(Arc::new(object))
    };
    let (namespace, name) = if kinded {
        let parsed = KindedKey::parse(&item.key)
            .ok_or_else(|| format!("{} is not a kinded key", item.key))?;
        (parsed.namespace, parsed.name)
    } else {
        split_key(&item.key)
    };
    Ok(Request {
        key: item.key.clone(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
        object,
        attempt: item.attempt,
        reason: item.reason.clone(),
    })
}

/// Where and how an object failed to decode, without serde's detail: that quotes the offending value
/// (`invalid type: string "…"`), which may be a Secret's, and the message reaches logs, traces and
/// `Done`.
fn decode_error(err: &serde_json::Error) -> String {
    let category = match err.classify() {
        serde_json::error::Category::Io => "an I/O error",
        serde_json::error::Category::Syntax => "malformed JSON",
        serde_json::error::Category::Data => "a field of the wrong type or value",
        serde_json::error::Category::Eof => "truncated JSON",
    };
    format!("{category} at line {} column {}", err.line(), err.column())
}

/// The error and its sources, `: `-joined, as one line for logs and Done.
fn error_chain(err: &ReconcileError) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DynamicObject;

    use super::*;
    use crate::action::Action;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    fn item(key: &str, object: &str) -> WorkItem {
        WorkItem {
            key: key.into(),
            object: Bytes::from(object.to_owned()),
            attempt: 3,
            reason: Reason::ObjectChanged {
                kind: "v1/configmaps".into(),
                key: key.into(),
            },
        }
    }

    fn seen_by(controller: Controller<ConfigMap>) -> DynController {
        controller.into()
    }

    #[tokio::test]
    async fn an_undecodable_object_is_an_error_outcome_not_a_panic() {
        let controller = seen_by(Controller::new("c").reconcile(
            |_req: Request<ConfigMap>, _ctx| async {
                Ok::<_, std::io::Error>(Action::await_change())
            },
        ));
        let outcome = controller
            .run(item("ns/x", "{not json"), Context::for_test().build())
            .await;
        assert_eq!(outcome.action(), None, "a rate-limited retry");
        assert!(
            outcome
                .error_message()
                .unwrap()
                .contains("not a valid ConfigMap")
        );
    }

    #[tokio::test]
    async fn a_decode_error_names_where_but_never_quotes_the_objects_values() {
        let controller = seen_by(Controller::new("c").reconcile(
            |_req: Request<ConfigMap>, _ctx| async {
                Ok::<_, std::io::Error>(Action::await_change())
            },
        ));
        // `data` must be a map of strings: serde's own message would quote the value.
        let object = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":"s3cr3t-value"}"#;
        let outcome = controller
            .run(item("ns/x", object), Context::for_test().build())
            .await;
        let message = outcome.error_message().unwrap();
        assert!(message.contains("not a valid ConfigMap"), "{message}");
        assert!(message.contains("line 1 column"), "{message}");
        assert!(!message.contains("s3cr3t"), "the value leaked: {message}");
    }

    #[tokio::test]
    async fn the_request_carries_the_key_parts_the_object_the_attempt_and_the_reason() {
        let (tx, rx) = std::sync::mpsc::channel();
        let controller = seen_by(Controller::new("c").reconcile(
            move |req: Request<ConfigMap>, _ctx| {
                let seen = (
                    req.key().to_owned(),
                    req.namespace().map(str::to_owned),
                    req.name().to_owned(),
                    req.object().is_some(),
                    req.attempt(),
                    req.reason().to_string(),
                );
                tx.send(seen).unwrap();
                async { Ok::<_, std::io::Error>(Action::requeue(Duration::from_secs(1))) }
            },
        ));
        let outcome = controller
            .run(
                item("ns/x", r#"{"metadata":{"name":"x"}}"#),
                Context::for_test().build(),
            )
            .await;
        assert_eq!(
            outcome.action(),
            Some(Action::requeue(Duration::from_secs(1)))
        );
        assert_eq!(
            rx.recv().unwrap(),
            (
                "ns/x".into(),
                Some("ns".into()),
                "x".into(),
                true,
                3,
                "object_changed v1/configmaps ns/x".into()
            )
        );
    }

    #[tokio::test]
    async fn an_owner_graph_request_is_named_by_its_kinded_key_and_a_bad_key_is_an_error() {
        let (tx, rx) = std::sync::mpsc::channel();
        let controller: DynController = Controller::owner_graph("gc")
            .reconcile(move |req: Request<DynamicObject>, _ctx| {
                tx.send((req.namespace().map(str::to_owned), req.name().to_owned()))
                    .unwrap();
                async { Ok::<_, std::io::Error>(Action::await_change()) }
            })
            .into();
        assert!(controller.spec().owner_graph());
        let ok = controller
            .run(
                item("apps/v1/replicasets/team-a/web", ""),
                Context::for_test().build(),
            )
            .await;
        assert_eq!(ok.error_message(), None);
        assert_eq!(rx.recv().unwrap(), (Some("team-a".into()), "web".into()));
        let bad = controller
            .run(item("team-a/web", ""), Context::for_test().build())
            .await;
        assert!(bad.error_message().unwrap().contains("not a kinded key"));
    }

    #[tokio::test]
    async fn an_error_policy_chooses_the_action_and_the_error_keeps_its_sources() {
        let controller = seen_by(
            Controller::new("c")
                .reconcile(|_req: Request<ConfigMap>, _ctx| async {
                    Err::<Action, _>(Outer(std::io::Error::other("inner")))
                })
                .error_policy(|_err, _ctx| Action::requeue(Duration::from_secs(5))),
        );
        let outcome = controller
            .run(item("ns/x", ""), Context::for_test().build())
            .await;
        assert_eq!(
            outcome.action(),
            Some(Action::requeue(Duration::from_secs(5)))
        );
        assert_eq!(outcome.error_message(), Some("outer: inner"));
    }

    #[tokio::test]
    async fn a_controller_without_a_reconcile_function_fails_every_item() {
        let controller = seen_by(Controller::new("c"));
        assert!(!controller.has_reconcile());
        let outcome = controller
            .run(item("ns/x", ""), Context::for_test().build())
            .await;
        assert!(outcome.error_message().is_some());
    }
}
