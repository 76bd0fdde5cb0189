//! No conversation hangs, whatever dies when: each crash point between two writes, a lost aggregation and a lost deadline message, each on both backends (embedded, and the AWS adapters on the emulator), and what moves the conversation on afterwards — the aggregation lease taken over once it expired, the deadline path re-armed until the conversation is terminal, the periodic sweep, a retry with the same `Idempotency-Key`. Plus the reply that always fits its item, on both stores.
//!
//! Time runs at [`SCALE`] (1/240) of the timing table, with room where a loaded machine misses the
//! scaled budgets ([`timings`]): the aggregation lease 90 s × 12 → 4.5 s, the planning lease 35 s ×
//! 40 → 5.8 s, the workers' timeouts 60 s × 12 → 3 s, the sweep's period 60 s × 10 → 2.5 s, the
//! tasks queue's visibility timeout 360 s × 4 → 6 s, the worker's receipt heartbeat × 12 (a beat
//! 250 ms cut at 500 ms, the receipt visibility and the attempt lease 1.5 s: at the table's 21 ms
//! beats the emulator fell seconds behind), the deadline path's re-arm 30 s → 1 s (whole
//! seconds of `DelaySeconds`), the conversation's deadline as each test sets it.
//! The emulator instantiations need `SWARM_AWS_ENDPOINT`; without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use swarm_core::domain::{
    Conversation, ConversationStatus, FailureKind, MAX_REPLY_BYTES, Subtask, SubtaskRecord, SubtaskResult,
    SubtaskStatus, Usage, now_ms,
};
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_core::llm::Models;
use swarm_core::ports::{ConversationStore, LeaseOutcome, LlmError, Purpose, ToolGateway};
use swarm_core::timings::Timings;
use swarm_local::{BackendChoice, Function, LocalStack, StackOptions, Wraps};
use swarm_tests::{FlakyStore, HangingTools, RecordLog, Recorded, ScriptedModel, StoreOp, over_offline, with_plan};

/// The factor every timing of the table is multiplied by here.
const SCALE: f64 = 1.0 / 240.0;
/// How long a test waits for its conversation.
const PATIENCE: Duration = Duration::from_secs(60);

swarm_tests::on_both_backends!(
    an_aggregator_killed_after_the_flip_is_taken_over_once_its_lease_expired_and_answered_once,
    a_conversation_the_deadline_path_closed_is_answered_by_it_when_the_aggregation_is_lost,
    a_deadline_path_killed_after_closing_leaves_the_conversation_to_the_next_run_or_the_sweep,
    an_orchestrator_killed_after_writing_the_conversation_is_planned_by_a_retry_with_the_same_key,
    a_retry_inside_a_dead_planners_lease_is_told_to_come_back_and_then_plans_the_conversation,
    an_orchestrator_killed_after_writing_the_conversation_is_failed_cleanly_by_the_sweep,
    an_orchestrator_killed_before_enqueueing_is_resumed_by_a_retry_with_the_same_key,
    an_orchestrator_killed_before_enqueueing_whose_lease_outlasts_the_deadline_ends_failed_never_started,
    an_idempotency_key_reused_with_another_message_is_refused_with_422_and_writes_nothing,
    a_parent_killed_between_sending_its_dependent_and_flipping_it_leaves_no_dependent_without_a_message,
    a_reply_of_a_hundred_maximal_subtasks_fits_its_item_and_names_every_failed_one,
);

/// The standard table with room for tool calls and to plan (the orchestrator's timeout, budget and
/// lease × 40: a 1 s invocation is missed on a loaded machine), for whole invocations (the workers',
/// the sweep's and the aggregator's timeouts, the aggregation lease above them, the queues'
/// visibility timeouts, the receipt heartbeat: [`swarm_tests::with_room_for_invocations`]) and the conversation's deadline
/// at `deadline_secs` (scaled by [`SCALE`]). The tests wait on the stack's own lease, never a constant.
fn timings(deadline_secs: u64) -> Timings {
    let mut t = swarm_tests::with_room_for_invocations(swarm_tests::with_room_for_tool_calls(
        swarm_tests::with_room_to_plan(Timings::standard().clone()),
    ));
    t.conversation.deadline = Duration::from_secs(deadline_secs);
    t
}

