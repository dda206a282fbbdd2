//! The Greeting controller: one owned ConfigMap per Greeting, carrying its message.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_sdk::k8s_openapi::api::core::v1::ConfigMap;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, Patch, PatchParams, PostParams};
use flotilla_sdk::kube::{Resource, ResourceExt};
use flotilla_sdk::{Action, Context, Controller, EventType, Request};
use serde_json::json;

use crate::resource::Greeting;

/// Errors of one reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Greeting from the cache lacks a uid or namespace, so no owner reference can point at it.
    #[error("greeting {0} lacks a uid or namespace")]
    Incomplete(String),
    /// The owned ConfigMaps shipped with the item are unreadable.
    #[error("cannot read prefetched configmaps")]
    Prefetched(#[source] flotilla_sdk::ContextError),
    /// The Kubernetes API refused a write.
    #[error("kubernetes api call failed")]
    Kube(#[source] kube::Error),
}

/// The controller as the worker runs it.
pub fn controller() -> Controller<Greeting> {
    Controller::<Greeting>::new("greeting")
        .owns::<ConfigMap>()
        .prefetch_owned::<ConfigMap>()
        .concurrency(5)
        .reconcile(reconcile)
        // A failed write (a conflict, a flaky API) is retried after 5 s instead of with the fleet's
        // exponential backoff: redoing a Greeting is cheap, and an operator fixing a conflicting
        // ConfigMap wants to see the result soon.
        .error_policy(|_err, _ctx| Action::requeue(Duration::from_secs(5)))
}

/// The name of a Greeting's ConfigMap.
pub fn configmap_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

/// The ConfigMap a Greeting wants: its message, owned by (and deleted with) the Greeting.
///
/// # Errors
/// [`Error::Incomplete`] when the Greeting has no uid or namespace.
pub fn desired_configmap(greeting: &Greeting) -> Result<ConfigMap, Error> {
    let incomplete = || Error::Incomplete(greeting.name_any());
    let mut owner = greeting.controller_owner_ref(&()).ok_or_else(incomplete)?;
    owner.block_owner_deletion = Some(true);
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(&greeting.name_any())),
            namespace: Some(greeting.namespace().ok_or_else(incomplete)?),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "message".to_owned(),
            greeting.spec.message.clone(),
        )])),
        ..ConfigMap::default()
    })
}

