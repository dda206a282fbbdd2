//! The simulated nodes: their identity (name, labels, addresses), registration, and the heartbeats
//! a kubelet sends (the node Lease, and the node's conditions with a fresh `lastHeartbeatTime` every
//! [`SimConfig::status_interval`], see [`super::node_conditions`]), and where their pods' IPs come
//! from: the Node's `spec.podCIDR` as last read ([`super::pod_range`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::node_conditions::{ConditionsChange, NodeConditions};
use super::pod_range::PodRange;
use super::{SimConfig, SimError};

/// The namespace kubelets keep their Leases in.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The label every simulated node carries (value `true`), so tools can tell them apart.
pub const SIMULATED_LABEL: &str = "flotilla.dev/simulated";

const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// Addresses per node pod range (a /20).
const POD_RANGE_SIZE: u32 = 4096;

/// How many nodes fit: 10.128.0.0/9 holds 2048 ranges of /20.
pub(crate) const MAX_NODES: usize = 2048;

/// Who writes: the field manager of every simulator write.
pub(crate) const FIELD_MANAGER: &str = "flotilla-simnodes";

/// One simulated node's identity. Addresses are derived from the index, so they are stable across
/// restarts of the simulator.
#[derive(Debug)]
pub(crate) struct SimNode {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    index: u32,
    next_pod_ip: AtomicU32,
    /// The Node's `spec.podCIDR` when last read (registration, status reports, a pod waiting for it);
    /// `None` before, or while the Node has none (or an IPv6 one).
    range: Mutex<Option<PodRange>>,
    /// What the node reports besides Ready; changed through the simulator's handle.
    conditions: Mutex<NodeConditions>,
}

impl SimNode {
    pub(crate) fn new(prefix: &str, index: u32) -> Self {
        let name = format!("{prefix}{index}");
        let labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), name.clone()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            (
                "node.kubernetes.io/instance-type".to_string(),
                "simulated".to_string(),
            ),
            (
                "topology.kubernetes.io/zone".to_string(),
                format!("sim-zone-{}", index % 3),
            ),
            (SIMULATED_LABEL.to_string(), "true".to_string()),
        ]);
        SimNode {
            name,
            labels,
            index,
            next_pod_ip: AtomicU32::new(0),
            range: Mutex::new(None),
            conditions: Mutex::new(NodeConditions::default()),
        }
    }

    /// The node's InternalIP: 172.16.0.0/12, one address per node.
    pub(crate) fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 2)) + self.index)
    }

    /// The node's pod range: one /20 per node out of 10.128.0.0/9, so a node holding a thousand
    /// pods still gives each a distinct IP.
    pub(crate) fn pod_cidr(&self) -> String {
        format!("{}/20", self.pod_base())
    }

    fn pod_base(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 128, 0, 0)) + self.index * POD_RANGE_SIZE)
    }

    /// The next pod IP of the Node's `spec.podCIDR` as last read, cycling through its host
    /// addresses; without one, of the simulator's own range for the node when `own_range` (the
    /// simulator assigns pod ranges, [`SimConfig::assign_pod_cidrs`]), else `None`: the pod waits, as
    /// it would for its network plugin on a node without a range.
    pub(crate) fn allocate_pod_ip(&self, own_range: bool) -> Option<Ipv4Addr> {
        let learned = *self.range.lock();
        let range = learned.or_else(|| {
            own_range
                .then(|| PodRange::new(self.pod_base(), 20))
                .flatten()
        })?;
        Some(range.host(self.next_pod_ip.fetch_add(1, Ordering::Relaxed)))
    }

    /// Reads the pod range from `node` (the Node object as the API returned it).
    pub(crate) fn learn_pod_range(&self, node: &Node) {
        let range = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(PodRange::parse);
        let mut current = self.range.lock();
        if *current != range {
            tracing::info!(node = %self.name, range = ?range.map(|r| r.to_string()), "pod range of the node");
            *current = range;
        }
    }

    /// What the node reports besides Ready.
    pub(crate) fn conditions(&self) -> NodeConditions {
        *self.conditions.lock()
    }

    /// Applies `change` to what the node reports; the next status report carries it.
    pub(crate) fn change_conditions(&self, change: ConditionsChange) -> NodeConditions {
        let mut conditions = self.conditions.lock();
        *conditions = conditions.with(change);
        *conditions
    }

    fn object(&self, assign_pod_cidr: bool) -> Node {
        let mut node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
        }))
        .unwrap_or_default();
        node.metadata.name = Some(self.name.clone());
        if assign_pod_cidr {
            node.spec = Some(NodeSpec {
                pod_cidr: Some(self.pod_cidr()),
                pod_cidrs: Some(vec![self.pod_cidr()]),
                ..NodeSpec::default()
            });
        }
        node
    }

    /// The status patch kubelet sends: resources, addresses, node info and the conditions, whose
    /// transition times are kept from `previous` (the node's current conditions) where unchanged.
    fn status(&self, config: &SimConfig, previous: &[Value], now: &Value) -> Value {
        let resources = json!({
            "cpu": config.cpu,
            "memory": config.memory,
            "pods": config.max_pods.to_string(),
            "ephemeral-storage": "100Gi",
        });
        json!({"status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": self.conditions().to_json(previous, now),
            "addresses": [
                {"type": "InternalIP", "address": self.host_ip().to_string()},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": format!("flotilla-sim-boot-{}", self.index),
                "containerRuntimeVersion": "flotilla-sim://0.1.0",
                "kernelVersion": "6.1.0-flotilla-sim",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.35.0-flotilla-sim",
                "machineID": format!("flotilla-sim-machine-{}", self.index),
                "operatingSystem": "linux",
                "osImage": "Flotilla simulated node",
                "systemUUID": format!("flotilla-sim-{}", self.index),
            },
        }})
    }
}

