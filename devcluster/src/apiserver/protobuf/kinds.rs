//! The kinds whose protobuf bodies devcluster decodes: one line per kind, naming the k8s-pb message
//! and the k8s-openapi type it converts into. Every built-in kind devcluster serves is listed; custom
//! resources never are (kube-apiserver has no protobuf form for them either).

use k8s_openapi::Resource;
use prost::Message;
use serde_json::Value;

use super::ProtobufError;
use super::convert::FromPb;

/// Decodes one kind's message bytes into its JSON object (with apiVersion and kind).
type Decoder = fn(&[u8]) -> Result<Value, ProtobufError>;

fn decode<P, O>(raw: &[u8]) -> Result<Value, ProtobufError>
where
    P: Message + Default,
    O: FromPb<P> + Resource + serde::Serialize,
{
    let message = P::decode(raw).map_err(|source| ProtobufError::Object {
        kind: O::KIND,
        source,
    })?;
    let object = O::from_pb(message)?;
    serde_json::to_value(object).map_err(|e| ProtobufError::Value(e.to_string()))
}

macro_rules! kinds {
    ($($($seg:ident)::+),* $(,)?) => {
        /// (apiVersion, kind, decoder) for every kind accepted as protobuf.
        static KINDS: &[(&str, &str, Decoder)] = &[$(
            (
                <k8s_openapi::$($seg)::+ as Resource>::API_VERSION,
                <k8s_openapi::$($seg)::+ as Resource>::KIND,
                decode::<k8s_pb::$($seg)::+, k8s_openapi::$($seg)::+>,
            ),
        )*];
    };
}

// The same path names the message in k8s-pb and the type in k8s-openapi.
kinds! {
    api::core::v1::ConfigMap,
    api::core::v1::Endpoints,
    api::core::v1::Event,
    api::core::v1::Namespace,
    api::core::v1::Node,
    api::core::v1::PersistentVolumeClaim,
    api::core::v1::Pod,
    api::core::v1::ReplicationController,
    api::core::v1::ResourceQuota,
    api::core::v1::Secret,
    api::core::v1::Service,
    api::core::v1::ServiceAccount,
    api::apps::v1::ControllerRevision,
    api::apps::v1::DaemonSet,
    api::apps::v1::Deployment,
    api::apps::v1::ReplicaSet,
    api::apps::v1::StatefulSet,
    api::authentication::v1::TokenRequest,
    api::authorization::v1::SelfSubjectAccessReview,
    api::autoscaling::v2::HorizontalPodAutoscaler,
    api::batch::v1::CronJob,
    api::batch::v1::Job,
    api::coordination::v1::Lease,
    api::discovery::v1::EndpointSlice,
    api::events::v1::Event,
    api::networking::v1::NetworkPolicy,
    api::policy::v1::PodDisruptionBudget,
    api::rbac::v1::ClusterRole,
    api::rbac::v1::ClusterRoleBinding,
    api::rbac::v1::Role,
    api::rbac::v1::RoleBinding,
    api::scheduling::v1::PriorityClass,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
}

/// The decoder for `api_version`/`kind`, if that kind is accepted as protobuf.
pub fn decoder(api_version: &str, kind: &str) -> Option<Decoder> {
    KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, d)| *d)
}

/// Every (apiVersion, kind) accepted as protobuf.
#[cfg(test)]
pub fn all() -> impl Iterator<Item = (&'static str, &'static str)> {
    KINDS.iter().map(|(v, k, _)| (*v, *k))
}
