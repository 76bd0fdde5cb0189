//! Typed configuration pieces the functions compose into one config each: every variable parsed once at cold start, errors naming the variable and its accepted values.
//!
//! Each piece has `from_lookup(lookup)` (a variable name → its value; the
//! process environment in `main`, a map in tests) and a `VARS` list of every
//! variable it reads, so a function's config can list what it reads and a test
//! can hold that list against `docs/configuration.md`. Parsing does no I/O;
//! secrets named by `*_SECRET_ARN` are fetched afterwards, when the function
//! builds its dependencies ([`SecretSource::resolve`]).
//!
//! | piece | variables |
//! | --- | --- |
//! | [`TableConfig`] | `TABLE_NAME` |
//! | [`QueueUrls`] | `TASKS_QUEUE_URL`, `REFUND_QUEUE_URL` |
//! | [`GatewayClientConfig`] | `GATEWAY_URL`, `WORKER_ROLE`, `GATEWAY_TOKEN` / `GATEWAY_TOKEN_SECRET_ARN` |
//! | [`AuthConfig`] | `AUTH_MODE`, `JWT_CUSTOMER_CLAIM`, `JWT_CUSTOMER_MAPPING` |
//! | [`LimitsConfig`] | `CUSTOMER_CONVERSATIONS_PER_MINUTE`, `CUSTOMER_MAX_SUBTASKS` |
//! | [`SecretsExtension`] | `PARAMETERS_SECRETS_EXTENSION_HTTP_PORT`, `AWS_SESSION_TOKEN` |
//! | `crate::llm::LlmConfig` (feature `llm`) | `LLM_*` |

mod auth;
mod gateway;
#[cfg(all(feature = "llm", feature = "secrets"))]
mod llm;
mod secret;
mod store;

pub use auth::{AuthConfig, AuthMode, ClaimMapping, LimitsConfig};
pub use gateway::{GATEWAY_CALL_TIMEOUT, GatewayClientConfig};
pub use secret::{SecretSource, SecretsExtension};
#[cfg(feature = "aws")]
pub use store::AwsClients;
pub use store::{QueueUrls, TableConfig};

