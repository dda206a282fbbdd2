//! ControllerRevisions, the history of a DaemonSet's or StatefulSet's templates (upstream
//! `pkg/controller/history`): naming and hashing a revision, telling equal ones apart, ordering them,
//! and creating one whose name may already be taken by another.
//!
//! A revision's hash is upstream's `HashControllerRevision`: FNV-1 (32 bit; Go's `fnv.New32`, not
//! FNV-1a) over the revision data's JSON bytes, then the collision count in decimal when one is given,
//! rendered with `rand.SafeEncodeString`'s alphabet. The bytes are those Go's `json.Marshal` writes
//! for the data as a map: object keys sorted, no spaces, `<`, `>`, `&`, U+2028 and U+2029 escaped. So
//! data that is byte-for-byte what kube-controller-manager built (a template patch with its
//! `"creationTimestamp": null`) hashes to the name kube-controller-manager gave it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::ControllerRevision;
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, PostParams};
use serde_json::Value;

/// The label upstream's `NewControllerRevision` puts the hash in (`ControllerRevisionHashLabel`,
/// `controller.kubernetes.io/hash`; StatefulSet revisions carry it). A DaemonSet's revisions carry
/// theirs in `controller-revision-hash` instead ([`DAEMONSET_HASH_LABEL`]), as upstream's DaemonSet
/// controller builds them itself.
pub(crate) const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Upstream's `DefaultDaemonSetUniqueLabelKey` and `StatefulSetRevisionLabel`
/// (`controller-revision-hash`): on a DaemonSet's revisions and pods the hash, on a StatefulSet's pods
/// the revision's name.
pub(crate) const DAEMONSET_HASH_LABEL: &str = "controller-revision-hash";

/// The longest parent name kept in a revision name (upstream truncates at 223 bytes so that
/// `-<hash>` fits in 253).
const MAX_PREFIX: usize = 223;

/// Consonants and digits only (upstream `rand.SafeEncodeString`): no words, no look-alikes.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

/// How many names [`create_revision`] tries before it gives up: upstream loops until one is free or
/// equal; a bound keeps a server that answers AlreadyExists to everything from spinning a worker.
const MAX_COLLISIONS: u32 = 64;

/// Errors of writing revisions.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HistoryError {
    /// The API refused the create, or the read of the revision holding the name.
    #[error("cannot create controller revision {name}")]
    Create {
        /// The name tried.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Every name tried was taken by a revision with other data.
    #[error("{tries} controller revision names of {parent} were taken by other revisions")]
    Collisions {
        /// The parent's name.
        parent: String,
        /// How many names were tried.
        tries: u32,
    },
}

/// The object a revision belongs to: what its controller reference names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentRef {
    /// `apps/v1`.
    pub(crate) api_version: String,
    /// `DaemonSet` or `StatefulSet`.
    pub(crate) kind: String,
    /// The parent's name (the revision names start with it).
    pub(crate) name: String,
    /// The parent's namespace (the revisions live there).
    pub(crate) namespace: String,
    /// The parent's uid.
    pub(crate) uid: String,
}

impl ParentRef {
    /// The controller reference a revision carries: controller and blocking the owner's foreground
    /// deletion.
    pub(crate) fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// Upstream `HashControllerRevision`: FNV-1 over `data`'s canonical JSON (see the module doc), then
/// `collision_count` in decimal when `Some` (zero included, as upstream writes any non-nil count).
pub(crate) fn hash_revision(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = Vec::new();
    write_go_json(data, &mut bytes);
    let mut hash = fnv1(FNV_OFFSET, &bytes);
    if let Some(count) = collision_count {
        hash = fnv1(hash, count.to_string().as_bytes());
    }
    safe_encode(&hash.to_string())
}

/// Upstream `ControllerRevisionName`: `{parent}-{hash}`, the parent name cut to 223 bytes (at a
/// character boundary) so the result is a valid object name.
pub(crate) fn revision_name(parent_name: &str, hash: &str) -> String {
    let mut end = parent_name.len().min(MAX_PREFIX);
    while !parent_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &parent_name[..end])
}

