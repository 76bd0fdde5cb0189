//! The chaos run's verdict: every conversation checked against the store, the audit of the table's stream and the shop's ledger, in one table — one check per rule — with the findings that decide the run: a broken guarantee fails it; a fault kind injected zero times, when nothing broke, makes it inconclusive (too small), with rates sized for its size.
//!
//! A run fails on: a lost conversation (answered 202, absent at the end), a 202 whose
//! conversation ended with no subtask ever begun, a request answered by two conversations, a
//! conversation not terminal at the end (hung; `DONE`, `FAILED` and `HANDOFF` are terminal,
//! whatever its subtasks await), a terminal conversation with a subtask still open (`PENDING`,
//! `QUEUED`, `RUNNING`: work shown as to come that never runs), a count applied twice or lost, a conversation aggregated twice, a
//! subtask or an approval refunded twice, a scripted support ticket opened twice (or a ticket no
//! scripted subtask asked for), a refund no scripted subtask asked for, a refund the
//! operator never approved or rejected, an order refunded beyond what the operator approved, a
//! refund made while its subtask reports failure, a side effect left "being confirmed" for good,
//! and poisoned messages the DLQ consumer never ran for. It is inconclusive when none of these
//! happened but a fault kind was
//! injected zero times. What was approved is the operator's own log ([`OperatorLog`]), never the
//! approvals' records; which approval a refund ran for is read from the key the shop received
//! (`swarm:<conversation>:<subtask>:<ordinal>`, [`swarm_core::effects::effect_key`]).

use std::fmt::Write as _;
use std::time::Duration;

mod consent;
mod conversations;
mod coverage;
mod facts;
mod money;
mod recoverable;
mod sheet;
mod subtasks;

pub use facts::{
    ClientOutcome, DeadLetterFacts, FaultLine, LedgerRefund, LedgerTicket, RestartFacts, RunFacts, approval_of_key,
};
use sheet::{Finding, Sheet, percentile, secs};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every guarantee held and every fault kind was injected.
    Passed,
    /// Every guarantee held, but the run was too small to inject every fault kind.
    Inconclusive,
    /// A guarantee broke.
    Failed,
}

impl Outcome {
    /// The process's exit status: 0 passed, 1 failed, 2 inconclusive (too small).
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Passed => 0,
            Self::Failed => 1,
            Self::Inconclusive => 2,
        }
    }
}

/// The verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub table: String,
    /// Every finding, broken guarantees and short coverage alike; empty when the run passed.
    pub failures: Vec<String>,
    pub outcome: Outcome,
}

/// One rule: the rows it writes and what it finds.
type Check = fn(&RunFacts, &mut Sheet);

/// Every rule, in the table's order.
const CHECKS: &[Check] = &[
    coverage::fault_kinds,
    restart,
    platform_counters,
    recoverable::store_faults_by_op,
    dead_letters,
    conversations::requests,
    conversations::terminal,
    conversations::lost,
    conversations::doubled,
    conversations::accepted_failed,
    recoverable::accepted_never_begun,
    subtasks::by_status,
    subtasks::open_in_terminal,
    subtasks::failed_by_kind,
    subtasks::succeeded_share,
    subtasks::short_by_step,
    recoverable::failed_though_recoverable,
    subtasks::refund_subtasks,
    subtasks::counts,
    subtasks::consistency,
    subtasks::aggregations,
    money::refunds_per_subtask,
    money::tickets_per_subtask,
    money::refunded_per_order,
    consent::asked_and_decided,
    consent::approvals_at_end,
    consent::unconfirmed,
    consent::refunds_per_approval,
    money::refunds_told_failed,
    capacity,
    completion,
    conversations::replies,
];

/// Judges the run and lays out its table.
pub fn verdict(f: &RunFacts) -> Verdict {
    let mut sheet = Sheet { table: header(f), findings: Vec::new(), sizing: Vec::new(), out_of_reach: Vec::new() };
    for check in CHECKS {
        check(f, &mut sheet);
    }
    let Sheet { mut table, findings, sizing, out_of_reach } = sheet;
    let broken = findings.iter().any(|x| matches!(x, Finding::Broken(_)));
    let failures: Vec<String> = findings
        .into_iter()
        .map(|x| match x {
            Finding::Broken(text) | Finding::TooSmall(text) => text,
        })
        .collect();
    let outcome = match (broken, failures.is_empty()) {
        (true, _) => Outcome::Failed,
        (false, false) => Outcome::Inconclusive,
        (false, true) => Outcome::Passed,
    };
    let _ = writeln!(table);
    match outcome {
        Outcome::Passed => {
            let _ = writeln!(
                table,
                "PASSED: no conversation lost or hung, nothing counted, aggregated or refunded twice, no refund without an approval, every fault kind injected."
            );
        }
        Outcome::Failed => {
            let _ = writeln!(table, "FAILED:");
            for fl in &failures {
                let _ = writeln!(table, "  - {fl}");
            }
        }
        Outcome::Inconclusive => {
            let _ = writeln!(
                table,
                "inconclusive: too small — every guarantee held, but the run was too small to inject every fault kind (exit 2):"
            );
            for fl in &failures {
                let _ = writeln!(table, "  - {fl}");
            }
            if !sizing.is_empty() {
                let _ = writeln!(table, "rates sized for this run (each kind about twice): {}", sizing.join(" "));
            }
            if !out_of_reach.is_empty() {
                let _ = writeln!(
                    table,
                    "no opportunity at this size (more conversations, subtasks or --refund-share): {}",
                    out_of_reach.join(", ")
                );
            }
        }
    }
    Verdict { table, failures, outcome }
}

