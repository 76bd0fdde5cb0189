//! The worker on its own: the tool loop's transcript invariants, its output-limit, context and round budgets, and the SQS handler's partial batch response, on embedded adapters with a scripted model and gateway.

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
    ChatMessage, ChatModel, ChatResponse, ConversationRecords, FinishReason, LlmError, SubtaskStore, TaskQueue,
    ToolCall, ToolChoice, ToolError, ToolGateway,
};
use swarm_core::roles::TaskQueues;
use swarm_testing::{FlakyStore, ScriptedModel, StaticTools, text_response};
use worker::{Outcome, Worker, WorkerSettings};

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
    assert!(store.start_run(&conversation.id, None, &[rec], &[], &planning_usage).await.unwrap());
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
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await;
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
    assert!(ran.iter().all(|(_, a)| a.get("_idempotency_key").is_none()), "read-only calls carry no side-effect key");
    assert!(
        second
            .iter()
            .any(|m| matches!(m, ChatMessage::Assistant { reasoning_content: Some(r), .. } if r == "thinking"))
    );

    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
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
    w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await;
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
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Failed)
    );
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
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
    let good = serde_json::to_string(&TaskMessage::run(&s.id, &"w01".into())).unwrap();
    let unknown = serde_json::to_string(&TaskMessage::run(&ConversationId::new(), &"w01".into())).unwrap();
    let e = event(&[&good, "not json", &unknown]);
    let response = worker::handler::handle(&w, LambdaEvent::new(e, context())).await.unwrap();
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
    let body = serde_json::to_string(&TaskMessage::run(&ConversationId::new(), &"w01".into())).unwrap();
    let e = event(&["not json", &body]);
    let response = worker::handler::handle(&w, LambdaEvent::new(e, context())).await.unwrap();
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
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Failed)
    );
    assert!(model.requests().is_empty(), "no LLM call past the budget");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::TokenBudgetExhausted, ref reason }) if reason.contains("token budget (1000 tokens)")),
        "{:?}",
        rec.result
    );
}

// ---------------------------------------------------------------- issue 11: limits, budgets, tool history

fn worker_with(s: &Setup, model: Arc<dyn ChatModel>, tools: Arc<dyn ToolGateway>, settings: WorkerSettings) -> Worker {
    let queue: Arc<dyn TaskQueue> = Arc::new(s.queue.clone());
    Worker::new(s.store.clone(), TaskQueues::new(queue), model.clone(), model, tools, settings)
}

fn settings() -> WorkerSettings {
    WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() }
}

fn tool_messages(request: &swarm_core::ports::ChatRequest) -> Vec<&str> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

fn length_cut(text: Option<&str>) -> ChatResponse {
    ChatResponse {
        content: text.map(str::to_owned),
        finish_reason: FinishReason::Length,
        reasoning_content: Some("still thinking".into()),
        ..text_response("")
    }
}

/// Five parallel calls of one tool, each answering 8,000 Chinese characters after its own fact.
fn five_big_results() -> (ChatResponse, Arc<StaticTools>) {
    let args = [
        r#"{"order_id":"A1"}"#,
        r#"{"order_id":"A2"}"#,
        r#"{"order_id":"A3"}"#,
        r#"{"order_id":"A4"}"#,
        r#"{"order_id":"A5"}"#,
    ];
    let ids = ["c1", "c2", "c3", "c4", "c5"];
    let round: Vec<(&str, &str, &str)> = ids.iter().zip(args).map(|(id, a)| (*id, "shop__get_order", a)).collect();
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    let tools = StaticTools::named(&["shop__get_order"], "", schema).on_call("shop__get_order", |args| {
        let id = args["order_id"].as_str().unwrap_or("?").to_owned();
        Ok(swarm_core::ports::ToolOutput {
            text: format!("订单 {id} 已付款。{}", "物流记录".repeat(2_000)),
            is_error: false,
            refused: false,
        })
    });
    (calls(&round, FinishReason::ToolCalls), Arc::new(tools))
}

