//! Side effects at most once, told truthfully, on the worker alone (embedded store and queues, a scripted model, a keyed ledger as the tool): crashes at every point between the journal's writes, a second delivery during a live attempt, the deadline while a refund is in flight, a refund waiting for approval and run once with it, a refund subtask waiting for its dependency on its own queue.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::approval::{ApprovalDecision, ApprovalStatus, ProposedAction, approval_id};
use swarm_core::domain::{
    Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::EffectState;
use swarm_core::faults::{self, CrashPoint, FaultPlan, Invocation};
use swarm_core::ports::{
    ApprovalStore, ChatModel, ChatResponse, ConversationRecords, FinishReason, SubtaskStore, TaskQueue, ToolCall,
    ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec,
};
use swarm_core::reply::{compose_reply, reply_input};
use swarm_core::roles::TaskQueues;
use swarm_core::view::ConversationView;
use swarm_testing::{ScriptedModel, text_response};
use worker::{Outcome, Worker, WorkerSettings};

const REFUND: &str = "shop__refund";

/// A shop's refund ledger behind a gateway: idempotent by key (a repeated key answers the first
/// receipt and moves no money), every dispatch recorded; optionally every refund needs an approval
/// (a call without `_approval` is refused before dispatch) and answers only after `delay`.
struct Ledger {
    refunds: Mutex<HashMap<String, Value>>,
    dispatches: Mutex<Vec<Value>>,
    needs_approval: bool,
    delay: Duration,
}

impl Ledger {
    fn new() -> Self {
        Self {
            refunds: Mutex::new(HashMap::new()),
            dispatches: Mutex::new(Vec::new()),
            needs_approval: false,
            delay: Duration::ZERO,
        }
    }

    fn refunds(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }

    fn dispatches(&self) -> Vec<Value> {
        self.dispatches.lock().unwrap().clone()
    }
}

#[async_trait]
impl ToolGateway for Ledger {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}}, "required": ["order_id"]});
        Ok(vec![
            ToolSpec {
                name: "shop__get_order".into(),
                description: String::new(),
                input_schema: schema.clone(),
                side_effecting: false,
            },
            ToolSpec { name: REFUND.into(), description: String::new(), input_schema: schema, side_effecting: true },
        ])
    }

    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        name: &str,
        arguments: Value,
        _timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        if name != REFUND {
            return Ok(ToolOutput {
                text: r#"{"order_id":"A1033","status":"DELIVERED","refundable":1874.0}"#.into(),
                is_error: false,
                refused: false,
            });
        }
        if self.needs_approval && arguments.get("_approval").is_none() {
            return Err(ToolError::ApprovalRequired(ProposedAction {
                tool: REFUND.into(),
                order_id: arguments["order_id"].as_str().unwrap_or_default().to_owned(),
                amount_cents: (arguments["amount"].as_f64().unwrap_or(0.0) * 100.0).round() as i64,
                reason: arguments["reason"].as_str().map(str::to_owned),
            }));
        }
        self.dispatches.lock().unwrap().push(arguments.clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let key = arguments["_idempotency_key"].as_str().expect("a side-effecting call carries its key").to_owned();
        let mut refunds = self.refunds.lock().unwrap();
        let n = refunds.len() + 1;
        let receipt = refunds
            .entry(key)
            .or_insert_with(
                || json!({"refunded": true, "refund_id": format!("RF-A1033-{n}"), "amount": arguments["amount"]}),
            )
            .clone();
        Ok(ToolOutput { text: receipt.to_string(), is_error: false, refused: false })
    }
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    tasks: InMemoryQueue,
    refund_queue: InMemoryQueue,
    id: ConversationId,
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

async fn setup_with(deadline_secs: u64, records: impl Fn(&Conversation) -> Vec<SubtaskRecord>) -> Setup {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "Please refund 100 on order A1033.", now_ms(), deadline_secs);
    store.create_conversation(&conversation).await.unwrap();
    let mut recs = records(&conversation);
    swarm_core::domain::link_dependents(&mut recs);
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    let queue = |name: &str| InMemoryQueue::new(QueueSettings { name: name.into(), ..QueueSettings::default() });
    Setup { store, tasks: queue("tasks"), refund_queue: queue("refund"), id: conversation.id }
}

/// One refund-role subtask `w01` using `shop__refund`.
async fn setup() -> Setup {
    setup_with(120, |c| vec![subtask(c, "w01", "refund", &[REFUND], &[])]).await
}

