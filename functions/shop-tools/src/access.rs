//! Who the shop answers: the `Host` values it accepts and the gateway's upstream credential every MCP request must carry, checked before rmcp sees the request; and the identity headers only the gateway writes.
//!
//! On AWS the function URL is `AuthType: AWS_IAM`, so AWS itself refuses an unsigned call
//! before this code runs, and the shop accepts only its function URL's host. Locally the
//! stack generates a token, gives it to the gateway as the upstream's `Authorization`
//! header and to the shop as [`ShopAccess::bearer`]: a call without it is refused with 401
//! and touches nothing.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The header carrying the customer a call acts for. Written by the tool gateway from the
/// caller's identity; a model can only write arguments, never headers. Same name as the
/// gateway's `x-swarm-customer-id`.
pub const CUSTOMER_HEADER: &str = "x-swarm-customer-id";
/// The header carrying a side-effecting call's idempotency key, derived by the worker from the
/// conversation, the subtask and the call's position (never from model output).
pub const IDEMPOTENCY_HEADER: &str = "x-swarm-idempotency-key";

/// The header carrying the consent limit of a refund the gateway lets through without a
/// person's approval, in cents: the order's refunds so far plus this one may total at most this
/// much, otherwise nothing is refunded and the call is answered [`APPROVAL_REQUIRED`]. Written by
/// the tool gateway from its configuration (`side_effects.<tool>.consent.above`); absent for a
/// call a person approved and where no consent is configured.
pub const CONSENT_LIMIT_HEADER: &str = "x-swarm-consent-limit-cents";
/// The header carrying the approval a person gave for this refund (its id), written by the tool
/// gateway once it verified the approval's token for exactly this call. The shop pays one
/// approval once: a refund under an approval already used by another key is refused.
pub const APPROVAL_ID_HEADER: &str = "x-swarm-approval-id";
/// The JSON-RPC error code of a refund that needs a person's approval first (the gateway's
/// `APPROVAL_REQUIRED`, which it turns into the approval the worker records).
pub const APPROVAL_REQUIRED: i32 = -32012;

/// Hosts accepted by default (rmcp's DNS-rebinding guard): loopback only.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Shortest accepted upstream credential, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Checks an upstream credential: at least [`MIN_TOKEN_CHARS`] characters, no blanks.
/// Errors: the rule it breaks (the message never shows the token).
pub fn check_token(token: &str) -> Result<(), String> {
    if token.chars().count() < MIN_TOKEN_CHARS || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("the shop's upstream token must be at least {MIN_TOKEN_CHARS} characters, no blanks"));
    }
    Ok(())
}

