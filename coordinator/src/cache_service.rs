//! The `Cache` gRPC service: the workers' lister, answered from the leader's informer cache, only to the
//! fleet's live workers, each only for the kinds its own controllers declared, and with a bounded number
//! of List answers in flight.

use std::sync::Arc;

use flotilla_common::tls::{IdentityError, check_worker_identity};
use flotilla_common::{LabelSelector, ResourceKind, SelectorError, Verdict};
use flotilla_proto as proto;
use flotilla_proto::cache_server::{Cache, CacheServer};
use tonic::transport::CertificateDer;
use tonic::{Request, Response, Status};
use tracing::warn;

use crate::fleet::{AccessDenied, CacheAccess};
use crate::informer::IndexLookupError;
use crate::metrics::FleetMetrics;
use crate::{Informers, Store};

mod inflight;
mod until_sent;

pub use inflight::CacheListLimits;
use inflight::{BudgetExhausted, ListBudget};
pub use until_sent::HoldUntilSent;
use until_sent::SendPermit;

/// Why a Cache request was refused; mapped to a gRPC status at the edge.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheServiceError {
    #[error("request lacks a resource kind")]
    MissingKind,
    #[error("{0}")]
    InvalidKind(String),
    #[error("get needs a name")]
    MissingName,
    #[error("informer for {0} not synced yet")]
    NotSynced(ResourceKind),
    #[error("this coordinator does not lead; ask the leader")]
    NotLeader,
    #[error(
        "cache requests must carry {} and {} metadata",
        proto::WORKER_ID_METADATA,
        proto::LEASE_ID_METADATA
    )]
    NoIdentity,
    #[error("worker identity refused: {0}")]
    WrongCertificate(IdentityError),
    #[error(transparent)]
    Denied(#[from] AccessDenied),
    #[error(transparent)]
    Busy(BudgetExhausted),
    #[error(
        "unknown index {0:?}: expected \"namespace\", \"owner-uid\", \"node-name\" or an index a controller of the fleet declared for the kind"
    )]
    UnknownIndex(String),
    #[error(transparent)]
    AmbiguousIndex(IndexLookupError),
    #[error("invalid label_selector: {0}")]
    BadSelector(SelectorError),
}

impl From<CacheServiceError> for Status {
    fn from(error: CacheServiceError) -> Self {
        let message = error.to_string();
        match error {
            CacheServiceError::MissingKind
            | CacheServiceError::InvalidKind(_)
            | CacheServiceError::MissingName
            | CacheServiceError::UnknownIndex(_)
            | CacheServiceError::BadSelector(_) => Status::invalid_argument(message),
            CacheServiceError::NotSynced(_) | CacheServiceError::NotLeader => {
                Status::unavailable(message)
            }
            CacheServiceError::AmbiguousIndex(_) => Status::failed_precondition(message),
            CacheServiceError::NoIdentity => Status::unauthenticated(message),
            CacheServiceError::Denied(_) | CacheServiceError::WrongCertificate(_) => {
                Status::permission_denied(message)
            }
            CacheServiceError::Busy(_) => Status::resource_exhausted(message),
        }
    }
}

/// Where the service finds the current term's access view (`None` while this process does not lead).
pub type AccessSource = Arc<dyn Fn() -> Option<CacheAccess> + Send + Sync>;

/// The `Cache` service over the process's [`Informers`]. Build it with [`cache_service`].
#[derive(Clone)]
pub struct CacheService {
    informers: Informers,
    access: AccessSource,
    metrics: FleetMetrics,
    /// Room for List answers in flight.
    budget: ListBudget,
}

