//! Unit and property tests of the edge conversions in `messages.rs`.

use super::*;
use proptest::prelude::*;

#[test]
fn a_done_with_an_unreadable_write_still_finishes_and_names_the_write() {
    let write = |kind: &str| proto::Write {
        kind: Some(proto::ResourceKind {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            plural: "configmaps".into(),
            namespaced: true,
        }),
        key: "ns/a".into(),
        resource_version: "7".into(),
        op: proto::WriteOp::Update.into(),
    };
    let done = Done::try_from(proto::Done {
        item_id: 3,
        term: 1,
        outcome: proto::Outcome::Success.into(),
        writes: vec![write("ConfigMap"), write("")],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(done.writes.len(), 1);
    assert_eq!(done.writes[0].revision(), Some(7));
    assert_eq!(done.invalid_writes.len(), 1);
}

fn kind_strategy() -> impl Strategy<Value = Option<proto::ResourceKind>> {
    let part = || prop_oneof!["[a-z]{0,8}", "\\PC{0,70}", Just("a/b".to_owned())];
    proptest::option::of((part(), part(), part(), part(), any::<bool>()).prop_map(
        |(group, version, kind, plural, namespaced)| proto::ResourceKind {
            group,
            version,
            kind,
            plural,
            namespaced,
        },
    ))
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}",
        "\\PC{0,80}",
        (0usize..4).prop_map(|n| "w".repeat(60 + 100 * n)),
    ]
}

prop_compose! {
    fn spec_strategy()(
        name in name_strategy(),
        primary in kind_strategy(),
        watches in proptest::collection::vec(kind_strategy().prop_filter_map("some", |k| k), 0..3),
        resync_seconds in prop_oneof![Just(0u64), 0u64..200_000, Just(u64::MAX)],
        backoff_base_ms in prop_oneof![Just(0u64), any::<u64>()],
        backoff_max_ms in prop_oneof![Just(0u64), any::<u64>()],
        bucket_qps in prop_oneof![Just(0.0f64), any::<f64>()],
        bucket_burst in any::<u32>(),
        owner_graph in any::<bool>(),
    ) -> proto::ControllerSpec {
        proto::ControllerSpec {
            name, primary, mappings: vec![], prefetch_owned: vec![], watches, resync_seconds,
            backoff_base_ms, backoff_max_ms, bucket_qps, bucket_burst, owner_graph,
            indexes: vec![],
        }
    }
}

