//! What a side effect's dispatch may record as its outcome (issue 17): only the shop's own answer. A replay — of an intent that may have run (a re-run, a confirmation, an approved execution, or a second dispatch after no answer) — answered by something that is not the shop (the gateway's open breaker or refusal, a proxy's 403, the client's own "no credential", a refused approval) leaves the outcome unknown, to be confirmed later; a local error is never recorded, even on the first dispatch.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskStatus, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::EffectState;
use swarm_core::ports::{
    ChatResponse, ConversationRecords, FinishReason, SubtaskStore, TaskQueue, ToolCall, ToolContext, ToolError,
    ToolGateway, ToolOutput, ToolSpec,
};
use swarm_core::roles::TaskQueues;
use swarm_testing::{ScriptedModel, text_response};
use worker::{Outcome, Worker, WorkerSettings};

const REFUND: &str = "shop__refund";

/// What the gateway answers one dispatch with.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// The shop refunds (idempotently by key) and answers its receipt.
    Shop,
    /// The shop refunds, and its answer is lost (the gateway's "dispatched, no answer").
    Lost,
    /// The gateway's open breaker: a refusal before dispatch, answered as an error result.
    BreakerOpen,
    /// A proxy in front of the gateway refuses the request (HTTP 403): the client's permanent error.
    Proxy403,
    /// The client holds no credential for the role: nothing is sent.
    NoCredential,
    /// The gateway refuses the approval token the call carries.
    ApprovalRefused,
    /// The tool's server fails before it reaches its ledger: an error result with no refusal code
    /// (what the local fault proxy injects; the shop never saw the call).
    ToolFailed,
    /// The shop's ledger could not be reached: a refusal with the code `unavailable`.
    LedgerUnavailable,
    /// The call times out before it reaches the shop: nothing ran.
    NotReached,
    /// The shop refuses the refund for good (a refund rule): a refusal with a permanent code.
    ShopRefused,
}

/// The gateway and the shop's ledger behind it: each dispatch takes the next scripted answer
/// (the shop's receipt once the script is used up).
struct Gateway {
    script: Mutex<VecDeque<Answer>>,
    refunds: Mutex<HashMap<String, Value>>,
    dispatched: Mutex<Vec<Answer>>,
}

impl Gateway {
    fn new(script: &[Answer]) -> Arc<Self> {
        Arc::new(Self {
            script: Mutex::new(script.iter().copied().collect()),
            refunds: Mutex::new(HashMap::new()),
            dispatched: Mutex::new(Vec::new()),
        })
    }

    fn refunds(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }

    /// The shop's refund of `arguments` (idempotent by key): its receipt.
    fn refund(&self, arguments: &Value) -> String {
        let key = arguments["_idempotency_key"].as_str().expect("a side-effecting call carries its key").to_owned();
        let mut refunds = self.refunds.lock().unwrap();
        let n = refunds.len() + 1;
        let receipt =
            refunds.entry(key).or_insert_with(|| json!({"refunded": true, "refund_id": format!("RF-A1033-{n}")}));
        receipt.to_string()
    }
}

#[async_trait]
impl ToolGateway for Gateway {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}, "required": ["order_id"]});
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
        let answer = self.script.lock().unwrap().pop_front().unwrap_or(Answer::Shop);
        self.dispatched.lock().unwrap().push(answer);
        match answer {
            Answer::Shop => Ok(ToolOutput { text: self.refund(&arguments), is_error: false, refused: false }),
            Answer::Lost => {
                self.refund(&arguments);
                Err(ToolError::Timeout(timeout))
            }
            Answer::BreakerOpen => Ok(ToolOutput {
                text: json!({"error": "upstream shop is unavailable (circuit open); try shop__refund again in 5s"})
                    .to_string(),
                is_error: true,
                refused: true,
            }),
            Answer::Proxy403 => Err(ToolError::Permanent(
                "gateway refused the credential: HTTP status client error (403 Forbidden)".into(),
            )),
            Answer::NoCredential => {
                Err(ToolError::Local("no gateway credential configured for role \"refund\"".into()))
            }
            Answer::ApprovalRefused => Err(ToolError::ApprovalRefused("the approval token has expired".into())),
            Answer::ToolFailed => Ok(ToolOutput {
                text: "the tool failed: upstream error (injected)".into(),
                is_error: true,
                refused: false,
            }),
            Answer::LedgerUnavailable => Ok(ToolOutput {
                text: json!({"error": "the refund ledger is unavailable", "code": "unavailable"}).to_string(),
                is_error: true,
                refused: false,
            }),
            Answer::NotReached => Err(ToolError::Timeout(timeout)),
            Answer::ShopRefused => Ok(ToolOutput {
                text: json!({"error": "order A1033 is outside the refund window", "code": "refund_window_closed"})
                    .to_string(),
                is_error: true,
                refused: false,
            }),
        }
    }
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    refund_queue: InMemoryQueue,
    id: ConversationId,
    worker: Worker,
}

