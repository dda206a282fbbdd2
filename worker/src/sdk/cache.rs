//! The reconcile's lister: typed reads from the leading coordinator's informer cache (`Cache` service).

use flotilla_proto as proto;
use kube::Resource;
use serde::de::DeserializeOwned;
use std::sync::Arc;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use super::kind::{KindScope, kind_of};

/// Errors of a cache read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The worker is between leaders; there is no cache to read.
    #[error("not connected to a coordinator")]
    NotConnected,
    /// The coordinator answered with an error.
    #[error("cache request failed")]
    Rpc(#[source] tonic::Status),
    /// An object in the answer is not a valid object of the requested kind.
    #[error("cache returned an object that is not a valid {kind}")]
    Decode {
        /// The kind asked for.
        kind: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// What to list: all of a kind, narrowed by namespace, label selector and one index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheQuery {
    namespace: Option<String>,
    label_selector: Option<String>,
    index: Option<(String, String)>,
}

impl CacheQuery {
    /// Everything of the kind, in every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only objects in `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Only objects whose labels match `selector` (Kubernetes label selector syntax).
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Only objects under `value` of the coordinator's index `name` (`namespace`, `owner-uid`, `node-name`).
    pub fn index(mut self, name: &str, value: &str) -> Self {
        self.index = Some((name.to_owned(), value.to_owned()));
        self
    }

    /// Objects whose controller ownerReference has `uid` (index `owner-uid`).
    pub fn owned_by(self, uid: &str) -> Self {
        self.index("owner-uid", uid)
    }
}

/// The welcomed leader's channel and who this worker is to it: the leader answers cache reads only for
/// a worker registered on the lease it names.
#[derive(Clone, Debug)]
pub(crate) struct CacheEndpoint {
    pub(crate) channel: Channel,
    pub(crate) worker_id: Arc<str>,
    pub(crate) lease_id: i64,
}

/// A client of the current leader's cache; cheap to clone.
#[derive(Clone, Default)]
pub struct CacheClient {
    endpoint: Option<CacheEndpoint>,
}

/// Adds the worker's identity to every request.
#[derive(Clone)]
struct Identify {
    worker: MetadataValue<Ascii>,
    lease: MetadataValue<Ascii>,
}

impl Interceptor for Identify {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        metadata.insert(proto::WORKER_ID_METADATA, self.worker.clone());
        metadata.insert(proto::LEASE_ID_METADATA, self.lease.clone());
        Ok(request)
    }
}

impl CacheClient {
    pub(crate) fn new(endpoint: Option<CacheEndpoint>) -> Self {
        Self { endpoint }
    }

    fn client(
        &self,
    ) -> Result<proto::cache_client::CacheClient<InterceptedService<Channel, Identify>>, CacheError>
    {
        let endpoint = self.endpoint.clone().ok_or(CacheError::NotConnected)?;
        // A worker id is checked at start-up (a DNS-1123 subdomain), so it is valid metadata; a failure
        // would be a bug, reported as a refused request rather than a panic.
        let worker = MetadataValue::try_from(&*endpoint.worker_id).map_err(|_| {
            CacheError::Rpc(tonic::Status::internal("worker id is not valid metadata"))
        })?;
        let identify = Identify {
            worker,
            lease: MetadataValue::from(endpoint.lease_id),
        };
        Ok(
            proto::cache_client::CacheClient::with_interceptor(endpoint.channel, identify)
                .max_decoding_message_size(proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(proto::MAX_MESSAGE_BYTES),
        )
    }

    /// The cached object `namespace/name` (`namespace` is ignored for cluster-scoped kinds).
    ///
    /// # Errors
    /// [`CacheError`] when there is no leader, the request fails, or the object does not decode.
    pub async fn get<T>(&self, namespace: Option<&str>, name: &str) -> Result<Option<T>, CacheError>
    where
        T: Resource<DynamicType = ()> + DeserializeOwned,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        let request = proto::GetRequest {
            kind: Some((&kind).into()),
            namespace: namespace.unwrap_or_default().to_owned(),
            name: name.to_owned(),
        };
        let response = self
            .client()?
            .get(request)
            .await
            .map_err(CacheError::Rpc)?
            .into_inner();
        response
            .object
            .map(|bytes| decode(&kind.kind, &bytes))
            .transpose()
    }

    /// The cached objects that `query` selects.
    ///
    /// # Errors
    /// [`CacheError`] when there is no leader, the request fails, or an object does not decode.
    pub async fn list<T>(&self, query: &CacheQuery) -> Result<Vec<T>, CacheError>
    where
        T: Resource<DynamicType = ()> + DeserializeOwned,
        T::Scope: KindScope,
    {
        let kind = kind_of::<T>();
        let (index, index_value) = query.index.clone().unwrap_or_default();
        let request = proto::ListRequest {
            kind: Some((&kind).into()),
            namespace: query.namespace.clone().unwrap_or_default(),
            label_selector: query.label_selector.clone().unwrap_or_default(),
            index,
            index_value,
        };
        let response = self
            .client()?
            .list(request)
            .await
            .map_err(CacheError::Rpc)?
            .into_inner();
        response
            .objects
            .iter()
            .map(|bytes| decode(&kind.kind, bytes))
            .collect()
    }
}

fn decode<T: DeserializeOwned>(kind: &str, bytes: &[u8]) -> Result<T, CacheError> {
    serde_json::from_slice(bytes).map_err(|source| CacheError::Decode {
        kind: kind.to_owned(),
        source,
    })
}
