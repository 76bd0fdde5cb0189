//! Contract tests of the `ConversationStore` port: each test is written once and runs against the embedded store and DynamoDB on a local emulator.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000`
//! after `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`.
//! Each test creates its own table, so tests run in parallel. The suite lives
//! with the local platform, which provisions the tables (`create_table`).

#[macro_use]
mod common;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Handoff, HandoffReason, Lease, MAX_RESULT_CHARS,
    Subtask, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus, ToolCallRecord, Usage, now_ms, request_hash,
};
use swarm_core::effects::{AttemptLease, Effect};
use swarm_core::language::Language;
use swarm_core::ports::{
    AttemptStart, ConversationPosition, ConversationStore, CountOutcome, CreateOutcome, IntentOutcome, LeaseOutcome,
    LeasePhase, RecordOutcome, StoreError, StoreOp,
};

type Store = Arc<dyn ConversationStore>;

use common::lossy::{answer_lost, losing};

contract_tests!(
    the_queued_marker_keeps_its_first_instant_and_a_lost_answer_retry_changes_nothing,
    created_conversation_reads_back_unchanged,
    idempotency_key_returns_the_existing_conversation_and_writes_nothing,
    creating_the_same_id_twice_is_a_permanent_error,
    start_run_writes_the_subtasks_and_flips_planning_to_running,
    start_run_outside_planning_returns_false_and_writes_nothing,
    a_plan_with_no_subtasks_runs_with_nothing_remaining,
    only_one_of_two_concurrent_aggregation_flips_wins,
    transition_needs_the_expected_from_status,
    fail_conversation_works_only_from_a_non_terminal_status,
    begin_attempt_counts_attempts_and_reports_a_finished_subtask,
    a_result_is_recorded_only_once_even_under_concurrent_writers,
    twenty_duplicate_deliveries_are_counted_once,
    distinct_subtasks_racing_each_decrement_once_and_never_below_zero,
    usage_adds_up_and_unknown_fields_stay_none,
    list_subtasks_returns_only_this_conversation_in_id_order,
    a_plan_of_one_hundred_subtasks_is_written_whole,
    unknown_ids_are_missing_not_errors,
    a_huge_tool_output_still_writes,
    transition_subtask_flips_only_from_the_listed_statuses,
    checkpoint_is_kept_until_a_result_clears_it,
    an_aggregation_lease_is_taken_once_and_taken_over_only_after_it_expires,
    an_aggregation_lease_needs_nothing_remaining_and_its_turn,
    a_planning_lease_is_taken_over_only_after_it_expires,
    a_lease_holder_takes_its_own_live_lease_again_and_can_end_it,
    start_run_flips_only_for_the_planning_lease_holder_and_finds_its_own_flip_made,
    a_conditional_write_applied_whose_answer_was_lost_is_recognised_as_its_own_when_retried,
    a_count_whose_answer_was_lost_is_retried_as_already_counted_and_counts_once,
    an_attempt_begun_whose_answer_was_lost_is_retried_as_the_same_attempt_counted_once,
    an_attempt_lease_is_renewed_only_by_its_holder_and_a_renewal_whose_answer_was_lost_is_its_own,
    a_result_recorded_whose_answer_was_lost_is_retried_as_the_record_written,
    an_intent_recorded_whose_answer_was_lost_is_retried_as_the_entry_recorded_once,
    an_idempotency_key_reused_with_another_request_is_refused_and_writes_nothing,
    overdue_conversations_are_the_non_terminal_ones_of_the_shard_past_their_deadline,
    every_terminal_write_takes_the_conversation_out_of_the_sweep_index,
    the_reply_language_is_stored_with_the_conversation_and_kept_by_every_write,
    a_customer_s_conversations_list_newest_first_in_pages,
);

// ------------------------------------------------------------------ fixtures

/// The record a `record_result` wrote; an error for any other outcome.
fn recorded(outcome: RecordOutcome) -> Result<SubtaskRecord> {
    match outcome {
        RecordOutcome::Recorded(written) => Ok(written),
        other => anyhow::bail!("expected Recorded, got {other:?}"),
    }
}

fn conversation(customer: &str) -> Conversation {
    Conversation::new(customer, "where is order A1029 and is coupon SAVE20 valid?", now_ms(), 120)
}

fn record(conv: &Conversation, id: &str, depends_on: &[&str]) -> SubtaskRecord {
    let subtask = Subtask {
        id: id.to_owned().into(),
        instruction: format!("find out part {id}"),
        tools: vec!["shop__get_order".into()],
        depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
    };
    SubtaskRecord::new(conv, subtask, "reader".into())
}

/// A conversation created and started with subtasks `ids` (no dependencies).
async fn running(store: &Store, ids: &[&str]) -> Result<(Conversation, Vec<SubtaskRecord>)> {
    let conv = conversation("C104");
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let records: Vec<SubtaskRecord> = ids.iter().map(|id| record(&conv, id, &[])).collect();
    ensure!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?, "start_run refused");
    Ok((conv, records))
}

