//! A dependent of a side effect still being confirmed (its parent `SUBMITTED`) waits for the confirmation instead of being skipped: released and run once the confirmation settles the parent `SUCCEEDED`, exactly once whatever crashes between the settle and the release, and closed by the deadline path when no confirmation comes in time (embedded store and queues, a scripted model, a ticket desk whose answers can be lost).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationId, FailureKind, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage,
    Usage, now_ms,
};
use swarm_core::effects::EffectState;
use swarm_core::faults::{self, CrashPoint, FaultPlan, Invocation};
use swarm_core::ports::{
    ChatModel, ChatResponse, ConversationRecords, FinishReason, SubtaskStore, TaskQueue, ToolCall, ToolContext,
    ToolError, ToolGateway, ToolOutput, ToolSpec,
};
use swarm_core::roles::TaskQueues;
use swarm_testing::{ScriptedModel, text_response};
use worker::{Outcome, Worker, WorkerSettings};

const TICKET: &str = "shop__open_ticket";
const ORDER: &str = "shop__get_order";

/// A ticket desk behind a gateway, idempotent by key; while `lose` is set every answer to a
/// ticket call is lost after the ticket was opened (the gateway times out).
struct Desk {
    tickets: Mutex<HashMap<String, String>>,
    lose: AtomicBool,
}

impl Desk {
    fn new() -> Arc<Self> {
        Arc::new(Self { tickets: Mutex::new(HashMap::new()), lose: AtomicBool::new(true) })
    }

    fn tickets(&self) -> usize {
        self.tickets.lock().unwrap().len()
    }
}

#[async_trait]
impl ToolGateway for Desk {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let schema =
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
        let spec = |name: &str, side_effecting| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: schema.clone(),
            side_effecting,
        };
        Ok(vec![spec(ORDER, false), spec(TICKET, true)])
    }

    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        if name != TICKET {
            let text = r#"{"order_id":"A1033","status":"DELIVERED"}"#.to_owned();
            return Ok(ToolOutput { text, is_error: false, refused: false });
        }
        let key = arguments["_idempotency_key"].as_str().expect("a side effect carries its key").to_owned();
        let receipt = {
            let mut tickets = self.tickets.lock().unwrap();
            let n = tickets.len() + 1;
            tickets.entry(key).or_insert_with(|| format!(r#"{{"ticket_id":"T-{n}"}}"#)).clone()
        };
        if self.lose.load(Ordering::SeqCst) {
            return Err(ToolError::Timeout(timeout));
        }
        Ok(ToolOutput { text: receipt, is_error: false, refused: false })
    }
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    tasks: InMemoryQueue,
    id: ConversationId,
    desk: Arc<Desk>,
    model: Arc<ScriptedModel>,
    worker: Worker,
}

fn subtask(conv: &Conversation, id: &str, role: &str, tools: &[&str], depends_on: &[&str]) -> SubtaskRecord {
    let subtask = Subtask {
        id: id.into(),
        instruction: format!("Step {id} for order A1033."),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
    };
    SubtaskRecord::new(conv, subtask, role.into())
}

fn ticket_call() -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: TICKET.into(),
            arguments: json!({"order_id": "A1033", "subject": "Parcel"}).to_string(),
        }],
        finish_reason: FinishReason::ToolCalls,
        reasoning_content: None,
        usage: Usage::default(),
        model: "m".into(),
    }
}

/// `w01` (the refund role, its own queue) opens a ticket; `w02` (the tasks queue) depends on it.
/// The conversation's deadline is `deadline_secs` away; the worker stops its subtasks at it.
async fn setup(deadline_secs: u64) -> Setup {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "Open a ticket about A1033, then tell me.", now_ms(), deadline_secs);
    store.create_conversation(&conversation).await.unwrap();
    let mut recs = vec![
        subtask(&conversation, "w01", "refund", &[TICKET], &[]),
        subtask(&conversation, "w02", "support", &[ORDER], &["w01"]),
    ];
    swarm_core::domain::link_dependents(&mut recs);
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    let queue = |name: &str| InMemoryQueue::new(QueueSettings { name: name.into(), ..QueueSettings::default() });
    let (tasks, refund) = (queue("tasks"), queue("refund"));
    let desk = Desk::new();
    let model = Arc::new(ScriptedModel::new(
        [ticket_call(), text_response("Order A1033 is delivered and ticket T-1 is open.")].into_iter().map(Ok),
    ));
    let (t, r): (Arc<dyn TaskQueue>, Arc<dyn TaskQueue>) = (Arc::new(tasks.clone()), Arc::new(refund));
    let worker = Worker::new(
        store.clone(),
        TaskQueues::new(t).with_role("refund", r),
        model.clone() as Arc<dyn ChatModel>,
        model.clone(),
        desk.clone(),
        WorkerSettings {
            min_round_time: Duration::from_millis(10),
            safety_margin: Duration::from_millis(10),
            conversation_margin: Duration::ZERO,
            ..WorkerSettings::default()
        },
    );
    Setup { store, tasks, id: conversation.id, desk, model, worker }
}

