//! Drills of the local platform's AWS semantics, each run on both backends (embedded, and the AWS adapters on the emulator): a message the worker reports for retry comes back after the visibility timeout it set (`ChangeMessageVisibility`), long before the queue's own, and is redriven to the DLQ; a stuck invocation is cut at the function's timeout and its batch comes back after the worker's receipt visibility (its heartbeat held it while the invocation lived); a worker killed mid-attempt is rerun once its lease is free and succeeds; a failing aggregator is retried exactly `MaximumRetryAttempts` times, then its batch goes to the on-failure destination and the deadline path answers the conversation; an invocation killed at a crash point is a failed one.
//!
//! Time runs at [`DRILL_SCALE`] (1/240) of the timing table, with room where a busy 2-core machine
//! misses the scaled budgets ([`drill_timings`]): the worker's and the aggregator's timeouts lifted
//! to 720 s → 3 s, the tasks queue's visibility timeout to 1440 s → 6 s (longer than an invocation,
//! as the template has it), the worker's retry visibility 10 s → 42 ms (SQS holds whole seconds: 1 s).
//! Timing is asserted as lower bounds, and as upper bounds only where the gap is an order of magnitude.
//! The emulator instantiations need `SWARM_AWS_ENDPOINT`; without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{ConversationId, ConversationStatus, SubtaskStatus};
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_core::llm::Models;
use swarm_core::ports::{ConversationStore, ToolGateway};
use swarm_core::timings::{Timings, seconds_rounded_up};
use swarm_local::{BackendChoice, Function, LocalStack, Queue, Received, StackOptions, Wraps, lambda_timeout};
use swarm_tests::{
    FlakyStore, HangingTools, ScriptedModel, StoreOp, failing_to_begin, over_offline, subtask_of, with_plan,
};

/// The factor every timing of the table is multiplied by in these drills.
const DRILL_SCALE: f64 = 1.0 / 240.0;

/// How long a drill waits for its conversation.
const PATIENCE: Duration = Duration::from_secs(60);

// Every drill on each backend.
swarm_tests::on_both_backends!(
    a_reported_failure_comes_back_after_the_retry_visibility_the_worker_set_and_is_redriven_to_the_dlq,
    a_stuck_invocation_is_cut_at_the_function_timeout_and_its_batch_returns_after_the_receipt_visibility,
    a_failing_aggregator_is_retried_then_its_batch_goes_to_the_on_failure_destination_and_the_deadline_path_answers,
    a_retry_of_a_failing_aggregator_that_succeeds_answers_the_conversation_once,
    a_worker_killed_at_a_crash_point_fails_its_invocation_and_its_message_returns,
    a_worker_killed_mid_attempt_is_rerun_once_its_lease_is_free_and_the_subtask_succeeds,
);

/// The standard table, with the conversation deadline lifted from 120 s to 3600 s (15 s
/// scaled): the standard deadline is shorter than one visibility timeout (360 s), so its
/// deadline path would end every subtask these drills watch come back after one. With room to
/// plan and for tool calls ([`swarm_tests::with_room_to_plan`], [`swarm_tests::with_room_for_tool_calls`]):
/// the drills watch the worker and the aggregator, and at 1/240 a busy machine misses the
/// orchestrator's and the tools' own budgets. With room for whole invocations
/// ([`swarm_tests::with_room_for_invocations`]): the worker's, the DLQ consumer's and the
/// aggregator's timeouts 720 s (3 s scaled; the table's 0.25 s is held as 1 s, which a loaded
/// machine's invocation on the emulator overruns), the aggregation lease 1080 s above them, the
/// queues' visibility timeouts 1440 s (6 s), so a message still comes back only after its
/// invocation (and its attempt lease) is over. The sweep runs every 720 s (3 s) with a timeout of
/// 720 s (3 s): at 0.25 s and 1 s its scans of a loaded emulator time out, and every invocation
/// counted as timed out is one these drills assert on. A tool call 200 s (833 ms: the worker's tool
/// timeout and the gateway's per-call timeout, the gateway's and the shop's function timeouts at
/// 240 s), all inside the worker's 3 s.
fn drill_timings() -> Timings {
    let mut t = swarm_tests::with_room_for_invocations(swarm_tests::with_room_for_tool_calls(
        swarm_tests::with_room_to_plan(Timings::standard().clone()),
    ));
    t.conversation.deadline = Duration::from_secs(3600);
    t.sweep.period = Duration::from_secs(720);
    t.sweep.timeout = Duration::from_secs(720);
    t.gateway.timeout = Duration::from_secs(240);
    t.shop.timeout = Duration::from_secs(240);
    t.gateway.call_timeout = Duration::from_secs(200);
    t.worker.tool_timeout = Duration::from_secs(200);
    t
}