fn succeeded(text: &str) -> SubtaskResult {
    SubtaskResult::Succeeded {
        text: text.to_owned(),
        tool_calls: vec![ToolCallRecord { name: "shop__get_order".into(), ok: true, error: None, facts: vec![] }],
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

// ------------------------------------------------------------------ the contract

async fn created_conversation_reads_back_unchanged(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    conv.idempotency_key = Some("key-1".into());
    assert_eq!(store.create_conversation(&conv).await?, CreateOutcome::Created);
    let back = store.get_conversation(&conv.id).await?;
    assert_eq!(back, Some(conv.clone()));
    let back = back.context("conversation missing")?;
    assert_eq!(back.status, ConversationStatus::Planning);
    assert_eq!(back.usage, Usage::default(), "no usage known yet: every field None");
    assert!(back.finished.is_empty());
    assert_eq!(store.get_conversation(&ConversationId::new()).await?, None);
    Ok(())
}

async fn idempotency_key_returns_the_existing_conversation_and_writes_nothing(store: Store) -> Result<()> {
    let mut first = conversation("C104");
    first.idempotency_key = Some("retry-7".into());
    assert_eq!(store.create_conversation(&first).await?, CreateOutcome::Created);

    let mut again = conversation("C104");
    again.idempotency_key = Some("retry-7".into());
    assert_eq!(store.create_conversation(&again).await?, CreateOutcome::Existing(first.id.clone()));
    assert_eq!(store.get_conversation(&again.id).await?, None, "the second conversation must not be written");
    assert_eq!(store.get_conversation(&first.id).await?, Some(first.clone()), "the first is unchanged");

    // The key is scoped to the customer: another customer's identical key is a new conversation.
    let mut other = conversation("C200");
    other.idempotency_key = Some("retry-7".into());
    assert_eq!(store.create_conversation(&other).await?, CreateOutcome::Created);
    // Key separators in customer ids do not alias another customer's key.
    let mut tricky = conversation("C104#retry");
    tricky.idempotency_key = Some("7".into());
    assert_eq!(store.create_conversation(&tricky).await?, CreateOutcome::Created);
    Ok(())
}

async fn creating_the_same_id_twice_is_a_permanent_error(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let mut dup = conv.clone();
    dup.query = "something else".into();
    let err = store.create_conversation(&dup).await;
    assert!(matches!(&err, Err(e) if !e.is_transient()), "got {err:?}");
    assert_eq!(store.get_conversation(&conv.id).await?.map(|c| c.query), Some(conv.query));
    Ok(())
}

async fn start_run_writes_the_subtasks_and_flips_planning_to_running(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let records = vec![record(&conv, "w01", &[]), record(&conv, "w02", &[]), record(&conv, "w03", &["w01", "w02"])];
    let notes = vec!["2 subtasks dropped over the limit".to_owned()];
    let usage =
        Usage { prompt_tokens: Some(120), completion_tokens: Some(30), cached_tokens: None, cost_usd: Some(0.25) };
    assert!(store.start_run(&conv.id, None, &records, &notes, &usage).await?);

    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.status, ConversationStatus::Running);
    assert_eq!((after.total, after.remaining), (3, 3));
    assert_eq!(after.notes, notes);
    assert_eq!(after.usage.prompt_tokens, Some(120));
    assert_eq!(after.usage.completion_tokens, Some(30));
    assert_eq!(after.usage.cached_tokens, None);
    assert!(close(after.usage.cost_usd, 0.25));
    assert_eq!(store.list_subtasks(&conv.id).await?, records);
    let w03 = store.get_subtask(&conv.id, &"w03".into()).await?.context("item missing")?;
    assert_eq!(w03.status, SubtaskStatus::Pending);
    assert_eq!(w03.subtask.depends_on, vec!["w01".to_owned(), "w02".to_owned()]);
    Ok(())
}

async fn the_queued_marker_keeps_its_first_instant_and_a_lost_answer_retry_changes_nothing(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let records = vec![record(&conv, "w01", &[])];
    assert!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?);
    let unmarked = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(unmarked.queued_at_ms, None, "a plan's write does not say its subtasks were sent");
    assert!(store.mark_queued(&conv.id, 0, 1_700_000_000_123).await?);
    // The same write retried (its answer lost), then a later re-drive's: the first instant stays.
    assert!(store.mark_queued(&conv.id, 0, 1_700_000_000_123).await?);
    assert!(store.mark_queued(&conv.id, 0, 1_700_000_009_999).await?);
    let marked = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(marked.queued_at_ms, Some(1_700_000_000_123));
    assert_eq!((marked.status, marked.remaining), (ConversationStatus::Running, 1), "nothing else changed");
    // An unknown conversation is not created by the marker.
    let unknown = conversation("C105");
    assert!(!store.mark_queued(&unknown.id, 0, 1_700_000_000_123).await?);
    assert_eq!(store.get_conversation(&unknown.id).await?, None);
    Ok(())
}

async fn start_run_outside_planning_returns_false_and_writes_nothing(store: Store) -> Result<()> {
    let (conv, records) = running(&store, &["w01", "w02"]).await?;
    let extra = vec![record(&conv, "w09", &[])];
    assert!(!store.start_run(&conv.id, None, &extra, &["late".into()], &Usage::default()).await?);
    assert_eq!(store.list_subtasks(&conv.id).await?, records);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.total, after.remaining), (2, 2));
    assert!(after.notes.is_empty());

    let missing = ConversationId::new();
    assert!(!store.start_run(&missing, None, &extra, &[], &Usage::default()).await?);
    assert!(store.list_subtasks(&missing).await?.is_empty());
    Ok(())
}

async fn a_plan_with_no_subtasks_runs_with_nothing_remaining(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &[]).await?;
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 0, 0));
    assert_eq!(store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?, CountOutcome::AlreadyCounted);
    Ok(())
}

async fn only_one_of_two_concurrent_aggregation_flips_wins(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let (a, b) = tokio::join!(
        store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating),
        store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating),
    );
    assert_eq!([a?, b?].iter().filter(|w| **w).count(), 1, "exactly one flip wins");
    assert!(
        !store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?
    );

    let usage = Usage { completion_tokens: Some(40), ..Default::default() };
    assert!(store.finish_conversation(&conv.id, 0, "Your order ships today.", &usage).await?);
    assert!(!store.finish_conversation(&conv.id, 0, "a second reply", &usage).await?);
    let done = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(done.status, ConversationStatus::Done);
    assert_eq!(done.reply.as_deref(), Some("Your order ships today."));
    assert_eq!(done.usage.completion_tokens, Some(40), "usage added once");
    Ok(())
}

async fn transition_needs_the_expected_from_status(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    assert!(
        !store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?
    );
    assert!(!store.finish_conversation(&conv.id, 0, "too early", &Usage::default()).await?);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.status, ConversationStatus::Planning);
    assert_eq!(after.reply, None);
    Ok(())
}

async fn fail_conversation_works_only_from_a_non_terminal_status(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    assert!(store.fail_conversation(&conv.id, 0, "deadline passed while planning").await?);
    assert!(!store.fail_conversation(&conv.id, 0, "second reason").await?);
    let failed = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(failed.status, ConversationStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("deadline passed while planning"));
    assert!(
        !store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?
    );

    let planning = conversation("C104");
    store.create_conversation(&planning).await?;
    assert!(store.fail_conversation(&planning.id, 0, "orchestrator crashed").await?);
    Ok(())
}

async fn begin_attempt_counts_attempts_and_reports_a_finished_subtask(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let AttemptStart::Started(first) =
        store.begin_attempt(&conv.id, &"w01".into(), &AttemptLease::new(1_500), 1_000).await?
    else {
        anyhow::bail!("first attempt did not start");
    };
    assert_eq!((first.status, first.attempts, first.started_at_ms), (SubtaskStatus::Running, 1, Some(1_000)));
    let AttemptStart::Started(second) =
        store.begin_attempt(&conv.id, &"w01".into(), &AttemptLease::new(2_500), 2_000).await?
    else {
        anyhow::bail!("second attempt did not start");
    };
    assert_eq!((second.attempts, second.started_at_ms), (2, Some(1_000)), "started_at_ms keeps the first attempt");

    let result = succeeded("A1029 shipped on Monday");
    let written =
        recorded(store.record_result(&conv.id, &"w01".into(), &result, &Usage::default(), &[], 3_000).await?)?;
    assert_eq!(
        Some(&written),
        store.get_subtask(&conv.id, &"w01".into()).await?.as_ref(),
        "the record answered is the record as written"
    );
    assert_eq!((written.status, written.finished_at_ms), (SubtaskStatus::Succeeded, Some(3_000)));
    match store.begin_attempt(&conv.id, &"w01".into(), &AttemptLease::new(4_500), 4_000).await? {
        AttemptStart::AlreadyFinished(rec) => {
            assert_eq!(rec.status, SubtaskStatus::Succeeded);
            assert_eq!(rec.attempts, 2, "a duplicate delivery does not count as an attempt");
            assert_eq!(rec.result, Some(result));
        }
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }
    Ok(())
}