/// One order lookup (`w01`).
fn one_subtask() -> ScriptedModel {
    with_plan(
        over_offline(),
        &serde_json::json!({"subtasks": [
            {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]}
        ]})
        .to_string(),
    )
}

/// An order lookup (`w01`) and, after it, where its parcel is (`w02`).
fn a_parent_and_its_dependent() -> ScriptedModel {
    with_plan(
        over_offline(),
        &serde_json::json!({"subtasks": [
            {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]},
            {"id": "w02", "instruction": "Where is the parcel of order A1029?", "tools": ["shop__track_shipment"],
             "depends_on": ["w01"]}
        ]})
        .to_string(),
    )
}

const MESSAGE: &str = "Where is order A1029?";

/// Kills the first invocation that reaches `point`, and no other.
struct CrashOnce(CrashPoint, AtomicBool);

impl CrashOnce {
    fn at(point: CrashPoint) -> Option<Arc<dyn FaultPlan>> {
        Some(Arc::new(Self(point, AtomicBool::new(false))))
    }
}

impl FaultPlan for CrashOnce {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0 && !self.1.swap(true, Ordering::SeqCst)
    }
}

/// Every lease taken or refused and every reply written through the stores this wraps.
fn recorded(log: &RecordLog) -> Vec<Recorded> {
    log.lock().unwrap().clone()
}

/// The replies written (`AGGREGATING → DONE`) among `records`.
fn replies_written(records: &[Recorded]) -> usize {
    records.iter().filter(|r| matches!(r, Recorded::Finish { written: true })).count()
}

/// The id of the one conversation the stack holds, found the way the sweep finds it: in the sweep
/// index, which carries it from its first write (an orchestrator that died answered no id).
async fn only_conversation(stack: &LocalStack) -> String {
    let mut found = Vec::new();
    for shard in 0..stack.timings().sweep.shards {
        found.extend(stack.store().overdue_conversations(shard, i64::MAX, 10).await.unwrap());
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].to_string()
}

/// A stack planning [`one_subtask`] whose first invocation reaching `point` dies there, on `timings` at [`SCALE`].
async fn one_subtask_killed_at(backend: BackendChoice, point: CrashPoint, timings: Timings) -> LocalStack {
    LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        faults: CrashOnce::at(point),
        timings,
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap()
}

