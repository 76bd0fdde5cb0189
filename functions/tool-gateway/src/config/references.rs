//! `${env:NAME}` references inside the configuration's secret values (role tokens, upstream headers, the approval key): listed without resolving them, and resolved through a lookup at start-up.

use secrecy::{ExposeSecret, SecretString};

use crate::error::GatewayError;

const OPEN: &str = "${env:";

/// The `NAME`s of the `${env:NAME}` references in `value` (an unclosed one is reported by [`resolve`]).
pub fn names(value: &SecretString) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = value.expose_secret();
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let Some(end) = after.find('}') else { break };
        names.push(after[..end].to_owned());
        rest = &after[end + 1..];
    }
    names
}

/// `value` with every `${env:NAME}` replaced by `lookup(NAME)`.
/// Errors: [`GatewayError::Config`] naming a variable that is unset or a reference that is not
/// closed (never the value).
pub fn resolve(value: &SecretString, lookup: &dyn Fn(&str) -> Option<String>) -> Result<SecretString, GatewayError> {
    let mut rest = value.expose_secret();
    let mut out = String::with_capacity(rest.len());
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let end = after.find('}').ok_or_else(|| GatewayError::Config("unterminated ${env:...} reference".into()))?;
        let name = &after[..end];
        let value = lookup(name).ok_or_else(|| {
            GatewayError::Config(format!("environment variable {name} (referenced by the gateway config) is not set"))
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(SecretString::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_in_place_and_an_open_one_is_an_error() {
        let value = SecretString::from("k-${env:A}-${env:B}");
        assert_eq!(names(&value), ["A", "B"]);
        let lookup = |n: &str| Some(n.to_lowercase());
        assert_eq!(resolve(&value, &lookup).unwrap().expose_secret(), "k-a-b");
        let e = resolve(&SecretString::from("${env:A"), &lookup).unwrap_err();
        assert!(e.to_string().contains("unterminated"), "{e}");
    }
}
