//! One telemetry set-up for every binary: logs (Lambda's log format and level controls, JSON on Lambda), spans through `tracing` into OpenTelemetry (exported per invocation, or kept in memory), and the `metrics` recorder (CloudWatch EMF on Lambda, Prometheus in `swarm-local serve`).
//!
//! - [`init`] / [`init_with_default`]: logs only (CLIs, tests).
//! - [`function`]: what a Lambda's `main` calls — logs, spans exported as
//!   [`TelemetryConfig`] says (`TRACE_EXPORT`, `OTEL_EXPORTER_OTLP_ENDPOINT`), EMF
//!   metrics on Lambda; [`lambda::run`] (feature `lambda`) flushes them after every
//!   response, from an internal extension, so no caller waits on the export.
//! - [`install`]: the same with explicit [`Options`] (the local stack, tests).
//!
//! The OpenTelemetry layer sees only spans of the swarm's own crates, at INFO and
//! above, and no log events: what a span carries is exactly the fields its code
//! gives it (ids, names of ours, counts, classes — docs/observability.md), never
//! a log line's text.

mod buffer;
pub mod config;
#[cfg(feature = "otlp")]
pub mod export;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod logs;
pub mod propagation;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, Targets, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, Registry};

pub use buffer::{FinishedSpan, MAX_BUFFERED_SPANS, SpanBuffer};
pub use config::{TelemetryConfig, TraceExport};

/// Every variable the telemetry set-up reads (the only environment reads outside the functions' configs).
pub const VARS: &[&str] = &[
    "RUST_LOG",
    "AWS_LAMBDA_LOG_LEVEL",
    "AWS_LAMBDA_LOG_FORMAT",
    "LOG_FORMAT",
    "TRACE_EXPORT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "AWS_REGION",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
];

/// The crates whose spans are recorded (targets are module paths).
const SPAN_TARGETS: &[&str] =
    &["swarm_core", "swarm_adapters", "orchestrator", "worker", "aggregator", "tool_gateway", "swarm_local"];

/// Longest a flush waits for the span export (the sandbox stays thawed, and billed, that long).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Where metrics go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsSink {
    /// Nowhere (the facade's calls cost a few nanoseconds).
    Off,
    /// CloudWatch EMF JSON lines, written by [`Telemetry::flush`] (stdout) or
    /// [`Telemetry::write_metrics`]. Needs the `emf` feature.
    Emf,
    /// A Prometheus exposition, read by [`Telemetry::prometheus`]. Needs the `prometheus` feature.
    Prometheus,
}

/// How [`install`] sets telemetry up.
#[derive(Clone, Debug)]
pub struct Options {
    /// Log filter when neither `RUST_LOG` nor `AWS_LAMBDA_LOG_LEVEL` is set.
    pub default_level: String,
    /// Where spans are exported (and the `service.name` they carry).
    pub config: TelemetryConfig,
    /// Keep finished spans for [`Telemetry::take_spans`] (tests, `swarm-local ask --trace`).
    pub keep_spans: bool,
    pub metrics: MetricsSink,
}

/// Why telemetry could not be set up. `Debug` prints the message (what `main` shows when it
/// returns the error).
#[derive(thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Setup(String),
}

impl std::fmt::Debug for TelemetryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

struct Inner {
    buffer: Option<Arc<SpanBuffer>>,
    /// Kept so the tracer outlives every span.
    _provider: Option<SdkTracerProvider>,
    #[cfg(feature = "otlp")]
    exporter: Option<tokio::sync::Mutex<opentelemetry_otlp::SpanExporter>>,
    keep_spans: bool,
    kept: std::sync::Mutex<Vec<SpanData>>,
    #[cfg(feature = "emf")]
    emf: Option<&'static metrics_cloudwatch_embedded::Collector>,
    #[cfg(feature = "prometheus")]
    prometheus: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

/// The installed telemetry: flush it per invocation, read what it kept. Cheap to clone.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("spans", &self.inner.buffer.is_some())
            .field("keep_spans", &self.inner.keep_spans)
            .finish_non_exhaustive()
    }
}

static INSTALLED: OnceLock<Telemetry> = OnceLock::new();

