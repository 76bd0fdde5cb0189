//! Defect reproductions of the side-effect path (issue 17: M1–M4, M8; issue 18: a dead-lettered confirmation), on the worker alone (embedded store and queues, a scripted model, a keyed ledger as the gateway): a transient store error around the journal, two side effects in one round, the functions wired as template.yaml deploys them (their queues, their credentials), a re-run that ends waiting for approval, and the deadline path counting a finished subtask.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::approval::ProposedAction;
use swarm_core::domain::{
    Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::EffectState;
use swarm_core::faults::{self, CrashPoint, FaultPlan, Invocation};
use swarm_core::ports::{
    AccountingStore, Call, ChatModel, ChatResponse, ConversationRecords, ConversationStore, FinishReason, JournalStore,
    StoreDecorator, StoreError, StoreOp, SubtaskStore, TaskQueue, ToolCall, ToolContext, ToolError, ToolGateway,
    ToolOutput, ToolSpec,
};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;
use swarm_testing::{FlakyStore, ScriptedModel, text_response};
use worker::wiring::{self, AgentPorts, WorkerPorts};
use worker::{Closer, Outcome, Worker, WorkerConfig, WorkerSettings};

const REFUND: &str = "shop__refund";

/// The shop's refund ledger behind the gateway: idempotent by key, every dispatch recorded.
/// Orders in `needs_approval` are refused before dispatch until a token comes with the call;
/// orders in `held_back` are refunded and then the answer is lost (the gateway's
/// "dispatched and did not answer": a timeout, outcome unknown).
#[derive(Default)]
struct Ledger {
    refunds: Mutex<HashMap<String, Value>>,
    dispatches: Mutex<Vec<Value>>,
    needs_approval: HashSet<&'static str>,
    held_back: HashSet<&'static str>,
}

impl Ledger {
    fn refunds(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }
}

#[async_trait]
impl ToolGateway for Ledger {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}, "reason": {"type": "string"}}, "required": ["order_id"]});
        Ok(vec![ToolSpec {
            name: REFUND.into(),
            description: String::new(),
            input_schema: schema,
            side_effecting: true,
        }])
    }

    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        _name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let order = arguments["order_id"].as_str().unwrap_or_default().to_owned();
        if self.needs_approval.contains(order.as_str()) && arguments.get("_approval").is_none() {
            return Err(ToolError::ApprovalRequired(ProposedAction {
                tool: REFUND.into(),
                order_id: order,
                amount_cents: (arguments["amount"].as_f64().unwrap_or(0.0) * 100.0).round() as i64,
                reason: None,
            }));
        }
        self.dispatches.lock().unwrap().push(arguments.clone());
        let key = arguments["_idempotency_key"].as_str().expect("a side-effecting call carries its key").to_owned();
        let receipt = {
            let mut refunds = self.refunds.lock().unwrap();
            let n = refunds.len() + 1;
            refunds
                .entry(key)
                .or_insert_with(
                    || json!({"refunded": true, "refund_id": format!("RF-{order}-{n}"), "amount": arguments["amount"]}),
                )
                .clone()
        };
        if self.held_back.contains(order.as_str()) {
            return Err(ToolError::Timeout(timeout));
        }
        Ok(ToolOutput { text: receipt.to_string(), is_error: false, refused: false })
    }
}

/// The tasks `Worker` function's gateway client as template.yaml deploys it: one credential, the
/// `support` role's (GATEWAY_TOKEN_SECRET_ARN: SupportTokenSecret). `McpToolGateway` answers any
/// other role with exactly this error (shared/adapters/src/mcp.rs).
struct SupportCredentialOnly(Arc<Ledger>);

impl SupportCredentialOnly {
    fn refuse(role: &str) -> ToolError {
        ToolError::Permanent(format!("no gateway credential configured for role {role:?}"))
    }
}

#[async_trait]
impl ToolGateway for SupportCredentialOnly {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        if ctx.role != "support" {
            return Err(Self::refuse(&ctx.role));
        }
        self.0.list_tools(ctx).await
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        if ctx.role != "support" {
            return Err(Self::refuse(&ctx.role));
        }
        self.0.call_tool(ctx, name, arguments, timeout).await
    }
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    tasks: InMemoryQueue,
    refund_queue: InMemoryQueue,
    id: ConversationId,
}

