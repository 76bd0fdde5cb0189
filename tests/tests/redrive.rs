//! Subtasks no one sent are sent without the client, before the deadline: the orchestrator's `queued` marker tells "sent" from "in the backlog", and the deadline path's first run (when the planning lease ends) sends a stored plan's subtasks a dead planner never marked sent. Each crash window this opens is killed once here, on the embedded store and on the emulator.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarm_core::domain::{ConversationId, ConversationStatus, SubtaskStatus};
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_core::llm::Models;
use swarm_core::ports::{Call, ConversationStore, StoreDecorator, StoreError, StoreOp};
use swarm_core::timings::Timings;
use swarm_local::{BackendChoice, Function, LocalStack, StackOptions, Wraps};
use swarm_tests::{failing_to_begin, over_offline, with_plan};

const SCALE: f64 = 1.0 / 240.0;
const PATIENCE: Duration = Duration::from_secs(60);
const MESSAGE: &str = "Where is order A1029?";

swarm_tests::on_both_backends!(
    an_orchestrator_killed_before_enqueueing_has_its_subtask_sent_by_the_deadline_paths_first_run,
    an_orchestrator_killed_before_its_marker_has_its_subtask_run_once_and_marked,
    a_deadline_run_killed_before_its_marker_sends_again_on_the_messages_return,
    a_plan_whose_write_was_cut_and_never_began_ends_failed_not_done_with_nothing_begun,
    a_side_effect_subtask_never_sent_is_sent_by_the_first_run_on_the_side_effects_queue,
);

/// A 9,600 s deadline (40 s here) and the planning lease at 1,400 s (5.8 s here): the deadline
/// path's first run comes long before the deadline, as it does with the table's 35 s and 120 s.
fn timings() -> Timings {
    // Whole invocations get room too (× 12, [`swarm_tests::with_room_for_invocations`]): at 1/240 the
    // worker's 60 s are 1 s and its attempt lease 0.26 s, which a loaded machine's emulator calls
    // outrun, and a second attempt of w01 is then the platform's redelivery, not a duplicate send.
    let mut t = swarm_tests::with_room_for_invocations(swarm_tests::with_room_for_tool_calls(
        swarm_tests::with_room_to_plan(Timings::standard().clone()),
    ));
    t.conversation.deadline = Duration::from_secs(9600);
    t
}

/// Kills the invocation at each of `points` the first time it is reached.
struct CrashOnceEach(Mutex<Vec<CrashPoint>>);

impl FaultPlan for CrashOnceEach {
    fn crash(&self, point: CrashPoint) -> bool {
        let mut left = self.0.lock().unwrap();
        let found = left.iter().position(|p| *p == point);
        found.map(|i| left.remove(i)).is_some()
    }
}

async fn stack_killed_at(backend: BackendChoice, points: &[CrashPoint]) -> LocalStack {
    let plan = serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]}
    ]});
    stack_with_plan_killed_at(backend, &plan, points).await
}

async fn stack_with_plan_killed_at(
    backend: BackendChoice,
    plan: &serde_json::Value,
    points: &[CrashPoint],
) -> LocalStack {
    LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(with_plan(over_offline(), &plan.to_string())))),
        faults: Some(Arc::new(CrashOnceEach(Mutex::new(points.to_vec()))) as Arc<dyn FaultPlan>),
        timings: timings(),
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap()
}

/// The one conversation of the stack (the client never learnt its id: its request died).
async fn only_conversation(stack: &LocalStack) -> String {
    let page = stack.store().list_customer_conversations("C104", None, 10).await.unwrap();
    assert_eq!(page.conversations.len(), 1, "{:?}", page.conversations.iter().map(|c| &c.id).collect::<Vec<_>>());
    page.conversations[0].id.to_string()
}

/// What the run left: the conversation answered before its deadline with w01 succeeded and begun
/// once; answers whether the `queued` marker was written and how many invocations were killed.
async fn assert_sent_once_and_answered_before_the_deadline(stack: LocalStack, id: &str) -> (bool, u64) {
    assert_sent_once_and_answered_before_the_deadline_with(stack, id, &["w01"]).await
}

