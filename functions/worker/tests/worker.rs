//! The worker on its own: the tool loop's transcript invariants and the SQS handler's partial batch response, on embedded adapters with a scripted model and gateway.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use serde_json::json;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationId, FailureKind, Subtask, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage, Usage,
};
use swarm_core::ports::{
    ChatMessage, ChatModel, ChatResponse, ConversationStore, FinishReason, TaskQueue, ToolCall, ToolError, ToolGateway,
};
use swarm_core::roles::TaskQueues;
use swarm_testing::{FlakyStore, ScriptedModel, StaticTools, text_response};
use worker::{Outcome, Worker, WorkerMode, WorkerSettings};

/// Answers with scripted responses in order and keeps every request.
fn scripted(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses.into_iter().map(Ok)))
}

fn calls(calls: &[(&str, &str, &str)], finish: FinishReason) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall { id: (*id).into(), name: (*name).into(), arguments: (*args).into() })
            .collect(),
        finish_reason: finish,
        reasoning_content: Some("thinking".into()),
        usage: Usage { prompt_tokens: Some(100), completion_tokens: Some(10), cached_tokens: Some(64), cost_usd: None },
        model: "m".into(),
    }
}

/// A gateway whose tools answer after different delays (so parallel calls finish out of order) and record what ran:
/// `get_order` after 60 ms, the others after 5 ms; `track_shipment` times out.
fn fake_tools() -> Arc<StaticTools> {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    Arc::new(
        StaticTools::named(&["shop__get_order", "shop__track_shipment", "shop__refund"], "", schema)
            .default_delay(Duration::from_millis(5))
            .delay("shop__get_order", Duration::from_millis(60))
            .on_call("shop__track_shipment", |_| Err(ToolError::Timeout(Duration::from_secs(10)))),
    )
}

struct Setup {
    store: Arc<InMemoryConversationStore>,
    queue: InMemoryQueue,
    id: ConversationId,
}

async fn setup(tools: &[&str]) -> Setup {
    setup_with_usage(tools, Usage::default()).await
}