/// The stack's counters once at least `n` invocations are counted killed (at most 30 s): a kill is
/// counted when the platform's task running the invocation next runs, which on a loaded machine can
/// be after the conversation the killed invocation left behind was answered by another.
async fn counters_once_killed(stack: &LocalStack, n: u64) -> swarm_local::CounterSnapshot {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let counters = stack.counters().snapshot();
        if counters.killed_invocations >= n || tokio::time::Instant::now() >= deadline {
            return counters;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts `MESSAGE` for C104 (with `key`); answers the conversation id.
async fn post(stack: &LocalStack, key: Option<&str>) -> String {
    let (status, body) = stack.post_conversation(MESSAGE, "C104", key).await.unwrap();
    assert_eq!(status, 202, "{body}");
    body["conversation_id"].as_str().unwrap().to_owned()
}

async fn an_aggregator_killed_after_the_flip_is_taken_over_once_its_lease_expired_and_answered_once(
    backend: BackendChoice,
) {
    let log = RecordLog::default();
    let (worker_log, aggregator_log) = (log.clone(), log.clone());
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        faults: CrashOnce::at(CrashPoint::AggregatorAfterFlip),
        wraps: Wraps::default()
            .store(
                &Function::WORKERS,
                Arc::new(move |inner| Arc::new(FlakyStore::new(inner).recording(worker_log.clone()))),
            )
            .store(
                &[Function::Aggregator],
                Arc::new(move |inner| Arc::new(FlakyStore::new(inner).recording(aggregator_log.clone()))),
            ),
        timings: timings(2400),
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack, None).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let killed = counters_once_killed(&stack, 1).await.killed_invocations;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert!(view.reply.as_deref().unwrap_or("").contains("A1029"), "{view:?}");
    assert_eq!(killed, 1, "the aggregator died after its flip");
    let records = recorded(&log);
    let leases: Vec<(&str, i64, i64, &LeaseOutcome)> = records
        .iter()
        .filter_map(|r| match r {
            Recorded::Lease { holder, now_ms, until_ms, outcome } => {
                Some((holder.as_str(), *now_ms, *until_ms, outcome))
            }
            Recorded::Finish { .. } => None,
        })
        .collect();
    let (first_holder, _, first_until, first) = leases[0];
    assert!(first_holder.starts_with("aggregator:"), "{leases:?}");
    assert_eq!(*first, LeaseOutcome::Acquired { taken_over: None }, "{leases:?}");
    let takeovers: Vec<_> =
        leases.iter().filter(|(_, _, _, o)| matches!(o, LeaseOutcome::Acquired { taken_over: Some(_) })).collect();
    assert_eq!(takeovers.len(), 1, "taken over once: {leases:?}");
    let (_, taken_at, _, LeaseOutcome::Acquired { taken_over: Some(expired) }) = takeovers[0] else { unreachable!() };
    assert_eq!((expired.holder.as_str(), expired.until_ms), (first_holder, first_until), "the dead one's lease");
    assert!(*taken_at > first_until, "taken over at {taken_at}, before the lease ended at {first_until}");
    for (holder, at, _, outcome) in &leases[1..] {
        if *at <= first_until {
            assert!(matches!(outcome, LeaseOutcome::Held(_)), "{holder} got {outcome:?} while the lease was live");
        }
    }
    assert_eq!(replies_written(&records), 1, "answered once: {records:?}");
}

/// A stack whose order tool never answers (the invocation running `w01` is cut at its timeout, and
/// its message comes back only after the deadline: the queue's visibility timeout is lifted to
/// 3600 s, 15 s scaled) and whose aggregator can never take the lease, recording leases and
/// replies into `log`. The deadline path closes `w01`; nothing but it can answer.
async fn a_stack_whose_aggregation_is_lost(
    backend: BackendChoice,
    log: &RecordLog,
    faults: Option<Arc<dyn FaultPlan>>,
) -> LocalStack {
    let worker_log = log.clone();
    let mut timings = timings(1200);
    timings.queues.tasks.visibility_timeout = Duration::from_secs(3600);
    LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        wraps: Wraps::default()
            .tools(
                &[Function::Worker, Function::RefundWorker],
                Arc::new(|inner| Arc::new(HangingTools::new(inner, "shop__get_order", 1_000)) as Arc<dyn ToolGateway>),
            )
            .store(
                &Function::WORKERS,
                Arc::new(move |inner| Arc::new(FlakyStore::new(inner).recording(worker_log.clone()))),
            )
            .store(
                &[Function::Aggregator],
                Arc::new(|inner| {
                    Arc::new(FlakyStore::new(inner).fail(StoreOp::AcquireLease, "ThrottlingException (injected)"))
                        as Arc<dyn ConversationStore>
                }),
            ),
        faults,
        timings,
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap()
}

async fn a_conversation_the_deadline_path_closed_is_answered_by_it_when_the_aggregation_is_lost(
    backend: BackendChoice,
) {
    let log = RecordLog::default();
    let stack = a_stack_whose_aggregation_is_lost(backend, &log, None).await;
    let id = post(&stack, None).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    let w01 = &view.subtasks[0];
    assert_eq!((w01.status, w01.error_code), (SubtaskStatus::Failed, Some(FailureKind::DeadlinePassed)), "{w01:?}");
    assert!(view.reply.as_deref().unwrap_or("").contains("could not be finished in time"), "{view:?}");
    let records = recorded(&log);
    let answered_by: Vec<&str> = records
        .iter()
        .filter_map(|r| match r {
            Recorded::Lease { holder, outcome: LeaseOutcome::Acquired { .. }, .. } => Some(holder.as_str()),
            _ => None,
        })
        .collect();
    // The aggregator can never take the lease here: whatever the stream did, the deadline path (its
    // message or the sweep) answered, once.
    assert_eq!(answered_by.len(), 1, "{records:?}");
    assert!(answered_by[0].starts_with("deadline:"), "the deadline path (or the sweep) took the lease: {records:?}");
    assert_eq!(replies_written(&records), 1, "{records:?}");
}

async fn a_deadline_path_killed_after_closing_leaves_the_conversation_to_the_next_run_or_the_sweep(
    backend: BackendChoice,
) {
    let log = RecordLog::default();
    let stack = a_stack_whose_aggregation_is_lost(backend, &log, CrashOnce::at(CrashPoint::DeadlineAfterClose)).await;
    let id = post(&stack, None).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let counters = counters_once_killed(&stack, 1).await;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.subtasks[0].error_code, Some(FailureKind::DeadlinePassed));
    assert!(counters.killed_invocations >= 1, "a deadline path died after closing: {counters:?}");
    assert_eq!(replies_written(&recorded(&log)), 1);
}

