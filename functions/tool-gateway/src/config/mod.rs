//! The gateway's configuration file (`GATEWAY_CONFIG`, a path or inline JSON): upstreams, roles, limits, side effects; parsed once, its `${env:NAME}` references resolved, then validated ([`GatewayConfig::validate`]). The function's environment is [`function`]; the local stack's demo configuration lives in [`crate::demo`].

use std::{collections::BTreeMap, time::Duration};

use secrecy::SecretString;
use serde::Deserialize;

use crate::error::GatewayError;

pub mod function;
mod references;
mod validate;

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
#[derive(Clone, Debug, Deserialize)]
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
    pub headers: BTreeMap<String, SecretString>,
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

/// Consent before money moves: a call without an approval goes upstream with `above` (in the
/// order's currency; `0` means every refund) as its consent limit (`limit_arg` and
/// `x-swarm-consent-limit-cents`). The upstream makes its own checks first (the order is the
/// customer's, the amount refundable) and then refuses, with `APPROVAL_REQUIRED`, a call that
/// would take the order's refunds so far past the limit — so a person is asked only about a call
/// that could run, and the threshold holds for the order, not for one call. A call with an
/// approval token goes upstream without a limit only if the token is valid for exactly its
/// approval, conversation, customer, tool, order, amount and idempotency key. An upstream tool that does not take
/// `limit_arg` is not exposed (it could not hold the limit).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConsentConfig {
    /// The threshold in cents; the file gives `above` as a decimal amount (`797.5`).
    #[serde(default, rename = "above", deserialize_with = "decimal_cents")]
    pub above_cents: i64,
    /// Argument naming the order (must be an identifier).
    #[serde(default = "default_order_arg")]
    pub order_arg: String,
    /// Argument holding the amount (must be given: an approval is for an exact amount).
    #[serde(default = "default_amount_arg")]
    pub amount_arg: String,
    /// Argument holding the reason, shown to the operator (cleaned, bounded).
    #[serde(default = "default_reason_arg")]
    pub reason_arg: String,
    /// Argument the gateway fills with the consent limit in cents and hides from the model; the
    /// upstream tool must take it (it enforces the limit against the order's refunds so far).
    #[serde(default = "default_limit_arg")]
    pub limit_arg: String,
}

impl ConsentConfig {
    /// Every call needs an approval (the default of the demo configuration).
    pub fn every_call() -> Self {
        Self {
            above_cents: 0,
            order_arg: default_order_arg(),
            amount_arg: default_amount_arg(),
            reason_arg: default_reason_arg(),
            limit_arg: default_limit_arg(),
        }
    }
}

/// A decimal amount of the file (`797.5`) as whole cents; the file is an edge, cents are inside.
fn decimal_cents<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let amount = f64::deserialize(d)?;
    if !amount.is_finite() || amount.abs() > 1e15 {
        return Err(serde::de::Error::custom(format!("{amount} is not an amount")));
    }
    Ok((amount * 100.0).round() as i64)
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
fn default_limit_arg() -> String {
    "consent_limit_cents".into()
}

/// A worker role: its credential and what it may see and call.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    /// Bearer token (may be a `${env:NAME}` reference).
    pub token: SecretString,
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
#[derive(Clone, Debug, Deserialize)]
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
    pub approval_key: Option<SecretString>,
}

/// Whether `name` fits the LLM function-name rule `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl GatewayConfig {
    /// `upstreams` and `roles` with every other setting at its default.
    pub fn new(upstreams: Vec<UpstreamConfig>, roles: BTreeMap<String, RoleConfig>) -> Self {
        Self {
            upstreams,
            roles,
            list_ttl_secs: default_list_ttl(),
            discovery_retry_secs: default_discovery_retry(),
            global_rate_limit_per_sec: None,
            allowed_hosts: default_allowed_hosts(),
            anonymous_role: None,
            upstream_keep_alive: false,
            side_effects: BTreeMap::new(),
            approval_key: None,
        }
    }

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
        let mut names: Vec<String> = secrets.flat_map(references::names).collect();
        names.sort();
        names.dedup();
        names
    }

    /// Resolves `${env:NAME}` in role tokens, upstream headers and the approval key.
    pub fn resolve_secrets(mut self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, GatewayError> {
        for role in self.roles.values_mut() {
            role.token = references::resolve(&role.token, lookup)?;
        }
        if let Some(key) = &self.approval_key {
            self.approval_key = Some(references::resolve(key, lookup)?);
        }
        for upstream in &mut self.upstreams {
            for value in upstream.headers.values_mut() {
                *value = references::resolve(value, lookup)?;
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
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use secrecy::ExposeSecret;

    use super::*;
    use crate::demo::{DemoTokens, demo_config};

    pub(crate) fn minimal_json() -> String {
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
        assert_eq!(config.upstreams[0].headers["x-api-key"].expose_secret(), "k-abc");
        assert_eq!(config.roles["support"].token.expose_secret(), "0123456789abcdef0123");
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
        assert_eq!(config.roles["support"].token.expose_secret(), "${env:SUPPORT_TOKEN}");
    }

    #[test]
    fn missing_secret_variable_is_named_and_its_value_never_printed() {
        let env = HashMap::from([("GATEWAY_CONFIG", minimal_json()), ("SHOP_KEY", "abc".to_owned())]);
        let err = GatewayConfig::from_lookup(|k| env.get(k).cloned()).unwrap_err();
        assert!(err.to_string().contains("SUPPORT_TOKEN"), "{err}");
        let debug = format!("{:?}", SecretString::from("hunter2-secret"));
        assert!(!debug.contains("hunter2") && debug.contains("REDACTED"), "{debug}");
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
        assert_eq!(
            format!("{:?}", config.clone().per_instance(0)),
            format!("{config:?}"),
            "no cap: per instance as configured"
        );
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
    fn unknown_fields_are_rejected_with_their_name() {
        let json = r#"{"upstreams": [], "roles": {}, "ttl": 5}"#;
        let err = serde_json::from_str::<GatewayConfig>(json).unwrap_err();
        assert!(err.to_string().contains("ttl"), "{err}");
    }
}