/// Installs logs only (level from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`, else `info,rmcp=warn`).
/// Calling it twice, or after [`install`], is harmless.
pub fn init() {
    init_with_default("info,rmcp=warn");
}

/// Like [`init`] with another default level (e.g. `warn` for a CLI).
pub fn init_with_default(default_level: &str) {
    let options = Options {
        default_level: default_level.to_owned(),
        config: TelemetryConfig { service: "lambda-swarm".into(), traces: TraceExport::Off, on_lambda: false },
        keep_spans: false,
        metrics: MetricsSink::Off,
    };
    let _ = install(options);
}

/// What a function's `main` calls: logs, spans exported as the environment says
/// ([`TelemetryConfig::from_env`]), CloudWatch EMF metrics on Lambda (with the `emf` feature).
///
/// Errors: a telemetry variable out of its accepted values (the function refuses to start).
pub fn function(service: &str) -> Result<Telemetry, TelemetryError> {
    let config = TelemetryConfig::from_env(service)?;
    let metrics = if config.on_lambda && cfg!(feature = "emf") { MetricsSink::Emf } else { MetricsSink::Off };
    install(Options { default_level: "info,rmcp=warn".into(), config, keep_spans: false, metrics })
}

/// Installs the global subscriber and metrics recorder once; a later call answers the first
/// installation (whatever its options).
///
/// Errors: a span exporter or metrics recorder that cannot be built (a feature not enabled,
/// another global recorder already installed).
pub fn install(options: Options) -> Result<Telemetry, TelemetryError> {
    if let Some(t) = INSTALLED.get() {
        return Ok(t.clone());
    }
    // Two threads installing at once: one builds (the global recorder can be set only once), the
    // other waits and answers the same installation.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = INSTALLED.get() {
        return Ok(t.clone());
    }
    let telemetry = build(&options)?;
    Ok(INSTALLED.get_or_init(|| telemetry).clone())
}

/// The installed telemetry, if any.
pub fn installed() -> Option<Telemetry> {
    INSTALLED.get().cloned()
}

fn log_filter(default_level: &str) -> EnvFilter {
    let rust_log = std::env::var("RUST_LOG").ok();
    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let level = filter_directives(rust_log, lambda_level.as_deref(), default_level);
    EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new(default_level))
}

/// The filter directives: `RUST_LOG` as written, else Lambda's `ApplicationLogLevel` (`TRACE` ..
/// `FATAL`, as `AWS_LAMBDA_LOG_LEVEL`) with rmcp held at `warn` at most, else `default_level`.
/// rmcp logs whole requests (tool arguments, which quote the customer) at `debug`, so a level
/// raised for a function's own logs must not raise rmcp's.
fn filter_directives(rust_log: Option<String>, lambda_level: Option<&str>, default_level: &str) -> String {
    if let Some(directives) = rust_log {
        return directives;
    }
    let Some(level) = lambda_level else { return default_level.to_owned() };
    let level = match level.to_ascii_lowercase().as_str() {
        "fatal" => "error".to_owned(),
        other => other.to_owned(),
    };
    let rmcp = if level == "error" { "error" } else { "warn" };
    format!("{level},rmcp={rmcp}")
}

