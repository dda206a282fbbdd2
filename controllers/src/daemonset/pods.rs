//! A DaemonSet's pods: the pod it creates for a node (upstream `CreatePodTemplate` with
//! `ReplaceDaemonSetPodNodeNameNodeAffinity`), which node a pod is for (`GetTargetNodeName`), its
//! readiness and availability, whether it is of the current template (`IsPodUpdated`), and the order
//! that picks the pod that counts on a node (`podByCreationTimestampAndPhase`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use flotilla_sdk::k8s_openapi::api::apps::v1::DaemonSet;
use flotilla_sdk::k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use flotilla_sdk::kube::ResourceExt;

use super::super::controller_ref::controller_ref;
use super::super::history::DAEMONSET_HASH_LABEL;
pub use super::super::pod_ready::{available_at, is_available, is_ready};
use super::tolerations::add_daemon_tolerations;

/// The annotation the API server keeps the template generation in
/// (`deprecated.daemonset.template.generation`, bumped with each template change).
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";
/// The pod label carrying that generation (`pod-template-generation`).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";

/// Upstream `GetTemplateGeneration`: the annotation's number; `None` when absent or not a number
/// (upstream then goes by the hash alone).
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.annotations()
        .get(TEMPLATE_GENERATION_ANNOTATION)
        .and_then(|g| g.parse().ok())
}

/// The pod `ds` creates on `node`: its template with the daemon tolerations, the
/// `pod-template-generation` and `controller-revision-hash` labels, and a required node affinity on
/// `metadata.name` that pins it to `node` (replacing the template's required terms: the node was
/// chosen because it matches them). Left to the scheduler to bind, as upstream. `None` without a
/// uid (no controller reference can point at it).
pub fn new_pod(ds: &DaemonSet, node: &str, hash: &str, generation: Option<i64>) -> Option<Pod> {
    let template = ds.spec.as_ref().map(|s| s.template.clone())?;
    let meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    add_daemon_tolerations(&mut spec);
    let mut labels = meta.labels.unwrap_or_default();
    if let Some(generation) = generation {
        labels.insert(TEMPLATE_GENERATION_LABEL.to_owned(), generation.to_string());
    }
    if !hash.is_empty() {
        labels.insert(DAEMONSET_HASH_LABEL.to_owned(), hash.to_owned());
    }
    spec.affinity = Some(pin_to_node(spec.affinity.take(), node));
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.name_any())),
            namespace: ds.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![controller_ref(ds)?]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        ..Pod::default()
    })
}

/// Upstream `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity becomes the one
/// term `metadata.name In [node]`; preferred terms and pod (anti-)affinity stay.
fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![node.to_owned()]),
        }]),
        match_expressions: None,
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    affinity
}

/// Upstream `GetTargetNodeName`: `spec.nodeName` once bound, else the node the required affinity's
/// `metadata.name In [one]` names; `None` for a pod that names no single node.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(node.to_owned());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let field = terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")?;
    match field.values.as_deref() {
        Some([node]) => Some(node.clone()),
        _ => None,
    }
}

/// Whether the pod is bound to a node.
pub fn is_scheduled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// Phase Failed.
pub fn is_failed(pod: &Pod) -> bool {
    phase(pod) == Some("Failed")
}

/// Phase Succeeded.
pub fn is_succeeded(pod: &Pod) -> bool {
    phase(pod) == Some("Succeeded")
}

/// Phase Failed or Succeeded.
pub fn is_terminal(pod: &Pod) -> bool {
    is_failed(pod) || is_succeeded(pod)
}

/// Being deleted.
pub fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Upstream `IsPodUpdated`: the pod carries the current revision's hash, or the current template
/// generation.
pub fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.labels();
    let hash_matches =
        !hash.is_empty() && labels.get(DAEMONSET_HASH_LABEL).map(String::as_str) == Some(hash);
    let generation_matches = generation.is_some_and(|g| {
        labels.get(TEMPLATE_GENERATION_LABEL).map(String::as_str) == Some(g.to_string().as_str())
    });
    hash_matches || generation_matches
}

