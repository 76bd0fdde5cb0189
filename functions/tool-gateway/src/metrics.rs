//! Per-tool call metrics: counters kept in memory, one structured log per call, and CloudWatch EMF lines on Lambda.

use std::{
    collections::HashMap,
    io::Write as _,
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::protect::BreakerState;

/// CloudWatch namespace of the embedded-metric-format lines.
pub const EMF_NAMESPACE: &str = "LambdaSwarm/ToolGateway";

/// How one `tools/call` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The upstream answered without error.
    Ok,
    /// The upstream answered with `is_error: true` (the tool ran and failed).
    ToolError,
    /// Refused by permissions or a missing header, before any dispatch.
    Refused,
    /// Over a rate limit: fallback result.
    RateLimited,
    /// Breaker open: fallback result.
    BreakerOpen,
    /// No answer within the call timeout: cancelled upstream, fallback result.
    Timeout,
    /// Transport or protocol failure upstream: fallback result.
    UpstreamError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::Refused => "refused",
            Self::RateLimited => "rate_limited",
            Self::BreakerOpen => "breaker_open",
            Self::Timeout => "timeout",
            Self::UpstreamError => "upstream_error",
        }
    }
}

/// Who and what one `tools/call` was about, for logs and metrics.
#[derive(Clone, Copy, Debug)]
pub struct CallLabels<'a> {
    pub tool: &'a str,
    /// `-` when the call was refused before the tool was looked up.
    pub upstream: &'a str,
    pub role: &'a str,
    /// From `x-swarm-conversation-id` / `x-swarm-subtask-id`; `-` when absent.
    pub conversation: &'a str,
    pub subtask: &'a str,
}

/// Counters of one tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolStats {
    pub calls: u64,
    pub ok: u64,
    /// Tool errors, timeouts and upstream failures.
    pub errors: u64,
    pub refusals: u64,
    pub rate_limited: u64,
    pub breaker_open: u64,
    pub timeouts: u64,
    /// Sum of latencies of calls that went upstream, microseconds.
    pub upstream_latency_us: u64,
}

/// Gateway-wide counters, readable by tests and the bench.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub tools: HashMap<String, ToolStats>,
    pub refusals: u64,
    pub discovery_failures: HashMap<String, u64>,
    pub breaker_transitions: Vec<(String, &'static str)>,
}

/// The gateway's metrics sink. `emf`: also print CloudWatch EMF JSON lines to stdout.
#[derive(Debug, Default)]
pub struct Metrics {
    emf: bool,
    inner: Mutex<MetricsSnapshot>,
}

