//! Per-tool call metrics: counters kept in memory (tests, the bench), one structured log per call, and the swarm's metrics through the `metrics` facade (`swarm_tool_calls`, `swarm_tool_call_seconds`, `swarm_breaker_transitions`, `swarm_tool_discovery_failures`: CloudWatch EMF on Lambda, Prometheus locally).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use swarm_core::obs;

use crate::protect::BreakerState;

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
    /// `tool` is a name of the gateway's catalogue: only then is it a metric's `tool` dimension
    /// (a caller's arbitrary name would be neither low-cardinality nor ours).
    pub known_tool: bool,
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
    pub breaker_transitions: Vec<(String, BreakerState)>,
}

/// The gateway's metrics sink: counters in memory, and every call through the `metrics` facade
/// (whichever recorder the binary installed).
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<MetricsSnapshot>,
}

impl Metrics {
    pub fn new() -> Self {
        Self { inner: Mutex::new(MetricsSnapshot::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MetricsSnapshot> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one `tools/call`; `latency` is the gateway's whole handling time.
    pub fn record_call(&self, labels: &CallLabels<'_>, outcome: Outcome, latency: Duration) {
        let CallLabels { tool, upstream, role, conversation, subtask, known_tool } = *labels;
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
        obs::metrics::tool_call(if known_tool { tool } else { "unknown" }, outcome.as_str(), latency);
    }

    /// Records a discovery attempt of `upstream` that failed.
    pub fn record_discovery_failure(&self, upstream: &str, error: &str) {
        *self.lock().discovery_failures.entry(upstream.to_owned()).or_default() += 1;
        tracing::warn!(upstream, error, "upstream discovery failed; retrying on the next listing");
        obs::metrics::discovery_failed(upstream);
    }

    /// Records a breaker state change of `upstream`.
    pub fn record_breaker(&self, upstream: &str, state: BreakerState) {
        self.lock().breaker_transitions.push((upstream.to_owned(), state));
        tracing::warn!(upstream, breaker = state.as_str(), "circuit breaker changed state");
        obs::metrics::breaker_transition(upstream, state.as_str());
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> MetricsSnapshot {
        self.lock().clone()
    }
}

/// Shared handle.
pub type SharedMetrics = Arc<Metrics>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_and_errors_are_counted_per_tool() {
        let m = Metrics::new();
        let labels = |tool, role| CallLabels {
            tool,
            upstream: "shop",
            role,
            conversation: "c1",
            subtask: "w01",
            known_tool: true,
        };
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
