//! Where a function's spans go, read once at cold start: nowhere, an OTLP/HTTP collector (`OTEL_EXPORTER_OTLP_ENDPOINT`), or X-Ray's OTLP endpoint signed with the function's credentials (`TRACE_EXPORT=xray`).

use crate::config::{ConfigError, Vars};

/// Every variable [`TelemetryConfig::from_lookup`] reads (the X-Ray export signs with credentials
/// from the default provider chain: on Lambda, the role's `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`).
pub const VARS: &[&str] = &[
    "TRACE_EXPORT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "AWS_REGION",
    "AWS_LAMBDA_FUNCTION_NAME",
];

/// The OTLP/HTTP path of traces under a collector's base URL.
pub const TRACES_PATH: &str = "/v1/traces";
/// The SigV4 service name of X-Ray's OTLP endpoint.
pub const XRAY_SIGNING_SERVICE: &str = "xray";

/// Where finished spans are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceExport {
    /// Not exported (spans may still be kept in memory: tests, `swarm-local ask --trace`).
    Off,
    /// OTLP/HTTP protobuf, unsigned, to `endpoint` (a collector: Jaeger, the OpenTelemetry Collector…).
    Otlp { endpoint: String },
    /// OTLP/HTTP protobuf to X-Ray's endpoint, SigV4-signed (service `xray`) for `region`.
    /// Needs CloudWatch Transaction Search enabled in the account.
    XRay { endpoint: String, region: String },
}

/// A function's telemetry settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// `service.name` of the spans: `OTEL_SERVICE_NAME`, else the Lambda function's name, else the binary's.
    pub service: String,
    pub traces: TraceExport,
    /// Running on Lambda (`AWS_LAMBDA_FUNCTION_NAME` set): metrics go out as CloudWatch EMF.
    pub on_lambda: bool,
}

impl TelemetryConfig {
    /// Reads [`VARS`]. `TRACE_EXPORT` is `off`, `otlp` or `xray`; unset, it is `otlp` when an
    /// OTLP endpoint variable is set and `off` otherwise.
    ///
    /// - `otlp`: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT`
    ///   plus `/v1/traces` (as the OpenTelemetry specification resolves them).
    /// - `xray`: `https://xray.<AWS_REGION>.amazonaws.com/v1/traces` (the traces endpoint
    ///   variable overrides it, e.g. for a test double).
    ///
    /// Errors: an unknown `TRACE_EXPORT`; `otlp` without an endpoint; `xray` without `AWS_REGION`;
    /// an endpoint that is not an http(s) URL.
    pub fn from_lookup(default_service: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        let function = vars.get("AWS_LAMBDA_FUNCTION_NAME");
        let service =
            vars.get("OTEL_SERVICE_NAME").or_else(|| function.clone()).unwrap_or_else(|| default_service.into());
        let example = "http://127.0.0.1:4318";
        let traces_endpoint = vars.url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")?;
        let base_endpoint = vars.url("OTEL_EXPORTER_OTLP_ENDPOINT", example)?;
        let collector = traces_endpoint
            .clone()
            .or_else(|| base_endpoint.map(|base| format!("{}{TRACES_PATH}", base.trim_end_matches('/'))));
        #[derive(Clone, Copy)]
        enum Mode {
            Off,
            Otlp,
            XRay,
        }
        let default = if collector.is_some() { Mode::Otlp } else { Mode::Off };
        let mode =
            vars.one_of("TRACE_EXPORT", &[("off", Mode::Off), ("otlp", Mode::Otlp), ("xray", Mode::XRay)], default)?;
        let traces = match mode {
            Mode::Off => TraceExport::Off,
            Mode::Otlp => TraceExport::Otlp {
                endpoint: collector.ok_or_else(|| ConfigError::Missing {
                    var: "OTEL_EXPORTER_OTLP_ENDPOINT",
                    hint: format!("TRACE_EXPORT=otlp sends spans to a collector, e.g. {example}"),
                })?,
            },
            Mode::XRay => {
                let region =
                    vars.required("AWS_REGION", "TRACE_EXPORT=xray signs for the function's region (Lambda sets it)")?;
                let endpoint =
                    traces_endpoint.unwrap_or_else(|| format!("https://xray.{region}.amazonaws.com{TRACES_PATH}"));
                TraceExport::XRay { endpoint, region }
            }
        };
        Ok(Self { service, traces, on_lambda: function.is_some() })
    }

    /// [`Self::from_lookup`] over the process environment.
    pub fn from_env(default_service: &str) -> Result<Self, ConfigError> {
        Self::from_lookup(default_service, |k| std::env::var(k).ok())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<TelemetryConfig, ConfigError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        TelemetryConfig::from_lookup("worker", move |k| map.get(k).cloned())
    }

    #[test]
    fn nothing_set_exports_nothing_and_names_the_binary() {
        let c = config(&[]).unwrap();
        assert_eq!(c, TelemetryConfig { service: "worker".into(), traces: TraceExport::Off, on_lambda: false });
    }

    #[test]
    fn a_collector_endpoint_turns_otlp_on_with_the_traces_path() {
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
        assert_eq!(c.traces, TraceExport::Otlp { endpoint: "http://127.0.0.1:4318/v1/traces".into() });
        // The signal's own endpoint is used as it is, and wins.
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9999/traces"),
        ])
        .unwrap();
        assert_eq!(c.traces, TraceExport::Otlp { endpoint: "http://b:9999/traces".into() });
    }

    #[test]
    fn xray_signs_for_the_functions_region_at_the_regional_endpoint() {
        let c = config(&[
            ("TRACE_EXPORT", "xray"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_LAMBDA_FUNCTION_NAME", "swarm-dev-Worker-AbC"),
        ])
        .unwrap();
        assert_eq!(
            c,
            TelemetryConfig {
                service: "swarm-dev-Worker-AbC".into(),
                traces: TraceExport::XRay {
                    endpoint: "https://xray.eu-west-1.amazonaws.com/v1/traces".into(),
                    region: "eu-west-1".into()
                },
                on_lambda: true,
            }
        );
        assert_eq!(
            config(&[("TRACE_EXPORT", "XRAY"), ("AWS_REGION", "us-east-1"), ("OTEL_SERVICE_NAME", "w")])
                .unwrap()
                .service,
            "w"
        );
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = config(&[("TRACE_EXPORT", "jaeger")]).unwrap_err().to_string();
        assert_eq!(e, r#"TRACE_EXPORT must be off, otlp or xray, not "jaeger""#);
        let e = config(&[("TRACE_EXPORT", "otlp")]).unwrap_err().to_string();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT is required"), "{e}");
        let e = config(&[("TRACE_EXPORT", "xray")]).unwrap_err().to_string();
        assert!(e.starts_with("AWS_REGION is required"), "{e}");
        let e = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).unwrap_err().to_string();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT must be"), "{e}");
        // Exporting nothing needs nothing.
        assert_eq!(
            config(&[("TRACE_EXPORT", "off"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap().traces,
            TraceExport::Off
        );
    }
}
