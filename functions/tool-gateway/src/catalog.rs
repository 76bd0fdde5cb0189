//! The federated tool catalogue: prefixing, hidden arguments, input schemas normalised for the providers, collisions and role permissions, as pure functions.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use rmcp::model::{JsonObject, Tool};
use swarm_adapters::mcp::SIDE_EFFECTING_META;

use crate::config::{ConsentConfig, RoleConfig, SideEffectConfig, UpstreamConfig, is_valid_tool_name};

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
    /// Declared in the gateway's `side_effects` (and takes the idempotency argument): filled from
    /// `x-swarm-idempotency-key`, which must be present; never retried; listed with
    /// [`SIDE_EFFECTING_META`] so workers journal it.
    pub side_effecting: bool,
    /// Calls above an amount need an approval token (`side_effects.<tool>.consent`); the
    /// upstream takes its `limit_arg` (hidden here) and holds the order's limit.
    pub consent: Option<ConsentConfig>,
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

/// Appended to the description of a property that declared no type: it is offered as a string.
pub const UNTYPED_NOTE: &str = "(any value; send it as text)";

/// Makes an upstream tool's input schema one the major providers accept (OpenAI-compatible
/// function calling refuses a property without `type`, an array without `items`, and `anyOf`,
/// `oneOf`, `allOf`, `enum` or `not` at the top level):
/// - the root is an object: a root without `type` gets `"type": "object"` and `properties`; a root
///   of another type is refused (MCP arguments are always an object);
/// - root `anyOf`/`oneOf` whose branches only list `required` properties become a note in the
///   root's `description` ("give at least one of …"); root `allOf` of object branches is merged;
///   anything else there is refused;
/// - every property (nested ones, array items, `$defs` too) gets a type: from its `enum`/`const`
///   values or its keywords (`properties` → object, `items` → array, `minLength` → string…), else
///   `string` with [`UNTYPED_NOTE`] appended to its description; `true` is such a property, `false`
///   removes the property; an array without `items` gets string items; an `additionalProperties`
///   without a type (`{}`) is dropped (an open object allows any property anyway). Properties with
///   a `$ref` or typed `anyOf`/`oneOf` branches are kept;
/// - the result must compile as a JSON Schema (the worker validates arguments against it).
///
/// Errors: why the schema cannot be made acceptable (the tool is then left out and reported).
pub fn normalise_schema(schema: &JsonObject) -> Result<JsonObject, String> {
    use serde_json::Value;
    let mut out = schema.clone();
    match out.get("type") {
        None => {
            out.insert("type".into(), Value::from("object"));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(Value::Array(ts)) if ts.iter().any(|t| t == "object") => {
            out.insert("type".into(), Value::from("object"));
        }
        Some(other) => return Err(format!("input schema root is of type {other}, not an object")),
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = out.remove(key) {
            let groups = required_only_branches(&branches)
                .ok_or_else(|| format!("input schema has {key} at the top level, which providers refuse"))?;
            let note = format!("Give at least one of: {}.", groups.join(" | "));
            let description = match out.get("description").and_then(Value::as_str) {
                Some(d) if !d.trim().is_empty() => format!("{} {note}", d.trim()),
                _ => note,
            };
            out.insert("description".into(), Value::from(description));
        }
    }
    if let Some(branches) = out.remove("allOf") {
        merge_all_of(&mut out, &branches)?;
    }
    for key in ["not", "enum", "const"] {
        if out.contains_key(key) {
            return Err(format!("input schema has {key} at the top level, which providers refuse"));
        }
    }
    normalise_object_keywords(&mut out);
    if !out.contains_key("properties") {
        out.insert("properties".into(), Value::Object(JsonObject::new()));
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = out.get_mut(key) {
            for def in defs.values_mut() {
                if let Some(normal) = normalise_property(def) {
                    *def = normal;
                }
            }
        }
    }
    let compiled = Value::Object(out);
    jsonschema::validator_for(&compiled).map_err(|e| format!("input schema does not compile: {e}"))?;
    match compiled {
        Value::Object(out) => Ok(out),
        _ => Err("input schema is not an object".into()),
    }
}

/// The property lists of `anyOf`/`oneOf` branches that only name `required` properties.
fn required_only_branches(branches: &serde_json::Value) -> Option<Vec<String>> {
    let branches = branches.as_array()?;
    branches
        .iter()
        .map(|b| {
            let b = b.as_object()?;
            if b.keys().any(|k| k != "required") {
                return None;
            }
            let names: Vec<&str> = b.get("required")?.as_array()?.iter().filter_map(|v| v.as_str()).collect();
            (!names.is_empty()).then(|| names.join(" + "))
        })
        .collect()
}

/// Merges root `allOf` branches that are plain object schemas into `out`.
fn merge_all_of(out: &mut JsonObject, branches: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    let refused = || "input schema has allOf at the top level that cannot be merged".to_owned();
    for branch in branches.as_array().ok_or_else(refused)? {
        let b = branch.as_object().ok_or_else(refused)?;
        if b.keys().any(|k| !matches!(k.as_str(), "type" | "properties" | "required" | "description")) {
            return Err(refused());
        }
        if let Some(Value::Object(props)) = b.get("properties") {
            let target = out.entry("properties").or_insert_with(|| Value::Object(JsonObject::new()));
            if let Value::Object(t) = target {
                for (k, v) in props {
                    t.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        if let Some(Value::Array(req)) = b.get("required") {
            let target = out.entry("required").or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(t) = target {
                for r in req {
                    if !t.contains(r) {
                        t.push(r.clone());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Normalises `properties` (dropping `false` ones, from `required` too) and `additionalProperties` of an object schema.
fn normalise_object_keywords(o: &mut JsonObject) {
    use serde_json::Value;
    let mut dropped = Vec::new();
    if let Some(Value::Object(props)) = o.get_mut("properties") {
        let names: Vec<String> = props.keys().cloned().collect();
        for name in names {
            match props.get(&name).and_then(normalise_property) {
                Some(normal) => {
                    props.insert(name, normal);
                }
                None => {
                    props.remove(&name);
                    dropped.push(name);
                }
            }
        }
    }
    if !dropped.is_empty()
        && let Some(Value::Array(required)) = o.get_mut("required")
    {
        required.retain(|r| !r.as_str().is_some_and(|r| dropped.iter().any(|d| d == r)));
    }
    match o.get("additionalProperties") {
        Some(Value::Object(ap)) if declares_no_type(ap) => {
            o.remove("additionalProperties");
        }
        Some(ap @ Value::Object(_)) => {
            if let Some(normal) = normalise_property(ap) {
                o.insert("additionalProperties".into(), normal);
            }
        }
        _ => {}
    }
}

/// An object schema that constrains nothing a provider reads as a type (`{}`, only a description…).
fn declares_no_type(o: &JsonObject) -> bool {
    !["type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items"]
        .iter()
        .any(|k| o.contains_key(*k))
}

/// One property schema with a type (see [`normalise_schema`]); `None` for `false` (no value allowed).
fn normalise_property(v: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    let mut o = match v {
        Value::Bool(false) => return None,
        Value::Bool(true) => JsonObject::new(),
        Value::Object(o) => o.clone(),
        // Not a schema at all: offered as text, like an untyped property.
        _ => JsonObject::new(),
    };
    if o.contains_key("$ref") {
        return Some(Value::Object(o));
    }
    let branches = ["anyOf", "oneOf", "allOf"].into_iter().find(|k| o.contains_key(*k));
    if let Some(key) = branches
        && !o.contains_key("type")
    {
        if let Some(Value::Array(items)) = o.get_mut(key) {
            for item in items.iter_mut() {
                if let Some(normal) = normalise_property(item) {
                    *item = normal;
                }
            }
        }
        return Some(Value::Object(o));
    }
    let declared = match o.get("type") {
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(ts)) if !ts.is_empty() => {
            ts.iter().filter_map(Value::as_str).find(|t| *t != "null").map(str::to_owned).or(Some("null".into()))
        }
        _ => None,
    };
    let kind = match declared {
        Some(t) => t,
        None => {
            let t = inferred_type(&o);
            if t.is_none() {
                let description = match o.get("description").and_then(Value::as_str) {
                    Some(d) if !d.trim().is_empty() => format!("{} {UNTYPED_NOTE}", d.trim()),
                    _ => UNTYPED_NOTE.to_owned(),
                };
                o.insert("description".into(), Value::from(description));
            }
            let t = t.unwrap_or_else(|| Value::from("string"));
            o.insert("type".into(), t.clone());
            t.as_str().unwrap_or("string").to_owned()
        }
    };
    match kind.as_str() {
        "object" => normalise_object_keywords(&mut o),
        "array" => {
            let items = match o.get("items") {
                None => Some(serde_json::json!({"type": "string"})),
                // A draft-7 tuple: its first item's schema stands for all of them.
                Some(Value::Array(tuple)) => Some(
                    tuple.first().and_then(normalise_property).unwrap_or_else(|| serde_json::json!({"type": "string"})),
                ),
                Some(item) => normalise_property(item),
            };
            match items {
                Some(items) => {
                    o.insert("items".into(), items);
                }
                None => {
                    o.remove("items");
                }
            }
        }
        _ => {}
    }
    Some(Value::Object(o))
}

/// The type a property's keywords imply: from its `enum`/`const` values, else from keywords
/// that belong to one type. `None` when nothing says (the property takes anything).
fn inferred_type(o: &JsonObject) -> Option<serde_json::Value> {
    use serde_json::Value;
    let values: Vec<&Value> = match (o.get("enum"), o.get("const")) {
        (Some(Value::Array(v)), _) => v.iter().collect(),
        (_, Some(c)) => vec![c],
        _ => Vec::new(),
    };
    if !values.is_empty() {
        let mut types: Vec<&str> = Vec::new();
        for v in values {
            let t = match v {
                Value::String(_) => "string",
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
                Value::Number(_) => "number",
                Value::Null => "null",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            if !types.contains(&t) {
                types.push(t);
            }
        }
        if types.contains(&"number") {
            types.retain(|t| *t != "integer");
        }
        return Some(if types.len() == 1 { Value::from(types[0]) } else { Value::from(types) });
    }
    let has = |keys: &[&str]| keys.iter().any(|k| o.contains_key(*k));
    if has(&["properties", "additionalProperties", "required", "patternProperties", "minProperties", "maxProperties"]) {
        Some(Value::from("object"))
    } else if has(&["items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"]) {
        Some(Value::from("array"))
    } else if has(&["minLength", "maxLength", "pattern", "format"]) {
        Some(Value::from("string"))
    } else if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]) {
        Some(Value::from("number"))
    } else {
        None
    }
}

/// Why an upstream tool was left out of the catalogue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub tool: String,
    pub reason: String,
}

/// Turns an upstream's `tools/list` into exposed tools: applies the
/// upstream's allow/deny, the prefix, the name rule, hides the customer
/// and idempotency arguments and normalises the input schema
/// ([`normalise_schema`]). Tools breaking the name rule, or whose schema cannot
/// be made acceptable, are skipped (and reported), never renamed or sent as is.
/// Which tools have side effects is `side_effects` (the gateway's configuration, by exposed
/// name), never a name match: a tool that takes the idempotency argument but is not declared,
/// or is declared but takes none, is skipped too (fail closed); so is a tool with consent that
/// takes no consent-limit argument (it could not hold the order's limit).
pub fn expose_tools(
    upstream: usize,
    config: &UpstreamConfig,
    side_effects: &BTreeMap<String, SideEffectConfig>,
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
        let takes_key = hide_argument(&mut schema, &config.idempotency_arg);
        let declared = side_effects.get(&name);
        match (takes_key, declared) {
            (true, None) => {
                skipped.push(Skipped {
                    tool: original,
                    reason: format!(
                        "it takes an idempotency key ({}) but side_effects does not declare {name}",
                        config.idempotency_arg
                    ),
                });
                continue;
            }
            (false, Some(_)) => {
                skipped.push(Skipped {
                    tool: original,
                    reason: format!(
                        "side_effects declares {name} but it takes no idempotency argument ({})",
                        config.idempotency_arg
                    ),
                });
                continue;
            }
            _ => {}
        }
        let side_effecting = declared.is_some();
        let consent = declared.and_then(|d| d.consent.clone());
        if let Some(consent) = &consent
            && !hide_argument(&mut schema, &consent.limit_arg)
        {
            skipped.push(Skipped {
                tool: original,
                reason: format!(
                    "side_effects.{name}.consent needs the upstream to hold the order's consent limit, \
                     but it takes no {} argument",
                    consent.limit_arg
                ),
            });
            continue;
        }
        let schema = match normalise_schema(&schema) {
            Ok(s) => s,
            Err(reason) => {
                skipped.push(Skipped { tool: original, reason });
                continue;
            }
        };
        tool.input_schema = Arc::new(schema);
        tool.name = name.clone().into();
        if side_effecting {
            let mut meta = tool.meta.take().unwrap_or_default();
            meta.0.insert(SIDE_EFFECTING_META.to_owned(), serde_json::Value::Bool(true));
            tool.meta = Some(meta);
        }
        exposed.push(Arc::new(ExposedTool {
            name: Arc::from(name),
            upstream,
            upstream_name: upstream_name.clone(),
            original: Arc::from(original),
            listed: tool,
            customer_scoped,
            side_effecting,
            consent,
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
        let declared = BTreeMap::from([("shop__refund".to_owned(), SideEffectConfig::default())]);
        let (tools, skipped) = expose_tools(0, &upstream("shop"), &declared, vec![tool("refund", schema.clone())]);
        assert!(skipped.is_empty());
        let t = &tools[0];
        assert_eq!(&*t.name, "shop__refund");
        assert_eq!(&*t.original, "refund");
        assert!(t.customer_scoped && t.side_effecting);
        assert_eq!(t.listed.meta.as_ref().and_then(|m| m.0.get(SIDE_EFFECTING_META)), Some(&json!(true)));
        // Not declared: left out and reported, whatever its arguments are called.
        let (tools, skipped) = expose_tools(0, &upstream("shop"), &BTreeMap::new(), vec![tool("refund", schema)]);
        assert!(tools.is_empty());
        assert!(skipped[0].reason.contains("side_effects does not declare shop__refund"), "{skipped:?}");
        // Declared but it takes no key: left out too (it could not be made idempotent).
        let plain = json!({"type": "object", "properties": {"order_id": {"type": "string"}}});
        let declared = BTreeMap::from([("shop__cancel".to_owned(), SideEffectConfig::default())]);
        let (tools, skipped) = expose_tools(0, &upstream("shop"), &declared, vec![tool("cancel", plain)]);
        assert!(tools.is_empty());
        assert!(skipped[0].reason.contains("takes no idempotency argument"), "{skipped:?}");
        let listed = serde_json::Value::Object((*t.listed.input_schema).clone());
        assert_eq!(
            listed,
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
        );
        assert_eq!(t.listed.name, "shop__refund");
    }

    #[test]
    fn a_tool_with_consent_that_cannot_hold_the_orders_limit_is_left_out() {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"},
            "idempotency_key": {"type": "string"}}});
        let consent = SideEffectConfig { consent: Some(ConsentConfig::every_call()) };
        let declared = BTreeMap::from([("shop__refund".to_owned(), consent)]);
        let (tools, skipped) = expose_tools(0, &upstream("shop"), &declared, vec![tool("refund", schema.clone())]);
        assert!(tools.is_empty());
        assert!(skipped[0].reason.contains("takes no consent_limit_cents argument"), "{skipped:?}");
        let mut holding = schema;
        holding["properties"]["consent_limit_cents"] = json!({"type": "integer"});
        let (tools, skipped) = expose_tools(0, &upstream("shop"), &declared, vec![tool("refund", holding)]);
        assert!(skipped.is_empty(), "{skipped:?}");
        let listed = serde_json::Value::Object((*tools[0].listed.input_schema).clone());
        assert_eq!(listed["properties"], json!({"order_id": {"type": "string"}}), "the limit is the gateway's, hidden");
    }

    fn case_tool(name: &str) -> Tool {
        serde_json::from_value(swarm_testing::mcp_case(name)["tool"].clone()).unwrap()
    }

    #[test]
    fn untyped_properties_are_typed_at_discovery_and_the_listed_schema_compiles() {
        let (tools, skipped) =
            expose_tools(0, &upstream("ev"), &BTreeMap::new(), vec![case_tool("schema-without-types")]);
        assert!(skipped.is_empty(), "{skipped:?}");
        let listed = serde_json::Value::Object((*tools[0].listed.input_schema).clone());
        assert_eq!(
            listed,
            json!({"type": "object", "required": ["q"], "properties": {
                "q": {"type": "string", "description": format!("what to look for {UNTYPED_NOTE}")},
                "filters": {"type": "object"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "sort": {"type": "string", "enum": ["price", "name"]},
                "limit": {"type": ["integer", "null"]}}})
        );
        let v = jsonschema::validator_for(&listed).unwrap();
        assert!(v.is_valid(&json!({"q": "jacket", "filters": {"colour": "navy"}, "tags": ["sale"], "limit": 3})));
        assert!(!v.is_valid(&json!({"q": 5})));
    }

    #[test]
    fn a_non_object_root_is_left_out_and_reported_like_an_invalid_name() {
        let tools = vec![case_tool("schema-non-object-root"), case_tool("schema-root-without-type")];
        let (exposed, skipped) = expose_tools(0, &upstream("ev"), &BTreeMap::new(), tools);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].tool, "echo_text");
        assert!(skipped[0].reason.contains("not an object"), "{}", skipped[0].reason);
        assert_eq!(exposed.len(), 1);
        assert_eq!(exposed[0].listed.input_schema.get("type"), Some(&json!("object")));
    }

    #[test]
    fn root_combinators_providers_refuse_become_notes_merges_or_refusals() {
        let either = json!({"type": "object", "properties": {"sku": {"type": "string"}, "name": {"type": "string"}},
            "anyOf": [{"required": ["sku"]}, {"required": ["name"]}]});
        let out = normalise_schema(either.as_object().unwrap()).unwrap();
        assert!(!out.contains_key("anyOf"));
        assert_eq!(out["description"], "Give at least one of: sku | name.");
        let merged = json!({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"minimum": 1}}}]});
        let out = normalise_schema(merged.as_object().unwrap()).unwrap();
        assert_eq!(out["properties"], json!({"a": {"type": "string"}, "b": {"type": "number", "minimum": 1}}));
        assert_eq!(out["required"], json!(["a"]));
        let refused = json!({"type": "object", "oneOf": [{"properties": {"x": {"type": "string"}}}]});
        assert!(normalise_schema(refused.as_object().unwrap()).unwrap_err().contains("oneOf"));
        let broken = json!({"type": "object", "properties": {"x": {"type": "strng"}}});
        assert!(normalise_schema(broken.as_object().unwrap()).unwrap_err().contains("does not compile"));
        // `false` properties go, from `required` too; nested objects and items are typed as well.
        let nested = json!({"type": "object", "required": ["gone", "rows"], "properties": {"gone": false,
            "rows": {"items": {"properties": {"n": {"const": 3}}}}}});
        let out = normalise_schema(nested.as_object().unwrap()).unwrap();
        assert_eq!(out["required"], json!(["rows"]));
        assert_eq!(
            out["properties"]["rows"],
            json!({"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer", "const": 3}}}})
        );
    }

    #[test]
    fn tool_without_customer_argument_is_not_customer_scoped() {
        let schema = json!({"type": "object", "properties": {"sku": {"type": "string"}}});
        let (tools, _) = expose_tools(0, &upstream("shop"), &BTreeMap::new(), vec![tool("get_product", schema)]);
        assert!(!tools[0].customer_scoped);
        assert!(!tools[0].side_effecting);
    }

    #[test]
    fn names_breaking_the_llm_rule_are_skipped_not_renamed() {
        let (tools, skipped) =
            expose_tools(0, &upstream("ev"), &BTreeMap::new(), vec![tool("has space", json!({"type": "object"}))]);
        assert!(tools.is_empty());
        assert_eq!(skipped[0].tool, "has space");
    }

    #[test]
    fn upstream_allow_and_deny_filter_original_names() {
        let mut config = upstream("ev");
        config.allow = Some(vec!["get*".into(), "echo".into()]);
        config.deny = Some(vec!["get-env".into()]);
        let tools = ["echo", "get-sum", "get-env", "trigger"].map(|n| tool(n, json!({"type": "object"})));
        let (exposed, _) = expose_tools(1, &config, &BTreeMap::new(), tools.to_vec());
        let names: Vec<&str> = exposed.iter().map(|t| &*t.name).collect();
        assert_eq!(names, ["ev__echo", "ev__get-sum"]);
    }

    #[test]
    fn unprefixed_upstreams_with_the_same_tool_collide_naming_both() {
        let mut a = upstream("alpha");
        a.prefix = crate::config::Prefix::Off;
        let mut b = upstream("beta");
        b.prefix = crate::config::Prefix::Off;
        let (ta, _) = expose_tools(0, &a, &BTreeMap::new(), vec![tool("echo", json!({"type": "object"}))]);
        let (tb, _) = expose_tools(1, &b, &BTreeMap::new(), vec![tool("echo", json!({"type": "object"}))]);
        let (catalog, collisions) = merge(&[&ta, &tb], &[]);
        assert_eq!(collisions.len(), 1);
        let text = collisions[0].to_string();
        assert!(text.contains("alpha") && text.contains("beta") && text.contains("echo"), "{text}");
        assert_eq!(&*catalog.tools["echo"].upstream_name, "alpha");
    }

    #[test]
    fn role_listing_holds_only_allowed_tools_in_name_order() {
        let tools = ["track_shipment", "refund", "get_order"].map(|n| tool(n, json!({"type": "object"})));
        let (exposed, _) = expose_tools(0, &upstream("shop"), &BTreeMap::new(), tools.to_vec());
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
