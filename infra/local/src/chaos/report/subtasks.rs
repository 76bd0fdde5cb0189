//! The subtasks' rules, from the store and the audit of the table's stream: none left open in a terminal conversation, each counted exactly once, each result written once, each conversation aggregated once — and where the subtasks ended (shown), with the share that succeeded (judged against `--min-succeeded` when given).

use std::collections::{BTreeMap, BTreeSet};

use swarm_core::approval::approval_id;
use swarm_core::domain::{SubtaskResult, SubtaskStatus};
use swarm_core::effects::EffectState;

use super::facts::{RunFacts, answered, scenario_of};
use super::sheet::{Sheet, or_none, shorten};
use crate::chaos::operator::Decision;

/// `succeeded 4, failed 1` (lower case, by name).
fn tally(counts: &BTreeMap<&str, usize>) -> String {
    counts.iter().map(|(s, n)| format!("{} {n}", s.to_lowercase())).collect::<Vec<_>>().join(", ")
}

/// Where every subtask ended (shown).
pub(super) fn by_status(f: &RunFacts, t: &mut Sheet) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in f.store.values().flatten().flat_map(|(_, subtasks)| subtasks) {
        *counts.entry(s.status.as_str()).or_default() += 1;
    }
    t.row("subtasks by status at the end", or_none(tally(&counts)));
}

/// The subtasks short of `SUCCEEDED` (those awaiting an operator left out) by their step, the
/// scenario's subtask id, and how each ended — a failure by its kind, `never began` when no attempt
/// started: which steps a run loses, and why (shown).
pub(super) fn short_by_step(f: &RunFacts, t: &mut Sheet) {
    let mut by_step: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    let open_at_kill: BTreeSet<&str> = match &f.restart {
        Some(Some(r)) => r.open_ids.iter().map(String::as_str).collect(),
        _ => BTreeSet::new(),
    };
    let (mut short, mut short_open_at_kill) = (0usize, 0usize);
    for (c, s) in f.store.values().flatten().flat_map(|(c, subtasks)| subtasks.iter().map(move |s| (c, s))) {
        if matches!(s.status, SubtaskStatus::Succeeded | SubtaskStatus::AwaitingApproval) {
            continue;
        }
        short += 1;
        short_open_at_kill += usize::from(open_at_kill.contains(c.id.as_str()));
        let how = match &s.result {
            Some(SubtaskResult::Failed { kind, .. }) if s.attempts == 0 => format!("{} never began", kind.code()),
            Some(SubtaskResult::Failed { kind, .. }) => kind.code().to_owned(),
            Some(SubtaskResult::Skipped { dependency }) => format!("skipped after {dependency}"),
            _ => s.status.as_str().to_lowercase(),
        };
        *by_step.entry(s.subtask.id.as_str()).or_default().entry(how).or_default() += 1;
    }
    let shown: Vec<String> = by_step
        .iter()
        .map(|(step, hows)| {
            let hows: Vec<String> = hows.iter().map(|(how, n)| format!("{how} {n}")).collect();
            format!("{step}: {}", hows.join(", "))
        })
        .collect();
    t.row("subtasks short of SUCCEEDED by step", if shown.is_empty() { "none".into() } else { shown.join("; ") });
    if let Some(Some(r)) = &f.restart {
        t.row(
            "of those, in the conversations open at the restart",
            format!("{short_open_at_kill} of {short} (in {} conversations open)", r.open_at_kill),
        );
    }
}

/// A terminal conversation has every subtask terminal (the swarm's invariant): a `DONE`, `FAILED`
/// or `HANDOFF` conversation with a subtask still `PENDING`, `QUEUED` or `RUNNING` shows work that
/// never runs as still to come. Fails the run, naming each such conversation and its open subtasks.
pub(super) fn open_in_terminal(f: &RunFacts, t: &mut Sheet) {
    let mut open_subtasks = 0usize;
    let mut found = Vec::new();
    for (id, (c, subtasks)) in f.store.iter().filter_map(|(id, e)| e.as_ref().map(|e| (id, e))) {
        if !c.status.is_terminal() {
            continue;
        }
        let open: Vec<String> = subtasks
            .iter()
            .filter(|s| !s.status.is_terminal())
            .map(|s| format!("{} {}", s.subtask.id, s.status))
            .collect();
        if open.is_empty() {
            continue;
        }
        open_subtasks += open.len();
        let scenario = scenario_of(c).map_or(String::new(), |i| format!("c{i} "));
        found.push(format!("{scenario}{id} ({}: {})", c.status, open.join(", ")));
    }
    t.row(
        "terminal conversations with subtasks still open",
        if found.is_empty() { "0".into() } else { format!("{} ({open_subtasks} subtasks)", found.len()) },
    );
    if !found.is_empty() {
        t.broken(format!(
            "{} terminal conversations with {open_subtasks} subtasks still open: {}",
            found.len(),
            shorten(&found)
        ));
    }
}

/// Why subtasks failed, and how many never began (a crashed batch comes back after the visibility
/// timeout, past the deadline): what the failures of a run are made of (shown).
pub(super) fn failed_by_kind(f: &RunFacts, t: &mut Sheet) {
    let mut by_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut never_began = 0usize;
    for s in f.store.values().flatten().flat_map(|(_, subtasks)| subtasks) {
        if let Some(SubtaskResult::Failed { kind, .. }) = &s.result {
            *by_kind.entry(kind.code()).or_default() += 1;
            never_began += usize::from(s.attempts == 0);
        }
    }
    let kinds = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ");
    t.row(
        "failed subtasks by kind (never began)",
        if kinds.is_empty() { "none".into() } else { format!("{kinds} ({never_began} never began)") },
    );
}

