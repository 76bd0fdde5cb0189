//! Contract tests of a conversation's turns on the `ConversationStore` port (`start_turn`, `conversation_history`, each turn's plan and counts), written once and run against the embedded store and DynamoDB on a local emulator.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (see `contract_store.rs`); without it
//! they fail, unless `SWARM_SKIP_AWS=1`.

#[macro_use]
mod common;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use swarm_core::domain::{
    Conversation, ConversationStatus, Lease, NextTurn, Subtask, SubtaskId, SubtaskRecord, SubtaskResult, TurnRecord,
    Usage, now_ms,
};
use swarm_core::language::Language;
use swarm_core::ports::{
    ConversationStore, CountOutcome, CreateOutcome, LeaseOutcome, LeasePhase, StoreOp, TurnOutcome,
};

use common::lossy::{answer_lost, losing};

type Store = Arc<dyn ConversationStore>;

contract_tests!(
    a_finished_turn_is_archived_and_the_next_starts_planning_with_every_per_turn_field_reset,
    a_turn_starts_only_on_a_terminal_conversation_on_the_expected_turn_and_not_expired,
    of_two_concurrent_follow_ups_one_starts_the_turn,
    a_turn_start_whose_answer_was_lost_is_recognised_as_its_own_when_retried,
    each_turn_lists_and_counts_only_its_own_subtasks_and_keeps_the_earlier_ones,
    a_late_count_or_aggregation_of_an_earlier_turn_changes_nothing_in_the_next,
    a_turn_s_archive_keeps_a_long_reply_and_message_within_the_item_limits,
    a_late_failure_or_queued_marker_of_an_earlier_turn_writes_nothing_on_the_next,
    a_failure_or_queued_marker_whose_answer_was_lost_is_recognised_as_its_own_when_retried,
);

// ------------------------------------------------------------------ fixtures

fn record(conv: &Conversation, id: &SubtaskId) -> SubtaskRecord {
    let subtask = Subtask {
        id: id.clone(),
        instruction: format!("find out part {id}"),
        tools: vec!["shop__get_order".into()],
        depends_on: Vec::new(),
    };
    SubtaskRecord::new(conv, subtask, "reader".into())
}

/// The request of turn `conv.turn + 1`, started at `now`, expiring an hour later.
fn next(conv: &Conversation, message: &str, holder: &str, now: i64) -> NextTurn {
    let turn = conv.turn + 1;
    NextTurn {
        turn,
        query: message.to_owned(),
        language: Language::English,
        idempotency_key: Some(format!("key-{turn}")),
        request_hash: format!("hash-{turn}"),
        trace_parent: None,
        lease: Lease { holder: holder.to_owned(), until_ms: now + 35_000, turn },
        started_at_ms: now,
        deadline_ms: now + 120_000,
        expires_at_ms: now + 3_600_000,
        sweep_shard: 2,
    }
}

/// A conversation whose turn 0 ran subtasks `ids` and was answered `reply` (`DONE`).
async fn answered(store: &Store, ids: &[&str], reply: &str) -> Result<Conversation> {
    let mut conv = Conversation::new("C104", "where is order A1029?", now_ms(), 120);
    conv.expires_at_ms = Some(now_ms() + 3_600_000);
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let records: Vec<SubtaskRecord> = ids.iter().map(|id| record(&conv, &SubtaskId::from(*id))).collect();
    ensure!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?, "start_run refused");
    finish_turn(store, &conv.id, &records, reply).await
}