/// As [`assert_sent_once_and_answered_before_the_deadline`], for each of `subtasks`.
async fn assert_sent_once_and_answered_before_the_deadline_with(
    stack: LocalStack,
    id: &str,
    subtasks: &[&str],
) -> (bool, u64) {
    let started = tokio::time::Instant::now();
    let view = stack.wait_finished(id, PATIENCE).await;
    let waited = started.elapsed();
    let cid = ConversationId::parse(id).unwrap();
    let conversation = stack.store().get_conversation(&cid).await.unwrap().unwrap();
    let mut records = Vec::new();
    for s in subtasks {
        records.push(stack.store().get_subtask(&cid, &(*s).into()).await.unwrap().unwrap());
    }
    let killed = stack.counters().snapshot().killed_invocations;
    let deadline = stack.timings().conversation.deadline;
    stack.shutdown().await;

    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    for r in records {
        assert_eq!(r.status, SubtaskStatus::Succeeded, "sent without the client, not failed at the deadline: {r:?}");
        assert_eq!(r.attempts, 1, "a duplicate message is absorbed: one attempt: {r:?}");
    }
    assert!(waited < deadline, "answered after {waited:?}, before the deadline ({deadline:?})");
    (conversation.queued_at_ms.is_some(), killed)
}

/// Crash window: between the plan's write (`RUNNING`, subtasks stored) and the send. Nobody
/// retries; the deadline path's first run, when the planning lease ends, sends w01.
async fn an_orchestrator_killed_before_enqueueing_has_its_subtask_sent_by_the_deadline_paths_first_run(
    backend: BackendChoice,
) {
    let stack = stack_killed_at(backend, &[CrashPoint::OrchestratorAfterStartRun]).await;
    assert!(stack.post_conversation(MESSAGE, "C104", None).await.is_err(), "the request died");
    let id = only_conversation(&stack).await;
    let (marked, killed) = assert_sent_once_and_answered_before_the_deadline(stack, &id).await;
    assert!(marked, "the first run sent w01 and wrote the marker");
    assert_eq!(killed, 1);
}

/// Crash window: between the plan's write and the send, with a subtask of the side effects' role
/// (a ticket's tool: the refund role, its own queue, which the tasks worker may not send to).
/// Nobody retries; the deadline path's first run is on that queue (the orchestrator armed it
/// there), so the refund worker, which holds every queue, sends both subtasks and marks.
async fn a_side_effect_subtask_never_sent_is_sent_by_the_first_run_on_the_side_effects_queue(backend: BackendChoice) {
    let plan = serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]},
        {"id": "w02", "instruction": "Check the status of order A1029 before any ticket about it.",
         "tools": ["shop__get_order", "shop__open_ticket"]}
    ]});
    let stack = stack_with_plan_killed_at(backend, &plan, &[CrashPoint::OrchestratorAfterStartRun]).await;
    assert!(stack.post_conversation(MESSAGE, "C104", None).await.is_err(), "the request died");
    let id = only_conversation(&stack).await;
    let cid = ConversationId::parse(&id).unwrap();
    let w02 = stack.store().get_subtask(&cid, &"w02".into()).await.unwrap().unwrap();
    assert_eq!(w02.role, "refund", "the ticket's tool puts w02 on the side effects' queue");
    let (marked, killed) = assert_sent_once_and_answered_before_the_deadline_with(stack, &id, &["w01", "w02"]).await;
    assert!(marked, "the first run sent both and wrote the marker");
    assert_eq!(killed, 1);
}

/// Crash window: between the send and the `queued` marker. w01 was sent and runs; a first run
/// finding the conversation still open without the marker would send it again — a duplicate
/// absorbed (w01 begun once). Here it finished first: the run finds it over and does nothing.
async fn an_orchestrator_killed_before_its_marker_has_its_subtask_run_once_and_marked(backend: BackendChoice) {
    let stack = stack_killed_at(backend, &[CrashPoint::OrchestratorAfterEnqueue]).await;
    assert!(stack.post_conversation(MESSAGE, "C104", None).await.is_err(), "the request died");
    let id = only_conversation(&stack).await;
    let (_, killed) = assert_sent_once_and_answered_before_the_deadline(stack, &id).await;
    assert_eq!(killed, 1);
}

