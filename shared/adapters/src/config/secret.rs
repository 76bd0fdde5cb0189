//! Secrets named by a pair of variables (`X` locally, `X_SECRET_ARN` on AWS), fetched after parsing through the AWS Parameters and Secrets Lambda Extension (plain HTTP on localhost, no SDK).

use secrecy::{ExposeSecret, SecretString};

use super::{ConfigError, Vars};

/// Where a secret comes from: its plain variable (local runs), or the Secrets
/// Manager secret / SSM parameter named by its `*_SECRET_ARN` variable,
/// fetched at cold start by [`SecretSource::resolve`]. `Debug` never shows a value.
#[derive(Clone, Debug)]
pub enum SecretSource {
    /// The value itself, from `var`.
    Plain { var: String, value: SecretString },
    /// A secret ARN or SSM parameter name, from `arn_var`.
    Stored { arn_var: String, name: String },
}

/// Two sources are equal when they name the same variable and, for plain ones, hold the same
/// value (configuration tests compare whole configs).
impl PartialEq for SecretSource {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Plain { var: a, value: x }, Self::Plain { var: b, value: y }) => {
                a == b && x.expose_secret() == y.expose_secret()
            }
            (Self::Stored { arn_var: a, name: x }, Self::Stored { arn_var: b, name: y }) => a == b && x == y,
            _ => false,
        }
    }
}

impl Eq for SecretSource {}

impl SecretSource {
    /// `plain_var` when set (it wins), else `arn_var`; `None` when neither is set.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, plain_var: &str, arn_var: &str) -> Option<Self> {
        let vars = Vars::new(&lookup);
        if let Some(value) = vars.get(plain_var) {
            return Some(Self::Plain { var: plain_var.to_owned(), value: SecretString::from(value) });
        }
        vars.get(arn_var).map(|name| Self::Stored { arn_var: arn_var.to_owned(), name })
    }

    /// The variable that names this secret (for messages).
    pub fn var(&self) -> &str {
        match self {
            Self::Plain { var, .. } => var,
            Self::Stored { arn_var, .. } => arn_var,
        }
    }

    /// The secret's value: the plain one, or fetched once through `extension`.
    /// Error: [`ConfigError::Secret`] naming the `*_SECRET_ARN` variable.
    #[cfg(feature = "secrets")]
    pub async fn resolve(&self, extension: &SecretsExtension) -> Result<SecretString, ConfigError> {
        match self {
            Self::Plain { value, .. } => Ok(value.clone()),
            Self::Stored { arn_var, name } => extension.fetch(arn_var, name).await,
        }
    }
}

/// Default port of the AWS Parameters and Secrets Lambda Extension.
pub const DEFAULT_EXTENSION_PORT: u16 = 2773;

/// How to reach the AWS Parameters and Secrets Lambda Extension (both variables are set by Lambda).
#[derive(Clone, Debug)]
pub struct SecretsExtension {
    /// `PARAMETERS_SECRETS_EXTENSION_HTTP_PORT`, default 2773.
    pub port: u16,
    /// `AWS_SESSION_TOKEN`: the extension's `X-Aws-Parameters-Secrets-Token`.
    pub session_token: Option<SecretString>,
}