/// The `Cache` gRPC server over `informers`, accepting and sending messages up to
/// [`flotilla_proto::MAX_MESSAGE_BYTES`].
///
/// A request is answered only while `access` gives a view (this process leads), only for a worker
/// the view lists on the lease the request's metadata names, and only for a kind it lists; otherwise
/// `Unavailable`, `Unauthenticated` or `PermissionDenied`, counted in `flotilla_bad_input_total`. A
/// request never starts an informer; a declared kind not yet synced is `Unavailable` and the worker
/// retries. Malformed requests are `InvalidArgument`.
///
/// List answers in flight (built, or not yet handed to the connection) hold at most `limits`' bytes,
/// in total and per worker; a List that finds no room within `limits.wait` is `ResourceExhausted`,
/// counted as `cache_list_inflight` in `flotilla_bad_input_total`.
pub fn cache_service(
    informers: Informers,
    access: AccessSource,
    metrics: FleetMetrics,
    limits: CacheListLimits,
) -> HoldUntilSent<CacheServer<CacheService>> {
    HoldUntilSent::new(
        CacheServer::new(CacheService {
            informers,
            access,
            metrics,
            budget: ListBudget::new(limits),
        })
        .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(proto::MAX_MESSAGE_BYTES),
    )
}

/// The caller's worker id and lease from the request's metadata.
fn identity(metadata: &tonic::metadata::MetadataMap) -> Option<(String, i64)> {
    let worker = metadata.get(proto::WORKER_ID_METADATA)?.to_str().ok()?;
    let lease = metadata
        .get(proto::LEASE_ID_METADATA)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some((worker.to_owned(), lease))
}