async fn a_result_is_recorded_only_once_even_under_concurrent_writers(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    let first = succeeded("first answer");
    let usage = Usage { prompt_tokens: Some(11), ..Default::default() };
    let tools = vec!["shop__get_order".to_owned(), "shop__track_shipment".to_owned()];
    recorded(store.record_result(&conv.id, &"w01".into(), &first, &usage, &tools, 5_000).await?)?;
    match store
        .record_result(
            &conv.id,
            &"w01".into(),
            &SubtaskResult::failed(FailureKind::DeadlinePassed, "late"),
            &Usage::default(),
            &[],
            6_000,
        )
        .await?
    {
        RecordOutcome::AlreadyFinished(rec) => {
            assert_eq!(rec.result, Some(first.clone()));
            assert_eq!(rec.usage, usage);
            assert_eq!(rec.tools_used, tools);
            assert_eq!(rec.finished_at_ms, Some(5_000));
        }
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }

    let writers = (0..20).map(|i| {
        let store = store.clone();
        let conv_id = conv.id.clone();
        tokio::spawn(async move {
            store
                .record_result(
                    &conv_id,
                    &"w02".into(),
                    &succeeded(&format!("writer {i}")),
                    &Usage::default(),
                    &[],
                    7_000 + i,
                )
                .await
        })
    });
    let mut recorded = 0;
    for w in futures::future::join_all(writers).await {
        if matches!(w??, RecordOutcome::Recorded(_)) {
            recorded += 1;
        }
    }
    assert_eq!(recorded, 1, "exactly one concurrent writer records");
    Ok(())
}

async fn twenty_duplicate_deliveries_are_counted_once(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02", "w03"]).await?;
    let usage = Usage { prompt_tokens: Some(10), ..Default::default() };
    let calls = (0..20).map(|_| {
        let store = store.clone();
        let conv_id = conv.id.clone();
        tokio::spawn(async move { store.count_finished(&conv_id, &"w02".into(), &usage).await })
    });
    let mut outcomes = Vec::new();
    for c in futures::future::join_all(calls).await {
        outcomes.push(c??);
    }
    let counted: Vec<_> = outcomes.iter().filter(|o| matches!(o, CountOutcome::Counted { .. })).collect();
    assert_eq!(counted, vec![&CountOutcome::Counted { remaining: 2 }]);
    assert_eq!(outcomes.iter().filter(|o| **o == CountOutcome::AlreadyCounted).count(), 19);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.remaining, 2);
    assert_eq!(after.finished, BTreeSet::from(["w02".to_owned()]));
    assert_eq!(after.usage.prompt_tokens, Some(10), "usage added once");
    Ok(())
}

async fn distinct_subtasks_racing_each_decrement_once_and_never_below_zero(store: Store) -> Result<()> {
    let ids: Vec<String> = (1..=20).map(|i| format!("w{i:02}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (conv, _) = running(&store, &id_refs).await?;
    // Every subtask delivered twice, all at once.
    let calls = ids.iter().chain(ids.iter()).map(|sid| {
        let store = store.clone();
        let conv_id = conv.id.clone();
        let sid = sid.clone();
        tokio::spawn(async move { store.count_finished(&conv_id, &sid.into(), &Usage::default()).await })
    });
    let mut remaining_seen = Vec::new();
    let mut duplicates = 0;
    for c in futures::future::join_all(calls).await {
        match c?? {
            CountOutcome::Counted { remaining } => remaining_seen.push(remaining),
            CountOutcome::AlreadyCounted => duplicates += 1,
            CountOutcome::Missing => anyhow::bail!("conversation reported missing"),
        }
    }
    remaining_seen.sort_unstable();
    assert_eq!(remaining_seen, (0..20).collect::<Vec<u32>>(), "each decrement seen exactly once");
    assert_eq!(duplicates, 20);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.remaining, 0);
    assert_eq!(after.finished, ids.iter().cloned().collect::<BTreeSet<_>>());
    // An id outside the plan arriving after the end never drives the counter negative.
    assert_eq!(store.count_finished(&conv.id, &"w99".into(), &Usage::default()).await?, CountOutcome::AlreadyCounted);
    assert_eq!(store.get_conversation(&conv.id).await?.map(|c| c.remaining), Some(0));
    Ok(())
}

async fn usage_adds_up_and_unknown_fields_stay_none(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let records = vec![record(&conv, "w01", &[]), record(&conv, "w02", &[])];
    let plan_usage = Usage { prompt_tokens: Some(100), cost_usd: Some(0.5), ..Default::default() };
    store.start_run(&conv.id, None, &records, &[], &plan_usage).await?;
    store
        .count_finished(
            &conv.id,
            &"w01".into(),
            &Usage { prompt_tokens: Some(5), completion_tokens: Some(3), ..Default::default() },
        )
        .await?;
    store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?;
    store.transition_conversation(&conv.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?;
    store
        .finish_conversation(
            &conv.id,
            0,
            "done",
            &Usage { completion_tokens: Some(2), cost_usd: Some(0.25), ..Default::default() },
        )
        .await?;
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.usage.prompt_tokens, Some(105));
    assert_eq!(after.usage.completion_tokens, Some(5));
    assert_eq!(after.usage.cached_tokens, None, "never reported, so unknown, not 0");
    assert!(close(after.usage.cost_usd, 0.75), "cost {:?}", after.usage.cost_usd);
    Ok(())
}

async fn list_subtasks_returns_only_this_conversation_in_id_order(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w10", "w02", "w01", "w03"]).await?;
    let (_other, _) = running(&store, &["w04", "w05"]).await?;
    let ids: Vec<SubtaskId> = store.list_subtasks(&conv.id).await?.into_iter().map(|r| r.subtask.id).collect();
    assert_eq!(ids, ["w01", "w02", "w03", "w10"]);
    assert!(store.list_subtasks(&ConversationId::new()).await?.is_empty());
    Ok(())
}

async fn a_plan_of_one_hundred_subtasks_is_written_whole(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let records: Vec<SubtaskRecord> = (1..=100)
        .map(|i| {
            let mut r = record(&conv, &format!("w{i:03}"), &[]);
            // Long-ish instructions so the plan spans several query pages' worth of bytes.
            r.subtask.instruction = format!("{i}: {}", "check the order status and the delivery estimate ".repeat(40));
            r
        })
        .collect();
    assert!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?);
    let listed = store.list_subtasks(&conv.id).await?;
    assert_eq!(listed.len(), 100);
    assert_eq!(listed, records);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 100, 100));
    Ok(())
}

