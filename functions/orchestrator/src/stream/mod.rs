//! The streaming entry point: the orchestrator's long-running routes ([`LONG_RUNNING_ROUTES`]) on a Lambda function URL in `RESPONSE_STREAM` mode, past the HTTP API's 30 s cut, and beside them the live console with the reads it makes ([`CONSOLE_READS`]); customers' JWTs verified in the function ([`jwt`]), since a function URL authorises only `NONE` or `AWS_IAM`.
//!
//! The `orchestrator-stream` binary serves [`router`] with `lambda_http::run_with_streaming_response`;
//! `swarm-local serve` serves the same routes on its one port, each long-running request cut at
//! [`crate::openai::max_duration`] instead of the orchestrator's timeout ([`is_long_running`]).

pub mod jwt;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use swarm_adapters::config::{AuthConfig, AuthMode, ConfigError, Vars};
use swarm_core::access::AccessStore;

use crate::api::{self, ApiState, Auth, JwtIdentity};
use jwt::{HttpJwks, JwtRules, JwtVerifier};

/// The routes that outlast API Gateway's 30 s (axum's path syntax: `{name}` is one segment). On AWS
/// they are served by the streaming function URL (every other path answers 404 there); locally they
/// are cut at their own maximum. A new long-running route joins by adding its line here.
pub const LONG_RUNNING_ROUTES: &[&str] = &[
    // OpenAI's clients take one base URL: the model list is served beside the completions.
    "/v1/models",
    "/v1/chat/completions",
    // The conversation's progress as server-sent events (`api::events`).
    "/conversations/{id}/events",
];

/// The `GET` routes the console reads besides the event stream, served on the streaming URL too so that
/// the page served there ([`crate::console::ROUTES`]) reads from its own origin: the caller's
/// conversations and one conversation, authorised as every route of the URL (the customer's JWT,
/// verified in the function). Reads only: a conversation is started through the HTTP API, and the
/// operators' routes (`AWS_IAM`) are never served here, so on AWS the console is read-only.
pub const CONSOLE_READS: &[&str] = &["/conversations", "/conversations/{id}"];

/// Whether the streaming URL serves `method` `path`: any method of a long-running route (each
/// route answers 405 for the methods it does not take), `GET` of the console and of its reads.
pub fn is_served_on_url(method: &Method, path: &str) -> bool {
    is_long_running(path)
        || (method == Method::GET
            && crate::console::ROUTES.iter().chain(CONSOLE_READS).any(|route| matches_route(route, path)))
}

/// Whether `path` is one of [`LONG_RUNNING_ROUTES`] (a `{name}` segment matches any one non-empty segment).
pub fn is_long_running(path: &str) -> bool {
    LONG_RUNNING_ROUTES.iter().any(|route| matches_route(route, path))
}

/// Whether `path` fits the axum-style `route`: the same segments, `{name}` standing for any non-empty one.
fn matches_route(route: &str, path: &str) -> bool {
    let (mut want, mut got) = (route.split('/'), path.split('/'));
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with('{') && w.ends_with('}') && !g.is_empty() => {}
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

/// The API of `state` and the console with only what [`is_served_on_url`] names served: any other
/// path answers 404 in the API's error shape (the HTTP API serves those, behind API Gateway's
/// authorizers; the operators' IAM-only routes are never reachable through a public URL).
pub fn router(state: ApiState) -> Router {
    api::router(state).merge(crate::console::router()).layer(axum::middleware::from_fn(only_served_on_url))
}

/// Passes a route of the URL on; answers 404 for any other.
async fn only_served_on_url(request: Request, next: Next) -> Response {
    if is_served_on_url(request.method(), request.uri().path()) {
        next.run(request).await
    } else {
        api::error::not_found(request.method().clone(), request.uri().clone()).await.into_response()
    }
}

/// What the streaming function reads beside the orchestrator's config: the JWT authorizer's
/// rules, which API Gateway holds for the HTTP API (`JWT_ISSUER`, `JWT_AUDIENCE`, both needed with
/// `AUTH_MODE=jwt`) and where the issuer's keys are (`JWT_JWKS_URL`, default
/// `<issuer>/.well-known/jwks.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamConfig {
    pub rules: Option<JwtRules>,
    pub jwks_url: Option<String>,
}

impl StreamConfig {
    pub const VARS: &'static [&'static str] = &["JWT_ISSUER", "JWT_AUDIENCE", "JWT_JWKS_URL"];

    /// Errors: with `AUTH_MODE=jwt`, no issuer or no audience; an issuer or JWKS URL that is not https
    /// (but for `http://127.0.0.1` / `http://localhost`, a local issuer).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>, auth: &AuthConfig) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        if auth.mode != AuthMode::Jwt {
            return Ok(Self::default());
        }
        let hint = "the token issuer's URL, e.g. https://cognito-idp.us-east-1.amazonaws.com/us-east-1_AbCdEf";
        let issuer = https_url(&vars, "JWT_ISSUER", hint)?
            .ok_or_else(|| ConfigError::Missing { var: "JWT_ISSUER", hint: hint.into() })?;
        let audience = vars.required("JWT_AUDIENCE", "the token's audience, e.g. the Cognito app client id")?;
        let jwks_url = https_url(&vars, "JWT_JWKS_URL", "the issuer's JWKS URL")?;
        Ok(Self { rules: Some(JwtRules { issuer, audience }), jwks_url })
    }

    /// [`StreamConfig::from_lookup`] over the process environment.
    pub fn from_env(auth: &AuthConfig) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok(), auth)
    }
}

/// `var` when set: an https URL (or http on this machine, for a local issuer).
fn https_url(vars: &Vars<'_>, var: &'static str, hint: &str) -> Result<Option<String>, ConfigError> {
    let Some(url) = vars.get(var).filter(|v| !v.is_empty()) else { return Ok(None) };
    let local = url.starts_with("http://127.0.0.1") || url.starts_with("http://localhost");
    if url.starts_with("https://") || local {
        Ok(Some(url))
    } else {
        Err(ConfigError::Invalid { var, accepted: format!("an https URL ({hint})"), value: url })
    }
}

/// Why the streaming function's authentication could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StreamAuthError {
    #[error(transparent)]
    Crypto(#[from] jwt::NoCryptoProvider),
    #[error("the JWKS client cannot be built: {0}")]
    Client(#[from] reqwest::Error),
    #[error("AUTH_MODE=jwt needs JWT_ISSUER and JWT_AUDIENCE")]
    NoRules,
}

/// How the streaming function identifies callers: `jwt` verifies the bearer token itself
/// ([`Auth::VerifiedJwt`], the claim mapped as the HTTP API's); `iam` reads the function URL's IAM
/// context (the URL is `AWS_IAM`); `none` takes the body's customer (dev only).
pub fn auth(
    auth: &AuthConfig,
    stream: &StreamConfig,
    directory: Arc<dyn AccessStore>,
) -> Result<Auth, StreamAuthError> {
    if auth.mode != AuthMode::Jwt {
        return Ok(Auth::from_config(auth, directory));
    }
    let rules = stream.rules.clone().ok_or(StreamAuthError::NoRules)?;
    let url = stream.jwks_url.clone().unwrap_or_else(|| HttpJwks::default_url(&rules.issuer));
    let verifier = JwtVerifier::new(rules, Arc::new(HttpJwks::new(url)?))?;
    let identity = JwtIdentity { claim: auth.claim.clone(), mapping: auth.mapping, directory };
    Ok(Auth::VerifiedJwt(Arc::new(verifier), identity))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod lambda_tests;
