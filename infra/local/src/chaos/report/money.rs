//! The side effects' rules, from the shop's ledger (each refund tied to its scripted subtask by the tag in its reason, each support ticket by the tag in its subject): each subtask refunded at most once and each scripted ticket opened at most once, no refund nobody asked for, no order refunded beyond what the operator approved, no refund while the customer is told it failed. Amounts in cents.

use std::collections::{BTreeMap, BTreeSet};

use super::conversations::per_scenario;
use super::facts::{RunFacts, failed_or_skipped, scenario_of};
use super::sheet::{Sheet, shorten};
use crate::chaos::operator::Decision;
use crate::chaos::scenario::{REFUND_AMOUNT, parse_refund_tag};

/// Refunds in the ledger per scripted subtask `(scenario, subtask)`, and how many carry no tag.
fn by_subtask(f: &RunFacts) -> (BTreeMap<(usize, String), u32>, usize) {
    let mut by_subtask: BTreeMap<(usize, String), u32> = BTreeMap::new();
    let mut unattributed = 0usize;
    for r in &f.ledger {
        match r.reason.as_deref().and_then(parse_refund_tag) {
            Some(tag) => *by_subtask.entry(tag).or_default() += 1,
            None => unattributed += 1,
        }
    }
    (by_subtask, unattributed)
}

/// The scenarios whose conversation exists.
fn existing(f: &RunFacts) -> BTreeSet<usize> {
    per_scenario(f).keys().copied().collect()
}

/// `12.34` from cents.
fn decimal(cents: i64) -> String {
    format!("{:.2}", cents as f64 / 100.0)
}

/// Each refund subtask refunded at most once, and every refund asked for by one.
pub(super) fn refunds_per_subtask(f: &RunFacts, t: &mut Sheet) {
    let (by_subtask, unattributed) = by_subtask(f);
    let existing = existing(f);
    let twice: Vec<String> =
        by_subtask.iter().filter(|(_, n)| **n > 1).map(|((i, s), n)| format!("c{i}/{s} ({n}×)")).collect();
    let once = by_subtask.values().filter(|n| **n == 1).count();
    t.row(
        "refunds executed (shop ledger) / refund subtasks asked",
        format!("{} / {}", f.ledger.len(), f.refunds_asked.keys().filter(|i| existing.contains(i)).count()),
    );
    t.row(
        "refunds per subtask: once / twice or more / unattributed",
        format!("{once} / {} / {unattributed}", twice.len()),
    );
    if !twice.is_empty() {
        t.broken(format!("{} subtasks refunded more than once: {}", twice.len(), shorten(&twice)));
    }
    if unattributed > 0 {
        t.broken(format!("{unattributed} refunds no scripted subtask asked for"));
    }
}

/// Each scripted support ticket (a ticket subtask's first or second, told apart by the subject's
/// first word) opened at most once, and every ticket asked for by a scripted subtask.
pub(super) fn tickets_per_subtask(f: &RunFacts, t: &mut Sheet) {
    let mut by_call: BTreeMap<(usize, String, &str), u32> = BTreeMap::new();
    let mut unattributed = 0usize;
    for ticket in &f.tickets {
        let about = ticket.subject.split_whitespace().next().unwrap_or_default();
        match parse_refund_tag(&ticket.subject) {
            Some((i, s)) => *by_call.entry((i, s, about)).or_default() += 1,
            None => unattributed += 1,
        }
    }
    let twice: Vec<String> =
        by_call.iter().filter(|(_, n)| **n > 1).map(|((i, s, about), n)| format!("c{i}/{s} {about} ({n}×)")).collect();
    let once = by_call.values().filter(|n| **n == 1).count();
    t.row(
        "support tickets per scripted call: once / twice or more / unattributed",
        format!("{once} / {} / {unattributed}", twice.len()),
    );
    if !twice.is_empty() {
        t.broken(format!("{} support tickets opened more than once: {}", twice.len(), shorten(&twice)));
    }
    if unattributed > 0 {
        t.broken(format!("{unattributed} support tickets no scripted subtask asked for"));
    }
}

/// No order refunded beyond what the operator approved, nor beyond what its subtasks asked.
pub(super) fn refunded_per_order(f: &RunFacts, t: &mut Sheet) {
    let mut refunded: BTreeMap<&str, i64> = BTreeMap::new();
    for r in &f.ledger {
        *refunded.entry(&r.order_id).or_default() += r.amount_cents;
    }
    let existing = existing(f);
    let mut asked: BTreeMap<&str, i64> = BTreeMap::new();
    let refund_cents = (REFUND_AMOUNT * 100.0).round() as i64;
    for (order, _) in f.refunds_asked.iter().filter(|(i, _)| existing.contains(i)).map(|(_, asked)| asked) {
        *asked.entry(order).or_default() += refund_cents;
    }
    let mut approved: BTreeMap<&str, i64> = BTreeMap::new();
    for d in f.operator.decided.values().filter(|d| d.decision == Decision::Approve) {
        *approved.entry(&d.order_id).or_default() += d.amount_cents.unwrap_or(0);
    }
    let mut over = Vec::new();
    let mut lines = Vec::new();
    let orders: BTreeSet<&str> = refunded.keys().chain(asked.keys()).chain(approved.keys()).copied().collect();
    for order in orders {
        let amount = |m: &BTreeMap<&str, i64>| m.get(order).copied().unwrap_or(0);
        let (r, a, q) = (amount(&refunded), amount(&approved), amount(&asked));
        lines.push(format!("{order} {}/{}/{}", decimal(r), decimal(a), decimal(q)));
        if r > a.min(q) {
            over.push(format!("{order}: {} CNY refunded, {} approved, {} asked", decimal(r), decimal(a), decimal(q)));
        }
    }
    t.row("refunded per order / approved / asked (CNY)", lines.join(", "));
    if !over.is_empty() {
        t.broken(format!("orders refunded beyond what was approved: {}", over.join("; ")));
    }
}

/// No refund in the ledger whose subtask tells the customer it failed or was skipped.
pub(super) fn refunds_told_failed(f: &RunFacts, t: &mut Sheet) {
    let (by_subtask, _) = by_subtask(f);
    let mut told_failed = Vec::new();
    for (i, s) in by_subtask.keys() {
        let record = f
            .store
            .values()
            .flatten()
            .filter(|(c, _)| scenario_of(c) == Some(*i))
            .flat_map(|(_, subtasks)| subtasks.iter())
            .find(|r| &r.subtask.id == s);
        if record.is_some_and(failed_or_skipped) {
            told_failed.push(format!("c{i}/{s}"));
        }
    }
    t.row("refunds made while their subtask reports failure", told_failed.len());
    if !told_failed.is_empty() {
        t.broken(format!(
            "{} refunds ran while the customer is told they failed: {}",
            told_failed.len(),
            shorten(&told_failed)
        ));
    }
}