/// Upstream `NewControllerRevision`: a revision of `parent` holding `data` at `revision`, labelled
/// with `template_labels` plus the hash under [`CONTROLLER_REVISION_HASH_LABEL`], controlled by
/// `parent`, named by [`revision_name`] with the hash of `data` and `collision_count`.
pub(crate) fn new_revision(
    parent: &ParentRef,
    template_labels: &BTreeMap<String, String>,
    data: Value,
    revision: i64,
    collision_count: Option<i32>,
) -> ControllerRevision {
    let hash = hash_revision(&data, collision_count);
    let mut labels = template_labels.clone();
    labels.insert(CONTROLLER_REVISION_HASH_LABEL.to_owned(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&parent.name, &hash)),
            namespace: Some(parent.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![parent.controller_ref()]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision,
    }
}

/// Upstream `EqualRevision`: the same data. Hash labels that both parse as numbers and differ say no
/// at once (upstream's shortcut); otherwise the data decide, compared as canonical JSON, so key order
/// does not matter.
pub(crate) fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    let hash = |r: &ControllerRevision| {
        r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CONTROLLER_REVISION_HASH_LABEL))
            .and_then(|h| h.parse::<i64>().ok())
    };
    if let (Some(x), Some(y)) = (hash(a), hash(b))
        && x != y
    {
        return false;
    }
    data_bytes(a) == data_bytes(b)
}

/// Upstream `FindEqualRevisions`: the revisions of `revs` equal to `needle`, in their order.
pub(crate) fn find_equal_revisions<'a>(
    revs: &'a [ControllerRevision],
    needle: &ControllerRevision,
) -> Vec<&'a ControllerRevision> {
    revs.iter().filter(|r| equal_revision(r, needle)).collect()
}

/// The revision number after the highest of `revs`; 1 when there are none.
pub(crate) fn next_revision(revs: &[ControllerRevision]) -> i64 {
    revs.iter().map(|r| r.revision).max().map_or(1, |m| m + 1)
}

/// Upstream `SortControllerRevisions`: by revision, ties by creation time, then by name (stable).
pub(crate) fn sort_revisions(revs: &mut [ControllerRevision]) {
    revs.sort_by(compare_revisions);
}

fn compare_revisions(a: &ControllerRevision, b: &ControllerRevision) -> Ordering {
    let created = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    a.revision
        .cmp(&b.revision)
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Upstream `realHistory.CreateControllerRevision`: creates `revision` under the name its data and
/// `collision_count` hash to; when that name is taken by a revision with the same data, that one is
/// the result; when by another, `collision_count` goes up and the next name is tried. The caller
/// stores the raised count in its parent's `status.collisionCount`. The hash label is left as given,
/// as upstream leaves it.
///
/// # Errors
/// [`HistoryError::Create`] when the API refuses; [`HistoryError::Collisions`] after
/// 64 taken names.
pub(crate) async fn create_revision(
    api: &Api<ControllerRevision>,
    parent: &ParentRef,
    revision: ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision, HistoryError> {
    let data = revision.data.as_ref().map_or(Value::Null, |d| d.0.clone());
    let mut clone = revision;
    for _ in 0..MAX_COLLISIONS {
        let name = revision_name(&parent.name, &hash_revision(&data, Some(*collision_count)));
        clone.metadata.name = Some(name.clone());
        let error = |source| HistoryError::Create {
            name: name.clone(),
            source,
        };
        match api.create(&PostParams::default(), &clone).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = api.get(&name).await.map_err(error)?;
                if data_bytes(&existing) == data_bytes(&clone) {
                    return Ok(existing);
                }
                *collision_count = collision_count.saturating_add(1);
            }
            Err(err) => return Err(error(err)),
        }
    }
    Err(HistoryError::Collisions {
        parent: parent.name.clone(),
        tries: MAX_COLLISIONS,
    })
}

/// A revision's data as canonical JSON bytes (what upstream compares).
fn data_bytes(revision: &ControllerRevision) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(data) = revision.data.as_ref() {
        write_go_json(&data.0, &mut out);
    }
    out
}

/// Canonical JSON as Go's `json.Marshal` writes a `map[string]interface{}`: keys sorted by bytes, no
/// whitespace, HTML-sensitive characters and line separators escaped.
pub(crate) fn write_go_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_go_string(key, out);
                out.push(b':');
                write_go_json(member, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_go_json(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => write_go_string(s, out),
        scalar => out.extend(scalar.to_string().as_bytes()),
    }
}