fn build(options: &Options) -> Result<Telemetry, TelemetryError> {
    #[cfg(feature = "otlp")]
    let exporter = export::exporter(&options.config.traces).map_err(|e| TelemetryError::Setup(e.to_string()))?;
    #[cfg(not(feature = "otlp"))]
    if options.config.traces != TraceExport::Off {
        return Err(TelemetryError::Setup("span export needs swarm-adapters' `otlp` feature".into()));
    }
    #[cfg(feature = "otlp")]
    let exporting = exporter.is_some();
    #[cfg(not(feature = "otlp"))]
    let exporting = false;
    let record_spans = exporting || options.keep_spans;

    let (buffer, provider, otel_layer) = if record_spans {
        let buffer = Arc::new(SpanBuffer::default());
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(options.config.service.clone())
            .with_attribute(opentelemetry::KeyValue::new("service.namespace", "lambda-swarm"))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(SharedBuffer(buffer.clone()))
            .with_resource(resource)
            .build();
        let spans_only = Targets::new()
            .with_targets(SPAN_TARGETS.iter().map(|t| (*t, tracing::Level::INFO)))
            .and(filter_fn(|meta| meta.is_span()));
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("lambda-swarm"))
            .with_location(false)
            .with_target(true)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(spans_only);
        (Some(buffer), Some(provider), Some(layer))
    } else {
        (None, None, None)
    };

    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"))
        || std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let filter = log_filter(&options.default_level);
    // Logs go to stderr so a CLI's stdout stays clean (and EMF lines, on stdout, stay alone).
    let json_format = json.then(|| logs::LambdaJson::new(&options.config.service));
    let subscriber = Registry::default().with(log_layer(json_format.as_ref(), filter)).with(otel_layer);
    if subscriber.try_init().is_ok() {
        if let Some(format) = &json_format {
            tracing::dispatcher::get_default(|dispatch| format.attach(dispatch));
        }
        if record_spans {
            swarm_core::obs::context::install(propagation::current_traceparent);
            swarm_core::obs::context::install_link(|span, tp| propagation::add_link(span, Some(tp)));
        }
    }

    #[cfg(feature = "emf")]
    let emf = match options.metrics {
        MetricsSink::Emf => Some(recorder::emf(&options.config.service)?),
        _ => None,
    };
    #[cfg(feature = "prometheus")]
    let prometheus = match options.metrics {
        MetricsSink::Prometheus => Some(recorder::prometheus()?),
        _ => None,
    };
    match options.metrics {
        MetricsSink::Off => {}
        MetricsSink::Emf if cfg!(feature = "emf") => swarm_core::obs::metrics::describe(),
        MetricsSink::Prometheus if cfg!(feature = "prometheus") => swarm_core::obs::metrics::describe(),
        other => return Err(TelemetryError::Setup(format!("metrics sink {other:?} needs its swarm-adapters feature"))),
    }

    Ok(Telemetry {
        inner: Arc::new(Inner {
            buffer,
            _provider: provider,
            #[cfg(feature = "otlp")]
            exporter: exporter.map(tokio::sync::Mutex::new),
            keep_spans: options.keep_spans,
            kept: std::sync::Mutex::new(Vec::new()),
            #[cfg(feature = "emf")]
            emf,
            #[cfg(feature = "prometheus")]
            prometheus,
        }),
    })
}

/// The log layer, to stderr: JSON lines in `format` (Lambda), else text with colour codes only for
/// a person at a terminal, never into a file or a pipe.
fn log_layer(
    format: Option<&logs::LambdaJson>,
    filter: EnvFilter,
) -> Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync> {
    match format {
        Some(format) => tracing_subscriber::fmt::layer()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(format.clone())
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        None => tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    }
}

/// The buffer as the provider's span processor (the provider owns its processors).
#[derive(Debug)]
struct SharedBuffer(Arc<SpanBuffer>);