/// A coupon check and an order lookup (`w01`: SAVE20, `w02`: A1029).
fn two_subtasks() -> ScriptedModel {
    with_plan(
        over_offline(),
        &serde_json::json!({"subtasks": [
            {"id": "w01", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"]},
            {"id": "w02", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]}
        ]})
        .to_string(),
    )
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

/// Posts a message and answers the conversation id.
async fn post(stack: &LocalStack) -> String {
    let (status, body) = stack.post_conversation("Can I use SAVE20, and where is A1029?", "C104", None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    body["conversation_id"].as_str().unwrap().to_owned()
}

/// The receives of `subtask`'s message on `queue`, in the order they were received (a delivery is
/// logged when its invocation returns, which on a busy machine can be after a later one's).
fn receives(stack: &LocalStack, queue: Queue, subtask: &str) -> Vec<Received> {
    let name = stack.queue_name(queue).to_owned();
    let mut seen: Vec<Received> =
        stack.received().into_iter().filter(|r| r.queue == name && subtask_of(&r.body) == subtask).collect();
    seen.sort_by_key(|r| r.received_at);
    seen
}

/// The receives of `subtask`'s message on `queue` once at least `n` are logged (at most 30 s): a
/// delivery is logged when its invocation has returned, which on a busy machine can be after the
/// conversation it answered is read back as finished.
async fn receives_at_least(stack: &LocalStack, queue: Queue, subtask: &str, n: usize) -> Vec<Received> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = receives(stack, queue, subtask);
        if seen.len() >= n || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `later` was received no earlier than `timeout` after the poll that received `earlier`
/// began (the queue started `earlier`'s visibility timeout after that moment, and made the
/// message visible again before `later`'s poll returned).
fn assert_not_before(earlier: &Received, later: &Received, timeout: Duration, what: &str) {
    let gap = later.received_at.duration_since(earlier.polled_at);
    assert!(gap >= timeout, "{what}: came back after {gap:?}, before the visibility timeout {timeout:?}");
}

/// `later` came back before the queue's own visibility timeout `timeout` ran out after `earlier`'s
/// poll: the heartbeat's receipt visibility, not the queue's, brought it back.
fn assert_back_before(earlier: &Received, later: &Received, timeout: Duration, what: &str) {
    let gap = later.received_at.duration_since(earlier.polled_at);
    assert!(gap < timeout, "{what}: came back after {gap:?}, the queue's visibility timeout {timeout:?}");
}

/// [`drill_timings`] with the tasks queue's visibility timeout lifted to 3600 s (15 s scaled), an
/// order of magnitude above the worker's receipt visibility (30 s, held as 1 s): which one brought a
/// message back is unmistakable.
fn with_long_queue_visibility() -> Timings {
    let mut timings = drill_timings();
    timings.queues.tasks.visibility_timeout = Duration::from_secs(3600);
    timings
}

/// The receipt visibility as SQS holds it (whole seconds, rounded up) and the tasks queue's visibility timeout, scaled.
fn visibilities(stack: &LocalStack) -> (Duration, Duration) {
    let receipt = Duration::from_secs(seconds_rounded_up(stack.timings().worker.receipt_visibility));
    (receipt, stack.timings().queues.tasks.visibility_timeout)
}

/// Waits (at most 30 s) until `done` holds for the stack's counters.
async fn until(stack: &LocalStack, what: &str, done: impl Fn(&swarm_local::CounterSnapshot) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&stack.counters().snapshot()) {
        assert!(tokio::time::Instant::now() < deadline, "{what}: {:?}", stack.counters().snapshot());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_reported_failure_comes_back_after_the_retry_visibility_the_worker_set_and_is_redriven_to_the_dlq(
    backend: BackendChoice,
) {
    // The queue's own visibility timeout lifted to 3600 s (15 s scaled), an order of magnitude
    // above the worker's retry visibility (1 s): which one brought the message back is unmistakable.
    let mut timings = drill_timings();
    timings.queues.tasks.visibility_timeout = Duration::from_secs(3600);
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(two_subtasks()))),
        wraps: Wraps::default().store(&Function::WORKERS, Arc::new(|inner| failing_to_begin(inner, "w01"))),
        timings,
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let queue_visibility = stack.timings().queues.tasks.visibility_timeout;
    let retry_visibility = Duration::from_secs(seconds_rounded_up(stack.timings().worker.retry_visibility));
    let max_receives = stack.timings().queues.max_receive_count;
    let on_tasks = receives_at_least(&stack, Queue::Tasks, "w01", max_receives as usize).await;
    let on_dlq = receives_at_least(&stack, Queue::TasksDeadLetters, "w01", 1).await;
    let counters = stack.counters().snapshot();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!((retry_visibility, queue_visibility), (Duration::from_secs(1), Duration::from_secs(15)));
    let counts: Vec<(u32, bool)> = on_tasks.iter().map(|r| (r.receive_count, r.retried)).collect();
    assert_eq!(counts, (1..=max_receives).map(|n| (n, true)).collect::<Vec<_>>(), "receive counts grow: {on_tasks:?}");
    for pair in on_tasks.windows(2).chain([[on_tasks[on_tasks.len() - 1].clone(), on_dlq[0].clone()].as_slice()]) {
        assert_not_before(&pair[0], &pair[1], retry_visibility, "a message listed in batchItemFailures");
        let gap = pair[1].received_at.duration_since(pair[0].received_at);
        assert!(gap < queue_visibility, "came back after {gap:?}: the queue's visibility timeout, not the worker's");
    }
    assert_eq!(on_dlq.len(), 1, "redriven once to the DLQ: {on_dlq:?}");
    assert!(!on_dlq[0].retried, "the DLQ consumer acknowledged it");
    assert_eq!(counters.batch_item_failures, u64::from(max_receives));
    assert_eq!(counters.dead_letter_invocations, 1);
    assert_eq!((counters.failed_invocations, counters.timed_out_invocations), (0, 0));
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!((view.progress.finished, view.progress.total), (2, 2));
    let w01 = view.subtasks.iter().find(|s| s.id == "w01").unwrap();
    assert_eq!(w01.status, SubtaskStatus::Failed);
    assert_eq!(w01.error.as_deref(), Some(swarm_core::domain::FailureKind::DeadLetter.customer_message()));
}

async fn a_stuck_invocation_is_cut_at_the_function_timeout_and_its_batch_returns_after_the_receipt_visibility(
    backend: BackendChoice,
) {
    let tools: Arc<std::sync::Mutex<Option<Arc<HangingTools>>>> = Arc::default();
    let seen = tools.clone();
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(two_subtasks()))),
        timings: with_long_queue_visibility(),
        // The coupon tool's first call never answers, whatever its timeout says (the tasks worker calls it).
        wraps: Wraps::default().tools(
            &[Function::Worker],
            Arc::new(move |inner| {
                let hanging = Arc::new(HangingTools::new(inner, "shop__check_coupon", 1));
                *seen.lock().unwrap() = Some(hanging.clone());
                hanging as Arc<dyn ToolGateway>
            }),
        ),
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let (receipt, visibility) = visibilities(&stack);
    let timeout = lambda_timeout(stack.timings().worker.timeout);
    let on_tasks = receives_at_least(&stack, Queue::Tasks, "w01", 2).await;
    let counters = stack.counters().snapshot();
    stack.shutdown().await;

    let view = view.unwrap();
    let hung = tools.lock().unwrap().as_ref().unwrap().hung();
    assert_eq!(timeout, Duration::from_secs(3), "720 s × 1/240");
    assert_eq!(hung.len(), 1, "{hung:?}");
    let counts: Vec<(u32, bool)> = on_tasks.iter().map(|r| (r.receive_count, r.retried)).collect();
    assert_eq!(counts, vec![(1, true), (2, false)], "{on_tasks:?}");
    let dropped = hung[0].dropped.expect("the stuck call was dropped with its invocation");
    let ran = dropped.duration_since(on_tasks[0].received_at);
    assert!(ran >= timeout, "the invocation was cut after {ran:?}, before the worker's timeout {timeout:?}");
    assert!(dropped <= on_tasks[1].received_at, "the stuck invocation was gone before its message came back");
    // Held by the heartbeat while the invocation lived (past the receipt visibility), then back after
    // the receipt visibility, long before the queue's visibility timeout.
    assert_not_before(&on_tasks[0], &on_tasks[1], timeout.max(receipt), "the batch of a timed-out invocation");
    assert_back_before(&on_tasks[0], &on_tasks[1], visibility, "the batch of a timed-out invocation");
    assert_eq!(counters.timed_out_invocations, 1);
    assert_eq!(counters.dead_letter_invocations, 0);
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    let w01 = view.subtasks.iter().find(|s| s.id == "w01").unwrap();
    assert_eq!(w01.status, SubtaskStatus::Succeeded, "{w01:?}");
    assert_eq!(w01.tools_used, vec!["shop__check_coupon".to_owned()]);
}

