//! The chaos run's verdict: every conversation checked against the store, the audit of the table's stream and the shop's ledger, in one table, with the failures that make the run exit non-zero.
//!
//! A run fails on: a lost conversation (answered 202, absent at the end), a request answered by
//! two conversations, a conversation not terminal at the end (hung; `DONE`, `FAILED` and `HANDOFF`
//! are terminal, whatever its subtasks await), a count applied twice or lost, a conversation
//! aggregated twice, a subtask or an approval refunded twice, a refund no scripted subtask asked
//! for, a refund the operator never approved or rejected, an order refunded beyond what the
//! operator approved, a refund made while its subtask reports failure, and any fault kind
//! injected zero times. What was approved is the operator's own log ([`OperatorLog`]), never the
//! approvals' records; which approval a refund ran for is read from the key the shop received
//! (`swarm:<conversation>:<subtask>:<ordinal>`, [`swarm_core::effects::effect_key`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use swarm_core::approval::{Approval, ApprovalStatus, approval_id};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus,
};
use swarm_core::effects::EffectState;

use super::audit::AuditLog;
use super::operator::{Decision, OperatorLog};
use super::scenario::{REFUND_AMOUNT, parse_refund_tag};

/// One fault kind's line: its rate, its opportunities and how often it was injected.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultLine {
    pub name: String,
    pub rate: f64,
    pub opportunities: u64,
    pub injected: u64,
}

/// What the client side of one scripted conversation saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientOutcome {
    /// The conversation id of the 202, if one came.
    pub conversation_id: Option<String>,
    /// `POST`s sent (the first and every re-post).
    pub posts: u32,
    /// The client stopped without a 202 (no re-post drawn, or too many failures).
    pub gave_up: bool,
    /// A 4xx that is not a fault (the request was refused).
    pub refused: Option<u16>,
}

/// A refund in the shop's ledger (what the ledger says, nothing the swarm reported).
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerRefund {
    pub order_id: String,
    pub amount: f64,
    pub reason: Option<String>,
    /// The idempotency key the shop received with the call.
    pub idempotency_key: String,
}

/// Everything the verdict is made of.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    pub backend: String,
    pub conversations_asked: usize,
    pub subtasks_each: usize,
    pub time_scale: f64,
    pub deadline: Duration,
    pub wall: Duration,
    pub faults: Vec<FaultLine>,
    /// By scenario index.
    pub clients: BTreeMap<usize, ClientOutcome>,
    /// Scenario index → the order its refund is for and its refund subtask.
    pub refunds_asked: BTreeMap<usize, (String, String)>,
    pub audit: AuditLog,
    /// The store at the end: every conversation the audit or a client knows, with its subtasks
    /// (`None`: absent from the store).
    pub store: BTreeMap<String, Option<(Conversation, Vec<SubtaskRecord>)>>,
    pub ledger: Vec<LedgerRefund>,
    /// What the operator decided (its own log).
    pub operator: OperatorLog,
    /// Every approval id known (the operator's log, the subtasks' journals) → the approval in the
    /// store at the end (`None`: absent).
    pub approvals_at_end: BTreeMap<String, Option<Approval>>,
    /// `(function, peak, cap)`.
    pub concurrency: Vec<(String, u64, u64)>,
    /// Platform counters worth a line: `(name, value)`.
    pub platform: Vec<(String, u64)>,
    /// Lines said before the table (skipped parts, warnings).
    pub notes: Vec<String>,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub table: String,
    /// Empty when the run passed.
    pub failures: Vec<String>,
}

/// The scenario index a conversation's message names (`chaos conversation <n>.`).
fn scenario_of(c: &Conversation) -> Option<usize> {
    let rest = &c.query[c.query.find("chaos conversation ")? + "chaos conversation ".len()..];
    rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()
}

/// Whether `text` holds `word` with no letter, digit or `_` on either side.
fn names(text: &str, word: &str) -> bool {
    let inner = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(inner) && !after.is_some_and(inner)
    })
}

/// Whether a reply names a subtask: by its id, or by its instruction (the part before a
/// scripted `[call …]`, as the model-free reply quotes it).
fn names_subtask(reply: &str, s: &SubtaskRecord) -> bool {
    let instruction = s.subtask.instruction.split(" [call ").next().unwrap_or("").trim();
    names(reply, s.subtask.id.as_str()) || (!instruction.is_empty() && reply.contains(instruction))
}