fn worker(s: &Setup, model: Arc<dyn ChatModel>, tools: Arc<dyn ToolGateway>) -> Worker {
    let tasks: Arc<dyn TaskQueue> = Arc::new(s.tasks.clone());
    let refund: Arc<dyn TaskQueue> = Arc::new(s.refund_queue.clone());
    Worker::new(
        s.store.clone(),
        TaskQueues::new(tasks).with_role("refund", refund),
        model.clone(),
        model,
        tools,
        WorkerSettings {
            min_round_time: Duration::from_millis(10),
            safety_margin: Duration::from_millis(10),
            ..WorkerSettings::default()
        },
    )
}

fn refund_call(amount: f64) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: REFUND.into(),
            arguments: json!({"order_id": "A1033", "amount": amount, "reason": "the headphones crackle"}).to_string(),
        }],
        finish_reason: FinishReason::ToolCalls,
        reasoning_content: None,
        usage: Usage::default(),
        model: "m".into(),
    }
}

fn scripted(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses.into_iter().map(Ok)))
}

/// The budget of an invocation that is to die at a crash point: room for a loaded 2-core machine
/// to reach the point (200 ms failed there under a parallel build).
const INVOCATION: Duration = Duration::from_secs(3);
/// How long past the invocation's end its attempt lease is surely over.
const LEASE_LAPSE: Duration = Duration::from_millis(250);

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

#[tokio::test]
async fn a_refund_killed_at_any_point_between_its_writes_runs_once_and_the_model_is_never_asked_again() {
    // (point, dispatches of the one key in all, model requests in all)
    let cases = [
        (CrashPoint::WorkerAfterIntent, 1, 1),
        (CrashPoint::WorkerAfterDispatch, 2, 1),
        (CrashPoint::WorkerAfterOutcome, 1, 1),
        (CrashPoint::WorkerAfterRecordResult, 1, 2),
    ];
    for (point, dispatches, model_requests) in cases {
        let s = setup().await;
        let ledger = Arc::new(Ledger::new());
        let model = scripted(vec![refund_call(100.0), text_response("Refunded 100.00 on A1033.")]);
        let w = worker(&s, model.clone(), ledger.clone());
        let message = TaskMessage::run(&s.id, &"w01".into());
        // The first delivery dies at the point; its lease ends with its invocation.
        // A budget with room for a loaded machine (it must reach the point within it); the lease
        // ends with the invocation, so the redelivery waits for that instant, not a fixed sleep.
        let invocation_ends = after(INVOCATION);
        assert!(dies_at(point, w.handle(message.clone(), invocation_ends)).await, "{point}");
        tokio::time::sleep_until(invocation_ends + LEASE_LAPSE).await;
        // The message comes back (its visibility timeout) and is delivered again.
        let again = w.handle(message, after(Duration::from_secs(10))).await;
        assert!(
            matches!(again, Outcome::Finished(SubtaskStatus::Succeeded) | Outcome::AlreadyFinished),
            "{point}: {again:?}"
        );

        assert_eq!(ledger.refunds(), 1, "{point}: the refund ran once");
        let sent = ledger.dispatches();
        assert_eq!(sent.len(), dispatches, "{point}: {sent:?}");
        let key = format!("swarm:{}:w01:1", s.id);
        assert!(sent.iter().all(|a| a["_idempotency_key"] == key.as_str()), "{point}: one positional key: {sent:?}");
        assert_eq!(model.requests().len(), model_requests, "{point}: the re-run never asked the model");
        let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
        assert_eq!(rec.status, SubtaskStatus::Succeeded, "{point}");
        assert_eq!(rec.effects.len(), 1);
        assert_eq!(rec.effects[0].state, EffectState::Done);
        let SubtaskResult::Succeeded { text, .. } = rec.result.unwrap() else { panic!("{point}: succeeded expected") };
        if point == CrashPoint::WorkerAfterRecordResult {
            assert_eq!(text, "Refunded 100.00 on A1033.");
        } else {
            assert!(text.starts_with("What this step did, as recorded: shop__refund was done: "), "{point}: {text}");
            assert!(text.contains("RF-A1033-1"), "{point}: {text}");
        }
        let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
        assert_eq!((conv.remaining, conv.finished.len()), (0, 1), "{point}: counted once");
    }
}