proptest! {
    /// Whatever bytes arrive, decoding and conversion end in a value or an error, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic_decoding_or_conversion(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        use prost::Message;
        let limits = Limits::default();
        if let Ok(message) = proto::WorkerMessage::decode(bytes.as_slice()) {
            match message.msg {
                Some(proto::worker_message::Msg::Hello(h)) => { let _ = Hello::from_proto(h, &limits); }
                Some(proto::worker_message::Msg::Credit(c)) => { let _ = Credit::from_proto(c, &limits); }
                Some(proto::worker_message::Msg::Done(batch)) => {
                    for d in batch.items { let _ = Done::try_from(d); }
                }
                Some(proto::worker_message::Msg::Intents(batch)) => {
                    for w in batch.items { let _ = WriteIntent::try_from(w); }
                }
                None => {}
            }
        }
        if let Ok(spec) = proto::ControllerSpec::decode(bytes.as_slice()) {
            let _ = ControllerSpec::try_from(spec);
        }
    }

    /// A Hello that converts keeps every bound the dispatcher relies on.
    #[test]
    fn a_converted_hello_is_within_every_bound(
        worker_id in name_strategy(),
        lease_id in any::<i64>(),
        controllers in proptest::collection::vec((spec_strategy(), any::<u32>()), 0..4),
        held_keys in proptest::collection::vec(prop_oneof!["[a-z/]{1,20}", (0usize..3).prop_map(|n| "k".repeat(1000 + n * 30))], 0..3),
    ) {
        let limits = Limits::default();
        let hello = proto::Hello {
            worker_id,
            lease_id,
            controllers: controllers
                .into_iter()
                .map(|(spec, concurrency)| proto::ControllerCapacity { spec: Some(spec), concurrency })
                .collect(),
            known_term: 0,
            held: held_keys
                .into_iter()
                .map(|key| proto::HeldItem { controller: "c".into(), key, ..Default::default() })
                .collect(),
        };
        if let Ok(h) = Hello::from_proto(hello, &limits) {
            prop_assert!(flotilla_common::validate_subdomain(&h.worker_id).is_ok());
            for (spec, concurrency) in &h.controllers {
                prop_assert!((1..=limits.max_concurrency).contains(concurrency));
                prop_assert!(flotilla_common::validate_label(&spec.name).is_ok());
                if let Some(resync) = spec.resync {
                    prop_assert!(RESYNC_RANGE.contains(&resync));
                    prop_assert!(std::time::Instant::now().checked_add(resync).is_some());
                }
                prop_assert!(spec.rate_limiter.validate().is_ok());
                prop_assert!(spec.kinds().iter().all(|k| k.validate().is_ok()));
            }
            prop_assert!(h.held.iter().all(|i| !i.key.is_empty() && i.key.len() <= MAX_KEY_BYTES));
            prop_assert!(h.held.len() <= h.controllers.iter().map(|(_, c)| *c as usize).sum::<usize>());
            let sum = h.controllers.iter().fold(0u32, |s, (_, c)| s.saturating_add(*c));
            prop_assert!(u64::from(sum) <= u64::from(limits.max_concurrency) * MAX_CONTROLLERS as u64);
        }
    }

    /// A Done or Credit that converts is bounded too.
    #[test]
    fn a_converted_done_or_credit_is_within_every_bound(
        outcome in 0i32..5,
        requeue_after_ms in any::<u64>(),
        error in prop_oneof!["\\PC{0,10}", (0usize..3).prop_map(|n| "é".repeat(2000 + n))],
        resource_version in prop_oneof!["[0-9]{1,25}", "\\PC{0,80}"],
        key in name_strategy(),
        credit_n in any::<u32>(),
        credit_controller in name_strategy(),
    ) {
        let done = proto::Done {
            item_id: 1,
            outcome,
            requeue_after_ms,
            writes: vec![proto::Write {
                kind: Some(proto::ResourceKind { group: String::new(), version: "v1".into(), kind: "ConfigMap".into(), plural: "configmaps".into(), namespaced: true }),
                key,
                resource_version,
                op: proto::WriteOp::Update.into(),
            }],
            error,
            term: 1,
        };
        if let Ok(d) = Done::try_from(done) {
            if let Outcome::RequeueAfter(after) = d.outcome {
                prop_assert!(after <= MAX_REQUEUE_AFTER);
            }
            prop_assert!(d.error.len() <= MAX_ERROR_BYTES);
            prop_assert!(d.writes.iter().all(|w| w.key.len() <= MAX_KEY_BYTES));
        }
        let limits = Limits::default();
        if let Ok(c) = Credit::from_proto(proto::Credit { controller: credit_controller, n: credit_n }, &limits) {
            prop_assert!((1..=limits.max_concurrency).contains(&c.n));
        }
    }
}

