//! The write-recording layer: every object a reconcile creates, updates or deletes through its
//! `kube::Client` is noted (kind, key, resourceVersion, operation) in the SDK's `WriteJournal`, so
//! that Done can report it and the coordinator can hold the key back until its cache has seen the
//! writes (read-your-writes).
//!
//! The layer sits in a client built for one reconcile: kube's `Client` runs its stack behind a tower
//! `Buffer` task, so task-locals of the reconcile never reach the inner services.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};

use flotilla_common::ResourceKind;
use flotilla_sdk::host::{Write, WriteJournal, WriteOp};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use serde::Deserialize;
use tower::{BoxError, Layer, Service, ServiceExt};

use super::kube_stack::HttpBody;

/// The kinds the worker's controllers declared, by (group, version, plural), so that a write seen only
/// as a URL (a delete answered with a `Status`) still gets its kind name.
#[derive(Debug, Default)]
pub(crate) struct KindTable {
    kinds: HashMap<(String, String, String), ResourceKind>,
}

impl KindTable {
    pub(crate) fn new(kinds: impl IntoIterator<Item = ResourceKind>) -> Self {
        let kinds = kinds
            .into_iter()
            .map(|k| ((k.group.clone(), k.version.clone(), k.plural.clone()), k))
            .collect();
        Self { kinds }
    }

    fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceKind> {
        self.kinds
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
    }
}

/// Records the successful writes that pass through into a [`WriteJournal`].
#[derive(Clone)]
pub(crate) struct RecordingLayer {
    journal: WriteJournal,
    kinds: Arc<KindTable>,
}

impl RecordingLayer {
    pub(crate) fn new(journal: WriteJournal, kinds: Arc<KindTable>) -> Self {
        Self { journal, kinds }
    }
}

impl<S> Layer<S> for RecordingLayer {
    type Service = Recording<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Recording {
            inner,
            journal: self.journal.clone(),
            kinds: self.kinds.clone(),
        }
    }
}

/// The service of [`RecordingLayer`].
#[derive(Clone)]
pub(crate) struct Recording<S> {
    inner: S,
    journal: WriteJournal,
    kinds: Arc<KindTable>,
}