/// Crash window: the deadline path's first run sent the never-sent subtasks and died before the
/// marker. Its message was not deleted: it returns after the visibility timeout, sends again (a
/// duplicate, absorbed) and marks.
async fn a_deadline_run_killed_before_its_marker_sends_again_on_the_messages_return(backend: BackendChoice) {
    let points = [CrashPoint::OrchestratorAfterStartRun, CrashPoint::DeadlineAfterRedrive];
    let stack = stack_killed_at(backend, &points).await;
    assert!(stack.post_conversation(MESSAGE, "C104", None).await.is_err(), "the request died");
    let id = only_conversation(&stack).await;
    let (_, killed) = assert_sent_once_and_answered_before_the_deadline(stack, &id).await;
    assert_eq!(killed, 2, "the orchestrator and the deadline path's first run both died");
}

/// The orchestrator's store as a plan write cut at its deadline sees it: `start_run` is applied and
/// its answer lost, and reading the conversation back fails (throttled), so the planner cannot tell
/// whether its plan is stored: its request answers 503 `started: unknown`. Later reads pass (the
/// client's `GET`).
struct PlanWriteCut(Arc<dyn ConversationStore>, AtomicBool);

impl StoreDecorator for PlanWriteCut {
    fn inner(&self) -> &dyn ConversationStore {
        self.0.as_ref()
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        match call.op {
            StoreOp::GetConversation if self.1.swap(false, Ordering::SeqCst) => {
                Err(StoreError::Transient("ThrottlingException (injected)".into()))
            }
            StoreOp::StartRun => {
                run.await?;
                self.1.store(true, Ordering::SeqCst);
                Err(StoreError::Transient("the answer was lost after the write was applied (injected)".into()))
            }
            _ => run.await,
        }
    }
}

/// A 503 `started: unknown` (the plan's write applied, its answer lost) whose subtask never
/// begins: the deadline path's first run sends w01, and every worker that takes it is refused its
/// attempt (throttled) until the message is dead-lettered. The conversation never started: it
/// ends `FAILED` (docs/api.md: "runs as with yes, or ends FAILED"), never `DONE` with nothing begun.
async fn a_plan_whose_write_was_cut_and_never_began_ends_failed_not_done_with_nothing_begun(backend: BackendChoice) {
    let plan = serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1029.", "tools": ["shop__get_order"]}
    ]});
    let wraps = Wraps::default()
        .store(
            &[Function::Orchestrator],
            Arc::new(|inner| Arc::new(PlanWriteCut(inner, AtomicBool::new(false))) as Arc<dyn ConversationStore>),
        )
        .store(&[Function::Worker], Arc::new(|inner| failing_to_begin(inner, "w01")));
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(with_plan(over_offline(), &plan.to_string())))),
        wraps,
        timings: timings(),
        time_scale: SCALE,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let (status, body) = stack.post_conversation(MESSAGE, "C104", None).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["conversation"]["started"], "unknown", "{body}");
    let id = body["conversation"]["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, PATIENCE).await;
    let cid = ConversationId::parse(&id).unwrap();
    let conversation = stack.store().get_conversation(&cid).await.unwrap().unwrap();
    let w01 = stack.store().get_subtask(&cid, &"w01".into()).await.unwrap().unwrap();
    stack.shutdown().await;

    view.unwrap();
    assert!(conversation.plan.contains("w01"), "the plan's write was applied: {conversation:?}");
    assert_eq!(w01.attempts, 0, "w01 never began: {w01:?}");
    assert_eq!(
        conversation.status,
        ConversationStatus::Failed,
        "nothing of it ran: not started, not DONE with a reply about work that never began: {conversation:?}"
    );
    assert!(conversation.reply.is_none(), "{:?}", conversation.reply);
    assert!(conversation.error.as_deref().is_some_and(|e| e.contains("began")), "{:?}", conversation.error);
}
