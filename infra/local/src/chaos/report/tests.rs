//! The verdict's tests: a clean run, every broken guarantee, and a run too small to be conclusive.

use std::collections::BTreeMap;
use std::time::Duration;

use swarm_core::approval::{Approval, ApprovalStatus, ProposedAction, approval_id};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus,
};
use swarm_core::effects::{Effect, EffectOutcome, EffectState};

use super::conversations::{names, names_subtask};
use super::sheet::percentile;
use super::*;
use crate::chaos::audit::{AuditLog, ConversationAudit};
use crate::chaos::operator::{Decided, Decision, OperatorLog};

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
    // Every subtask began but one the deadline closed.
    r.attempts = u32::from(!matches!(&result, SubtaskResult::Failed { kind: FailureKind::DeadlinePassed, .. }));
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
        reissued_at_ms: None,
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
        amount_cents: 100,
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
        a.status = Some(ConversationStatus::Done);
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
    assert_eq!(cell(t, "refunded per order / approved / asked (CNY)"), "A1007 1.00/1.00/2.00, A1016 0.00/0.00/1.00");
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
    assert_eq!(cell(t, "accepted (202), ended with no subtask ever begun"), "0");
    assert_eq!(cell(t, "store faults by operation (answer lost / throttled)"), "none");
    assert_eq!(
        cell(t, "subtasks failed though every fault they met was recoverable"),
        "1 of 1 failed (0 met a poisoned message or a rejected approval)"
    );
    assert!(t.contains("PASSED"), "{t}");
}

#[test]
fn an_accepted_conversation_ended_with_no_subtask_begun_fails_the_run_and_a_poisoned_subtask_is_excused() {
    let mut f = facts();
    let ids: Vec<String> = f.store.keys().cloned().collect();
    let (_, subs0) = f.store.get_mut(&ids[0]).unwrap().as_mut().unwrap();
    subs0[0].attempts = 0;
    let v = verdict(&f);
    assert_eq!(cell(&v.table, "accepted (202), ended with no subtask ever begun"), "1");
    assert_eq!(v.outcome, Outcome::Failed);
    assert!(
        v.failures[0].starts_with("1 accepted conversations ended with no subtask ever begun: c0 "),
        "{:?}",
        v.failures
    );
    // Every subtask of c0 poisoned (each fails on every receive before its attempt begins): excused.
    let poisoned: Vec<String> =
        f.store[&ids[0]].as_ref().unwrap().1.iter().map(|s| s.subtask.id.as_str().to_owned()).collect();
    for s in &poisoned {
        f.unrecoverable.insert((ids[0].clone(), s.clone()));
    }
    let attempts: Vec<u32> = f.store[&ids[0]].as_ref().unwrap().1.iter().map(|s| s.attempts).collect();
    for s in f.store.get_mut(&ids[0]).unwrap().as_mut().unwrap().1.iter_mut() {
        s.attempts = 0;
    }
    let v = verdict(&f);
    assert_eq!(cell(&v.table, "accepted (202), ended with no subtask ever begun"), "0", "{}", v.table);
    f.unrecoverable.clear();
    for (s, a) in f.store.get_mut(&ids[0]).unwrap().as_mut().unwrap().1.iter_mut().zip(attempts) {
        s.attempts = a;
    }
    // c0's w02 met a poisoned message: its failure is not counted as one the platform could have avoided.
    subs0_begun(&mut f, &ids[0]);
    f.unrecoverable.insert((ids[0].clone(), "w02".to_owned()));
    let v = verdict(&f);
    assert_eq!(v.failures, Vec::<String>::new(), "{}", v.table);
    assert_eq!(
        cell(&v.table, "subtasks failed though every fault they met was recoverable"),
        "0 of 1 failed (1 met a poisoned message or a rejected approval)"
    );
}

fn subs0_begun(f: &mut RunFacts, id: &str) {
    f.store.get_mut(id).unwrap().as_mut().unwrap().1[0].attempts = 1;
}

#[test]
fn poisoned_messages_with_no_dlq_consumer_invocation_fail_the_run() {
    let mut f = facts();
    f.dead_letters = DeadLetterFacts { poisoned: 2, dead_lettered: 0, acknowledged: 0, invocations: 0 };
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Failed);
    assert!(
        v.failures.contains(&"2 messages poisoned, but the DLQ consumer was never invoked".to_owned()),
        "{:?}",
        v.failures
    );
}