/// Finishes every subtask of `records`, counts them, aggregates and answers `reply`.
async fn finish_turn(
    store: &Store,
    id: &swarm_core::domain::ConversationId,
    records: &[SubtaskRecord],
    reply: &str,
) -> Result<Conversation> {
    let done = SubtaskResult::Succeeded { text: "ok".into(), tool_calls: vec![] };
    let usage = Usage { prompt_tokens: Some(5), ..Usage::default() };
    for r in records {
        store.record_result(id, &r.subtask.id, &done, &usage, &[], now_ms()).await?;
        ensure!(matches!(store.count_finished(id, &r.subtask.id, &usage).await?, CountOutcome::Counted { .. }));
    }
    let turn = store.get_conversation(id).await?.context("missing")?.turn;
    let now = now_ms();
    let lease = store.acquire_lease(id, LeasePhase::Aggregating { turn }, "aggregator:t", now, now + 90_000).await?;
    ensure!(lease == LeaseOutcome::Acquired { taken_over: None }, "aggregation lease: {lease:?}");
    ensure!(store.finish_conversation(id, turn, reply, &Usage::default()).await?, "finish refused");
    store.get_conversation(id).await?.context("missing")
}

fn started(outcome: TurnOutcome) -> Result<Conversation> {
    match outcome {
        TurnOutcome::Started(c) => Ok(c),
        other => anyhow::bail!("expected Started, got {other:?}"),
    }
}

// ------------------------------------------------------------------ the contract

async fn a_finished_turn_is_archived_and_the_next_starts_planning_with_every_per_turn_field_reset(
    store: Store,
) -> Result<()> {
    let t0 = answered(&store, &["w01", "w02"], "A1029 ships today.").await?;
    let now = now_ms();
    let n = next(&t0, "and is coupon SAVE20 valid?", "orchestrator:t1", now);
    let t1 = started(store.start_turn(&t0, &n, now).await?)?;
    assert_eq!(t1, t0.next_turn(&n), "the item is the one next_turn describes");
    let stored = store.get_conversation(&t0.id).await?.context("missing")?;
    assert_eq!(stored, t1);
    assert_eq!((stored.turn, stored.status, stored.total, stored.remaining), (1, ConversationStatus::Planning, 0, 0));
    assert!(stored.finished.is_empty() && stored.plan.is_empty() && stored.reply.is_none());
    assert_eq!(stored.sweep_shard, Some(2), "the new turn is in the sweep index");
    assert_eq!(stored.expires_at_ms, Some(now + 3_600_000));
    assert_eq!(stored.query, "and is coupon SAVE20 valid?");

    let history = store.conversation_history(&t0.id).await?;
    assert_eq!(history.turns, vec![TurnRecord::of(&t0)]);
    assert_eq!(history.turns[0].reply.as_deref(), Some("A1029 ships today."));
    assert_eq!(history.turns[0].plan.len(), 2);
    let ids: Vec<&str> = history.subtasks.iter().map(|r| r.subtask.id.as_str()).collect();
    assert_eq!(ids, ["w01", "w02"], "turn 0's subtask items are kept");
    assert_eq!(store.list_subtasks(&t0.id).await?, vec![], "the new turn has no subtasks yet");
    Ok(())
}

async fn a_turn_starts_only_on_a_terminal_conversation_on_the_expected_turn_and_not_expired(
    store: Store,
) -> Result<()> {
    // Not terminal: refused, nothing written.
    let mut conv = Conversation::new("C104", "hi", now_ms(), 120);
    conv.expires_at_ms = Some(now_ms() + 3_600_000);
    store.create_conversation(&conv).await?;
    let now = now_ms();
    let refused = store.start_turn(&conv, &next(&conv, "again", "o:1", now), now).await?;
    assert_eq!(refused, TurnOutcome::Refused(Some(conv.clone())));
    assert_eq!(store.get_conversation(&conv.id).await?, Some(conv.clone()));
    assert!(store.conversation_history(&conv.id).await?.turns.is_empty());

    // Terminal, but read on an older turn than the stored one: refused.
    let t0 = answered(&store, &["w01"], "r0").await?;
    let t1 = started(store.start_turn(&t0, &next(&t0, "m1", "o:1", now), now).await?)?;
    let stale = store.start_turn(&t0, &next(&t0, "m1 again", "o:2", now), now).await?;
    assert_eq!(stale, TurnOutcome::Refused(Some(t1.clone())));

    // Expired at `now`: refused (moto never expires TTL items: the stored expires_at_ms decides).
    let t0 = answered(&store, &["w01"], "r0").await?;
    let late = t0.expires_at_ms.context("expiry")? + 1;
    let expired = store.start_turn(&t0, &next(&t0, "too late", "o:3", late), late).await?;
    assert_eq!(expired, TurnOutcome::Refused(Some(t0.clone())));
    assert_eq!(store.get_conversation(&t0.id).await?, Some(t0.clone()));

    // Missing.
    let ghost = Conversation::new("C104", "nobody", now, 120);
    assert_eq!(store.start_turn(&ghost, &next(&ghost, "x", "o:4", now), now).await?, TurnOutcome::Refused(None));
    Ok(())
}