impl SecretsExtension {
    pub const VARS: &'static [&'static str] = &["PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", "AWS_SESSION_TOKEN"];

    /// Error: the port is not a number in 1..=65535.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let port = vars
            .number("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", 1..=65_535, "a port number from 1 to 65535")?
            .map_or(DEFAULT_EXTENSION_PORT, |p| p as u16);
        Ok(Self { port, session_token: vars.get("AWS_SESSION_TOKEN").map(SecretString::from) })
    }

    /// Fetches the Secrets Manager secret (ARN or name) or SSM parameter (an
    /// `arn:aws:ssm:` ARN or a `/path`) `name`, decrypted; `arn_var` is named in errors.
    #[cfg(feature = "secrets")]
    pub async fn fetch(&self, arn_var: &str, name: &str) -> Result<SecretString, ConfigError> {
        use std::time::Duration;

        let fail = |reason: String| ConfigError::Secret { var: arn_var.to_owned(), reason };
        let is_ssm = name.starts_with("arn:aws:ssm:") || name.starts_with('/');
        let port = self.port;
        let url = if is_ssm {
            format!(
                "http://localhost:{port}/systemsmanager/parameters/get?name={}&withDecryption=true",
                urlencode(name)
            )
        } else {
            format!("http://localhost:{port}/secretsmanager/get?secretId={}", urlencode(name))
        };
        let client =
            reqwest::Client::builder().timeout(Duration::from_secs(5)).build().map_err(|e| fail(e.to_string()))?;
        let token = self.session_token.as_ref().map(|t| t.expose_secret().to_owned()).unwrap_or_default();
        let response = client
            .get(&url)
            .header("X-Aws-Parameters-Secrets-Token", token)
            .send()
            .await
            .map_err(|e| fail(format!("the Parameters and Secrets extension is unreachable: {e}")))?;
        if !response.status().is_success() {
            return Err(fail(format!("the extension answered HTTP {}", response.status())));
        }
        let body: serde_json::Value = response.json().await.map_err(|e| fail(e.to_string()))?;
        let value = if is_ssm {
            body.pointer("/Parameter/Value").and_then(|v| v.as_str())
        } else {
            body.get("SecretString").and_then(|v| v.as_str())
        };
        match value.map(str::trim) {
            Some(v) if !v.is_empty() => Ok(SecretString::from(v)),
            _ => Err(fail("the secret has no string value".into())),
        }
    }
}

#[cfg(feature = "secrets")]
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
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
    fn the_plain_variable_wins_and_neither_prints() {
        let both = lookup(&[("GATEWAY_TOKEN", "tok-0123456789abcdef"), ("GATEWAY_TOKEN_SECRET_ARN", "arn:x")]);
        let s = SecretSource::from_lookup(&both, "GATEWAY_TOKEN", "GATEWAY_TOKEN_SECRET_ARN").unwrap();
        assert_eq!(s.var(), "GATEWAY_TOKEN");
        assert!(!format!("{s:?}").contains("tok-0123456789abcdef"), "{s:?}");
        let arn = lookup(&[("GATEWAY_TOKEN", " "), ("GATEWAY_TOKEN_SECRET_ARN", "arn:aws:secretsmanager:x")]);
        let s = SecretSource::from_lookup(&arn, "GATEWAY_TOKEN", "GATEWAY_TOKEN_SECRET_ARN").unwrap();
        assert_eq!(
            s,
            SecretSource::Stored {
                arn_var: "GATEWAY_TOKEN_SECRET_ARN".into(),
                name: "arn:aws:secretsmanager:x".into()
            }
        );
        assert_eq!(SecretSource::from_lookup(lookup(&[]), "A", "A_SECRET_ARN"), None);
    }

    #[test]
    fn secret_never_prints() {
        let s = SecretString::from("sk-live-1234567890");
        let source = SecretSource::Plain { var: "LLM_API_KEY".into(), value: s.clone() };
        let printed = format!("{s:?} {source:?}");
        assert!(!printed.contains("sk-live") && printed.contains("LLM_API_KEY"), "{printed}");
        assert_eq!(s.expose_secret(), "sk-live-1234567890");
    }

    #[test]
    fn the_extension_port_defaults_and_is_checked() {
        assert_eq!(SecretsExtension::from_lookup(lookup(&[])).unwrap().port, 2773);
        let e =
            SecretsExtension::from_lookup(lookup(&[("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT", "http")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"PARAMETERS_SECRETS_EXTENSION_HTTP_PORT must be a port number from 1 to 65535, not "http""#
        );
    }

    #[cfg(feature = "secrets")]
    #[tokio::test]
    async fn an_unreachable_extension_names_the_arn_variable_and_is_transient() {
        // Port 9 (discard) on localhost answers nothing.
        let ext = SecretsExtension { port: 9, session_token: None };
        let source =
            SecretSource::Stored { arn_var: "LLM_API_KEY_SECRET_ARN".into(), name: "arn:aws:secretsmanager:k".into() };
        let e = source.resolve(&ext).await.unwrap_err();
        assert!(e.to_string().starts_with("could not read the secret named by LLM_API_KEY_SECRET_ARN"), "{e}");
        assert!(e.is_transient());
    }
}