/// A configuration problem found at cold start: the function refuses to start
/// with this message. `Debug` prints the message too (it is what `main` shows
/// when it returns the error), and neither ever prints a secret's value.
#[derive(thiserror::Error)]
pub enum ConfigError {
    /// A required variable is unset or blank.
    #[error("{var} is required: {hint}")]
    Missing { var: &'static str, hint: String },
    /// A variable has a value outside its accepted values.
    #[error("{var} must be {accepted}, not {value:?}")]
    Invalid { var: &'static str, accepted: String, value: String },
    /// A secret could not be fetched or is unusable (the value is never shown).
    #[error("could not read the secret named by {var}: {reason}")]
    Secret { var: String, reason: String },
    /// The LLM settings (their message starts with the variable's name).
    #[cfg(feature = "llm")]
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmConfigError),
    /// A client could not be built from valid settings (TLS set-up, a URL the client refuses).
    #[error("{what}: {reason}")]
    Client { what: &'static str, reason: String },
}

impl std::fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl ConfigError {
    /// `true` only for a secret fetch that may succeed on the next cold start
    /// (the extension unreachable); every other error needs a fix, not a retry.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Secret { reason, .. } if reason.contains("unreachable"))
    }

    pub(crate) fn invalid(var: &'static str, accepted: impl Into<String>, value: impl Into<String>) -> Self {
        Self::Invalid { var, accepted: accepted.into(), value: value.into() }
    }
}

/// Reads variables through a lookup: values are trimmed, and a blank value counts as unset.
pub struct Vars<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Vars<'a> {
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self { lookup }
    }

    /// The trimmed value, `None` when unset or blank.
    pub fn get(&self, var: &str) -> Option<String> {
        (self.lookup)(var).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// The value, or [`ConfigError::Missing`] with `hint` (what to set it to).
    pub fn required(&self, var: &'static str, hint: &str) -> Result<String, ConfigError> {
        self.get(var).ok_or_else(|| ConfigError::Missing { var, hint: hint.to_owned() })
    }

    /// One of `choices` (compared case-insensitively); `default` when unset.
    /// Error: `WORKER_MODE must be tasks or dlq, not "x"`.
    pub fn one_of<T: Copy>(&self, var: &'static str, choices: &[(&str, T)], default: T) -> Result<T, ConfigError> {
        let Some(value) = self.get(var) else { return Ok(default) };
        choices.iter().find(|(name, _)| name.eq_ignore_ascii_case(&value)).map(|(_, v)| *v).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            ConfigError::invalid(var, or_list(&names), value)
        })
    }

    /// A whole number in `range`; `None` when unset. `accepted` describes the
    /// number in the error, e.g. "a whole number of seconds from 1 to 86400".
    pub fn number(
        &self,
        var: &'static str,
        range: std::ops::RangeInclusive<u64>,
        accepted: &str,
    ) -> Result<Option<u64>, ConfigError> {
        let Some(value) = self.get(var) else { return Ok(None) };
        match value.parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(ConfigError::invalid(var, accepted, value)),
        }
    }

    /// An `http://` or `https://` URL with a host; `None` when unset.
    pub fn url(&self, var: &'static str, example: &str) -> Result<Option<String>, ConfigError> {
        let Some(value) = self.get(var) else { return Ok(None) };
        let host = value.strip_prefix("https://").or_else(|| value.strip_prefix("http://")).unwrap_or("");
        if host.is_empty() || host.starts_with('/') || value.contains(char::is_whitespace) {
            return Err(ConfigError::invalid(var, format!("an http(s) URL such as {example}"), value));
        }
        Ok(Some(value))
    }
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A function config's whole variable list: its pieces' `VARS` and its own, each once, in order.
pub fn var_list(parts: &[&[&'static str]]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for var in parts.iter().flat_map(|p| p.iter()) {
        if !out.contains(var) {
            out.push(var);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Tasks,
        Dlq,
    }

    fn vars_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_choice_outside_the_list_names_the_variable_and_the_accepted_values() {
        let lookup = vars_of(&[("WORKER_MODE", "x"), ("OTHER", " DLQ ")]);
        let vars = Vars::new(&lookup);
        let choices = [("tasks", Mode::Tasks), ("dlq", Mode::Dlq)];
        let e = vars.one_of("WORKER_MODE", &choices, Mode::Tasks).unwrap_err();
        assert_eq!(e.to_string(), r#"WORKER_MODE must be tasks or dlq, not "x""#);
        assert_eq!(format!("{e:?}"), e.to_string(), "main prints the message, not a struct");
        assert_eq!(vars.one_of("OTHER", &choices, Mode::Tasks).unwrap(), Mode::Dlq);
        assert_eq!(vars.one_of("UNSET", &choices, Mode::Tasks).unwrap(), Mode::Tasks);
    }

    #[test]
    fn numbers_and_urls_are_checked_with_the_accepted_form_in_the_message() {
        let lookup =
            vars_of(&[("N", "0"), ("M", " 300 "), ("U", "sqs.example.com/q"), ("V", "https://sqs.example.com/1/q")]);
        let vars = Vars::new(&lookup);
        let e = vars.number("N", 1..=86_400, "a whole number of seconds from 1 to 86400").unwrap_err();
        assert_eq!(e.to_string(), r#"N must be a whole number of seconds from 1 to 86400, not "0""#);
        assert_eq!(vars.number("M", 1..=86_400, "").unwrap(), Some(300));
        assert_eq!(vars.number("UNSET", 1..=2, "").unwrap(), None);
        assert!(vars.url("U", "https://x").unwrap_err().to_string().starts_with("U must be an http(s) URL"));
        assert_eq!(vars.url("V", "").unwrap().as_deref(), Some("https://sqs.example.com/1/q"));
    }

    #[test]
    fn blank_counts_as_unset_and_missing_says_what_to_set() {
        let lookup = vars_of(&[("TABLE_NAME", "   ")]);
        let e = Vars::new(&lookup).required("TABLE_NAME", "the DynamoDB table's name").unwrap_err();
        assert_eq!(e.to_string(), "TABLE_NAME is required: the DynamoDB table's name");
    }

    #[test]
    fn var_lists_keep_order_and_drop_repeats() {
        assert_eq!(var_list(&[&["A", "B"], &["B", "C"]]), vec!["A", "B", "C"]);
        assert_eq!(or_list(&["none", "jwt", "iam"]), "none, jwt or iam");
    }
}