async fn setup() -> Setup {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "Please refund my orders.", now_ms(), 120);
    store.create_conversation(&conversation).await.unwrap();
    let subtask = Subtask {
        id: "w01".into(),
        instruction: "Refund the orders the customer names.".into(),
        tools: vec![REFUND.into()],
        depends_on: vec![],
    };
    let recs = vec![SubtaskRecord::new(&conversation, subtask, "refund".into())];
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    let queue = |name: &str| InMemoryQueue::new(QueueSettings { name: name.into(), ..QueueSettings::default() });
    Setup { store, tasks: queue("tasks"), refund_queue: queue("refund"), id: conversation.id }
}

fn settings() -> WorkerSettings {
    WorkerSettings {
        min_round_time: Duration::from_millis(10),
        safety_margin: Duration::from_millis(10),
        // 1 s (DelaySeconds' smallest) instead of 30 s, so a test can read the confirmation.
        confirm_delay_secs: 1,
        ..WorkerSettings::default()
    }
}

/// The refund worker: both queues (REFUND_QUEUE_URL set), the refund credential.
fn refund_worker(
    s: &Setup,
    store: Arc<dyn ConversationStore>,
    model: Arc<dyn ChatModel>,
    tools: Arc<dyn ToolGateway>,
) -> Worker {
    let tasks: Arc<dyn TaskQueue> = Arc::new(s.tasks.clone());
    let refund: Arc<dyn TaskQueue> = Arc::new(s.refund_queue.clone());
    Worker::new(store, TaskQueues::new(tasks).with_role("refund", refund), model.clone(), model, tools, settings())
}

/// A function as template.yaml configures it (`env`: its variables), built by the worker's wiring
/// over the test's store and queues (a sender only for the queue URLs it is given), on the
/// standard timing table scaled so that the confirmation delay is 1 s.
fn deployed(s: &Setup, env: &[(&str, &str)], agent: Option<AgentPorts>) -> wiring::WorkerFunction {
    let config = WorkerConfig::from_lookup(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
        .expect("the template's variables parse");
    let queues = config.queues.task_queues(|_, label| {
        let queue = if label == "refund" { s.refund_queue.clone() } else { s.tasks.clone() };
        Arc::new(queue) as Arc<dyn TaskQueue>
    });
    let ports = WorkerPorts { store: s.store.clone(), queues, agent, approval_key: None };
    let timings = Timings::standard().scaled(1.0 / 30.0);
    wiring::worker(&config, ports, &timings).expect("the mode fits its ports")
}

const TASKS_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/tasks";
const REFUND_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/refund-tasks";

fn refund_call(calls: &[(&str, f64)]) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (order, amount))| ToolCall {
                id: format!("call_{}", i + 1),
                name: REFUND.into(),
                arguments: json!({"order_id": order, "amount": amount, "reason": "damaged"}).to_string(),
            })
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        reasoning_content: None,
        usage: Usage::default(),
        model: "m".into(),
    }
}

fn scripted(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses.into_iter().map(Ok)))
}

fn after(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + d
}

/// Dies the `nth` time (from 1) the invocation reaches `point`.
struct NthAt(CrashPoint, u32, AtomicU32);
impl FaultPlan for NthAt {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0 && self.2.fetch_add(1, Ordering::SeqCst) + 1 == self.1
    }
}

async fn dies_at_nth<F: Future>(point: CrashPoint, nth: u32, handler: F) -> bool {
    let invocation = Invocation::new(Arc::new(NthAt(point, nth, AtomicU32::new(0))));
    tokio::select! {
        _ = faults::with_plan(invocation.clone(), handler) => false,
        () = invocation.killed() => true,
    }
}

async fn bodies(q: &InMemoryQueue) -> Vec<TaskMessage> {
    q.receive(10, Duration::ZERO).await.unwrap().iter().map(|d| serde_json::from_str(&d.body).unwrap()).collect()
}

