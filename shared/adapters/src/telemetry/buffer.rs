//! The span processor of every binary: finished spans wait in memory until the invocation's flush exports them (a Lambda sandbox freezes after the response, so nothing may wait for a background timer), or until a caller takes them (tests, `swarm-local ask --trace`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::Context;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// Most spans held between two flushes; more are dropped (and counted), so a run without
/// flushes cannot grow without bound. A worker invocation of 10 subtasks makes a few hundred.
pub const MAX_BUFFERED_SPANS: usize = 50_000;

/// Finished spans held for the next flush.
#[derive(Debug, Default)]
pub struct SpanBuffer {
    spans: Mutex<Vec<SpanData>>,
    dropped: AtomicU64,
}

impl SpanBuffer {
    /// Takes every span held so far.
    pub fn drain(&self) -> Vec<SpanData> {
        std::mem::take(&mut *self.spans.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Spans dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl SpanProcessor for SpanBuffer {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.len() < MAX_BUFFERED_SPANS {
            spans.push(span);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    // Spans are exported by `Telemetry::flush`, on the caller's runtime and within its deadline.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A finished span as people and tests read it: ids as hex, attributes as text.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// `None` for a root span.
    pub parent_id: Option<String>,
    pub name: String,
    /// `server`, `client`, `producer`, `consumer` or `internal`.
    pub kind: &'static str,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: BTreeMap<String, String>,
    /// The span's status is an error.
    pub error: bool,
    /// Trace ids of the spans it links to.
    pub links: Vec<String>,
}

impl FinishedSpan {
    pub fn duration(&self) -> Duration {
        self.end.duration_since(self.start).unwrap_or_default()
    }

    /// The attribute `key`, if recorded.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

impl From<&SpanData> for FinishedSpan {
    fn from(s: &SpanData) -> Self {
        let parent = s.parent_span_id;
        Self {
            trace_id: s.span_context.trace_id().to_string(),
            span_id: s.span_context.span_id().to_string(),
            parent_id: (parent != opentelemetry::trace::SpanId::INVALID).then(|| parent.to_string()),
            name: s.name.to_string(),
            kind: match s.span_kind {
                SpanKind::Server => "server",
                SpanKind::Client => "client",
                SpanKind::Producer => "producer",
                SpanKind::Consumer => "consumer",
                SpanKind::Internal => "internal",
            },
            start: s.start_time,
            end: s.end_time,
            attributes: s.attributes.iter().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect(),
            error: matches!(s.status, Status::Error { .. }),
            links: s.links.iter().map(|l| l.span_context.trace_id().to_string()).collect(),
        }
    }
}
