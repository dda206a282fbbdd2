//! The record of authorization decisions: each request's user and attributes, whether it was
//! allowed, and every rule that allowed it — so a test can prove each rule of a role allowed some
//! request no other rule would have.

use std::collections::VecDeque;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use super::attributes::Attributes;

/// How many decisions are kept; older ones are dropped first. Enough for a fleet's end-to-end run
/// (a few thousand requests) many times over, small enough to stay a few tens of MB.
const CAPACITY: usize = 200_000;

/// One rule of one role, reached through one binding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleRef {
    /// `ClusterRoleBinding` or `RoleBinding`.
    pub binding_kind: String,
    /// The RoleBinding's namespace (empty for a ClusterRoleBinding).
    pub binding_namespace: String,
    /// The binding's name.
    pub binding: String,
    /// `ClusterRole` or `Role`.
    pub role_kind: String,
    /// The role's name.
    pub role: String,
    /// The rule's position in the role's `rules`.
    pub index: usize,
    /// The rule as stored.
    pub rule: Value,
}

/// One authorization decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The user's name.
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// What was asked.
    pub attributes: Attributes,
    /// Whether it was allowed.
    pub allowed: bool,
    /// Every rule that allowed it; empty for a denial and for `system:masters`, which bypasses RBAC.
    pub rules: Vec<RuleRef>,
    /// Why a request was denied beyond "no rule allows it" (a binding naming a missing role).
    pub reason: String,
}

/// The decisions of one server, oldest first.
#[derive(Debug, Default)]
pub struct DecisionLog {
    decisions: Mutex<VecDeque<Decision>>,
}

impl DecisionLog {
    /// Records a decision, dropping the oldest beyond the capacity.
    pub fn record(&self, decision: Decision) {
        let mut decisions = self.decisions.lock();
        if decisions.len() == CAPACITY {
            decisions.pop_front();
        }
        decisions.push_back(decision);
    }

    /// Every decision kept, oldest first.
    pub fn snapshot(&self) -> Vec<Decision> {
        self.decisions.lock().iter().cloned().collect()
    }
}