async fn of_two_concurrent_follow_ups_one_starts_the_turn(store: Store) -> Result<()> {
    let t0 = answered(&store, &["w01"], "r0").await?;
    let now = now_ms();
    let (a, b) = (next(&t0, "first", "o:a", now), next(&t0, "second", "o:b", now + 1));
    let (ra, rb) = tokio::join!(store.start_turn(&t0, &a, now), store.start_turn(&t0, &b, now + 1));
    let wins = [&ra, &rb].iter().filter(|r| matches!(r, Ok(TurnOutcome::Started(_)))).count();
    assert_eq!(wins, 1, "{ra:?} / {rb:?}");
    let stored = store.get_conversation(&t0.id).await?.context("missing")?;
    assert_eq!(stored.turn, 1);
    assert_eq!(store.conversation_history(&t0.id).await?.turns.len(), 1, "one archive");
    Ok(())
}

async fn a_turn_start_whose_answer_was_lost_is_recognised_as_its_own_when_retried(store: Store) -> Result<()> {
    let t0 = answered(&store, &["w01"], "r0").await?;
    let (decorator, lossy) = losing(&store);
    let now = now_ms();
    let n = next(&t0, "and the coupon?", "o:lost", now);
    decorator.lose(StoreOp::StartTurn)?;
    answer_lost(lossy.start_turn(&t0, &n, now).await)?;
    let again = started(lossy.start_turn(&t0, &n, now).await?)?;
    assert_eq!(again, t0.next_turn(&n));
    assert_eq!(store.conversation_history(&t0.id).await?.turns.len(), 1, "archived once");
    // Another request's start on the same read is not mistaken for it.
    let other = store.start_turn(&t0, &next(&t0, "something else", "o:other", now + 5), now + 5).await?;
    assert!(matches!(other, TurnOutcome::Refused(Some(c)) if c.query == "and the coupon?"));
    Ok(())
}

async fn each_turn_lists_and_counts_only_its_own_subtasks_and_keeps_the_earlier_ones(store: Store) -> Result<()> {
    let t0 = answered(&store, &["w01", "w02"], "r0").await?;
    let now = now_ms();
    let t1 = started(store.start_turn(&t0, &next(&t0, "m1", "o:1", now), now).await?)?;
    let ids = [SubtaskId::in_turn(1, "w01")];
    let records: Vec<SubtaskRecord> = ids.iter().map(|id| record(&t1, id)).collect();
    assert!(store.start_run(&t1.id, Some("o:1"), &records, &[], &Usage::default()).await?);
    let listed: Vec<String> = store.list_subtasks(&t1.id).await?.iter().map(|r| r.subtask.id.to_string()).collect();
    assert_eq!(listed, ["t1~w01"], "the turn's own plan only");
    let all: Vec<String> =
        store.conversation_history(&t1.id).await?.subtasks.iter().map(|r| r.subtask.id.to_string()).collect();
    assert_eq!(all, ["t1~w01", "w01", "w02"], "turn 0's items survive turn 1's start_run");
    let stored = store.get_conversation(&t1.id).await?.context("missing")?;
    assert_eq!((stored.status, stored.total, stored.remaining), (ConversationStatus::Running, 1, 1));
    let answered = finish_turn(&store, &t1.id, &records, "r1").await?;
    assert_eq!((answered.turn, answered.status, answered.reply.as_deref()), (1, ConversationStatus::Done, Some("r1")));
    assert_eq!(answered.usage.prompt_tokens, Some(5), "this turn's usage only");
    Ok(())
}