async fn unknown_ids_are_missing_not_errors(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let nobody = ConversationId::new();
    let none = Usage::default();
    let result = succeeded("x");
    assert_eq!(store.get_conversation(&nobody).await?, None);
    assert_eq!(store.get_subtask(&nobody, &"w01".into()).await?, None);
    assert_eq!(store.get_subtask(&conv.id, &"w77".into()).await?, None);
    assert_eq!(store.begin_attempt(&nobody, &"w01".into(), &AttemptLease::new(2), 1).await?, AttemptStart::Missing);
    assert_eq!(store.begin_attempt(&conv.id, &"w77".into(), &AttemptLease::new(2), 1).await?, AttemptStart::Missing);
    assert_eq!(store.record_result(&nobody, &"w01".into(), &result, &none, &[], 1).await?, RecordOutcome::Missing);
    assert_eq!(store.record_result(&conv.id, &"w77".into(), &result, &none, &[], 1).await?, RecordOutcome::Missing);
    assert_eq!(store.count_finished(&nobody, &"w01".into(), &none).await?, CountOutcome::Missing);
    assert!(
        !store.transition_conversation(&nobody, ConversationStatus::Running, ConversationStatus::Aggregating).await?
    );
    assert!(!store.finish_conversation(&nobody, 0, "r", &none).await?);
    assert!(!store.fail_conversation(&nobody, 0, "r").await?);
    assert!(
        !store.transition_subtask(&conv.id, &"w77".into(), &[SubtaskStatus::Queued], SubtaskStatus::Running).await?
    );
    store.save_checkpoint(&nobody, &"w01".into(), "{}").await?;
    // None of those calls created an item.
    assert_eq!(store.get_conversation(&nobody).await?, None);
    assert_eq!(store.get_subtask(&conv.id, &"w77".into()).await?, None);
    assert_eq!(store.list_subtasks(&conv.id).await?.len(), 1);
    Ok(())
}

async fn a_huge_tool_output_still_writes(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    store.begin_attempt(&conv.id, &"w01".into(), &AttemptLease::new(2), 1).await?;
    // 1 MiB of tool output, well past DynamoDB's 400 KB item limit, in the
    // transcript checkpoint and (bounded, as workers store it) in the result.
    let huge = "订单 A1029 状态: shipped; ".repeat(40_000);
    assert!(huge.len() > 1_000_000);
    let checkpoint = serde_json::json!({ "transcript": [{ "role": "tool", "content": huge }] }).to_string();
    store.save_checkpoint(&conv.id, &"w01".into(), &checkpoint).await?;
    let saved = store.get_subtask(&conv.id, &"w01".into()).await?.context("item missing")?;
    let saved_checkpoint = saved.checkpoint.unwrap_or_default();
    assert!(saved_checkpoint.starts_with("{\"transcript\""), "checkpoint kept (possibly cut)");

    let result = SubtaskResult::Succeeded {
        text: huge.clone(),
        tool_calls: vec![ToolCallRecord {
            name: "shop__list_customer_orders".into(),
            ok: true,
            error: None,
            facts: vec![],
        }],
    }
    .bounded();
    recorded(store.record_result(&conv.id, &"w01".into(), &result, &Usage::default(), &[], 2).await?)?;
    let stored = store.get_subtask(&conv.id, &"w01".into()).await?.context("item missing")?;
    let Some(SubtaskResult::Succeeded { text, .. }) = &stored.result else {
        anyhow::bail!("result not stored: {:?}", stored.result);
    };
    assert!(text.chars().count() <= MAX_RESULT_CHARS);
    assert!(text.ends_with("[truncated]"));
    assert!(text.starts_with("订单 A1029"));
    assert_eq!(stored.checkpoint, None, "the result clears the checkpoint");
    Ok(())
}

async fn transition_subtask_flips_only_from_the_listed_statuses(store: Store) -> Result<()> {
    let conv = conversation("C104");
    store.create_conversation(&conv).await?;
    let records = vec![record(&conv, "w01", &[]), record(&conv, "w02", &["w01"])];
    store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?;
    assert!(!store.transition_subtask(&conv.id, &"w02".into(), &[], SubtaskStatus::Queued).await?);
    assert!(
        !store.transition_subtask(&conv.id, &"w02".into(), &[SubtaskStatus::Queued], SubtaskStatus::Running).await?
    );
    // Two parents finishing at once: exactly one enqueues the dependent.
    let dependent = SubtaskId::from("w02");
    let (a, b) = tokio::join!(
        store.transition_subtask(&conv.id, &dependent, &[SubtaskStatus::Pending], SubtaskStatus::Queued),
        store.transition_subtask(&conv.id, &dependent, &[SubtaskStatus::Pending], SubtaskStatus::Queued),
    );
    assert_eq!([a?, b?].iter().filter(|w| **w).count(), 1);
    assert!(
        store
            .transition_subtask(
                &conv.id,
                &"w02".into(),
                &[SubtaskStatus::Pending, SubtaskStatus::Queued],
                SubtaskStatus::Skipped
            )
            .await?
    );
    let w02 = store.get_subtask(&conv.id, &"w02".into()).await?.context("item missing")?;
    assert_eq!(w02.status, SubtaskStatus::Skipped);
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?.map(|r| r.status), Some(SubtaskStatus::Queued));
    Ok(())
}