/// Upstream `podByCreationTimestampAndPhase`: bound pods first, then older first, then by name.
pub fn oldest_first(a: &Pod, b: &Pod) -> Ordering {
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    is_scheduled(b)
        .cmp(&is_scheduled(a))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Upstream `getNodesToDaemonPods`: the pods by the node they are for, each node's oldest first. A
/// terminal pod being deleted counts for nothing unless `include_deleted_terminal` (the history
/// cleanup keeps the revisions of such pods); a pod naming no node is left out.
pub fn by_node(pods: &[Pod], include_deleted_terminal: bool) -> BTreeMap<String, Vec<Pod>> {
    let mut map: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in pods {
        if !include_deleted_terminal && is_terminal(pod) && is_deleting(pod) {
            continue;
        }
        match target_node(pod) {
            Some(node) => map.entry(node).or_default().push(pod.clone()),
            None => tracing::debug!(pod = %pod.name_any(), "daemon pod names no node; ignored"),
        }
    }
    for pods in map.values_mut() {
        pods.sort_by(oldest_first);
    }
    map
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use flotilla_sdk::k8s_openapi::jiff::Timestamp;
    use serde_json::{Value, json};

    use super::*;

    /// A pod for the tests: `node` bound or (with `bound` false) pinned by affinity only; ready since
    /// `ready_since` seconds after the epoch when given; created at `created` seconds.
    pub(crate) fn pod(
        name: &str,
        node: &str,
        bound: bool,
        hash: &str,
        created: i64,
        ready_since: Option<i64>,
    ) -> Pod {
        let mut spec = json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }}},
        });
        if bound {
            spec["nodeName"] = json!(node);
        }
        let conditions: Value = match ready_since {
            Some(t) => json!([{"type": "Ready", "status": "True",
                "lastTransitionTime": Timestamp::from_second(t).unwrap().to_string()}]),
            None => json!([{"type": "Ready", "status": "False"}]),
        };
        serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "creationTimestamp": Timestamp::from_second(created).unwrap().to_string(),
                "labels": {DAEMONSET_HASH_LABEL: hash},
            },
            "spec": spec,
            "status": {"phase": if ready_since.is_some() { "Running" } else { "Pending" }, "conditions": conditions},
        }))
        .unwrap()
    }

    fn ds() -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "ns", "uid": "u-1",
                "annotations": {TEMPLATE_GENERATION_ANNOTATION: "3"}},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "a", "image": "i"}],
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]
                        }}}},
                },
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_new_pod_is_pinned_to_its_node_by_affinity_and_labelled_like_upstreams() {
        let ds = ds();
        assert_eq!(template_generation(&ds), Some(3));
        let pod = new_pod(&ds, "node-a", "5568f98bbc", Some(3)).unwrap();
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("agent-"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "agent");
        assert_eq!(labels[DAEMONSET_HASH_LABEL], "5568f98bbc");
        assert_eq!(labels[TEMPLATE_GENERATION_LABEL], "3");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name, None, "the scheduler binds it");
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 6);
        let terms = serde_json::to_value(&spec.affinity).unwrap();
        assert_eq!(
            terms["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]})
        );
        assert_eq!(target_node(&pod).as_deref(), Some("node-a"));
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("DaemonSet", Some(true))
        );
    }

    #[test]
    fn a_bound_pod_is_for_its_node_and_an_unpinned_one_for_none() {
        let mut p = pod("p", "a", false, "h", 0, None);
        assert_eq!(target_node(&p).as_deref(), Some("a"));
        p.spec.as_mut().unwrap().node_name = Some("b".into());
        assert_eq!(target_node(&p).as_deref(), Some("b"));
        p.spec.as_mut().unwrap().node_name = None;
        p.spec.as_mut().unwrap().affinity = None;
        assert_eq!(target_node(&p), None);
    }

    #[test]
    fn bound_pods_come_first_then_older_ones() {
        let mut pods = [
            pod("young", "a", true, "h", 20, None),
            pod("pending", "a", false, "h", 1, None),
            pod("old", "a", true, "h", 10, None),
        ];
        pods.sort_by(oldest_first);
        let names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["old", "young", "pending"]);
    }

    #[test]
    fn deleted_terminal_pods_count_only_when_asked() {
        let mut done = pod("done", "a", true, "h", 0, None);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        done.metadata.deletion_timestamp = Some(
            flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
        );
        let pods = vec![done, pod("live", "b", true, "h", 0, None)];
        assert_eq!(by_node(&pods, false).keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(by_node(&pods, true).keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn a_pod_is_updated_by_hash_or_by_generation() {
        let p = pod("p", "a", true, "new", 0, None);
        assert!(is_updated(&p, "new", None));
        assert!(!is_updated(&p, "other", None));
        let mut q = p.clone();
        q.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(TEMPLATE_GENERATION_LABEL.into(), "4".into());
        assert!(is_updated(&q, "other", Some(4)));
        assert!(!is_updated(&q, "other", Some(5)));
    }
}
