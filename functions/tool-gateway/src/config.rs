//! Gateway configuration: upstreams, roles, limits; read once from `GATEWAY_CONFIG` (a path or inline JSON), secrets resolved from `${env:NAME}`.

use std::{collections::BTreeMap, collections::HashMap, time::Duration};

use serde::Deserialize;
use swarm_adapters::config::{ConfigError, SecretSource, SecretsExtension, Vars, var_list};
use swarm_adapters::mcp::GatewayToken;

use crate::error::GatewayError;

/// A configuration value that may hold a secret (token, header). `Debug`
/// prints `***`; `${env:NAME}` references inside it are resolved at start-up.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The raw value, for the wire only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every `${env:NAME}` with `lookup(NAME)`.
    /// Errors: [`GatewayError::Config`] naming a variable that is unset or a
    /// reference that is not closed (never the value).
    fn resolve(&self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Secret, GatewayError> {
        let mut out = String::with_capacity(self.0.len());
        let mut rest = self.0.as_str();
        while let Some(start) = rest.find("${env:") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 6..];
            let end =
                after.find('}').ok_or_else(|| GatewayError::Config("unterminated ${env:...} reference".into()))?;
            let name = &after[..end];
            let value = lookup(name).ok_or_else(|| {
                GatewayError::Config(format!(
                    "environment variable {name} (referenced by the gateway config) is not set"
                ))
            })?;
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(Secret(out))
    }
}

impl Secret {
    /// The `NAME`s of the `${env:NAME}` references in this value (an unclosed one is reported by resolution).
    fn references(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = self.0.as_str();
        while let Some(start) = rest.find("${env:") {
            let after = &rest[start + 6..];
            let Some(end) = after.find('}') else { break };
            names.push(after[..end].to_owned());
            rest = &after[end + 1..];
        }
        names
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// How an upstream's tool names are prefixed: `"<name>__"` by default, a
/// custom string, or off (`false` in JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Prefix {
    #[default]
    Default,
    Off,
    Custom(String),
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Bool(bool),
            Str(String),
        }
        Ok(match Repr::deserialize(d)? {
            Repr::Bool(true) => Prefix::Default,
            Repr::Bool(false) => Prefix::Off,
            Repr::Str(s) => Prefix::Custom(s),
        })
    }
}

/// Circuit breaker of one upstream: opens after `failures` failures or
/// timeouts within `window_secs`, stays open `open_secs`, then lets one probe through.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    #[serde(default = "default_breaker_failures")]
    pub failures: u32,
    /// Window in seconds.
    #[serde(default = "default_breaker_window")]
    pub window_secs: f64,
    /// Time open before the half-open probe, seconds.
    #[serde(default = "default_breaker_open")]
    pub open_secs: f64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: default_breaker_failures(),
            window_secs: default_breaker_window(),
            open_secs: default_breaker_open(),
        }
    }
}

fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_window() -> f64 {
    30.0
}
fn default_breaker_open() -> f64 {
    15.0
}
/// The timing table's `gateway.call_timeout_secs`.
fn default_call_timeout() -> f64 {
    swarm_core::timings::Timings::STANDARD.gateway.call_timeout.as_secs_f64()
}
/// The timing table's `gateway.discovery_timeout_secs`.
fn default_discovery_timeout() -> f64 {
    swarm_core::timings::Timings::STANDARD.gateway.discovery_timeout.as_secs_f64()
}
fn default_customer_arg() -> String {
    "customer_id".into()
}
fn default_idempotency_arg() -> String {
    "idempotency_key".into()
}
fn default_true() -> bool {
    true
}
fn default_list_ttl() -> f64 {
    60.0
}
fn default_discovery_retry() -> f64 {
    1.0
}
fn default_allowed_hosts() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

/// SigV4 signing of every request to an upstream behind an `AWS_IAM` function URL, with the
/// gateway function's own credentials (its execution role needs `lambda:InvokeFunctionUrl` and
/// `lambda:InvokeFunction` on that function).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SigV4Config {
    /// The signing service: `lambda` for a function URL.
    #[serde(default = "default_sigv4_service")]
    pub service: String,
    /// The function's region, e.g. `us-east-1`.
    pub region: String,
}

fn default_sigv4_service() -> String {
    swarm_adapters::mcp::sigv4::LAMBDA_SERVICE.to_owned()
}