async fn an_orchestrator_killed_after_writing_the_conversation_is_planned_by_a_retry_with_the_same_key(
    backend: BackendChoice,
) {
    let stack = one_subtask_killed_at(backend, CrashPoint::OrchestratorAfterCreate, timings(9600)).await;
    let died = stack.post_conversation(MESSAGE, "C104", Some("retry-1")).await;
    assert!(died.is_err(), "the first invocation died after its first write: {died:?}");
    assert_eq!(stack.conversation_count().await.unwrap(), 1);
    // The client retries once the creator's planning lease has surely expired.
    tokio::time::sleep(stack.timings().orchestrator.lease * 3).await;
    let id = post(&stack, Some("retry-1")).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let again = post(&stack, Some("retry-1")).await;
    let count = stack.conversation_count().await.unwrap();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.subtasks.len(), 1);
    assert_eq!(view.subtasks[0].status, SubtaskStatus::Succeeded, "{view:?}");
    assert_eq!((again, count), (id, 1), "one conversation for the key");
}

async fn a_retry_inside_a_dead_planners_lease_is_told_to_come_back_and_then_plans_the_conversation(
    backend: BackendChoice,
) {
    // A planning lease of 600 s → 2.5 s here, so the first retry surely lands inside it.
    let mut timings = timings(2400);
    timings.orchestrator.lease = Duration::from_secs(600);
    let stack = one_subtask_killed_at(backend, CrashPoint::OrchestratorAfterCreate, timings).await;
    let died = stack.post_conversation(MESSAGE, "C104", Some("retry-2")).await;
    assert!(died.is_err(), "the first invocation died after its first write: {died:?}");
    // Answering 202 now would give the client a conversation nobody plans: 409 with when to come back.
    let (status, body) = stack.post_conversation(MESSAGE, "C104", Some("retry-2")).await.unwrap();
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("request_in_progress")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("retry in 1 s") || message.contains("retry in 2 s") || message.contains("retry in 3 s"),
        "{message}"
    );
    tokio::time::sleep(stack.timings().orchestrator.lease + Duration::from_millis(500)).await;
    let id = post(&stack, Some("retry-2")).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let count = stack.conversation_count().await.unwrap();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.subtasks[0].status, SubtaskStatus::Succeeded, "{view:?}");
    assert_eq!(count, 1, "one conversation for the key");
}