fn header(f: &RunFacts) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "swarm-chaos: {} conversations × {} subtasks, {}, time scale {} (deadline {}), wall {}",
        f.conversations_asked,
        f.subtasks_each,
        f.backend,
        f.time_scale,
        secs(f.deadline),
        secs(f.wall)
    );
    for n in &f.notes {
        let _ = writeln!(t, "{n}");
    }
    let _ = writeln!(t, "| {:<58} | {:<62} |", "what", "measured");
    let _ = writeln!(t, "|{}|{}|", "-".repeat(60), "-".repeat(64));
    t
}

/// The platform's counters, as they are.
fn platform_counters(f: &RunFacts, t: &mut Sheet) {
    for (name, value) in &f.platform {
        t.row(&format!("platform: {name}"), value);
    }
}

/// The restart asked for happened with conversations in flight (else the run says nothing about
/// a restart: too small); every conversation accepted before and after it is judged by the rules below.
fn restart(f: &RunFacts, t: &mut Sheet) {
    match &f.restart {
        None => {}
        Some(None) => {
            t.row("restart (kill -9, then the same stack)", "never: too few conversations accepted");
            t.findings
                .push(Finding::TooSmall("the restart asked for never came: too few conversations accepted".into()));
        }
        Some(Some(r)) => {
            t.row(
                "restart (kill -9, then the same stack)",
                format!(
                    "at {} after {} accepted, {} of them open; up again in {}",
                    secs(r.killed_at),
                    r.accepted_at_kill,
                    r.open_at_kill,
                    secs(r.restarted_in)
                ),
            );
            t.row("conversations accepted after the restart", r.accepted_after);
            if r.open_at_kill == 0 {
                t.findings.push(Finding::TooSmall("no accepted conversation was open at the restart".into()));
            }
        }
    }
}

/// The dead-letter path ran where messages were dead-lettered: every poisoned message reached a
/// DLQ, the DLQ consumer was invoked for them and acknowledged each one.
fn dead_letters(f: &RunFacts, t: &mut Sheet) {
    let d = f.dead_letters;
    t.row("messages poisoned (failed on every receive)", d.poisoned);
    t.row(
        "messages dead-lettered / acknowledged by the DLQ consumer",
        format!("{} / {} ({} DLQ consumer invocations)", d.dead_lettered, d.acknowledged, d.invocations),
    );
    // (With some dead-lettered, the next finding says it.)
    if d.poisoned > 0 && d.dead_lettered == 0 && d.invocations == 0 {
        t.broken(format!("{} messages poisoned, but the DLQ consumer was never invoked", d.poisoned));
    }
    if d.dead_lettered > 0 && d.invocations == 0 {
        t.broken(format!("{} messages dead-lettered, but the DLQ consumer was never invoked", d.dead_lettered));
    }
    if d.acknowledged < d.dead_lettered {
        t.broken(format!(
            "{} of {} dead-lettered messages never acknowledged by the DLQ consumer",
            d.dead_lettered - d.acknowledged,
            d.dead_lettered
        ));
    }
    if d.dead_lettered < d.poisoned {
        t.broken(format!(
            "{} of {} poisoned messages never reached a DLQ (redrive policy, or a settle time shorter than max_receive_count receives)",
            d.poisoned - d.dead_lettered,
            d.poisoned
        ));
    }
}

/// No function ran more invocations at once than its cap.
fn capacity(f: &RunFacts, t: &mut Sheet) {
    for (function, peak, cap) in &f.concurrency {
        t.row(&format!("peak concurrent invocations: {function}"), format!("{peak} (cap {cap})"));
        if peak > cap {
            t.broken(format!("{function}: {peak} invocations at once, over its cap of {cap}"));
        }
    }
}

/// How long conversations took, at the run's scale and at the table's timings.
fn completion(f: &RunFacts, t: &mut Sheet) {
    let mut completions: Vec<Duration> = f.audit.conversations.values().filter_map(|a| a.completion()).collect();
    completions.sort();
    let scaled = |d: Option<Duration>| {
        d.map_or("-".into(), |d| format!("{} ({} at the table's timings)", secs(d), secs(d.div_f64(f.time_scale))))
    };
    t.row("completion p50", scaled(percentile(&completions, 0.5)));
    t.row("completion p99", scaled(percentile(&completions, 0.99)));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests;