#[tokio::test]
async fn a_second_delivery_during_a_live_attempt_is_handed_back_until_the_lease_ends() {
    let s = setup().await;
    let ledger = Arc::new(Ledger { delay: Duration::from_millis(300), ..Ledger::new() });
    let model = scripted(vec![refund_call(100.0), text_response("Refunded.")]);
    let w = Arc::new(worker(&s, model.clone(), ledger.clone()));
    let message = TaskMessage::run(&s.id, &"w01".into());
    let first = {
        let (w, m) = (w.clone(), message.clone());
        tokio::spawn(async move { w.handle(m, after(Duration::from_secs(10))).await })
    };
    while s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap().effects.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The refund is in flight under the first attempt's lease (its confirmation armed on the subtask's own queue).
    let armed = s.refund_queue.approximate_depth();
    assert_eq!((armed.delayed, armed.visible), (1, 0), "the confirmation armed before the intent");
    let second = w.handle(message, after(Duration::from_secs(10))).await;
    assert!(matches!(second, Outcome::Requeued(_)), "{second:?}");
    let depth = s.refund_queue.approximate_depth();
    assert_eq!((depth.delayed, depth.visible), (2, 0), "a delayed copy on the subtask's own queue");
    assert_eq!(s.tasks.approximate_depth().total(), 0, "nothing on another queue");
    assert_eq!(first.await.unwrap(), Outcome::Finished(SubtaskStatus::Succeeded));
    assert_eq!((ledger.dispatches().len(), ledger.refunds()), (1, 1));
    assert_eq!(model.requests().len(), 2, "only the first delivery ran the model");
    assert_eq!(s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap().attempts, 1);
}

#[tokio::test]
async fn the_deadline_arriving_while_a_refund_is_in_flight_says_submitted_and_the_outcome_lands_later() {
    // A worker stops its subtask `conversation_margin` before the conversation's deadline, so the deadline
    // path meets a refund in flight when the worker died after dispatching it, its answer unseen. Here
    // the margin is zero and the deadline a second away: the worker dispatches at once and dies.
    let s = setup_with(1, |c| vec![subtask(c, "w01", "refund", &[REFUND], &[])]).await;
    let ledger = Arc::new(Ledger::new());
    let model = scripted(vec![refund_call(100.0), text_response("Refunded.")]);
    let tasks: Arc<dyn TaskQueue> = Arc::new(s.tasks.clone());
    let refund: Arc<dyn TaskQueue> = Arc::new(s.refund_queue.clone());
    let w = Worker::new(
        s.store.clone(),
        TaskQueues::new(tasks).with_role("refund", refund),
        model.clone(),
        model.clone(),
        ledger.clone(),
        WorkerSettings {
            min_round_time: Duration::from_millis(10),
            safety_margin: Duration::from_millis(10),
            conversation_margin: Duration::ZERO,
            ..WorkerSettings::default()
        },
    );
    let run = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10)));
    assert!(dies_at(CrashPoint::WorkerAfterDispatch, run).await, "the worker died with the refund in flight");
    assert_eq!(ledger.refunds(), 1, "the shop made it; nobody recorded its answer");

    // The deadline passes (at most 2 s from now); the deadline path closes what is open.
    let deadline_ms = s.store.get_conversation(&s.id).await.unwrap().unwrap().deadline_ms;
    tokio::time::sleep(Duration::from_millis(u64::try_from(deadline_ms - now_ms() + 20).unwrap_or(0))).await;
    let deadline = w
        .handle(TaskMessage::Deadline { conversation_id: s.id.clone(), turn: 0 }, after(Duration::from_secs(10)))
        .await;
    assert_eq!(deadline, Outcome::Ignored("1 open subtasks closed; the aggregator answers".into()));
    let closed = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(closed.status, SubtaskStatus::Submitted, "not reported failed");
    let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!(conv.remaining, 0, "counted: the conversation can answer");
    let reply = compose_reply(&reply_input(std::slice::from_ref(&closed), &[]));
    assert!(reply.contains("Submitted, being confirmed"), "{reply}");
    assert!(!reply.contains("could not"), "{reply}");
    let view = ConversationView::build(&conv, &[closed]);
    assert_eq!(view.subtasks[0].effects[0].state, EffectState::Intent);

    // The confirmation replays the call with its key: the outcome lands on the conversation, GET shows it,
    // and the subtask is settled with the journal's result.
    let confirm = TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt: 0 };
    assert_eq!(w.handle(confirm, after(Duration::from_secs(10))).await, Outcome::Finished(SubtaskStatus::Succeeded));
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.status, SubtaskStatus::Succeeded);
    assert_eq!(rec.effects[0].state, EffectState::Done);
    let view = ConversationView::build(&conv, &[rec]);
    assert_eq!(view.subtasks[0].effects[0].ok, Some(true));
    assert!(view.subtasks[0].effects[0].result.as_deref().unwrap().contains("RF-A1033-1"));
    assert_eq!(ledger.refunds(), 1, "the replay learnt the outcome; the refund ran once");
    assert_eq!(ledger.dispatches().len(), 2, "dispatched, then replayed with the same key");
    assert_eq!(model.requests().len(), 1, "the model was asked once, before the crash");
}

