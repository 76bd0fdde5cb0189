//! The federated tool catalogue: prefixing, hidden arguments, collisions and role permissions, as pure functions.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use rmcp::model::{JsonObject, Tool};

use crate::config::{RoleConfig, UpstreamConfig, is_valid_tool_name};

/// One upstream tool as the gateway exposes it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExposedTool {
    /// Name callers see: prefix + upstream name.
    pub name: Arc<str>,
    /// Index of the upstream in the configuration.
    pub upstream: usize,
    pub upstream_name: Arc<str>,
    /// The tool's name at the upstream.
    pub original: Arc<str>,
    /// The tool as listed to callers: exposed name, hidden arguments removed.
    pub listed: Tool,
    /// Has the customer argument: filled from `x-swarm-customer-id`, which must be present.
    pub customer_scoped: bool,
    /// Has the idempotency argument: filled from `x-swarm-idempotency-key`,
    /// which must be present; never retried.
    pub side_effecting: bool,
}

/// `*` matches any run of characters (also none); everything else literally.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Removes property `arg` from a JSON Schema object (and from `required`).
/// Returns whether the schema had it.
pub fn hide_argument(schema: &mut JsonObject, arg: &str) -> bool {
    let had = schema.get_mut("properties").and_then(|p| p.as_object_mut()).and_then(|p| p.remove(arg)).is_some();
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.retain(|v| v.as_str() != Some(arg));
    }
    had
}

/// Why an upstream tool was left out of the catalogue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub tool: String,
    pub reason: String,
}

/// Turns an upstream's `tools/list` into exposed tools: applies the
/// upstream's allow/deny, the prefix, the name rule, and hides the customer
/// and idempotency arguments. Tools breaking the name rule are skipped (and
/// reported), never renamed.
pub fn expose_tools(
    upstream: usize,
    config: &UpstreamConfig,
    tools: Vec<Tool>,
) -> (Vec<Arc<ExposedTool>>, Vec<Skipped>) {
    let prefix = config.prefix_str();
    let upstream_name: Arc<str> = Arc::from(config.name.as_str());
    let mut exposed = Vec::with_capacity(tools.len());
    let mut skipped = Vec::new();
    for mut tool in tools {
        let original = tool.name.to_string();
        let allowed = config.allow.as_ref().is_none_or(|a| a.iter().any(|p| glob_match(p, &original)));
        let denied = config.deny.as_ref().is_some_and(|d| d.iter().any(|p| glob_match(p, &original)));
        if !allowed || denied {
            continue;
        }
        let name = format!("{prefix}{original}");
        if !is_valid_tool_name(&name) {
            skipped.push(Skipped {
                tool: original,
                reason: format!("exposed name {name:?} does not match ^[a-zA-Z0-9_-]{{1,64}}$"),
            });
            continue;
        }
        let mut schema = (*tool.input_schema).clone();
        let customer_scoped = hide_argument(&mut schema, &config.customer_scoped_arg);
        let side_effecting = hide_argument(&mut schema, &config.idempotency_arg);
        tool.input_schema = Arc::new(schema);
        tool.name = name.clone().into();
        exposed.push(Arc::new(ExposedTool {
            name: Arc::from(name),
            upstream,
            upstream_name: upstream_name.clone(),
            original: Arc::from(original),
            listed: tool,
            customer_scoped,
            side_effecting,
        }));
    }
    (exposed, skipped)
}

/// Two upstreams exposing the same name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collision {
    pub tool: String,
    pub first: String,
    pub second: String,
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool {} is exposed by upstreams {} and {} (give one of them a prefix or deny the tool)",
            self.tool, self.first, self.second
        )
    }
}

/// A merged, immutable catalogue: every exposed tool by name, plus each role's listing.
#[derive(Debug, Default)]
pub struct Catalog {
    pub tools: HashMap<Arc<str>, Arc<ExposedTool>>,
    /// role → tools it may see, sorted by name.
    pub listings: HashMap<String, Arc<Vec<Tool>>>,
}

/// The access rules of one role.
#[derive(Clone, Debug)]
pub struct RolePolicy {
    pub name: String,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub call: bool,
}

impl RolePolicy {
    pub fn from_config(name: &str, config: &RoleConfig) -> Self {
        Self { name: name.to_owned(), allow: config.tools.clone(), deny: config.deny.clone(), call: config.call }
    }

    /// Whether the role may see `tool` (the hard allowlist).
    pub fn may_see(&self, tool: &str) -> bool {
        self.allow.iter().any(|p| glob_match(p, tool)) && !self.deny.iter().any(|p| glob_match(p, tool))
    }

    /// Whether the role may call `tool`.
    pub fn may_call(&self, tool: &str) -> bool {
        self.call && self.may_see(tool)
    }
}

