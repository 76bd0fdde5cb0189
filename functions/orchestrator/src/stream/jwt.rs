//! A customer's JWT verified inside the function, by the rules of API Gateway's JWT authorizer (RS256, issuer, audience or `client_id`, `exp` / `nbf` / `iat`), with the issuer's keys (JWKS) cached for a bounded time and fetched again once for a key id it does not know.
//!
//! Why here: a Lambda function URL authorises only `NONE` or `AWS_IAM`, so on the streaming URL
//! nobody in front of the function checks a customer's token. The rules are API Gateway's
//! (docs: "Working with JWT authorizers for HTTP APIs"): the token's `alg` is RS256 and its `kid`
//! names a key of the issuer's JWKS; `iss` equals the configured issuer; `aud` contains the
//! configured audience, or, when the token has no `aud`, `client_id` equals it (Cognito's access
//! tokens); `exp` is in the future, `nbf` and `iat` are not, within [`LEEWAY_SECS`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
pub const LEEWAY_SECS: u64 = 60;

/// How long fetched keys are used before they are fetched again: an issuer that rotates its keys
/// publishes the new one ahead of use, and a removed key stops verifying within this.
pub const KEYS_TTL: Duration = Duration::from_secs(3600);

/// How long stale keys still verify while the issuer cannot be reached (then 503): an issuer's
/// outage does not log every customer out, and a key it removed is dropped within a day.
pub const MAX_STALE: Duration = Duration::from_secs(86_400);

/// The shortest time between two fetches for key ids the cache does not know: tokens naming made-up
/// key ids cost at most one fetch each this often, never one each.
pub const UNKNOWN_KID_REFETCH: Duration = Duration::from_secs(30);

/// The longest one fetch of the keys may take, whatever the source.
pub const FETCH_DEADLINE: Duration = Duration::from_secs(3);

/// Why the issuer's keys could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Unreachable, too slow, or a 5xx: the next fetch may work.
    #[error("the issuer's keys could not be fetched: {0}")]
    Unavailable(String),
    /// Answered, but not a key set (a wrong URL, a 4xx): fixing it is an operator's job.
    #[error("the issuer's key set is not usable: {0}")]
    Malformed(String),
}

impl JwksError {
    /// Whether the same fetch may work later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Where the issuer's keys come from (its JWKS URL on AWS, a fixed set in tests).
pub trait JwksSource: Send + Sync {
    /// The key set as the issuer publishes it now.
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, JwksError>>;
}

/// Why a token was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The token is not one this issuer signed for this audience, or it is out of date: 401,
    /// permanent (the same token never passes). The reason names a rule, never the token.
    #[error("the token is not valid: {0}")]
    Invalid(String),
    /// The issuer's keys could not be had, so a valid token cannot be told from a forged one:
    /// 503, transient — never a 401 for a token that may be valid.
    #[error("{0}")]
    KeysUnavailable(JwksError),
}

impl VerifyError {
    /// Whether the same token may pass later (the keys were unavailable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::KeysUnavailable(_))
    }
}

/// The authorizer's configuration: `JwtIssuer` and `JwtAudience` of the template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtRules {
    pub issuer: String,
    pub audience: String,
}

/// Keys as last fetched.
struct Cached {
    keys: JwkSet,
    fetched: Instant,
}

/// What the cache holds: the last keys, and when fresh keys were last fetched again for a key id
/// they lacked (at most once per [`UNKNOWN_KID_REFETCH`]).
#[derive(Default)]
struct KeyCache {
    cached: Option<Cached>,
    unknown_kid_fetch: Option<Instant>,
}

/// Verifies bearer tokens by [`JwtRules`] with keys from a [`JwksSource`], cached.
pub struct JwtVerifier {
    rules: JwtRules,
    source: Arc<dyn JwksSource>,
    /// One fetch at a time: concurrent requests wait for it (bounded by [`FETCH_DEADLINE`]).
    cache: tokio::sync::Mutex<KeyCache>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier").field("rules", &self.rules).finish_non_exhaustive()
    }
}

/// Why the build links no usable JWT crypto (a second crypto feature of `jsonwebtoken` switched on elsewhere).
#[derive(Debug, thiserror::Error)]
#[error("jsonwebtoken has no default crypto provider (exactly one of its aws_lc_rs / rust_crypto features must be on)")]
pub struct NoCryptoProvider;

impl JwtVerifier {
    /// A verifier for `rules` over `source`; nothing is fetched until the first token.
    /// Errors: the build has no JWT crypto provider (checked here, not on the first request).
    pub fn new(rules: JwtRules, source: Arc<dyn JwksSource>) -> Result<Self, NoCryptoProvider> {
        jsonwebtoken::crypto::CryptoProvider::try_get_default().ok_or(NoCryptoProvider)?;
        Ok(Self { rules, source, cache: tokio::sync::Mutex::new(KeyCache::default()) })
    }

    /// The rules it checks.
    pub fn rules(&self) -> &JwtRules {
        &self.rules
    }

