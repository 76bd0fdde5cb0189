//! The one SigV4 signer of every signed request the swarm sends — MCP calls to `AWS_IAM` function URLs (service `lambda`), the span export to X-Ray's OTLP endpoint (`xray`), Bedrock's OpenAI-compatible endpoint (`bedrock`), an operator's calls to the deployed API (`execute-api`) — over the AWS SDK's own signer (`aws-sigv4`), with credentials from `aws-config`'s default provider chain: environment variables (a Lambda's role), the shared profile files (SSO profiles included where the `sso` feature of `aws-config` is on), web identity, the ECS container endpoint and instance metadata.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderName, HeaderValue};
use tokio::sync::{Mutex, OnceCell};

/// Credentials are fetched again this long before they expire.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// Why a request could not be signed; the message never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The provider chain found no credentials, or could not reach where they are (a profile
    /// without keys, an SSO session that expired, instance metadata unreachable). Transient only
    /// when the provider says so (a timeout reaching the container or instance endpoint).
    #[error("no AWS credentials: {message}")]
    NoCredentials { message: String, transient: bool },
    /// The request cannot be signed as given (a URI that does not parse, a header that is not text).
    #[error("SigV4 signing failed: {0}")]
    Signing(String),
}

impl SignError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::NoCredentials { transient: true, .. })
    }
}

/// Where the credentials come from.
enum Source {
    /// `aws-config`'s default chain, built on first use (the chain's discovery is async).
    Chain(OnceCell<SharedCredentialsProvider>),
    /// A given provider (fixed credentials in tests, a profile provider…).
    Provider(SharedCredentialsProvider),
}

/// Signs requests for one service in one region. Cheap to clone (clones share the credential
/// cache). `Debug` shows the service and region, never a key.
#[derive(Clone)]
pub struct SigV4Signer {
    service: String,
    region: String,
    source: Arc<Source>,
    cached: Arc<Mutex<Option<Credentials>>>,
}

impl std::fmt::Debug for SigV4Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Signer").field("service", &self.service).field("region", &self.region).finish()
    }
}

impl SigV4Signer {
    /// Signs with credentials from `aws-config`'s default provider chain (found on first use).
    pub fn from_env(service: &str, region: &str) -> Self {
        Self::with_source(service, region, Source::Chain(OnceCell::new()))
    }

    /// Signs with credentials from `provider`.
    pub fn with_provider(service: &str, region: &str, provider: impl ProvideCredentials + 'static) -> Self {
        Self::with_source(service, region, Source::Provider(SharedCredentialsProvider::new(provider)))
    }

    /// Signs with fixed credentials.
    pub fn with_credentials(service: &str, region: &str, credentials: Credentials) -> Self {
        Self::with_provider(service, region, credentials)
    }

    fn with_source(service: &str, region: &str, source: Source) -> Self {
        Self {
            service: service.to_owned(),
            region: region.to_owned(),
            source: Arc::new(source),
            cached: Arc::default(),
        }
    }

