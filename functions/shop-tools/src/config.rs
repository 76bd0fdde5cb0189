//! Typed configuration of the shop-tools binary, read once from the environment.

use std::net::SocketAddr;

use secrecy::{ExposeSecret, SecretString};

use crate::access::{LOOPBACK_HOSTS, ShopAccess, check_token};
use crate::error::ShopError;

/// Listening address when `SHOP_TOOLS_ADDR` is not set.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8931";

/// Where and how the binary serves.
#[derive(Debug, Clone)]
pub struct Config {
    /// True when running inside AWS Lambda (`AWS_LAMBDA_RUNTIME_API` is set).
    pub on_lambda: bool,
    /// Local listening address (`SHOP_TOOLS_ADDR`, default [`DEFAULT_ADDR`]); unused on Lambda.
    pub addr: SocketAddr,
    /// Accepted `Host` headers (`SHOP_TOOLS_ALLOWED_HOSTS`, comma-separated names, `name:port`
    /// or `*.suffix` patterns; `*` turns the check off). `None`: loopback locally, the function
    /// URL's host (`*.lambda-url.<AWS_REGION>.on.aws`) on Lambda.
    pub allowed_hosts: Option<Vec<String>>,
    /// `SHOP_TOOLS_TOKEN`: the bearer credential the tool gateway sends (its upstream header).
    /// Required off Lambda; on Lambda the `AWS_IAM` function URL authenticates the gateway.
    pub token: Option<SecretString>,
    /// `AWS_REGION` (set by Lambda): the region of the function URL's host.
    pub region: Option<String>,
    /// Logs as JSON lines (on Lambda, or `AWS_LAMBDA_LOG_FORMAT=JSON`).
    pub json_logs: bool,
    /// The refund ledger's DynamoDB table (`SHOP_LEDGER_TABLE`); `None`: in memory, for as long
    /// as the process lives (local runs only: on Lambda it is required).
    pub ledger_table: Option<String>,
}

impl Config {
    /// Every variable [`Config::from_lookup`] reads ([`init_tracing`] reads `RUST_LOG` and `AWS_LAMBDA_LOG_LEVEL`).
    pub const VARS: &'static [&'static str] = &[
        "AWS_LAMBDA_RUNTIME_API",
        "SHOP_TOOLS_ADDR",
        "SHOP_TOOLS_ALLOWED_HOSTS",
        "SHOP_TOOLS_TOKEN",
        "AWS_REGION",
        "AWS_LAMBDA_LOG_FORMAT",
        "SHOP_LEDGER_TABLE",
    ];

    /// Reads the process environment.
    ///
    /// Errors: [`ShopError::Config`] when `SHOP_TOOLS_ADDR` is not a socket address.
    pub fn from_env() -> Result<Self, ShopError> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// Reads variables through `lookup` (tests pass a map).
    ///
    /// Errors: [`ShopError::Config`] when `SHOP_TOOLS_ADDR` is not a socket address such as
    /// "127.0.0.1:8931", when `SHOP_TOOLS_TOKEN` is too short, or when it is missing off Lambda
    /// (a shop any local process could call would be reachable around the gateway).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ShopError> {
        let set = |key: &str| lookup(key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let on_lambda = set("AWS_LAMBDA_RUNTIME_API").is_some();
        let addr_text = set("SHOP_TOOLS_ADDR").unwrap_or_else(|| DEFAULT_ADDR.to_string());
        let addr = addr_text.parse().map_err(|_| {
            ShopError::Config(format!("SHOP_TOOLS_ADDR must be an address like {DEFAULT_ADDR}, got '{addr_text}'"))
        })?;
        let allowed_hosts = set("SHOP_TOOLS_ALLOWED_HOSTS")
            .map(|v| v.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_string).collect::<Vec<_>>());
        let json_logs = on_lambda || set("AWS_LAMBDA_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
        let token = set("SHOP_TOOLS_TOKEN").map(SecretString::from);
        if let Some(t) = &token {
            check_token(t.expose_secret()).map_err(|e| ShopError::Config(format!("SHOP_TOOLS_TOKEN: {e}")))?;
        }
        if !on_lambda && token.is_none() {
            return Err(ShopError::Config(
                "SHOP_TOOLS_TOKEN is required off Lambda: the tool gateway's upstream credential (at least 16 characters)"
                    .into(),
            ));
        }
        let ledger_table = set("SHOP_LEDGER_TABLE");
        if on_lambda && ledger_table.is_none() {
            return Err(ShopError::Config(
                "SHOP_LEDGER_TABLE must name the refund ledger's DynamoDB table on Lambda (an in-memory ledger would forget refunds and keys on every cold start)".into(),
            ));
        }
        Ok(Config { on_lambda, addr, allowed_hosts, json_logs, token, region: set("AWS_REGION"), ledger_table })
    }

    /// Who the server answers: the configured hosts (or the default of the platform) and the token.
    /// Errors: on Lambda with neither `SHOP_TOOLS_ALLOWED_HOSTS` nor `AWS_REGION` set.
    pub fn access(&self) -> Result<ShopAccess, ShopError> {
        let hosts = match (&self.allowed_hosts, self.on_lambda, &self.region) {
            (Some(hosts), _, _) => hosts.clone(),
            (None, true, Some(region)) => ShopAccess::function_url(region).hosts().to_vec(),
            (None, true, None) => {
                return Err(ShopError::Config(
                    "on Lambda the shop needs AWS_REGION (set by Lambda) or SHOP_TOOLS_ALLOWED_HOSTS".into(),
                ));
            }
            (None, false, _) => LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect(),
        };
        let access = ShopAccess::new(hosts);
        match &self.token {
            Some(token) => {
                access.with_token(token.clone()).map_err(|e| ShopError::Config(format!("SHOP_TOOLS_TOKEN: {e}")))
            }
            None => Ok(access),
        }
    }
}

