//! Fuzz targets (`bolero::check!`) for every message the coordinator accepts from the network: the
//! Dispatch stream's `WorkerMessage` (Hello, Credit, DoneBatch) decoded and converted to the fleet's
//! types, controller specs as stored in etcd, and the Cache service's Get and List requests answered
//! from a small store. Under `cargo test` each runs its corpus and a few hundred random inputs; under
//! `cargo bolero test` it runs coverage-guided (README: Tests).
//!
//! Contracts checked: no input panics; a spec that converts survives the etcd round trip unchanged;
//! a converted Done keeps its error within [`MAX_ERROR_BYTES`]; a List page holds only objects its
//! selector matches.

use std::sync::Arc;

use flotilla_common::{LabelSelector, ResourceKind};
use flotilla_proto as proto;
use prost::Message;
use serde_json::json;

use super::messages::{ControllerSpec, Credit, Done, Hello, Limits, MAX_ERROR_BYTES};
use super::spec_codec;
use crate::{CachedObject, Store};

/// A spec that converted must come back equal from its etcd encoding.
fn round_trip(spec: &ControllerSpec) {
    let encoded = spec_codec::encode(spec);
    let decoded = proto::ControllerSpec::decode(encoded.as_slice())
        .unwrap_or_else(|e| panic!("{spec:?} encodes to bytes that do not decode: {e}"));
    let again = ControllerSpec::try_from(decoded.clone())
        .unwrap_or_else(|e| panic!("{spec:?} re-encoded as {decoded:?} fails: {e}"));
    assert_eq!(&again, spec);
}

#[test]
fn worker_messages() {
    let limits = Limits::default();
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            use proto::worker_message::Msg;
            if let Ok(spec) = proto::ControllerSpec::decode(bytes)
                && let Ok(spec) = ControllerSpec::try_from(spec)
            {
                round_trip(&spec);
            }
            let Ok(message) = proto::WorkerMessage::decode(bytes) else {
                return;
            };
            // What the decoded message re-encodes to decodes to the same message.
            assert_eq!(
                proto::WorkerMessage::decode(message.encode_to_vec().as_slice()).ok(),
                Some(message.clone())
            );
            match message.msg {
                Some(Msg::Hello(hello)) => {
                    if let Ok(hello) = Hello::from_proto(hello, &limits) {
                        for (spec, concurrency) in &hello.controllers {
                            assert!((1..=limits.max_concurrency).contains(concurrency));
                            round_trip(spec);
                        }
                    }
                }
                Some(Msg::Credit(credit)) => {
                    if let Ok(credit) = Credit::from_proto(credit, &limits) {
                        assert!((1..=limits.max_concurrency).contains(&credit.n));
                    }
                }
                Some(Msg::Done(batch)) => {
                    for done in batch.items {
                        if let Ok(done) = Done::try_from(done) {
                            assert!(done.error.len() <= MAX_ERROR_BYTES);
                        }
                    }
                }
                Some(Msg::Intents(batch)) => {
                    for intent in batch.items {
                        if let Ok(intent) = super::messages::WriteIntent::try_from(intent) {
                            assert!(!intent.name.is_empty() && !intent.name.contains('/'));
                        }
                    }
                }
                None => {}
            }
        });
}

fn pods() -> ResourceKind {
    ResourceKind::new("", "v1", "Pod", "pods", true)
}

/// Three pods in two namespaces with two label values, two owners and two nodes.
fn store() -> Store {
    let store = Store::default();
    for (i, (ns, name, app)) in [
        ("a", "web-1", "web"),
        ("a", "db-1", "db"),
        ("b", "web-2", "web"),
    ]
    .into_iter()
    .enumerate()
    {
        let value = json!({"metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}"),
            "resourceVersion": (10 + i).to_string(), "labels": {"app": app},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": format!("rs-{app}"), "controller": true}]},
            "spec": {"nodeName": format!("n{}", i % 2)}});
        if let Ok(object) = CachedObject::from_value(&pods(), value) {
            store.apply(Arc::new(object));
        }
    }
    store
}

#[test]
fn cache_requests() {
    // The store is only read: a panic cannot leave it half-changed.
    let store = std::panic::AssertUnwindSafe(store());
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            if let Ok(get) = proto::GetRequest::decode(bytes)
                && let Some(kind) = get.kind
            {
                let _ = ResourceKind::from(kind).validate();
            }
            let Ok(request) = proto::ListRequest::decode(bytes) else {
                return;
            };
            if let Some(kind) = request.kind.clone() {
                let _ = ResourceKind::from(kind).validate();
            }
            let Ok(response) = crate::cache_service::list(&pods(), &store, &request) else {
                return;
            };
            let selector = LabelSelector::parse(&request.label_selector)
                .unwrap_or_else(|e| panic!("{request:?} answered with a bad selector: {e}"));
            for json in &response.objects {
                let object = CachedObject::from_value(
                    &pods(),
                    serde_json::from_slice(json).unwrap_or_default(),
                )
                .unwrap_or_else(|e| panic!("{request:?} answered a bad object: {e}"));
                assert!(selector.matches(&object.labels), "{request:?}");
                if !request.namespace.is_empty() {
                    assert_eq!(
                        object.namespace.as_deref(),
                        Some(request.namespace.as_str())
                    );
                }
            }
        });
}