#[test]
fn a_conversation_handed_to_a_person_or_waiting_for_approval_is_answered_not_hung() {
    let mut f = facts();
    let ids: Vec<String> = f.store.keys().cloned().collect();
    // c2 answered and handed to a person, its refund subtask still waiting; c1's approval approved, not run yet.
    f.store.get_mut(&ids[2]).unwrap().as_mut().unwrap().0.status = ConversationStatus::Handoff;
    f.audit.conversations.get_mut(&ids[2]).unwrap().status = Some(ConversationStatus::Handoff);
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
fn a_terminal_conversation_with_a_subtask_still_open_fails_the_run_naming_it() {
    assert_eq!(cell(&verdict(&facts()).table, "terminal conversations with subtasks still open"), "0");
    let mut f = facts();
    let ids: Vec<String> = f.store.keys().cloned().collect();
    // c1 ended FAILED with w01 still queued and w02 still waiting for it: work shown as to come.
    let (c1, subs1) = f.store.get_mut(&ids[1]).unwrap().as_mut().unwrap();
    c1.status = ConversationStatus::Failed;
    for (s, status) in subs1.iter_mut().zip([SubtaskStatus::Queued, SubtaskStatus::Pending]) {
        s.status = status;
        s.result = None;
        s.attempts = 0;
        s.effects.clear();
    }
    f.ledger.clear();
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Failed, "{}", v.table);
    assert_eq!(cell(&v.table, "terminal conversations with subtasks still open"), "1 (2 subtasks)");
    assert!(
        v.failures.contains(&format!(
            "1 terminal conversations with 2 subtasks still open: c1 {} (FAILED: w01 QUEUED, w02 PENDING)",
            ids[1]
        )),
        "{:?}",
        v.failures
    );
    // A conversation not terminal is hung, not this: its open subtasks are not named again.
    f.store.get_mut(&ids[1]).unwrap().as_mut().unwrap().0.status = ConversationStatus::Running;
    let v = verdict(&f);
    assert_eq!(cell(&v.table, "terminal conversations with subtasks still open"), "0");
    assert!(v.failures.iter().any(|x| x.starts_with("1 conversations hung (RUNNING 1)")), "{:?}", v.failures);
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
    f.clients.insert(3, ClientOutcome { conversation_id: Some("gone".into()), posts: 1, ..ClientOutcome::default() });
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
    for other in ["shop-direct-7", "swarm:c:w08:x", "swarm::w08:1", "swarm:c::1", "swarm:a:b:w08:1", "swarm:w08:1"] {
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

#[test]
fn a_run_too_small_to_inject_every_kind_is_inconclusive_with_rates_sized_for_it() {
    assert_eq!(verdict(&facts()).outcome, Outcome::Passed);
    let mut f = facts();
    f.faults.push(FaultLine { name: "tool_hang".into(), rate: 0.1, opportunities: 3, injected: 0 });
    let v = verdict(&f);
    assert_eq!((v.outcome, v.outcome.exit_code()), (Outcome::Inconclusive, 2));
    assert_eq!(v.failures, vec!["fault kind tool_hang was injected 0 times".to_owned()]);
    assert!(v.table.contains("inconclusive: too small") && !v.table.contains("FAILED:"), "{}", v.table);
    assert!(v.table.contains("--tool-hang-rate 0.67"), "{}", v.table);
    // A broken guarantee beside it: failed, whatever the coverage.
    f.audit.conversations.values_mut().next().unwrap().double_counts = 1;
    let v = verdict(&f);
    assert_eq!((v.outcome, v.outcome.exit_code()), (Outcome::Failed, 1));
    assert!(v.table.contains("FAILED:"), "{}", v.table);
}

#[test]
fn dead_lettered_messages_require_the_dlq_consumer_and_every_poisoned_message_must_reach_a_dlq() {
    let mut f = facts();
    f.dead_letters = DeadLetterFacts { poisoned: 2, dead_lettered: 2, acknowledged: 2, invocations: 2 };
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Passed, "{}", v.table);
    assert_eq!(
        cell(&v.table, "messages dead-lettered / acknowledged by the DLQ consumer"),
        "2 / 2 (2 DLQ consumer invocations)"
    );
    assert_eq!(cell(&v.table, "messages poisoned (failed on every receive)"), "2");

    f.dead_letters = DeadLetterFacts { poisoned: 3, dead_lettered: 2, acknowledged: 1, invocations: 0 };
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Failed, "{}", v.table);
    assert_eq!(
        v.failures,
        vec![
            "2 messages dead-lettered, but the DLQ consumer was never invoked".to_owned(),
            "1 of 2 dead-lettered messages never acknowledged by the DLQ consumer".to_owned(),
            "1 of 3 poisoned messages never reached a DLQ (redrive policy, or a settle time shorter than max_receive_count receives)".to_owned(),
        ]
    );
}