async fn an_orchestrator_killed_after_writing_the_conversation_is_failed_cleanly_by_the_sweep(backend: BackendChoice) {
    let stack = one_subtask_killed_at(backend, CrashPoint::OrchestratorAfterCreate, timings(1200)).await;
    let died = stack.post_conversation(MESSAGE, "C104", None).await;
    assert!(died.is_err(), "{died:?}");
    // Nobody retries and no deadline message was armed: only the sweep knows of it.
    let id = only_conversation(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let sweeps = stack.counters().snapshot().sweep_invocations;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Failed, "{view:?}");
    assert!(sweeps > 0);
}

async fn an_orchestrator_killed_before_enqueueing_is_resumed_by_a_retry_with_the_same_key(backend: BackendChoice) {
    let stack = one_subtask_killed_at(backend, CrashPoint::OrchestratorAfterStartRun, timings(9600)).await;
    assert!(stack.post_conversation(MESSAGE, "C104", Some("retry-2")).await.is_err());
    tokio::time::sleep(stack.timings().orchestrator.lease * 3).await;
    let id = post(&stack, Some("retry-2")).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.subtasks[0].status, SubtaskStatus::Succeeded, "the retry sent the subtask the creator never did");
}

async fn an_orchestrator_killed_before_enqueueing_whose_lease_outlasts_the_deadline_ends_failed_never_started(
    backend: BackendChoice,
) {
    let stack = one_subtask_killed_at(backend, CrashPoint::OrchestratorAfterStartRun, timings(1200)).await;
    assert!(stack.post_conversation(MESSAGE, "C104", None).await.is_err());
    let id = only_conversation(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    stack.shutdown().await;

    // Its planning lease (5.8 s) outlasts its deadline (5 s): the deadline path's first run is at the
    // deadline, w01 was never sent and never began. Nothing of it ran: FAILED (not started), never
    // DONE with a reply about work that never ran.
    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Failed, "{view:?}");
    assert_eq!(view.subtasks[0].error_code, Some(FailureKind::DeadlinePassed));
    assert!(view.reply.is_none(), "{:?}", view.reply);
}

async fn an_idempotency_key_reused_with_another_message_is_refused_with_422_and_writes_nothing(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        timings: timings(1200),
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let first = post(&stack, Some("k-42")).await;
    let (status, body) =
        stack.post_conversation("Refund every order I ever made.", "C104", Some("k-42")).await.unwrap();
    let (same_status, same) = stack.post_conversation(MESSAGE, "C104", Some("k-42")).await.unwrap();
    // The key is the customer's: another customer's same key is a new conversation.
    let (other_status, other) = stack.post_conversation(MESSAGE, "C105", Some("k-42")).await.unwrap();
    let count = stack.conversation_count().await.unwrap();
    stack.shutdown().await;

    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(&first), "names the key's conversation: {body}");
    assert_eq!((same_status, same["conversation_id"].as_str()), (202, Some(first.as_str())), "the same request");
    assert_eq!(other_status, 202);
    assert_ne!(other["conversation_id"].as_str(), Some(first.as_str()));
    assert_eq!(count, 2, "the refused request wrote nothing");
}

async fn a_parent_killed_between_sending_its_dependent_and_flipping_it_leaves_no_dependent_without_a_message(
    backend: BackendChoice,
) {
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(a_parent_and_its_dependent()))),
        faults: CrashOnce::at(CrashPoint::WorkerAfterReleaseSend),
        // 20 s: the killed parent's message comes back after the tasks queue's 6 s, long before it.
        timings: timings(4800),
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack, None).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let killed = counters_once_killed(&stack, 1).await.killed_invocations;
    let records = stack.store().list_subtasks(&swarm_core::domain::ConversationId::parse(&id).unwrap()).await;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(killed, 1);
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    for s in &view.subtasks {
        assert_eq!(s.status, SubtaskStatus::Succeeded, "{s:?}: not left to the deadline");
    }
    let w02 = records.unwrap().into_iter().find(|r| r.subtask.id == "w02").unwrap();
    assert_eq!(w02.attempts, 1, "the message sent before the crash ran it, once");
}

