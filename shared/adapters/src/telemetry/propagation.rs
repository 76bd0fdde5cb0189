//! W3C trace-context propagation between the functions, through OpenTelemetry's own `TraceContextPropagator`: `traceparent` and `tracestate` in and out of HTTP headers (`opentelemetry-http`'s extractor and injector: the API, MCP requests), the `traceparent` alone where one value travels (SQS message attributes, the conversation item), and API Gateway's `X-Amzn-Trace-Id` as a fallback parent (so X-Ray shows the orchestrator's spans in the request's own trace).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use swarm_core::obs::context::{TRACEPARENT, is_traceparent};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The X-Ray trace header API Gateway and Lambda pass on.
pub const XRAY_HEADER: &str = "x-amzn-trace-id";
/// The W3C header that carries vendors' trace state beside `traceparent`.
pub const TRACESTATE: &str = "tracestate";

/// The current span's W3C `traceparent`, `None` when it is not recorded by OpenTelemetry.
/// Installed as [`swarm_core::obs::context`]'s reader by the telemetry set-up.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current())
}

/// `span`'s W3C `traceparent` (`00-<trace id>-<span id>-<flags>`, its own sampled flag), `None`
/// when it is not recorded.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Writes the current span's `traceparent` and `tracestate` (when it has one) into `headers`
/// (an outgoing request's); nothing when no span is recorded. Answers whether it wrote.
pub fn inject_headers(headers: &mut http::HeaderMap) -> bool {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return false;
    }
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    headers.contains_key(TRACEPARENT)
}

/// The remote span context a W3C `traceparent` (and optional `tracestate`) names, with its
/// sampled flag and trace state as sent; `None` for anything else (a value from the wire that is
/// not of the shape is ignored, never trusted further).
pub fn remote_span_context(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    if !is_traceparent(traceparent) {
        return None;
    }
    let mut carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    if let Some(state) = tracestate {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

fn adopt(span: &tracing::Span, sc: SpanContext) -> bool {
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc)).is_ok()
}

/// Makes `span` (not entered yet) a child of the remote span `traceparent` names. Answers
/// whether it did: `false` for a missing or malformed value, or a span OpenTelemetry does not
/// record — the span then stays where it is (a new trace, or its local parent's).
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) -> bool {
    traceparent.and_then(|tp| remote_span_context(tp, None)).is_some_and(|sc| adopt(span, sc))
}

/// Adds a link from `span` to the remote span `traceparent` names (a message's sender seen
/// from a batch, or the invocation's own trace); answers whether the value was usable.
pub fn add_link(span: &tracing::Span, traceparent: Option<&str>) -> bool {
    let Some(sc) = traceparent.and_then(|tp| remote_span_context(tp, None)) else { return false };
    span.add_link(sc);
    true
}

/// Makes `span` a child of the request's trace context: the `traceparent` and `tracestate`
/// headers (extracted by the propagator), else an X-Ray `X-Amzn-Trace-Id` header (API Gateway's,
/// with Lambda's active tracing). Answers whether it did.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) -> bool {
    let w3c = headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .filter(|tp| is_traceparent(tp))
        .map(|_| TraceContextPropagator::new().extract(&HeaderExtractor(headers)))
        .map(|cx| cx.span().span_context().clone())
        .filter(SpanContext::is_valid);
    if let Some(sc) = w3c {
        return adopt(span, sc);
    }
    let xray = headers.get(XRAY_HEADER).and_then(|v| v.to_str().ok()).and_then(xray_to_traceparent);
    set_parent(span, xray.as_deref())
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
        let sc =
            remote_span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).unwrap_or_else(|| {
                panic!("a valid traceparent");
            });
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote() && sc.is_sampled());
        assert!(remote_span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", None).is_none());
        assert!(remote_span_context("'; DROP TABLE", None).is_none());
    }

    #[test]
    fn the_trace_state_and_an_unsampled_flag_are_kept() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let sc = remote_span_context(tp, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).unwrap_or_else(|| {
            panic!("a valid traceparent");
        });
        assert!(!sc.is_sampled(), "the caller decided not to sample");
        assert_eq!(sc.trace_state().header(), "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
    }

    /// A subscriber that records spans into OpenTelemetry (the default sampler: parent-based, always on).
    fn recording() -> (impl tracing::Subscriber + Send + Sync, opentelemetry_sdk::trace::SdkTracerProvider) {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        (tracing_subscriber::Registry::default().with(layer), provider)
    }

    #[test]
    fn a_request_s_trace_context_goes_on_with_its_state_into_the_next_request() {
        let (subscriber, _provider) = recording();
        tracing::subscriber::with_default(subscriber, || {
            let mut incoming = http::HeaderMap::new();
            incoming.insert(
                TRACEPARENT,
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap_or_else(|_| panic!("header")),
            );
            incoming.insert(TRACESTATE, "congo=t61rcWkgMzE".parse().unwrap_or_else(|_| panic!("header")));
            let span = tracing::info_span!("request");
            assert!(set_parent_from_headers(&span, &incoming));
            let _entered = span.enter();
            let mut outgoing = http::HeaderMap::new();
            assert!(inject_headers(&mut outgoing));
            let tp = outgoing[TRACEPARENT].to_str().unwrap_or_default().to_owned();
            assert!(tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && tp.ends_with("-01"), "{tp}");
            assert!(!tp.contains("00f067aa0ba902b7"), "the next hop's parent is this span, not the caller's");
            assert_eq!(outgoing[TRACESTATE], "congo=t61rcWkgMzE");
            assert_eq!(current_traceparent().as_deref(), Some(tp.as_str()));
        });
    }

    #[test]
    fn an_x_ray_header_is_the_fallback_parent() {
        let (subscriber, _provider) = recording();
        tracing::subscriber::with_default(subscriber, || {
            let mut incoming = http::HeaderMap::new();
            incoming.insert(
                XRAY_HEADER,
                "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
                    .parse()
                    .unwrap_or_else(|_| panic!("header")),
            );
            let span = tracing::info_span!("request");
            assert!(set_parent_from_headers(&span, &incoming));
            let tp = traceparent_of(&span).unwrap_or_default();
            assert!(tp.starts_with("00-5759e988bd862e3fe1be46a994272793-"), "{tp}");
            let untraced = tracing::info_span!("untraced");
            assert!(!set_parent_from_headers(&untraced, &http::HeaderMap::new()));
        });
    }
}
