//! Contract tests of the turns told without the customer (`tell_turn`, `settle_decided`, the notices in `conversation_history`, and the teller over them), written once and run against the embedded store and DynamoDB on a local emulator: a decision is told once as a swarm-authored turn whatever is retried, lost, concurrent or killed between its writes.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (see `contract_store.rs`); without it
//! they fail, unless `SWARM_SKIP_AWS=1`.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use swarm_core::action::{EffectOutcome, ProposedAction};
use swarm_core::approval::{PendingApproval, approval_id};
use swarm_core::decisions::{TellOutcome, ToldTurn, tell_decisions};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Subtask, SubtaskId, SubtaskRecord, SubtaskResult,
    SubtaskStatus, TurnAuthor, Usage, now_ms,
};
use swarm_core::effects::{AttemptLease, Effect, EffectChange, EffectState};
use swarm_core::faults::{self, CrashPoint, FaultPlan, Invocation};
use swarm_core::language::Language;
use swarm_core::ports::{ConversationStore, CountOutcome, CreateOutcome, LeaseOutcome, LeasePhase, StoreOp};

use common::lossy::{answer_lost, losing};

type Store = Arc<dyn ConversationStore>;

contract_tests!(
    a_rejection_is_told_once_as_a_swarm_turn_and_its_subtask_moves_on,
    an_approved_refund_that_ran_is_told_with_its_receipt_in_the_customer_s_script,
    a_decision_waits_while_a_customer_turn_runs_and_is_told_after_it_ends,
    a_tell_whose_answer_was_lost_is_recognised_as_told_when_retried,
    of_two_concurrent_tellers_one_tells_the_decision,
    a_teller_killed_between_settling_and_telling_leaves_it_for_the_next,
    an_operator_answer_is_told_once_by_its_key_and_only_on_the_turn_read,
    an_answerer_killed_before_telling_leaves_the_decision_to_the_next_reader,
);

const IDLE: Duration = Duration::from_secs(3_600);

// ------------------------------------------------------------------ fixtures

/// A `DONE` conversation (message `message`) whose one subtask `w01` waits for the approval of a
/// refund of 1874.00 on order A1033 (`AWAITING_APPROVAL`, counted, answered). Answers it and the approval id.
async fn awaiting(store: &Store, message: &str) -> Result<(Conversation, String)> {
    let mut conv = Conversation::new("C108", message, now_ms(), 120);
    conv.language = Some(Language::detect(message, None));
    conv.expires_at_ms = Some(now_ms() + 3_600_000);
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let sid = SubtaskId::from("w01");
    let subtask = Subtask { id: sid.clone(), instruction: "refund".into(), tools: vec![], depends_on: vec![] };
    let record = SubtaskRecord::new(&conv, subtask, "refund".into());
    ensure!(store.start_run(&conv.id, None, &[record], &[], &Usage::default()).await?, "start_run refused");
    let lease = AttemptLease::new(now_ms() + 60_000);
    store.begin_attempt(&conv.id, &sid, &lease, now_ms()).await?;
    let intent = Effect::intent(&conv.id, &sid, 1, "shop__refund", serde_json::Map::new(), now_ms());
    store.record_intent(&conv.id, &sid, &lease.holder, &intent).await?;
    let approval = approval_id(&conv.id, &sid, 1);
    let action =
        ProposedAction { tool: "shop__refund".into(), order_id: "A1033".into(), amount_cents: 187_400, reason: None };
    let waits = EffectChange {
        state: EffectState::AwaitingApproval,
        outcome: None,
        approval_id: Some(approval.clone()),
        proposed: Some(action.clone()),
        at_ms: now_ms(),
    };
    store.record_effect_outcome(&conv.id, &sid, 1, &waits).await?;
    let result =
        SubtaskResult::AwaitingApproval { approvals: vec![PendingApproval { approval_id: approval.clone(), action }] };
    store.record_result(&conv.id, &sid, &result, &Usage::default(), &[], now_ms()).await?;
    ensure!(matches!(store.count_finished(&conv.id, &sid, &Usage::default()).await?, CountOutcome::Counted { .. }));
    let now = now_ms();
    let lease = store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "agg:t", now, now + 90_000).await?;
    ensure!(lease == LeaseOutcome::Acquired { taken_over: None }, "aggregation lease: {lease:?}");
    ensure!(store.finish_conversation(&conv.id, 0, "it waits for review", &Usage::default()).await?);
    Ok((store.get_conversation(&conv.id).await?.context("missing")?, approval))
}

