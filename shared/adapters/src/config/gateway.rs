//! The tool gateway client piece: `GATEWAY_URL`, the role this function acts as (`WORKER_ROLE`), its credential (`GATEWAY_TOKEN` or `GATEWAY_TOKEN_SECRET_ARN`) and whether calls are SigV4-signed for an `AWS_IAM` function URL (`GATEWAY_URL_AUTH`, `AWS_REGION`).

use std::time::Duration;

use super::{ConfigError, SecretSource, Vars};

/// Longest wait for one `tools/call` through the gateway client: the timing table's `worker.tool_timeout_secs`.
pub const GATEWAY_CALL_TIMEOUT: Duration = swarm_core::timings::Timings::STANDARD.worker.tool_timeout;

/// How a function reaches the MCP tool gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayClientConfig {
    /// `GATEWAY_URL`: the gateway's MCP endpoint, e.g. `https://….lambda-url.us-east-1.on.aws/mcp`.
    pub url: String,
    /// `WORKER_ROLE`: the role whose credential this function holds (`support`, `refund`, `planner`…).
    pub role: String,
    /// `GATEWAY_TOKEN` (local runs) or `GATEWAY_TOKEN_SECRET_ARN`: the role's bearer token.
    pub token: SecretSource,
    /// `GATEWAY_URL_AUTH=AWS_IAM`: the region to SigV4-sign calls in (`AWS_REGION`, set by
    /// Lambda), with the function's own role; `None` (`NONE`, the default) sends them unsigned.
    pub sigv4_region: Option<String>,
}