async fn setup_with_usage(tools: &[&str], planning_usage: Usage) -> Setup {
    let store = Arc::new(InMemoryConversationStore::new());
    let mut conversation = Conversation::new("C104", "Where is A1029?", swarm_core::domain::now_ms(), 120);
    conversation.id = ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07");
    store.create_conversation(&conversation).await.unwrap();
    let subtask = Subtask {
        id: "w01".into(),
        instruction: "Check order A1029.".into(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        depends_on: vec![],
    };
    let rec = SubtaskRecord::new(&conversation, subtask, "support".into());
    assert!(store.start_run(&conversation.id, &[rec], &[], &planning_usage).await.unwrap());
    Setup { store, queue: InMemoryQueue::new(QueueSettings::default()), id: conversation.id }
}

fn worker(s: &Setup, model: Arc<dyn ChatModel>, tools: Arc<dyn ToolGateway>) -> Worker {
    let queue: Arc<dyn TaskQueue> = Arc::new(s.queue.clone());
    Worker::new(
        s.store.clone(),
        TaskQueues::new(queue),
        model.clone(),
        model,
        tools,
        WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() },
    )
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn every_tool_call_gets_one_answer_in_call_order_whatever_happens_to_it() {
    let s = setup(&["shop__get_order", "shop__track_shipment"]).await;
    let model = scripted(vec![
        calls(
            &[
                ("functions.get_order:0", "shop__get_order", r#"{"order_id":"A1029"}"#),
                ("call_b", "shop__track_shipment", r#"{"order_id":"A1029",}"#),
                ("call_c", "shop__refund", r#"{"order_id":"A1029"}"#),
                ("call_d", "shop__get_order", r#"{"order_id": "A10"#),
                ("call_e", "shop__get_order", r#"{"order":"A1029"}"#),
            ],
            FinishReason::ToolCalls,
        ),
        text_response("Order A1029 is paid."),
    ]);
    let tools = fake_tools();
    let w = worker(&s, model.clone(), tools.clone());
    let outcome = w.handle(TaskMessage::run(&s.id, "w01"), deadline()).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Succeeded));

    let seen = model.requests();
    let second = &seen[1].messages;
    swarm_core::llm::transcript::check_pairing(second).unwrap();
    let answers: Vec<(&str, &str)> = second
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, content } => Some((tool_call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    let ids: Vec<&str> = answers.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        vec!["functions.get_order:0", "call_b", "call_c", "call_d", "call_e"],
        "ids verbatim, in call order"
    );
    assert!(answers[0].1.contains("\"tool\":\"shop__get_order\""), "the slow call's result stays with its id");
    assert!(answers[1].1.contains("timed out"), "a timed-out call is answered: {}", answers[1].1);
    assert!(answers[2].1.contains("not available"), "a tool outside the subtask's list is refused: {}", answers[2].1);
    assert!(answers[3].1.contains("not valid JSON"), "truncated arguments are refused: {}", answers[3].1);
    assert!(answers[4].1.contains("schema"), "arguments against the schema are refused: {}", answers[4].1);
    // Only the two well-formed, permitted calls ran; the reasoning went back with the assistant message.
    let ran = tools.ran();
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert!(ran.iter().all(|(_, a)| a["_idempotency_key"].as_str().is_some_and(|k| k.contains("w01"))));
    assert!(
        second
            .iter()
            .any(|m| matches!(m, ChatMessage::Assistant { reasoning_content: Some(r), .. } if r == "thinking"))
    );

    let rec = s.store.get_subtask(&s.id, "w01").await.unwrap().unwrap();
    assert_eq!(rec.usage.prompt_tokens, Some(100));
    assert_eq!(rec.usage.cached_tokens, Some(64));
    assert_eq!(rec.tools_used.len(), 5);
}

#[tokio::test]
async fn calls_cut_off_by_length_are_never_executed() {
    let s = setup(&["shop__refund"]).await;
    let model = scripted(vec![
        calls(&[("call_t", "shop__refund", r#"{"order_id": "A1029"}"#)], FinishReason::Length),
        text_response("I could not complete the refund request."),
    ]);
    let tools = fake_tools();
    let w = worker(&s, model.clone(), tools.clone());
    w.handle(TaskMessage::run(&s.id, "w01"), deadline()).await;
    assert!(tools.ran().is_empty(), "no tool ran with guessed arguments");
    let seen = model.requests();
    let answered = seen[1].messages.iter().any(|m| matches!(m, ChatMessage::Tool { tool_call_id, content } if tool_call_id == "call_t" && content.contains("cut off")));
    assert!(answered);
}

#[tokio::test]
async fn permanent_llm_failure_records_a_failed_subtask_with_the_cause() {
    let s = setup(&[]).await;
    let model = scripted(vec![]);
    let w = worker(&s, model, fake_tools());
    assert_eq!(w.handle(TaskMessage::run(&s.id, "w01"), deadline()).await, Outcome::Finished(SubtaskStatus::Failed));
    let rec = s.store.get_subtask(&s.id, "w01").await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::ModelFailed, ref reason }) if reason.contains("script exhausted"))
    );
    let conv = s.store.get_conversation(&s.id).await.unwrap().unwrap();
    assert_eq!(conv.remaining, 0);
    assert_eq!(conv.finished.len(), 1);
}

fn event(bodies: &[&str]) -> SqsEvent {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"messageId": format!("m{i}"), "receiptHandle": format!("r{i}"), "body": b, "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {}, "eventSource": "aws:sqs"}))
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

fn context() -> lambda_runtime::Context {
    let mut c = lambda_runtime::Context::default();
    c.deadline = (swarm_core::domain::now_ms() as u64) + 60_000;
    c
}

#[tokio::test]
async fn partial_batch_response_lists_only_retryable_failures_in_the_lambda_shape() {
    let s = setup(&[]).await;
    let w = worker(&s, scripted(vec![text_response("Hello!")]), fake_tools());
    let good = serde_json::to_string(&TaskMessage::run(&s.id, "w01")).unwrap();
    let unknown = serde_json::to_string(&TaskMessage::run(&ConversationId::new(), "w01")).unwrap();
    let e = event(&[&good, "not json", &unknown]);
    let response = worker::handler::handle(&w, WorkerMode::Tasks, LambdaEvent::new(e, context())).await.unwrap();
    // Unparseable and unknown-conversation messages are poison: acknowledged, not retried forever.
    assert_eq!(serde_json::to_value(&response).unwrap(), json!({"batchItemFailures": []}));
}

#[tokio::test]
async fn throttled_store_reports_the_message_for_redelivery() {
    let queue: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let model: Arc<dyn ChatModel> = scripted(vec![]);
    let w = Worker::new(
        Arc::new(
            FlakyStore::new(Arc::new(InMemoryConversationStore::new()))
                .fail_everything("ProvisionedThroughputExceeded"),
        ),
        TaskQueues::new(queue),
        model.clone(),
        model,
        fake_tools(),
        WorkerSettings::default(),
    );
    let body = serde_json::to_string(&TaskMessage::run(&ConversationId::new(), "w01")).unwrap();
    let e = event(&["not json", &body]);
    let response = worker::handler::handle(&w, WorkerMode::Tasks, LambdaEvent::new(e, context())).await.unwrap();
    assert_eq!(serde_json::to_value(&response).unwrap(), json!({"batchItemFailures": [{"itemIdentifier": "m1"}]}));
}

#[tokio::test]
async fn fixture_events_parse_and_name_the_task_messages() {
    for (file, kind) in [("sqs-tasks.json", "run"), ("sqs-deadline.json", "deadline"), ("sqs-dead-letter.json", "run")]
    {
        let text = std::fs::read_to_string(format!("{}/../../events/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let e: SqsEvent = serde_json::from_str(&text).unwrap();
        assert!(!e.records.is_empty(), "{file}");
        for r in &e.records {
            let m: TaskMessage = serde_json::from_str(r.body.as_deref().unwrap()).unwrap();
            let v = serde_json::to_value(&m).unwrap();
            assert_eq!(v["kind"], kind, "{file}");
        }
    }
}

#[tokio::test]
async fn subtasks_stop_with_that_reason_once_the_conversation_token_budget_is_spent() {
    let spent = Usage { prompt_tokens: Some(900), completion_tokens: Some(200), cached_tokens: None, cost_usd: None };
    let s = setup_with_usage(&[], spent).await;
    let model = scripted(vec![text_response("never asked")]);
    let queue: Arc<dyn TaskQueue> = Arc::new(s.queue.clone());
    let w = Worker::new(
        s.store.clone(),
        TaskQueues::new(queue),
        model.clone(),
        model.clone(),
        fake_tools(),
        WorkerSettings { token_budget: Some(1_000), ..WorkerSettings::default() },
    );
    assert_eq!(w.handle(TaskMessage::run(&s.id, "w01"), deadline()).await, Outcome::Finished(SubtaskStatus::Failed));
    assert!(model.requests().is_empty(), "no LLM call past the budget");
    let rec = s.store.get_subtask(&s.id, "w01").await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::TokenBudgetExhausted, ref reason }) if reason.contains("token budget (1000 tokens)")),
        "{:?}",
        rec.result
    );
}
