//! The `Cache` gRPC service: the workers' lister, answered from the coordinator's informer cache.

use flotilla_common::{LabelSelector, ResourceKind, SelectorError};
use flotilla_proto as proto;
use flotilla_proto::cache_server::{Cache, CacheServer};
use tonic::{Request, Response, Status};

use crate::{Informers, Store};

/// Why a Cache request was refused; mapped to a gRPC status at the edge.
#[derive(Debug, thiserror::Error)]
enum CacheServiceError {
    #[error("request lacks a resource kind")]
    MissingKind,
    #[error("{0}")]
    InvalidKind(String),
    #[error("get needs a name")]
    MissingName,
    #[error("informer for {0} not synced yet")]
    NotSynced(ResourceKind),
    #[error("unknown index {0:?}: expected \"namespace\", \"owner-uid\" or \"node-name\"")]
    UnknownIndex(String),
    #[error("invalid label_selector: {0}")]
    BadSelector(SelectorError),
    #[error(
        "list of {kind} is {bytes} bytes, over the {limit} byte message limit: narrow it by namespace, selector or index"
    )]
    TooLarge {
        kind: ResourceKind,
        bytes: usize,
        limit: usize,
    },
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
            CacheServiceError::NotSynced(_) => Status::unavailable(message),
            CacheServiceError::TooLarge { .. } => Status::resource_exhausted(message),
        }
    }
}

/// The `Cache` service over the process's [`Informers`]. Build it with [`cache_service`].
#[derive(Debug, Clone)]
pub struct CacheService {
    informers: Informers,
}

/// The `Cache` gRPC server over `informers`, accepting and sending messages up to
/// [`flotilla_proto::MAX_MESSAGE_BYTES`].
///
/// A request for a kind no informer watches yet starts that informer and is answered
/// `Unavailable` until it has synced; the worker retries. Malformed requests are
/// `InvalidArgument`, a list too large for one message `ResourceExhausted`.
pub fn cache_service(informers: Informers) -> CacheServer<CacheService> {
    CacheServer::new(CacheService { informers })
        .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(proto::MAX_MESSAGE_BYTES)
}

impl CacheService {
    /// The synced store of the request's kind, starting its informer if needed.
    fn synced_store(
        &self,
        kind: Option<proto::ResourceKind>,
    ) -> Result<(ResourceKind, Store), CacheServiceError> {
        let kind = ResourceKind::from(kind.ok_or(CacheServiceError::MissingKind)?);
        kind.validate().map_err(CacheServiceError::InvalidKind)?;
        let Some(store) = self.informers.store(&kind) else {
            self.informers.ensure(&kind);
            return Err(CacheServiceError::NotSynced(kind));
        };
        if !self.informers.is_synced(&kind) {
            return Err(CacheServiceError::NotSynced(kind));
        }
        Ok((kind, store))
    }
}

#[tonic::async_trait]
impl Cache for CacheService {
    async fn get(
        &self,
        request: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let request = request.into_inner();
        let (kind, store) = self.synced_store(request.kind)?;
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
        let request = request.into_inner();
        let (kind, store) = self.synced_store(request.kind.clone())?;
        Ok(Response::new(list(&kind, &store, &request)?))
    }
}

/// Answers a List from one synced store.
fn list(
    kind: &ResourceKind,
    store: &Store,
    request: &proto::ListRequest,
) -> Result<proto::ListResponse, CacheServiceError> {
    let selector =
        LabelSelector::parse(&request.label_selector).map_err(CacheServiceError::BadSelector)?;
    let resource_version = store.resource_version();
    let candidates = match request.index.as_str() {
        "" if request.namespace.is_empty() => store.list(),
        "" | "namespace" if request.index_value.is_empty() => {
            store.by_namespace(&request.namespace)
        }
        "namespace" => store.by_namespace(&request.index_value),
        "owner-uid" => store.by_owner_uid(&request.index_value),
        "node-name" => store.by_node_name(&request.index_value),
        other => return Err(CacheServiceError::UnknownIndex(other.to_owned())),
    };
    let objects: Vec<bytes::Bytes> = candidates
        .iter()
        .filter(|o| {
            request.namespace.is_empty()
                || o.namespace.as_deref() == Some(request.namespace.as_str())
        })
        .filter(|o| selector.matches(&o.labels))
        .map(|o| o.json.clone())
        .collect();
    // Room for the response's framing next to the objects themselves.
    let limit = proto::MAX_MESSAGE_BYTES - 64 * 1024;
    let bytes: usize = objects.iter().map(bytes::Bytes::len).sum();
    if bytes > limit {
        return Err(CacheServiceError::TooLarge {
            kind: kind.clone(),
            bytes,
            limit,
        });
    }
    Ok(proto::ListResponse {
        objects,
        resource_version: resource_version.to_string(),
    })
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

    #[tokio::test]
    async fn a_request_for_a_kind_not_watched_yet_starts_its_informer_and_is_unavailable() {
        let informers = unreachable_informers();
        let service = CacheService {
            informers: informers.clone(),
        };
        let get = proto::GetRequest {
            kind: Some((&pods()).into()),
            namespace: "a".into(),
            name: "p".into(),
        };
        let status = service.get(Request::new(get.clone())).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "informer for v1/pods not synced yet");
        assert!(
            informers.store(&pods()).is_some(),
            "the informer was not started"
        );
        let status = service.get(Request::new(get)).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::Unavailable,
            "an unsynced informer must not answer"
        );
        informers.shutdown();
    }

    #[tokio::test]
    async fn malformed_kinds_are_invalid_arguments() {
        let informers = unreachable_informers();
        let service = CacheService {
            informers: informers.clone(),
        };
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
            let status = service.list(Request::new(list)).await.unwrap_err();
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
}