/// Everything that moves a subtask on later: a message on either queue, visible or delayed.
fn messages_waiting(s: &Setup) -> u64 {
    s.tasks.approximate_depth().total() + s.refund_queue.approximate_depth().total()
}

// ------------------------------------------------------------------------------------------------
// M1: a transient store error around a side effect acknowledges the message.

#[tokio::test]
async fn a_throttled_journal_write_around_a_refund_is_retried_not_acknowledged() {
    let mut stuck = Vec::new();
    // The intent, the approval a consent-gated refund needs, and the outcome: each write once throttled.
    for (op, needs_approval) in
        [(StoreOp::RecordIntent, false), (StoreOp::CreateApproval, true), (StoreOp::RecordEffectOutcome, false)]
    {
        let s = setup().await;
        let gated: HashSet<&'static str> = if needs_approval { HashSet::from(["A1033"]) } else { HashSet::new() };
        let ledger = Arc::new(Ledger { needs_approval: gated, ..Ledger::default() });
        let model = scripted(vec![refund_call(&[("A1033", 10.0)]), text_response("Refunded 10.00 on A1033.")]);
        // One throttled write (DynamoDB ProvisionedThroughputExceeded after the adapter's own retries).
        let store: Arc<dyn ConversationStore> = Arc::new(FlakyStore::new(s.store.clone()).fail_times(
            op,
            1,
            "ProvisionedThroughputExceededException (injected)",
        ));
        let w = refund_worker(&s, store, model.clone(), ledger.clone());
        let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
        let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
        let line = format!(
            "{op:?}: outcome {outcome:?}; subtask {} with journal {:?}; refunds made {}",
            rec.status,
            rec.effects.iter().map(|e| e.state).collect::<Vec<_>>(),
            ledger.refunds()
        );
        eprintln!("{line}");
        // A transient failure must bring the message back (batchItemFailures), as every other store
        // error of the worker does; acknowledging it leaves a RUNNING subtask that nothing moves on
        // until the conversation's deadline fails it (or calls a refund that ran "being confirmed").
        if !(outcome.should_retry() || rec.status.is_terminal()) {
            stuck.push(line);
        }
    }
    assert!(
        stuck.is_empty(),
        "message acknowledged, subtask left RUNNING with nothing to move it on:\n{}",
        stuck.join("\n")
    );
}

// ------------------------------------------------------------------------------------------------
// M2: two side effects in one round race for journal positions.

/// The in-memory store with the first intent written arriving late, as the second `UpdateItem`
/// of two sent at once may overtake the first on DynamoDB.
struct FirstIntentLate {
    inner: Arc<InMemoryConversationStore>,
    delayed: AtomicBool,
}

impl StoreDecorator for FirstIntentLate {
    fn inner(&self) -> &dyn ConversationStore {
        &*self.inner
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        if call.op == StoreOp::RecordIntent && !self.delayed.swap(true, Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        run.await
    }
}

#[tokio::test]
async fn two_refunds_asked_in_one_round_both_run_whichever_intent_reaches_the_table_first() {
    let s = setup().await;
    let ledger = Arc::new(Ledger::default());
    let model = scripted(vec![
        refund_call(&[("A1033", 10.0), ("A1016", 12.0)]),
        text_response("Refunded 10.00 on A1033 and 12.00 on A1016."),
    ]);
    let store: Arc<dyn ConversationStore> =
        Arc::new(FirstIntentLate { inner: s.store.clone(), delayed: AtomicBool::new(false) });
    let w = refund_worker(&s, store, model.clone(), ledger.clone());
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    eprintln!(
        "outcome {outcome:?}; subtask {}; journal {:?}; refunds {}; messages left {}",
        rec.status,
        rec.effects.iter().map(|e| (e.ordinal, e.state, e.arguments["order_id"].clone())).collect::<Vec<_>>(),
        ledger.refunds(),
        messages_waiting(&s)
    );
    assert_eq!(ledger.refunds(), 2, "both refunds the model asked for ran ({outcome:?}, subtask {})", rec.status);
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Succeeded));
    let orders: Vec<_> = rec.effects.iter().map(|e| (e.ordinal, e.arguments["order_id"].clone())).collect();
    assert_eq!(orders, [(1, json!("A1033")), (2, json!("A1016"))], "positions in call order");
}