/// One upstream MCP server (Streamable HTTP).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `[a-zA-Z0-9_-]+`; appears in logs, metrics and the default prefix.
    pub name: String,
    /// The upstream's MCP endpoint, e.g. `http://127.0.0.1:8791/mcp`.
    pub url: String,
    #[serde(default)]
    pub prefix: Prefix,
    /// Extra HTTP headers sent upstream (values may hold `${env:NAME}`): an external upstream's
    /// credential, e.g. `{"authorization": "Bearer ${env:SHOP_TOKEN}"}` with the token in
    /// Secrets Manager (`SHOP_TOKEN_SECRET_ARN`).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// Sign every request with SigV4 (an upstream behind an `AWS_IAM` function URL).
    #[serde(default)]
    pub sigv4: Option<SigV4Config>,
    /// Deadline of one `tools/call`, seconds; on expiry an MCP cancellation is sent upstream.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: f64,
    /// Deadline of one discovery attempt (session set-up + `tools/list`), seconds.
    #[serde(default = "default_discovery_timeout")]
    pub discovery_timeout_secs: f64,
    /// Calls per second allowed per tool of this upstream; `None` = unlimited.
    #[serde(default)]
    pub rate_limit_per_sec: Option<f64>,
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// Glob patterns (`*` wildcard) on the upstream's own tool names; absent = all.
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub deny: Option<Vec<String>>,
    /// Argument the gateway fills from `x-swarm-customer-id` and hides from the model.
    #[serde(default = "default_customer_arg")]
    pub customer_scoped_arg: String,
    /// Argument the gateway fills from `x-swarm-idempotency-key` and hides; a
    /// tool that has it is side-effecting (never retried, refused without a key).
    #[serde(default = "default_idempotency_arg")]
    pub idempotency_arg: String,
}

impl UpstreamConfig {
    /// The prefix put before this upstream's tool names ("" when off).
    pub fn prefix_str(&self) -> String {
        match &self.prefix {
            Prefix::Default => format!("{}__", self.name),
            Prefix::Off => String::new(),
            Prefix::Custom(p) => p.clone(),
        }
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.call_timeout_secs)
    }

    pub fn discovery_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.discovery_timeout_secs)
    }

    /// An upstream with the defaults for everything but name and URL.
    pub fn new(name: &str, url: &str) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            prefix: Prefix::Default,
            headers: BTreeMap::new(),
            sigv4: None,
            call_timeout_secs: default_call_timeout(),
            discovery_timeout_secs: default_discovery_timeout(),
            rate_limit_per_sec: None,
            breaker: BreakerConfig::default(),
            allow: None,
            deny: None,
            customer_scoped_arg: default_customer_arg(),
            idempotency_arg: default_idempotency_arg(),
        }
    }
}

/// A tool with side effects (by its exposed name, e.g. `shop__refund`): the worker journals its
/// calls and sends each with a positional idempotency key, the gateway never retries it, and
/// with `consent` a call above an amount needs a person's approval first.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SideEffectConfig {
    #[serde(default)]
    pub consent: Option<ConsentConfig>,
}

/// Consent before money moves: a call whose amount is above `above` (in the order's currency;
/// `0` means every call) is refused before dispatch unless it carries a valid approval token for
/// exactly its approval, conversation, customer, tool, order and amount.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConsentConfig {
    #[serde(default)]
    pub above: f64,
    /// Argument naming the order (must be an identifier).
    #[serde(default = "default_order_arg")]
    pub order_arg: String,
    /// Argument holding the amount (must be given: an approval is for an exact amount).
    #[serde(default = "default_amount_arg")]
    pub amount_arg: String,
    /// Argument holding the reason, shown to the operator (cleaned, bounded).
    #[serde(default = "default_reason_arg")]
    pub reason_arg: String,
}

impl ConsentConfig {
    /// Every call needs an approval (the default of the demo configuration).
    pub fn every_call() -> Self {
        Self {
            above: 0.0,
            order_arg: default_order_arg(),
            amount_arg: default_amount_arg(),
            reason_arg: default_reason_arg(),
        }
    }

    /// The threshold in cents.
    pub fn above_cents(&self) -> i64 {
        (self.above * 100.0).round() as i64
    }
}

fn default_order_arg() -> String {
    "order_id".into()
}
fn default_amount_arg() -> String {
    "amount".into()
}
fn default_reason_arg() -> String {
    "reason".into()
}

/// A worker role: its credential and what it may see and call.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// Bearer token (may be a `${env:NAME}` reference).
    pub token: Secret,
    /// Glob allowlist (`*` wildcard) on exposed tool names.
    pub tools: Vec<String>,
    /// Globs removed from the allowlist.
    #[serde(default)]
    pub deny: Vec<String>,
    /// `false`: the role may list its tools but call none.
    #[serde(default = "default_true")]
    pub call: bool,
}

