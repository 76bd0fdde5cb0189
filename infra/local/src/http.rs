//! The local HTTP API: the orchestrator's axum router mounted directly (as `lambda_http` serves it on Lambda), callers identified by `--auth` (nobody, or a token table), and the `oneshot` client the local stacks' methods use.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use orchestrator::api::{Auth, TokenTable};
use orchestrator::{ApiState, Orchestrator};
use serde_json::Value;
use tower::ServiceExt as _;

/// The API over `orchestrator`, identifying callers by `auth` (the approvals API off).
pub fn router(orchestrator: Arc<Orchestrator>, auth: Auth) -> Router {
    orchestrator::router(ApiState::new(orchestrator, auth))
}

/// The API over `state` (with the approvals API when it holds one).
pub fn api(state: ApiState) -> Router {
    orchestrator::router(state)
}

/// Sends one request through `router` without a server (no socket, no event
/// round trip); answers `(status, JSON body)` (`null` for an empty body).
/// Errors only when the answer is not JSON.
pub async fn call<B>(router: Router, request: axum::http::Request<B>) -> anyhow::Result<(u16, Value)>
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.context("reading the API's answer")?;
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .with_context(|| format!("the API answered {status} with a body that is not JSON"))?
    };
    Ok((status, json))
}

/// A request for `method path` with a JSON `body` (sent as
/// `content-type: application/json`) and extra `headers`.
pub fn request(
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> anyhow::Result<axum::http::Request<Body>> {
    let mut builder =
        axum::http::Request::builder().method(method).uri(path).header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body.unwrap_or_default().to_owned())).with_context(|| format!("building {method} {path}"))
}

/// The token table of `swarm-local serve --auth tokens`: the lines of
/// `file` (`<token>=<customer_id>`, `#` comments) and each `--token <token>=<customer_id>`.
/// Errors name the file's line or the flag, never a token.
pub fn token_table(file: Option<&Path>, tokens: &[String]) -> anyhow::Result<TokenTable> {
    let mut pairs = Vec::new();
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading the token file {}", path.display()))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim().starts_with('#')) {
            let pair =
                TokenTable::entry(line).map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), n + 1))?;
            pairs.push(pair);
        }
    }
    for (n, entry) in tokens.iter().enumerate() {
        pairs.push(TokenTable::entry(entry).map_err(|e| anyhow::anyhow!("--token number {}: {e}", n + 1))?);
    }
    let table = TokenTable::from_pairs(pairs).map_err(|e| anyhow::anyhow!("token table: {e}"))?;
    anyhow::ensure!(!table.is_empty(), "--auth tokens needs --tokens-file <file> or --token <token>=<customer_id>");
    Ok(table)
}