async fn a_failing_aggregator_is_retried_then_its_batch_goes_to_the_on_failure_destination_and_the_deadline_path_answers(
    backend: BackendChoice,
) {
    let model = Arc::new(one_subtask());
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(model.clone())),
        wraps: Wraps::default().store(
            &[Function::Aggregator],
            Arc::new(|inner| {
                Arc::new(FlakyStore::new(inner).fail(StoreOp::AcquireLease, "ThrottlingException (injected)"))
                    as Arc<dyn ConversationStore>
            }),
        ),
        timings: drill_timings(),
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    until(&stack, "the batch is dropped", |c| c.stream_batches_dropped > 0).await;
    let at_drop = stack.view(&id).await;
    let retries = stack.timings().aggregator.stream.max_retry_attempts;
    let counters = stack.counters().snapshot();
    let on_failure = stack.stream_on_failure();
    // The aggregator never gets through; the deadline path (15 s scaled) answers with what it has.
    let view = stack.wait_finished(&id, PATIENCE).await;
    stack.shutdown().await;

    let at_drop = at_drop.unwrap();
    assert_eq!(retries, 5);
    assert_eq!(counters.stream_records_matched, 1);
    assert_eq!(counters.aggregator_invocations, 1 + u64::from(retries), "the first invocation and 5 retries");
    assert_eq!(counters.aggregator_failures, 1 + u64::from(retries));
    assert_eq!((counters.stream_batches_dropped, counters.stream_records_dropped), (1, 1));
    assert_eq!(on_failure.len(), 1, "one record at the on-failure destination: {on_failure:?}");
    assert_eq!(on_failure[0]["requestContext"]["condition"], "RetryAttemptsExhausted");
    assert_eq!(on_failure[0]["requestContext"]["approximateInvokeCount"], 1 + retries);
    assert_eq!(on_failure[0]["DDBStreamBatchInfo"]["batchSize"], 1);
    assert!(on_failure[0]["DDBStreamBatchInfo"]["startSequenceNumber"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(at_drop.status, ConversationStatus::Running, "{at_drop:?}");
    assert_eq!(at_drop.progress.finished, at_drop.progress.total);
    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "the deadline path answered: {view:?}");
    assert!(view.reply.as_deref().unwrap_or("").contains("A1029"), "{view:?}");
    assert_eq!(model.counts().2, 0, "no model reply: the deadline path writes the model-free one");
}

