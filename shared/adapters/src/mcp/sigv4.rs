//! SigV4 for MCP calls to an `AWS_IAM` Lambda function URL (signing service `lambda`): the SDK's own signer over the function's credentials from the environment, so an unsigned call is refused by AWS before any code runs.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderName, HeaderValue};

/// The signing service of Lambda function URLs.
pub const LAMBDA_SERVICE: &str = "lambda";

/// Why a request could not be signed. Permanent: no credentials in the environment, or a
/// request the signer cannot read; the message never holds a secret.
#[derive(Debug, thiserror::Error)]
#[error("cannot SigV4-sign the request: {0}")]
pub struct SignError(String);

/// Where credentials come from.
#[derive(Clone)]
enum Source {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, read at every
    /// signature: Lambda puts its execution role's credentials there.
    Environment,
    /// Fixed credentials (tests).
    Fixed(Credentials),
}

/// Signs requests for one service in one region. `Debug` shows neither key.
#[derive(Clone)]
pub struct SigV4Signer {
    service: String,
    region: String,
    source: Source,
}

impl std::fmt::Debug for SigV4Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Signer").field("service", &self.service).field("region", &self.region).finish()
    }
}

impl SigV4Signer {
    /// Signs as the function's own role (the standard credential variables).
    pub fn from_env(service: &str, region: &str) -> Self {
        Self { service: service.to_owned(), region: region.to_owned(), source: Source::Environment }
    }

    /// Signs with fixed credentials.
    pub fn with_credentials(service: &str, region: &str, credentials: Credentials) -> Self {
        Self { service: service.to_owned(), region: region.to_owned(), source: Source::Fixed(credentials) }
    }

    fn credentials(&self) -> Result<Credentials, SignError> {
        match &self.source {
            Source::Fixed(c) => Ok(c.clone()),
            Source::Environment => {
                let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
                let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) else {
                    return Err(SignError("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set".into()));
                };
                Ok(Credentials::new(id, secret, var("AWS_SESSION_TOKEN"), None, "environment"))
            }
        }
    }

    /// The headers that sign `method uri` with `body` at `time`: `authorization`,
    /// `x-amz-date` and, with a session token, `x-amz-security-token`. The `host` signed is the
    /// URI's authority, which is what the HTTP client sends.
    ///
    /// Errors: [`SignError`] without credentials or for a URI that does not parse.
    pub fn sign(
        &self,
        method: &str,
        uri: &str,
        body: &[u8],
        time: SystemTime,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, SignError> {
        let identity: Identity = self.credentials()?.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SignError(e.to_string()))?
            .into();
        let request = SignableRequest::new(method, uri, std::iter::empty(), SignableBody::Bytes(body))
            .map_err(|e| SignError(e.to_string()))?;
        let (instructions, _signature) = sign(request, &params).map_err(|e| SignError(e.to_string()))?.into_parts();
        instructions
            .headers()
            .map(|(name, value)| {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| SignError(e.to_string()))?;
                let mut value = HeaderValue::from_str(value).map_err(|e| SignError(e.to_string()))?;
                value.set_sensitive(true);
                Ok((name, value))
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn signer() -> SigV4Signer {
        let creds = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, None, "test");
        SigV4Signer::with_credentials(LAMBDA_SERVICE, "us-east-1", creds)
    }

    #[test]
    fn a_signature_covers_host_date_and_body_and_changes_with_each() {
        let at = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let url = "https://abc123.lambda-url.us-east-1.on.aws/mcp";
        let headers = signer().sign("POST", url, b"{\"a\":1}", at).unwrap();
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_str().unwrap().to_owned());
        let auth = get("authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/lambda/aws4_request, SignedHeaders=host;x-amz-date, Signature="),
            "{auth}"
        );
        assert_eq!(get("x-amz-date").as_deref(), Some("20260101T000000Z"));
        assert!(get("x-amz-security-token").is_none());
        let other_body = signer().sign("POST", url, b"{\"a\":2}", at).unwrap();
        let other_host =
            signer().sign("POST", "https://xyz.lambda-url.us-east-1.on.aws/mcp", b"{\"a\":1}", at).unwrap();
        assert_ne!(headers, other_body);
        assert_ne!(headers, other_host);
        assert_eq!(headers, signer().sign("POST", url, b"{\"a\":1}", at).unwrap(), "deterministic");
        assert!(!format!("{:?}", signer()).contains("wJalr"));
    }

    #[test]
    fn a_session_token_is_sent_with_the_signature() {
        let creds = Credentials::new("ASIAEXAMPLE", "secret", Some("session-token".into()), None, "test");
        let headers = SigV4Signer::with_credentials(LAMBDA_SERVICE, "eu-west-1", creds)
            .sign("POST", "https://a.lambda-url.eu-west-1.on.aws/mcp", b"{}", SystemTime::now())
            .unwrap();
        assert!(headers.iter().any(|(n, v)| n == "x-amz-security-token" && v == "session-token"));
    }
}