    /// The token's claims when it passes every rule (claims as the token holds them).
    /// Errors: [`VerifyError::Invalid`] for a token that does not (401), [`VerifyError::KeysUnavailable`]
    /// when its key could not be looked up (503).
    pub async fn verify(&self, token: &str) -> Result<Map<String, Value>, VerifyError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(&e))?;
        if header.alg != Algorithm::RS256 {
            return Err(VerifyError::Invalid(format!("alg {:?} is not RS256", header.alg)));
        }
        let kid = header.kid.ok_or_else(|| VerifyError::Invalid("the token names no key (kid)".into()))?;
        let key = self.key(&kid).await?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = LEEWAY_SECS;
        validation.set_issuer(&[&self.rules.issuer]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        validation.validate_nbf = true;
        // `aud` or `client_id` is checked below, as API Gateway does.
        validation.validate_aud = false;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| invalid(&e))?;
        check_audience(&data.claims, &self.rules.audience)?;
        check_issued_at(&data.claims, now_secs())?;
        Ok(data.claims)
    }

    /// The decoding key `kid`: from the cache while fresh; fetched again when the keys expired, or
    /// when `kid` is not among fresh keys and no such fetch ran in the last [`UNKNOWN_KID_REFETCH`]
    /// (a rotated key works at once; made-up ones cost one fetch in that time, not one each); stale
    /// keys while the issuer is unreachable, up to [`MAX_STALE`].
    async fn key(&self, kid: &str) -> Result<DecodingKey, VerifyError> {
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        let fresh = cache.cached.as_ref().is_some_and(|c| now.duration_since(c.fetched) < KEYS_TTL);
        let known = cache.cached.as_ref().is_some_and(|c| c.keys.find(kid).is_some());
        let may_refetch = cache.unknown_kid_fetch.is_none_or(|t| now.duration_since(t) >= UNKNOWN_KID_REFETCH);
        if !fresh || (!known && may_refetch) {
            if fresh {
                cache.unknown_kid_fetch = Some(now);
            }
            match self.fetch().await {
                Ok(keys) => cache.cached = Some(Cached { keys, fetched: Instant::now() }),
                Err(e) => {
                    let usable = cache.cached.as_ref().is_some_and(|c| now.duration_since(c.fetched) < MAX_STALE);
                    tracing::warn!(error = %e, transient = e.is_transient(), stale_keys_used = usable, "JWKS fetch failed");
                    if !usable || !known {
                        return Err(VerifyError::KeysUnavailable(e));
                    }
                }
            }
        }
        let jwk = cache
            .cached
            .as_ref()
            .and_then(|c| c.keys.find(kid))
            .ok_or_else(|| VerifyError::Invalid("the token's key (kid) is not one of the issuer's".into()))?;
        DecodingKey::from_jwk(jwk)
            .map_err(|e| VerifyError::Invalid(format!("the issuer's key {kid} is not usable: {e}")))
    }

    /// One fetch, cut at [`FETCH_DEADLINE`].
    async fn fetch(&self) -> Result<JwkSet, JwksError> {
        match tokio::time::timeout(FETCH_DEADLINE, self.source.fetch()).await {
            Ok(result) => result,
            Err(_) => Err(JwksError::Unavailable(format!("no answer within {} s", FETCH_DEADLINE.as_secs()))),
        }
    }
}

/// 401 for a token `jsonwebtoken` refused (its message names the rule, not the token).
fn invalid(e: &jsonwebtoken::errors::Error) -> VerifyError {
    VerifyError::Invalid(e.to_string())
}

/// `aud` (a string or a list) holds `audience`; with no `aud`, `client_id` equals it.
fn check_audience(claims: &Map<String, Value>, audience: &str) -> Result<(), VerifyError> {
    let ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == audience,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(audience)),
        Some(_) => false,
        None => claims.get("client_id").and_then(Value::as_str) == Some(audience),
    };
    if ok { Ok(()) } else { Err(VerifyError::Invalid("neither aud nor client_id is the audience".into())) }
}

/// `iat`, when present, is not in the future (beyond [`LEEWAY_SECS`]); `now` in epoch seconds.
fn check_issued_at(claims: &Map<String, Value>, now: u64) -> Result<(), VerifyError> {
    match claims.get("iat") {
        None => Ok(()),
        Some(iat) => match iat.as_f64() {
            Some(iat) if iat <= (now + LEEWAY_SECS) as f64 => Ok(()),
            Some(_) => Err(VerifyError::Invalid("iat is in the future".into())),
            None => Err(VerifyError::Invalid("iat is not a number".into())),
        },
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A claim as API Gateway hands it to a function: a string as is, a number or boolean as text.
pub fn claim_text(claims: &Map<String, Value>, name: &str) -> Option<String> {
    match claims.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The issuer's keys over HTTPS: one GET of its JWKS URL, cut at [`FETCH_DEADLINE`].
pub struct HttpJwks {
    url: String,
    client: reqwest::Client,
}

impl HttpJwks {
    /// Keys from `url` (`JWT_JWKS_URL`, or the issuer's `/.well-known/jwks.json`).
    /// Errors: the HTTP client cannot be built (no TLS roots).
    pub fn new(url: impl Into<String>) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(FETCH_DEADLINE).connect_timeout(FETCH_DEADLINE).build()?;
        Ok(Self { url: url.into(), client })
    }

    /// The JWKS URL of `issuer` when none is configured: `<issuer>/.well-known/jwks.json` (Cognito's,
    /// Auth0's; API Gateway reads it from the issuer's OpenID discovery document).
    pub fn default_url(issuer: &str) -> String {
        format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/'))
    }
}

impl JwksSource for HttpJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<JwkSet, JwksError>> {
        Box::pin(async move {
            let response = self
                .client
                .get(&self.url)
                .send()
                .await
                .map_err(|e| JwksError::Unavailable(e.without_url().to_string()))?;
            let status = response.status();
            if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                return Err(JwksError::Unavailable(format!("the JWKS URL answered {status}")));
            }
            if !status.is_success() {
                return Err(JwksError::Malformed(format!("the JWKS URL answered {status}")));
            }
            let body = response.bytes().await.map_err(|e| JwksError::Unavailable(e.without_url().to_string()))?;
            serde_json::from_slice(&body).map_err(|e| JwksError::Malformed(format!("not a JWKS: {e}")))
        })
    }
}