/// The whole gateway configuration (JSON).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    pub upstreams: Vec<UpstreamConfig>,
    pub roles: BTreeMap<String, RoleConfig>,
    /// How long a successful `tools/list` of one upstream is reused, seconds.
    #[serde(default = "default_list_ttl")]
    pub list_ttl_secs: f64,
    /// Least time between two discovery attempts of an upstream that failed, seconds.
    #[serde(default = "default_discovery_retry")]
    pub discovery_retry_secs: f64,
    /// Calls per second over all tools; `None` = unlimited.
    #[serde(default)]
    pub global_rate_limit_per_sec: Option<f64>,
    /// Accepted `Host` values (DNS-rebinding protection); `["*"]` accepts any.
    #[serde(default = "default_allowed_hosts")]
    pub allowed_hosts: Vec<String>,
    /// Role used for requests without an `Authorization` header. Off (`None`)
    /// by default; meant only for running the MCP conformance suite, which
    /// cannot send a credential.
    #[serde(default)]
    pub anonymous_role: Option<String>,
    /// Keep idle HTTP connections to upstreams for reuse. Off by default
    /// (a new connection per upstream request: nothing stale after an
    /// upstream restart or a Lambda freeze); on saves CPU per call.
    #[serde(default)]
    pub upstream_keep_alive: bool,
    /// The tools with side effects, by exposed name. An upstream tool taking the idempotency
    /// argument that is not declared here, or one declared here that takes none, is not exposed.
    #[serde(default)]
    pub side_effects: BTreeMap<String, SideEffectConfig>,
    /// The key approval tokens are verified with (at least 32 bytes; `${env:APPROVAL_KEY}`),
    /// shared only with the approvals API. Required when any side effect has `consent`.
    #[serde(default)]
    pub approval_key: Option<Secret>,
}

/// Whether `name` fits the LLM function-name rule `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn positive(what: &str, value: f64) -> Result<(), GatewayError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(GatewayError::Config(format!("{what} must be a positive number of seconds/calls, got {value}")))
    }
}

impl GatewayConfig {
    /// Reads `GATEWAY_CONFIG` through `lookup` (a file path, or inline JSON
    /// when it starts with `{`), resolves `${env:NAME}` references through the
    /// same `lookup`, and validates.
    /// Errors: [`GatewayError::Config`] for a missing variable, an unreadable
    /// file, bad JSON or an invalid setting.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, GatewayError> {
        let config = Self::parse(&lookup)?.resolve_secrets(&lookup)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses `GATEWAY_CONFIG` (a file path, or inline JSON when it
    /// starts with `{`) with its `${env:NAME}` references left in place
    /// ([`Self::references`]); not validated yet.
    /// Errors: [`GatewayError::Config`] when unset, unreadable or not gateway JSON.
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, GatewayError> {
        let raw = lookup("GATEWAY_CONFIG")
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| GatewayError::Config("GATEWAY_CONFIG is not set (a path or inline JSON)".into()))?;
        let text = if raw.trim_start().starts_with('{') {
            raw
        } else {
            std::fs::read_to_string(raw.trim())
                .map_err(|e| GatewayError::Config(format!("cannot read GATEWAY_CONFIG file {raw:?}: {e}")))?
        };
        serde_json::from_str(&text)
            .map_err(|e| GatewayError::Config(format!("GATEWAY_CONFIG is not valid gateway JSON: {e}")))
    }