/// The share of subtasks that ended `SUCCEEDED` (issue 18: a crash costs a retry, not a subtask),
/// counting every subtask but those still awaiting an operator and those whose side effect the
/// operator rejected (its own log, or the journal's `REJECTED` entry). Below `--min-succeeded`,
/// when given, the run fails.
pub(super) fn succeeded_share(f: &RunFacts, t: &mut Sheet) {
    let (mut succeeded, mut counted, mut awaiting, mut rejected) = (0usize, 0usize, 0usize, 0usize);
    for (c, subtasks) in f.store.values().flatten() {
        for s in subtasks {
            let was_rejected = s.effects.iter().any(|e| {
                e.state == EffectState::Rejected
                    || f.operator
                        .decided
                        .get(&approval_id(&c.id, &s.subtask.id, e.ordinal))
                        .is_some_and(|d| d.decision == Decision::Reject)
            });
            if was_rejected {
                rejected += 1;
            } else if s.status == SubtaskStatus::AwaitingApproval {
                awaiting += 1;
            } else {
                counted += 1;
                succeeded += usize::from(s.status == SubtaskStatus::Succeeded);
            }
        }
    }
    let share = if counted == 0 { 1.0 } else { succeeded as f64 / counted as f64 };
    t.row(
        "subtasks SUCCEEDED / counted (excluded: awaiting an operator, rejected)",
        format!("{succeeded} / {counted} = {:.2} % (excluded: {awaiting}, {rejected})", share * 100.0),
    );
    if let Some(min) = f.min_succeeded
        && share < min
    {
        t.broken(format!(
            "{:.2} % of the subtasks counted ended SUCCEEDED, under --min-succeeded {:.2} %",
            share * 100.0,
            min * 100.0
        ));
    }
}

/// The refund subtasks alone (the refund queue, its own worker of 2) (shown).
pub(super) fn refund_subtasks(f: &RunFacts, t: &mut Sheet) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (c, subtasks) in f.store.values().flatten() {
        let Some((_, step)) = scenario_of(c).and_then(|i| f.refunds_asked.get(&i)) else { continue };
        for s in subtasks.iter().filter(|s| &s.subtask.id == step) {
            let key = match (s.status, s.attempts) {
                (SubtaskStatus::Failed, 0) => "FAILED before any attempt",
                (status, _) => status.as_str(),
            };
            *counts.entry(key).or_default() += 1;
        }
    }
    t.row("refund subtasks by status at the end", or_none(tally(&counts)));
}

/// Every count applied once, from the stream: a count applied twice or lost fails the run.
pub(super) fn counts(f: &RunFacts, t: &mut Sheet) {
    let audits = &f.audit.conversations;
    let double_counts: u64 = audits.values().map(|a| a.double_counts).sum();
    let lost_counts: u64 = audits.values().map(|a| a.lost_counts).sum();
    let applied: u64 = audits.values().map(|a| a.decrements).sum();
    let counted: usize = audits.values().map(|a| a.counted.len()).sum();
    t.row(
        "counts applied twice / lost (stream audit)",
        format!("{double_counts} / {lost_counts} ({applied} decrements for {counted} subtasks counted)"),
    );
    if double_counts > 0 {
        let ids: Vec<String> = audits.iter().filter(|(_, a)| a.double_counts > 0).map(|(id, _)| id.clone()).collect();
        t.broken(format!("{double_counts} counts applied twice in {}", shorten(&ids)));
    }
    if lost_counts > 0 {
        let ids: Vec<String> = audits.iter().filter(|(_, a)| a.lost_counts > 0).map(|(id, _)| id.clone()).collect();
        t.broken(format!("{lost_counts} counts lost in {}", shorten(&ids)));
    }
}

/// The store agrees with itself, and every terminal result was written once (shown).
pub(super) fn consistency(f: &RunFacts, t: &mut Sheet) {
    let inconsistent = f
        .store
        .values()
        .flatten()
        .filter(|(c, _)| c.total > 0 && u64::from(c.total - c.remaining.min(c.total)) != c.finished.len() as u64)
        .count();
    t.row("conversations whose remaining ≠ total − finished", inconsistent);
    let twice_recorded = f.audit.subtasks.values().filter(|s| s.results_recorded > 1).count();
    t.row("subtasks whose terminal result was written twice", twice_recorded);
}

/// One reply write per answered conversation, from the stream: two fail the run, and so does an
/// answered conversation whose reply the stream never showed.
pub(super) fn aggregations(f: &RunFacts, t: &mut Sheet) {
    let mut per_conversation: BTreeMap<u32, usize> = BTreeMap::new();
    let mut twice = Vec::new();
    for (id, a) in &f.audit.conversations {
        *per_conversation.entry(a.reply_writes).or_default() += 1;
        if a.reply_writes > 1 {
            twice.push(format!("{id} ({}×)", a.reply_writes));
        }
    }
    let without_reply = f
        .store
        .iter()
        .filter(|(id, e)| {
            e.as_ref().is_some_and(|(c, _)| answered(c))
                && f.audit.conversations.get(*id).is_none_or(|a| a.reply_writes == 0)
        })
        .count();
    t.row(
        "aggregations (reply writes) per conversation",
        per_conversation.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", "),
    );
    if !twice.is_empty() {
        t.broken(format!("{} conversations aggregated more than once: {}", twice.len(), shorten(&twice)));
    }
    if without_reply > 0 {
        t.broken(format!("{without_reply} conversations DONE or HANDOFF without a reply write in the stream"));
    }
}