impl<S, B> Service<Request<B>> for Recording<S>
where
    S: Service<Request<B>, Response = Response<HttpBody>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = Response<HttpBody>;
    type Error = BoxError;
    type Future = futures::future::BoxFuture<'static, Result<Response<HttpBody>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let op = match *request.method() {
            Method::POST => Some(WriteOp::Create),
            Method::PUT | Method::PATCH => Some(WriteOp::Update),
            Method::DELETE => Some(WriteOp::Delete),
            _ => None,
        };
        let Some(op) = op else {
            return Box::pin(self.inner.call(request));
        };
        let path = request.uri().path().to_owned();
        // The inner service was polled ready on `self.inner`; take it and leave a fresh clone behind.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let journal = self.journal.clone();
        let kinds = self.kinds.clone();
        Box::pin(async move {
            let response = inner.oneshot(request).await?;
            if !response.status().is_success() {
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await?.to_bytes();
            journal.record(writes_of(op, &path, &bytes, &kinds));
            let body: HttpBody = Full::new(bytes).map_err(|never| match never {}).boxed();
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// Where a request points, from its URL path.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

fn parse_path(path: &str) -> Option<Target<'_>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        // `namespaces/<ns>` alone, or with its own subresources (`finalize`, `status`), is the
        // cluster-scoped Namespace object itself.
        ["namespaces", _, plural, ..]
            if !matches!(*plural, "finalize" | "status") || rest.len() > 3 =>
        {
            (Some(rest[1]), &rest[2..])
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub, ..] => (*plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    Some(Target {
        group,
        version,
        namespace,
        plural,
        name,
        subresource,
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta {
    name: String,
    namespace: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Answer {
    kind: String,
    metadata: Meta,
    items: Vec<Answer>,
}

/// The writes a successful answer to `op` on `path` proves.
fn writes_of(op: WriteOp, path: &str, body: &[u8], kinds: &KindTable) -> Vec<Write> {
    let Some(target) = parse_path(path) else {
        return Vec::new();
    };
    let answer: Answer = serde_json::from_slice(body).unwrap_or_default();
    // A kind the controllers did not declare is named by the answer. When the answer does not name it
    // (a delete answered with a `Status`), the write is left out: the coordinator refuses a Done with a
    // nameless kind, and an informer could not match one anyway (kinds compare by name too).
    let kind = |answer_kind: &str| match kinds.get(target.group, target.version, target.plural) {
        Some(kind) => Some(kind.clone()),
        None if answer_kind.is_empty()
            || answer_kind == "Status"
            || answer_kind.ends_with("List") =>
        {
            None
        }
        None => Some(ResourceKind::new(
            target.group,
            target.version,
            answer_kind,
            target.plural,
            target.namespace.is_some(),
        )),
    };
    let key_of = |kind: &ResourceKind, namespace: Option<&str>, name: &str| {
        kind.object_key(target.namespace.or(namespace), name)
    };
    match (op, target.name) {
        // deletecollection: the answer lists what was deleted. Items of built-in kinds carry no
        // `kind`; the list's kind (`ConfigMapList`) names them.
        (WriteOp::Delete, None) => answer
            .items
            .iter()
            .filter_map(|item| {
                let item_kind = if item.kind.is_empty() {
                    answer.kind.strip_suffix("List").unwrap_or_default()
                } else {
                    item.kind.as_str()
                };
                let kind = kind(item_kind)?;
                Some(Write {
                    key: key_of(
                        &kind,
                        item.metadata.namespace.as_deref(),
                        &item.metadata.name,
                    ),
                    kind,
                    resource_version: item.metadata.resource_version.clone(),
                    op: WriteOp::Delete,
                })
            })
            .collect(),
        (_, None) => {
            if answer.metadata.name.is_empty() {
                return Vec::new();
            }
            let Some(kind) = kind(&answer.kind) else {
                return Vec::new();
            };
            vec![Write {
                key: key_of(
                    &kind,
                    answer.metadata.namespace.as_deref(),
                    &answer.metadata.name,
                ),
                kind,
                resource_version: answer.metadata.resource_version,
                op,
            }]
        }
        (_, Some(name)) => {
            // A write to a subresource (status, scale, eviction, binding) changes the parent object.
            let op = if target.subresource.is_some() && op == WriteOp::Create {
                WriteOp::Update
            } else {
                op
            };
            let is_status = answer.kind == "Status";
            if is_status && op != WriteOp::Delete {
                return Vec::new();
            }
            let Some(kind) = kind(&answer.kind) else {
                return Vec::new();
            };
            let resource_version = if is_status {
                String::new()
            } else {
                answer.metadata.resource_version
            };
            vec![Write {
                key: key_of(&kind, None, name),
                kind,
                resource_version,
                op,
            }]
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;

    use http::StatusCode;

    use super::*;

    fn configmaps() -> KindTable {
        KindTable::new([ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)])
    }

    fn configmap_kind() -> ResourceKind {
        ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
    }

    #[test]
    fn a_create_in_a_collection_is_recorded_with_the_name_the_server_gave() {
        let body = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"p-child-x7k2p","namespace":"ns","resourceVersion":"42"}}"#;
        let writes = writes_of(
            WriteOp::Create,
            "/api/v1/namespaces/ns/configmaps",
            body,
            &configmaps(),
        );
        assert_eq!(
            writes,
            vec![Write {
                kind: configmap_kind(),
                key: "ns/p-child-x7k2p".into(),
                resource_version: "42".into(),
                op: WriteOp::Create
            }]
        );
    }

    #[test]
    fn a_status_patch_is_an_update_of_the_object() {
        let body = br#"{"kind":"Greeting","metadata":{"name":"g","namespace":"ns","resourceVersion":"7"}}"#;
        let writes = writes_of(
            WriteOp::Update,
            "/apis/example.flotilla.dev/v1/namespaces/ns/greetings/g/status",
            body,
            &KindTable::default(),
        );
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0].kind,
            ResourceKind::new("example.flotilla.dev", "v1", "Greeting", "greetings", true)
        );
        assert_eq!(writes[0].key, "ns/g");
        assert_eq!(writes[0].resource_version, "7");
        assert_eq!(writes[0].op, WriteOp::Update);
    }

    #[test]
    fn a_delete_answered_with_a_status_is_recorded_without_a_resource_version() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"d","group":"apps","kind":"deployments"}}"#;
        let kinds = KindTable::new([ResourceKind::new(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
        )]);
        let writes = writes_of(
            WriteOp::Delete,
            "/apis/apps/v1/namespaces/ns/deployments/d",
            body,
            &kinds,
        );
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].kind.kind, "Deployment");
        assert_eq!(writes[0].key, "ns/d");
        assert_eq!(writes[0].resource_version, "");
        assert_eq!(writes[0].op, WriteOp::Delete);
    }

    #[test]
    fn a_delete_answered_with_the_object_keeps_its_resource_version() {
        let body = br#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","resourceVersion":"611","deletionTimestamp":"x"}}"#;
        let writes = writes_of(
            WriteOp::Delete,
            "/api/v1/namespaces/ns/configmaps/c",
            body,
            &configmaps(),
        );
        assert_eq!(writes[0].resource_version, "611");
        assert_eq!(writes[0].op, WriteOp::Delete);
    }

    #[test]
    fn a_cluster_scoped_write_is_keyed_by_name_alone() {
        let body = br#"{"kind":"Namespace","metadata":{"name":"team-a","resourceVersion":"9"}}"#;
        let writes = writes_of(
            WriteOp::Update,
            "/api/v1/namespaces/team-a",
            body,
            &KindTable::default(),
        );
        assert_eq!(writes[0].key, "team-a");
        assert_eq!(writes[0].kind.plural, "namespaces");
        assert!(!writes[0].kind.namespaced);
        let finalize = writes_of(
            WriteOp::Update,
            "/api/v1/namespaces/team-a/finalize",
            body,
            &KindTable::default(),
        );
        assert_eq!(finalize[0].key, "team-a");
        assert_eq!(finalize[0].kind.plural, "namespaces");
    }

    #[test]
    fn a_delete_collection_records_every_deleted_item() {
        let body = br#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}},{"metadata":{"name":"b","namespace":"ns","resourceVersion":"2"}}]}"#;
        let writes = writes_of(
            WriteOp::Delete,
            "/api/v1/namespaces/ns/configmaps",
            body,
            &configmaps(),
        );
        let keys: Vec<_> = writes.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(keys, ["ns/a", "ns/b"]);
    }

    #[test]
    fn a_delete_collection_of_an_undeclared_kind_names_its_items_by_the_list_kind() {
        let body = br#"{"kind":"SecretList","apiVersion":"v1","items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}]}"#;
        let writes = writes_of(
            WriteOp::Delete,
            "/api/v1/namespaces/ns/secrets",
            body,
            &KindTable::default(),
        );
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0].kind,
            ResourceKind::new("", "v1", "Secret", "secrets", true)
        );
        assert_eq!(writes[0].key, "ns/a");
    }

    #[test]
    fn a_delete_of_an_undeclared_kind_answered_with_a_status_records_nothing() {
        // Regression: it was recorded with an empty kind, which made the coordinator refuse the whole
        // Done and keep the key held until the worker reconnected.
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"s","kind":"secrets"}}"#;
        let writes = writes_of(
            WriteOp::Delete,
            "/api/v1/namespaces/ns/secrets/s",
            body,
            &KindTable::default(),
        );
        assert!(writes.is_empty());
    }

    #[test]
    fn paths_outside_the_resource_api_record_nothing() {
        assert!(writes_of(WriteOp::Create, "/healthz", b"{}", &KindTable::default()).is_empty());
    }

    fn answering(
        status: StatusCode,
        body: &'static str,
    ) -> impl Service<
        Request<()>,
        Response = Response<HttpBody>,
        Error = BoxError,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        tower::service_fn(move |_req: Request<()>| async move {
            let body: HttpBody = Full::new(Bytes::from_static(body.as_bytes()))
                .map_err(|n: Infallible| match n {})
                .boxed();
            let mut response = Response::new(body);
            *response.status_mut() = status;
            Ok::<_, BoxError>(response)
        })
    }

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[tokio::test]
    async fn the_layer_records_a_successful_post_and_still_returns_the_whole_body() {
        let journal = WriteJournal::default();
        let body = r#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","resourceVersion":"5"}}"#;
        let service = RecordingLayer::new(journal.clone(), Arc::new(configmaps()))
            .layer(answering(StatusCode::CREATED, body));
        let response = service
            .oneshot(request(Method::POST, "/api/v1/namespaces/ns/configmaps"))
            .await
            .unwrap();
        let returned = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(returned, body.as_bytes());
        let writes = journal.take();
        assert_eq!(writes.len(), 1);
        assert_eq!(
            (writes[0].key.as_str(), writes[0].op),
            ("ns/c", WriteOp::Create)
        );
    }

    #[tokio::test]
    async fn the_layer_records_puts_patches_and_deletes_with_their_operation() {
        let journal = WriteJournal::default();
        let body = r#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","resourceVersion":"6"}}"#;
        let layer = RecordingLayer::new(journal.clone(), Arc::new(configmaps()));
        for method in [Method::PUT, Method::PATCH, Method::DELETE] {
            let service = layer.layer(answering(StatusCode::OK, body));
            service
                .oneshot(request(method, "/api/v1/namespaces/ns/configmaps/c"))
                .await
                .unwrap();
        }
        let ops: Vec<_> = journal.take().iter().map(|w| w.op).collect();
        assert_eq!(ops, [WriteOp::Update, WriteOp::Update, WriteOp::Delete]);
    }

    #[tokio::test]
    async fn the_layer_ignores_reads_and_failed_writes() {
        let journal = WriteJournal::default();
        let layer = RecordingLayer::new(journal.clone(), Arc::new(configmaps()));
        let ok = r#"{"kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","resourceVersion":"6"}}"#;
        layer
            .layer(answering(StatusCode::OK, ok))
            .oneshot(request(Method::GET, "/api/v1/namespaces/ns/configmaps/c"))
            .await
            .unwrap();
        let conflict = r#"{"kind":"Status","status":"Failure","code":409}"#;
        layer
            .layer(answering(StatusCode::CONFLICT, conflict))
            .oneshot(request(Method::PUT, "/api/v1/namespaces/ns/configmaps/c"))
            .await
            .unwrap();
        assert!(journal.take().is_empty());
    }
}