/// The table a store test runs on: the embedded store, or a fresh table on the emulator.
async fn store_of(backend: &BackendChoice, test: &str) -> Arc<dyn ConversationStore> {
    match backend {
        BackendChoice::Embedded => Arc::new(swarm_adapters::embedded::InMemoryConversationStore::new()),
        BackendChoice::Emulator(options) => {
            let (client, _, _) = swarm_local::platform::emulator::emulator_clients(&options.endpoint, &options.region);
            let table = format!("no-hang-{}-{}", &test[..20], swarm_core::domain::ConversationId::new());
            swarm_local::platform::dynamo_table::create_table(&client, &table).await.unwrap();
            Arc::new(swarm_adapters::aws::dynamo::DynamoConversationStore::new(client, table))
        }
    }
}

async fn a_reply_of_a_hundred_maximal_subtasks_fits_its_item_and_names_every_failed_one(backend: BackendChoice) {
    let store = store_of(&backend, "a_reply_of_a_hundred_maximal_subtasks").await;
    let conversation = Conversation::new("C104", "一百个问题", now_ms(), 120);
    store.create_conversation(&conversation).await.unwrap();
    let records: Vec<SubtaskRecord> = (0..100)
        .map(|i| {
            let subtask = Subtask {
                id: format!("w{i:03}").into(),
                instruction: format!("w{i:03} 查询订单 A{i:04} 的状态和物流"),
                tools: vec![],
                depends_on: vec![],
            };
            SubtaskRecord::new(&conversation, subtask, "support".into())
        })
        .collect();
    assert!(store.start_run(&conversation.id, None, &records, &[], &Usage::default()).await.unwrap());
    // Every subtask answered at the longest a result is kept (16,000 characters, 3 bytes each),
    // every fifth one failed.
    for (i, r) in records.iter().enumerate() {
        let result = if i % 5 == 0 {
            SubtaskResult::failed(FailureKind::ModelFailed, "HTTP 500")
        } else {
            SubtaskResult::Succeeded { text: format!("{} 已发货", r.subtask.id).repeat(2_000), tool_calls: vec![] }
                .bounded()
        };
        store.record_result(&conversation.id, &r.subtask.id, &result, &Usage::default(), &[], now_ms()).await.unwrap();
        store.count_finished(&conversation.id, &r.subtask.id, &Usage::default()).await.unwrap();
    }
    let failing = ScriptedModel::always(Err(LlmError::Transient { status: Some(503), message: "down".into() }));
    let aggregator = aggregator::Aggregator::new(
        store.clone(),
        Arc::new(failing.answer(Purpose::Reply, Err(LlmError::Transient { status: Some(503), message: "x".into() }))),
        aggregator::AggregatorSettings { reply_timeout: Duration::from_millis(10), ..Default::default() },
    );
    let outcome = aggregator.aggregate(&conversation.id).await;
    let stored = store.get_conversation(&conversation.id).await.unwrap().unwrap();

    assert_eq!(outcome.unwrap(), aggregator::AggregateOutcome::Replied { by_model: false }, "the item was written");
    assert_eq!(stored.status, ConversationStatus::Done);
    // The whole item within DynamoDB's 400 KB (its JSON is larger than its DynamoDB size, names included).
    let item_bytes = serde_json::to_string(&stored).unwrap().len();
    assert!(item_bytes < 400_000, "the conversation item takes {item_bytes} bytes");
    let reply = stored.reply.unwrap();
    assert!(reply.len() <= MAX_REPLY_BYTES, "{} bytes", reply.len());
    for r in records.iter().step_by(5) {
        assert!(reply.contains(&format!("- {}", r.subtask.instruction)), "{} is named", r.subtask.id);
    }
    assert!(reply.contains("w001 已发货") && reply.contains("w099 已发货"), "every answer has its share");
}