impl CacheService {
    /// The synced store of the request's kind, if the caller may read it.
    fn synced_store(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        peer_certs: Option<&[CertificateDer<'static>]>,
        kind: Option<proto::ResourceKind>,
    ) -> Result<(ResourceKind, Store), CacheServiceError> {
        let checked = self.authorize(metadata, peer_certs, kind);
        if let Err(err) = &checked {
            let reason = match err {
                CacheServiceError::NoIdentity => Some("cache_no_identity"),
                CacheServiceError::WrongCertificate(_) => Some("tls_identity_mismatch"),
                CacheServiceError::Denied(AccessDenied::UnknownWorker { .. }) => {
                    Some("cache_unregistered_worker")
                }
                CacheServiceError::Denied(AccessDenied::UndeclaredKind(_)) => {
                    Some("cache_undeclared_kind")
                }
                _ => None,
            };
            if let Some(reason) = reason {
                let peer = identity(metadata).map_or_else(|| "anonymous".to_owned(), |(w, _)| w);
                if let Verdict::Log { suppressed } = self.metrics.refused(&peer, reason) {
                    warn!(peer, reason, suppressed, error = %err, "refusing a cache request");
                }
            }
        }
        checked
    }

    fn authorize(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        peer_certs: Option<&[CertificateDer<'static>]>,
        kind: Option<proto::ResourceKind>,
    ) -> Result<(ResourceKind, Store), CacheServiceError> {
        let access = (self.access)().ok_or(CacheServiceError::NotLeader)?;
        let (worker, lease) = identity(metadata).ok_or(CacheServiceError::NoIdentity)?;
        // With mTLS, the metadata's worker id must be the one the client certificate names.
        check_worker_identity(peer_certs, &worker).map_err(CacheServiceError::WrongCertificate)?;
        let kind = ResourceKind::from(kind.ok_or(CacheServiceError::MissingKind)?);
        kind.validate().map_err(CacheServiceError::InvalidKind)?;
        access.check(&worker, lease, &kind, |k| self.informers.store(k).is_some())?;
        match self.informers.store(&kind) {
            Some(store) if self.informers.is_synced(&kind) => Ok((kind, store)),
            _ => Err(CacheServiceError::NotSynced(kind)),
        }
    }
}

#[tonic::async_trait]
impl Cache for CacheService {
    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let peer_certs = request.peer_certs();
        let (metadata, _, request) = request.into_parts();
        let (kind, store) = self.synced_store(
            &metadata,
            peer_certs.as_deref().map(Vec::as_slice),
            request.kind,
        )?;
        if request.name.is_empty() {
            return Err(CacheServiceError::MissingName.into());
        }
        let namespace = Some(request.namespace.as_str()).filter(|ns| !ns.is_empty());
        let object = store.get(&kind.object_key(namespace, &request.name));
        Ok(Response::new(proto::GetResponse {
            object: object.map(|o| o.json.clone()),
        }))
    }

    async fn list(
        &self,
        request: Request<proto::ListRequest>,
    ) -> Result<Response<proto::ListResponse>, Status> {
        let peer_certs = request.peer_certs();
        let (metadata, _, request) = request.into_parts();
        let (kind, store) = self.synced_store(
            &metadata,
            peer_certs.as_deref().map(Vec::as_slice),
            request.kind.clone(),
        )?;
        let answer = list(&kind, &store, &request)?;
        // Building the answer only cloned references to cached objects; what costs memory is its
        // encoding and sending, which the permit covers (see `until_sent`).
        let bytes = answer.objects.iter().map(bytes::Bytes::len).sum();
        let worker = identity(&metadata).map_or_else(String::new, |(w, _)| w);
        let permit = match self.budget.acquire(&worker, bytes).await {
            Ok(permit) => permit,
            Err(busy) => {
                if let Verdict::Log { suppressed } =
                    self.metrics.refused(&worker, "cache_list_inflight")
                {
                    warn!(worker, %kind, bytes, in_flight = self.budget.in_flight_bytes(), suppressed,
                        error = %busy, "refusing a cache List: too many answers in flight");
                }
                return Err(CacheServiceError::Busy(busy).into());
            }
        };
        let mut response = Response::new(answer);
        response.extensions_mut().insert(SendPermit::new(permit));
        Ok(response)
    }
}

/// Answers a List from one synced store.
pub(crate) fn list(
    kind: &ResourceKind,
    store: &Store,
    request: &proto::ListRequest,
) -> Result<proto::ListResponse, CacheServiceError> {
    let selector =
        LabelSelector::parse(&request.label_selector).map_err(CacheServiceError::BadSelector)?;
    let resource_version = store.resource_version();
    let namespace = (!request.namespace.is_empty()).then_some(request.namespace.as_str());
    let candidates = match (request.index.as_str(), selector.required_label()) {
        // A selector requiring a label is answered from the label index (a namespaced kind is
        // always asked per namespace by its controllers; cluster-scoped objects have none).
        ("", Some((label, values))) if namespace.is_some() || !kind.namespaced => {
            store.by_label(namespace, label, values)
        }
        _ => match request.index.as_str() {
            "" if request.namespace.is_empty() => store.list(),
            "" | "namespace" if request.index_value.is_empty() => {
                store.by_namespace(&request.namespace)
            }
            "namespace" => store.by_namespace(&request.index_value),
            "owner-uid" => store.by_owner_uid(&request.index_value),
            "node-name" => store.by_node_name(&request.index_value),
            // A named index a controller declared (the built-in names cannot be declared).
            name => match store.by_index(name, &request.index_value) {
                Ok(objects) => objects,
                Err(IndexLookupError::Unknown(name)) => {
                    return Err(CacheServiceError::UnknownIndex(name));
                }
                Err(ambiguous) => return Err(CacheServiceError::AmbiguousIndex(ambiguous)),
            },
        },
    };
    let mut selected: Vec<_> = candidates
        .iter()
        .filter(|o| {
            request.namespace.is_empty()
                || o.namespace.as_deref() == Some(request.namespace.as_str())
        })
        .filter(|o| selector.matches(&o.labels))
        .map(|o| (page_key(o.namespace.as_deref(), &o.name), o))
        .filter(|(key, _)| request.r#continue.is_empty() || *key > request.r#continue)
        .collect();
    selected.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut objects = Vec::new();
    let mut bytes = 0;
    let mut next = String::new();
    for (i, (_, object)) in selected.iter().enumerate() {
        // Always at least one object, so every page makes progress (one object is at most etcd's
        // 1.5 MiB, far under the message limit).
        if i > 0 && bytes + object.json.len() > LIST_PAGE_BYTES {
            next.clone_from(&selected[i - 1].0);
            break;
        }
        bytes += object.json.len();
        objects.push(object.json.clone());
    }
    Ok(proto::ListResponse {
        objects,
        resource_version: resource_version.to_string(),
        r#continue: next,
    })
}

/// A List answer ends its page before it would pass this many bytes of objects, and says where to
/// continue: a quarter of the 16 MiB message limit, so a page never nears it whatever its objects
/// weigh, and the memory one answer holds stays small and bounded (a page of 4 MiB is still thousands of
/// ordinary objects, so most Lists are one page).
pub const LIST_PAGE_BYTES: usize = proto::MAX_MESSAGE_BYTES / 4;

/// The position of an object in a paged List: `namespace/name`, or `name` (cluster-scoped kinds).
fn page_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::CachedObject;

    fn pods() -> ResourceKind {
        ResourceKind::new("", "v1", "Pod", "pods", true)
    }

    fn store() -> Store {
        let store = Store::default();
        let pod = |ns: &str, name: &str, app: &str, owner: &str, node: &str, rv: u64| {
            let value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"),
                "resourceVersion": rv.to_string(), "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": true}]},
                "spec": {"nodeName": node}});
            Arc::new(CachedObject::from_value(&pods(), value).unwrap())
        };
        store.apply(pod("a", "web-1", "web", "rs-web", "n1", 10));
        store.apply(pod("a", "db-1", "db", "rs-db", "n2", 11));
        store.apply(pod("b", "web-2", "web", "rs-web2", "n1", 12));
        store
    }

    fn names(response: &proto::ListResponse) -> Vec<String> {
        response
            .objects
            .iter()
            .map(|o| {
                let v: serde_json::Value = serde_json::from_slice(o).unwrap();
                v["metadata"]["name"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    fn request(namespace: &str, selector: &str, index: &str, value: &str) -> proto::ListRequest {
        proto::ListRequest {
            kind: Some((&pods()).into()),
            namespace: namespace.into(),
            label_selector: selector.into(),
            index: index.into(),
            index_value: value.into(),
            ..Default::default()
        }
    }

    #[test]
    fn list_filters_by_namespace_selector_and_index() {
        let store = store();
        let cases = [
            (request("", "", "", ""), vec!["db-1", "web-1", "web-2"]),
            (request("a", "", "", ""), vec!["db-1", "web-1"]),
            (request("", "app=web", "", ""), vec!["web-1", "web-2"]),
            (request("a", "app in (web)", "", ""), vec!["web-1"]),
            // Answered from the label index: every value, in key order, the rest of the selector
            // still applies.
            (
                request("a", "app in (web, db)", "", ""),
                vec!["db-1", "web-1"],
            ),
            (
                request("a", "app in (web, db), app!=db", "", ""),
                vec!["web-1"],
            ),
            (request("b", "app=db", "", ""), vec![]),
            (request("", "", "node-name", "n1"), vec!["web-1", "web-2"]),
            (request("b", "", "node-name", "n1"), vec!["web-2"]),
            (request("", "", "owner-uid", "rs-db"), vec!["db-1"]),
            (request("", "", "namespace", "b"), vec!["web-2"]),
            (request("", "app!=web", "namespace", "b"), vec![]),
        ];
        for (req, want) in cases {
            let response = list(&pods(), &store, &req).unwrap();
            assert_eq!(names(&response), want, "{req:?}");
            assert_eq!(response.resource_version, "12");
        }
    }

    #[test]
    fn a_declared_index_answers_lists_by_its_name_and_an_ambiguous_one_is_refused() {
        let store = store();
        store.set_named_indexes(&[("by-app".to_owned(), "metadata.labels.app".to_owned())].into());
        let cases = [
            (request("", "", "by-app", "web"), vec!["web-1", "web-2"]),
            (request("b", "", "by-app", "web"), vec!["web-2"]),
            (request("", "", "by-app", "cache"), vec![]),
            // The built-in indexes keep answering beside the declared ones.
            (request("", "", "node-name", "n2"), vec!["db-1"]),
        ];
        for (req, want) in cases {
            assert_eq!(
                names(&list(&pods(), &store, &req).unwrap()),
                want,
                "{req:?}"
            );
        }
        store.set_named_indexes(
            &[
                ("by-app".to_owned(), "metadata.labels.app".to_owned()),
                ("by-app".to_owned(), "spec.nodeName".to_owned()),
            ]
            .into(),
        );
        let status =
            Status::from(list(&pods(), &store, &request("", "", "by-app", "web")).unwrap_err());
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("by-app"), "{}", status.message());
    }

    #[test]
    fn an_unknown_index_or_a_bad_selector_is_an_invalid_argument() {
        let store = store();
        let status =
            Status::from(list(&pods(), &store, &request("", "", "by-color", "red")).unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("by-color"),
            "{}",
            status.message()
        );
        let status =
            Status::from(list(&pods(), &store, &request("", "app in (", "", "")).unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("unbalanced parentheses"),
            "{}",
            status.message()
        );
    }

    fn unreachable_informers() -> Informers {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Informers::new(
            kube::Client::try_from(config).unwrap(),
            &mut Default::default(),
        )
    }

    fn secrets() -> ResourceKind {
        ResourceKind::new("", "v1", "Secret", "secrets", true)
    }

    /// A service whose access view lists worker `w0` on lease 7 reading the kind pods.
    fn service(informers: &Informers) -> (CacheService, FleetMetrics) {
        service_with(informers, &[("w0", 7, pods())], CacheListLimits::default())
    }

    /// A service whose access view lists each (worker, lease, kind it reads).
    fn service_with(
        informers: &Informers,
        workers: &[(&str, i64, ResourceKind)],
        limits: CacheListLimits,
    ) -> (CacheService, FleetMetrics) {
        let access = CacheAccess::default();
        access.publish(
            workers
                .iter()
                .map(|(worker, lease, kind)| {
                    let reads = crate::WorkerReads {
                        lease: *lease,
                        kinds: [kind.clone()].into(),
                        owner_graph: false,
                    };
                    ((*worker).to_owned(), reads)
                })
                .collect(),
        );
        let metrics = FleetMetrics::default();
        let service = CacheService {
            informers: informers.clone(),
            access: Arc::new(move || Some(access.clone())),
            metrics: metrics.clone(),
            budget: ListBudget::new(limits),
        };
        (service, metrics)
    }

    fn as_worker<T>(message: T, worker: &str, lease: &str) -> Request<T> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert(proto::WORKER_ID_METADATA, worker.parse().unwrap());
        metadata.insert(proto::LEASE_ID_METADATA, lease.parse().unwrap());
        request
    }

    fn get(kind: &ResourceKind) -> proto::GetRequest {
        proto::GetRequest {
            kind: Some(kind.into()),
            namespace: "a".into(),
            name: "p".into(),
        }
    }

    #[tokio::test]
    async fn a_declared_kind_not_synced_is_unavailable_and_a_request_never_starts_an_informer() {
        let informers = unreachable_informers();
        let (service, _) = service(&informers);
        let status = service
            .get(as_worker(get(&pods()), "w0", "7"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "informer for v1/pods not synced yet");
        assert!(
            informers.kinds().is_empty(),
            "a cache request must not start an informer"
        );
        informers.shutdown();
    }

    #[tokio::test]
    async fn strangers_unknown_leases_and_undeclared_kinds_are_refused_and_counted() {
        let informers = unreachable_informers();
        let (service, metrics) = service(&informers);
        let cases = [
            (Request::new(get(&pods())), tonic::Code::Unauthenticated),
            (
                as_worker(get(&pods()), "ghost", "7"),
                tonic::Code::PermissionDenied,
            ),
            (
                as_worker(get(&pods()), "w0", "8"),
                tonic::Code::PermissionDenied,
            ),
            (
                as_worker(get(&secrets()), "w0", "7"),
                tonic::Code::PermissionDenied,
            ),
        ];
        for (request, code) in cases {
            let status = service.get(request).await.unwrap_err();
            assert_eq!(status.code(), code, "{}", status.message());
        }
        let list = proto::ListRequest {
            kind: Some((&secrets()).into()),
            ..Default::default()
        };
        let status = service.list(as_worker(list, "w0", "7")).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(
            status.message().contains("v1/secrets"),
            "{}",
            status.message()
        );
        let counted = |reason: &str| {
            metrics
                .bad_input
                .get_or_create(&crate::metrics::ReasonLabel {
                    reason: reason.into(),
                })
                .get()
        };
        assert_eq!(counted("cache_no_identity"), 1);
        assert_eq!(counted("cache_unregistered_worker"), 2);
        assert_eq!(counted("cache_undeclared_kind"), 2);
        assert!(informers.kinds().is_empty());
        informers.shutdown();
    }

    #[tokio::test]
    async fn a_coordinator_that_does_not_lead_answers_nothing() {
        let informers = unreachable_informers();
        let service = CacheService {
            informers: informers.clone(),
            access: Arc::new(|| None),
            metrics: FleetMetrics::default(),
            budget: ListBudget::new(CacheListLimits::default()),
        };
        let status = service
            .get(as_worker(get(&pods()), "w0", "7"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        informers.shutdown();
    }

    #[tokio::test]
    async fn malformed_kinds_are_invalid_arguments() {
        let informers = unreachable_informers();
        let (service, _) = service(&informers);
        for kind in [
            None,
            Some(proto::ResourceKind {
                kind: "Pod".into(),
                ..Default::default()
            }),
        ] {
            let list = proto::ListRequest {
                kind,
                ..Default::default()
            };
            let status = service.list(as_worker(list, "w0", "7")).await.unwrap_err();
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{}",
                status.message()
            );
        }
        assert!(
            informers.kinds().is_empty(),
            "a malformed kind must not start an informer"
        );
    }

    fn configmaps() -> ResourceKind {
        ResourceKind::new("", "v1", "ConfigMap", "configmaps", true)
    }

    /// A Kubernetes API that lists `n` ConfigMaps of about 200 KB each in namespace `a` and whose
    /// watches never answer: the informer syncs at once and stays quiet.
    fn api_of_big_configmaps(n: usize) -> kube::Client {
        let service = tower::service_fn(
            move |request: http::Request<kube::client::Body>| async move {
                if request
                    .uri()
                    .query()
                    .is_some_and(|q| q.contains("watch=true"))
                {
                    std::future::pending::<()>().await;
                }
                let items: Vec<_> = (0..n)
                    .map(|i| {
                        json!({"metadata": {"name": format!("big-{i}"), "namespace": "a",
                        "uid": format!("u-{i}"), "resourceVersion": "1"},
                        "data": {"blob": "x".repeat(200_000)}})
                    })
                    .collect();
                let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "1"}, "items": items});
                let body = serde_json::to_vec(&list).unwrap_or_default();
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    body,
                )))
            },
        );
        kube::Client::new(service, "default")
    }

    /// Regression: concurrent Lists had no in-flight bound (200 Lists of 8.5 MB took a coordinator
    /// from 51 MB to 1.7 GB). Answers not yet sent hold their room; Lists beyond it are refused, each
    /// counted, and the room comes back when an answer is gone.
    #[tokio::test]
    async fn lists_beyond_the_in_flight_budget_are_refused_and_counted_until_answers_are_sent() {
        let informers = Informers::new(
            api_of_big_configmaps(5),
            &mut prometheus_client::registry::Registry::default(),
        );
        informers.ensure(&configmaps());
        let started = tokio::time::Instant::now();
        while !informers.is_synced(&configmaps()) {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "no sync"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Each answer is about 1 MB: two fit the budget, a third does not.
        let limits = CacheListLimits {
            total_bytes: 2 * 1024 * 1024 + 100_000,
            per_worker_bytes: 2 * 1024 * 1024 + 100_000,
            wait: std::time::Duration::ZERO,
        };
        let (service, metrics) = service_with(&informers, &[("w0", 7, configmaps())], limits);
        let list = || {
            as_worker(
                proto::ListRequest {
                    kind: Some((&configmaps()).into()),
                    ..Default::default()
                },
                "w0",
                "7",
            )
        };
        let first = service.list(list()).await.unwrap();
        assert_eq!(first.get_ref().objects.len(), 5);
        let second = service.list(list()).await.unwrap();
        let mut refused = 0;
        for _ in 0..10 {
            let status = service.list(list()).await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::ResourceExhausted);
            assert!(
                status.message().contains("--max-cache-list-inflight-bytes"),
                "{}",
                status.message()
            );
            refused += 1;
        }
        let counted = metrics
            .bad_input
            .get_or_create(&crate::metrics::ReasonLabel {
                reason: "cache_list_inflight".into(),
            })
            .get();
        assert_eq!(counted, refused);
        assert!(service.budget.in_flight_bytes() <= limits.total_bytes);
        // An answer sent (here: dropped) gives its room back.
        drop(first);
        service.list(list()).await.unwrap();
        drop(second);
        informers.shutdown();
    }
}
