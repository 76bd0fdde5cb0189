//! The approvals' rules: what the swarm asked, what the operator decided and how its POSTs were answered, where each approval ended — and the shop's ledger against the operator's own decisions: each approval executed at most once, never without the operator's approval or against its rejection, no side effect left "being confirmed" for good.

use std::collections::{BTreeMap, BTreeSet};

use swarm_core::approval::ApprovalStatus;
use swarm_core::effects::EffectState;

use super::facts::{RunFacts, approval_of_key, scenario_of};
use super::sheet::{Sheet, count_and_list, or_none, shorten};
use crate::chaos::operator::Decision;

/// What the swarm asked (the subtasks' journals) and what the operator decided and was answered (shown).
pub(super) fn asked_and_decided(f: &RunFacts, t: &mut Sheet) {
    let asked: BTreeSet<&str> = f
        .store
        .values()
        .flatten()
        .flat_map(|(_, subtasks)| subtasks.iter())
        .flat_map(|s| s.effects.iter())
        .filter_map(|e| e.approval_id.as_deref())
        .collect();
    let log = &f.operator;
    let decided = |decision: Decision| log.decided.values().filter(|d| d.decision == decision).count();
    let undecided = asked.iter().filter(|id| !log.decided.contains_key(**id)).count();
    t.row(
        "approvals asked (subtask journals) / decided by the operator",
        format!("{} / {} ({undecided} asked and never decided)", asked.len(), log.decided.len()),
    );
    t.row(
        "operator: approved (again) / rejected / posted twice / gave up",
        format!(
            "{} ({}) / {} / {} / {} ({} GET /approvals, {} failed)",
            decided(Decision::Approve),
            log.decided.values().filter(|d| d.approved_again).count(),
            decided(Decision::Reject),
            log.decided.values().filter(|d| d.twice).count(),
            log.decided.values().filter(|d| d.answered.is_none()).count(),
            log.polls,
            log.failed_polls
        ),
    );
    let answers = log.answers.iter().map(|(code, n)| format!("{code}: {n}")).collect::<Vec<_>>().join(", ");
    t.row("operator POSTs by answer", or_none(answers));
}

/// Where each approval ended in the store (shown): by status, executed with or without an error
/// (an executed approval whose tool answered an error refunded nothing), approved and never run.
pub(super) fn approvals_at_end(f: &RunFacts, t: &mut Sheet) {
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for a in f.approvals_at_end.values() {
        *by_status.entry(a.as_ref().map_or("absent", |a| a.status.code())).or_default() += 1;
    }
    let tally = by_status.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ");
    t.row("approvals by status at the end", or_none(tally));
    let executed = |is_error: bool| {
        f.approvals_at_end
            .values()
            .flatten()
            .filter(|a| {
                a.status == ApprovalStatus::Executed && a.outcome.as_ref().is_some_and(|o| o.is_error == is_error)
            })
            .count()
    };
    t.row(
        "executed approvals: the tool refunded / answered an error",
        format!("{} / {}", executed(false), executed(true)),
    );
    let stuck: Vec<String> = f
        .approvals_at_end
        .iter()
        .filter(|(id, a)| {
            a.as_ref().is_some_and(|a| a.status == ApprovalStatus::Approved)
                && f.operator.decided.contains_key(id.as_str())
        })
        .map(|(id, _)| id.clone())
        .collect();
    t.row("approved by the operator, not executed at the end", count_and_list(&stuck));
}

/// A journal entry still an intent once the run settled: nothing will learn what happened to it.
pub(super) fn unconfirmed(f: &RunFacts, t: &mut Sheet) {
    let unconfirmed: Vec<String> = f
        .store
        .values()
        .flatten()
        .flat_map(|(c, subtasks)| subtasks.iter().map(move |s| (c, s)))
        .filter(|(_, s)| s.effects.iter().any(|e| e.state == EffectState::Intent))
        .map(|(c, s)| {
            scenario_of(c).map_or_else(|| format!("{}/{}", c.id, s.subtask.id), |i| format!("c{i}/{}", s.subtask.id))
        })
        .collect();
    t.row("side effects never confirmed (journal intent at the end)", count_and_list(&unconfirmed));
    if !unconfirmed.is_empty() {
        t.broken(format!(
            "{} subtasks left \"being confirmed\" for good (an intent nobody confirms): {}",
            unconfirmed.len(),
            shorten(&unconfirmed)
        ));
    }
}

/// The ledger by the approval of its key, against the operator's own decisions: once per
/// approval, only approved ones. A refund whose approval records the tool's answer as an error
/// (the customer and the operator are told it was not done) is shown, not failed on (README
/// "Chaos": still open).
pub(super) fn refunds_per_approval(f: &RunFacts, t: &mut Sheet) {
    let log = &f.operator;
    let mut per_approval: BTreeMap<String, u32> = BTreeMap::new();
    let mut without = Vec::new();
    for r in &f.ledger {
        match approval_of_key(&r.idempotency_key) {
            Some(id) => *per_approval.entry(id).or_default() += 1,
            None => without.push(format!("key {:?}", r.idempotency_key)),
        }
    }
    let mut twice = Vec::new();
    let mut rejected_ran = Vec::new();
    for (id, n) in &per_approval {
        if *n > 1 {
            twice.push(format!("{id} ({n}×)"));
        }
        match log.decided.get(id).map(|d| d.decision) {
            Some(Decision::Approve) => {}
            Some(Decision::Reject) => rejected_ran.push(id.clone()),
            None => without.push(id.clone()),
        }
    }
    // Once: approved and refunded exactly once.
    let once = per_approval
        .iter()
        .filter(|(id, n)| **n == 1 && log.decided.get(*id).is_some_and(|d| d.decision == Decision::Approve))
        .count();
    t.row(
        "refunds per approval: once / twice+ / unapproved / rejected",
        format!("{once} / {} / {} / {}", twice.len(), without.len(), rejected_ran.len()),
    );
    let told_not_done: Vec<String> = per_approval
        .keys()
        .filter_map(|id| {
            let a = f.approvals_at_end.get(id)?.as_ref()?;
            let o = a.outcome.as_ref().filter(|o| o.is_error)?;
            Some(format!("{id}: {:?}", o.text.chars().take(60).collect::<String>()))
        })
        .collect();
    t.row("refunds made while their approval records an error", count_and_list(&told_not_done));
    if !twice.is_empty() {
        t.broken(format!("{} approvals executed more than once: {}", twice.len(), shorten(&twice)));
    }
    if !without.is_empty() {
        t.broken(format!("{} refunds executed without the operator's approval: {}", without.len(), shorten(&without)));
    }
    if !rejected_ran.is_empty() {
        t.broken(format!(
            "{} refunds executed although the operator rejected them: {}",
            rejected_ran.len(),
            shorten(&rejected_ran)
        ));
    }
}