async fn setup(gateway: Arc<Gateway>) -> Setup {
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
    let model =
        Arc::new(ScriptedModel::new([refund_call(), text_response("Refunded 10.00 on A1033.")].into_iter().map(Ok)));
    let worker = Worker::new(
        store.clone(),
        TaskQueues::new(Arc::new(tasks) as Arc<dyn TaskQueue>).with_role("refund", Arc::new(refund_queue.clone())),
        model.clone(),
        model,
        gateway,
        WorkerSettings {
            min_round_time: Duration::from_millis(10),
            safety_margin: Duration::from_millis(10),
            ..WorkerSettings::default()
        },
    );
    Setup { store, refund_queue, id: conversation.id, worker }
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

#[tokio::test]
async fn a_replay_answered_by_anything_but_the_shop_leaves_the_outcome_unknown_until_the_shop_answers() {
    for not_the_shop in [
        Answer::BreakerOpen,
        Answer::Proxy403,
        Answer::NoCredential,
        Answer::ApprovalRefused,
        Answer::ToolFailed,
        Answer::LedgerUnavailable,
    ] {
        // The first dispatch refunds and its answer is lost; the second dispatch of the same attempt
        // (a replay: the refund may have run) meets something that is not the shop.
        let gateway = Gateway::new(&[Answer::Lost, not_the_shop, not_the_shop]);
        let s = setup(gateway.clone()).await;
        let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
        let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
        let case = format!("{not_the_shop:?}: dispatched {:?}", gateway.dispatched.lock().unwrap());
        assert_eq!(run, Outcome::Finished(SubtaskStatus::Submitted), "{case}");
        assert_eq!(rec.effects[0].state, EffectState::Intent, "{case}: recorded {:?}", rec.effects[0].outcome);
        assert_eq!(gateway.refunds(), 1, "{case}");

        // A confirmation replays it and meets the same refusal: still unknown, looked at again later.
        let confirm = TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt: 0 };
        let again = s.worker.handle(confirm, after(Duration::from_secs(30))).await;
        let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
        assert!(matches!(again, Outcome::Requeued(_)), "{case}: {again:?}");
        assert_eq!(rec.effects[0].state, EffectState::Intent, "{case}: recorded {:?}", rec.effects[0].outcome);

        // The next one reaches the shop: its receipt (the first refund's, by key) is the outcome.
        let confirm = TaskMessage::Confirm { conversation_id: s.id.clone(), subtask_id: "w01".into(), attempt: 1 };
        let learnt = s.worker.handle(confirm, after(Duration::from_secs(30))).await;
        let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
        assert_eq!(learnt, Outcome::Finished(SubtaskStatus::Succeeded), "{case}: settled with the journal's result");
        let outcome = rec.effects[0].outcome.clone().expect("an outcome");
        assert_eq!((rec.effects[0].state, outcome.is_error), (EffectState::Done, false), "{case}: {outcome:?}");
        assert!(outcome.text.contains("RF-A1033-1"), "{case}: {outcome:?}");
        assert_eq!(gateway.refunds(), 1, "{case}: refunded once");
        assert!(s.refund_queue.approximate_depth().total() >= 1, "{case}: confirmations on the role's own queue");
    }
}

#[tokio::test]
async fn a_first_dispatch_refused_by_the_gateway_is_the_outcome_and_a_local_error_never_is() {
    // Refused before its first dispatch (nothing can have run before): the gateway's answer is what
    // the model and the journal are told.
    let gateway = Gateway::new(&[Answer::BreakerOpen]);
    let s = setup(gateway.clone()).await;
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(run, Outcome::Finished(SubtaskStatus::Succeeded));
    let outcome = rec.effects[0].outcome.clone().expect("an outcome");
    assert_eq!((rec.effects[0].state, outcome.is_error), (EffectState::Done, true));
    assert!(outcome.text.contains("circuit open"), "{outcome:?}");
    assert_eq!(gateway.refunds(), 0);

    // This client could not send it at all (no credential for the role): never an outcome, even first.
    let gateway = Gateway::new(&[Answer::NoCredential, Answer::NoCredential, Answer::NoCredential]);
    let s = setup(gateway.clone()).await;
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(run, Outcome::Finished(SubtaskStatus::Submitted));
    assert_eq!(rec.effects[0].state, EffectState::Intent, "recorded {:?}", rec.effects[0].outcome);
    assert_eq!(gateway.refunds(), 0);
}

#[tokio::test]
async fn a_replay_answered_by_the_shops_definite_refusal_is_the_outcome() {
    // The first dispatch never reached the shop (timed out before it); the replay reaches it and
    // the shop refuses for good: that answer, with its code, settles the entry.
    let gateway = Gateway::new(&[Answer::NotReached, Answer::ShopRefused]);
    let s = setup(gateway.clone()).await;
    let run = s.worker.handle(TaskMessage::run(&s.id, &"w01".into()), after(Duration::from_secs(30))).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    let case = format!("dispatched {:?}", gateway.dispatched.lock().unwrap());
    assert_eq!(run, Outcome::Finished(SubtaskStatus::Succeeded), "{case}");
    let outcome = rec.effects[0].outcome.clone().expect("an outcome");
    assert_eq!((rec.effects[0].state, outcome.is_error), (EffectState::Done, true), "{case}: {outcome:?}");
    assert!(outcome.text.contains("refund_window_closed"), "{case}: {outcome:?}");
    assert_eq!(gateway.refunds(), 0, "{case}");
}