// ------------------------------------------------------------------------------------------------
// M3: the functions as template.yaml wires them (their queues, their credentials).

#[tokio::test]
async fn a_dead_lettered_refund_whose_answer_was_lost_is_confirmed_not_recorded_as_refused() {
    let s = setup().await;
    let ledger = Arc::new(Ledger::default());
    let model = scripted(vec![refund_call(&[("A1033", 10.0)]), text_response("Refunded.")]);
    // RefundWorker: both queue URLs, the refund credential.
    let refunds = refund_worker(&s, s.store.clone(), model.clone(), ledger.clone());
    // DlqConsumer: both queue URLs (template.yaml, DlqConsumer Environment, plus the Globals), parsed
    // by its real config; no model, no tools.
    let dlq_env = [
        ("WORKER_MODE", "dlq"),
        ("TASKS_QUEUE_URL", TASKS_URL),
        ("REFUND_QUEUE_URL", REFUND_URL),
        ("TABLE_NAME", "swarm"),
        ("DEADLINE_SECS", "120"),
        ("LLM_BASE_URL", "https://api.deepseek.com/v1"),
        ("LLM_MODEL", "deepseek-chat"),
        ("LLM_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm"),
    ];
    let dlq = deployed(&s, &dlq_env, None).closer().expect("the DLQ consumer is a closer alone");
    // Worker (tasks): TASKS_QUEUE_URL only, the support credential only.
    let support_env = [
        ("WORKER_MODE", "tasks"),
        ("TASKS_QUEUE_URL", TASKS_URL),
        ("TABLE_NAME", "swarm"),
        ("GATEWAY_URL", "https://gateway.example/mcp"),
        ("GATEWAY_TOKEN", "tok-support-0123456789"),
        ("LLM_BASE_URL", "https://api.deepseek.com/v1"),
        ("LLM_MODEL", "deepseek-chat"),
        ("LLM_API_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:llm"),
    ];
    let agent = AgentPorts {
        model: model.clone(),
        sub_model: model.clone(),
        tools: Arc::new(SupportCredentialOnly(ledger.clone())),
    };
    let support = deployed(&s, &support_env, Some(agent)).messages();

    // The refund worker dispatches the refund and dies before its answer is recorded.
    let run = refunds.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_millis(200)));
    assert!(dies_at_nth(CrashPoint::WorkerAfterDispatch, 1, run).await);
    assert_eq!(ledger.refunds(), 1, "the shop refunded");
    // Its message keeps failing and reaches the refund DLQ, which the DLQ consumer reads.
    let dead = dlq.handle_dead_letter(TaskMessage::run(&s.id, &"w01".into())).await;
    assert_eq!(dead, Outcome::Finished(SubtaskStatus::Submitted), "closed as being confirmed");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let on_tasks = bodies(&s.tasks).await;
    let on_refund = bodies(&s.refund_queue).await;
    eprintln!("after the dead letter: tasks queue {on_tasks:?}; refund queue {on_refund:?}");
    // Whatever queue the confirmation went to, let the function that reads it handle it.
    for m in on_tasks {
        let shown = format!("{m:?}");
        let outcome = support.on_message(m, after(Duration::from_secs(10))).await;
        eprintln!("tasks worker (support credential) handles {shown}: {outcome:?}");
    }
    for m in on_refund {
        let shown = format!("{m:?}");
        eprintln!("refund worker handles {shown}: {:?}", refunds.handle(m, after(Duration::from_secs(10))).await);
    }
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    let entry = &rec.effects[0];
    eprintln!("journal entry: {:?} {:?}", entry.state, entry.outcome);
    assert_eq!(ledger.refunds(), 1);
    assert!(
        !(entry.state == EffectState::Done && entry.outcome.as_ref().is_some_and(|o| o.is_error)),
        "the shop holds the refund, but the journal records it as refused: {:?}",
        entry.outcome
    );
    assert_eq!(entry.state, EffectState::Done, "the confirmation learnt the outcome");
}