fn write_go_string(s: &str, out: &mut Vec<u8>) {
    let quoted = Value::String(s.to_owned()).to_string();
    for c in quoted.chars() {
        match c {
            '<' => out.extend(b"\\u003c"),
            '>' => out.extend(b"\\u003e"),
            '&' => out.extend(b"\\u0026"),
            '\u{2028}' => out.extend(b"\\u2028"),
            '\u{2029}' => out.extend(b"\\u2029"),
            c => {
                let mut buf = [0u8; 4];
                out.extend(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

fn fnv1(mut hash: u32, bytes: &[u8]) -> u32 {
    for byte in bytes {
        hash = hash.wrapping_mul(FNV_PRIME);
        hash ^= u32::from(*byte);
    }
    hash
}

/// Upstream `rand.SafeEncodeString`: each byte replaced by the alphabet's letter at its value modulo
/// the alphabet's length.
pub(crate) fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    /// The data of kube-controller-manager's first StatefulSet revision
    /// (`kcm-v1.32/statefulset/06-controllerrevisions.json`), which it named `web-874579dc5`.
    fn kcm_statefulset_data() -> Value {
        json!({"spec": {"template": {
            "$patch": "replace",
            "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
            "spec": {
                "containers": [{
                    "image": "registry.k8s.io/nginx-slim:0.27",
                    "imagePullPolicy": "IfNotPresent",
                    "name": "nginx",
                    "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [{"mountPath": "/usr/share/nginx/html", "name": "data"}]
                }],
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30
            }
        }}})
    }

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u-1".into(),
        }
    }

    fn rev(name: &str, revision: i64, created: i64, data: Value) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data)),
            revision,
        }
    }

    #[test]
    fn the_hash_of_kube_controller_managers_revision_data_is_the_name_it_gave() {
        let data = kcm_statefulset_data();
        assert_eq!(hash_revision(&data, Some(0)), "874579dc5");
        let r = new_revision(&parent(), &BTreeMap::new(), data, 1, Some(0));
        assert_eq!(r.metadata.name.as_deref(), Some("web-874579dc5"));
        let labels = r.metadata.labels.unwrap();
        assert_eq!(labels[CONTROLLER_REVISION_HASH_LABEL], "874579dc5");
        let owner = &r.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
    }

    #[test]
    fn the_collision_count_changes_the_hash_and_none_differs_from_zero() {
        let data = kcm_statefulset_data();
        let none = hash_revision(&data, None);
        let zero = hash_revision(&data, Some(0));
        let one = hash_revision(&data, Some(1));
        assert!(none != zero && zero != one && none != one);
        assert!(one.bytes().all(|b| ALPHANUMS.contains(&b)));
    }

    #[test]
    fn go_escapes_html_characters_and_sorts_keys() {
        let mut out = Vec::new();
        write_go_json(&json!({"b": "<a&b>", "a": [1, null, true]}), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":[1,null,true],"b":"\u003ca\u0026b\u003e"}"#
        );
    }

    #[test]
    fn a_long_parent_name_is_cut_so_the_revision_name_fits() {
        let long = "a".repeat(300);
        let name = revision_name(&long, "abc");
        assert_eq!(name.len(), 223 + 4);
        assert_eq!(revision_name("web", "h"), "web-h");
    }

    #[test]
    fn revisions_with_the_same_data_in_another_key_order_are_equal() {
        let a = rev("a", 1, 0, json!({"x": 1, "y": {"p": 2, "q": 3}}));
        let b = rev("b", 2, 0, json!({"y": {"q": 3, "p": 2}, "x": 1}));
        let c = rev("c", 3, 0, json!({"x": 2}));
        assert!(equal_revision(&a, &b));
        assert!(!equal_revision(&a, &c));
        let all = [a.clone(), b, c];
        let names: Vec<_> = find_equal_revisions(&all, &a)
            .into_iter()
            .map(|r| r.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn revisions_sort_by_number_then_age_then_name_and_the_next_number_follows_the_highest() {
        let mut revs = vec![
            rev("z", 2, 10, json!({})),
            rev("b", 2, 5, json!({})),
            rev("a", 2, 5, json!({})),
            rev("c", 1, 99, json!({})),
        ];
        sort_revisions(&mut revs);
        let names: Vec<_> = revs
            .iter()
            .map(|r| r.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["c", "a", "b", "z"]);
        assert_eq!(next_revision(&revs), 3);
        assert_eq!(next_revision(&[]), 1);
    }
}
