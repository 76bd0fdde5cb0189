//! The API's authentication pieces: `AUTH_MODE` (`none`, `jwt` or `iam`; the stack's `AuthMode` parameter) with the JWT claim that names the caller (`JWT_CUSTOMER_CLAIM`, `JWT_CUSTOMER_MAPPING`), and the per-customer limits (`CUSTOMER_CONVERSATIONS_PER_MINUTE`, `CUSTOMER_MAX_SUBTASKS`).

use swarm_core::access::CustomerLimits;
use swarm_core::domain::MAX_SUBTASKS;

use super::{ConfigError, Vars};

/// Who the caller of the HTTP API is, on Lambda (SAM parameter `AuthMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication: the request body names the customer (local runs, demos; refused in prod).
    None,
    /// API Gateway's JWT authorizer: the customer from a claim ([`AuthConfig`]).
    Jwt,
    /// IAM authorization (SigV4): the caller's unique id, mapped to a customer through the table.
    Iam,
}

impl AuthMode {
    pub const VARS: &'static [&'static str] = &["AUTH_MODE"];

    /// `AUTH_MODE`: `none` (default), `jwt` or `iam`.
    /// Error: `AUTH_MODE must be none, jwt or iam, not "x"`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Vars::new(&lookup).one_of(
            "AUTH_MODE",
            &[("none", Self::None), ("jwt", Self::Jwt), ("iam", Self::Iam)],
            Self::None,
        )
    }
}

/// How a JWT's claim becomes the customer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimMapping {
    /// The claim's value is a principal (`sub:<value>`), mapped to a customer by an item of
    /// the table: the safe default, since `sub` is set by the issuer and nobody else.
    Table,
    /// The claim's value is the customer id itself. Only for a claim the user cannot write:
    /// a Cognito `custom:` attribute needs the app client's write permission removed for it.
    Direct,
}

/// `AUTH_MODE` and, for `jwt`, which claim names the caller and how it maps to a customer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// `JWT_CUSTOMER_CLAIM` (default `sub`).
    pub claim: String,
    /// `JWT_CUSTOMER_MAPPING`: `table` (default) or `direct`.
    pub mapping: ClaimMapping,
}

impl AuthConfig {
    pub const VARS: &'static [&'static str] = &["AUTH_MODE", "JWT_CUSTOMER_CLAIM", "JWT_CUSTOMER_MAPPING"];

    /// Errors: a mode or mapping outside its values; a claim name that is empty, over 128
    /// characters or holds blanks; `direct` on the `sub` claim (a subject is not a customer id:
    /// map it through the table).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let mode = AuthMode::from_lookup(&lookup)?;
        let claim = vars.get("JWT_CUSTOMER_CLAIM").unwrap_or_else(|| "sub".to_owned());
        if claim.len() > 128 || claim.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::invalid(
                "JWT_CUSTOMER_CLAIM",
                "a claim name such as sub or custom:customer_id",
                claim,
            ));
        }
        let mapping = vars.one_of(
            "JWT_CUSTOMER_MAPPING",
            &[("table", ClaimMapping::Table), ("direct", ClaimMapping::Direct)],
            ClaimMapping::Table,
        )?;
        if mapping == ClaimMapping::Direct && claim == "sub" {
            return Err(ConfigError::invalid(
                "JWT_CUSTOMER_MAPPING",
                "table when JWT_CUSTOMER_CLAIM is sub (a subject is mapped to a customer by the table)",
                "direct",
            ));
        }
        Ok(Self { mode, claim, mapping })
    }
}

/// The per-customer limits piece.
pub struct LimitsConfig;

impl LimitsConfig {
    pub const VARS: &'static [&'static str] = &["CUSTOMER_CONVERSATIONS_PER_MINUTE", "CUSTOMER_MAX_SUBTASKS"];

    /// `CUSTOMER_CONVERSATIONS_PER_MINUTE` (1–100000, default 20) and `CUSTOMER_MAX_SUBTASKS`
    /// (1–100, default 100). Errors name the variable and its range.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<CustomerLimits, ConfigError> {
        let vars = Vars::new(&lookup);
        let defaults = CustomerLimits::DEFAULT;
        let per_minute = vars
            .number(
                "CUSTOMER_CONVERSATIONS_PER_MINUTE",
                1..=100_000,
                "a whole number of conversations from 1 to 100000",
            )?
            .map_or(defaults.conversations_per_minute, |n| n as u32);
        let subtasks = vars
            .number("CUSTOMER_MAX_SUBTASKS", 1..=MAX_SUBTASKS as u64, "a whole number of subtasks from 1 to 100")?
            .map_or(defaults.subtasks_per_conversation, |n| n as usize);
        Ok(CustomerLimits { conversations_per_minute: per_minute, subtasks_per_conversation: subtasks })
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

    #[test]
    fn auth_mode_defaults_to_none_and_names_its_values() {
        assert_eq!(AuthMode::from_lookup(|_| None).unwrap(), AuthMode::None);
        assert_eq!(AuthMode::from_lookup(|_| Some("JWT".into())).unwrap(), AuthMode::Jwt);
        let e = AuthMode::from_lookup(|_| Some("cognito".into())).unwrap_err();
        assert_eq!(e.to_string(), r#"AUTH_MODE must be none, jwt or iam, not "cognito""#);
    }

    #[test]
    fn the_safe_default_is_sub_mapped_through_the_table() {
        let c = AuthConfig::from_lookup(lookup(&[("AUTH_MODE", "jwt")])).unwrap();
        assert_eq!((c.mode, c.claim.as_str(), c.mapping), (AuthMode::Jwt, "sub", ClaimMapping::Table));
        let c = AuthConfig::from_lookup(lookup(&[
            ("JWT_CUSTOMER_CLAIM", "custom:customer_id"),
            ("JWT_CUSTOMER_MAPPING", "direct"),
        ]))
        .unwrap();
        assert_eq!((c.claim.as_str(), c.mapping), ("custom:customer_id", ClaimMapping::Direct));
        let e = AuthConfig::from_lookup(lookup(&[("JWT_CUSTOMER_MAPPING", "direct")])).unwrap_err();
        assert!(e.to_string().starts_with("JWT_CUSTOMER_MAPPING must be table when JWT_CUSTOMER_CLAIM is sub"), "{e}");
        let e = AuthConfig::from_lookup(lookup(&[("JWT_CUSTOMER_CLAIM", "a b")])).unwrap_err();
        assert!(e.to_string().starts_with("JWT_CUSTOMER_CLAIM must be a claim name"), "{e}");
    }

    #[test]
    fn limits_default_to_twenty_a_minute_and_the_full_fan_out() {
        assert_eq!(LimitsConfig::from_lookup(lookup(&[])).unwrap(), CustomerLimits::DEFAULT);
        let l = LimitsConfig::from_lookup(lookup(&[
            ("CUSTOMER_CONVERSATIONS_PER_MINUTE", "5"),
            ("CUSTOMER_MAX_SUBTASKS", "10"),
        ]))
        .unwrap();
        assert_eq!((l.conversations_per_minute, l.subtasks_per_conversation), (5, 10));
        for (var, value) in [("CUSTOMER_MAX_SUBTASKS", "101"), ("CUSTOMER_CONVERSATIONS_PER_MINUTE", "0")] {
            let e = LimitsConfig::from_lookup(lookup(&[(var, value)])).unwrap_err();
            assert!(e.to_string().starts_with(var), "{e}");
        }
    }
}