async fn a_retry_of_a_failing_aggregator_that_succeeds_answers_the_conversation_once(backend: BackendChoice) {
    let model = Arc::new(one_subtask());
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(model.clone())),
        wraps: Wraps::default().store(
            &[Function::Aggregator],
            Arc::new(|inner| {
                Arc::new(FlakyStore::new(inner).fail_times(StoreOp::AcquireLease, 2, "ThrottlingException (injected)"))
                    as Arc<dyn ConversationStore>
            }),
        ),
        timings: drill_timings(),
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let counters = stack.counters().snapshot();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert!(view.reply.as_deref().unwrap_or("").contains("A1029"), "{view:?}");
    assert_eq!((counters.aggregator_invocations, counters.aggregator_failures), (3, 2), "two failures, one success");
    assert_eq!(counters.stream_batches_dropped, 0);
    assert_eq!(model.counts().2, 1, "one reply");
}

/// Kills the first invocation that reaches `point`, and no other.
struct CrashOnce(CrashPoint, std::sync::atomic::AtomicBool);

impl FaultPlan for CrashOnce {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0 && !self.1.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

async fn a_worker_killed_at_a_crash_point_fails_its_invocation_and_its_message_returns(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        faults: Some(Arc::new(CrashOnce(CrashPoint::WorkerAfterRecordResult, Default::default()))),
        timings: with_long_queue_visibility(),
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let (receipt, visibility) = visibilities(&stack);
    let on_tasks = receives_at_least(&stack, Queue::Tasks, "w01", 2).await;
    let counters = stack.counters().snapshot();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(counters.killed_invocations, 1);
    let counts: Vec<(u32, bool)> = on_tasks.iter().map(|r| (r.receive_count, r.retried)).collect();
    assert_eq!(counts, vec![(1, true), (2, false)], "the killed invocation's message came back: {on_tasks:?}");
    assert_not_before(&on_tasks[0], &on_tasks[1], receipt, "the batch of a killed invocation");
    assert_back_before(&on_tasks[0], &on_tasks[1], visibility, "the batch of a killed invocation");
    // The redelivery finds the result recorded and completes the count the crash cut off.
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!((view.progress.finished, view.progress.total), (1, 1));
    assert_eq!(view.subtasks[0].status, SubtaskStatus::Succeeded);
}

async fn a_worker_killed_mid_attempt_is_rerun_once_its_lease_is_free_and_the_subtask_succeeds(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(one_subtask()))),
        faults: Some(Arc::new(CrashOnce(CrashPoint::WorkerAfterBeginAttempt, Default::default()))),
        timings: with_long_queue_visibility(),
        time_scale: DRILL_SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let id = post(&stack).await;
    let view = stack.wait_finished(&id, PATIENCE).await;
    let (receipt, visibility) = visibilities(&stack);
    let on_tasks = receives_at_least(&stack, Queue::Tasks, "w01", 2).await;
    let w01 = stack.store().get_subtask(&ConversationId::from_trusted(&id), &"w01".into()).await.unwrap().unwrap();
    let counters = stack.counters().snapshot();
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(counters.killed_invocations, 1);
    let counts: Vec<(u32, bool)> = on_tasks.iter().map(|r| (r.receive_count, r.retried)).collect();
    // The second receive may find the dead attempt's lease still live and hand the work back once
    // (a fresh message): the subtask's receives on the tasks queue end with one that ran it.
    assert_eq!(counts[..2], [(1, true), (2, false)], "the killed invocation's message came back: {on_tasks:?}");
    assert_not_before(&on_tasks[0], &on_tasks[1], receipt, "the message of an attempt killed mid-way");
    assert_back_before(&on_tasks[0], &on_tasks[1], visibility, "the message of an attempt killed mid-way");
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!((view.progress.finished, view.progress.total), (1, 1));
    assert_eq!((w01.status, w01.attempts), (SubtaskStatus::Succeeded, 2), "rerun as a second attempt: {w01:?}");
}