async fn a_late_count_or_aggregation_of_an_earlier_turn_changes_nothing_in_the_next(store: Store) -> Result<()> {
    let t0 = answered(&store, &["w01"], "r0").await?;
    let now = now_ms();
    let t1 = started(store.start_turn(&t0, &next(&t0, "m1", "o:1", now), now).await?)?;
    let records = vec![record(&t1, &SubtaskId::in_turn(1, "w01")), record(&t1, &SubtaskId::in_turn(1, "w02"))];
    assert!(store.start_run(&t1.id, Some("o:1"), &records, &[], &Usage::default()).await?);
    let before = store.get_conversation(&t1.id).await?.context("missing")?;
    // Turn 0's subtask counted again (a late duplicate): outside turn 1's plan.
    let late_usage = Usage { prompt_tokens: Some(9), ..Usage::default() };
    assert_eq!(store.count_finished(&t1.id, &"w01".into(), &late_usage).await?, CountOutcome::AlreadyCounted);
    assert_eq!(store.get_conversation(&t1.id).await?, Some(before), "nothing counted");
    // Turn 0's reply (an aggregation of turn 0 that outlived its lease): not written over turn 1's.
    let now = now_ms();
    let t1_agg = LeasePhase::Aggregating { turn: 1 };
    for r in &records {
        store.count_finished(&t1.id, &r.subtask.id, &Usage::default()).await?;
    }
    store.acquire_lease(&t1.id, t1_agg, "aggregator:t1", now, now + 90_000).await?;
    let before = store.get_conversation(&t1.id).await?.context("missing")?;
    assert!(!store.finish_conversation(&t1.id, 0, "turn 0's late reply", &Usage::default()).await?);
    let handoff = swarm_core::domain::Handoff { reason: swarm_core::domain::HandoffReason::Policy, at_ms: now };
    assert!(!store.hand_off(&t1.id, 0, "turn 0's late hand-off", &Usage::default(), &handoff).await?);
    // Turn 0's aggregation lease: not turn 1's to take, even with nothing remaining.
    let agg = store.acquire_lease(&t1.id, LeasePhase::Aggregating { turn: 0 }, "aggregator:late", now, now + 1).await?;
    assert!(matches!(agg, LeaseOutcome::NotInPhase { .. }), "{agg:?}");
    assert_eq!(store.get_conversation(&t1.id).await?, Some(before));
    // Turn 1's own answer lands.
    assert!(store.finish_conversation(&t1.id, 1, "r1", &Usage::default()).await?);
    assert_eq!(store.get_conversation(&t1.id).await?.context("missing")?.reply.as_deref(), Some("r1"));
    Ok(())
}

async fn a_turn_s_archive_keeps_a_long_reply_and_message_within_the_item_limits(store: Store) -> Result<()> {
    // The longest message (8,000 characters of 4-byte text: 32 KB) and reply (200 KB) of turn 0.
    let message = "𝄞".repeat(8_000);
    let mut conv = Conversation::new("C104", &message, now_ms(), 120);
    conv.expires_at_ms = Some(now_ms() + 3_600_000);
    store.create_conversation(&conv).await?;
    store.start_run(&conv.id, None, &[], &[], &Usage::default()).await?;
    let now = now_ms();
    store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 90_000).await?;
    let reply = "x".repeat(swarm_core::domain::MAX_REPLY_BYTES);
    ensure!(store.finish_conversation(&conv.id, 0, &reply, &Usage::default()).await?);
    let t0 = store.get_conversation(&conv.id).await?.context("missing")?;
    let t1 = started(store.start_turn(&t0, &next(&t0, &message, "o:1", now), now).await?)?;
    assert_eq!(t1.query, message);
    let history = store.conversation_history(&conv.id).await?;
    assert_eq!(history.turns[0].reply.as_deref().map(str::len), Some(swarm_core::domain::MAX_REPLY_BYTES));
    assert_eq!(history.turns[0].query, message);
    assert!(history.turns[0].ttl >= t0.ttl, "the archive keeps the conversation's TTL");
    Ok(())
}