/// The approval a side effect's idempotency key belongs to: `swarm:<conversation>:<subtask>:<ordinal>`
/// → `<conversation>.<subtask>.<ordinal>`; `None` for a key of another shape.
pub fn approval_of_key(key: &str) -> Option<String> {
    let mut parts = key.strip_prefix("swarm:")?.rsplitn(3, ':');
    let ordinal: u32 = parts.next()?.parse().ok()?;
    let subtask = parts.next().filter(|s| !s.is_empty())?;
    let conversation = parts.next().filter(|c| !c.is_empty() && !c.contains(':'))?;
    Some(approval_id(&ConversationId::from_trusted(conversation), &SubtaskId::from(subtask), ordinal))
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Judges the run and lays out its table.
pub fn verdict(f: &RunFacts) -> Verdict {
    let mut failures = Vec::new();
    let mut t = String::new();
    let row = |t: &mut String, name: &str, value: String| {
        let _ = writeln!(t, "| {name:<58} | {value:<62} |");
    };
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

    // Faults.
    for line in &f.faults {
        let value = format!("{} injected of {} opportunities (rate {})", line.injected, line.opportunities, line.rate);
        row(&mut t, &format!("fault {}", line.name), value);
        if line.injected == 0 {
            failures.push(format!("fault kind {} was injected 0 times", line.name));
        }
    }
    for (name, value) in &f.platform {
        row(&mut t, &format!("platform: {name}"), value.to_string());
    }

    // Conversations.
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut hung = Vec::new();
    let mut lost = Vec::new();
    let mut phantoms = 0usize;
    let answered: BTreeSet<&str> = f.clients.values().filter_map(|c| c.conversation_id.as_deref()).collect();
    let mut per_scenario: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (id, entry) in &f.store {
        match entry {
            // Only a conversation a client was given can be lost; one only the stream knows of was never written.
            None if !answered.contains(id.as_str()) => phantoms += 1,
            None => lost.push(match f.audit.conversations.get(id) {
                Some(a) => format!("{id} (the stream saw it {} after {} writes)", a.status, a.writes),
                None => format!("{id} (never in the stream)"),
            }),
            Some((c, _)) => {
                *by_status.entry(c.status.as_str().to_owned()).or_default() += 1;
                if !c.status.is_terminal() {
                    let scenario = scenario_of(c).map_or(String::new(), |i| format!("c{i}, "));
                    hung.push(format!("{id} ({scenario}{})", c.status));
                }
                if let Some(i) = scenario_of(c) {
                    per_scenario.entry(i).or_default().insert(id.clone());
                }
            }
        }
    }
    let given_up = f.clients.values().filter(|c| c.gave_up).count();
    let refused = f.clients.values().filter(|c| c.refused.is_some()).count();
    let reposted = f.clients.values().filter(|c| c.posts > 1).count();
    row(
        &mut t,
        "requests: accepted (202) / gave up after failures / refused",
        format!(
            "{} / {given_up} / {refused} ({reposted} re-posted with the same key)",
            f.clients.values().filter(|c| c.conversation_id.is_some()).count()
        ),
    );
    let status_line = |s: &str| by_status.get(s).copied().unwrap_or(0);
    row(
        &mut t,
        "conversations: done / handoff / failed / hung at the end",
        format!(
            "{} / {} / {} / {} (of {} in the store)",
            status_line("DONE"),
            status_line("HANDOFF"),
            status_line("FAILED"),
            hung.len(),
            f.store.values().flatten().count()
        ),
    );
    if !hung.is_empty() {
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for e in f.store.values() {
            if let Some((c, _)) = e.as_ref().filter(|(c, _)| !c.status.is_terminal()) {
                *by.entry(c.status.as_str()).or_default() += 1;
            }
        }
        let by = by.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ");
        failures.push(format!("{} conversations hung ({by}): {}", hung.len(), shorten(&hung)));
    }
    row(&mut t, "conversations lost (answered 202, absent at the end)", lost.len().to_string());
    row(&mut t, "conversations in the stream, never in the table", phantoms.to_string());
    if !lost.is_empty() {
        failures.push(format!("{} conversations lost: {}", lost.len(), shorten(&lost)));
    }
    let doubled: Vec<String> = per_scenario
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(i, ids)| format!("c{i}: {}", ids.iter().cloned().collect::<Vec<_>>().join(" + ")))
        .collect();
    row(&mut t, "requests answered by two or more conversations", doubled.len().to_string());
    if !doubled.is_empty() {
        failures.push(format!("{} requests became two conversations: {}", doubled.len(), shorten(&doubled)));
    }

    // A 202 whose conversation ended FAILED: the customer was told it was accepted and got no
    // reply (a re-post during a dead creator's planning lease is answered with the conversation
    // nobody plans; the deadline path fails it). Not one of the run's guarantees: shown, not failed on.
    let accepted_failed: Vec<String> = f
        .clients
        .iter()
        .filter_map(|(i, c)| c.conversation_id.as_ref().map(|id| (i, id)))
        .filter(|(_, id)| {
            f.store
                .get(id.as_str())
                .and_then(Option::as_ref)
                .is_some_and(|(c, _)| c.status == ConversationStatus::Failed)
        })
        .map(|(i, id)| format!("c{i} {id}"))
        .collect();
    row(
        &mut t,
        "accepted (202) but ended FAILED",
        if accepted_failed.is_empty() {
            "0".into()
        } else {
            format!("{} ({})", accepted_failed.len(), shorten(&accepted_failed))
        },
    );

    // Subtasks.
    let mut sub_status: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (_, subtasks) in f.store.values().flatten() {
        for s in subtasks {
            *sub_status.entry(s.status.as_str()).or_default() += 1;
        }
    }
    let tally = sub_status.iter().map(|(s, n)| format!("{} {n}", s.to_lowercase())).collect::<Vec<_>>().join(", ");
    row(&mut t, "subtasks by status at the end", if tally.is_empty() { "none".into() } else { tally });
    // Why they failed (a crashed batch comes back after the visibility timeout, past the deadline),
    // and how many never began: what the failures of a run are made of.
    let mut failed_by_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut never_began = 0usize;
    for (_, subtasks) in f.store.values().flatten() {
        for s in subtasks {
            if let Some(SubtaskResult::Failed { kind, .. }) = &s.result {
                *failed_by_kind.entry(kind.code()).or_default() += 1;
                never_began += usize::from(s.attempts == 0);
            }
        }
    }
    let kinds = failed_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ");
    row(
        &mut t,
        "failed subtasks by kind (never began)",
        if kinds.is_empty() { "none".into() } else { format!("{kinds} ({never_began} never began)") },
    );

    // The refund subtasks alone (the refund queue, its own worker of 2).
    let mut refund_status: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (c, subtasks) in f.store.values().flatten() {
        let Some((_, step)) = scenario_of(c).and_then(|i| f.refunds_asked.get(&i)) else { continue };
        for s in subtasks.iter().filter(|s| &s.subtask.id == step) {
            let key = match (&s.status, s.attempts) {
                (SubtaskStatus::Failed, 0) => "FAILED before any attempt",
                (status, _) => status.as_str(),
            };
            *refund_status.entry(key).or_default() += 1;
        }
    }
    let tally = refund_status.iter().map(|(s, n)| format!("{} {n}", s.to_lowercase())).collect::<Vec<_>>().join(", ");
    row(&mut t, "refund subtasks by status at the end", if tally.is_empty() { "none".into() } else { tally });

    // Counting, from the stream.
    let double_counts: u64 = f.audit.conversations.values().map(|a| a.double_counts).sum();
    let lost_counts: u64 = f.audit.conversations.values().map(|a| a.lost_counts).sum();
    let applied: u64 = f.audit.conversations.values().map(|a| a.decrements).sum();
    let counted: usize = f.audit.conversations.values().map(|a| a.counted.len()).sum();
    row(
        &mut t,
        "counts applied twice / lost (stream audit)",
        format!("{double_counts} / {lost_counts} ({applied} decrements for {counted} subtasks counted)"),
    );
    let doubled_convs: Vec<String> =
        f.audit.conversations.iter().filter(|(_, a)| a.double_counts > 0).map(|(id, _)| id.clone()).collect();
    if double_counts > 0 {
        failures.push(format!("{double_counts} counts applied twice in {}", shorten(&doubled_convs)));
    }
    let lost_convs: Vec<String> =
        f.audit.conversations.iter().filter(|(_, a)| a.lost_counts > 0).map(|(id, _)| id.clone()).collect();
    if lost_counts > 0 {
        failures.push(format!("{lost_counts} counts lost in {}", shorten(&lost_convs)));
    }
    let inconsistent: Vec<String> = f
        .store
        .iter()
        .filter_map(|(id, e)| e.as_ref().map(|(c, _)| (id, c)))
        .filter(|(_, c)| c.total > 0 && u64::from(c.total - c.remaining.min(c.total)) != c.finished.len() as u64)
        .map(|(id, _)| id.clone())
        .collect();
    row(&mut t, "conversations whose remaining ≠ total − finished", inconsistent.len().to_string());
    let twice_recorded: usize = f.audit.subtasks.values().filter(|s| s.results_recorded > 1).count();
    row(&mut t, "subtasks whose terminal result was written twice", twice_recorded.to_string());

    // Aggregations, from the stream.
    let mut aggregations: BTreeMap<u32, usize> = BTreeMap::new();
    let mut aggregated_twice = Vec::new();
    for (id, a) in &f.audit.conversations {
        *aggregations.entry(a.reply_writes).or_default() += 1;
        if a.reply_writes > 1 {
            aggregated_twice.push(format!("{id} ({}×)", a.reply_writes));
        }
    }
    let done_without_reply = f
        .store
        .iter()
        .filter(|(id, e)| {
            e.as_ref().is_some_and(|(c, _)| matches!(c.status, ConversationStatus::Done | ConversationStatus::Handoff))
                && f.audit.conversations.get(*id).is_none_or(|a| a.reply_writes == 0)
        })
        .count();
    row(
        &mut t,
        "aggregations (reply writes) per conversation",
        aggregations.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", "),
    );
    if !aggregated_twice.is_empty() {
        failures.push(format!(
            "{} conversations aggregated more than once: {}",
            aggregated_twice.len(),
            shorten(&aggregated_twice)
        ));
    }
    if done_without_reply > 0 {
        failures
            .push(format!("{done_without_reply} conversations DONE or HANDOFF without a reply write in the stream"));
    }

    // Refunds, from the ledger.
    let mut by_subtask: BTreeMap<(usize, String), u32> = BTreeMap::new();
    let mut refunded_by_order: BTreeMap<String, f64> = BTreeMap::new();
    let mut unattributed = 0usize;
    for r in &f.ledger {
        *refunded_by_order.entry(r.order_id.clone()).or_default() += r.amount;
        match r.reason.as_deref().and_then(parse_refund_tag) {
            Some(tag) => *by_subtask.entry(tag).or_default() += 1,
            None => unattributed += 1,
        }
    }
    let existing: BTreeSet<usize> = per_scenario.keys().copied().collect();
    let mut asked_by_order: BTreeMap<String, f64> = BTreeMap::new();
    for (order, _) in f.refunds_asked.iter().filter(|(i, _)| existing.contains(i)).map(|(_, asked)| asked) {
        *asked_by_order.entry(order.clone()).or_default() += REFUND_AMOUNT;
    }
    let mut approved_by_order: BTreeMap<String, f64> = BTreeMap::new();
    for d in f.operator.decided.values().filter(|d| d.decision == Decision::Approve) {
        *approved_by_order.entry(d.order_id.clone()).or_default() += d.amount_cents.unwrap_or(0) as f64 / 100.0;
    }
    let twice: Vec<String> =
        by_subtask.iter().filter(|(_, n)| **n > 1).map(|((i, s), n)| format!("c{i}/{s} ({n}×)")).collect();
    let once = by_subtask.values().filter(|n| **n == 1).count();
    row(
        &mut t,
        "refunds executed (shop ledger) / refund subtasks asked",
        format!("{} / {}", f.ledger.len(), f.refunds_asked.keys().filter(|i| existing.contains(i)).count()),
    );
    row(
        &mut t,
        "refunds per subtask: once / twice or more / unattributed",
        format!("{once} / {} / {unattributed}", twice.len()),
    );
    if !twice.is_empty() {
        failures.push(format!("{} subtasks refunded more than once: {}", twice.len(), shorten(&twice)));
    }
    if unattributed > 0 {
        failures.push(format!("{unattributed} refunds no scripted subtask asked for"));
    }
    let mut over = Vec::new();
    let mut order_lines = Vec::new();
    let orders: BTreeSet<&String> =
        refunded_by_order.keys().chain(asked_by_order.keys()).chain(approved_by_order.keys()).collect();
    for order in orders {
        let refunded = refunded_by_order.get(order).copied().unwrap_or(0.0);
        let approved = approved_by_order.get(order).copied().unwrap_or(0.0);
        let asked = asked_by_order.get(order).copied().unwrap_or(0.0);
        order_lines.push(format!("{order} {refunded:.2}/{approved:.2}/{asked:.2}"));
        if refunded > approved.min(asked) + 0.005 {
            over.push(format!("{order}: {refunded:.2} CNY refunded, {approved:.2} approved, {asked:.2} asked"));
        }
    }
    row(&mut t, "refunded per order / approved / asked (CNY)", order_lines.join(", "));
    if !over.is_empty() {
        failures.push(format!("orders refunded beyond what was approved: {}", over.join("; ")));
    }
    consent(f, &mut t, &mut failures);
    let mut told_failed = Vec::new();
    for (i, s) in by_subtask.keys() {
        let record = f
            .store
            .values()
            .flatten()
            .filter(|(c, _)| scenario_of(c) == Some(*i))
            .flat_map(|(_, subtasks)| subtasks.iter())
            .find(|r| &r.subtask.id == s);
        if record.is_some_and(|r| matches!(r.status, SubtaskStatus::Failed | SubtaskStatus::Skipped)) {
            told_failed.push(format!("c{i}/{s}"));
        }
    }
    row(&mut t, "refunds made while their subtask reports failure", told_failed.len().to_string());
    if !told_failed.is_empty() {
        failures.push(format!(
            "{} refunds ran while the customer is told they failed: {}",
            told_failed.len(),
            shorten(&told_failed)
        ));
    }

    // Capacity and time.
    for (function, peak, cap) in &f.concurrency {
        row(&mut t, &format!("peak concurrent invocations: {function}"), format!("{peak} (cap {cap})"));
        if peak > cap {
            failures.push(format!("{function}: {peak} invocations at once, over its cap of {cap}"));
        }
    }
    let mut completions: Vec<Duration> = f.audit.conversations.values().filter_map(|a| a.completion()).collect();
    completions.sort();
    let scaled = |d: Option<Duration>| {
        d.map_or("-".into(), |d| format!("{} ({} at the table's timings)", secs(d), secs(d.div_f64(f.time_scale))))
    };
    row(&mut t, "completion p50", scaled(percentile(&completions, 0.5)));
    row(&mut t, "completion p99", scaled(percentile(&completions, 0.99)));

    // Replies.
    let mut with_failures = 0usize;
    let mut naming_all = 0usize;
    for (c, subtasks) in f.store.values().flatten() {
        let failed: Vec<&SubtaskRecord> =
            subtasks.iter().filter(|s| matches!(s.status, SubtaskStatus::Failed | SubtaskStatus::Skipped)).collect();
        if failed.is_empty() || !matches!(c.status, ConversationStatus::Done | ConversationStatus::Handoff) {
            continue;
        }
        with_failures += 1;
        let reply = c.reply.as_deref().unwrap_or("");
        if failed.iter().all(|s| names_subtask(reply, s)) {
            naming_all += 1;
        }
    }
    row(&mut t, "replies naming every failed or skipped subtask", format!("{naming_all} of {with_failures}"));

    let _ = writeln!(t);
    if failures.is_empty() {
        let _ = writeln!(
            t,
            "PASSED: no conversation lost or hung, nothing counted, aggregated or refunded twice, no refund without an approval, every fault kind injected."
        );
    } else {
        let _ = writeln!(t, "FAILED:");
        for fl in &failures {
            let _ = writeln!(t, "  - {fl}");
        }
    }
    Verdict { table: t, failures }
}