#[tokio::test]
async fn a_refund_needing_approval_waits_for_review_and_runs_once_with_it_however_often_it_is_sent() {
    let s = setup().await;
    let ledger = Arc::new(Ledger { needs_approval: true, ..Ledger::new() });
    let model = scripted(vec![refund_call(1874.0)]);
    let w = worker(&s, model.clone(), ledger.clone());
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::AwaitingApproval));
    assert_eq!(model.requests().len(), 1, "no further round once it waits for a person");
    assert_eq!(ledger.refunds(), 0, "nothing moved");

    let id = approval_id(&s.id, &"w01".into(), 1);
    let approval = s.store.get_approval(&id).await.unwrap().expect("approval recorded");
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(
        approval.action,
        ProposedAction {
            tool: REFUND.into(),
            order_id: "A1033".into(),
            amount_cents: 187_400,
            reason: Some("the headphones crackle".into())
        }
    );
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    let reply = compose_reply(&reply_input(std::slice::from_ref(&rec), &[]));
    assert!(reply.starts_with("Waiting for review: a refund of 1874.00 on order A1033"), "{reply}");
    assert_eq!(s.store.get_conversation(&s.id).await.unwrap().unwrap().remaining, 0);

    // Not approved yet: an execute message does nothing.
    let execute = TaskMessage::Execute { conversation_id: s.id.clone(), approval_id: id.clone() };
    assert!(matches!(w.handle(execute.clone(), after(Duration::from_secs(10))).await, Outcome::Ignored(_)));
    assert!(ledger.dispatches().is_empty());

    let decision = ApprovalDecision { approve: true, by: "ops".into(), at_ms: now_ms(), token: Some("token-1".into()) };
    s.store.decide_approval(&id, &decision).await.unwrap();
    let first = w.handle(execute.clone(), after(Duration::from_secs(10))).await;
    assert_eq!(first, Outcome::Finished(SubtaskStatus::AwaitingApproval));
    for _ in 0..3 {
        w.handle(execute.clone(), after(Duration::from_secs(10))).await;
    }
    let sent = ledger.dispatches();
    assert_eq!(sent.len(), 1, "one dispatch however often it is sent: {sent:?}");
    assert_eq!(sent[0]["_approval"], "token-1");
    assert_eq!(sent[0]["_idempotency_key"], format!("swarm:{}:w01:1", s.id));
    assert_eq!(
        (sent[0]["order_id"].clone(), sent[0]["amount"].clone()),
        (json!("A1033"), json!(1874.0)),
        "as recorded"
    );
    assert_eq!(ledger.refunds(), 1);
    let done = s.store.get_approval(&id).await.unwrap().unwrap();
    assert_eq!(done.status, ApprovalStatus::Executed);
    assert!(done.outcome.unwrap().text.contains("RF-A1033-1"));
    assert_eq!(model.requests().len(), 1, "no model involved in running it");
}

#[tokio::test]
async fn a_refund_subtask_waits_for_its_dependency_on_its_own_queue_and_nobody_else_sends_there() {
    let s = setup_with(120, |c| {
        vec![subtask(c, "w01", "support", &["shop__get_order"], &[]), subtask(c, "w02", "refund", &[REFUND], &["w01"])]
    })
    .await;
    let ledger = Arc::new(Ledger::new());
    let model = scripted(vec![text_response("A1033 was delivered."), refund_call(100.0), text_response("Refunded.")]);
    let w = worker(&s, model.clone(), ledger.clone());
    // Enqueued at planning, w02 arrives before w01 finished: handed back to its own queue.
    let waiting = w.handle(TaskMessage::run(&s.id, &"w02".into()), after(Duration::from_secs(10))).await;
    assert!(matches!(waiting, Outcome::Requeued(ref why) if why.contains("w01")), "{waiting:?}");
    assert_eq!(s.refund_queue.approximate_depth().delayed, 1);
    assert!(model.requests().is_empty(), "no model while it waits");
    // The parent finishes: it releases nothing to the refund queue (that message waits itself).
    let parent = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
    assert_eq!(parent, Outcome::Finished(SubtaskStatus::Succeeded));
    assert_eq!(s.refund_queue.approximate_depth().total(), 1, "no second message for w02");
    assert_eq!(s.tasks.approximate_depth().total(), 0, "and none on the tasks queue");
    // The waiting message comes back and runs.
    let ran = w.handle(TaskMessage::run(&s.id, &"w02".into()), after(Duration::from_secs(10))).await;
    assert_eq!(ran, Outcome::Finished(SubtaskStatus::Succeeded));
    assert_eq!(ledger.refunds(), 1);
    let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!(conv.remaining, 0);
}