fn after(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + d
}

struct At(CrashPoint);
impl FaultPlan for At {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0
    }
}

/// Runs `handler` as an invocation that dies at `point`; `true` when it died there.
async fn dies_at<F: std::future::Future>(point: CrashPoint, handler: F) -> bool {
    let invocation = Invocation::new(Arc::new(At(point)));
    tokio::select! {
        _ = faults::with_plan(invocation.clone(), handler) => false,
        () = invocation.killed() => true,
    }
}

impl Setup {
    async fn status(&self, subtask: &str) -> SubtaskStatus {
        self.store.get_subtask(&self.id, &subtask.into()).await.unwrap().unwrap().status
    }

    fn confirm(&self) -> TaskMessage {
        TaskMessage::Confirm { conversation_id: self.id.clone(), subtask_id: "w01".into(), attempt: 0 }
    }

    /// `w01` runs: its ticket is opened, its answer lost: `SUBMITTED`, and `w02` waits.
    async fn ticket_sent_unconfirmed(&self) {
        let run = self.worker.handle(TaskMessage::run(&self.id, &"w01".into()), after(Duration::from_secs(30))).await;
        assert_eq!(run, Outcome::Finished(SubtaskStatus::Submitted));
        assert_eq!(self.desk.tickets(), 1);
        assert_eq!(self.status("w02").await, SubtaskStatus::Pending, "waits for the confirmation, not skipped");
        assert_eq!(self.tasks.approximate_depth().total(), 0, "not released either");
        let conv = self.store.get_conversation(&self.id).await.unwrap().unwrap();
        assert_eq!((conv.total, conv.remaining), (2, 1), "the parent counted, the dependent open");
    }
}