    /// Every `NAME` of a `${env:NAME}` in role tokens and upstream headers, sorted, each once.
    pub fn references(&self) -> Vec<String> {
        let secrets = self
            .roles
            .values()
            .map(|r| &r.token)
            .chain(self.upstreams.iter().flat_map(|u| u.headers.values()))
            .chain(self.approval_key.iter());
        let mut names: Vec<String> = secrets.flat_map(Secret::references).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Resolves `${env:NAME}` in role tokens, upstream headers and the approval key.
    pub fn resolve_secrets(mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, GatewayError> {
        for role in self.roles.values_mut() {
            role.token = role.token.resolve(lookup)?;
        }
        if let Some(key) = &self.approval_key {
            self.approval_key = Some(key.resolve(lookup)?);
        }
        for upstream in &mut self.upstreams {
            for value in upstream.headers.values_mut() {
                *value = value.resolve(lookup)?;
            }
        }
        Ok(self)
    }

    /// This configuration as one of `instances` gateway instances runs it: its rate limits (global
    /// and per tool) and breaker thresholds are figures for the whole gateway, so each instance
    /// gets its share — the rates divided by `instances`, a breaker opening after
    /// `ceil(failures / instances)` failures in its window. The effective limits then do not grow
    /// with the number of instances Lambda runs (at most the reserved concurrency,
    /// `GATEWAY_INSTANCE_CAP`). `instances` 0 or 1 changes nothing.
    pub fn per_instance(mut self, instances: u32) -> Self {
        if instances <= 1 {
            return self;
        }
        let n = f64::from(instances);
        self.global_rate_limit_per_sec = self.global_rate_limit_per_sec.map(|r| r / n);
        for u in &mut self.upstreams {
            u.rate_limit_per_sec = u.rate_limit_per_sec.map(|r| r / n);
            u.breaker.failures = u.breaker.failures.div_ceil(instances).max(1);
        }
        self
    }

    /// Checks every setting; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), GatewayError> {
        if self.upstreams.is_empty() {
            return Err(GatewayError::Config("at least one upstream is required".into()));
        }
        let mut names = std::collections::HashSet::new();
        for u in &self.upstreams {
            if !is_valid_tool_name(&u.name) {
                return Err(GatewayError::Config(format!(
                    "upstream name {:?} must match ^[a-zA-Z0-9_-]{{1,64}}$",
                    u.name
                )));
            }
            if !names.insert(u.name.as_str()) {
                return Err(GatewayError::Config(format!("upstream name {:?} is used twice", u.name)));
            }
            let prefix = u.prefix_str();
            if !prefix.is_empty() && !is_valid_tool_name(&prefix) {
                return Err(GatewayError::Config(format!(
                    "prefix {prefix:?} of upstream {} must be made of [a-zA-Z0-9_-]",
                    u.name
                )));
            }
            let url = reqwest::Url::parse(&u.url)
                .map_err(|e| GatewayError::Config(format!("upstream {} url {:?} is invalid: {e}", u.name, u.url)))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(GatewayError::Config(format!("upstream {} url must be http(s)", u.name)));
            }
            if let Some(sigv4) = &u.sigv4 {
                if sigv4.region.trim().is_empty() || sigv4.service.trim().is_empty() {
                    return Err(GatewayError::Config(format!(
                        "upstream {} sigv4 needs a region and a service",
                        u.name
                    )));
                }
                // The signature is the Authorization header; a second one would break it.
                if u.headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
                    return Err(GatewayError::Config(format!(
                        "upstream {} has sigv4 and an authorization header: SigV4 is its credential",
                        u.name
                    )));
                }
            }
            positive(&format!("upstream {} call_timeout_secs", u.name), u.call_timeout_secs)?;
            positive(&format!("upstream {} discovery_timeout_secs", u.name), u.discovery_timeout_secs)?;
            if let Some(rate) = u.rate_limit_per_sec {
                positive(&format!("upstream {} rate_limit_per_sec", u.name), rate)?;
            }
            if u.breaker.failures == 0 {
                return Err(GatewayError::Config(format!("upstream {} breaker.failures must be at least 1", u.name)));
            }
            positive(&format!("upstream {} breaker.window_secs", u.name), u.breaker.window_secs)?;
            positive(&format!("upstream {} breaker.open_secs", u.name), u.breaker.open_secs)?;
            for (header, value) in &u.headers {
                http::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
                    GatewayError::Config(format!("upstream {} header name {header:?} is invalid", u.name))
                })?;
                http::HeaderValue::from_str(value.expose()).map_err(|_| {
                    GatewayError::Config(format!(
                        "upstream {} header {header} has a value that is not a valid header value",
                        u.name
                    ))
                })?;
            }
        }
        if self.roles.is_empty() {
            return Err(GatewayError::Config("at least one role is required".into()));
        }
        let mut tokens = std::collections::HashSet::new();
        for (name, role) in &self.roles {
            if role.token.expose().len() < 16 {
                return Err(GatewayError::Config(format!(
                    "token of role {name} must be at least 16 characters (use a random value)"
                )));
            }
            if !tokens.insert(role.token.expose()) {
                return Err(GatewayError::Config(format!("role {name} shares its token with another role")));
            }
            if role.tools.iter().chain(&role.deny).any(|p| p.is_empty()) {
                return Err(GatewayError::Config(format!("role {name} has an empty tool pattern")));
            }
        }
        if let Some(anon) = &self.anonymous_role
            && !self.roles.contains_key(anon)
        {
            return Err(GatewayError::Config(format!("anonymous_role {anon:?} is not a configured role")));
        }
        for (tool, effect) in &self.side_effects {
            if !is_valid_tool_name(tool) {
                return Err(GatewayError::Config(format!("side_effects entry {tool:?} is not a tool name")));
            }
            if let Some(consent) = &effect.consent {
                if !consent.above.is_finite() || consent.above < 0.0 {
                    return Err(GatewayError::Config(format!(
                        "side_effects.{tool}.consent.above must be 0 or a positive amount"
                    )));
                }
                if self.approval_key.is_none() {
                    return Err(GatewayError::Config(format!(
                        "side_effects.{tool} needs consent: set approval_key (e.g. \"${{env:APPROVAL_KEY}}\")"
                    )));
                }
            }
        }
        if let Some(key) = &self.approval_key
            && !key.expose().contains("${env:")
            && key.expose().trim().len() < swarm_core::approval::MIN_KEY_BYTES
        {
            return Err(GatewayError::Config(format!(
                "approval_key must be at least {} bytes (use a random value)",
                swarm_core::approval::MIN_KEY_BYTES
            )));
        }
        positive("list_ttl_secs", self.list_ttl_secs)?;
        positive("discovery_retry_secs", self.discovery_retry_secs)?;
        if let Some(rate) = self.global_rate_limit_per_sec {
            positive("global_rate_limit_per_sec", rate)?;
        }
        Ok(())
    }
}