/// The shop behind a gateway whose answers are lost after the shop acted (timeouts) until the flag
/// says it answers again: a refund made, its outcome unknown until a later replay with its key.
struct AnswersLost(Arc<Ledger>, AtomicBool);

#[async_trait]
impl ToolGateway for AnswersLost {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        self.0.list_tools(ctx).await
    }

    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        let answer = self.0.call_tool(ctx, name, arguments, timeout).await;
        if !self.1.load(Ordering::SeqCst) {
            return Err(ToolError::Timeout(timeout));
        }
        answer
    }
}

/// The confirmations waiting on `q` (visible after the 1 s confirm delay), by their replay count.
async fn confirmations_on(q: &InMemoryQueue) -> Vec<u32> {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    bodies(q)
        .await
        .into_iter()
        .filter_map(|m| match m {
            TaskMessage::Confirm { attempt, .. } => Some(attempt),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_dead_lettered_confirmation_is_handed_back_to_the_refund_queue_and_the_refund_is_confirmed_once() {
    // A confirmation whose receives were all used up by failed invocations (crashes, throttles, a
    // restart) reaches the refund DLQ: nothing about the refund was learnt. The DLQ consumer as
    // deployed hands it back to the refund queue as the next replay; the refund worker learns the
    // outcome from the shop by the entry's key. Past the last replay, or in a DLQ consumer holding no
    // sender for the refund queue, it stays submitted and nothing is sent.
    let s = setup().await;
    let (ledger, gateway, refunds) = refund_with_its_answer_lost(&s).await;
    let dlq = dlq_consumer(&s);
    let confirm =
        |attempt: u32| TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt };
    // The last replay's confirmation dead-lettered: given up, nothing sent.
    let last = Timings::standard().money.confirm_attempts;
    let given_up = dlq.handle_dead_letter(confirm(last - 1)).await;
    assert!(matches!(given_up, Outcome::Ignored(_)), "{given_up:?}");
    // Without a sender for the refund queue (its environment before this change): given up, nothing sent.
    let tasks_only = [("WORKER_MODE", "dlq"), ("TASKS_QUEUE_URL", TASKS_URL), ("TABLE_NAME", "swarm")];
    let blind = deployed(&s, &tasks_only, None).closer().unwrap().handle_dead_letter(confirm(0)).await;
    assert!(matches!(blind, Outcome::Ignored(_)), "{blind:?}");
    assert_eq!(confirmations_on(&s.refund_queue).await, Vec::<u32>::new(), "nothing sent by either");
    // The first confirmation dead-lettered: handed back as the first replay.
    let handed = dlq.handle_dead_letter(confirm(0)).await;
    assert!(matches!(handed, Outcome::Requeued(_)), "{handed:?}");
    assert_eq!(confirmations_on(&s.refund_queue).await, [1]);
    assert_eq!(messages_waiting(&s) - s.refund_queue.approximate_depth().total(), 0, "nothing on the tasks queue");

    gateway.1.store(true, Ordering::SeqCst);
    let confirmed = refunds.handle(confirm(1), after(Duration::from_secs(10))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(confirmed, Outcome::Finished(SubtaskStatus::Succeeded));
    assert_eq!((rec.status, rec.effects[0].state), (SubtaskStatus::Succeeded, EffectState::Done));
    assert_eq!(ledger.refunds(), 1, "confirmed by its key, refunded once");
    // A confirmation dead-lettered after that finds nothing left to confirm.
    assert!(matches!(dlq.handle_dead_letter(confirm(0)).await, Outcome::Ignored(_)));
}

/// A refund worker as deployed whose refund of A1033 the shop made and whose answer was lost: w01
/// left `SUBMITTED` with its intent, the first confirmation (replay 0) on the refund queue.
async fn refund_with_its_answer_lost(s: &Setup) -> (Arc<Ledger>, Arc<AnswersLost>, Worker) {
    let ledger = Arc::new(Ledger::default());
    let model = scripted(vec![refund_call(&[("A1033", 10.0)]), text_response("Refunded.")]);
    let gateway = Arc::new(AnswersLost(ledger.clone(), AtomicBool::new(false)));
    let refunds = refund_worker(s, s.store.clone(), model.clone(), gateway.clone());
    let run = refunds.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    eprintln!(
        "run: {run:?}; subtask {}; journal {:?}",
        rec.status,
        rec.effects.iter().map(|e| e.state).collect::<Vec<_>>()
    );
    assert_eq!((rec.status, rec.effects[0].state), (SubtaskStatus::Submitted, EffectState::Intent));
    assert_eq!(ledger.refunds(), 1, "the shop refunded; its answer was lost");
    assert_eq!(confirmations_on(&s.refund_queue).await, [0], "the confirmation armed before the intent");
    (ledger, gateway, refunds)
}

/// The DLQ consumer with the environment template.yaml gives it.
fn dlq_consumer(s: &Setup) -> Arc<Closer> {
    let env = [
        ("WORKER_MODE", "dlq"),
        ("TASKS_QUEUE_URL", TASKS_URL),
        ("REFUND_QUEUE_URL", REFUND_URL),
        ("TABLE_NAME", "swarm"),
    ];
    deployed(s, &env, None).closer().expect("the DLQ consumer is a closer alone")
}

#[tokio::test]
async fn a_dlq_consumer_killed_after_handing_a_confirmation_back_hands_it_back_again_and_the_refund_settles_once() {
    // The crash window of the hand-back: the send applied, the function killed before the dead letter
    // was deleted, so the dead letter comes back and is handed back a second time — two confirmations
    // with the same replay count. The first learns the outcome by the entry's key and settles w01;
    // the second finds no intent left: no call to the shop, no second settle.
    let s = setup().await;
    let (ledger, gateway, refunds) = refund_with_its_answer_lost(&s).await;
    let dlq = dlq_consumer(&s);
    let dead = TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt: 0 };
    for _ in 0..2 {
        let handed = dlq.handle_dead_letter(dead.clone()).await;
        assert!(matches!(handed, Outcome::Requeued(_)), "{handed:?}");
    }
    assert_eq!(confirmations_on(&s.refund_queue).await, [1, 1], "handed back twice, the same replay");

    gateway.1.store(true, Ordering::SeqCst);
    let replay = TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt: 1 };
    let first = refunds.handle(replay.clone(), after(Duration::from_secs(10))).await;
    assert_eq!(first, Outcome::Finished(SubtaskStatus::Succeeded));
    let calls = ledger.dispatches.lock().unwrap().len();
    let second = refunds.handle(replay, after(Duration::from_secs(10))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(!matches!(second, Outcome::Finished(SubtaskStatus::Failed)), "{second:?}");
    assert_eq!((rec.status, rec.effects[0].state), (SubtaskStatus::Succeeded, EffectState::Done));
    assert_eq!(ledger.dispatches.lock().unwrap().len(), calls, "the second confirmation asked the shop nothing");
    assert_eq!(ledger.refunds(), 1, "refunded once");
}

#[tokio::test]
async fn a_function_without_the_roles_queue_makes_no_side_effect_for_it_and_sends_nothing_elsewhere() {
    // A refund subtask delivered to a function that holds no sender for the refund queue (the tasks
    // worker as deployed): nothing could ever confirm a refund it made, so it makes none.
    let s = setup().await;
    let ledger = Arc::new(Ledger::default());
    let model = scripted(vec![refund_call(&[("A1033", 10.0)]), text_response("Refunded.")]);
    let tasks: Arc<dyn TaskQueue> = Arc::new(s.tasks.clone());
    let w = Worker::new(
        s.store.clone(),
        TaskQueues::new(tasks).with_role_not_held("refund", "refund"),
        model.clone(),
        model.clone(),
        ledger.clone(),
        settings(),
    );
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(10))).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Failed));
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(rec.effects.is_empty(), "no intent: {:?}", rec.effects);
    let SubtaskResult::Failed { reason, .. } = rec.result.unwrap() else { panic!("failed expected") };
    assert!(reason.contains("nothing was done") && reason.contains("refund"), "{reason}");
    assert_eq!((ledger.refunds(), ledger.dispatches.lock().unwrap().len()), (0, 0));
    assert_eq!(messages_waiting(&s), 0, "nothing sent to the tasks queue instead");
}

