//! Contract tests of the `ConversationStore` port: each test is written once and runs against the embedded store and DynamoDB on a local emulator; leases and lost answers are in `contract_ownership.rs`.
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
    Conversation, ConversationId, ConversationStatus, FailureKind, Handoff, HandoffReason, MAX_RESULT_CHARS, SubtaskId,
    SubtaskRecord, SubtaskResult, SubtaskStatus, ToolCallRecord, Usage, now_ms, request_hash,
};
use swarm_core::effects::AttemptLease;
use swarm_core::language::Language;
use swarm_core::ports::{
    AttemptStart, ConversationPosition, ConversationStore, CountOutcome, CreateOutcome, LeasePhase, RecordOutcome,
};

type Store = Arc<dyn ConversationStore>;

use common::store_fixtures::{conversation, record, recorded, running, succeeded};

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
    an_idempotency_key_reused_with_another_request_is_refused_and_writes_nothing,
    overdue_conversations_are_the_non_terminal_ones_of_the_shard_past_their_deadline,
    every_terminal_write_takes_the_conversation_out_of_the_sweep_index,
    the_reply_language_is_stored_with_the_conversation_and_kept_by_every_write,
    a_customer_s_conversations_list_newest_first_in_pages,
);

// ------------------------------------------------------------------ fixtures

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
