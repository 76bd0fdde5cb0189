//! `swarm-local serve`'s `/metrics`: after one conversation through the real binary, the Prometheus exposition holds the catalogue's metrics with their names (counters as `_total`), types, help and labels, and no conversation id or customer text.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

#[path = "common/serve.rs"]
mod serve;

use anyhow::{Context, Result};
use swarm_core::obs::metrics::{CATALOG, Kind, Source};

use serve::{answered, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_metrics_appear_on_serves_metrics_endpoint() -> Result<()> {
    let (_server, base) = serve(&[])?;
    let http = reqwest::Client::new();
    let message = "Hello from Wenceslas Oakhurst-Prime: where is order A1029, and is coupon SAVE20 valid?";
    let (id, view) = answered(&base, message, "C104").await?;
    assert_eq!(view["status"], "DONE", "{view}");
    let subtasks = view["subtasks"].as_array().context("subtasks")?.len();

    let response = http.get(format!("{base}/metrics")).send().await?;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str()?.to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await?;

    // Every series belongs to a metric of the catalogue, under its Prometheus name.
    let exposed = |d: &swarm_core::obs::metrics::MetricDef| match d.kind {
        Kind::Counter => format!("{}_total", d.name),
        _ => d.name.to_owned(),
    };
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let known = CATALOG.iter().any(|d| {
            let base = exposed(d);
            name == base || name == format!("{base}_sum") || name == format!("{base}_count")
        });
        assert!(known, "{name} is not a catalogue metric: {line}");
    }
    // What this conversation must have recorded, each with its type line and help.
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    };
    for d in CATALOG.iter().filter(|d| matches!(d.source, Source::Emitted { by, .. } if by != "tool-gateway" || d.name.starts_with("swarm_tool_call"))) {
        let name = exposed(d);
        let kind = match d.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "summary",
        };
        // Failures, hand-backs, dead letters, expiries, sweeps, lease takeovers, costs, retries, approvals,
        // hand-offs and side effects left unconfirmed do not happen in this conversation (the first sweep is a period after the start;
        // it asks no refund).
        let happens = !matches!(
            d.name,
            "swarm_subtask_failures"
                | "swarm_handbacks"
                | "swarm_dead_letters"
                | "swarm_deadline_expired"
                | "swarm_sweep_runs"
                | "swarm_sweep_conversations"
                | "swarm_lease_takeovers"
                | "swarm_conversation_cost_usd"
                | "swarm_llm_errors"
                | "swarm_llm_retries"
                | "swarm_llm_tokens"
                | "swarm_approvals_requested"
                | "swarm_approvals_pending"
                | "swarm_approval_oldest_pending_seconds"
                | "swarm_approvals_decided"
                | "swarm_approval_wait_seconds"
                | "swarm_handoffs"
                | "swarm_effects_unconfirmed"
                | "swarm_approved_not_run"
                | "swarm_approvals_reissued"
        );
        if happens {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "no TYPE line of {name}:\n{text}");
            assert!(text.contains(&format!("# HELP {name} {}", d.help)), "no HELP line of {name}");
        }
    }
    assert_eq!(value("swarm_conversations_started_total"), 1.0);
    assert_eq!(value("swarm_subtasks_per_conversation_count"), 1.0);
    assert_eq!(value("swarm_subtasks_per_conversation_sum"), subtasks as f64);
    assert_eq!(value(r#"swarm_subtasks_finished_total{status="succeeded"}"#), subtasks as f64);
    assert_eq!(value(r#"swarm_conversation_seconds_count{status="done"}"#), 1.0);
    assert_eq!(value(r#"swarm_planning_seconds_count{outcome="planned"}"#), 1.0);
    assert_eq!(value(r#"swarm_replies_total{by="model"}"#), 1.0);
    assert_eq!(value("swarm_active_workers"), 0.0);
    assert!(value(r#"swarm_llm_calls_total{model="offline"}"#) >= (2 + subtasks) as f64);
    assert!(text.contains(r#"swarm_llm_call_seconds{model="offline",purpose="work",quantile="0.99"}"#), "{text}");
    assert_eq!(value(r#"swarm_tool_calls_total{tool="shop__get_order",outcome="ok"}"#), 1.0);
    assert_eq!(value(r#"swarm_tool_call_seconds_count{tool="shop__get_order"}"#), 1.0);

    // No id, no customer text among the labels.
    for bad in [id.as_str(), "Wenceslas", "A1029", "SAVE20", "C104"] {
        assert!(!text.contains(bad), "{bad:?} on /metrics");
    }
    Ok(())
}