/// Starts turn 1 of `t0` (a customer's follow-up, `PLANNING` under a live planning lease).
async fn follow_up(store: &Store, t0: &Conversation) -> Result<Conversation> {
    let now = now_ms();
    let next = swarm_core::domain::NextTurn {
        turn: 1,
        query: "any news?".into(),
        language: Language::English,
        idempotency_key: None,
        request_hash: "h1".into(),
        trace_parent: None,
        lease: swarm_core::domain::Lease { holder: "o:1".into(), until_ms: now + 35_000, turn: 1 },
        started_at_ms: now,
        deadline_ms: now + 120_000,
        expires_at_ms: now + 3_600_000,
        sweep_shard: 1,
    };
    match store.start_turn(t0, &next, now).await? {
        swarm_core::ports::TurnOutcome::Started(c) => Ok(c),
        refused => anyhow::bail!("turn 1 not started: {refused:?}"),
    }
}

/// Closes the approval's journal entry as `state` (with `outcome`), as the approvals API or the refund worker does.
async fn close(store: &Store, id: &ConversationId, state: EffectState, outcome: Option<EffectOutcome>) -> Result<()> {
    let change = EffectChange { state, outcome, approval_id: None, proposed: None, at_ms: now_ms() };
    store.record_effect_outcome(id, &"w01".into(), 1, &change).await?.context("no entry")?;
    Ok(())
}

async fn conversation(store: &Store, id: &ConversationId) -> Result<Conversation> {
    store.get_conversation(id).await?.context("missing")
}

async fn subtask(store: &Store, id: &ConversationId) -> Result<SubtaskRecord> {
    store.get_subtask(id, &"w01".into()).await?.context("no w01")
}

// ------------------------------------------------------------------ the contract

async fn a_rejection_is_told_once_as_a_swarm_turn_and_its_subtask_moves_on(store: Store) -> Result<()> {
    let (t0, approval) = awaiting(&store, "Please refund order A1033.").await?;
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert!(told.turns.is_empty() && !told.deferred, "nothing is decided yet: {told:?}");
    close(&store, &t0.id, EffectState::Rejected, Some(EffectOutcome::new("a person rejected it", true))).await?;
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert_eq!(told.turns, [1]);
    let t1 = conversation(&store, &t0.id).await?;
    assert_eq!((t1.turn, t1.status, t1.author), (1, ConversationStatus::Done, TurnAuthor::Swarm));
    let reply = t1.reply.clone().unwrap_or_default();
    assert!(reply.contains("A1033") && reply.contains("1874.00") && reply.contains("did not approve"), "{reply}");
    assert!(t1.expires_at_ms >= t0.expires_at_ms && t1.sweep_shard.is_none() && t1.lease.is_none());
    let w01 = subtask(&store, &t0.id).await?;
    assert_eq!(w01.status, SubtaskStatus::Failed);
    assert_eq!(w01.result.and_then(|r| r.failure_kind()), Some(FailureKind::NotApproved));
    let history = store.conversation_history(&t0.id).await?;
    assert_eq!(history.turns.len(), 1);
    assert_eq!(
        (history.turns[0].reply.as_deref(), history.turns[0].author),
        (Some("it waits for review"), TurnAuthor::Customer)
    );
    assert_eq!(history.notices.len(), 1);
    assert_eq!((history.notices[0].key.as_str(), history.notices[0].turn), (approval.as_str(), 1));
    // Told once: every later teller finds it told.
    let again = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert!(again.turns.is_empty(), "{again:?}");
    assert_eq!(conversation(&store, &t0.id).await?.turn, 1);
    Ok(())
}

async fn an_approved_refund_that_ran_is_told_with_its_receipt_in_the_customer_s_script(store: Store) -> Result<()> {
    let (t0, _) = awaiting(&store, "我想退掉订单 A1033 的款").await?;
    let receipt =
        r#"{"refunded":true,"refund_id":"RF-A1033-1","order_id":"A1033","amount":"1874.00","currency":"CNY"}"#;
    close(&store, &t0.id, EffectState::Done, Some(EffectOutcome::new(receipt, false))).await?;
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert_eq!(told.turns, [1]);
    let t1 = conversation(&store, &t0.id).await?;
    let reply = t1.reply.clone().unwrap_or_default();
    assert!(reply.contains("RF-A1033-1") && reply.contains("1874.00 CNY") && reply.contains("退款已完成"), "{reply}");
    assert_eq!(t1.language, Some(Language::SimplifiedChinese));
    assert_eq!(subtask(&store, &t0.id).await?.status, SubtaskStatus::Succeeded);
    Ok(())
}