#[tokio::test]
async fn the_dlq_consumer_as_deployed_sends_no_refund_dependent_to_the_tasks_queue() {
    // w01 (support) dead-letters after its side effects were done; w02 (refund) depends on it. The
    // DLQ consumer closes w01 as its journal says (succeeded) and releases w02 — which waits on its own
    // queue (enqueued at planning): nothing goes to the tasks queue, where a worker without the refund
    // credential would run it. With w01 failed instead, w02 is skipped.
    for done in [true, false] {
        let store = Arc::new(InMemoryConversationStore::new());
        let conversation = Conversation::new("C104", "Check A1033, then refund it.", now_ms(), 120);
        store.create_conversation(&conversation).await.unwrap();
        let step = |id: &str, deps: &[&str], tools: &[&str]| Subtask {
            id: id.into(),
            instruction: format!("step {id}"),
            tools: tools.iter().map(|t| (*t).into()).collect(),
            depends_on: deps.iter().map(|d| (*d).into()).collect(),
        };
        let mut recs = vec![
            SubtaskRecord::new(&conversation, step("w01", &[], &["shop__redeem"]), "support".into()),
            SubtaskRecord::new(&conversation, step("w02", &["w01"], &[REFUND]), "refund".into()),
        ];
        swarm_core::domain::link_dependents(&mut recs);
        assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
        if done {
            let lease = swarm_core::effects::AttemptLease::new(now_ms() + 60_000);
            store.begin_attempt(&conversation.id, &"w01".into(), &lease, now_ms()).await.unwrap();
            let mut args = serde_json::Map::new();
            args.insert("code".into(), "SAVE20".into());
            let effect =
                swarm_core::effects::Effect::intent(&conversation.id, &"w01".into(), 1, "shop__redeem", args, now_ms());
            store.record_intent(&conversation.id, &"w01".into(), &lease.holder, &effect).await.unwrap();
            let receipt = swarm_core::effects::EffectOutcome::new(r#"{"redeemed":true}"#, false);
            let change = swarm_core::effects::EffectChange::done(receipt, now_ms());
            store.record_effect_outcome(&conversation.id, &"w01".into(), 1, &change).await.unwrap();
        }
        let s = Setup {
            store: store.clone(),
            tasks: InMemoryQueue::new(QueueSettings { name: "tasks".into(), ..QueueSettings::default() }),
            refund_queue: InMemoryQueue::new(QueueSettings { name: "refund".into(), ..QueueSettings::default() }),
            id: conversation.id.clone(),
        };
        let env = [
            ("WORKER_MODE", "dlq"),
            ("TASKS_QUEUE_URL", TASKS_URL),
            ("REFUND_QUEUE_URL", REFUND_URL),
            ("TABLE_NAME", "swarm"),
        ];
        let dlq = deployed(&s, &env, None).closer().expect("a closer alone");
        let outcome = dlq.handle_dead_letter(TaskMessage::run(&s.id, &"w01".into())).await;
        let w02 = store.get_subtask(&s.id, &"w02".into()).await.unwrap().unwrap();
        eprintln!("w01 done {done}: {outcome:?}; w02 {}", w02.status);
        if done {
            assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Succeeded), "closed as its journal says");
            assert_eq!(w02.status, SubtaskStatus::Pending, "released on its own queue, not here");
        } else {
            assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Failed));
            assert_eq!(w02.status, SubtaskStatus::Skipped);
        }
        assert_eq!(messages_waiting(&s), 0, "nothing sent to either queue");
    }
}