/// Registers `node` (or adopts it when it already exists), reports it Ready and removes the
/// not-ready taint that admission put on it.
pub(crate) async fn register(
    client: &kube::Client,
    config: &SimConfig,
    node: &SimNode,
) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match api
        .create(&params, &node.object(config.assign_pod_cidrs))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(source) => return Err(api_error(format!("create node {}", node.name), source)),
    }
    let now = time_now();
    let status = node.status(config, &[], &now);
    let reported = api
        .patch_status(&node.name, &patch_params(), &Patch::Strategic(&status))
        .await
        .map_err(|e| api_error(format!("report node {} Ready", node.name), e))?;
    node.learn_pod_range(&reported);
    remove_not_ready_taint(&api, &node.name).await
}

async fn remove_not_ready_taint(api: &Api<Node>, name: &str) -> Result<(), SimError> {
    // The resourceVersion in the patch makes it conditional: a concurrent taint change is retried,
    // not overwritten.
    for _ in 0..5 {
        let current = api
            .get(name)
            .await
            .map_err(|e| api_error(format!("get node {name}"), e))?;
        let taints = current
            .spec
            .and_then(|spec| spec.taints)
            .unwrap_or_default();
        let kept: Vec<_> = taints.iter().filter(|t| t.key != NOT_READY_TAINT).collect();
        if kept.len() == taints.len() {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "spec": {"taints": if kept.is_empty() { Value::Null } else { json!(kept) }},
        });
        match api
            .patch(name, &patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => {
                return Err(api_error(
                    format!("remove the not-ready taint of {name}"),
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// Creates the `kube-node-lease` namespace unless it exists.
pub(crate) async fn ensure_lease_namespace(client: &kube::Client) -> Result<(), SimError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NODE_LEASE_NAMESPACE}
    }))
    .unwrap_or_default();
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(api_error(
            format!("create namespace {NODE_LEASE_NAMESPACE}"),
            e,
        )),
    }
}

/// Renews the node's Lease, creating it (owned by the Node, as kubelet does) when missing.
pub(crate) async fn renew_lease(
    client: &kube::Client,
    config: &SimConfig,
    name: &str,
) -> Result<(), SimError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let now = serde_json::to_value(MicroTime(Timestamp::now())).unwrap_or(Value::Null);
    let spec = json!({
        "holderIdentity": name,
        "leaseDurationSeconds": config.lease_duration_seconds,
        "renewTime": now,
    });
    let patch = json!({"spec": spec});
    match api
        .patch(name, &patch_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => return Err(api_error(format!("renew the lease of {name}"), e)),
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get(name)
        .await
        .map_err(|e| api_error(format!("get node {name}"), e))?;
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                 "uid": node.metadata.uid.unwrap_or_default()}],
        },
        "spec": spec,
    }))
    .unwrap_or_default();
    match api.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        // Someone created it between our patch and create: the next tick renews it.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(api_error(format!("create the lease of {name}"), e)),
    }
}