async fn reconcile(request: Request<Greeting>, ctx: Context) -> Result<Action, Error> {
    // A deleted Greeting's ConfigMap goes with it through its owner reference (garbage collection).
    let Some(greeting) = request.object() else {
        return Ok(Action::await_change());
    };
    let desired = desired_configmap(greeting)?;
    let namespace = desired.metadata.namespace.clone().unwrap_or_default();
    let name = desired.metadata.name.clone().unwrap_or_default();
    let existing = ctx
        .prefetched::<ConfigMap>()
        .map_err(Error::Prefetched)?
        .into_iter()
        .find(|c| c.name_any() == name);
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client(), &namespace);
    match existing {
        Some(current) if current.data == desired.data => {}
        Some(_) => {
            let patch = json!({ "data": { "message": greeting.spec.message } });
            configmaps
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::Kube)?;
        }
        None => {
            configmaps
                .create(&PostParams::default(), &desired)
                .await
                .map_err(Error::Kube)?;
            // Written in the background: an Event is a courtesy, nothing waits for it.
            ctx.recorder().event(
                greeting.as_ref(),
                EventType::Normal,
                "ConfigMapCreated",
                format!("created ConfigMap {name}"),
            );
        }
    }
    let generation = greeting.metadata.generation;
    if greeting.status.as_ref().and_then(|s| s.observed_generation) != generation {
        let greetings: Api<Greeting> = Api::namespaced(ctx.client(), &namespace);
        let patch = json!({ "status": { "observedGeneration": generation } });
        greetings
            .patch_status(
                request.name(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error::Kube)?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use flotilla_sdk::kube::client::Body;
    use http::{Method, Response};
    use parking_lot::Mutex;
    use serde_json::Value;

    use crate::resource::{GreetingSpec, GreetingStatus};

    use super::*;

    fn greeting(uid: Option<&str>) -> Greeting {
        let mut greeting = Greeting::new(
            "hello",
            GreetingSpec {
                message: "hi there".into(),
            },
        );
        greeting.metadata.namespace = Some("team-a".into());
        greeting.metadata.uid = uid.map(str::to_owned);
        greeting
    }

    /// A Greeting at generation 2 whose status says generation `observed` was handled.
    fn handled(observed: Option<i64>) -> Greeting {
        let mut greeting = greeting(Some("u-1"));
        greeting.metadata.generation = Some(2);
        greeting.status = Some(GreetingStatus {
            observed_generation: observed,
        });
        greeting
    }

    fn request(greeting: &Greeting) -> Request<Greeting> {
        Request::new(Some("team-a"), "hello").with_object(greeting.clone())
    }

    /// A mock Kubernetes API behind the reconcile's client: notes each request (method, path, JSON
    /// body) and answers a POST with the object posted, as the API server does, anything else with
    /// `answer`.
    #[derive(Clone)]
    struct MockApi {
        requests: Arc<Mutex<Vec<(Method, String, Value)>>>,
        /// Notified after each request is noted.
        changed: Arc<tokio::sync::Notify>,
        answer: Value,
    }

    impl MockApi {
        fn answering(answer: Value) -> Self {
            Self {
                requests: Arc::default(),
                changed: Arc::default(),
                answer,
            }
        }

        fn client(&self) -> kube::Client {
            let mock = self.clone();
            let service = tower::service_fn(move |request: http::Request<Body>| {
                let mock = mock.clone();
                async move {
                    let (parts, body) = request.into_parts();
                    let bytes = body.collect_bytes().await?;
                    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    let answer = if parts.method == Method::POST {
                        body.clone()
                    } else {
                        mock.answer.clone()
                    };
                    mock.requests
                        .lock()
                        .push((parts.method, parts.uri.path().to_owned(), body));
                    mock.changed.notify_waiters();
                    let answer = serde_json::to_vec(&answer).unwrap();
                    Ok::<_, kube::Error>(Response::new(Body::from(answer)))
                }
            });
            kube::Client::new(service, "default")
        }

        fn requests(&self) -> Vec<(Method, String, Value)> {
            self.requests.lock().clone()
        }
    }

    #[test]
    fn the_configmap_carries_the_message_and_a_blocking_controller_reference() {
        let configmap = desired_configmap(&greeting(Some("u-1"))).unwrap();
        assert_eq!(configmap.metadata.name.as_deref(), Some("hello-greeting"));
        assert_eq!(configmap.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(configmap.data.unwrap()["message"], "hi there");
        let owner = &configmap.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Greeting", "hello", "u-1")
        );
        assert_eq!(owner.api_version, "example.flotilla.dev/v1");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn a_greeting_without_a_uid_is_an_error_not_a_panic() {
        assert!(matches!(
            desired_configmap(&greeting(None)),
            Err(Error::Incomplete(_))
        ));
    }

    #[tokio::test]
    async fn a_handled_greeting_whose_prefetched_configmap_matches_makes_no_api_call() {
        let greeting = handled(Some(2));
        let configmap = desired_configmap(&greeting).unwrap();
        // No client given: any API call would fail the reconcile.
        let ctx = Context::for_test()
            .controller("greeting")
            .prefetched(&configmap)
            .build();
        let action = reconcile(request(&greeting), ctx).await.unwrap();
        assert_eq!(action, Action::await_change());
    }

    #[tokio::test]
    async fn a_changed_message_is_merged_into_the_prefetched_configmap() {
        let greeting = handled(Some(2));
        let mut stale = desired_configmap(&greeting).unwrap();
        stale.data = Some(BTreeMap::from([("message".into(), "old".into())]));
        let api = MockApi::answering(serde_json::to_value(&stale).unwrap());
        let ctx = Context::for_test()
            .client(api.client())
            .prefetched(&stale)
            .build();
        let action = reconcile(request(&greeting), ctx).await.unwrap();
        assert_eq!(action, Action::await_change());
        assert_eq!(
            api.requests(),
            [(
                Method::PATCH,
                "/api/v1/namespaces/team-a/configmaps/hello-greeting".to_owned(),
                json!({ "data": { "message": "hi there" } })
            )],
            "one merge patch, no create, no status write"
        );
    }

    #[tokio::test]
    async fn a_new_greeting_gets_its_configmap_an_event_and_its_observed_generation() {
        let greeting = handled(None);
        let api = MockApi::answering(serde_json::to_value(&greeting).unwrap());
        let ctx = Context::for_test()
            .controller("greeting")
            .client(api.client())
            .build();
        let action = reconcile(request(&greeting), ctx).await.unwrap();
        assert_eq!(action, Action::await_change());
        // The Event is written in the background: wait for it (bounded), then look at every request.
        let events_path = "/api/v1/namespaces/team-a/events";
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                // Registered before the check, so a request landing in between still wakes us.
                let changed = api.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if api
                    .requests()
                    .iter()
                    .any(|(_, path, _)| path == events_path)
                {
                    break;
                }
                changed.await;
            }
        })
        .await
        .expect("the Event is written within 10 s");
        let requests = api.requests();
        let (events, writes): (Vec<_>, Vec<_>) = requests
            .iter()
            .partition(|(_, path, _)| path == events_path);
        let calls: Vec<_> = writes
            .iter()
            .map(|(method, path, _)| (method.as_str(), path.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("POST", "/api/v1/namespaces/team-a/configmaps"),
                (
                    "PATCH",
                    "/apis/example.flotilla.dev/v1/namespaces/team-a/greetings/hello/status"
                ),
            ]
        );
        let created: ConfigMap = serde_json::from_value(writes[0].2.clone()).unwrap();
        assert_eq!(created, desired_configmap(&greeting).unwrap());
        let [(method, _, event)] = events.as_slice() else {
            panic!("one Event: {events:?}");
        };
        assert_eq!(*method, Method::POST);
        assert_eq!(event["reason"], "ConfigMapCreated");
        assert_eq!(event["source"]["component"], "greeting");
        assert_eq!(event["reportingComponent"], "greeting");
        assert_eq!(
            writes[1].2,
            json!({ "status": { "observedGeneration": 2 } })
        );
    }

    #[tokio::test]
    async fn a_deleted_greeting_is_left_to_garbage_collection() {
        let ctx = Context::for_test().build();
        let action = reconcile(Request::new(Some("team-a"), "hello"), ctx)
            .await
            .unwrap();
        assert_eq!(action, Action::await_change());
    }
}