async fn checkpoint_is_kept_until_a_result_clears_it(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    store.begin_attempt(&conv.id, &"w01".into(), &AttemptLease::new(2), 1).await?;
    store.save_checkpoint(&conv.id, &"w01".into(), r#"{"round":1}"#).await?;
    store.save_checkpoint(&conv.id, &"w01".into(), r#"{"round":2}"#).await?;
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("item missing")?;
    assert_eq!(rec.checkpoint.as_deref(), Some(r#"{"round":2}"#));
    assert_eq!(rec.status, SubtaskStatus::Running);
    store
        .record_result(
            &conv.id,
            &"w01".into(),
            &SubtaskResult::failed(FailureKind::OutOfTime, "out of time"),
            &Usage::default(),
            &[],
            2,
        )
        .await?;
    store.save_checkpoint(&conv.id, &"w01".into(), r#"{"round":3}"#).await?;
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("item missing")?;
    assert_eq!(rec.checkpoint, None, "a finished subtask keeps no checkpoint");
    assert_eq!(rec.status, SubtaskStatus::Failed);
    assert_eq!(rec.result, Some(SubtaskResult::failed(FailureKind::OutOfTime, "out of time")), "the kind is kept");
    let seen: HashSet<_> = store.list_subtasks(&conv.id).await?.into_iter().map(|r| r.status).collect();
    assert_eq!(seen, HashSet::from([SubtaskStatus::Failed]));
    Ok(())
}

async fn an_aggregation_lease_is_taken_once_and_taken_over_only_after_it_expires(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let agg = LeasePhase::Aggregating { turn: 0 };
    let t0 = 1_000_000;
    // Two triggers at once: exactly one takes the lease (RUNNING → AGGREGATING).
    let (a, b) = tokio::join!(
        store.acquire_lease(&conv.id, agg, "aggregator:a", t0, t0 + 90_000),
        store.acquire_lease(&conv.id, agg, "aggregator:b", t0, t0 + 90_000),
    );
    let outcomes = [a?, b?];
    let won: Vec<_> = outcomes.iter().filter(|o| matches!(o, LeaseOutcome::Acquired { taken_over: None })).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    let winner = if outcomes[0] == *won[0] { "aggregator:a" } else { "aggregator:b" };
    let live = Lease { holder: winner.to_owned(), until_ms: t0 + 90_000, turn: 0 };
    assert!(outcomes.contains(&LeaseOutcome::Held(live.clone())), "{outcomes:?}");
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.lease.clone()), (ConversationStatus::Aggregating, Some(live.clone())));

    // While it is live (even at its last millisecond) nobody takes over.
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "deadline:x", t0 + 90_000, t0 + 180_000).await?,
        LeaseOutcome::Held(live.clone())
    );
    // Once expired, one later trigger takes over, and says whose lease it replaced.
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "deadline:x", t0 + 90_001, t0 + 180_001).await?,
        LeaseOutcome::Acquired { taken_over: Some(live) }
    );
    let taken = Lease { holder: "deadline:x".into(), until_ms: t0 + 180_001, turn: 0 };
    assert_eq!(store.get_conversation(&conv.id).await?.and_then(|c| c.lease), Some(taken.clone()));
    assert_eq!(
        store.acquire_lease(&conv.id, agg, "sweep:y", t0 + 100_000, t0 + 190_000).await?,
        LeaseOutcome::Held(taken)
    );
    // One reply: the first finisher flips AGGREGATING → DONE, the other finds it over.
    assert!(store.finish_conversation(&conv.id, 0, "the reply", &Usage::default()).await?);
    assert!(!store.finish_conversation(&conv.id, 0, "a second reply", &Usage::default()).await?);
    assert!(matches!(
        store.acquire_lease(&conv.id, agg, "late", t0 + 900_000, t0 + 990_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Done, .. }
    ));
    assert_eq!(store.acquire_lease(&ConversationId::new(), agg, "x", t0, t0 + 1).await?, LeaseOutcome::Missing);
    Ok(())
}

async fn an_aggregation_lease_needs_nothing_remaining_and_its_turn(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let now = now_ms();
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Running, remaining: 1 }
    );
    store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?;
    assert!(
        matches!(
            store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 1 }, "a", now, now + 1_000).await?,
            LeaseOutcome::NotInPhase { .. }
        ),
        "a lease for another turn is not this turn's"
    );
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?,
        LeaseOutcome::Acquired { taken_over: None }
    );
    assert_eq!(store.get_conversation(&conv.id).await?.map(|c| c.status), Some(ConversationStatus::Aggregating));
    Ok(())
}

async fn a_planning_lease_is_taken_over_only_after_it_expires(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    let creator = Lease { holder: "orchestrator:creator".into(), until_ms: 5_000, turn: 0 };
    conv.lease = Some(creator.clone());
    store.create_conversation(&conv).await?;
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 4_999, 40_000).await?,
        LeaseOutcome::Held(creator.clone())
    );
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 5_001, 40_000).await?,
        LeaseOutcome::Acquired { taken_over: Some(creator) }
    );
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.status, ConversationStatus::Planning, "a planning lease changes no status");
    assert_eq!(after.lease, Some(Lease { holder: "orchestrator:retry".into(), until_ms: 40_000, turn: 0 }));
    store.start_run(&conv.id, None, &[record(&conv, "w01", &[])], &[], &Usage::default()).await?;
    assert!(matches!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "late", 90_000, 99_000).await?,
        LeaseOutcome::NotInPhase { status: ConversationStatus::Running, .. }
    ));
    Ok(())
}

async fn an_idempotency_key_reused_with_another_request_is_refused_and_writes_nothing(store: Store) -> Result<()> {
    let mut first = conversation("C104");
    first.idempotency_key = Some("k-9".into());
    first.request_hash = Some(request_hash("C104", &first.query));
    assert_eq!(store.create_conversation(&first).await?, CreateOutcome::Created);

    let mut other = Conversation::new("C104", "refund everything", now_ms(), 120);
    other.idempotency_key = Some("k-9".into());
    other.request_hash = Some(request_hash("C104", "refund everything"));
    assert_eq!(store.create_conversation(&other).await?, CreateOutcome::KeyReused(first.id.clone()));
    assert_eq!(store.get_conversation(&other.id).await?, None, "nothing written");

    let mut same = conversation("C104");
    same.idempotency_key = Some("k-9".into());
    same.request_hash = first.request_hash.clone();
    assert_eq!(store.create_conversation(&same).await?, CreateOutcome::Existing(first.id.clone()));
    assert_eq!(store.get_conversation(&same.id).await?, None);
    Ok(())
}

/// A conversation in `shard` whose deadline is `deadline_ms`.
async fn in_shard(store: &Store, shard: u32, deadline_ms: i64) -> Result<ConversationId> {
    let mut c = conversation("C104");
    c.deadline_ms = deadline_ms;
    c.sweep_shard = Some(shard);
    store.create_conversation(&c).await?;
    Ok(c.id)
}

async fn overdue_conversations_are_the_non_terminal_ones_of_the_shard_past_their_deadline(store: Store) -> Result<()> {
    let now = now_ms();
    let late = in_shard(&store, 3, now - 5_000).await?;
    let later = in_shard(&store, 3, now - 1_000).await?;
    let due_now = in_shard(&store, 3, now).await?;
    let _not_yet = in_shard(&store, 3, now + 60_000).await?;
    let _other_shard = in_shard(&store, 4, now - 5_000).await?;
    let over = in_shard(&store, 3, now - 9_000).await?;
    assert!(store.fail_conversation(&over, 0, "planning did not finish").await?);
    let mut unsharded = conversation("C104");
    unsharded.deadline_ms = now - 5_000;
    store.create_conversation(&unsharded).await?;

    assert_eq!(store.overdue_conversations(3, now, 10).await?, vec![late.clone(), later.clone()], "earliest first");
    assert_eq!(store.overdue_conversations(3, now, 1).await?, vec![late]);
    assert_eq!(store.overdue_conversations(3, now + 1, 10).await?.len(), 3, "{due_now} is due a millisecond later");
    assert_eq!(store.overdue_conversations(5, now, 10).await?, Vec::<ConversationId>::new());
    Ok(())
}