#[tokio::test]
async fn the_last_round_keeps_the_tools_and_forbids_calls_with_tool_choice_none() {
    let s = setup(&["shop__get_order"]).await;
    let model = scripted(vec![
        calls(&[("c1", "shop__get_order", r#"{"order_id":"A1029"}"#)], FinishReason::ToolCalls),
        text_response("Order A1029 is paid."),
    ]);
    let w = worker_with(&s, model.clone(), fake_tools(), WorkerSettings { max_rounds: 2, ..settings() });
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Succeeded)
    );
    let seen = model.requests();
    assert_eq!(seen[0].tool_choice, ToolChoice::Auto);
    assert_eq!(seen[1].tool_choice, ToolChoice::None, "the last round forbids calls");
    assert_eq!(seen[1].tools.len(), 1, "and still carries the tools its transcript used");
    assert_eq!(seen[1].max_tokens, Some(worker::WORK_ANSWER_TOKENS));
}

#[tokio::test]
async fn one_round_of_large_results_fits_its_budget_together_each_cut_fairly_with_a_note() {
    let s = setup(&["shop__get_order"]).await;
    let (round, tools) = five_big_results();
    let model = scripted(vec![round, text_response("A1-A5 are paid.")]);
    let w = worker_with(&s, model.clone(), tools, WorkerSettings { round_budget_tokens: 6_000, ..settings() });
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Succeeded)
    );
    let second = &model.requests()[1];
    let results = tool_messages(second);
    assert_eq!(results.len(), 5);
    let total: u64 = results.iter().map(|r| swarm_core::llm::transcript::estimate_text_tokens(r)).sum();
    assert!(total <= 6_000, "{total} tokens");
    for (i, r) in results.iter().enumerate() {
        assert!(r.starts_with(&format!("订单 A{} 已付款。", i + 1)), "each result keeps its fact: {}", &r[..40]);
        assert!(r.contains("characters shown"), "each cut result says so");
    }
    let lens: Vec<usize> = results.iter().map(|r| r.chars().count()).collect();
    assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 2, "cut fairly: {lens:?}");
}

#[tokio::test]
async fn a_context_length_error_shrinks_the_latest_round_and_never_resends_the_same_request() {
    let s = setup(&["shop__get_order"]).await;
    let (round, tools) = five_big_results();
    let too_long =
        LlmError::ContextLength { status: 400, message: "This model's maximum context length is 16384 tokens.".into() };
    let model = Arc::new(ScriptedModel::new(vec![
        Ok(round),
        Err(too_long.clone()),
        Ok(text_response("A1, A2, A3, A4 and A5 are paid.")),
    ]));
    let w = worker_with(&s, model.clone(), tools, WorkerSettings { round_budget_tokens: 30_000, ..settings() });
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Succeeded)
    );
    let seen = model.requests();
    assert_eq!(seen.len(), 3);
    assert_ne!(seen[1].messages, seen[2].messages, "never the same request twice");
    let (big, small) = (tool_messages(&seen[1]), tool_messages(&seen[2]));
    let tokens = |rs: &[&str]| rs.iter().map(|r| swarm_core::llm::transcript::estimate_text_tokens(r)).sum::<u64>();
    assert!(
        tokens(&small) * 2 <= tokens(&big) + 10,
        "the latest round was halved: {} -> {}",
        tokens(&big),
        tokens(&small)
    );
    assert!(small.iter().all(|r| r.contains("已付款") && r.contains("characters shown")));
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(matches!(rec.result, Some(SubtaskResult::Succeeded { ref text, .. }) if text.contains("A5 are paid")));

    // Nothing to shorten (no round yet): the subtask fails clearly instead of resending.
    let s = setup(&[]).await;
    let model = Arc::new(ScriptedModel::always(Err(too_long)));
    let w = worker_with(&s, model.clone(), fake_tools(), settings());
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Failed)
    );
    assert_eq!(model.calls(), 1);
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::ModelFailed, ref reason }) if reason.contains("cannot be shortened")),
        "{:?}",
        rec.result
    );
}

#[tokio::test]
async fn an_answer_cut_off_by_length_is_never_stored_as_final() {
    let s = setup(&["shop__get_order"]).await;
    let model = scripted(vec![
        calls(&[("c1", "shop__get_order", r#"{"order_id":"A1029"}"#)], FinishReason::ToolCalls),
        length_cut(Some("Order A1029 is pa")),
        length_cut(None),
    ]);
    let w = worker_with(&s, model.clone(), fake_tools(), settings());
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Succeeded)
    );
    assert_eq!(model.calls(), 3, "asked once more with a shorter history, then stopped");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    let Some(SubtaskResult::Succeeded { text, .. }) = rec.result else { panic!("{:?}", rec.result) };
    assert!(
        text.starts_with("(partial: the model's answer was cut off by its output limit) Facts found so far: "),
        "{text}"
    );
    assert!(text.contains("A1029") && !text.contains("is pa"), "the cut text is not the answer: {text}");

    // Without any fact, it is a failure saying why.
    let s = setup(&[]).await;
    let model = scripted(vec![length_cut(None), length_cut(None)]);
    let w = worker_with(&s, model, fake_tools(), settings());
    assert_eq!(
        w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await,
        Outcome::Finished(SubtaskStatus::Failed)
    );
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::NoAnswer, ref reason }) if reason.contains("cut off"))
    );
}

