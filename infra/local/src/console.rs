//! The live console `swarm-local serve` serves at `/console`: one HTML page, its stylesheet and its script, embedded in the binary (no build step), reading the same API a customer's or an operator's client reads (docs/console.md).

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};
use axum::response::IntoResponse;
use axum::routing::get;
use orchestrator::api::AllowedOrigins;
use orchestrator::{Auth, OperatorAuth};

use crate::LocalStack;

/// The page: the layout the script fills in.
const PAGE: &str = include_str!("../console/index.html");
/// Its stylesheet.
const STYLE: &str = include_str!("../console/console.css");
/// Its script: reads the API with the credentials typed into the page and draws what it reads.
const SCRIPT: &str = include_str!("../console/console.js");

/// What the page may load and reach: itself only, and no inline script or style at all, so text a
/// customer wrote can never run even if a future change inserted it as markup (the script sets
/// customer text with `textContent` only). `frame-ancestors 'none'`: no other site may frame the
/// page to click its approve buttons.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET /console`, `GET /console/console.css` and `GET /console/console.js`, for any router state.
/// The assets are absolute paths under `/console/`, so the page works at `/console` and `/console/`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route("/console/", get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route("/console/console.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/console/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
}

/// What `swarm-local serve` serves but `/metrics` (which it adds from its telemetry): the API of
/// `stack` with `auth` for customers and `operators` for the approvals and operator routes, the
/// console, and browsers' preflights from `origins` answered as API Gateway answers them. Every
/// request is one orchestrator invocation, cut at its timeout, as API Gateway invokes it.
pub fn app(stack: &LocalStack, auth: Auth, operators: OperatorAuth, origins: &AllowedOrigins) -> Router {
    stack.api_router(auth, Some(operators)).merge(router()).layer(origins.layer())
}

/// One embedded asset with its type and the console's headers (never cached: a rebuilt binary's
/// page is the one served).
fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-store"),
            (HeaderName::from_static("content-security-policy"), CONTENT_SECURITY_POLICY),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
            (HeaderName::from_static("referrer-policy"), "no-referrer"),
        ],
        body,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets_and_writes_text_never_markup() {
        assert!(PAGE.contains(r#"src="/console/console.js""#) && PAGE.contains(r#"href="/console/console.css""#));
        assert!(
            !PAGE.contains("<script>") && !PAGE.contains("style="),
            "no inline script or style (the CSP forbids them)"
        );
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
            assert!(!SCRIPT.contains(sink), "the script never uses {sink}");
        }
        assert!(SCRIPT.contains("function follow("), "live updates go through follow()");
    }
}
