//! Secrets at cold start: a plain variable locally, else Secrets Manager or SSM through the AWS Parameters and Secrets Lambda Extension.

use std::time::Duration;

/// A secret that could not be read; names the variable, never the value.
#[derive(Debug, thiserror::Error)]
#[error("could not read secret {0}")]
pub struct SecretError(String);

/// Reads a secret: the plain variable `plain_var` when set (local runs), else
/// the Secrets Manager secret or SSM parameter named by `arn_var`, fetched
/// through the AWS Parameters and Secrets Lambda Extension on
/// `localhost:2773` (no SDK client needed). `None` when neither is set.
pub async fn secret(plain_var: &str, arn_var: &str) -> Result<Option<String>, SecretError> {
    if let Ok(v) = std::env::var(plain_var)
        && !v.trim().is_empty()
    {
        return Ok(Some(v));
    }
    let Ok(name) = std::env::var(arn_var) else { return Ok(None) };
    if name.trim().is_empty() {
        return Ok(None);
    }
    let port = std::env::var("PARAMETERS_SECRETS_EXTENSION_HTTP_PORT").unwrap_or_else(|_| "2773".into());
    let token = std::env::var("AWS_SESSION_TOKEN").unwrap_or_default();
    let is_ssm = name.starts_with("arn:aws:ssm:") || name.starts_with('/');
    let url = if is_ssm {
        format!("http://localhost:{port}/systemsmanager/parameters/get?name={}&withDecryption=true", urlencode(&name))
    } else {
        format!("http://localhost:{port}/secretsmanager/get?secretId={}", urlencode(&name))
    };
    let fail = |reason: String| SecretError(format!("{arn_var}: {reason}"));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().map_err(|e| fail(e.to_string()))?;
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
    value.map(|v| Some(v.to_owned())).ok_or_else(|| fail("the secret has no string value".into()))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