async fn every_terminal_write_takes_the_conversation_out_of_the_sweep_index(store: Store) -> Result<()> {
    let now = now_ms();
    // Failed from PLANNING; failed by transition; answered.
    let failed = in_shard(&store, 1, now - 1_000).await?;
    store.fail_conversation(&failed, 0, "x").await?;
    let flipped = in_shard(&store, 1, now - 1_000).await?;
    store.transition_conversation(&flipped, ConversationStatus::Planning, ConversationStatus::Failed).await?;
    let answered = in_shard(&store, 1, now - 1_000).await?;
    store.start_run(&answered, None, &[], &[], &Usage::default()).await?;
    let still_open = store.overdue_conversations(1, now, 10).await?;
    assert_eq!(still_open, vec![answered.clone()], "only the RUNNING one is still in the index");
    store.acquire_lease(&answered, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?;
    assert_eq!(store.overdue_conversations(1, now, 10).await?, vec![answered.clone()], "AGGREGATING is not over");
    assert!(store.finish_conversation(&answered, 0, "done", &Usage::default()).await?);
    assert!(store.overdue_conversations(1, now, 10).await?.is_empty());
    // Handed to a person: terminal too.
    let handed = in_shard(&store, 1, now - 1_000).await?;
    store.start_run(&handed, None, &[], &[], &Usage::default()).await?;
    store.acquire_lease(&handed, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?;
    let handoff = Handoff { reason: HandoffReason::CustomerAsked, at_ms: now };
    assert!(store.hand_off(&handed, 0, "a person takes over", &Usage::default(), &handoff).await?);
    assert!(store.overdue_conversations(1, now, 10).await?.is_empty(), "HANDOFF leaves the index");
    for id in [failed, flipped, answered, handed] {
        let c = store.get_conversation(&id).await?.context("item missing")?;
        assert!(c.status.is_terminal() && c.sweep_shard.is_none(), "{c:?}");
    }
    Ok(())
}

async fn the_reply_language_is_stored_with_the_conversation_and_kept_by_every_write(store: Store) -> Result<()> {
    let now = now_ms();
    let mut conv = Conversation::new("C104", "訂單 A1029 到哪裡了？", now, 120);
    conv.language = Some(Language::TraditionalChinese);
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let records = vec![record(&conv, "w01", &[])];
    ensure!(
        store.start_run(&conv.id, None, &records, &["a note".into()], &Usage::default()).await?,
        "start_run refused"
    );
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    store.acquire_lease(&conv.id, LeasePhase::Aggregating { turn: 0 }, "a", now, now + 1_000).await?;
    ensure!(store.finish_conversation(&conv.id, 0, "已回覆", &Usage::default()).await?, "finish refused");
    let back = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(back.status, ConversationStatus::Done, "{back:?}");
    assert_eq!(back.language, Some(Language::TraditionalChinese), "kept through start, count, lease and finish");
    // An item written without a language reads as none, so the query decides.
    let old = conversation("C104");
    ensure!(store.create_conversation(&old).await? == CreateOutcome::Created);
    let back = store.get_conversation(&old.id).await?.context("item missing")?;
    assert_eq!(back.language, None);
    assert_eq!(back.reply_language(), Language::English);
    Ok(())
}

async fn a_customer_s_conversations_list_newest_first_in_pages(store: Store) -> Result<()> {
    let base = now_ms() - 60_000;
    let mut mine = Vec::new();
    for i in 0..5 {
        let mut c = Conversation::new("C104", "where is order A1029?", base + i * 1_000, 120);
        if i == 2 {
            // An idempotency claim carries the customer too, but is no conversation of the list.
            c.idempotency_key = Some(format!("key-{i}"));
        }
        ensure!(store.create_conversation(&c).await? == CreateOutcome::Created);
        mine.push(c);
    }
    let theirs = Conversation::new("C105", "is SAVE20 valid?", base + 2_500, 120);
    store.create_conversation(&theirs).await?;
    let newest_first: Vec<ConversationId> = mine.iter().rev().map(|c| c.id.clone()).collect();

    let mut walked = Vec::new();
    let mut after: Option<ConversationPosition> = None;
    let mut pages = 0;
    loop {
        let page = store.list_customer_conversations("C104", after.as_ref(), 2).await?;
        pages += 1;
        ensure!(page.conversations.len() <= 2 && pages <= 3, "pages of two: {page:?}");
        walked.extend(page.conversations.iter().map(|c| c.id.clone()));
        match page.next {
            Some(next) => {
                ensure!(Some(&next) == page.conversations.last().map(ConversationPosition::of).as_ref());
                after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!((walked, pages), (newest_first.clone(), 3), "three pages, newest first, each once");
    let whole = store.list_customer_conversations("C104", None, 100).await?;
    assert_eq!(whole.next, None, "one page holds them all");
    assert_eq!(whole.conversations.len(), 5);
    assert_eq!(whole.conversations[0], mine[4], "a page holds the conversations as stored");
    let theirs_listed = store.list_customer_conversations("C105", None, 10).await?;
    let theirs_ids: Vec<ConversationId> = theirs_listed.conversations.iter().map(|c| c.id.clone()).collect();
    assert_eq!(theirs_ids, [theirs.id]);
    assert!(store.list_customer_conversations("C199", None, 10).await?.conversations.is_empty());
    Ok(())
}

async fn a_lease_holder_takes_its_own_live_lease_again_and_can_end_it(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    let creator = Lease { holder: "orchestrator:creator".into(), until_ms: 5_000, turn: 0 };
    conv.lease = Some(creator.clone());
    store.create_conversation(&conv).await?;
    // Its holder ends the live planning lease (an instant already past): the next asker takes over at once.
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:creator", 1_000, 999).await?,
        LeaseOutcome::Acquired { taken_over: None }
    );
    let ended = Lease { until_ms: 999, ..creator };
    assert_eq!(store.get_conversation(&conv.id).await?.and_then(|c| c.lease), Some(ended.clone()));
    assert_eq!(
        store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 1_000, 40_000).await?,
        LeaseOutcome::Acquired { taken_over: Some(ended) }
    );

    // The aggregation flip asked again by its own holder (its answer lost): acquired, nothing taken over.
    let (conv, _) = running(&store, &["w01"]).await?;
    store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
    let agg = LeasePhase::Aggregating { turn: 0 };
    for _ in 0..2 {
        assert_eq!(
            store.acquire_lease(&conv.id, agg, "aggregator:a", 10_000, 100_000).await?,
            LeaseOutcome::Acquired { taken_over: None }
        );
    }
    let live = Lease { holder: "aggregator:a".into(), until_ms: 100_000, turn: 0 };
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.lease.clone()), (ConversationStatus::Aggregating, Some(live.clone())));
    assert_eq!(store.acquire_lease(&conv.id, agg, "aggregator:b", 10_001, 100_001).await?, LeaseOutcome::Held(live));
    Ok(())
}

async fn start_run_flips_only_for_the_planning_lease_holder_and_finds_its_own_flip_made(store: Store) -> Result<()> {
    let mut conv = conversation("C104");
    conv.lease = Some(Lease { holder: "orchestrator:first".into(), until_ms: 5_000, turn: 0 });
    store.create_conversation(&conv).await?;
    let taken = store.acquire_lease(&conv.id, LeasePhase::Planning, "orchestrator:retry", 5_001, 40_000).await?;
    assert!(matches!(taken, LeaseOutcome::Acquired { taken_over: Some(_) }), "{taken:?}");
    // The planner taken over finishes its plan late: refused, nothing of it is the conversation's.
    let late = [record(&conv, "w01", &[]), record(&conv, "w02", &[])];
    assert!(!store.start_run(&conv.id, Some("orchestrator:first"), &late, &[], &Usage::default()).await?);
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total), (ConversationStatus::Planning, 0));
    assert!(store.list_subtasks(&conv.id).await?.is_empty());
    // The holder's flip; asked again (its answer lost), it is found made, and nothing changes.
    let plan = [record(&conv, "w01", &[])];
    for _ in 0..2 {
        assert!(store.start_run(&conv.id, Some("orchestrator:retry"), &plan, &[], &Usage::default()).await?);
    }
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 1, 1));
    assert_eq!(after.plan, BTreeSet::from(["w01".to_owned()]));
    assert!(!store.start_run(&conv.id, Some("orchestrator:first"), &late, &[], &Usage::default()).await?);
    let ids: Vec<SubtaskId> = store.list_subtasks(&conv.id).await?.into_iter().map(|r| r.subtask.id).collect();
    assert_eq!(ids, [SubtaskId::from("w01")]);
    assert_eq!(store.count_finished(&conv.id, &"w02".into(), &Usage::default()).await?, CountOutcome::AlreadyCounted);
    assert_eq!(
        store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?,
        CountOutcome::Counted { remaining: 0 }
    );
    Ok(())
}

