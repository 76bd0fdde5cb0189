//! The JSON log line on Lambda: one object per event with the fields a log search follows a conversation by — the OpenTelemetry trace id, the Lambda request id and X-Ray trace id of the invocation, the conversation and subtask ids of the enclosing spans, `cold_start` and the service — named as AWS Lambda Powertools names them, so existing queries and dashboards work.
//!
//! Only those span fields are copied onto a line: a span's other fields (a
//! customer id, counts) stay in the trace, and no span ever carries customer text.

use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::FormatTime as _;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Span fields copied onto every line inside the span, as `(span field, line field)`. The
/// innermost span that has one wins. `requestId` and `xrayTraceId` are the Lambda runtime's own
/// invocation span's.
const SPAN_FIELDS: &[(&str, &str)] = &[
    ("requestId", "function_request_id"),
    ("xrayTraceId", "xray_trace_id"),
    ("conversation_id", "conversation_id"),
    ("subtask_id", "subtask_id"),
    ("approval_id", "approval_id"),
    ("message_id", "message_id"),
];

/// Formats events as one JSON object per line (see the module's docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct LambdaJson {
    service: Arc<str>,
    /// The subscriber this formatter belongs to, set once it is installed: the trace id is read
    /// from the OpenTelemetry layer through it (weak: the subscriber owns the formatter).
    dispatch: Arc<OnceLock<tracing::dispatcher::WeakDispatch>>,
    /// The first invocation's request id: lines of that invocation (and of the init before it)
    /// are the cold start's.
    first_request: Arc<OnceLock<String>>,
}

impl LambdaJson {
    /// A formatter whose lines name `service` (the function).
    pub fn new(service: &str) -> Self {
        Self { service: service.into(), dispatch: Arc::default(), first_request: Arc::default() }
    }

    /// Tells the formatter which subscriber it is part of (call once, after installing it).
    pub fn attach(&self, dispatch: &tracing::Dispatch) {
        let _ = self.dispatch.set(dispatch.downgrade());
    }

    /// The trace id of `span` as OpenTelemetry records it, when it does.
    fn trace_id(&self, span: &tracing::span::Id) -> Option<String> {
        let dispatch = self.dispatch.get()?.upgrade()?;
        let cx = tracing_opentelemetry::get_otel_context(span, &dispatch)?;
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }
}

impl<S> FormatEvent<S, JsonFields> for LambdaJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        let mut timestamp = String::new();
        if tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut timestamp)).is_ok() {
            line.insert("timestamp".into(), Value::String(timestamp));
        }
        line.insert("level".into(), Value::String(meta.level().as_str().to_owned()));
        let mut fields = FieldsVisitor(Map::new());
        event.record(&mut fields);
        if let Some(message) = fields.0.remove("message") {
            line.insert("message".into(), message);
        }
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        line.insert("service".into(), Value::String(self.service.to_string()));
        // The trace id first, before any span's extensions are borrowed below.
        let leaf = ctx.event_scope().and_then(|mut scope| scope.next().map(|s| s.id()));
        if let Some(trace_id) = leaf.and_then(|id| self.trace_id(&id)) {
            line.insert("trace_id".into(), Value::String(trace_id));
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope {
                let extensions = span.extensions();
                let Some(recorded) = extensions.get::<FormattedFields<JsonFields>>() else { continue };
                let Ok(Value::Object(recorded)) = serde_json::from_str::<Value>(recorded.as_str()) else { continue };
                for (from, to) in SPAN_FIELDS {
                    if let Some(value) = recorded.get(*from)
                        && !line.contains_key(*to)
                    {
                        line.insert((*to).to_owned(), value.clone());
                    }
                }
            }
        }
        let cold = match line.get("function_request_id").and_then(Value::as_str) {
            Some(request) => self.first_request.get_or_init(|| request.to_owned()) == request,
            None => self.first_request.get().is_none(),
        };
        line.insert("cold_start".into(), Value::Bool(cold));
        for (key, value) in fields.0 {
            line.entry(key).or_insert(value);
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields as JSON values (numbers and booleans as such, the rest as text).
struct FieldsVisitor(Map<String, Value>);

impl Visit for FieldsVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::Bool(value));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Lines written by the subscriber under test.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn json(&self) -> Vec<Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        }
    }

    #[test]
    fn every_line_names_its_trace_invocation_conversation_and_cold_start_and_nothing_else_of_a_span() {
        let lines = Lines::default();
        let format = LambdaJson::new("worker-fn");
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::Registry::default()
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(JsonFields::new())
                    .event_format(format.clone())
                    .with_writer(move || writer.clone()),
            )
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let dispatch = tracing::Dispatch::new(subscriber);
        format.attach(&dispatch);
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!("init");
            for request in ["req-1", "req-2"] {
                let invoke =
                    tracing::info_span!("Lambda runtime invoke", requestId = request, xrayTraceId = "Root=1-a");
                let _i = invoke.enter();
                let subtask = tracing::info_span!(
                    "subtask",
                    conversation_id = "0190f5a2",
                    subtask_id = "w01",
                    customer_id = "C104"
                );
                let _s = subtask.enter();
                tracing::warn!(attempt = 2, retry = true, "tool call failed");
            }
        });
        let lines = lines.json();
        assert_eq!(lines.len(), 3);
        assert_eq!((lines[0]["message"].as_str(), lines[0]["cold_start"].as_bool()), (Some("init"), Some(true)));
        assert!(lines[0].get("function_request_id").is_none());
        for (line, (request, cold)) in lines[1..].iter().zip([("req-1", true), ("req-2", false)]) {
            assert_eq!(line["message"], "tool call failed");
            assert_eq!(line["level"], "WARN");
            assert_eq!(line["service"], "worker-fn");
            assert_eq!(line["function_request_id"], request);
            assert_eq!(line["xray_trace_id"], "Root=1-a");
            assert_eq!(line["conversation_id"], "0190f5a2");
            assert_eq!(line["subtask_id"], "w01");
            assert_eq!(line["cold_start"], cold);
            assert_eq!((line["attempt"].as_u64(), line["retry"].as_bool()), (Some(2), Some(true)));
            let trace_id = line["trace_id"].as_str().unwrap();
            assert!(trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit()), "{trace_id}");
            assert!(line.get("customer_id").is_none(), "only the listed span fields reach a line");
        }
        assert_ne!(lines[1]["trace_id"], lines[2]["trace_id"], "each invocation its own trace");
    }
}
