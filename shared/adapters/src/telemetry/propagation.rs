//! W3C trace-context propagation between the functions: the current span's `traceparent` (for SQS message attributes, MCP request headers, the conversation item) and a span's remote parent from one (or from API Gateway's `X-Amzn-Trace-Id`, so X-Ray shows the orchestrator's spans in the request's own trace).

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use swarm_core::obs::context::{TRACEPARENT, is_traceparent};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The X-Ray trace header API Gateway and Lambda pass on.
pub const XRAY_HEADER: &str = "x-amzn-trace-id";

/// The current span's W3C `traceparent`, `None` when it is not recorded by OpenTelemetry.
/// Installed as [`swarm_core::obs::context`]'s reader by the telemetry set-up.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current())
}

/// `span`'s W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), `None` when it is not recorded.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// The remote span context a W3C `traceparent` names; `None` for anything else (a value from
/// the wire that is not of the shape is ignored, never trusted further).
pub fn remote_span_context(traceparent: &str) -> Option<SpanContext> {
    if !is_traceparent(traceparent) {
        return None;
    }
    let mut parts = traceparent.split('-').skip(1);
    let trace_id = TraceId::from_hex(parts.next()?).ok()?;
    let span_id = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    let sc = SpanContext::new(trace_id, span_id, TraceFlags::new(flags), true, TraceState::default());
    sc.is_valid().then_some(sc)
}

/// Makes `span` (not entered yet) a child of the remote span `traceparent` names. Answers
/// whether it did: `false` for a missing or malformed value, or a span OpenTelemetry does not
/// record — the span then stays where it is (a new trace, or its local parent's).
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) -> bool {
    let Some(sc) = traceparent.and_then(remote_span_context) else { return false };
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc)).is_ok()
}

/// Adds a link from `span` to the remote span `traceparent` names (a message's sender seen
/// from a batch, or the invocation's own trace); answers whether the value was usable.
pub fn add_link(span: &tracing::Span, traceparent: Option<&str>) -> bool {
    let Some(sc) = traceparent.and_then(remote_span_context) else { return false };
    span.add_link(sc);
    true
}

/// Makes `span` a child of the request's trace context: a `traceparent` header, else an X-Ray
/// `X-Amzn-Trace-Id` header (API Gateway's, with Lambda's active tracing). Answers whether it did.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    set_parent(span, header(TRACEPARENT))
        || set_parent(span, header(XRAY_HEADER).and_then(xray_to_traceparent).as_deref())
}

/// An X-Ray trace header (`Root=1-<8 hex epoch>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>`) as a W3C
/// `traceparent`: the trace id is the root's two hex parts joined, the parent the span id. It is
/// always marked sampled: the swarm records every conversation (X-Ray's own sampling decides only
/// which Lambda segments it keeps). `None` without a root and a parent.
pub fn xray_to_traceparent(header: &str) -> Option<String> {
    let field = |key: &str| header.split(';').map(str::trim).find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='));
    let root = field("Root")?;
    let mut parts = root.split('-');
    let (version, epoch, random) = (parts.next()?, parts.next()?, parts.next()?);
    if version != "1" || epoch.len() != 8 || random.len() != 24 || parts.next().is_some() {
        return None;
    }
    let value = format!(
        "00-{}{}-{}-01",
        epoch.to_ascii_lowercase(),
        random.to_ascii_lowercase(),
        field("Parent")?.to_ascii_lowercase()
    );
    is_traceparent(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xray_header_becomes_the_same_trace_as_w3c() {
        assert_eq!(
            xray_to_traceparent("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
                .as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        // Order and unsampled do not matter; Lineage and other keys are ignored.
        assert_eq!(
            xray_to_traceparent(
                "Sampled=0;Parent=53995C3F42CD8AD8; Root=1-5759e988-bd862e3fe1be46a994272793;Lineage=a:1"
            )
            .as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        for bad in [
            "Root=1-5759e988-bd862e3fe1be46a994272793",
            "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd86;Parent=53995c3f42cd8ad8",
            "Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(xray_to_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_traceparent_names_a_remote_sampled_parent_and_junk_names_none() {
        let sc = remote_span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap_or_else(|| {
            panic!("a valid traceparent");
        });
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote() && sc.is_sampled());
        assert!(remote_span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7").is_none());
        assert!(remote_span_context("'; DROP TABLE").is_none());
    }
}