/// A fresh upstream credential: 32 random bytes as hex (the local stack's token).
pub fn generate_token() -> SecretString {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    SecretString::from(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Which requests reach the tools.
#[derive(Clone, Debug)]
pub struct ShopAccess {
    /// Accepted `Host` values: a name (`localhost`), `name:port`, or a `*.` suffix pattern
    /// (`*.lambda-url.us-east-1.on.aws`); `*` alone accepts any host.
    hosts: Vec<String>,
    /// The `Authorization: Bearer` value every MCP request must carry; `None` where the
    /// platform authenticates callers first (an `AWS_IAM` function URL).
    bearer: Option<SecretString>,
}

impl ShopAccess {
    /// `hosts`, and no credential of its own: the platform authenticates callers first.
    pub fn new(hosts: Vec<String>) -> Self {
        Self { hosts, bearer: None }
    }

    /// Every request must also carry `Authorization: Bearer <token>`.
    /// Errors: a token [`check_token`] refuses.
    pub fn with_token(mut self, token: SecretString) -> Result<Self, String> {
        check_token(token.expose_secret())?;
        self.bearer = Some(token);
        Ok(self)
    }

    /// Loopback hosts and `token`: the local stack's shop.
    /// Errors: a token [`check_token`] refuses.
    pub fn local(token: SecretString) -> Result<Self, String> {
        Self::new(LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect()).with_token(token)
    }

    /// The host of an `AWS_IAM` function URL in `region` (`<url-id>.lambda-url.<region>.on.aws`);
    /// AWS checked the caller's signature before the request arrives.
    pub fn function_url(region: &str) -> Self {
        Self::new(vec![format!("*.lambda-url.{region}.on.aws")])
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    pub fn requires_token(&self) -> bool {
        self.bearer.is_some()
    }

    /// Whether `host` (a `Host` header value, maybe with a port) is accepted.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = if let Some(rest) = host.strip_prefix('[') {
            rest.split(']').next().unwrap_or_default().to_owned()
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name.to_owned(),
                _ => host.clone(),
            }
        };
        self.hosts.iter().any(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            pattern == "*"
                || pattern == host
                || pattern == name
                || pattern.strip_prefix("*.").is_some_and(|suffix| {
                    name.len() > suffix.len() + 1
                        && name.ends_with(suffix)
                        && name[..name.len() - suffix.len()].ends_with('.')
                })
        })
    }

    /// Whether `headers` carry the upstream credential (always, when none is required).
    fn credential_ok(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.bearer else { return true };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .unwrap_or_default();
        constant_time_eq(given.as_bytes(), expected.expose_secret().as_bytes())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refusal(status: StatusCode, message: &str) -> Response {
    let mut response = (status, axum::Json(serde_json::json!({ "error": message }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// The guard in front of the MCP endpoint: 403 for a host it does not serve (DNS rebinding),
/// 401 for a request without the gateway's credential. Neither reaches a tool.
pub async fn guard(State(access): State<Arc<ShopAccess>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !access.host_allowed(host) {
        tracing::warn!(host = %host.chars().take(100).collect::<String>(), "request for a foreign host refused");
        return refusal(StatusCode::FORBIDDEN, "this host is not served here");
    }
    if !access.credential_ok(request.headers()) {
        tracing::warn!("request without the gateway's upstream credential refused");
        return refusal(StatusCode::UNAUTHORIZED, "this server answers the tool gateway only");
    }
    next.run(request).await
}

/// A header's text value, trimmed; `None` when absent, empty or not text.
pub fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_names_ports_and_suffix_patterns_only() {
        let a = ShopAccess::new(vec![
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
            "*.lambda-url.us-east-1.on.aws".into(),
        ]);
        for ok in ["localhost", "localhost:8931", "127.0.0.1:1", "[::1]:8931", "abc123.lambda-url.us-east-1.on.aws"] {
            assert!(a.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "lambda-url.us-east-1.on.aws",
            "x.lambda-url.us-east-1.on.aws.evil.com",
            "xlambda-url.us-east-1.on.aws",
            "abc.lambda-url.eu-west-1.on.aws",
            "",
        ] {
            assert!(!a.host_allowed(bad), "{bad}");
        }
        assert!(ShopAccess::new(vec!["*".into()]).host_allowed("anything.example"));
    }

    #[test]
    fn tokens_are_long_hidden_and_random() {
        assert!(ShopAccess::local("short".into()).is_err());
        assert!(ShopAccess::local("has a blank in it!!".into()).is_err());
        let t = generate_token();
        assert_eq!(t.expose_secret().len(), 64);
        assert_ne!(t.expose_secret(), generate_token().expose_secret());
        let access = ShopAccess::local(t.clone()).unwrap();
        let printed = format!("{t:?} {access:?}");
        assert!(!printed.contains(t.expose_secret()), "{printed}");
        let mut headers = HeaderMap::new();
        assert!(!access.credential_ok(&headers));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", t.expose_secret())).unwrap_or(HeaderValue::from_static("x")),
        );
        assert!(access.credential_ok(&headers));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer 0000000000000000000000000000000000000000000000000000000000000000"),
        );
        assert!(!access.credential_ok(&headers));
    }
}