// ------------------------------------------------------------------------------------------------
// M4: a re-run that ends waiting for approval never confirms a side effect whose outcome is unknown.

#[tokio::test]
async fn a_rerun_ending_awaiting_approval_still_confirms_a_refund_whose_answer_was_lost() {
    let s = setup().await;
    // A1033 (large) waits for a person; A1016 (small, under the threshold) runs, its answer lost.
    let ledger = Arc::new(Ledger {
        needs_approval: HashSet::from(["A1033"]),
        held_back: HashSet::from(["A1016"]),
        ..Ledger::default()
    });
    let model = scripted(vec![refund_call(&[("A1033", 1874.0), ("A1016", 12.0)])]);
    let w = refund_worker(&s, s.store.clone(), model.clone(), ledger.clone());
    // The first delivery dies right after the second call's dispatch (the first already waits).
    let run = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_millis(200)));
    assert!(dies_at_nth(CrashPoint::WorkerAfterDispatch, 2, run).await, "died after the second dispatch");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(
        rec.effects.iter().map(|e| e.state).collect::<Vec<_>>(),
        [EffectState::AwaitingApproval, EffectState::Intent]
    );
    assert_eq!(ledger.refunds(), 1, "A1016 was refunded; its answer never arrived");
    tokio::time::sleep(Duration::from_millis(250)).await;
    // The message comes back: the re-run finishes from the journal (the model is not asked again).
    let again = w.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_millis(400))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    let waiting: Vec<TaskMessage> = [bodies(&s.refund_queue).await, bodies(&s.tasks).await].concat();
    let delayed = messages_waiting(&s);
    eprintln!(
        "re-run: {again:?}; subtask {}; journal {:?}; messages visible {waiting:?}, left in queues {delayed}",
        rec.status,
        rec.effects.iter().map(|e| e.state).collect::<Vec<_>>()
    );
    assert!(rec.status.is_terminal());
    assert_eq!(rec.effects[1].state, EffectState::Intent, "still unknown after the replays");
    // The entry is terminal-subtask + Intent: only a Confirm message can ever learn its outcome.
    assert!(delayed > 0, "nothing will ever confirm the A1016 refund: it stays an intent for good");
}