async fn a_decision_waits_while_a_customer_turn_runs_and_is_told_after_it_ends(store: Store) -> Result<()> {
    let (t0, _) = awaiting(&store, "Please refund order A1033.").await?;
    // The customer's follow-up is running (PLANNING) when the decision lands.
    follow_up(&store, &t0).await?;
    close(&store, &t0.id, EffectState::Rejected, None).await?;
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert!(told.deferred && told.turns.is_empty(), "{told:?}");
    let t1 = conversation(&store, &t0.id).await?;
    assert_eq!((t1.turn, t1.status, t1.author), (1, ConversationStatus::Planning, TurnAuthor::Customer));
    assert_eq!(subtask(&store, &t0.id).await?.status, SubtaskStatus::AwaitingApproval, "nothing written while it runs");
    // The customer's turn ends; its ender (or the next reader) tells the decision after it.
    ensure!(store.fail_conversation(&t0.id, 1, "test: the turn ended").await?);
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert_eq!(told.turns, [2]);
    let history = store.conversation_history(&t0.id).await?;
    let authors: Vec<(u32, TurnAuthor)> = history.turns.iter().map(|t| (t.turn, t.author)).collect();
    assert_eq!(authors, [(0, TurnAuthor::Customer), (1, TurnAuthor::Customer)]);
    assert_eq!(conversation(&store, &t0.id).await?.author, TurnAuthor::Swarm);
    Ok(())
}

async fn a_tell_whose_answer_was_lost_is_recognised_as_told_when_retried(store: Store) -> Result<()> {
    let (t0, approval) = awaiting(&store, "Please refund order A1033.").await?;
    close(&store, &t0.id, EffectState::Rejected, None).await?;
    let (decorator, lossy) = losing(&store);
    let told = ToldTurn::new(&approval, TurnAuthor::Swarm, "rejected".into(), Language::English, now_ms(), IDLE);
    decorator.lose(StoreOp::TellTurn)?;
    answer_lost(lossy.tell_turn(&t0, &told).await)?;
    match lossy.tell_turn(&t0, &told).await? {
        TellOutcome::AlreadyTold(n) => assert_eq!((n.key.as_str(), n.turn), (approval.as_str(), 1)),
        other => anyhow::bail!("expected AlreadyTold, got {other:?}"),
    }
    let history = store.conversation_history(&t0.id).await?;
    assert_eq!((history.turns.len(), history.notices.len()), (1, 1), "archived and told once");
    // The teller finds it told, and writes no second turn.
    let again = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert!(again.turns.is_empty());
    assert_eq!(conversation(&store, &t0.id).await?.turn, 1);
    Ok(())
}

async fn of_two_concurrent_tellers_one_tells_the_decision(store: Store) -> Result<()> {
    let (t0, _) = awaiting(&store, "Please refund order A1033.").await?;
    close(&store, &t0.id, EffectState::Rejected, None).await?;
    let (a, b) = tokio::join!(
        tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE),
        tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE)
    );
    let told: Vec<u32> = a?.turns.into_iter().chain(b?.turns).collect();
    assert_eq!(told, [1], "one turn between them");
    let history = store.conversation_history(&t0.id).await?;
    assert_eq!((history.turns.len(), history.notices.len()), (1, 1));
    Ok(())
}

/// Crashes an invocation at one point.
struct CrashAt(CrashPoint);

impl FaultPlan for CrashAt {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0
    }
}

async fn a_teller_killed_between_settling_and_telling_leaves_it_for_the_next(store: Store) -> Result<()> {
    let (t0, _) = awaiting(&store, "Please refund order A1033.").await?;
    close(&store, &t0.id, EffectState::Expired, Some(EffectOutcome::new("expired", true))).await?;
    let invocation = Invocation::new(Arc::new(CrashAt(CrashPoint::DecisionAfterSettle)));
    let teller = faults::with_plan(invocation.clone(), tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE));
    let died = tokio::select! {
        _ = teller => false,
        () = invocation.killed() => true,
    };
    ensure!(died, "the teller ran past its crash point");
    assert_eq!(subtask(&store, &t0.id).await?.status, SubtaskStatus::Failed, "settled before the crash");
    assert_eq!(conversation(&store, &t0.id).await?.turn, 0, "nothing told yet");
    // The next teller (a reader, the next turn's end) tells it; the settle is not repeated.
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert_eq!(told.turns, [1]);
    let reply = conversation(&store, &t0.id).await?.reply.unwrap_or_default();
    assert!(reply.contains("expired"), "{reply}");
    Ok(())
}