/// The approvals: what the swarm asked, what the operator decided and how its POSTs were
/// answered, where each approval ended, and the shop's ledger against the operator's decisions.
fn consent(f: &RunFacts, t: &mut String, failures: &mut Vec<String>) {
    let row = |t: &mut String, name: &str, value: String| {
        let _ = writeln!(t, "| {name:<58} | {value:<62} |");
    };
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
    row(
        t,
        "approvals asked (subtask journals) / decided by the operator",
        format!("{} / {} ({undecided} asked and never decided)", asked.len(), log.decided.len()),
    );
    row(
        t,
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
    row(t, "operator POSTs by answer", if answers.is_empty() { "none".into() } else { answers });
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for a in f.approvals_at_end.values() {
        *by_status.entry(a.as_ref().map_or("absent", |a| a.status.code())).or_default() += 1;
    }
    let tally = by_status.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ");
    row(t, "approvals by status at the end", if tally.is_empty() { "none".into() } else { tally });
    // An executed approval whose tool answered an error refunded nothing (a refusal, an injected tool error).
    let executed = |is_error: bool| {
        f.approvals_at_end
            .values()
            .flatten()
            .filter(|a| {
                a.status == ApprovalStatus::Executed && a.outcome.as_ref().is_some_and(|o| o.is_error == is_error)
            })
            .count()
    };
    row(
        t,
        "executed approvals: the tool refunded / answered an error",
        format!("{} / {}", executed(false), executed(true)),
    );
    let stuck: Vec<String> = f
        .approvals_at_end
        .iter()
        .filter(|(id, a)| {
            a.as_ref().is_some_and(|a| a.status == ApprovalStatus::Approved) && log.decided.contains_key(id.as_str())
        })
        .map(|(id, _)| id.clone())
        .collect();
    row(
        t,
        "approved by the operator, not executed at the end",
        if stuck.is_empty() { "0".into() } else { format!("{} ({})", stuck.len(), shorten(&stuck)) },
    );

    // A journal entry still an intent once the run settled: nothing will learn what happened to it.
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
    row(
        t,
        "side effects never confirmed (journal intent at the end)",
        if unconfirmed.is_empty() { "0".into() } else { format!("{} ({})", unconfirmed.len(), shorten(&unconfirmed)) },
    );
    if !unconfirmed.is_empty() {
        failures.push(format!(
            "{} subtasks left \"being confirmed\" for good (an intent nobody confirms): {}",
            unconfirmed.len(),
            shorten(&unconfirmed)
        ));
    }

    // The ledger by the approval of its key, against the operator's own decisions.
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
    row(
        t,
        "refunds per approval: once / twice+ / unapproved / rejected",
        // Once: approved and refunded exactly once.
        format!(
            "{} / {} / {} / {}",
            per_approval
                .iter()
                .filter(|(id, n)| **n == 1 && log.decided.get(*id).is_some_and(|d| d.decision == Decision::Approve))
                .count(),
            twice.len(),
            without.len(),
            rejected_ran.len()
        ),
    );
    // A refund in the ledger whose approval records the tool's answer as an error: the customer and
    // the operator are told it was not done. Shown, not failed on (README "Chaos": still open).
    let told_not_done: Vec<String> = per_approval
        .keys()
        .filter_map(|id| {
            let a = f.approvals_at_end.get(id)?.as_ref()?;
            let o = a.outcome.as_ref().filter(|o| o.is_error)?;
            Some(format!("{id}: {:?}", o.text.chars().take(60).collect::<String>()))
        })
        .collect();
    row(
        t,
        "refunds made while their approval records an error",
        if told_not_done.is_empty() {
            "0".into()
        } else {
            format!("{} ({})", told_not_done.len(), shorten(&told_not_done))
        },
    );
    if !twice.is_empty() {
        failures.push(format!("{} approvals executed more than once: {}", twice.len(), shorten(&twice)));
    }
    if !without.is_empty() {
        failures.push(format!(
            "{} refunds executed without the operator's approval: {}",
            without.len(),
            shorten(&without)
        ));
    }
    if !rejected_ran.is_empty() {
        failures.push(format!(
            "{} refunds executed although the operator rejected them: {}",
            rejected_ran.len(),
            shorten(&rejected_ran)
        ));
    }
}

/// At most 5 items, then how many more.
fn shorten(items: &[String]) -> String {
    let mut out = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        let _ = write!(out, " … and {} more", items.len() - 5);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_core::approval::ProposedAction;
    use swarm_core::domain::{Subtask, SubtaskResult};
    use swarm_core::effects::{Effect, EffectOutcome};

    use super::*;
    use crate::chaos::audit::ConversationAudit;
    use crate::chaos::operator::Decided;

    fn conversation(index: usize, status: ConversationStatus, reply: &str) -> Conversation {
        let mut c = Conversation::new("C106", &format!("Hello, this is chaos conversation {index}. Please"), 0, 120);
        c.status = status;
        c.total = 2;
        c.remaining = 0;
        c.finished = ["w01".to_owned(), "w02".to_owned()].into();
        c.reply = Some(reply.to_owned());
        c
    }

    fn subtask(c: &Conversation, id: &str, result: SubtaskResult) -> SubtaskRecord {
        let s = Subtask { id: id.into(), instruction: "i".into(), tools: vec![], depends_on: vec![] };
        let mut r = SubtaskRecord::new(c, s, "support".into());
        r.status = result.status();
        r.result = Some(result);
        r
    }

    /// A refund of 1.00 on `order` as subtask `id`'s first side effect, its journal entry in `state`.
    fn refund(c: &Conversation, id: &str, order: &str, result: SubtaskResult, state: EffectState) -> SubtaskRecord {
        let mut r = subtask(c, id, result);
        let mut e = Effect::intent(&c.id, &id.into(), 1, "shop__refund", serde_json::Map::new(), 0);
        e.state = state;
        e.approval_id = Some(approval_id(&c.id, &id.into(), 1));
        e.proposed = Some(action(order));
        r.effects.push(e);
        r
    }

    fn action(order: &str) -> ProposedAction {
        ProposedAction { tool: "shop__refund".into(), order_id: order.into(), amount_cents: 100, reason: None }
    }

    /// The approval of `c`'s subtask `id` as the store holds it at the end.
    fn approval(
        c: &Conversation,
        id: &str,
        order: &str,
        status: ApprovalStatus,
        outcome: Option<(&str, bool)>,
    ) -> Approval {
        Approval {
            id: approval_id(&c.id, &id.into(), 1),
            conversation_id: c.id.clone(),
            subtask_id: id.into(),
            ordinal: 1,
            customer_id: c.customer_id.clone(),
            role: "refund".into(),
            action: action(order),
            status,
            created_at_ms: 1_000,
            expires_at_ms: 9_000,
            decided_by: Some("local-operator".into()),
            decided_at_ms: Some(1_500),
            token: None,
            outcome: outcome.map(|(text, is_error)| EffectOutcome::new(text, is_error)),
            finished_at_ms: None,
            ttl: 0,
        }
    }

    fn decided(c: &Conversation, id: &str, order: &str, decision: Decision, twice: bool, posts: u32) -> Decided {
        Decided {
            conversation_id: c.id.to_string(),
            subtask_id: id.into(),
            order_id: order.into(),
            amount_cents: Some(100),
            decision,
            twice,
            approved_again: false,
            posts,
            answered: Some(200),
        }
    }

    fn ledger(order: &str, reason: Option<&str>, key: &str) -> LedgerRefund {
        LedgerRefund {
            order_id: order.into(),
            amount: 1.0,
            reason: reason.map(str::to_owned),
            idempotency_key: key.into(),
        }
    }

    /// Three conversations: c0's refund failed before it began (deadline), c1's refund was approved
    /// (posted twice) and ran once, c2's refund waits: the operator rejected it (after one post
    /// without an answer).
    fn facts() -> RunFacts {
        let ok = SubtaskResult::Succeeded { text: "t".into(), tool_calls: vec![] };
        let failed = SubtaskResult::failed(swarm_core::domain::FailureKind::DeadlinePassed, "late");
        let awaiting = SubtaskResult::AwaitingApproval { approvals: vec![] };
        let c0 = conversation(0, ConversationStatus::Done, "w01 fine\nw02: could not be done");
        let c1 = conversation(1, ConversationStatus::Done, "all fine");
        let c2 = conversation(2, ConversationStatus::Done, "w01 fine\nw02 waits for a person's approval");
        let subs0 = vec![subtask(&c0, "w01", ok.clone()), subtask(&c0, "w02", failed)];
        let subs1 = vec![subtask(&c1, "w01", ok.clone()), refund(&c1, "w02", "A1007", ok.clone(), EffectState::Done)];
        let subs2 = vec![subtask(&c2, "w01", ok), refund(&c2, "w02", "A1016", awaiting, EffectState::Rejected)];
        let mut log = AuditLog::default();
        for c in [&c0, &c1, &c2] {
            let mut a = ConversationAudit::default();
            a.status = "DONE".into();
            a.reply_writes = 1;
            a.terminal_at_ms = Some(2_000);
            log.conversations.insert(c.id.to_string(), a);
        }
        let operator = OperatorLog {
            decided: BTreeMap::from([
                (approval_id(&c1.id, &"w02".into(), 1), decided(&c1, "w02", "A1007", Decision::Approve, true, 2)),
                (approval_id(&c2.id, &"w02".into(), 1), decided(&c2, "w02", "A1016", Decision::Reject, false, 2)),
            ]),
            answers: BTreeMap::from([("200".into(), 3), ("no answer".into(), 1)]),
            polls: 7,
            failed_polls: 1,
        };
        RunFacts {
            backend: "embedded".into(),
            conversations_asked: 3,
            subtasks_each: 2,
            time_scale: 0.5,
            deadline: Duration::from_secs(60),
            faults: vec![FaultLine { name: "tool_error".into(), rate: 0.1, opportunities: 10, injected: 1 }],
            clients: BTreeMap::from([
                (0, ClientOutcome { conversation_id: Some(c0.id.to_string()), posts: 2, ..ClientOutcome::default() }),
                (1, ClientOutcome { conversation_id: Some(c1.id.to_string()), posts: 1, ..ClientOutcome::default() }),
                (2, ClientOutcome { conversation_id: Some(c2.id.to_string()), posts: 1, ..ClientOutcome::default() }),
            ]),
            refunds_asked: BTreeMap::from([
                (0, ("A1007".into(), "w02".into())),
                (1, ("A1007".into(), "w02".into())),
                (2, ("A1016".into(), "w02".into())),
            ]),
            audit: log,
            store: BTreeMap::from([
                (c0.id.to_string(), Some((c0.clone(), subs0))),
                (c1.id.to_string(), Some((c1.clone(), subs1))),
                (c2.id.to_string(), Some((c2.clone(), subs2))),
            ]),
            ledger: vec![ledger("A1007", Some("chaos c00001/w02 (draft 3)"), &format!("swarm:{}:w02:1", c1.id))],
            operator,
            approvals_at_end: BTreeMap::from([
                (
                    approval_id(&c1.id, &"w02".into(), 1),
                    Some(approval(&c1, "w02", "A1007", ApprovalStatus::Executed, Some(("refunded", false)))),
                ),
                (
                    approval_id(&c2.id, &"w02".into(), 1),
                    Some(approval(&c2, "w02", "A1016", ApprovalStatus::Rejected, None)),
                ),
            ]),
            concurrency: vec![("worker".into(), 10, 10)],
            ..RunFacts::default()
        }
    }

    /// The value of the table's row `name`.
    fn cell<'a>(table: &'a str, name: &str) -> &'a str {
        let line = table.lines().find(|l| l.starts_with(&format!("| {name} "))).unwrap();
        line.rsplit('|').nth(1).unwrap().trim()
    }

    #[test]
    fn a_clean_run_passes_and_its_table_says_what_happened() {
        let v = verdict(&facts());
        let t = &v.table;
        assert_eq!(v.failures, Vec::<String>::new(), "{t}");
        assert_eq!(
            cell(t, "conversations: done / handoff / failed / hung at the end"),
            "3 / 0 / 0 / 0 (of 3 in the store)"
        );
        assert_eq!(cell(t, "refunds per subtask: once / twice or more / unattributed"), "1 / 0 / 0");
        assert_eq!(cell(t, "subtasks by status at the end"), "awaiting_approval 1, failed 1, succeeded 4");
        assert_eq!(cell(t, "failed subtasks by kind (never began)"), "deadline_passed 1 (1 never began)");
        assert_eq!(
            cell(t, "refund subtasks by status at the end"),
            "awaiting_approval 1, failed before any attempt 1, succeeded 1"
        );
        assert_eq!(cell(t, "aggregations (reply writes) per conversation"), "1: 3");
        assert_eq!(
            cell(t, "refunded per order / approved / asked (CNY)"),
            "A1007 1.00/1.00/2.00, A1016 0.00/0.00/1.00"
        );
        assert_eq!(cell(t, "replies naming every failed or skipped subtask"), "1 of 1", "the failed w02 is named");
        assert_eq!(cell(t, "completion p50"), "2.00 s (4.00 s at the table's timings)");
        // Consent: what was asked, decided, answered, where each approval ended, the ledger against the decisions.
        assert_eq!(
            cell(t, "approvals asked (subtask journals) / decided by the operator"),
            "2 / 2 (0 asked and never decided)"
        );
        assert_eq!(
            cell(t, "operator: approved (again) / rejected / posted twice / gave up"),
            "1 (0) / 1 / 1 / 0 (7 GET /approvals, 1 failed)"
        );
        assert_eq!(cell(t, "operator POSTs by answer"), "200: 3, no answer: 1");
        assert_eq!(cell(t, "approvals by status at the end"), "executed 1, rejected 1");
        assert_eq!(cell(t, "executed approvals: the tool refunded / answered an error"), "1 / 0");
        assert_eq!(cell(t, "approved by the operator, not executed at the end"), "0");
        assert_eq!(cell(t, "refunds per approval: once / twice+ / unapproved / rejected"), "1 / 0 / 0 / 0");
        assert_eq!(cell(t, "side effects never confirmed (journal intent at the end)"), "0");
        assert_eq!(cell(t, "refunds made while their approval records an error"), "0");
        assert!(t.contains("PASSED"), "{t}");
    }

    #[test]
    fn a_conversation_handed_to_a_person_or_waiting_for_approval_is_answered_not_hung() {
        let mut f = facts();
        let ids: Vec<String> = f.store.keys().cloned().collect();
        // c2 answered and handed to a person, its refund subtask still waiting; c1's approval approved, not run yet.
        f.store.get_mut(&ids[2]).unwrap().as_mut().unwrap().0.status = ConversationStatus::Handoff;
        f.audit.conversations.get_mut(&ids[2]).unwrap().status = "HANDOFF".into();
        f.ledger.clear();
        let c1 = approval_id(&ConversationId::from_trusted(ids[1].clone()), &"w02".into(), 1);
        f.approvals_at_end.get_mut(&c1).unwrap().as_mut().unwrap().status = ApprovalStatus::Approved;
        let v = verdict(&f);
        assert_eq!(v.failures, Vec::<String>::new(), "{}", v.table);
        assert_eq!(
            cell(&v.table, "conversations: done / handoff / failed / hung at the end"),
            "2 / 1 / 0 / 0 (of 3 in the store)"
        );
        assert_eq!(cell(&v.table, "approvals by status at the end"), "approved 1, rejected 1");
        assert_eq!(cell(&v.table, "approved by the operator, not executed at the end"), format!("1 ({c1})"));
        assert_eq!(cell(&v.table, "refunds per approval: once / twice+ / unapproved / rejected"), "0 / 0 / 0 / 0");
        // A HANDOFF with no reply write in the stream is an answer that was never written.
        f.audit.conversations.get_mut(&ids[2]).unwrap().reply_writes = 0;
        let v = verdict(&f);
        assert_eq!(v.failures, vec!["1 conversations DONE or HANDOFF without a reply write in the stream".to_owned()]);
    }

    #[test]
    fn an_accepted_conversation_that_ended_failed_is_shown_by_scenario_but_is_no_failure() {
        assert_eq!(cell(&verdict(&facts()).table, "accepted (202) but ended FAILED"), "0");
        let mut f = facts();
        let id = f.clients[&1].conversation_id.clone().unwrap();
        f.store.get_mut(&id).unwrap().as_mut().unwrap().0.status = ConversationStatus::Failed;
        let v = verdict(&f);
        assert_eq!(cell(&v.table, "accepted (202) but ended FAILED"), format!("1 (c1 {id})"));
        assert_eq!(v.failures, Vec::<String>::new(), "{}", v.table);
    }

    #[test]
    fn every_broken_guarantee_is_a_failure_with_its_conversation() {
        let mut f = facts();
        let ids: Vec<String> = f.store.keys().cloned().collect();
        // Hung, double count, double aggregation, a refund twice (same subtask, same approval), a
        // refund nobody asked for, refunds without an approval and against a rejection, a refund
        // while the subtask reports failure, a kind never injected, a lost conversation.
        if let Some(Some((c, _))) = f.store.get_mut(&ids[1]) {
            c.status = ConversationStatus::Running;
        }
        f.audit.conversations.get_mut(&ids[0]).unwrap().double_counts = 1;
        f.audit.conversations.get_mut(&ids[0]).unwrap().reply_writes = 2;
        f.ledger.push(f.ledger[0].clone());
        f.ledger.push(ledger("A1007", Some("chaos c00000/w02"), &format!("swarm:{}:w02:1", ids[0])));
        f.ledger.push(ledger("A1016", None, "shop-direct-7"));
        f.ledger.push(ledger("A1016", Some("chaos c00002/w02"), &format!("swarm:{}:w02:1", ids[2])));
        let c1_subtasks = &mut f.store.get_mut(&ids[1]).unwrap().as_mut().unwrap().1;
        c1_subtasks[1].effects[0].state = EffectState::Intent;
        f.faults.push(FaultLine { name: "tool_hang".into(), rate: 0.1, opportunities: 3, injected: 0 });
        f.store.insert("gone".into(), None);
        f.clients
            .insert(3, ClientOutcome { conversation_id: Some("gone".into()), posts: 1, ..ClientOutcome::default() });
        f.store.insert("phantom".into(), None);
        let v = verdict(&f);
        let joined = v.failures.join("\n");
        for expected in [
            "1 conversations hung (RUNNING 1)".to_owned(),
            "counts applied twice".to_owned(),
            "aggregated more than once".to_owned(),
            "subtasks refunded more than once: c1/w02 (2×)".to_owned(),
            format!("1 approvals executed more than once: {}.w02.1 (2×)", ids[1]),
            "1 refunds no scripted subtask asked for".to_owned(),
            format!("2 refunds executed without the operator's approval: key \"shop-direct-7\", {}.w02.1", ids[0]),
            format!("1 refunds executed although the operator rejected them: {}.w02.1", ids[2]),
            "A1007: 3.00 CNY refunded, 1.00 approved, 2.00 asked".to_owned(),
            "A1016: 2.00 CNY refunded, 0.00 approved, 1.00 asked".to_owned(),
            "ran while the customer is told they failed: c0/w02".to_owned(),
            "fault kind tool_hang was injected 0 times".to_owned(),
            "1 subtasks left \"being confirmed\" for good (an intent nobody confirms): c1/w02".to_owned(),
            "1 conversations lost: gone (never in the stream)".to_owned(),
        ] {
            assert!(joined.contains(&expected), "missing {expected:?} in:\n{joined}");
        }
        assert!(joined.contains(&format!("{} (c1, RUNNING)", ids[1])), "the hung conversation is named: {joined}");
        assert!(v.table.contains("FAILED:"));
        assert!(!joined.contains("phantom"), "a conversation no client was given is not lost");
        assert_eq!(cell(&v.table, "conversations in the stream, never in the table"), "1");
        assert_eq!(cell(&v.table, "conversations lost (answered 202, absent at the end)"), "1");
        assert_eq!(cell(&v.table, "refunds per approval: once / twice+ / unapproved / rejected"), "0 / 1 / 2 / 1");
        // The approval of a refund the ledger holds, recorded as refused: shown, not (yet) a failure.
        let c1 = approval_id(&ConversationId::from_trusted(ids[1].clone()), &"w02".into(), 1);
        f.approvals_at_end.get_mut(&c1).unwrap().as_mut().unwrap().outcome =
            Some(EffectOutcome::new("the tool failed: upstream error (injected)", true));
        let again = verdict(&f);
        assert_eq!(
            cell(&again.table, "refunds made while their approval records an error"),
            format!("1 ({c1}: \"the tool failed: upstream error (injected)\")")
        );
        assert_eq!(again.failures, v.failures);
    }

    #[test]
    fn a_side_effect_key_names_its_approval_and_any_other_key_none() {
        let id = ConversationId::from_trusted("01a2304e-b979-7438-8586-8f52d57d0ee0");
        let key = swarm_core::effects::effect_key(&id, &"w08".into(), 1);
        assert_eq!(approval_of_key(&key), Some(approval_id(&id, &"w08".into(), 1)));
        assert_eq!(approval_of_key("swarm:c:w08:12"), Some("c.w08.12".to_owned()));
        for other in ["shop-direct-7", "swarm:c:w08:x", "swarm::w08:1", "swarm:c::1", "swarm:a:b:w08:1", "swarm:w08:1"]
        {
            assert_eq!(approval_of_key(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_reply_names_a_subtask_only_as_a_whole_word() {
        assert!(names("w02: could not be done", "w02"));
        assert!(names("- Refund (w20)", "w20"));
        assert!(!names("w020 is fine", "w02"));
        assert!(!names("xw02", "w02"));
        let c = conversation(0, ConversationStatus::Done, "");
        let mut s = subtask(&c, "w03", SubtaskResult::Skipped { dependency: "w01".into() });
        s.subtask.instruction = "Refund 1.00 CNY on order A1007 [call shop__refund {}]".into();
        assert!(names_subtask("- Refund 1.00 CNY on order A1007 [call shop__refund {}] (not done)", &s));
        assert!(names_subtask("w03: could not be done", &s));
        assert!(!names_subtask("Refund done", &s));
        assert_eq!(percentile(&[Duration::from_secs(1), Duration::from_secs(3)], 0.5), Some(Duration::from_secs(1)));
        assert_eq!(percentile(&[], 0.99), None);
    }
}
