//! The backstop of an approved side effect that never ran (issue 17, 11(d)): a crash after the decision, a failed enqueue, a dead-lettered execute message or a re-post after the token's window leave an approved call that its token can no longer run. The sweep finds approved calls not run past the token's window, counts them, and re-enqueues each to its role's queue with a fresh token — and the call then runs once, by its journal key.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::approval::{ApprovalDecision, ApprovalKey, ApprovalStatus, CallFacts, ProposedAction, approval_id};
use swarm_core::domain::{
    Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskStatus, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::effect_key;
use swarm_core::ports::{
    ApprovalStore, ChatResponse, ConversationRecords, FinishReason, TaskQueue, ToolCall, ToolContext, ToolError,
    ToolGateway, ToolOutput, ToolSpec,
};
use swarm_core::roles::TaskQueues;
use swarm_testing::{ScriptedModel, text_response};
use worker::{Closer, Outcome, Worker, WorkerSettings};

const REFUND: &str = "shop__refund";
/// The token's window in this test (`money.approval_execute_within_secs`, scaled down).
const WINDOW: Duration = Duration::from_millis(300);

/// The gateway in front of the shop: a refund needs a person's approval, and its token is checked
/// (signature, call and expiry) exactly as the gateway checks it; the shop refunds once per key.
struct Shop {
    key: ApprovalKey,
    refunds: Mutex<HashMap<String, Value>>,
    refused: Mutex<usize>,
}

impl Shop {
    fn refunds(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }
}

#[async_trait]
impl ToolGateway for Shop {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}, "required": ["order_id", "amount"]});
        Ok(vec![ToolSpec {
            name: REFUND.into(),
            description: String::new(),
            input_schema: schema,
            side_effecting: true,
        }])
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
        _timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let order_id = arguments["order_id"].as_str().unwrap().to_owned();
        let amount_cents = (arguments["amount"].as_f64().unwrap() * 100.0).round() as i64;
        let Some(token) = arguments.get("_approval").and_then(Value::as_str) else {
            let action = ProposedAction { tool: name.into(), order_id, amount_cents, reason: None };
            return Err(ToolError::ApprovalRequired(action));
        };
        let key = arguments["_idempotency_key"].as_str().unwrap().to_owned();
        let facts = CallFacts {
            conversation_id: ctx.conversation_id.as_str(),
            customer_id: &ctx.customer_id,
            tool: name,
            order_id: &order_id,
            amount_cents,
            idempotency_key: &key,
        };
        if let Err(e) = self.key.verify(token, &facts, now_ms()) {
            *self.refused.lock().unwrap() += 1;
            return Err(ToolError::ApprovalRefused(e.to_string()));
        }
        let mut refunds = self.refunds.lock().unwrap();
        let n = refunds.len() + 1;
        let receipt =
            refunds.entry(key).or_insert_with(|| json!({"refunded": true, "refund_id": format!("RF-A1033-{n}")}));
        Ok(ToolOutput { text: receipt.to_string(), is_error: false, refused: false })
    }
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    refund_queue: InMemoryQueue,
    id: ConversationId,
    worker: Worker,
    closer: Closer,
    shop: Arc<Shop>,
    key: ApprovalKey,
}

async fn setup() -> Setup {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "Please refund order A1033.", now_ms(), 120);
    store.create_conversation(&conversation).await.unwrap();
    let subtask = Subtask {
        id: "w01".into(),
        instruction: "Refund A1033.".into(),
        tools: vec![REFUND.into()],
        depends_on: vec![],
    };
    let recs = vec![SubtaskRecord::new(&conversation, subtask, "refund".into())];
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    let queue = |name: &str| InMemoryQueue::new(QueueSettings { name: name.into(), ..QueueSettings::default() });
    let (tasks, refund_queue) = (queue("tasks"), queue("refund"));
    let queues =
        TaskQueues::new(Arc::new(tasks) as Arc<dyn TaskQueue>).with_role("refund", Arc::new(refund_queue.clone()));
    let (key, _) = ApprovalKey::generate();
    let shop = Arc::new(Shop { key: key.clone(), refunds: Mutex::new(HashMap::new()), refused: Mutex::new(0) });
    let model =
        Arc::new(ScriptedModel::new([refund_call(), text_response("Refunded 10.00 on A1033.")].into_iter().map(Ok)));
    let mut settings = WorkerSettings {
        min_round_time: Duration::from_millis(10),
        safety_margin: Duration::from_millis(10),
        ..WorkerSettings::default()
    };
    settings.sweep.reissue_after = WINDOW;
    let worker = Worker::new(store.clone(), queues.clone(), model.clone(), model, shop.clone(), settings.clone());
    // The sweeper holds the approval key and the role's queue: it can re-issue, never decide.
    let closer = Closer::new(store.clone(), queues, &settings).with_approval_key(key.clone());
    Setup { store, refund_queue, id: conversation.id, worker, closer, shop, key }
}

