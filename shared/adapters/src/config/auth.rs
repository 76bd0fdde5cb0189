//! The API's authentication piece: `AUTH_MODE` (`none`, `jwt` or `iam`; the stack's `AuthMode` parameter).

use super::{ConfigError, Vars};

/// Who the caller of the HTTP API is, on Lambda (SAM parameter `AuthMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication: the request body names the customer (local runs, demos).
    None,
    /// API Gateway's JWT authorizer: the customer from the token's claims.
    Jwt,
    /// IAM authorization (SigV4): the caller's IAM user id.
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn auth_mode_defaults_to_none_and_names_its_values() {
        assert_eq!(AuthMode::from_lookup(|_| None).unwrap(), AuthMode::None);
        assert_eq!(AuthMode::from_lookup(|_| Some("JWT".into())).unwrap(), AuthMode::Jwt);
        let e = AuthMode::from_lookup(|_| Some("cognito".into())).unwrap_err();
        assert_eq!(e.to_string(), r#"AUTH_MODE must be none, jwt or iam, not "cognito""#);
    }
}