#[test]
fn a_hello_with_a_huge_worker_id_or_resync_or_concurrency_is_refused_naming_the_field() {
    let limits = Limits::default();
    let spec = |resync_seconds| proto::ControllerSpec {
        name: "journal".into(),
        primary: Some(proto::ResourceKind {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        }),
        resync_seconds,
        ..Default::default()
    };
    let hello = |worker_id: String, resync, concurrency| proto::Hello {
        worker_id,
        lease_id: 1,
        controllers: vec![proto::ControllerCapacity {
            spec: Some(spec(resync)),
            concurrency,
        }],
        ..Default::default()
    };
    let refused = |h| match Hello::from_proto(h, &limits) {
        Err(ConvertError::Invalid { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(refused(hello("w".repeat(2 << 20), 0, 1)), "hello.worker_id");
    assert_eq!(
        refused(hello("w0".into(), u64::MAX, 1)),
        "spec.resync_seconds"
    );
    assert_eq!(
        refused(hello("w0".into(), 0, u32::MAX)),
        "controllers.concurrency"
    );
    assert!(Hello::from_proto(hello("w0".into(), 30, 10_000), &limits).is_ok());
}

#[test]
fn a_done_with_an_unknown_outcome_is_refused() {
    let refused = Done::try_from(proto::Done {
        outcome: 99,
        ..Default::default()
    });
    assert!(refused.is_err());
}

fn configmaps() -> proto::ResourceKind {
    proto::ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        namespaced: true,
    }
}

fn nodes() -> proto::ResourceKind {
    proto::ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "Node".into(),
        plural: "nodes".into(),
        namespaced: false,
    }
}

/// A spec of a cluster-scoped primary (Nodes) with `mappings` and `indexes`.
fn spec_with(
    mappings: Vec<proto::Mapping>,
    indexes: Vec<proto::IndexSpec>,
) -> proto::ControllerSpec {
    proto::ControllerSpec {
        name: "rules".into(),
        primary: Some(nodes()),
        mappings,
        indexes,
        ..Default::default()
    }
}

fn field(field_path: &str, namespace_path: &str) -> proto::Mapping {
    proto::Mapping {
        kind: Some(configmaps()),
        rule: Some(proto::mapping::Rule::Field(proto::FieldRule {
            field_path: field_path.into(),
            namespace_path: namespace_path.into(),
        })),
    }
}

fn index(name: &str, field_path: &str) -> proto::IndexSpec {
    proto::IndexSpec {
        kind: Some(configmaps()),
        name: name.into(),
        field_path: field_path.into(),
    }
}

#[test]
fn fan_out_and_field_rules_with_or_without_a_namespace_path_convert() {
    let fan_out = proto::Mapping {
        kind: Some(configmaps()),
        rule: Some(proto::mapping::Rule::FanOut(proto::FanOutRule {})),
    };
    let spec = ControllerSpec::try_from(spec_with(
        vec![
            fan_out,
            field("data.node", ""),
            field("data.name", "data.namespace"),
        ],
        vec![],
    ))
    .unwrap();
    let rules: Vec<MappingRule> = spec.mappings.into_iter().map(|m| m.rule).collect();
    assert_eq!(
        rules,
        [
            MappingRule::FanOut,
            MappingRule::Field {
                field_path: "data.node".into(),
                namespace_path: None
            },
            MappingRule::Field {
                field_path: "data.name".into(),
                namespace_path: Some("data.namespace".into())
            },
        ]
    );
    let refused = ControllerSpec::try_from(spec_with(vec![field("data.name", "data..ns")], vec![]));
    assert!(
        matches!(
            refused,
            Err(ConvertError::Invalid {
                field: "mapping.namespace_path",
                ..
            })
        ),
        "{refused:?}"
    );
}

#[test]
fn an_old_workers_field_rule_without_a_namespace_path_decodes_as_same_namespace() {
    use prost::Message;
    // FieldRule as workers before namespace_path encoded it: field 1 only.
    #[derive(Clone, PartialEq, prost::Message)]
    struct OldFieldRule {
        #[prost(string, tag = "1")]
        field_path: String,
    }
    let old = OldFieldRule {
        field_path: "metadata.name".into(),
    }
    .encode_to_vec();
    let decoded = proto::FieldRule::decode(old.as_slice()).unwrap();
    let spec = ControllerSpec::try_from(spec_with(
        vec![proto::Mapping {
            kind: Some(configmaps()),
            rule: Some(proto::mapping::Rule::Field(decoded)),
        }],
        vec![],
    ))
    .unwrap();
    assert_eq!(
        spec.mappings[0].rule,
        MappingRule::Field {
            field_path: "metadata.name".into(),
            namespace_path: None
        }
    );
    assert!(spec.indexes.is_empty());
}

#[test]
fn named_indexes_convert_and_their_kinds_need_informers() {
    let spec =
        ControllerSpec::try_from(spec_with(vec![], vec![index("by-node", "data.node")])).unwrap();
    assert_eq!(spec.indexes.len(), 1);
    assert_eq!(spec.indexes[0].name, "by-node");
    assert_eq!(spec.indexes[0].field_path, "data.node");
    let kinds: Vec<String> = spec.kinds().iter().map(|k| k.kind.clone()).collect();
    assert_eq!(kinds, ["ConfigMap", "Node"]);
}

#[test]
fn a_bad_index_name_path_or_count_is_refused_naming_the_field_and_why() {
    let refused = |indexes| match ControllerSpec::try_from(spec_with(vec![], indexes)) {
        Err(ConvertError::Invalid { field, reason }) => (field, reason),
        other => panic!("{other:?}"),
    };
    let (field, reason) = refused(vec![index("By_Node", "data.node")]);
    assert_eq!(field, "index.name");
    assert!(reason.contains("By_Node"), "{reason}");
    let (field, reason) = refused(vec![index("owner-uid", "data.node")]);
    assert_eq!(field, "index.name");
    assert!(reason.contains("built-in"), "{reason}");
    let (field, reason) = refused(vec![
        index("by-node", "data.node"),
        index("by-node", "data.x"),
    ]);
    assert_eq!(field, "index.name");
    assert!(reason.contains("twice"), "{reason}");
    assert_eq!(
        refused(vec![index("by-node", ".data")]).0,
        "index.field_path"
    );
    assert_eq!(
        refused(vec![index(&"x".repeat(64), "data.node")]).0,
        "index.name"
    );
    let many = (0..=MAX_INDEXES)
        .map(|i| index(&format!("i{i}"), "data.node"))
        .collect();
    assert_eq!(refused(many).0, "spec.indexes");
    let missing_kind = proto::IndexSpec {
        kind: None,
        ..index("by-node", "data.node")
    };
    assert!(matches!(
        ControllerSpec::try_from(spec_with(vec![], vec![missing_kind])),
        Err(ConvertError::Missing("index.kind"))
    ));
}

#[test]
fn a_hello_whose_controllers_name_more_than_128_kinds_together_is_refused_before_any_informer_starts()
 {
    let kind = |i: usize| proto::ResourceKind {
        group: format!("g{i}.example.com"),
        version: "v1".into(),
        kind: "Thing".into(),
        plural: "things".into(),
        namespaced: true,
    };
    // Two controllers of 100 kinds each: each within its own bounds, 200 distinct kinds together.
    let controller = |name: &str, from: usize| proto::ControllerCapacity {
        spec: Some(proto::ControllerSpec {
            name: name.into(),
            primary: Some(kind(from)),
            watches: (from + 1..from + 100).map(kind).collect(),
            ..Default::default()
        }),
        concurrency: 1,
    };
    let hello = |controllers| proto::Hello {
        worker_id: "w0".into(),
        lease_id: 7,
        controllers,
        ..Default::default()
    };
    let limits = Limits::default();
    let err = Hello::from_proto(
        hello(vec![controller("a", 0), controller("b", 100)]),
        &limits,
    )
    .unwrap_err();
    assert!(err.to_string().contains("200 distinct kinds"), "{err}");
    assert!(err.to_string().contains("--max-worker-kinds"), "{err}");
    // The same kinds twice count once.
    assert!(
        Hello::from_proto(hello(vec![controller("a", 0), controller("b", 0)]), &limits).is_ok()
    );
}

#[test]
fn a_write_intent_names_its_object_by_cache_key_and_garbled_ones_are_refused() {
    let good = || proto::WriteIntent {
        group: "apps".into(),
        version: "v1".into(),
        resource: "replicasets".into(),
        namespace: "default".into(),
        name: "web-7957".into(),
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    };
    let intent = WriteIntent::try_from(good()).unwrap();
    assert_eq!(intent.object_key(), "default/web-7957");
    assert_eq!(intent.trace.traceparent(), good().traceparent);
    let node = WriteIntent::try_from(proto::WriteIntent {
        group: String::new(),
        resource: "nodes".into(),
        namespace: String::new(),
        name: "n1".into(),
        ..good()
    })
    .unwrap();
    assert_eq!(
        (node.namespace.as_deref(), node.object_key().as_str()),
        (None, "n1")
    );
    for (bad, field) in [
        (
            proto::WriteIntent {
                resource: String::new(),
                ..good()
            },
            "intent.resource",
        ),
        (
            proto::WriteIntent {
                version: "V1".into(),
                ..good()
            },
            "intent.version",
        ),
        (
            proto::WriteIntent {
                group: "a/b".into(),
                ..good()
            },
            "intent.group",
        ),
        (
            proto::WriteIntent {
                namespace: "Bad_NS".into(),
                ..good()
            },
            "intent.namespace",
        ),
        (
            proto::WriteIntent {
                name: "a/b".into(),
                ..good()
            },
            "intent.name",
        ),
        (
            proto::WriteIntent {
                name: String::new(),
                ..good()
            },
            "intent.name",
        ),
        (
            proto::WriteIntent {
                traceparent: "garbage".into(),
                ..good()
            },
            "intent.traceparent",
        ),
        (
            // Unsampled: carries nothing.
            proto::WriteIntent {
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".into(),
                ..good()
            },
            "intent.traceparent",
        ),
    ] {
        match WriteIntent::try_from(bad) {
            Err(ConvertError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}