/// Reports the node's status as kubelet does, with a strategic merge patch that merges the
/// conditions by type (so conditions others write stay): `lastHeartbeatTime` now, `lastTransitionTime`
/// kept for a condition whose status is unchanged. Learns the node's pod range on the way.
pub(crate) async fn report_status(
    client: &kube::Client,
    config: &SimConfig,
    node: &SimNode,
) -> Result<(), SimError> {
    let api: Api<Node> = Api::all(client.clone());
    let current = match api.get_status(&node.name).await {
        Ok(current) => current,
        // Deleted behind our back: a kubelet registers its node again.
        Err(kube::Error::Api(status)) if status.code == 404 => {
            tracing::info!(node = %node.name, "simulated node was deleted; registering it again");
            return register(client, config, node).await;
        }
        Err(e) => return Err(api_error(format!("get node {}", node.name), e)),
    };
    node.learn_pod_range(&current);
    let now = time_now();
    let previous: Vec<Value> = current
        .status
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let status = node.status(config, &previous, &now);
    api.patch_status(&node.name, &patch_params(), &Patch::Strategic(&status))
        .await
        .map_err(|e| api_error(format!("report the status of {}", node.name), e))?;
    Ok(())
}

pub(crate) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

pub(crate) fn time_now() -> Value {
    serde_json::to_value(Time(Timestamp::now())).unwrap_or(Value::Null)
}

pub(crate) fn api_error(what: String, source: kube::Error) -> SimError {
    SimError::Api { what, source }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_distinct_stable_addresses() {
        let a = SimNode::new("sim-node-", 0);
        let b = SimNode::new("sim-node-", 1);
        assert_eq!(a.name, "sim-node-0");
        assert_eq!(a.host_ip(), Ipv4Addr::new(172, 16, 0, 2));
        assert_eq!(b.host_ip(), Ipv4Addr::new(172, 16, 0, 3));
        assert_eq!(a.pod_cidr(), "10.128.0.0/20");
        assert_eq!(b.pod_cidr(), "10.128.16.0/20");
        let last = SimNode::new("sim-node-", MAX_NODES as u32 - 1);
        assert_eq!(last.pod_cidr(), "10.255.240.0/20");
    }

    #[test]
    fn pod_ips_are_distinct_for_a_thousand_pods_and_stay_inside_the_node_range() {
        let node = SimNode::new("sim-node-", 2);
        assert_eq!(
            node.allocate_pod_ip(true),
            Some(Ipv4Addr::new(10, 128, 32, 1))
        );
        let range =
            u32::from(Ipv4Addr::new(10, 128, 32, 0))..u32::from(Ipv4Addr::new(10, 128, 48, 0));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..5000 {
            let ip = u32::from(node.allocate_pod_ip(true).unwrap());
            assert!(range.contains(&ip) && ip != range.start && ip != range.end - 1);
            if seen.len() < 4000 {
                assert!(seen.insert(ip), "duplicate pod IP within the first 4000");
            }
        }
    }

    #[test]
    fn the_node_object_carries_labels_and_pod_cidr() {
        let node = SimNode::new("n-", 4).object(true);
        assert_eq!(node.metadata.name.as_deref(), Some("n-4"));
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some("n-4")
        );
        assert_eq!(
            labels.get(SIMULATED_LABEL).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            node.spec.and_then(|s| s.pod_cidr).as_deref(),
            Some("10.128.64.0/20")
        );
    }

    #[test]
    fn without_its_own_range_a_node_registers_without_a_pod_cidr_and_waits_for_one() {
        let sim = SimNode::new("n-", 1);
        assert_eq!(
            sim.object(false).spec,
            None,
            "no podCIDR for node-ipam to fill"
        );
        assert_eq!(sim.allocate_pod_ip(false), None, "pods wait");
        let assigned: Node = serde_json::from_value(
            json!({"metadata": {"name": "n-1"}, "spec": {"podCIDR": "10.244.7.0/24"}}),
        )
        .unwrap();
        sim.learn_pod_range(&assigned);
        assert_eq!(
            sim.allocate_pod_ip(false),
            Some(Ipv4Addr::new(10, 244, 7, 1))
        );
        assert_eq!(
            sim.allocate_pod_ip(true),
            Some(Ipv4Addr::new(10, 244, 7, 2)),
            "the Node's range wins over the simulator's own"
        );
        sim.learn_pod_range(&Node::default());
        assert_eq!(sim.allocate_pod_ip(false), None, "the range went");
    }

    #[test]
    fn the_status_carries_the_conditions_set_on_the_node() {
        let sim = SimNode::new("n-", 0);
        let change: ConditionsChange =
            serde_json::from_value(json!({"DiskPressure": true})).unwrap();
        assert!(sim.change_conditions(change).disk_pressure);
        let now = json!("2026-11-26T10:09:29Z");
        let status = sim.status(&SimConfig::default(), &[], &now);
        let disk = status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "DiskPressure")
            .unwrap();
        assert_eq!(disk["status"], "True");
        assert_eq!(disk["reason"], "KubeletHasDiskPressure");
    }
}
