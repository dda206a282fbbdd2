//! The node conditions a simulated node reports, as kubelet reports them (the pressure conditions and
//! Ready, with kubelet's reasons and messages), plus `NetworkUnavailable`, which on a real node the
//! route controller or the network plugin writes. The pressures and the network can be turned on
//! and off ([`NodeConditions`], through `SimNodesHandle::set_conditions` or the control route
//! `POST /flotilla/v1/nodes/{name}/conditions`), so node-lifecycle's condition taints can be shown.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a simulated node reports besides Ready=True. Default: no pressure, and no
/// `NetworkUnavailable` condition at all (kubelet does not write one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NodeConditions {
    /// `MemoryPressure=True`.
    pub memory_pressure: bool,
    /// `DiskPressure=True`.
    pub disk_pressure: bool,
    /// `PIDPressure=True` (upstream's spelling of the type).
    #[serde(rename = "PIDPressure")]
    pub pid_pressure: bool,
    /// `NetworkUnavailable` True or False; `None`: the simulator does not write it (one written by
    /// someone else is left alone).
    pub network_unavailable: Option<bool>,
}

/// A change to [`NodeConditions`]: each condition named is set, the others keep their value. The body
/// of the control route, e.g. `{"MemoryPressure": true, "NetworkUnavailable": false}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct ConditionsChange {
    /// Sets `MemoryPressure`.
    pub memory_pressure: Option<bool>,
    /// Sets `DiskPressure`.
    pub disk_pressure: Option<bool>,
    /// Sets `PIDPressure`.
    #[serde(rename = "PIDPressure")]
    pub pid_pressure: Option<bool>,
    /// Sets `NetworkUnavailable`.
    pub network_unavailable: Option<bool>,
}

impl NodeConditions {
    /// These conditions with `change` applied.
    pub fn with(self, change: ConditionsChange) -> Self {
        NodeConditions {
            memory_pressure: change.memory_pressure.unwrap_or(self.memory_pressure),
            disk_pressure: change.disk_pressure.unwrap_or(self.disk_pressure),
            pid_pressure: change.pid_pressure.unwrap_or(self.pid_pressure),
            network_unavailable: change.network_unavailable.or(self.network_unavailable),
        }
    }

    /// The conditions to report, in kubelet's order (`NetworkUnavailable` first, as nodes show it),
    /// each `(type, status, reason, message)`.
    fn reported(&self) -> Vec<(&'static str, bool, &'static str, &'static str)> {
        let mut out = Vec::new();
        match self.network_unavailable {
            Some(true) => out.push((
                "NetworkUnavailable",
                true,
                "NoRouteCreated",
                "Node created without a route",
            )),
            Some(false) => out.push((
                "NetworkUnavailable",
                false,
                "RouteCreated",
                "RouteController created a route",
            )),
            None => {}
        }
        out.push(if self.memory_pressure {
            (
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            )
        } else {
            (
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            )
        });
        out.push(if self.disk_pressure {
            (
                "DiskPressure",
                true,
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
            )
        } else {
            (
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            )
        });
        out.push(if self.pid_pressure {
            (
                "PIDPressure",
                true,
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            )
        } else {
            (
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            )
        });
        out.push((
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
        ));
        out
    }

    /// The `status.conditions` kubelet would patch (a strategic merge patch merges them by type, so
    /// conditions others write stay): `lastHeartbeatTime` `now`, and `lastTransitionTime` kept from
    /// `previous` (the node's current conditions) when the status is unchanged, else `now`.
    pub(crate) fn to_json(self, previous: &[Value], now: &Value) -> Vec<Value> {
        self.reported()
            .into_iter()
            .map(|(kind, on, reason, message)| {
                let status = if on { "True" } else { "False" };
                let since = previous
                    .iter()
                    .find(|c| c["type"] == kind && c["status"] == status)
                    .map(|c| c["lastTransitionTime"].clone())
                    .filter(|t| !t.is_null())
                    .unwrap_or_else(|| now.clone());
                json!({"type": kind, "status": status, "lastHeartbeatTime": now,
                       "lastTransitionTime": since, "reason": reason, "message": message})
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn types(conditions: &[Value]) -> Vec<(String, String)> {
        conditions
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_owned(),
                    c["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn a_healthy_node_reports_what_kubelet_reports() {
        let now = json!("2026-11-26T10:09:29Z");
        let conditions = NodeConditions::default().to_json(&[], &now);
        assert_eq!(
            conditions[3],
            json!({"type": "Ready", "status": "True", "lastHeartbeatTime": now,
                   "lastTransitionTime": now, "reason": "KubeletReady",
                   "message": "kubelet is posting ready status"})
        );
        assert_eq!(
            conditions[0]["reason"], "KubeletHasSufficientMemory",
            "the fixture's reasons"
        );
        assert_eq!(
            types(&conditions),
            [
                ("MemoryPressure".into(), "False".into()),
                ("DiskPressure".into(), "False".into()),
                ("PIDPressure".into(), "False".into()),
                ("Ready".into(), "True".into()),
            ]
        );
    }

    #[test]
    fn a_change_sets_what_it_names_and_transitions_only_what_flipped() {
        let change: ConditionsChange =
            serde_json::from_value(json!({"MemoryPressure": true, "NetworkUnavailable": true}))
                .unwrap();
        let state = NodeConditions::default().with(change);
        let before = json!("2026-11-26T10:00:00Z");
        let now = json!("2026-11-26T10:05:00Z");
        let previous = NodeConditions::default().to_json(&[], &before);
        let conditions = state.to_json(&previous, &now);
        assert_eq!(
            types(&conditions)[..2],
            [
                ("NetworkUnavailable".into(), "True".into()),
                ("MemoryPressure".into(), "True".into())
            ]
        );
        assert_eq!(conditions[1]["reason"], "KubeletHasInsufficientMemory");
        assert_eq!(conditions[1]["lastTransitionTime"], now);
        assert_eq!(
            conditions[2]["lastTransitionTime"], before,
            "DiskPressure kept"
        );
        assert_eq!(conditions[4]["lastHeartbeatTime"], now);
        let cleared = state.with(
            serde_json::from_value(json!({"MemoryPressure": false, "PIDPressure": true})).unwrap(),
        );
        assert!(!cleared.memory_pressure && cleared.pid_pressure);
        assert_eq!(cleared.network_unavailable, Some(true));
    }

    #[test]
    fn an_unknown_condition_in_a_change_is_refused() {
        let parsed = serde_json::from_value::<ConditionsChange>(json!({"Ready": false}));
        assert!(parsed.is_err());
    }
}
