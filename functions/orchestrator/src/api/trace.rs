//! The HTTP API's request span: `{method} {route}`, kind server, the root of a conversation's trace — or the child of the caller's `traceparent`, or of API Gateway's `X-Amzn-Trace-Id` (so X-Ray shows the functions' spans inside the request's own trace).

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing::field::Empty;

/// Runs the request inside its span, records the answer's status (an error status for 5xx) and
/// logs one line for it (method, route, status, duration).
/// Only the method, the route template and the status are recorded: never a path's ids, a
/// header or the body.
pub async fn request_span(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{method} {}", route.as_deref().unwrap_or("(unmatched)")),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %method,
        http.route = Empty,
        http.response.status_code = Empty,
    );
    if let Some(route) = &route {
        span.record("http.route", route.as_str());
    }
    swarm_adapters::telemetry::propagation::set_parent_from_headers(&span, request.headers());
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    // One line per request, inside its span: a log search finds it by trace or request id.
    span.in_scope(|| {
        tracing::info!(method = %method, route = route.as_deref().unwrap_or("(unmatched)"), status, duration_ms = started.elapsed().as_millis() as u64, "request answered");
    });
    response
}