// ------------------------------------------------------------------------------------------------
// M8: the deadline path counts a finished subtask without its usage.

#[tokio::test]
async fn a_subtask_counted_by_the_deadline_path_keeps_its_tokens_on_the_conversation() {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "where is A1029", now_ms(), 1);
    store.create_conversation(&conversation).await.unwrap();
    let subtask = Subtask { id: "w01".into(), instruction: "Check A1029".into(), tools: vec![], depends_on: vec![] };
    let recs = vec![SubtaskRecord::new(&conversation, subtask, "support".into())];
    assert!(store.start_run(&conversation.id, None, &recs, &[], &Usage::default()).await.unwrap());
    // A worker recorded w01's result and its 12,000 tokens, then died before counting it
    // (worker_after_record_result); its message comes back after the visibility timeout, past the deadline.
    let used = Usage {
        prompt_tokens: Some(10_000),
        completion_tokens: Some(2_000),
        cached_tokens: None,
        cost_usd: Some(0.05),
    };
    let done = SubtaskResult::Succeeded { text: "A1029 has shipped.".into(), tool_calls: vec![] };
    store.record_result(&conversation.id, &"w01".into(), &done, &used, &[], now_ms()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let tasks: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let closer = Closer::new(store.clone(), TaskQueues::new(tasks), &settings());
    let outcome = closer.deadline(&conversation.id, 0).await;
    let conv = store.get_conversation(&conversation.id).await.unwrap().unwrap();
    eprintln!(
        "deadline path: {outcome:?}; conversation {} remaining {} usage {:?}",
        conv.status, conv.remaining, conv.usage
    );
    assert_eq!(conv.remaining, 0, "counted");
    assert_eq!(
        conv.usage.total_tokens(),
        12_000,
        "the conversation's usage (its cost metric, LLM_TOKEN_BUDGET) lost w01's tokens: {:?}",
        conv.usage
    );
    // The same count again (a later run of the path) adds nothing.
    store.count_finished(&conversation.id, &"w01".into(), &used).await.unwrap();
    let again = store.get_conversation(&conversation.id).await.unwrap().unwrap();
    assert_eq!(again.usage.total_tokens(), 12_000);
}