async fn a_late_failure_or_queued_marker_of_an_earlier_turn_writes_nothing_on_the_next(store: Store) -> Result<()> {
    let t0 = answered(&store, &["w01"], "r0").await?;
    let now = now_ms();
    // Turn 1 planning (its plan not written yet), then turn 0's late writers: the deadline path's
    // "never planned" failure and a planner's queued marker, both of turn 0.
    let t1 = started(store.start_turn(&t0, &next(&t0, "m1", "o:1", now), now).await?)?;
    assert!(!store.fail_conversation(&t1.id, 0, "planning did not finish before the deadline").await?);
    assert!(!store.mark_queued(&t1.id, 0, now).await?);
    assert_eq!(store.get_conversation(&t1.id).await?, Some(t1.clone()), "turn 1 untouched while planning");
    // Turn 1 running, not yet marked: turn 0's marker would say its subtasks were sent.
    let records = vec![record(&t1, &SubtaskId::in_turn(1, "w01"))];
    assert!(store.start_run(&t1.id, Some("o:1"), &records, &[], &Usage::default()).await?);
    let running = store.get_conversation(&t1.id).await?.context("missing")?;
    assert!(!store.mark_queued(&t1.id, 0, now).await?);
    assert!(!store.fail_conversation(&t1.id, 0, "none of its subtasks ever began").await?);
    assert_eq!(store.get_conversation(&t1.id).await?, Some(running.clone()), "turn 1 untouched while running");
    assert_eq!(running.queued_at_ms, None);
    // Turn 1's own writers land.
    assert!(store.mark_queued(&t1.id, 1, now + 7).await?);
    assert_eq!(store.get_conversation(&t1.id).await?.context("missing")?.queued_at_ms, Some(now + 7));
    assert!(store.fail_conversation(&t1.id, 1, "none of its subtasks ever began").await?);
    let failed = store.get_conversation(&t1.id).await?.context("missing")?;
    assert_eq!(
        (failed.turn, failed.status, failed.error.as_deref()),
        (1, ConversationStatus::Failed, Some("none of its subtasks ever began"))
    );
    Ok(())
}

async fn a_failure_or_queued_marker_whose_answer_was_lost_is_recognised_as_its_own_when_retried(
    store: Store,
) -> Result<()> {
    let t0 = answered(&store, &["w01"], "r0").await?;
    let now = now_ms();
    let t1 = started(store.start_turn(&t0, &next(&t0, "m1", "o:1", now), now).await?)?;
    let records = vec![record(&t1, &SubtaskId::in_turn(1, "w01"))];
    assert!(store.start_run(&t1.id, Some("o:1"), &records, &[], &Usage::default()).await?);
    let (decorator, lossy) = losing(&store);
    // The marker applied, its answer lost; the retry (a later instant) keeps the first and says so.
    decorator.lose(StoreOp::MarkQueued)?;
    answer_lost(lossy.mark_queued(&t1.id, 1, now + 1).await)?;
    assert!(lossy.mark_queued(&t1.id, 1, now + 2).await?, "the retry finds the conversation on its turn");
    assert_eq!(store.get_conversation(&t1.id).await?.context("missing")?.queued_at_ms, Some(now + 1));
    // The failure applied, its answer lost: the retry finds its own flip and answers it made.
    let reason = "planning did not finish before the deadline";
    decorator.lose(StoreOp::FailConversation)?;
    answer_lost(lossy.fail_conversation(&t1.id, 1, reason).await)?;
    assert!(lossy.fail_conversation(&t1.id, 1, reason).await?, "its own flip, found made");
    // Another writer's failure (another reason) or the same reason of another turn is not taken for it.
    assert!(!store.fail_conversation(&t1.id, 1, "another reason").await?);
    assert!(!store.fail_conversation(&t1.id, 0, reason).await?);
    let failed = store.get_conversation(&t1.id).await?.context("missing")?;
    assert_eq!((failed.status, failed.error.as_deref()), (ConversationStatus::Failed, Some(reason)));
    Ok(())
}