/// Merges per-upstream tool lists (in configuration order). Every collision
/// is returned; the first upstream keeps a colliding name, the later one's
/// tool is left out — the caller decides whether that is fatal (start-up) or
/// reported (a later refresh).
pub fn merge(per_upstream: &[&[Arc<ExposedTool>]], roles: &[RolePolicy]) -> (Catalog, Vec<Collision>) {
    let mut by_name: BTreeMap<Arc<str>, Arc<ExposedTool>> = BTreeMap::new();
    let mut collisions = Vec::new();
    for tools in per_upstream {
        for tool in tools.iter() {
            if let Some(existing) = by_name.get(&tool.name) {
                collisions.push(Collision {
                    tool: tool.name.to_string(),
                    first: existing.upstream_name.to_string(),
                    second: tool.upstream_name.to_string(),
                });
                continue;
            }
            by_name.insert(tool.name.clone(), tool.clone());
        }
    }
    let listings = roles
        .iter()
        .map(|role| {
            let visible: Vec<Tool> =
                by_name.values().filter(|t| role.may_see(&t.name)).map(|t| t.listed.clone()).collect();
            (role.name.clone(), Arc::new(visible))
        })
        .collect();
    (Catalog { tools: by_name.into_iter().collect(), listings }, collisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: serde_json::Value) -> Tool {
        let serde_json::Value::Object(schema) = schema else { panic!("object") };
        Tool::new(name.to_owned(), "d".to_owned(), Arc::new(schema))
    }

    fn upstream(name: &str) -> UpstreamConfig {
        UpstreamConfig::new(name, "http://127.0.0.1:1/mcp")
    }

    #[test]
    fn glob_matches_stars_anywhere() {
        assert!(glob_match("shop__*", "shop__get_order"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("shop__get_*order*", "shop__get_order"));
        assert!(glob_match("shop__refund", "shop__refund"));
        assert!(!glob_match("shop__refund", "shop__refunds"));
        assert!(!glob_match("shop__*", "ev__echo"));
        assert!(!glob_match("*_x", "a_y"));
    }

    #[test]
    fn customer_and_idempotency_arguments_are_hidden_from_the_listed_schema() {
        let schema = json!({"type": "object",
            "properties": {"customer_id": {"type": "string"}, "order_id": {"type": "string"},
                           "idempotency_key": {"type": "string"}},
            "required": ["customer_id", "order_id", "idempotency_key"]});
        let (tools, skipped) = expose_tools(0, &upstream("shop"), vec![tool("refund", schema)]);
        assert!(skipped.is_empty());
        let t = &tools[0];
        assert_eq!(&*t.name, "shop__refund");
        assert_eq!(&*t.original, "refund");
        assert!(t.customer_scoped && t.side_effecting);
        let listed = serde_json::Value::Object((*t.listed.input_schema).clone());
        assert_eq!(
            listed,
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
        );
        assert_eq!(t.listed.name, "shop__refund");
    }

    #[test]
    fn tool_without_customer_argument_is_not_customer_scoped() {
        let schema = json!({"type": "object", "properties": {"sku": {"type": "string"}}});
        let (tools, _) = expose_tools(0, &upstream("shop"), vec![tool("get_product", schema)]);
        assert!(!tools[0].customer_scoped);
        assert!(!tools[0].side_effecting);
    }

    #[test]
    fn names_breaking_the_llm_rule_are_skipped_not_renamed() {
        let (tools, skipped) = expose_tools(0, &upstream("ev"), vec![tool("has space", json!({"type": "object"}))]);
        assert!(tools.is_empty());
        assert_eq!(skipped[0].tool, "has space");
    }

    #[test]
    fn upstream_allow_and_deny_filter_original_names() {
        let mut config = upstream("ev");
        config.allow = Some(vec!["get*".into(), "echo".into()]);
        config.deny = Some(vec!["get-env".into()]);
        let tools = ["echo", "get-sum", "get-env", "trigger"].map(|n| tool(n, json!({"type": "object"})));
        let (exposed, _) = expose_tools(1, &config, tools.to_vec());
        let names: Vec<&str> = exposed.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["ev__echo", "ev__get-sum"]);
    }

    #[test]
    fn unprefixed_upstreams_with_the_same_tool_collide_naming_both() {
        let mut a = upstream("alpha");
        a.prefix = crate::config::Prefix::Off;
        let mut b = upstream("beta");
        b.prefix = crate::config::Prefix::Off;
        let (ta, _) = expose_tools(0, &a, vec![tool("echo", json!({"type": "object"}))]);
        let (tb, _) = expose_tools(1, &b, vec![tool("echo", json!({"type": "object"}))]);
        let (catalog, collisions) = merge(&[&ta, &tb], &[]);
        assert_eq!(collisions.len(), 1);
        let text = collisions[0].to_string();
        assert!(text.contains("alpha") && text.contains("beta") && text.contains("echo"), "{text}");
        assert_eq!(&*catalog.tools["echo"].upstream_name, "alpha");
    }

    #[test]
    fn role_listing_holds_only_allowed_tools_in_name_order() {
        let tools = ["track_shipment", "refund", "get_order"].map(|n| tool(n, json!({"type": "object"})));
        let (exposed, _) = expose_tools(0, &upstream("shop"), tools.to_vec());
        let support = RolePolicy {
            name: "support".into(),
            allow: vec!["shop__*".into()],
            deny: vec!["shop__refund".into()],
            call: true,
        };
        let planner = RolePolicy { name: "planner".into(), allow: vec!["*".into()], deny: vec![], call: false };
        let (catalog, _) = merge(&[&exposed], &[support.clone(), planner.clone()]);
        let names: Vec<&str> = catalog.listings["support"].iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["shop__get_order", "shop__track_shipment"]);
        assert_eq!(catalog.listings["planner"].len(), 3);
        assert!(!planner.may_call("shop__get_order"));
        assert!(!support.may_call("shop__refund"));
        assert!(support.may_call("shop__get_order"));
    }
}