/// The variables [`init_tracing`] reads.
pub const TRACING_VARS: &[&str] = &["RUST_LOG", "AWS_LAMBDA_LOG_LEVEL"];

/// Installs the global `tracing` subscriber: `RUST_LOG` filter, else `AWS_LAMBDA_LOG_LEVEL` with
/// rmcp held at `warn` at most (at `debug` it logs whole requests, whose arguments quote the
/// customer), default `info` (rmcp at `warn`: it logs every stateless request); JSON lines when
/// `json`. A second call does nothing.
pub fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    let var = |key: &str| std::env::var(key).ok().map(|v| v.trim().to_lowercase()).filter(|v| !v.is_empty());
    let directives = var("RUST_LOG").or_else(|| var("AWS_LAMBDA_LOG_LEVEL").map(|l| lambda_directives(&l)));
    let filter =
        directives.and_then(|d| EnvFilter::try_new(d).ok()).unwrap_or_else(|| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().with_ansi(false).without_time().try_init() } else { builder.try_init() };
}

/// The filter of Lambda's `ApplicationLogLevel` (lowercase `trace` .. `fatal`): that level, rmcp at `warn` at most.
fn lambda_directives(level: &str) -> String {
    match level {
        "error" | "fatal" => "error,rmcp=error".to_owned(),
        other => format!("{other},rmcp=warn"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lambdas_log_level_never_raises_rmcps_past_warn() {
        assert_eq!(super::lambda_directives("debug"), "debug,rmcp=warn");
        assert_eq!(super::lambda_directives("info"), "info,rmcp=warn");
        assert_eq!(super::lambda_directives("fatal"), "error,rmcp=error");
    }

    use std::collections::HashMap;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ShopError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    const TOKEN: (&str, &str) = ("SHOP_TOOLS_TOKEN", "0123456789abcdef0123");

    #[test]
    fn a_local_environment_listens_on_the_default_address_for_loopback_hosts_and_the_token() -> anyhow::Result<()> {
        let c = config(&[TOKEN])?;
        assert_eq!(c.addr, "127.0.0.1:8931".parse()?);
        assert!(!c.on_lambda);
        assert_eq!(c.allowed_hosts, None);
        assert!(!c.json_logs);
        let access = c.access()?;
        assert!(access.requires_token());
        assert_eq!(access.hosts(), ["localhost", "127.0.0.1", "::1"]);
        assert!(!format!("{c:?}").contains("0123456789abcdef0123"), "the token never prints");
        Ok(())
    }

    #[test]
    fn off_lambda_the_token_is_required_and_must_be_long() {
        let e = config(&[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("SHOP_TOOLS_TOKEN is required off Lambda"), "{e}");
        let e = config(&[("SHOP_TOOLS_TOKEN", "short")]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("at least 16 characters"), "{e}");
    }

    #[test]
    fn on_lambda_only_the_function_urls_host_is_served() -> anyhow::Result<()> {
        let lambda = [("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"), ("SHOP_LEDGER_TABLE", "shop-ledger")];
        let c = config(&[lambda[0], lambda[1], ("AWS_REGION", "eu-west-1")])?;
        let access = c.access()?;
        assert!(!access.requires_token(), "AWS_IAM authenticated the caller");
        assert_eq!(access.hosts(), ["*.lambda-url.eu-west-1.on.aws"]);
        assert!(access.host_allowed("x7k2.lambda-url.eu-west-1.on.aws"));
        assert!(!access.host_allowed("evil.example.com"));
        let no_region = config(&lambda)?;
        assert!(no_region.access().is_err());
        Ok(())
    }

    #[test]
    fn lambda_runtime_variable_selects_lambda_mode_with_json_logs() -> anyhow::Result<()> {
        let c = config(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("SHOP_TOOLS_ALLOWED_HOSTS", " a.example.com, b:8080 ,"),
            ("SHOP_LEDGER_TABLE", "shop-ledger"),
        ])?;
        assert!(c.on_lambda);
        assert!(c.json_logs);
        assert_eq!(c.allowed_hosts, Some(vec!["a.example.com".to_string(), "b:8080".to_string()]));
        assert_eq!(c.ledger_table.as_deref(), Some("shop-ledger"));
        Ok(())
    }

    #[test]
    fn on_lambda_the_ledger_must_be_durable() {
        let err = config(&[("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("SHOP_LEDGER_TABLE")));
        assert_eq!(config(&[TOKEN]).map(|c| c.ledger_table).ok(), Some(None), "locally it lives in memory");
    }

    #[test]
    fn a_malformed_address_is_a_clear_error() {
        let err = config(&[("SHOP_TOOLS_ADDR", "localhost"), TOKEN]).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid configuration: SHOP_TOOLS_ADDR must be an address like 127.0.0.1:8931, got 'localhost'")
        );
    }
}