/// Each conditional write the guarantees rely on, applied and its answer lost, then retried by its caller
/// with the same arguments: the retry recognises its own write and answers as the first call would have.
async fn a_conditional_write_applied_whose_answer_was_lost_is_recognised_as_its_own_when_retried(
    store: Store,
) -> Result<()> {
    let (decorator, lossy) = losing(&store);
    let lose = |op: StoreOp| -> Result<()> { Ok(decorator.lose(op)?) };
    let lost = |r: std::result::Result<(), StoreError>| -> Result<()> {
        ensure!(matches!(r, Err(e) if e.is_transient()), "answer not lost");
        Ok(())
    };

    // create_conversation, with an Idempotency-Key (a transaction with its claim) and without (one put).
    for key in [Some("first-and-only"), None] {
        let mut conv = conversation("C104");
        conv.idempotency_key = key.map(str::to_owned);
        conv.request_hash = Some(request_hash("C104", &conv.query));
        conv.lease = Some(Lease { holder: "orchestrator:first".into(), until_ms: now_ms() + 35_000, turn: 0 });
        lose(StoreOp::CreateConversation)?;
        lost(lossy.create_conversation(&conv).await.map(|_| ()))?;
        assert_eq!(lossy.create_conversation(&conv).await?, CreateOutcome::Created, "key {key:?}");
        assert_eq!(store.get_conversation(&conv.id).await?, Some(conv.clone()));

        // The planner's flip PLANNING → RUNNING.
        let plan = [record(&conv, "w01", &[])];
        lose(StoreOp::StartRun)?;
        lost(lossy.start_run(&conv.id, Some("orchestrator:first"), &plan, &[], &Usage::default()).await.map(|_| ()))?;
        assert!(lossy.start_run(&conv.id, Some("orchestrator:first"), &plan, &[], &Usage::default()).await?);
        let after = store.get_conversation(&conv.id).await?.context("item missing")?;
        assert_eq!((after.status, after.total, after.remaining), (ConversationStatus::Running, 1, 1));

        // The aggregation flip RUNNING → AGGREGATING.
        store.count_finished(&conv.id, &"w01".into(), &Usage::default()).await?;
        let agg = LeasePhase::Aggregating { turn: 0 };
        let now = now_ms();
        lose(StoreOp::AcquireLease)?;
        lost(lossy.acquire_lease(&conv.id, agg, "aggregator:a", now, now + 90_000).await.map(|_| ()))?;
        assert_eq!(
            lossy.acquire_lease(&conv.id, agg, "aggregator:a", now, now + 90_000).await?,
            LeaseOutcome::Acquired { taken_over: None }
        );
    }
    // A second request with the same key is still told it is not the first.
    let mut again = conversation("C104");
    again.idempotency_key = Some("first-and-only".into());
    again.request_hash = Some(request_hash("C104", &again.query));
    assert!(matches!(store.create_conversation(&again).await?, CreateOutcome::Existing(_)));
    Ok(())
}

/// `count_finished` applied, its answer lost, retried: the retry answers `AlreadyCounted` (no holder tells
/// the retry from a duplicate delivery, and the worker does the same after either: it releases the
/// dependents; the aggregator is started by the item's stream when `remaining` reaches 0, not by the
/// answer), and the subtask is counted once with its usage added once.
async fn a_count_whose_answer_was_lost_is_retried_as_already_counted_and_counts_once(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    let (decorator, lossy) = losing(&store);
    let usage = Usage { prompt_tokens: Some(12), ..Default::default() };
    for sid in ["w01", "w02"] {
        decorator.lose(StoreOp::CountFinished)?;
        answer_lost(lossy.count_finished(&conv.id, &sid.into(), &usage).await)?;
        assert_eq!(lossy.count_finished(&conv.id, &sid.into(), &usage).await?, CountOutcome::AlreadyCounted);
    }
    let after = store.get_conversation(&conv.id).await?.context("item missing")?;
    assert_eq!(after.remaining, 0, "each subtask counted once, the last one to 0");
    assert_eq!(after.finished, BTreeSet::from(["w01".to_owned(), "w02".to_owned()]));
    assert_eq!(after.usage.prompt_tokens, Some(24), "usage added once per subtask");
    Ok(())
}

/// `begin_attempt` applied, its answer lost, retried by the same attempt: it is started (its own live
/// lease, never another holder's), counted once, and a second attempt still waits for that lease.
async fn an_attempt_begun_whose_answer_was_lost_is_retried_as_the_same_attempt_counted_once(
    store: Store,
) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let (decorator, lossy) = losing(&store);
    let lease = AttemptLease::new(60_000);
    decorator.lose(StoreOp::BeginAttempt)?;
    answer_lost(lossy.begin_attempt(&conv.id, &"w01".into(), &lease, 1_000).await)?;
    let AttemptStart::Started(rec) = lossy.begin_attempt(&conv.id, &"w01".into(), &lease, 1_000).await? else {
        anyhow::bail!("the attempt whose answer was lost did not start on its retry");
    };
    assert_eq!((rec.status, rec.attempts, rec.started_at_ms), (SubtaskStatus::Running, 1, Some(1_000)));
    assert_eq!(rec.lease, Some(lease.clone()));
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?, Some(rec), "the record answered is the one stored");
    let other = AttemptLease::new(70_000);
    assert!(matches!(
        store.begin_attempt(&conv.id, &"w01".into(), &other, 2_000).await?,
        AttemptStart::Leased(r) if r.lease == Some(lease.clone()) && r.attempts == 1
    ));
    // The lease expired: the next attempt is the second.
    let AttemptStart::Started(next) = store.begin_attempt(&conv.id, &"w01".into(), &other, 60_000).await? else {
        anyhow::bail!("the next attempt did not start after the lease expired");
    };
    assert_eq!((next.attempts, next.lease), (2, Some(other)));
    Ok(())
}

