//! Validation of a parsed [`GatewayConfig`]: one check per part (upstreams, roles, side effects, the gateway-wide settings), each error naming the field and the fix, never a secret's value.

use std::collections::HashSet;

use secrecy::ExposeSecret;

use super::{GatewayConfig, UpstreamConfig, is_valid_tool_name};
use crate::error::GatewayError;

fn invalid(message: String) -> GatewayError {
    GatewayError::Config(message)
}

fn positive(what: &str, value: f64) -> Result<(), GatewayError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(invalid(format!("{what} must be a positive number of seconds/calls, got {value}")))
    }
}

impl GatewayConfig {
    /// Checks every setting; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), GatewayError> {
        if self.upstreams.is_empty() {
            return Err(invalid("at least one upstream is required".into()));
        }
        let mut names = HashSet::new();
        for u in &self.upstreams {
            if !is_valid_tool_name(&u.name) {
                return Err(invalid(format!("upstream name {:?} must match ^[a-zA-Z0-9_-]{{1,64}}$", u.name)));
            }
            if !names.insert(u.name.as_str()) {
                return Err(invalid(format!("upstream name {:?} is used twice", u.name)));
            }
            validate_upstream(u)?;
        }
        self.validate_roles()?;
        self.validate_side_effects()?;
        positive("list_ttl_secs", self.list_ttl_secs)?;
        positive("discovery_retry_secs", self.discovery_retry_secs)?;
        if let Some(rate) = self.global_rate_limit_per_sec {
            positive("global_rate_limit_per_sec", rate)?;
        }
        Ok(())
    }

    /// Roles: at least one; each token long and its own; no empty tool pattern; the anonymous role configured.
    fn validate_roles(&self) -> Result<(), GatewayError> {
        if self.roles.is_empty() {
            return Err(invalid("at least one role is required".into()));
        }
        let mut tokens = HashSet::new();
        for (name, role) in &self.roles {
            let token = role.token.expose_secret();
            if token.len() < 16 {
                return Err(invalid(format!(
                    "token of role {name} must be at least 16 characters (use a random value)"
                )));
            }
            if !tokens.insert(token) {
                return Err(invalid(format!("role {name} shares its token with another role")));
            }
            if role.tools.iter().chain(&role.deny).any(|p| p.is_empty()) {
                return Err(invalid(format!("role {name} has an empty tool pattern")));
            }
        }
        if let Some(anon) = &self.anonymous_role
            && !self.roles.contains_key(anon)
        {
            return Err(invalid(format!("anonymous_role {anon:?} is not a configured role")));
        }
        Ok(())
    }

    /// Side effects: tool names; consent with a threshold of 0 or more and an approval key to check tokens with.
    fn validate_side_effects(&self) -> Result<(), GatewayError> {
        for (tool, effect) in &self.side_effects {
            if !is_valid_tool_name(tool) {
                return Err(invalid(format!("side_effects entry {tool:?} is not a tool name")));
            }
            if let Some(consent) = &effect.consent {
                if consent.above_cents < 0 {
                    return Err(invalid(format!("side_effects.{tool}.consent.above must be 0 or a positive amount")));
                }
                if self.approval_key.is_none() {
                    return Err(invalid(format!(
                        "side_effects.{tool} needs consent: set approval_key (e.g. \"${{env:APPROVAL_KEY}}\")"
                    )));
                }
            }
        }
        if let Some(key) = &self.approval_key
            && !key.expose_secret().contains("${env:")
            && key.expose_secret().trim().len() < swarm_core::approval::MIN_KEY_BYTES
        {
            return Err(invalid(format!(
                "approval_key must be at least {} bytes (use a random value)",
                swarm_core::approval::MIN_KEY_BYTES
            )));
        }
        Ok(())
    }
}

/// One upstream (its name checked): its prefix, an http(s) URL, one credential, positive waits
/// and limits, valid headers.
fn validate_upstream(u: &UpstreamConfig) -> Result<(), GatewayError> {
    let prefix = u.prefix_str();
    if !prefix.is_empty() && !is_valid_tool_name(&prefix) {
        return Err(invalid(format!("prefix {prefix:?} of upstream {} must be made of [a-zA-Z0-9_-]", u.name)));
    }
    let url = reqwest::Url::parse(&u.url)
        .map_err(|e| invalid(format!("upstream {} url {:?} is invalid: {e}", u.name, u.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!("upstream {} url must be http(s)", u.name)));
    }
    if let Some(sigv4) = &u.sigv4 {
        if sigv4.region.trim().is_empty() || sigv4.service.trim().is_empty() {
            return Err(invalid(format!("upstream {} sigv4 needs a region and a service", u.name)));
        }
        // The signature is the Authorization header; a second one would break it.
        if u.headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
            return Err(invalid(format!(
                "upstream {} has sigv4 and an authorization header: SigV4 is its credential",
                u.name
            )));
        }
    }
    validate_limits(u)?;
    for (header, value) in &u.headers {
        http::HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| invalid(format!("upstream {} header name {header:?} is invalid", u.name)))?;
        http::HeaderValue::from_str(value.expose_secret()).map_err(|_| {
            invalid(format!("upstream {} header {header} has a value that is not a valid header value", u.name))
        })?;
    }
    Ok(())
}

/// An upstream's waits, rate and breaker: positive.
fn validate_limits(u: &UpstreamConfig) -> Result<(), GatewayError> {
    positive(&format!("upstream {} call_timeout_secs", u.name), u.call_timeout_secs)?;
    positive(&format!("upstream {} discovery_timeout_secs", u.name), u.discovery_timeout_secs)?;
    if let Some(rate) = u.rate_limit_per_sec {
        positive(&format!("upstream {} rate_limit_per_sec", u.name), rate)?;
    }
    if u.breaker.failures == 0 {
        return Err(invalid(format!("upstream {} breaker.failures must be at least 1", u.name)));
    }
    positive(&format!("upstream {} breaker.window_secs", u.name), u.breaker.window_secs)?;
    positive(&format!("upstream {} breaker.open_secs", u.name), u.breaker.open_secs)
}

#[cfg(test)]
mod tests {
    use secrecy::SecretString;

    use crate::demo::{DemoTokens, demo_config};

    #[test]
    fn short_or_shared_tokens_are_rejected() {
        let tokens = DemoTokens::generate();
        let mut config = demo_config("http://127.0.0.1:1/mcp", &tokens);
        config.validate().unwrap();
        config.roles.get_mut("refund").unwrap().token = config.roles["support"].token.clone();
        assert!(config.validate().unwrap_err().to_string().contains("shares its token"));
        config.roles.get_mut("refund").unwrap().token = SecretString::from("short");
        assert!(config.validate().unwrap_err().to_string().contains("at least 16"));
    }
}
