//! The live console's page: one HTML file, its stylesheet and its script, embedded in the binary (no build step) and served at `/console` by `swarm-local serve` and, on AWS, by the streaming function URL beside the reads it makes (docs/console.md).

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};
use axum::response::IntoResponse;
use axum::routing::get;

/// The page: the layout the script fills in.
const PAGE: &str = include_str!("../console/index.html");
/// Its stylesheet.
const STYLE: &str = include_str!("../console/console.css");
/// Its script: reads the API with the credentials typed into the page and draws what it reads.
const SCRIPT: &str = include_str!("../console/console.js");

/// The console's paths (axum's syntax), every one `GET` and answered with no credential: the page
/// holds no data, only what reads it. The page's reads carry the caller's own token.
pub const ROUTES: &[&str] = &["/console", "/console/", "/console/console.css", "/console/console.js"];

/// What the page may load and reach: itself only (its reads and the event stream are same-origin
/// wherever it is served), and no inline script or style at all, so text a customer wrote can never
/// run even if a future change inserted it as markup (the script sets customer text with
/// `textContent` only). `frame-ancestors 'none'`: no other site may frame the page to click its
/// approve buttons.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `GET` of each of [`ROUTES`], for any router state. The assets are absolute paths under
/// `/console/`, so the page works at `/console` and `/console/`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(ROUTES[0], get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route(ROUTES[1], get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route(ROUTES[2], get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route(ROUTES[3], get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
}

/// One embedded asset with its type and the console's headers (never cached: a redeployed
/// function's page is the one served).
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
        // Every read is a relative path: same-origin wherever the page is served.
        let urls = SCRIPT.replace("http://www.w3.org/2000/svg", "");
        assert!(!urls.contains("http://") && !urls.contains("https://"), "no absolute URL in the script");
    }
}