impl GatewayClientConfig {
    pub const VARS: &'static [&'static str] =
        &["GATEWAY_URL", "WORKER_ROLE", "GATEWAY_TOKEN", "GATEWAY_TOKEN_SECRET_ARN", "GATEWAY_URL_AUTH", "AWS_REGION"];

    /// `default_role` applies when `WORKER_ROLE` is unset (the orchestrator
    /// lists tools as `planner`, a worker calls them as `support`).
    /// Errors: `GATEWAY_URL` unset or not an http(s) URL; a role that is not
    /// 1-64 of `[a-z0-9_-]`; neither credential variable set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, default_role: &str) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        const EXAMPLE: &str = "https://abc.lambda-url.us-east-1.on.aws/mcp";
        let url = vars.url("GATEWAY_URL", EXAMPLE)?.ok_or_else(|| ConfigError::Missing {
            var: "GATEWAY_URL",
            hint: format!("the tool gateway's MCP endpoint, e.g. {EXAMPLE}"),
        })?;
        let role = vars.get("WORKER_ROLE").unwrap_or_else(|| default_role.to_owned());
        let role_ok = (1..=64).contains(&role.len())
            && role.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !role_ok {
            return Err(ConfigError::invalid(
                "WORKER_ROLE",
                "a gateway role name (1-64 of a-z, 0-9, '_', '-'), e.g. support, refund or planner",
                role,
            ));
        }
        let token =
            SecretSource::from_lookup(&lookup, "GATEWAY_TOKEN", "GATEWAY_TOKEN_SECRET_ARN").ok_or_else(|| {
                ConfigError::Missing {
                    var: "GATEWAY_TOKEN_SECRET_ARN",
                    hint: format!("the secret holding role {role}'s gateway token (locally GATEWAY_TOKEN=<token>)"),
                }
            })?;
        let signed = vars.one_of("GATEWAY_URL_AUTH", &[("none", false), ("aws_iam", true)], false)?;
        let sigv4_region = match signed {
            false => None,
            true => Some(vars.required("AWS_REGION", "the region to sign gateway calls in (Lambda sets it)")?),
        };
        Ok(Self { url, role, token, sigv4_region })
    }

    /// The MCP client of the gateway with this role's token, fetched through
    /// `extension` when it is stored. Errors: the secret fetch, or a URL the client refuses.
    #[cfg(all(feature = "mcp", feature = "secrets"))]
    pub async fn connect(
        &self,
        extension: &super::SecretsExtension,
    ) -> Result<std::sync::Arc<dyn swarm_core::ports::ToolGateway>, ConfigError> {
        use crate::mcp::McpToolGateway;

        let token = self.token.resolve(extension).await?;
        let tokens = std::collections::HashMap::from([(self.role.clone(), token)]);
        let gateway = McpToolGateway::new(&self.url, tokens, GATEWAY_CALL_TIMEOUT)
            .map_err(|e| ConfigError::Client { what: "tool gateway client", reason: e.to_string() })?;
        let gateway = match &self.sigv4_region {
            None => gateway,
            #[cfg(feature = "sigv4")]
            Some(region) => {
                use crate::mcp::sigv4::{LAMBDA_SERVICE, SigV4Signer};
                gateway.signed(SigV4Signer::from_env(LAMBDA_SERVICE, region))
            }
            #[cfg(not(feature = "sigv4"))]
            Some(_) => {
                return Err(ConfigError::Client {
                    what: "tool gateway client",
                    reason: "GATEWAY_URL_AUTH=AWS_IAM needs swarm-adapters' sigv4 feature".into(),
                });
            }
        };
        Ok(std::sync::Arc::new(gateway))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    const URL: (&str, &str) = ("GATEWAY_URL", "http://127.0.0.1:8790/mcp");

    #[test]
    fn the_role_defaults_per_function_and_a_credential_is_required() {
        let c = GatewayClientConfig::from_lookup(lookup(&[URL, ("GATEWAY_TOKEN", "t")]), "planner").unwrap();
        assert_eq!((c.url.as_str(), c.role.as_str()), ("http://127.0.0.1:8790/mcp", "planner"));
        let c = GatewayClientConfig::from_lookup(
            lookup(&[URL, ("WORKER_ROLE", "refund"), ("GATEWAY_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:r")]),
            "support",
        )
        .unwrap();
        assert_eq!(c.role, "refund");
        assert_eq!(c.token.var(), "GATEWAY_TOKEN_SECRET_ARN");
        let e = GatewayClientConfig::from_lookup(lookup(&[URL]), "support").unwrap_err();
        assert!(e.to_string().starts_with("GATEWAY_TOKEN_SECRET_ARN is required"), "{e}");
    }

    #[test]
    fn aws_iam_signs_in_the_functions_region() {
        let c = GatewayClientConfig::from_lookup(lookup(&[URL, ("GATEWAY_TOKEN", "t")]), "support").unwrap();
        assert_eq!(c.sigv4_region, None);
        let c = GatewayClientConfig::from_lookup(
            lookup(&[URL, ("GATEWAY_TOKEN", "t"), ("GATEWAY_URL_AUTH", "AWS_IAM"), ("AWS_REGION", "eu-west-1")]),
            "support",
        )
        .unwrap();
        assert_eq!(c.sigv4_region.as_deref(), Some("eu-west-1"));
        let e = GatewayClientConfig::from_lookup(
            lookup(&[URL, ("GATEWAY_TOKEN", "t"), ("GATEWAY_URL_AUTH", "AWS_IAM")]),
            "support",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("AWS_REGION is required"), "{e}");
        let e =
            GatewayClientConfig::from_lookup(lookup(&[URL, ("GATEWAY_TOKEN", "t"), ("GATEWAY_URL_AUTH", "iam")]), "x")
                .unwrap_err();
        assert_eq!(e.to_string(), r#"GATEWAY_URL_AUTH must be none or aws_iam, not "iam""#);
    }

    #[test]
    fn a_bad_role_or_url_is_named() {
        let e = GatewayClientConfig::from_lookup(
            lookup(&[URL, ("WORKER_ROLE", "Sup port"), ("GATEWAY_TOKEN", "t")]),
            "support",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("WORKER_ROLE must be a gateway role name"), "{e}");
        let e = GatewayClientConfig::from_lookup(lookup(&[("GATEWAY_TOKEN", "t")]), "support").unwrap_err();
        assert!(e.to_string().starts_with("GATEWAY_URL is required"), "{e}");
    }
}