#[tokio::test]
async fn a_dependent_of_a_submitted_parent_waits_and_runs_once_the_confirmation_settles_it() {
    let s = setup(120).await;
    s.ticket_sent_unconfirmed().await;

    // The confirmation reaches the desk: the ticket's receipt is the outcome, the parent is settled.
    s.desk.lose.store(false, Ordering::SeqCst);
    let confirmed = s.worker.handle(s.confirm(), after(Duration::from_secs(30))).await;
    assert_eq!(confirmed, Outcome::Finished(SubtaskStatus::Succeeded));
    let parent = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!((parent.status, parent.effects[0].state), (SubtaskStatus::Succeeded, EffectState::Done));
    match &parent.result {
        Some(SubtaskResult::Succeeded { text, .. }) => assert!(text.contains("T-1"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.status("w02").await, SubtaskStatus::Queued, "released by the confirmation");
    assert_eq!(s.tasks.approximate_depth().visible, 1, "its message on the tasks queue");

    // The dependent runs with the parent's answer and succeeds; the conversation can answer.
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w02".into()), after(Duration::from_secs(30))).await;
    assert_eq!(run, Outcome::Finished(SubtaskStatus::Succeeded));
    let requests = s.model.requests();
    assert_eq!(requests.len(), 2, "the parent's one round, the dependent's answer");
    assert!(format!("{:?}", requests[1]).contains("T-1"), "the dependent was given the parent's answer");
    let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!(conv.remaining, 0);
    assert_eq!(s.desk.tickets(), 1, "the replay learnt the outcome; one ticket");
}

#[tokio::test]
async fn a_confirmation_killed_between_its_writes_and_the_release_is_completed_by_its_redelivery_once() {
    // Killed after the outcome's write (before the settle), and after the settle and the count (before the release).
    for point in [CrashPoint::WorkerAfterOutcome, CrashPoint::WorkerAfterCount] {
        let s = setup(120).await;
        s.ticket_sent_unconfirmed().await;
        s.desk.lose.store(false, Ordering::SeqCst);
        let killed = dies_at(point, s.worker.handle(s.confirm(), after(Duration::from_secs(30)))).await;
        assert!(killed, "{point:?}");
        assert_eq!(s.status("w02").await, SubtaskStatus::Pending, "{point:?}: not released yet");
        assert_eq!(s.tasks.approximate_depth().total(), 0, "{point:?}");

        // SQS hands the confirmation back (the receipt visibility): its redelivery settles and releases.
        let again = s.worker.handle(s.confirm(), after(Duration::from_secs(30))).await;
        assert_eq!(again, Outcome::Finished(SubtaskStatus::Succeeded), "{point:?}");
        assert_eq!(s.status("w01").await, SubtaskStatus::Succeeded, "{point:?}");
        assert_eq!(s.status("w02").await, SubtaskStatus::Queued, "{point:?}");
        // A duplicate of it releases nothing more.
        let duplicate = s.worker.handle(s.confirm(), after(Duration::from_secs(30))).await;
        assert_eq!(duplicate, Outcome::Finished(SubtaskStatus::Succeeded), "{point:?}");
        assert_eq!(s.tasks.approximate_depth().visible, 1, "{point:?}: one message for the dependent");
        assert_eq!(s.desk.tickets(), 1, "{point:?}");
        let run = s.worker.handle(TaskMessage::run(&s.id, &"w02".into()), after(Duration::from_secs(30))).await;
        assert_eq!(run, Outcome::Finished(SubtaskStatus::Succeeded), "{point:?}");
    }
}

#[tokio::test]
async fn a_duplicate_run_of_the_submitted_parent_that_learns_the_outcome_releases_the_dependent() {
    let s = setup(120).await;
    s.ticket_sent_unconfirmed().await;
    s.desk.lose.store(false, Ordering::SeqCst);
    let duplicate = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    assert_eq!(duplicate, Outcome::AlreadyFinished);
    assert_eq!(s.status("w01").await, SubtaskStatus::Succeeded);
    assert_eq!(s.status("w02").await, SubtaskStatus::Queued);
    assert_eq!(s.tasks.approximate_depth().visible, 1);
}

#[tokio::test]
async fn a_dependent_still_waiting_at_the_deadline_is_closed_and_a_late_confirmation_settles_only_the_parent() {
    let s = setup(1).await;
    s.ticket_sent_unconfirmed().await;

    // The deadline passes with the ticket still unconfirmed: the dependent is closed, never left open.
    let deadline_ms = s.store.get_conversation(&s.id).await.unwrap().unwrap().deadline_ms;
    tokio::time::sleep(Duration::from_millis(u64::try_from(deadline_ms - now_ms() + 20).unwrap_or(0))).await;
    let deadline = TaskMessage::Deadline { conversation_id: s.id.clone(), turn: 0 };
    let closed = s.worker.handle(deadline, after(Duration::from_secs(10))).await;
    assert_eq!(closed, Outcome::Ignored("1 open subtasks closed; the aggregator answers".into()));
    let dependent = s.store.get_subtask(&s.id, &"w02".into()).await.unwrap().unwrap();
    match &dependent.result {
        Some(SubtaskResult::Failed { kind, .. }) => assert_eq!(*kind, FailureKind::DeadlinePassed),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.status("w01").await, SubtaskStatus::Submitted);
    assert_eq!(s.store.get_conversation(&s.id).await.unwrap().unwrap().remaining, 0);

    // The confirmation after it settles the parent; the closed dependent is not sent.
    s.desk.lose.store(false, Ordering::SeqCst);
    let confirmed = s.worker.handle(s.confirm(), after(Duration::from_secs(10))).await;
    assert_eq!(confirmed, Outcome::Finished(SubtaskStatus::Succeeded));
    assert_eq!(s.status("w02").await, SubtaskStatus::Failed);
    assert_eq!(s.tasks.approximate_depth().total(), 1, "only the deadline's re-arm, no Run");
}