#[test]
fn a_scripted_ticket_opened_twice_or_one_nobody_asked_for_fails_the_run() {
    let ticket = |subject: &str, key: &str| LedgerTicket {
        order_id: "A1007".into(),
        subject: subject.into(),
        idempotency_key: key.into(),
    };
    let mut f = facts();
    f.tickets = vec![
        ticket("Parcel (chaos c00000/w03)", "swarm:x:w03:1"),
        ticket("Invoice (chaos c00000/w03)", "swarm:x:w03:2"),
    ];
    let v = verdict(&f);
    assert_eq!(v.failures, Vec::<String>::new(), "two different scripted tickets of one subtask: {}", v.table);
    assert_eq!(cell(&v.table, "support tickets per scripted call: once / twice or more / unattributed"), "2 / 0 / 0");
    f.tickets.push(ticket("Parcel (chaos c00000/w03)", "swarm:x:w03:3"));
    f.tickets.push(ticket("Who knows", "swarm:x:w03:4"));
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Failed);
    assert_eq!(cell(&v.table, "support tickets per scripted call: once / twice or more / unattributed"), "1 / 1 / 1");
    assert!(v.failures.iter().any(|x| x.contains("c0/w03 Parcel (2×)")), "{:?}", v.failures);
    assert!(
        v.failures.iter().any(|x| x.contains("1 support tickets no scripted subtask asked for")),
        "{:?}",
        v.failures
    );
}

#[test]
fn a_restart_is_told_and_one_asked_for_that_never_came_or_found_nothing_open_is_inconclusive() {
    let mut f = facts();
    let restart = RestartFacts {
        killed_at: Duration::from_secs(30),
        accepted_at_kill: 6,
        open_at_kill: 3,
        open_ids: vec![f.clients[&0].conversation_id.clone().unwrap(), "b".into(), "c".into()],
        restarted_in: Duration::from_millis(5_500),
        backend: "stack s reused".into(),
        accepted_after: 4,
    };
    f.restart = Some(Some(restart.clone()));
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Passed, "{}", v.table);
    assert_eq!(
        cell(&v.table, "restart (kill -9, then the same stack)"),
        "at 30.00 s after 6 accepted, 3 of them open; up again in 5.50 s"
    );
    assert_eq!(cell(&v.table, "conversations accepted after the restart"), "4");
    assert_eq!(
        cell(&v.table, "of those, in the conversations open at the restart"),
        "1 of 1 (in 3 conversations open)"
    );
    f.restart = Some(Some(RestartFacts { open_at_kill: 0, ..restart }));
    assert_eq!(verdict(&f).outcome, Outcome::Inconclusive);
    f.restart = Some(None);
    let v = verdict(&f);
    assert_eq!(v.outcome, Outcome::Inconclusive);
    assert!(v.failures.iter().any(|x| x.contains("the restart asked for never came")), "{:?}", v.failures);
}

#[test]
fn the_share_of_subtasks_succeeded_leaves_out_the_rejected_and_fails_the_run_only_under_min_succeeded() {
    // c0's w02 failed at the deadline (counted, not succeeded); c2's w02 was rejected by the operator (left out).
    let v = verdict(&facts());
    assert_eq!(
        cell(&v.table, "subtasks SUCCEEDED / counted (excluded: awaiting an operator, rejected)"),
        "4 / 5 = 80.00 % (excluded: 0, 1)"
    );
    assert_eq!(v.outcome, Outcome::Passed, "not judged without --min-succeeded: {}", v.table);
    assert_eq!(cell(&v.table, "subtasks short of SUCCEEDED by step"), "w02: deadline_passed never began 1");
    let judged = verdict(&RunFacts { min_succeeded: Some(0.8), ..facts() });
    assert_eq!(judged.outcome, Outcome::Passed, "80 % meets 0.8: {}", judged.table);
    let strict = verdict(&RunFacts { min_succeeded: Some(0.99), ..facts() });
    assert_eq!(strict.outcome, Outcome::Failed);
    assert_eq!(
        strict.failures,
        vec!["80.00 % of the subtasks counted ended SUCCEEDED, under --min-succeeded 99.00 %".to_owned()]
    );
    // A subtask awaiting an operator (no rejection) is left out as well.
    let mut waiting = facts();
    for (c, subtasks) in waiting.store.values_mut().flatten() {
        if c.id.to_string() == waiting.clients[&2].conversation_id.clone().unwrap() {
            subtasks[1].effects[0].state = EffectState::AwaitingApproval;
        }
    }
    waiting.operator.decided.retain(|_, d| d.decision != Decision::Reject);
    assert_eq!(
        cell(&verdict(&waiting).table, "subtasks SUCCEEDED / counted (excluded: awaiting an operator, rejected)"),
        "4 / 5 = 80.00 % (excluded: 1, 0)"
    );
}