impl opentelemetry_sdk::trace::SpanProcessor for SharedBuffer {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx)
    }

    fn on_end(&self, span: SpanData) {
        self.0.on_end(span)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

impl Telemetry {
    /// Exports the spans finished so far and writes the metrics recorded since the last flush
    /// (EMF: one JSON line per dimension set on stdout). On Lambda, [`lambda::run`] calls it after
    /// every response, before the sandbox may freeze (what is not out by then is lost).
    /// The export waits at most [`FLUSH_TIMEOUT`]; a failure is logged, never returned.
    pub async fn flush(&self) {
        let spans = self.inner.buffer.as_ref().map(|b| b.drain()).unwrap_or_default();
        if self.inner.keep_spans {
            self.inner.kept.lock().unwrap_or_else(|e| e.into_inner()).extend(spans.iter().cloned());
        }
        #[cfg(feature = "otlp")]
        if let Some(exporter) = &self.inner.exporter
            && !spans.is_empty()
        {
            use opentelemetry_sdk::trace::SpanExporter as _;
            let count = spans.len();
            let exported = async {
                let exporter = exporter.lock().await;
                exporter.export(spans).await
            };
            match tokio::time::timeout(FLUSH_TIMEOUT, exported).await {
                Ok(Ok(())) => tracing::debug!(spans = count, "spans exported"),
                Ok(Err(e)) => tracing::warn!(spans = count, error = %e, "span export failed; these spans are lost"),
                Err(_) => {
                    tracing::warn!(spans = count, timeout = ?FLUSH_TIMEOUT, "span export timed out; these spans are lost")
                }
            }
        }
        #[cfg(feature = "emf")]
        if let Some(collector) = self.inner.emf
            && let Err(e) = collector.flush(std::io::stdout().lock())
        {
            tracing::warn!(error = %e, "writing EMF metrics failed");
        }
    }

    /// Every span finished so far (taken: a second call answers only newer ones), in end order.
    /// Empty unless the telemetry was installed with `keep_spans`.
    pub fn take_spans(&self) -> Vec<FinishedSpan> {
        if !self.inner.keep_spans {
            return Vec::new();
        }
        let mut kept = std::mem::take(&mut *self.inner.kept.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(buffer) = &self.inner.buffer {
            kept.extend(buffer.drain());
        }
        kept.iter().map(FinishedSpan::from).collect()
    }

    /// Spans dropped because more than [`MAX_BUFFERED_SPANS`] waited for a flush.
    pub fn dropped_spans(&self) -> u64 {
        self.inner.buffer.as_ref().map_or(0, |b| b.dropped())
    }

    /// Writes the metrics recorded since the last flush as EMF lines into `out` (tests read them);
    /// nothing when the sink is not EMF.
    pub fn write_metrics(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        #[cfg(feature = "emf")]
        if let Some(collector) = self.inner.emf {
            return collector.flush(out);
        }
        let _ = out;
        Ok(())
    }

    /// The Prometheus text exposition of every metric; `None` when the sink is not Prometheus.
    pub fn prometheus(&self) -> Option<String> {
        #[cfg(feature = "prometheus")]
        if let Some(handle) = &self.inner.prometheus {
            return Some(handle.render());
        }
        None
    }

    /// Flushes every `period` in the background (a long-running process exporting to a collector).
    pub fn spawn_periodic_flush(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                this.flush().await;
            }
        })
    }
}

mod recorder {
    //! The metrics recorders the facade can be installed with.
    #[allow(unused_imports)]
    use super::TelemetryError;

    /// The EMF collector as the global recorder, namespace `LambdaSwarm`, the function's name as a
    /// property (searchable in the logs; not a dimension, so alarms name no function).
    #[cfg(feature = "emf")]
    pub fn emf(service: &str) -> Result<&'static metrics_cloudwatch_embedded::Collector, TelemetryError> {
        let collector = metrics_cloudwatch_embedded::Builder::new()
            .cloudwatch_namespace(swarm_core::obs::metrics::NAMESPACE)
            .init()
            .map_err(|e| TelemetryError::Setup(format!("EMF metrics: {e}")))?;
        collector.set_property("Function", service.to_owned());
        Ok(collector)
    }

    /// The Prometheus recorder as the global recorder: counters get `_total`, histograms are
    /// summaries with p50, p90, p99.
    #[cfg(feature = "prometheus")]
    pub fn prometheus() -> Result<metrics_exporter_prometheus::PrometheusHandle, TelemetryError> {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_recommended_naming(true)
            .set_quantiles(&[0.5, 0.9, 0.99])
            .and_then(|b| b.install_recorder())
            .map_err(|e| TelemetryError::Setup(format!("Prometheus metrics: {e}")))
    }
}

#[cfg(test)]
mod filter_tests {
    use super::filter_directives;

    #[test]
    fn lambdas_log_level_never_raises_rmcps_past_warn() {
        let lambda = |level| filter_directives(None, Some(level), "info,rmcp=warn");
        assert_eq!(lambda("INFO"), "info,rmcp=warn");
        assert_eq!(lambda("DEBUG"), "debug,rmcp=warn");
        assert_eq!(lambda("TRACE"), "trace,rmcp=warn");
        assert_eq!(lambda("WARN"), "warn,rmcp=warn");
        assert_eq!(lambda("ERROR"), "error,rmcp=error");
        assert_eq!(lambda("FATAL"), "error,rmcp=error");
    }

    #[test]
    fn rust_log_is_taken_as_written_and_the_default_when_nothing_is_set() {
        assert_eq!(filter_directives(Some("debug".into()), Some("INFO"), "info,rmcp=warn"), "debug");
        assert_eq!(filter_directives(None, None, "info,rmcp=warn"), "info,rmcp=warn");
    }
}