#[tokio::test]
async fn a_schema_that_does_not_compile_is_reported_and_its_calls_refused_not_run_unchecked() {
    let s = setup(&["shop__get_order"]).await;
    let tools = Arc::new(StaticTools::named(
        &["shop__get_order"],
        "",
        json!({"type": "object", "properties": {"order_id": {"type": "strng"}}}),
    ));
    let model = scripted(vec![
        calls(&[("c1", "shop__get_order", r#"{"order_id":"A1029"}"#)], FinishReason::ToolCalls),
        text_response("I could not look it up."),
    ]);
    let w = worker_with(&s, model.clone(), tools.clone(), settings());
    w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await;
    assert!(tools.ran().is_empty());
    let results = model.requests();
    assert!(tool_messages(&results[1])[0].contains("does not compile"), "{:?}", tool_messages(&results[1]));
}

#[tokio::test]
async fn a_model_written_tool_name_is_recorded_only_in_a_safe_form() {
    let s = setup(&["shop__get_order"]).await;
    let model = scripted(vec![
        calls(&[("c1", "get_order\n2026-01-01 INFO forged line", "{}")], FinishReason::ToolCalls),
        text_response("Done."),
    ]);
    let w = worker_with(&s, model, fake_tools(), settings());
    w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await;
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.tools_used, vec!["get_order_2026-01-01_INFO_forged_line"]);
}

// ---------------------------------------------------------------- issue 18: a tool server down for a while

/// A gateway whose `tools/list` is unavailable (the gateway or a tool server down) for its first
/// `down_for` requests, then lists `inner`'s tools; calls go to `inner`.
struct DownAtFirst {
    inner: Arc<StaticTools>,
    down_for: std::sync::atomic::AtomicU32,
    lists: std::sync::atomic::AtomicU32,
}

impl DownAtFirst {
    fn new(inner: Arc<StaticTools>, down_for: u32) -> Self {
        Self { inner, down_for: down_for.into(), lists: 0.into() }
    }
}

#[async_trait::async_trait]
impl ToolGateway for DownAtFirst {
    async fn list_tools(
        &self,
        ctx: &swarm_core::ports::ToolContext,
    ) -> Result<Vec<swarm_core::ports::ToolSpec>, ToolError> {
        use std::sync::atomic::Ordering;
        self.lists.fetch_add(1, Ordering::SeqCst);
        if self.down_for.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(ToolError::Unavailable("HTTP 503 tool server down".into()));
        }
        self.inner.list_tools(ctx).await
    }

    async fn call_tool(
        &self,
        ctx: &swarm_core::ports::ToolContext,
        name: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> Result<swarm_core::ports::ToolOutput, ToolError> {
        self.inner.call_tool(ctx, name, arguments, timeout).await
    }
}

/// The table's values at 1/100: a tools/list is asked again after 20 ms, a round needs 50 ms.
fn fast_settings() -> WorkerSettings {
    WorkerSettings::from_timings(&swarm_core::timings::Timings::standard().scaled(0.01))
}

#[tokio::test]
async fn a_tool_list_unavailable_for_a_while_is_asked_again_and_the_subtask_succeeds() {
    let s = setup(&["shop__get_order"]).await;
    let model = scripted(vec![
        calls(&[("call_a", "shop__get_order", r#"{"order_id":"A1029"}"#)], FinishReason::ToolCalls),
        text_response("Order A1029 is paid."),
    ]);
    let tools = Arc::new(DownAtFirst::new(fake_tools(), 3));
    let w = worker_with(&s, model, tools.clone(), fast_settings());
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline()).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Succeeded), "a down window costs the wait, not the subtask");
    assert_eq!(
        tools.lists.load(std::sync::atomic::Ordering::SeqCst),
        4,
        "three refused lists, then the one that answered"
    );
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.status, SubtaskStatus::Succeeded);
}

#[tokio::test]
async fn a_tool_list_still_unavailable_when_no_round_fits_fails_the_subtask_as_tools_unavailable_before_its_deadline() {
    let s = setup(&["shop__get_order"]).await;
    let model = scripted(vec![text_response("never asked")]);
    let tools = Arc::new(DownAtFirst::new(fake_tools(), u32::MAX));
    let w = worker_with(&s, model.clone(), tools.clone(), fast_settings());
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_millis(600);
    let outcome = w.handle(TaskMessage::run(&s.id, &"w01".into()), deadline).await;
    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Failed));
    // It stops asking once a round no longer fits; the margin is for recording the failure on a busy machine.
    assert!(tokio::time::Instant::now() < deadline + Duration::from_millis(500), "it gave up by its deadline");
    assert!(tools.lists.load(std::sync::atomic::Ordering::SeqCst) >= 2, "it asked again while a round still fitted");
    assert!(model.requests().is_empty(), "no round ran without the subtask's tools");
    let rec = s.store.get_subtask(&s.id, &"w01".into()).await.unwrap().unwrap();
    assert!(
        matches!(rec.result, Some(SubtaskResult::Failed { kind: FailureKind::ToolsUnavailable, .. })),
        "{:?}",
        rec.result
    );
}
