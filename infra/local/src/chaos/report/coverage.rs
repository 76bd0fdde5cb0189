//! Coverage: every fault kind injected at least once. A kind injected zero times breaks no guarantee — the run was too small to say anything about it — so it makes the run inconclusive, not failed, and the verdict sizes the kind's rate for a run of this size.
//!
//! Faults are spaced, not drawn per opportunity: a kind of rate r comes within its first 1/r
//! opportunities ([`crate::platform::chaos`]; the mock LLM's the same way). A kind that met n
//! opportunities is therefore injected at rate 1/n; its suggestion is 2/n, so it meets about
//! twice that, as `infra/test.sh` sizes its small runs.

use super::facts::{FaultLine, RunFacts};
use super::sheet::{Finding, Sheet};

/// The command-line setting that controls a fault kind (by its line's name).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Knob {
    /// A rate flag, e.g. `--tool-error-rate`.
    Rate(&'static str),
    /// A crash point's own rate: `--crash-at <point>=<rate>`.
    CrashAt(String),
    /// The tool server's downtime comes after this many `tools/call`s: `--tool-down-after-calls`.
    DownAfterCalls,
}

/// The knob of the fault line `name` (the platform's kinds and the mock LLM's).
fn knob(name: &str) -> Option<Knob> {
    if let Some(point) = name.strip_prefix("crash:") {
        return Some(Knob::CrashAt(point.to_owned()));
    }
    Some(Knob::Rate(match name {
        "sqs_duplicate_delivery" => "--duplicate-delivery-rate",
        "sqs_delayed_delivery" => "--delayed-delivery-rate",
        "sqs_poison_message" => "--poison-message-rate",
        "stream_record_dropped" => "--stream-drop-rate",
        "stream_record_duplicated" => "--stream-duplicate-rate",
        "api_client_repost" => "--client-repost-rate",
        "tool_error" => "--tool-error-rate",
        "tool_hang" => "--tool-hang-rate",
        "approval_posted_twice" => "--approval-twice-rate",
        "approval_rejected" => "--approval-reject-rate",
        "store_answer_lost" => "--store-answer-lost-rate",
        "store_throttled" => "--store-throttle-rate",
        "sqs_send_partial" => "--sqs-send-partial-rate",
        "llm_429_retry_after" => "--llm-rate-limit-rate",
        "llm_5xx" => "--llm-server-error-rate",
        "llm_hang" => "--llm-hang-rate",
        "llm_malformed_body" => "--llm-malformed-rate",
        "llm_truncated_length" => "--llm-truncation-rate",
        "tool_upstream_down" => return Some(Knob::DownAfterCalls),
        _ => return None,
    }))
}

/// The rate that meets about two injections in `opportunities` (at most 1), rounded up to hundredths.
fn sized_rate(opportunities: u64) -> f64 {
    ((2.0 / opportunities as f64) * 100.0).ceil().min(100.0) / 100.0
}

/// The setting that would have injected `line`'s kind at this size; `Err` with the kind when no
/// rate can (it met no opportunity: the run needs more conversations, subtasks or refunds).
fn suggestion(f: &RunFacts, line: &FaultLine) -> Result<String, String> {
    let knob = knob(&line.name);
    if let Some(Knob::DownAfterCalls) = knob {
        // The downtime is counted only while it lasts: size it from the run's tools/call count.
        let calls = f.faults.iter().find(|l| l.name == "tool_error").map_or(0, |l| l.opportunities);
        return match calls {
            0 => Err(line.name.clone()),
            n => Ok(format!("--tool-down-after-calls {} --tool-down-secs 30", (n / 2).max(1))),
        };
    }
    if line.opportunities == 0 {
        return Err(line.name.clone());
    }
    let rate = sized_rate(line.opportunities);
    match knob {
        Some(Knob::Rate(flag)) => Ok(format!("{flag} {rate}")),
        Some(Knob::CrashAt(point)) => Ok(format!("--crash-at {point}={rate}")),
        Some(Knob::DownAfterCalls) | None => Err(line.name.clone()),
    }
}

/// One row per fault kind; a kind injected zero times is a finding of coverage, with its sizing.
pub(super) fn fault_kinds(f: &RunFacts, t: &mut Sheet) {
    for line in &f.faults {
        let value = format!("{} injected of {} opportunities (rate {})", line.injected, line.opportunities, line.rate);
        t.row(&format!("fault {}", line.name), value);
        if line.injected == 0 {
            t.findings.push(Finding::TooSmall(format!("fault kind {} was injected 0 times", line.name)));
            match suggestion(f, line) {
                Ok(flag) => t.sizing.push(flag),
                Err(kind) => t.out_of_reach.push(kind),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::chaos::FaultKind;

    #[test]
    fn every_fault_kind_has_its_knob_and_a_rate_is_sized_from_its_opportunities() {
        for kind in FaultKind::all() {
            assert!(knob(&kind.name()).is_some(), "{kind} has no command-line knob");
        }
        assert_eq!(knob("crash:worker_after_count"), Some(Knob::CrashAt("worker_after_count".into())));
        assert_eq!((sized_rate(3), sized_rate(8), sized_rate(1), sized_rate(400)), (0.67, 0.25, 1.0, 0.01));
        let line = |name: &str, opportunities| FaultLine { name: name.into(), rate: 0.1, opportunities, injected: 0 };
        let f = RunFacts { faults: vec![line("tool_error", 40)], ..RunFacts::default() };
        assert_eq!(suggestion(&f, &line("tool_hang", 3)).unwrap(), "--tool-hang-rate 0.67");
        assert_eq!(
            suggestion(&f, &line("crash:aggregator_after_flip", 4)).unwrap(),
            "--crash-at aggregator_after_flip=0.5"
        );
        assert_eq!(
            suggestion(&f, &line("tool_upstream_down", 0)).unwrap(),
            "--tool-down-after-calls 20 --tool-down-secs 30"
        );
        assert_eq!(suggestion(&f, &line("llm_hang", 0)), Err("llm_hang".to_owned()));
    }
}