#[tokio::test]
async fn a_refund_subtask_whose_dependency_failed_is_skipped_and_moves_nothing() {
    let s = setup_with(120, |c| {
        vec![subtask(c, "w01", "support", &["shop__get_order"], &[]), subtask(c, "w02", "refund", &[REFUND], &["w01"])]
    })
    .await;
    let failed = SubtaskResult::failed(swarm_core::domain::FailureKind::ModelFailed, "x");
    s.store.record_result(&s.id, &"w01".into(), &failed, &Usage::default(), &[], now_ms()).await.unwrap();
    let ledger = Arc::new(Ledger::new());
    let model = scripted(vec![]);
    let w = worker(&s, model.clone(), ledger.clone());
    let outcome = w.handle(TaskMessage::run(&s.id, &"w02".into()), after(Duration::from_secs(10))).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Skipped));
    assert!(ledger.dispatches().is_empty() && model.requests().is_empty());
}

/// Issue 18: the invocation dies between the journal writes of two side effects — the first
/// refund ran and its outcome is in the journal, the second refund's intent is not. The message
/// comes back: the first refund never runs again, the second (never journaled) is not made, and
/// the subtask finishes saying what was done.
#[tokio::test]
async fn a_subtask_killed_between_two_side_effects_makes_each_at_most_once_and_finishes() {
    let s = setup().await;
    let ledger = Arc::new(Ledger::new());
    let mut second = refund_call(50.0);
    second.tool_calls[0].id = "call_2".into();
    let model = scripted(vec![refund_call(100.0), second, text_response("Refunded 100.00 and 50.00 on A1033.")]);
    let w = worker(&s, model.clone(), ledger.clone());
    let message = TaskMessage::run(&s.id, &"w01".into());
    let point = CrashPoint::WorkerBetweenEffects;
    let invocation_ends = after(INVOCATION);
    assert!(dies_at(point, w.handle(message.clone(), invocation_ends)).await, "it died there");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.effects.len(), 1, "the first effect journaled, the second not: {:?}", rec.effects);
    assert_eq!(rec.effects[0].state, EffectState::Done);
    assert_eq!(ledger.refunds(), 1);
    tokio::time::sleep_until(invocation_ends + LEASE_LAPSE).await;
    let again = w.handle(message, after(Duration::from_secs(10))).await;
    assert!(matches!(again, Outcome::Finished(SubtaskStatus::Succeeded) | Outcome::AlreadyFinished), "{again:?}");

    let sent = ledger.dispatches();
    let first_key = format!("swarm:{}:w01:1", s.id);
    let second_key = format!("swarm:{}:w01:2", s.id);
    let of = |key: &str| sent.iter().filter(|a| a["_idempotency_key"] == key).count();
    assert_eq!(of(&first_key), 1, "the first refund never ran again: {sent:?}");
    // The re-run finishes from the journal without asking the model again: the second refund, never
    // journaled, is not made, and the result says what was.
    assert_eq!(of(&second_key), 0, "{sent:?}");
    assert_eq!(ledger.refunds(), 1);
    assert_eq!(model.requests().len(), 2, "the re-run never asked the model");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.status, SubtaskStatus::Succeeded);
    assert_eq!(rec.effects.len(), 1, "{:?}", rec.effects);
    assert_eq!(rec.effects[0].state, EffectState::Done);
    let SubtaskResult::Succeeded { text, .. } = rec.result.unwrap() else { panic!("succeeded expected") };
    assert!(text.starts_with("What this step did, as recorded: shop__refund was done: "), "{text}");
    let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!((conv.remaining, conv.finished.len()), (0, 1), "counted once");
}