impl Metrics {
    pub fn new(emf: bool) -> Self {
        Self { emf, inner: Mutex::new(MetricsSnapshot::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MetricsSnapshot> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one `tools/call`; `latency` is the gateway's whole handling time.
    pub fn record_call(&self, labels: &CallLabels<'_>, outcome: Outcome, latency: Duration) {
        let CallLabels { tool, upstream, role, conversation, subtask } = *labels;
        {
            let mut inner = self.lock();
            let stats = match inner.tools.get_mut(tool) {
                Some(s) => s,
                None => inner.tools.entry(tool.to_owned()).or_default(),
            };
            stats.calls += 1;
            match outcome {
                Outcome::Ok => stats.ok += 1,
                Outcome::ToolError | Outcome::UpstreamError => stats.errors += 1,
                Outcome::Timeout => {
                    stats.errors += 1;
                    stats.timeouts += 1;
                }
                Outcome::Refused => stats.refusals += 1,
                Outcome::RateLimited => stats.rate_limited += 1,
                Outcome::BreakerOpen => stats.breaker_open += 1,
            }
            if matches!(outcome, Outcome::Ok | Outcome::ToolError | Outcome::Timeout | Outcome::UpstreamError) {
                stats.upstream_latency_us += latency.as_micros() as u64;
            }
            if outcome == Outcome::Refused {
                inner.refusals += 1;
            }
        }
        let latency_ms = latency.as_secs_f64() * 1000.0;
        match outcome {
            Outcome::Ok | Outcome::ToolError => {
                tracing::info!(
                    tool,
                    upstream,
                    role,
                    conversation,
                    subtask,
                    outcome = outcome.as_str(),
                    latency_ms,
                    "tool call"
                )
            }
            _ => tracing::warn!(
                tool,
                upstream,
                role,
                conversation,
                subtask,
                outcome = outcome.as_str(),
                latency_ms,
                "tool call not served"
            ),
        }
        if self.emf {
            let failed = matches!(outcome, Outcome::ToolError | Outcome::Timeout | Outcome::UpstreamError);
            let line = serde_json::json!({
                "_aws": {
                    "Timestamp": chrono::Utc::now().timestamp_millis(),
                    "CloudWatchMetrics": [{
                        "Namespace": EMF_NAMESPACE,
                        "Dimensions": [["Tool"]],
                        "Metrics": [
                            {"Name": "Latency", "Unit": "Milliseconds"},
                            {"Name": "Errors", "Unit": "Count"},
                            {"Name": "Refusals", "Unit": "Count"},
                            {"Name": "RateLimited", "Unit": "Count"},
                            {"Name": "BreakerRejected", "Unit": "Count"}
                        ]
                    }]
                },
                "Tool": tool,
                "Upstream": upstream,
                "Role": role,
                "Outcome": outcome.as_str(),
                "Latency": latency_ms,
                "Errors": u8::from(failed),
                "Refusals": u8::from(outcome == Outcome::Refused),
                "RateLimited": u8::from(outcome == Outcome::RateLimited),
                "BreakerRejected": u8::from(outcome == Outcome::BreakerOpen),
            });
            emit(&line);
        }
    }

    /// Records a discovery attempt of `upstream` that failed.
    pub fn record_discovery_failure(&self, upstream: &str, error: &str) {
        *self.lock().discovery_failures.entry(upstream.to_owned()).or_default() += 1;
        tracing::warn!(upstream, error, "upstream discovery failed; retrying on the next listing");
        if self.emf {
            emit(&serde_json::json!({
                "_aws": {
                    "Timestamp": chrono::Utc::now().timestamp_millis(),
                    "CloudWatchMetrics": [{
                        "Namespace": EMF_NAMESPACE,
                        "Dimensions": [["Upstream"]],
                        "Metrics": [{"Name": "DiscoveryFailures", "Unit": "Count"}]
                    }]
                },
                "Upstream": upstream,
                "DiscoveryFailures": 1,
            }));
        }
    }

    /// Records a breaker state change of `upstream`.
    pub fn record_breaker(&self, upstream: &str, state: BreakerState) {
        self.lock().breaker_transitions.push((upstream.to_owned(), state.as_str()));
        tracing::warn!(upstream, breaker = state.as_str(), "circuit breaker changed state");
        if self.emf {
            emit(&serde_json::json!({
                "_aws": {
                    "Timestamp": chrono::Utc::now().timestamp_millis(),
                    "CloudWatchMetrics": [{
                        "Namespace": EMF_NAMESPACE,
                        "Dimensions": [["Upstream"]],
                        "Metrics": [{"Name": "BreakerOpen", "Unit": "None"}]
                    }]
                },
                "Upstream": upstream,
                "BreakerState": state.as_str(),
                "BreakerOpen": u8::from(state != BreakerState::Closed),
            }));
        }
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.lock().clone()
    }
}

/// Writes one EMF line to stdout (Lambda ships stdout to CloudWatch Logs).
fn emit(line: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, line);
    let _ = out.write_all(b"\n");
}

/// Shared handle.
pub type SharedMetrics = Arc<Metrics>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_errors_are_counted_per_tool() {
        let m = Metrics::new(false);
        let labels = |tool, role| CallLabels { tool, upstream: "shop", role, conversation: "c1", subtask: "w01" };
        m.record_call(&labels("shop__refund", "support"), Outcome::Refused, Duration::from_micros(10));
        m.record_call(&labels("shop__refund", "refund"), Outcome::Ok, Duration::from_micros(900));
        m.record_call(&labels("shop__get_order", "support"), Outcome::Timeout, Duration::from_millis(2));
        let s = m.snapshot();
        assert_eq!(s.refusals, 1);
        let refund = &s.tools["shop__refund"];
        assert_eq!((refund.calls, refund.ok, refund.refusals, refund.upstream_latency_us), (2, 1, 1, 900));
        let order = &s.tools["shop__get_order"];
        assert_eq!((order.errors, order.timeouts), (1, 1));
    }
}