fn refund_call() -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: REFUND.into(),
            arguments: json!({"order_id": "A1033", "amount": 10.0}).to_string(),
        }],
        finish_reason: FinishReason::ToolCalls,
        reasoning_content: None,
        usage: Usage::default(),
        model: "m".into(),
    }
}

fn after(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + d
}

/// The operator's approval as the approvals API records it: a token for exactly this call, valid
/// for the window from now. Its execute message is never sent (the enqueue failed, or it died).
async fn approve(s: &Setup, id: &str) -> String {
    let approval = s.store.get_approval(id).await.unwrap().expect("approval recorded");
    let expires_at_ms = now_ms() + i64::try_from(WINDOW.as_millis()).unwrap();
    let key = effect_key(&approval.conversation_id, &approval.subtask_id, approval.ordinal);
    let token = s.key.sign(&approval.claim(&key, expires_at_ms));
    let decision = ApprovalDecision { approve: true, by: "ops".into(), at_ms: now_ms(), token: Some(token.clone()) };
    s.store.decide_approval(id, &decision).await.unwrap();
    token
}

/// The execute messages visible on the role's queue now (received and deleted).
async fn executes(queue: &InMemoryQueue) -> Vec<TaskMessage> {
    let mut found = Vec::new();
    for m in queue.receive(10, Duration::from_millis(50)).await.unwrap() {
        let message: TaskMessage = serde_json::from_str(&m.body).unwrap();
        if matches!(message, TaskMessage::Execute { .. }) {
            queue.delete(&m.receipt_handle).await.unwrap();
            found.push(message);
        }
    }
    found
}

#[tokio::test]
async fn an_approved_call_that_never_ran_is_re_enqueued_by_the_sweep_with_a_fresh_token_and_runs_once() {
    let s = setup().await;
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    assert_eq!(run, Outcome::Finished(SubtaskStatus::AwaitingApproval));
    let id = approval_id(&s.id, &"w01".into(), 1);
    let first_token = approve(&s, &id).await;

    // Within the token's window the execute message may still be on its way: the sweep leaves it.
    let report = s.closer.sweep(after(Duration::from_secs(10))).await;
    assert_eq!((report.approved_not_run, report.reissued), (0, 0), "{report:?}");
    assert!(executes(&s.refund_queue).await.is_empty());

    // Past the window, the old token cannot make it run: a late execute message is refused by the
    // gateway, and that refusal is not recorded as the refund's outcome (it stays approved).
    tokio::time::sleep(WINDOW + Duration::from_millis(100)).await;
    let execute = TaskMessage::Execute { conversation_id: s.id.clone(), approval_id: id.clone() };
    let late = s.worker.handle(execute, after(Duration::from_secs(30))).await;
    assert!(matches!(late, Outcome::Retry(_)), "{late:?}");
    assert_eq!((s.shop.refunds(), *s.shop.refused.lock().unwrap()), (0, 1));
    assert_eq!(s.store.get_approval(&id).await.unwrap().unwrap().status, ApprovalStatus::Approved);

    // The sweep: counted, a fresh token, and the call back on the refund role's own queue.
    let report = s.closer.sweep(after(Duration::from_secs(10))).await;
    assert_eq!((report.approved_not_run, report.reissued), (1, 1), "{report:?}");
    let approval = s.store.get_approval(&id).await.unwrap().unwrap();
    let fresh = approval.token.clone().expect("a token");
    assert_ne!(fresh, first_token, "a fresh token");
    assert_eq!((approval.status, approval.decided_by.as_deref()), (ApprovalStatus::Approved, Some("ops")));
    let sent = executes(&s.refund_queue).await;
    assert_eq!(sent, vec![TaskMessage::Execute { conversation_id: s.id.clone(), approval_id: id.clone() }]);

    // It runs, once; a second sweep finds nothing left to re-issue.
    let ran = s.worker.handle(sent[0].clone(), after(Duration::from_secs(30))).await;
    assert!(matches!(ran, Outcome::Finished(_)), "{ran:?}");
    assert_eq!(s.shop.refunds(), 1);
    let done = s.store.get_approval(&id).await.unwrap().unwrap();
    assert_eq!(done.status, ApprovalStatus::Executed);
    assert!(done.outcome.unwrap().text.contains("RF-A1033-1"));
    tokio::time::sleep(WINDOW + Duration::from_millis(100)).await;
    let report = s.closer.sweep(after(Duration::from_secs(10))).await;
    assert_eq!((report.approved_not_run, report.reissued), (0, 0), "{report:?}");
    assert!(executes(&s.refund_queue).await.is_empty());
}