    /// The signing name (`lambda`, `xray`, `bedrock`, `execute-api`).
    pub fn service(&self) -> &str {
        &self.service
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// The credentials to sign with now: the cached ones until [`REFRESH_BEFORE_EXPIRY`] before
    /// they expire (credentials without an expiry, like a Lambda role's in its environment,
    /// are kept), else the provider's.
    pub async fn credentials(&self) -> Result<Credentials, SignError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref()
            && c.expiry().is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE_EXPIRY)
        {
            return Ok(c.clone());
        }
        let provider = match self.source.as_ref() {
            Source::Provider(p) => p.clone(),
            Source::Chain(cell) => {
                let region = aws_config::Region::new(self.region.clone());
                cell.get_or_init(|| async {
                    let chain =
                        aws_config::default_provider::credentials::DefaultCredentialsChain::builder().region(region);
                    SharedCredentialsProvider::new(chain.build().await)
                })
                .await
                .clone()
            }
        };
        let fresh = provider.provide_credentials().await.map_err(|e| {
            use aws_credential_types::provider::error::CredentialsError;
            let transient = matches!(e, CredentialsError::ProviderTimedOut(_) | CredentialsError::ProviderError(_));
            SignError::NoCredentials { message: e.to_string(), transient }
        })?;
        *cached = Some(fresh.clone());
        Ok(fresh)
    }

    /// The headers that sign `method uri` with `headers` and `body` now: `authorization`,
    /// `x-amz-date` and, with a session token, `x-amz-security-token` (all marked sensitive).
    /// Every header given is signed (`host` is the URI's authority, what the HTTP client sends).
    ///
    /// Errors: [`SignError`] without credentials or for a request that cannot be signed.
    pub async fn sign(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(HeaderName, HeaderValue)>, SignError> {
        let credentials = self.credentials().await?;
        self.sign_at(&credentials, method, uri, headers, body, SystemTime::now())
    }

    /// [`SigV4Signer::sign`] with given credentials at `time`: deterministic (a verifier re-signs
    /// what arrived with the caller's key and compares).
    pub fn sign_at(
        &self,
        credentials: &Credentials,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        time: SystemTime,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, SignError> {
        let identity: Identity = credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SignError::Signing(e.to_string()))?
            .into();
        let request = SignableRequest::new(method, uri, headers.iter().copied(), SignableBody::Bytes(body))
            .map_err(|e| SignError::Signing(e.to_string()))?;
        let (instructions, _signature) =
            sign(request, &params).map_err(|e| SignError::Signing(e.to_string()))?.into_parts();
        instructions
            .headers()
            .map(|(name, value)| {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| SignError::Signing(e.to_string()))?;
                let mut value = HeaderValue::from_str(value).map_err(|e| SignError::Signing(e.to_string()))?;
                value.set_sensitive(true);
                Ok((name, value))
            })
            .collect()
    }

    /// Signs `request` in place (its method, URI, headers and body), adding the signature's headers.
    pub async fn sign_request(&self, request: &mut http::Request<bytes::Bytes>) -> Result<(), SignError> {
        let uri = request.uri().to_string();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned())))
            .collect();
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let signed = self.sign(request.method().as_str(), &uri, &headers, request.body()).await?;
        for (name, value) in signed {
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

/// Re-signs a request that arrived with `credentials` (the key the caller should have used) and
/// compares, as AWS does: `true` when its `authorization` header matches and its `x-amz-date` is
/// within `max_skew` of now. `signed_headers` names the headers the caller signed besides
/// `host` and `x-amz-date` (read from what arrived). For stand-ins of AWS endpoints in tests
/// and for the local stack.
pub fn verify(
    signer: &SigV4Signer,
    credentials: &Credentials,
    request: &http::request::Parts,
    body: &[u8],
    max_skew: Duration,
) -> bool {
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let Some(at) = parse_amz_date(header("x-amz-date")) else { return false };
    let skew = SystemTime::now().duration_since(at).unwrap_or_else(|e| e.duration());
    let authorization = header("authorization");
    let signed_names: Vec<&str> = authorization
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .map(|names| {
            names.split(';').filter(|n| !matches!(*n, "host" | "x-amz-date" | "x-amz-security-token")).collect()
        })
        .unwrap_or_default();
    let headers: Vec<(&str, &str)> = signed_names.iter().map(|n| (*n, header(n))).collect();
    let uri = format!("http://{}{}", header("host"), request.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    let Ok(expected) = signer.sign_at(credentials, request.method.as_str(), &uri, &headers, body, at) else {
        return false;
    };
    let expected = expected.iter().find(|(n, _)| n == "authorization").and_then(|(_, v)| v.to_str().ok());
    skew <= max_skew && expected == Some(authorization)
}

/// `x-amz-date` (`YYYYMMDDTHHMMSSZ`, UTC) as a time.
fn parse_amz_date(text: &str) -> Option<SystemTime> {
    let digits = |range: std::ops::Range<usize>| text.get(range)?.parse::<u64>().ok();
    if text.len() != 16 || text.as_bytes()[8] != b'T' || !text.ends_with('Z') {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (hour, minute, second) = (digits(9..11)?, digits(11..13)?, digits(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), then seconds since the epoch.
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(days * 86_400 + hour * 3_600 + minute * 60 + second))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn credentials() -> Credentials {
        Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, None, "test")
    }

    fn signer() -> SigV4Signer {
        SigV4Signer::with_credentials("lambda", "us-east-1", credentials())
    }

    #[test]
    fn a_signature_covers_host_date_headers_and_body_and_changes_with_each() {
        let at = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let url = "https://abc123.lambda-url.us-east-1.on.aws/mcp";
        let c = credentials();
        let headers = signer().sign_at(&c, "POST", url, &[], b"{\"a\":1}", at).unwrap();
        let get = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_str().unwrap().to_owned());
        let auth = get("authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/lambda/aws4_request, SignedHeaders=host;x-amz-date, Signature="),
            "{auth}"
        );
        assert_eq!(get("x-amz-date").as_deref(), Some("20260101T000000Z"));
        assert!(get("x-amz-security-token").is_none());
        assert!(headers.iter().all(|(_, v)| v.is_sensitive()));
        let s = signer();
        assert_ne!(headers, s.sign_at(&c, "POST", url, &[], b"{\"a\":2}", at).unwrap());
        assert_ne!(
            headers,
            s.sign_at(&c, "POST", "https://xyz.lambda-url.us-east-1.on.aws/mcp", &[], b"{\"a\":1}", at).unwrap()
        );
        let typed = s.sign_at(&c, "POST", url, &[("content-type", "application/json")], b"{\"a\":1}", at).unwrap();
        let typed_auth = typed.iter().find(|(n, _)| n == "authorization").unwrap().1.to_str().unwrap().to_owned();
        assert!(typed_auth.contains("SignedHeaders=content-type;host;x-amz-date"), "{typed_auth}");
        assert_eq!(headers, s.sign_at(&c, "POST", url, &[], b"{\"a\":1}", at).unwrap(), "deterministic");
        assert!(!format!("{s:?}").contains("wJalr"));
    }

    #[tokio::test]
    async fn a_session_token_is_sent_and_credentials_are_cached_until_near_expiry() {
        let with_token = Credentials::new("ASIAEXAMPLE", "secret", Some("session-token".into()), None, "test");
        let headers = SigV4Signer::with_credentials("bedrock", "eu-west-1", with_token)
            .sign("POST", "https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1/chat/completions", &[], b"{}")
            .await
            .unwrap();
        assert!(headers.iter().any(|(n, v)| n == "x-amz-security-token" && v == "session-token"));

        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = calls.clone();
        let provider = aws_credential_types::credential_fn::provide_credentials_fn(move || {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // The first credentials expire within the refresh margin, the next ones in an hour.
            let expiry = SystemTime::now() + if n == 0 { Duration::from_secs(60) } else { Duration::from_secs(3600) };
            async move { Ok(Credentials::new(format!("AKID{n}"), "s", None, Some(expiry), "fn")) }
        });
        let signer = SigV4Signer::with_provider("execute-api", "us-east-1", provider);
        assert_eq!(signer.credentials().await.unwrap().access_key_id(), "AKID0");
        assert_eq!(signer.credentials().await.unwrap().access_key_id(), "AKID1", "near expiry: fetched again");
        assert_eq!(signer.credentials().await.unwrap().access_key_id(), "AKID1", "fresh: cached");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_credentials_is_a_clear_error() {
        let provider = aws_credential_types::credential_fn::provide_credentials_fn(|| async {
            Err(aws_credential_types::provider::error::CredentialsError::not_loaded("no profile"))
        });
        let e = SigV4Signer::with_provider("xray", "us-east-1", provider)
            .sign("POST", "https://xray.us-east-1.amazonaws.com/v1/traces", &[], b"")
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("no AWS credentials:"), "{e}");
        assert!(!e.is_transient());
    }

    #[tokio::test]
    async fn a_verifier_accepts_the_signed_request_and_refuses_a_changed_one() {
        let s = signer();
        let url = "http://127.0.0.1:8080/approvals?status=pending";
        let signed = s.sign("GET", url, &[("accept", "application/json")], b"").await.unwrap();
        let mut builder = http::Request::get("/approvals?status=pending")
            .header("host", "127.0.0.1:8080")
            .header("accept", "application/json");
        for (n, v) in &signed {
            builder = builder.header(n, v);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        let skew = Duration::from_secs(300);
        assert!(verify(&s, &credentials(), &parts, b"", skew));
        assert!(!verify(&s, &credentials(), &parts, b"changed body", skew));
        let other = Credentials::new("AKIDEXAMPLE", "another-secret", None, None, "t");
        assert!(!verify(&s, &other, &parts, b"", skew), "another key's signature does not match");
        let (mut wrong_accept, ()) = http::Request::from_parts(parts.clone(), ()).into_parts();
        wrong_accept.headers.insert("accept", "text/html".parse().unwrap());
        assert!(!verify(&s, &credentials(), &wrong_accept, b"", skew), "a signed header changed");
        // Signed an hour ago: too old, however right.
        let old = SystemTime::now() - Duration::from_secs(3600);
        let stale = s.sign_at(&credentials(), "GET", url, &[("accept", "application/json")], b"", old).unwrap();
        let mut stale_parts = parts.clone();
        for (name, value) in stale {
            stale_parts.headers.insert(name, value);
        }
        assert!(!verify(&s, &credentials(), &stale_parts, b"", skew));
    }

    #[test]
    fn amz_dates_parse_as_utc() {
        assert_eq!(parse_amz_date("20260101T000000Z"), Some(UNIX_EPOCH + Duration::from_secs(1_767_225_600)));
        assert_eq!(parse_amz_date("20240102T030405Z"), Some(UNIX_EPOCH + Duration::from_secs(1_704_164_645)));
        for bad in ["", "2026-01-01T00:00:00Z", "20261301T000000Z", "20260101T000000", "20260101X000000Z"] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