/// One random bearer token per demo role (`support`, `refund`, `planner`), the gateway's own
/// credential for the demo shop (its upstream `Authorization` header), and the approval key the
/// local stack's gateway and approvals API share. `Debug` prints `***`.
#[derive(Clone)]
pub struct DemoTokens {
    tokens: BTreeMap<String, GatewayToken>,
    shop: GatewayToken,
    approval_key: String,
}

impl std::fmt::Debug for DemoTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DemoTokens(***)")
    }
}

/// The demo roles, in the order [`demo_config`] defines them.
pub const DEMO_ROLES: [&str; 3] = ["support", "refund", "planner"];

impl DemoTokens {
    /// Fresh tokens: 32 random bytes as hex, one per demo role.
    pub fn generate() -> Self {
        use rand::RngCore;
        let mut rng = rand::rng();
        let mut random = || {
            let mut bytes = [0u8; 32];
            rng.fill_bytes(&mut bytes);
            GatewayToken::new(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
        };
        let tokens = DEMO_ROLES.iter().map(|role| (role.to_string(), random())).collect();
        let shop = random();
        let (_, approval_key) = swarm_core::approval::ApprovalKey::generate();
        Self { tokens, shop, approval_key }
    }

    /// The credential the gateway presents to the demo shop (give it to the shop's `ShopAccess`).
    pub fn shop_upstream(&self) -> &GatewayToken {
        &self.shop
    }

    /// The approval key (hex text), for the approvals API of the same stack.
    pub fn approval_key(&self) -> &str {
        &self.approval_key
    }

    /// The token of `role`, if it is a demo role.
    pub fn token(&self, role: &str) -> Option<&GatewayToken> {
        self.tokens.get(role)
    }

    /// role → token, as `McpToolGateway::new` takes it.
    pub fn role_tokens(&self) -> HashMap<String, GatewayToken> {
        self.tokens.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// The local stack's gateway: upstream `shop` (prefix `shop__`) at `shop_url`, called with
/// `Authorization: Bearer <tokens.shop_upstream()>`;
/// roles `support` (every shop tool but `shop__refund`), `refund`
/// (`shop__refund`, `shop__get_refund_policy`, `shop__get_order`,
/// `shop__list_customer_orders`) and `planner` (lists every tool, calls none);
/// `shop__refund` side-effecting with consent for every refund (the approval key of `tokens`).
pub fn demo_config(shop_url: &str, tokens: &DemoTokens) -> GatewayConfig {
    let token = |role: &str| Secret::new(tokens.token(role).map(|t| t.expose().to_owned()).unwrap_or_default());
    // Its waits are the timing table's (`UpstreamConfig::new`'s defaults); the local stack scales them.
    let mut shop = UpstreamConfig::new("shop", shop_url);
    shop.headers.insert("authorization".into(), Secret::new(format!("Bearer {}", tokens.shop_upstream().expose())));
    let mut roles = BTreeMap::new();
    roles.insert(
        "support".to_owned(),
        RoleConfig {
            token: token("support"),
            tools: vec!["shop__*".into()],
            deny: vec!["shop__refund".into()],
            call: true,
        },
    );
    roles.insert(
        "refund".to_owned(),
        RoleConfig {
            token: token("refund"),
            tools: vec![
                "shop__refund".into(),
                "shop__get_refund_policy".into(),
                "shop__get_order".into(),
                "shop__list_customer_orders".into(),
            ],
            deny: vec![],
            call: true,
        },
    );
    roles.insert(
        "planner".to_owned(),
        RoleConfig { token: token("planner"), tools: vec!["*".into()], deny: vec![], call: false },
    );
    GatewayConfig {
        upstreams: vec![shop],
        roles,
        list_ttl_secs: default_list_ttl(),
        discovery_retry_secs: default_discovery_retry(),
        global_rate_limit_per_sec: None,
        allowed_hosts: default_allowed_hosts(),
        anonymous_role: None,
        upstream_keep_alive: false,
        side_effects: BTreeMap::from([(
            "shop__refund".to_owned(),
            SideEffectConfig { consent: Some(ConsentConfig::every_call()) },
        )]),
        approval_key: Some(Secret::new(tokens.approval_key())),
    }
}

/// Where the gateway binary listens when not on Lambda (`GATEWAY_ADDR`).
pub const DEFAULT_GATEWAY_ADDR: &str = "127.0.0.1:8790";

/// The gateway function's one typed config: how it serves, `GATEWAY_CONFIG`,
/// and where each secret it references comes from. Built by
/// [`GatewayFunctionConfig::from_lookup`] without I/O beyond reading a
/// `GATEWAY_CONFIG` file; [`GatewayFunctionConfig::resolve`] fetches the secrets.
#[derive(Clone, Debug)]
pub struct GatewayFunctionConfig {
    /// `AWS_LAMBDA_RUNTIME_API` is set: serve through `lambda_http`.
    pub on_lambda: bool,
    /// `AWS_LAMBDA_FUNCTION_NAME` is set: metrics also as CloudWatch embedded metric format.
    pub emf_metrics: bool,
    /// `GATEWAY_ADDR` (default [`DEFAULT_GATEWAY_ADDR`]); unused on Lambda.
    pub addr: std::net::SocketAddr,
    /// `GATEWAY_CONFIG`, its `${env:NAME}` references unresolved.
    pub gateway: GatewayConfig,
    /// `GATEWAY_INSTANCE_CAP`: the most instances of this gateway at once (its reserved
    /// concurrency); `None` (unset or `-1`: unreserved) keeps every limit per instance.
    pub instance_cap: Option<u32>,
    /// For each `${env:NAME}`: `NAME` itself (local runs) or the secret named by `NAME_SECRET_ARN`.
    pub secrets: Vec<(String, SecretSource)>,
    pub extension: SecretsExtension,
}

impl GatewayFunctionConfig {
    /// Variables read under fixed names. Besides these, each `${env:NAME}` in
    /// `GATEWAY_CONFIG` reads `NAME` or `NAME_SECRET_ARN`.
    pub fn vars() -> Vec<&'static str> {
        var_list(&[
            &[
                "GATEWAY_CONFIG",
                "GATEWAY_ADDR",
                "GATEWAY_INSTANCE_CAP",
                "AWS_LAMBDA_RUNTIME_API",
                "AWS_LAMBDA_FUNCTION_NAME",
            ],
            SecretsExtension::VARS,
        ])
    }

    /// Errors: [`GatewayError::Config`] naming the variable — `GATEWAY_CONFIG`
    /// unset or not gateway JSON, `GATEWAY_ADDR` not host:port, a `${env:NAME}`
    /// with neither `NAME` nor `NAME_SECRET_ARN` set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, GatewayError> {
        let config_error = |e: ConfigError| GatewayError::Config(e.to_string());
        let vars = Vars::new(&lookup);
        let addr_text = vars.get("GATEWAY_ADDR").unwrap_or_else(|| DEFAULT_GATEWAY_ADDR.to_owned());
        let addr = addr_text.parse().map_err(|_| {
            config_error(ConfigError::Invalid {
                var: "GATEWAY_ADDR",
                accepted: format!("an address like {DEFAULT_GATEWAY_ADDR}"),
                value: addr_text.clone(),
            })
        })?;
        let gateway = GatewayConfig::parse(&lookup)?;
        let instance_cap = match vars.get("GATEWAY_INSTANCE_CAP").as_deref().map(str::trim) {
            None | Some("-1") => None,
            Some(_) => vars
                .number(
                    "GATEWAY_INSTANCE_CAP",
                    1..=100_000,
                    "the gateway's reserved concurrency, a whole number from 1 to 100000, or -1 (unreserved)",
                )
                .map_err(config_error)?
                .and_then(|n| u32::try_from(n).ok()),
        };
        let mut secrets = Vec::new();
        for name in gateway.references() {
            let arn_var = format!("{name}_SECRET_ARN");
            let source = SecretSource::from_lookup(&lookup, &name, &arn_var).ok_or_else(|| {
                GatewayError::Config(format!(
                    "{name} (referenced by GATEWAY_CONFIG) is not set: set {name}, or {arn_var} on AWS"
                ))
            })?;
            secrets.push((name, source));
        }
        Ok(Self {
            on_lambda: vars.get("AWS_LAMBDA_RUNTIME_API").is_some(),
            emf_metrics: vars.get("AWS_LAMBDA_FUNCTION_NAME").is_some(),
            addr,
            gateway,
            instance_cap,
            secrets,
            extension: SecretsExtension::from_lookup(&lookup).map_err(config_error)?,
        })
    }

    /// [`GatewayFunctionConfig::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, GatewayError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The gateway configuration with every reference replaced by its secret
    /// (fetched through the extension when stored), its limits divided among
    /// the instances ([`GatewayConfig::per_instance`]), validated.
    pub async fn resolve(&self) -> Result<GatewayConfig, GatewayError> {
        let mut values = HashMap::with_capacity(self.secrets.len());
        for (name, source) in &self.secrets {
            let value = source.resolve(&self.extension).await.map_err(|e| GatewayError::Config(e.to_string()))?;
            values.insert(name.clone(), value.expose().to_owned());
        }
        let config = self
            .gateway
            .clone()
            .resolve_secrets(&|name| values.get(name).cloned())?
            .per_instance(self.instance_cap.unwrap_or(1));
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal_json() -> String {
        r#"{
            "upstreams": [{"name": "shop", "url": "http://127.0.0.1:1/mcp",
                           "headers": {"x-api-key": "k-${env:SHOP_KEY}"}}],
            "roles": {"support": {"token": "${env:SUPPORT_TOKEN}", "tools": ["shop__*"]}}
        }"#
        .to_owned()
    }

    #[test]
    fn config_reads_inline_json_and_resolves_env_references() {
        let env = HashMap::from([
            ("GATEWAY_CONFIG", minimal_json()),
            ("SHOP_KEY", "abc".to_owned()),
            ("SUPPORT_TOKEN", "0123456789abcdef0123".to_owned()),
        ]);
        let config = GatewayConfig::from_lookup(|k| env.get(k).cloned()).unwrap();
        assert_eq!(config.upstreams[0].headers["x-api-key"].expose(), "k-abc");
        assert_eq!(config.roles["support"].token.expose(), "0123456789abcdef0123");
        assert_eq!(config.upstreams[0].prefix_str(), "shop__");
        assert_eq!(config.upstreams[0].customer_scoped_arg, "customer_id");
        assert!(config.roles["support"].call);
        assert_eq!(config.list_ttl_secs, 60.0);
    }

    #[test]
    fn references_are_listed_without_resolving_them() {
        let env = HashMap::from([("GATEWAY_CONFIG", minimal_json())]);
        let config = GatewayConfig::parse(|k| env.get(k).cloned()).unwrap();
        assert_eq!(config.references(), vec!["SHOP_KEY".to_owned(), "SUPPORT_TOKEN".to_owned()]);
        assert_eq!(config.roles["support"].token.expose(), "${env:SUPPORT_TOKEN}");
    }

    #[test]
    fn missing_secret_variable_is_named_and_its_value_never_printed() {
        let env = HashMap::from([("GATEWAY_CONFIG", minimal_json()), ("SHOP_KEY", "abc".to_owned())]);
        let err = GatewayConfig::from_lookup(|k| env.get(k).cloned()).unwrap_err();
        assert!(err.to_string().contains("SUPPORT_TOKEN"), "{err}");
        let debug = format!("{:?}", Secret::new("hunter2-secret"));
        assert_eq!(debug, "***");
    }

    #[tokio::test]
    async fn the_function_config_takes_each_reference_from_its_variable_or_names_both() {
        let env = HashMap::from([
            ("GATEWAY_CONFIG", minimal_json()),
            ("SHOP_KEY", "abc".to_owned()),
            ("SUPPORT_TOKEN", "0123456789abcdef0123".to_owned()),
            ("GATEWAY_ADDR", "127.0.0.1:9999".to_owned()),
        ]);
        let f = GatewayFunctionConfig::from_lookup(|k| env.get(k).cloned()).unwrap();
        assert!(!f.on_lambda && !f.emf_metrics);
        assert_eq!(f.addr.port(), 9999);
        let sources: Vec<(&str, &str)> = f.secrets.iter().map(|(n, s)| (n.as_str(), s.var())).collect();
        assert_eq!(sources, vec![("SHOP_KEY", "SHOP_KEY"), ("SUPPORT_TOKEN", "SUPPORT_TOKEN")]);
        assert!(!format!("{f:?}").contains("0123456789abcdef0123"), "secrets never print");
        let config = f.resolve().await.unwrap();
        assert_eq!(config.roles["support"].token.expose(), "0123456789abcdef0123");

        let without = |k: &str| if k == "SUPPORT_TOKEN" { None } else { env.get(k).cloned() };
        let e = GatewayFunctionConfig::from_lookup(without).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gateway configuration: SUPPORT_TOKEN (referenced by GATEWAY_CONFIG) is not set: set SUPPORT_TOKEN, or SUPPORT_TOKEN_SECRET_ARN on AWS"
        );
        let bad_addr = |k: &str| if k == "GATEWAY_ADDR" { Some("localhost".to_owned()) } else { env.get(k).cloned() };
        let e = GatewayFunctionConfig::from_lookup(bad_addr).unwrap_err();
        assert!(
            e.to_string().contains(r#"GATEWAY_ADDR must be an address like 127.0.0.1:8790, not "localhost""#),
            "{e}"
        );
    }

    #[test]
    fn global_limits_are_divided_among_the_instances_and_never_grow_with_them() {
        let tokens = DemoTokens::generate();
        let mut config = demo_config("http://127.0.0.1:1/mcp", &tokens);
        config.global_rate_limit_per_sec = Some(100.0);
        config.upstreams[0].rate_limit_per_sec = Some(40.0);
        config.upstreams[0].breaker.failures = 10;
        for instances in [1u32, 4, 40, 80] {
            let c = config.clone().per_instance(instances);
            let n = f64::from(instances);
            assert!((c.global_rate_limit_per_sec.unwrap() * n - 100.0).abs() < 1e-9, "{instances}");
            assert!((c.upstreams[0].rate_limit_per_sec.unwrap() * n - 40.0).abs() < 1e-9, "{instances}");
            let failures = c.upstreams[0].breaker.failures;
            assert!(failures >= 1 && (failures - 1) * instances < 10, "{instances}: {failures} per instance");
            c.validate().unwrap();
        }
        assert_eq!(config.clone().per_instance(0), config, "no cap: per instance as configured");
    }

    #[test]
    fn the_instance_cap_is_read_and_minus_one_means_unreserved() {
        let env = |cap: Option<&str>| {
            let mut m = HashMap::from([
                ("GATEWAY_CONFIG", minimal_json()),
                ("SHOP_KEY", "abc".to_owned()),
                ("SUPPORT_TOKEN", "0123456789abcdef0123".to_owned()),
            ]);
            if let Some(c) = cap {
                m.insert("GATEWAY_INSTANCE_CAP", c.to_owned());
            }
            m
        };
        let cap = |c: Option<&str>| {
            let e = env(c);
            GatewayFunctionConfig::from_lookup(|k| e.get(k).cloned()).map(|f| f.instance_cap)
        };
        assert_eq!(cap(None).unwrap(), None);
        assert_eq!(cap(Some("-1")).unwrap(), None);
        assert_eq!(cap(Some("80")).unwrap(), Some(80));
        let e = cap(Some("0")).unwrap_err();
        assert!(e.to_string().contains("GATEWAY_INSTANCE_CAP"), "{e}");
    }

    #[test]
    fn upstream_waits_default_to_the_timing_table() {
        let u = UpstreamConfig::new("shop", "http://127.0.0.1:1/mcp");
        let table = &swarm_core::timings::Timings::STANDARD.gateway;
        assert_eq!(u.call_timeout(), table.call_timeout);
        assert_eq!(u.discovery_timeout(), table.discovery_timeout);
    }

    #[test]
    fn a_sigv4_upstream_parses_and_refuses_a_second_credential() {
        let json = r#"{"name": "shop", "url": "https://abc.lambda-url.eu-west-1.on.aws/mcp",
                       "sigv4": {"region": "eu-west-1"}}"#;
        let u: UpstreamConfig = serde_json::from_str(json).unwrap();
        assert_eq!(u.sigv4, Some(SigV4Config { service: "lambda".into(), region: "eu-west-1".into() }));
        let mut config = demo_config("http://127.0.0.1:1/mcp", &DemoTokens::generate());
        config.upstreams[0].sigv4 = u.sigv4.clone();
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("has sigv4 and an authorization header"), "{e}");
        config.upstreams[0].headers.clear();
        config.validate().unwrap();
    }

    #[test]
    fn prefix_false_turns_the_prefix_off() {
        let json = r#"{"name": "x", "url": "http://h/mcp", "prefix": false}"#;
        let u: UpstreamConfig = serde_json::from_str(json).unwrap();
        assert_eq!(u.prefix, Prefix::Off);
        assert_eq!(u.prefix_str(), "");
        let json = r#"{"name": "x", "url": "http://h/mcp", "prefix": "ev_"}"#;
        let u: UpstreamConfig = serde_json::from_str(json).unwrap();
        assert_eq!(u.prefix_str(), "ev_");
    }

    #[test]
    fn short_or_shared_tokens_are_rejected() {
        let tokens = DemoTokens::generate();
        let mut config = demo_config("http://127.0.0.1:1/mcp", &tokens);
        config.validate().unwrap();
        config.roles.get_mut("refund").unwrap().token = config.roles["support"].token.clone();
        assert!(config.validate().unwrap_err().to_string().contains("shares its token"));
        config.roles.get_mut("refund").unwrap().token = Secret::new("short");
        assert!(config.validate().unwrap_err().to_string().contains("at least 16"));
    }

    #[test]
    fn demo_tokens_are_random_per_role_and_hidden_in_debug() {
        let a = DemoTokens::generate();
        let b = DemoTokens::generate();
        assert_ne!(a.token("support"), b.token("support"));
        assert_ne!(a.token("support"), a.token("refund"));
        assert_ne!(a.shop_upstream(), a.token("support").unwrap());
        let config = demo_config("http://127.0.0.1:1/mcp", &a);
        assert_eq!(
            config.upstreams[0].headers["authorization"].expose(),
            format!("Bearer {}", a.shop_upstream().expose())
        );
        assert_eq!(a.token("planner").unwrap().expose().len(), 64);
        assert_eq!(format!("{a:?}"), "DemoTokens(***)");
        assert_eq!(a.role_tokens().len(), 3);
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let json = r#"{"upstreams": [], "roles": {}, "ttl": 5}"#;
        let err = serde_json::from_str::<GatewayConfig>(json).unwrap_err();
        assert!(err.to_string().contains("ttl"), "{err}");
    }
}