#[tokio::test]
async fn a_sweeper_without_the_approval_key_counts_approved_calls_not_run_and_re_issues_none() {
    let s = setup().await;
    s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    let id = approval_id(&s.id, &"w01".into(), 1);
    let token = approve(&s, &id).await;
    tokio::time::sleep(WINDOW + Duration::from_millis(100)).await;
    let store: Arc<InMemoryConversationStore> = s.store.clone();
    let queue: Arc<dyn TaskQueue> = Arc::new(s.refund_queue.clone());
    let mut settings = WorkerSettings::default();
    settings.sweep.reissue_after = WINDOW;
    let keyless = Closer::new(store, TaskQueues::new(queue), &settings);
    let report = keyless.sweep(after(Duration::from_secs(10))).await;
    assert_eq!((report.approved_not_run, report.reissued), (1, 0), "{report:?}");
    assert_eq!(s.store.get_approval(&id).await.unwrap().unwrap().token, Some(token), "unchanged");
    assert!(executes(&s.refund_queue).await.is_empty());
}

/// Crashes an invocation at one point.
struct KillAt(swarm_core::faults::CrashPoint);

impl swarm_core::faults::FaultPlan for KillAt {
    fn crash(&self, point: swarm_core::faults::CrashPoint) -> bool {
        point == self.0
    }
}

#[tokio::test]
async fn a_worker_killed_after_the_approved_refund_ran_tells_it_on_the_redelivered_execute_once() {
    use swarm_core::domain::{ConversationStatus, TurnAuthor};
    use swarm_core::faults::{CrashPoint, Invocation, with_plan};
    use swarm_core::ports::{AnswerStore, LeasePhase, SubtaskStore};
    let s = setup().await;
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    assert_eq!(run, Outcome::Finished(SubtaskStatus::AwaitingApproval));
    // The turn is answered ("it waits for review") before the person decides.
    let now = now_ms();
    s.store.acquire_lease(&s.id, LeasePhase::Aggregating { turn: 0 }, "agg:t", now, now + 60_000).await.unwrap();
    assert!(s.store.finish_conversation(&s.id, 0, "it waits for review", &Usage::default()).await.unwrap());
    let id = approval_id(&s.id, &"w01".into(), 1);
    approve(&s, &id).await;
    let execute = TaskMessage::Execute { conversation_id: s.id.clone(), approval_id: id.clone() };

    // Killed after the approval is closed, before the outcome is told.
    let killed = Invocation::new(Arc::new(KillAt(CrashPoint::WorkerAfterFinishApproval)));
    let handler = with_plan(killed.clone(), s.worker.handle(execute.clone(), after(Duration::from_secs(30))));
    let died = tokio::select! {
        _ = handler => false,
        () = killed.killed() => true,
    };
    assert!(died, "the worker ran past its crash point");
    assert_eq!(s.store.get_approval(&id).await.unwrap().unwrap().status, ApprovalStatus::Executed);
    assert_eq!(s.store.get_conversation(&s.id).await.unwrap().unwrap().turn, 0, "not told yet");

    // The message comes back: the refund is not run again, and the outcome is told once.
    let again = s.worker.handle(execute.clone(), after(Duration::from_secs(30))).await;
    assert!(matches!(again, Outcome::Ignored(_)), "{again:?}");
    assert_eq!(s.shop.refunds(), 1);
    let told = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!((told.turn, told.status, told.author), (1, ConversationStatus::Done, TurnAuthor::Swarm));
    let reply = told.reply.unwrap();
    assert!(reply.contains("RF-A1033-1") && reply.contains("A1033"), "{reply}");
    assert_eq!(s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap().status, SubtaskStatus::Succeeded);
    s.worker.handle(execute, after(Duration::from_secs(30))).await;
    assert_eq!(s.store.get_conversation(&s.id).await.unwrap().unwrap().turn, 1, "told once");
}