/// `renew_attempt` (the live attempt's heartbeat): the holder extends its lease, so a second
/// attempt waits past the first expiry; a renewal applied whose answer was lost is recognised as its
/// own on the retry; once the lease expired and another attempt took it, the old holder's renewal is
/// refused and changes nothing; a terminal subtask's lease is not renewed, nor an unknown subtask's.
async fn an_attempt_lease_is_renewed_only_by_its_holder_and_a_renewal_whose_answer_was_lost_is_its_own(
    store: Store,
) -> Result<()> {
    let (conv, _) = running(&store, &["w01", "w02"]).await?;
    let w01: SubtaskId = "w01".into();
    let mut lease = AttemptLease::new(31_000);
    ensure!(matches!(store.begin_attempt(&conv.id, &w01, &lease, 1_000).await?, AttemptStart::Started(_)));
    lease.until_ms = 41_000;
    assert!(store.renew_attempt(&conv.id, &w01, &lease).await?, "the holder renews its live lease");
    let other = AttemptLease::new(70_000);
    assert!(
        matches!(store.begin_attempt(&conv.id, &w01, &other, 35_000).await?, AttemptStart::Leased(r) if r.lease == Some(lease.clone())),
        "past the first expiry, the renewed lease still holds"
    );
    let (decorator, lossy) = losing(&store);
    lease.until_ms = 51_000;
    decorator.lose(StoreOp::RenewAttempt)?;
    answer_lost(lossy.renew_attempt(&conv.id, &w01, &lease).await)?;
    assert!(lossy.renew_attempt(&conv.id, &w01, &lease).await?, "the retry meets its own renewal");
    let stored = store.get_subtask(&conv.id, &w01).await?.context("w01 missing")?;
    assert_eq!((stored.lease, stored.attempts), (Some(lease.clone()), 1), "renewed, never counted as an attempt");
    // Expired and taken over: the old holder's renewal is refused and writes nothing.
    let AttemptStart::Started(taken) = store.begin_attempt(&conv.id, &w01, &other, 51_000).await? else {
        anyhow::bail!("the next attempt did not start after the renewed lease expired");
    };
    lease.until_ms = 90_000;
    assert!(!store.renew_attempt(&conv.id, &w01, &lease).await?, "another attempt holds it now");
    assert_eq!(store.get_subtask(&conv.id, &w01).await?, Some(taken.clone()), "nothing written");
    // An expired lease nobody took is still its holder's to renew.
    let w02: SubtaskId = "w02".into();
    let mut late = AttemptLease::new(2_000);
    ensure!(matches!(store.begin_attempt(&conv.id, &w02, &late, 1_000).await?, AttemptStart::Started(_)));
    late.until_ms = 95_000;
    assert!(store.renew_attempt(&conv.id, &w02, &late).await?, "expired, but nobody took it");
    // A terminal subtask keeps its lease as it was; an unknown one is refused.
    recorded(store.record_result(&conv.id, &w01, &succeeded("done"), &Usage::default(), &[], 60_000).await?)?;
    let mut own = other.clone();
    own.until_ms = 99_000;
    assert!(!store.renew_attempt(&conv.id, &w01, &own).await?, "a finished subtask's lease is not renewed");
    assert_eq!(store.get_subtask(&conv.id, &w01).await?.and_then(|r| r.lease), Some(other));
    assert!(!store.renew_attempt(&conv.id, &"w99".into(), &own).await?, "no such subtask");
    Ok(())
}

/// `record_result` applied, its answer lost, retried with the same result: the retry answers the record
/// as written (`Recorded`, so the worker's finish is reported and counted as its own), and a different
/// result after it is still told the subtask had finished.
async fn a_result_recorded_whose_answer_was_lost_is_retried_as_the_record_written(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let (decorator, lossy) = losing(&store);
    let result = succeeded("A1029 shipped on Monday");
    let usage = Usage { prompt_tokens: Some(7), completion_tokens: Some(3), ..Default::default() };
    let tools = vec!["shop__track_shipment".to_owned()];
    decorator.lose(StoreOp::RecordResult)?;
    answer_lost(lossy.record_result(&conv.id, &"w01".into(), &result, &usage, &tools, 3_000).await)?;
    let written = recorded(lossy.record_result(&conv.id, &"w01".into(), &result, &usage, &tools, 3_000).await?)?;
    assert_eq!((written.status, written.finished_at_ms), (SubtaskStatus::Succeeded, Some(3_000)));
    assert_eq!((written.result.as_ref(), written.usage, &written.tools_used), (Some(&result), usage, &tools));
    assert_eq!(store.get_subtask(&conv.id, &"w01".into()).await?.as_ref(), Some(&written));
    let late = SubtaskResult::failed(FailureKind::DeadlinePassed, "late");
    match store.record_result(&conv.id, &"w01".into(), &late, &Usage::default(), &[], 3_000).await? {
        RecordOutcome::AlreadyFinished(rec) => assert_eq!(rec, written),
        other => anyhow::bail!("expected AlreadyFinished, got {other:?}"),
    }
    Ok(())
}

/// `record_intent` applied, its answer lost, retried: the retry answers the entry as stored
/// (`Existing`, equal to the intent sent), and the journal holds it once. `Existing` is the safe answer:
/// nothing on the entry tells this attempt's write from an earlier attempt's, so the worker dispatches it
/// as possibly sent, with the entry's key (the shop answers a repeated key with its first outcome).
async fn an_intent_recorded_whose_answer_was_lost_is_retried_as_the_entry_recorded_once(store: Store) -> Result<()> {
    let (conv, _) = running(&store, &["w01"]).await?;
    let lease = AttemptLease::new(now_ms() + 60_000);
    let AttemptStart::Started(_) = store.begin_attempt(&conv.id, &"w01".into(), &lease, now_ms()).await? else {
        anyhow::bail!("the attempt did not start");
    };
    let (decorator, lossy) = losing(&store);
    let mut arguments = serde_json::Map::new();
    arguments.insert("order_id".into(), "A1029".into());
    let intent = Effect::intent(&conv.id, &"w01".into(), 1, "shop__refund", arguments, 4_000);
    decorator.lose(StoreOp::RecordIntent)?;
    answer_lost(lossy.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent).await)?;
    assert_eq!(
        lossy.record_intent(&conv.id, &"w01".into(), &lease.holder, &intent).await?,
        IntentOutcome::Existing(intent.clone())
    );
    let rec = store.get_subtask(&conv.id, &"w01".into()).await?.context("subtask missing")?;
    assert_eq!(rec.effects, vec![intent]);
    Ok(())
}
