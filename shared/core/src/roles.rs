//! Worker roles: decided by code from the tool → role table, never by the model; and the queue each role's subtasks go to.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ports::TaskQueue;

/// The role of ordinary workers.
pub const DEFAULT_ROLE: &str = "support";
/// The role that may move money (refunds); on AWS its own function, queue and secret.
pub const REFUND_ROLE: &str = "refund";
/// The orchestrator's role: lists every tool, may call none.
pub const PLANNER_ROLE: &str = "planner";

/// Maps tool names to the role that must run a subtask using them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleTable {
    default_role: String,
    /// `(tool name or unprefixed suffix, role)`, first match wins.
    rules: Vec<(String, String)>,
}

impl RoleTable {
    pub fn new(default_role: impl Into<String>, rules: Vec<(String, String)>) -> Self {
        Self { default_role: default_role.into(), rules }
    }

    /// The demo table: any tool named `refund` (under any prefix) needs the refund role.
    pub fn demo() -> Self {
        Self::new(DEFAULT_ROLE, vec![("refund".into(), REFUND_ROLE.into())])
    }

    /// Parses `tool=role,tool=role` (env `ROLE_TABLE`); empty → [`RoleTable::demo`].
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec.trim().is_empty() {
            return Ok(Self::demo());
        }
        let mut rules = Vec::new();
        for pair in spec.split(',') {
            let (tool, role) =
                pair.split_once('=').ok_or_else(|| format!("ROLE_TABLE entry {pair:?} is not tool=role"))?;
            let (tool, role) = (tool.trim(), role.trim());
            if tool.is_empty() || role.is_empty() {
                return Err(format!("ROLE_TABLE entry {pair:?} has an empty side"));
            }
            rules.push((tool.to_owned(), role.to_owned()));
        }
        Ok(Self::new(DEFAULT_ROLE, rules))
    }

    /// The role for a subtask using `tools`: the first rule any tool matches
    /// (by full name, or by the part after an upstream prefix `…__`), else the default.
    pub fn role_for<S: AsRef<str>>(&self, tools: &[S]) -> String {
        for (pattern, role) in &self.rules {
            for t in tools {
                let t = t.as_ref();
                let base = t.rsplit_once("__").map_or(t, |(_, b)| b);
                if t == pattern || base == pattern {
                    return role.clone();
                }
            }
        }
        self.default_role.clone()
    }

    /// The tools of `tools` that no rule gives another role than the default, in their order:
    /// what a subtask of the default role may be planned with (the orchestrator's fallback plan).
    pub fn default_role_tools<S: AsRef<str>>(&self, tools: &[S]) -> Vec<String> {
        tools
            .iter()
            .map(AsRef::as_ref)
            .filter(|t| self.role_for(&[*t]) == self.default_role)
            .map(str::to_owned)
            .collect()
    }

    pub fn default_role(&self) -> &str {
        &self.default_role
    }
}

/// The tasks queue of each role (the refund role has its own on AWS).
#[derive(Clone)]
pub struct TaskQueues {
    default: Arc<dyn TaskQueue>,
    by_role: HashMap<String, Arc<dyn TaskQueue>>,
}

impl TaskQueues {
    pub fn new(default: Arc<dyn TaskQueue>) -> Self {
        Self { default, by_role: HashMap::new() }
    }

    pub fn with_role(mut self, role: impl Into<String>, queue: Arc<dyn TaskQueue>) -> Self {
        self.by_role.insert(role.into(), queue);
        self
    }

    /// The queue for `role`, or the default queue.
    pub fn for_role(&self, role: &str) -> &Arc<dyn TaskQueue> {
        self.by_role.get(role).unwrap_or(&self.default)
    }

    /// The default queue (deadline messages go there).
    pub fn default_queue(&self) -> &Arc<dyn TaskQueue> {
        &self.default
    }

    /// Whether `role` has a queue of its own (the refund role). Such subtasks are enqueued by the
    /// orchestrator at planning whatever their dependencies, and wait for them on their own
    /// queue: no other function ever sends to that queue (least privilege).
    pub fn has_own_queue(&self, role: &str) -> bool {
        self.by_role.contains_key(role)
    }

    /// The queue named `name` ([`TaskQueue::name`]), if it is one of these.
    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn TaskQueue>> {
        std::iter::once(&self.default).chain(self.by_role.values()).find(|q| q.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_tool_under_any_prefix_needs_the_refund_role() {
        let t = RoleTable::demo();
        assert_eq!(t.role_for(&["shop__get_order", "shop__refund"]), REFUND_ROLE);
        assert_eq!(t.role_for(&["refund"]), REFUND_ROLE);
        assert_eq!(t.role_for(&["shop__get_refund_policy"]), DEFAULT_ROLE);
        assert_eq!(t.role_for::<&str>(&[]), DEFAULT_ROLE);
    }

    #[test]
    fn role_table_parses_pairs_and_rejects_garbage() {
        let t = RoleTable::parse("refund=refund, redeem_coupon=refund").unwrap();
        assert_eq!(t.role_for(&["x__redeem_coupon"]), "refund");
        assert!(RoleTable::parse("nonsense").is_err());
    }

    #[test]
    fn default_role_tools_follow_the_table_not_the_names() {
        let catalogue = ["shop__get_order", "shop__refund", "shop__redeem_coupon", "shop__get_refund_policy"];
        assert_eq!(
            RoleTable::demo().default_role_tools(&catalogue),
            ["shop__get_order", "shop__redeem_coupon", "shop__get_refund_policy"]
        );
        let custom = RoleTable::parse("redeem_coupon=refund").unwrap();
        assert_eq!(
            custom.default_role_tools(&catalogue),
            ["shop__get_order", "shop__refund", "shop__get_refund_policy"]
        );
        let everything = RoleTable::parse("get_order=auditor,refund=refund").unwrap();
        assert_eq!(everything.default_role_tools(&catalogue), ["shop__redeem_coupon", "shop__get_refund_policy"]);
    }
}
