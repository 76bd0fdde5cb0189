//! The gateway function's one typed config from its environment: how it serves (`GATEWAY_ADDR`, on Lambda or not), `GATEWAY_CONFIG`, its reserved concurrency, and where each secret the file references comes from.

use std::collections::HashMap;

use secrecy::ExposeSecret;
use swarm_adapters::config::{ConfigError, SecretSource, SecretsExtension, Vars, var_list};

use super::GatewayConfig;
use crate::error::GatewayError;

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
            values.insert(name.clone(), value.expose_secret().to_owned());
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
    use secrecy::ExposeSecret;

    use super::*;
    use crate::config::tests::minimal_json;

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
        assert_eq!(config.roles["support"].token.expose_secret(), "0123456789abcdef0123");

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
}