async fn an_operator_answer_is_told_once_by_its_key_and_only_on_the_turn_read(store: Store) -> Result<()> {
    let (t0, _) = awaiting(&store, "Please refund order A1033.").await?;
    let answer =
        ToldTurn::new("op:k1", TurnAuthor::Operator, "I'll call you".into(), Language::English, now_ms(), IDLE);
    let TellOutcome::Told(t1) = store.tell_turn(&t0, &answer).await? else { anyhow::bail!("not told") };
    assert_eq!((t1.turn, t1.author, t1.reply.as_deref()), (1, TurnAuthor::Operator, Some("I'll call you")));
    assert!(matches!(store.tell_turn(&t0, &answer).await?, TellOutcome::AlreadyTold(n) if n.turn == 1));
    // Another key on the stale read is refused: the conversation moved on.
    let other = ToldTurn::new("op:k2", TurnAuthor::Operator, "again".into(), Language::English, now_ms(), IDLE);
    assert!(matches!(store.tell_turn(&t0, &other).await?, TellOutcome::Refused(Some(c)) if c.turn == 1));
    let TellOutcome::Told(t2) = store.tell_turn(&t1, &other).await? else { anyhow::bail!("not told on turn 1") };
    assert_eq!(t2.turn, 2);
    assert_eq!(store.conversation_history(&t0.id).await?.notices.len(), 2);
    Ok(())
}

async fn an_answerer_killed_before_telling_leaves_the_decision_to_the_next_reader(store: Store) -> Result<()> {
    use swarm_core::answer::{Answerer, ModelFreeReply, answer_conversation};
    let (t0, _) = awaiting(&store, "Please refund order A1033.").await?;
    // Turn 1 runs one subtask; the rejection lands while it runs.
    let t1 = follow_up(&store, &t0).await?;
    let sid = SubtaskId::from("t1~w01");
    let planned = Subtask { id: sid.clone(), instruction: "look".into(), tools: vec![], depends_on: vec![] };
    let record = SubtaskRecord::new(&t1, planned, "general".into());
    ensure!(store.start_run(&t1.id, Some("o:1"), &[record], &[], &Usage::default()).await?, "turn 1's plan");
    close(&store, &t0.id, EffectState::Rejected, None).await?;
    let result = SubtaskResult::Succeeded { text: "A1033 is delivered.".into(), tool_calls: vec![] };
    store.record_result(&t1.id, &sid, &result, &Usage::default(), &[], now_ms()).await?;
    ensure!(matches!(store.count_finished(&t1.id, &sid, &Usage::default()).await?, CountOutcome::Counted { .. }));
    // The aggregator answers turn 1 and dies before it tells the decision.
    let running = conversation(&store, &t0.id).await?;
    let answerer = Answerer { kind: "aggregator", lease: Duration::from_secs(90), idle_expiry: IDLE };
    let invocation = Invocation::new(Arc::new(CrashAt(CrashPoint::AnswerBeforeTell)));
    let answer =
        answer_conversation(store.as_ref(), store.as_ref(), store.as_ref(), &running, answerer, &ModelFreeReply);
    let answer = faults::with_plan(invocation.clone(), answer);
    let died = tokio::select! {
        outcome = answer => { anyhow::bail!("the answerer ran past its crash point: {outcome:?}") }
        () = invocation.killed() => true,
    };
    ensure!(died);
    let answered = conversation(&store, &t0.id).await?;
    assert_eq!((answered.turn, answered.status), (1, ConversationStatus::Done), "turn 1 answered before the crash");
    assert_eq!(subtask(&store, &t0.id).await?.status, SubtaskStatus::AwaitingApproval, "not told yet");
    // The next reader tells it once; a second reader finds nothing left to tell.
    let told = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert_eq!(told.turns, [2]);
    let again = tell_decisions(store.as_ref(), store.as_ref(), &t0.id, IDLE).await?;
    assert!(again.turns.is_empty() && !again.deferred, "{again:?}");
    let told = conversation(&store, &t0.id).await?;
    assert_eq!((told.turn, told.author, told.status), (2, TurnAuthor::Swarm, ConversationStatus::Done));
    assert_eq!(subtask(&store, &t0.id).await?.status, SubtaskStatus::Failed, "the rejected subtask moved on");
    Ok(())
}
