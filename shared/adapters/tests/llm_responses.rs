//! The HTTP chat client against every case of `tests/fixtures/llm-responses.jsonl` (served by the mock LLM), plus request shape, transport failures and the in-flight cap.

use std::time::Duration;

use anyhow::{Context, Result};
use mock_llm::{Faults, Latency, MockConfig, MockHandle, MockLlm, ScriptedResponse};
use serde_json::{Value, json};
use swarm_adapters::llm::config::{LlmEndpoint, SecretString};
use swarm_adapters::llm::{HttpChatModel, OutputLimitField, OutputTokens, Profile, ToolHistory};
use swarm_core::domain::Usage;
use swarm_core::llm::pricing::{ModelPrice, PriceTable};
use swarm_core::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, Rejection, ToolCall,
    ToolChoice, ToolSpec,
};

const CASES: &str = swarm_testing::fixtures::LLM_RESPONSES_JSONL;

fn case(name: &str) -> Result<ScriptedResponse> {
    mock_llm::load_cases(CASES)?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, r)| r)
        .with_context(|| format!("no case {name}"))
}

fn endpoint(mock: &MockHandle, send_reasoning: bool) -> LlmEndpoint {
    let mut e = LlmEndpoint::new(mock.base_url(), Some(SecretString::from("sk-test-0123456789")), "test-model");
    e.profile.send_reasoning = send_reasoning;
    e
}

/// A client for `mock` with `profile` changed by `change`.
fn model_with(mock: &MockHandle, change: impl FnOnce(&mut Profile)) -> Result<HttpChatModel> {
    let mut e = endpoint(mock, true);
    change(&mut e.profile);
    Ok(HttpChatModel::new(&e, Duration::from_secs(10), 8, PriceTable::default())?)
}

/// A plain final answer.
fn final_answer(text: &str) -> ScriptedResponse {
    ScriptedResponse::json(
        200,
        &json!({"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10}}),
    )
}

/// `work_request()` after one round: an assistant tool-call message (with `reasoning`) and its result.
fn after_one_round(reasoning: Option<&str>) -> ChatRequest {
    let mut r = work_request();
    r.messages.push(ChatMessage::Assistant {
        content: None,
        tool_calls: vec![ToolCall {
            id: "functions.get_order:0".into(),
            name: "get_order".into(),
            arguments: r#"{"order_id":"A1029"}"#.into(),
        }],
        reasoning_content: reasoning.map(str::to_owned),
    });
    r.messages.push(ChatMessage::Tool {
        tool_call_id: "functions.get_order:0".into(),
        content: r#"{"order_id":"A1029","status":"paid"}"#.into(),
    });
    r
}

fn roles(body: &Value) -> Vec<&str> {
    body["messages"].as_array().map(|m| m.iter().filter_map(|x| x["role"].as_str()).collect()).unwrap_or_default()
}

fn model(mock: &MockHandle) -> Result<HttpChatModel> {
    Ok(HttpChatModel::new(&endpoint(mock, false), Duration::from_secs(10), 8, PriceTable::default())?)
}

fn tools() -> Vec<ToolSpec> {
    ["get_order", "check_coupon", "track_shipment"]
        .into_iter()
        .map(|n| ToolSpec {
            name: n.into(),
            description: format!("{n} tool"),
            input_schema: json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
            side_effecting: false,
        })
        .collect()
}

fn work_request() -> ChatRequest {
    ChatRequest {
        purpose: Purpose::Work,
        messages: vec![
            ChatMessage::System { content: "You are a worker".into() },
            ChatMessage::User { content: "Subtask w01: where is order A1029?".into() },
        ],
        tools: tools(),
        max_tokens: Some(512),
        tool_choice: Default::default(),
    }
}

/// Serves `responses` in order and returns the mock with a client for it.
async fn serve(responses: Vec<ScriptedResponse>) -> Result<(MockHandle, HttpChatModel)> {
    let (_, mock) = MockLlm::start(MockConfig::scripted(responses)).await?;
    let m = model(&mock)?;
    Ok((mock, m))
}

async fn call_case(name: &str) -> Result<(Result<ChatResponse, LlmError>, MockHandle)> {
    let (mock, m) = serve(vec![case(name)?]).await?;
    Ok((m.complete(&work_request()).await, mock))
}

fn calls(r: &ChatResponse) -> Vec<(&str, &str, &str)> {
    r.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect()
}

fn usage(p: Option<u64>, c: Option<u64>, cached: Option<u64>) -> Usage {
    Usage { prompt_tokens: p, completion_tokens: c, cached_tokens: cached, cost_usd: None }
}

// ---------------------------------------------------------------- one test per case

#[tokio::test]
async fn openai_parallel_tool_calls_come_back_in_order_with_ids_verbatim_and_priced() -> Result<()> {
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![case("openai-parallel-tool-calls")?])).await?;
    let mut prices = PriceTable::default();
    prices.insert("test-model", ModelPrice { input: 1.0, cached_input: None, output: 2.0 });
    let m = HttpChatModel::new(&endpoint(&mock, false), Duration::from_secs(10), 8, prices)?;
    let r = m.complete(&work_request()).await?;
    assert_eq!(
        calls(&r),
        vec![("call_a1", "get_order", r#"{"order_id":"A1029"}"#), ("call_b2", "check_coupon", r#"{"code":"SAVE20"}"#),]
    );
    assert_eq!(r.content, None);
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(r.model, "m");
    assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens), (Some(120), Some(30), None));
    // 120 input tokens at 1 USD/1M + 30 output tokens at 2 USD/1M.
    let cost = r.usage.cost_usd.context("cost")?;
    assert!((cost - 180e-6).abs() < 1e-12, "{cost}");
    Ok(())
}

#[tokio::test]
async fn kimi_ids_with_dots_and_colons_are_kept_and_echoed_back_as_tool_call_ids() -> Result<()> {
    let final_answer = ScriptedResponse::json(
        200,
        &json!({"choices": [{"message": {"content": "A1031 is in transit."}, "finish_reason": "stop"}]}),
    );
    let (mock, m) = serve(vec![case("kimi-style-ids-empty-content")?, final_answer]).await?;
    let mut request = work_request();
    let r = m.complete(&request).await?;
    assert_eq!(
        calls(&r),
        vec![
            ("functions.get_order:0", "get_order", r#"{"order_id": "A1031"}"#),
            ("functions.track_shipment:1", "track_shipment", r#"{"order_id": "A1031"}"#),
        ]
    );
    assert_eq!(r.content, None, "empty content is no text");
    assert_eq!(r.usage, usage(Some(88), Some(40), Some(64)));

    request.messages.push(ChatMessage::Assistant {
        content: r.content.clone(),
        tool_calls: r.tool_calls.clone(),
        reasoning_content: None,
    });
    for c in &r.tool_calls {
        request
            .messages
            .push(ChatMessage::Tool { tool_call_id: c.id.clone(), content: "{\"status\":\"in transit\"}".into() });
    }
    let second = m.complete(&request).await?;
    assert_eq!(second.content.as_deref(), Some("A1031 is in transit."));
    let sent = &mock.bodies()[1]["messages"];
    assert_eq!(sent[2]["tool_calls"][0]["id"], "functions.get_order:0");
    assert_eq!(sent[2]["tool_calls"][1]["function"]["name"], "track_shipment");
    assert_eq!(sent[3]["tool_call_id"], "functions.get_order:0");
    assert_eq!(sent[4]["tool_call_id"], "functions.track_shipment:1");
    Ok(())
}

#[tokio::test]
async fn deepseek_reasoning_is_kept_aside_and_sent_back_only_where_the_endpoint_requires_it() -> Result<()> {
    let (r, _mock) = call_case("deepseek-reasoning-cache-usage").await?;
    let r = r?;
    assert_eq!(calls(&r), vec![("call_0_1f", "get_order", r#"{"order_id":"A1001"}"#)]);
    assert_eq!(r.content, None, "reasoning is never the customer's text");
    assert_eq!(r.reasoning_content.as_deref(), Some("The user wants the order status, I should call get_order."));
    assert_eq!(r.usage, usage(Some(300), Some(20), Some(256)));

    let mut next = work_request();
    next.messages.push(ChatMessage::Assistant {
        content: None,
        tool_calls: r.tool_calls.clone(),
        reasoning_content: r.reasoning_content.clone(),
    });
    next.messages.push(ChatMessage::Tool { tool_call_id: "call_0_1f".into(), content: "{}".into() });
    for (send_reasoning, expected) in
        [(true, json!("The user wants the order status, I should call get_order.")), (false, Value::Null)]
    {
        let (_, mock) = MockLlm::start(MockConfig::default()).await?;
        let m =
            HttpChatModel::new(&endpoint(&mock, send_reasoning), Duration::from_secs(10), 4, PriceTable::default())?;
        m.complete(&next).await?;
        let assistant = &mock.bodies()[0]["messages"][2];
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(
            assistant.get("reasoning_content").cloned().unwrap_or(Value::Null),
            expected,
            "send_reasoning={send_reasoning}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn vllm_extra_fields_and_null_content_are_tolerated() -> Result<()> {
    let (r, _mock) = call_case("vllm-extra-fields-null-content").await?;
    let r = r?;
    assert_eq!(calls(&r), vec![("chatcmpl-tool-9d1", "query_inventory", r#"{"sku": "SKU-1016"}"#)]);
    assert_eq!((r.content, r.reasoning_content), (None, None));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    Ok(())
}

#[tokio::test]
async fn minimal_server_answer_gives_text_and_unknown_usage_not_zero() -> Result<()> {
    let (r, _mock) = call_case("minimal-server-missing-optional-fields").await?;
    let r = r?;
    assert_eq!(r.content.as_deref(), Some("Your order A1013 is held at customs in Hangzhou."));
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.usage, Usage::default());
    assert!(r.usage.is_empty());
    assert_eq!(r.model, "test-model", "the configured model when none is reported");
    Ok(())
}

#[tokio::test]
async fn plan_wrapped_in_prose_and_fence_arrives_verbatim_and_yields_two_subtasks() -> Result<()> {
    let (r, _mock) = call_case("plan-wrapped-in-prose-and-fence").await?;
    let text = r?.content.context("text")?;
    assert!(text.starts_with("Sure! Here is the plan:\n```json\n"));
    let plan = swarm_core::plan::parse_plan(&text)?;
    let ids: Vec<(&str, &str)> = plan.iter().map(|s| (s.id.as_str(), s.instruction.as_str())).collect();
    assert_eq!(ids, vec![("w01", "Get status of order A1029"), ("w02", "Check coupon SAVE20")]);
    Ok(())
}

#[tokio::test]
async fn plan_with_trailing_commas_yields_one_subtask() -> Result<()> {
    let (r, _mock) = call_case("plan-trailing-commas").await?;
    let plan = swarm_core::plan::parse_plan(&r?.content.context("text")?)?;
    assert_eq!(plan.len(), 1);
    assert_eq!((plan[0].id.as_str(), plan[0].tools.clone()), ("w01", vec!["track_shipment".to_owned()]));
    Ok(())
}

#[tokio::test]
async fn call_cut_off_by_length_reports_length_and_keeps_the_broken_arguments_raw() -> Result<()> {
    // Cut twice: once at the configured limit, once more at the larger limit of the one retry.
    let (mock, m) = serve(vec![case("truncated-by-length")?, case("truncated-by-length")?]).await?;
    let r = m.complete(&work_request()).await?;
    assert_eq!(mock.stats().requests, 2);
    assert_eq!(r.usage, usage(Some(240), Some(60), None));
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert_eq!(calls(&r), vec![("call_t", "refund", r#"{"order_id": "A10"#)]);
    // Nothing is guessed: the arguments are not valid JSON, so the worker must not run the tool.
    assert!(serde_json::from_str::<Value>(&r.tool_calls[0].arguments).is_err());
    Ok(())
}

#[tokio::test]
async fn rate_limit_429_is_classified_with_its_retry_after() -> Result<()> {
    let (r, _mock) = call_case("error-429-retry-after").await?;
    match r {
        Err(LlmError::RateLimited { status, retry_after, message }) => {
            assert_eq!((status, retry_after), (429, Some(Duration::from_secs(3))));
            assert_eq!(message, "Your account reached its TPM rate limit, please retry later");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn flat_error_object_about_context_length_is_context_length_with_status_400() -> Result<()> {
    let (r, _mock) = call_case("error-flat-object").await?;
    match r {
        Err(LlmError::ContextLength { status, message }) => {
            assert_eq!(status, 400);
            assert!(message.starts_with("This model's maximum context length is 32768 tokens"), "{message}");
        }
        other => panic!("expected ContextLength, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn balance_error_402_is_permanent_and_never_retried() -> Result<()> {
    let (mock, m) = serve(vec![case("error-402-balance")?, case("error-402-balance")?]).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let r = complete_with_retry(&m, &work_request(), &LlmRetryPolicy::default(), deadline).await;
    match r {
        Err(CallError::Failed(LlmError::Permanent { status, message })) => {
            assert_eq!((status, message.as_str()), (402, "Insufficient Balance"));
        }
        other => panic!("expected a permanent failure, got {other:?}"),
    }
    assert_eq!(mock.stats().requests, 1, "no retry of a permanent failure");
    Ok(())
}

#[tokio::test]
async fn invalid_key_401_is_permanent_with_the_provider_message() -> Result<()> {
    let (r, _mock) = call_case("error-401-key").await?;
    let e = r.err().context("expected an error")?;
    assert!(matches!(&e, LlmError::Permanent { status: 401, message } if message == "Invalid Authentication"), "{e:?}");
    assert!(!e.is_transient());
    Ok(())
}

#[tokio::test]
async fn html_503_is_transient_and_not_parsed_as_json() -> Result<()> {
    let (r, _mock) = call_case("error-503-html").await?;
    match r {
        Err(LlmError::Transient { status, message }) => {
            assert_eq!(status, Some(503));
            assert_eq!(message, "non-JSON (text/html) body: <html><body>upstream connect error</body></html>");
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    Ok(())
}

#[test]
fn every_fixture_case_has_a_test_here() -> Result<()> {
    let names: Vec<String> = mock_llm::load_cases(CASES)?.into_iter().map(|(n, _)| n).collect();
    let this_file = include_str!("llm_responses.rs");
    for n in &names {
        assert!(this_file.contains(&format!("\"{n}\"")), "case {n} has no test");
    }
    assert_eq!(names.len(), 21);
    Ok(())
}

#[tokio::test]
async fn repeated_and_missing_tool_call_ids_arrive_as_sent_and_are_made_unique_before_anything_runs() -> Result<()> {
    let (r, _mock) = call_case("repeated-tool-call-ids").await?;
    let mut r = r?;
    assert_eq!(
        calls(&r).iter().map(|(id, name, _)| (*id, *name)).collect::<Vec<_>>(),
        vec![("call_0", "get_order"), ("call_0", "track_shipment"), ("call_2", "check_coupon")],
        "the client keeps what the provider sent (a missing id made up by position)"
    );
    // What the worker does with them before any call runs.
    let replaced = swarm_core::llm::transcript::unique_tool_call_ids(&mut r.tool_calls, 1);
    assert_eq!(replaced, 1);
    let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_0", "call_r1_1", "call_2"]);
    Ok(())
}

// ---------------------------------------------------------------- issue 11: thinking models, limits, tool history

#[tokio::test]
async fn a_400_naming_missing_reasoning_is_classified_and_the_request_resent_once_with_it() -> Result<()> {
    let refused = case("kimi-thinking-400-reasoning-missing")?;
    let (_, mock) =
        MockLlm::start(MockConfig::scripted(vec![refused.clone(), final_answer("A1029 is paid."), final_answer("ok")]))
            .await?;
    // Reasoning sending turned off, and this message kept none: the provider must ask for it.
    let m = model_with(&mock, |p| p.send_reasoning = false)?;
    let r = m.complete(&after_one_round(None)).await?;
    assert_eq!(r.content.as_deref(), Some("A1029 is paid."));
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 2, "sent once more, not more");
    assert!(bodies[0]["messages"][2].get("reasoning_content").is_none());
    assert_eq!(bodies[1]["messages"][2]["reasoning_content"], "", "present, empty when none was kept");
    assert_eq!(bodies[1]["messages"][2]["tool_calls"], bodies[0]["messages"][2]["tool_calls"]);
    // Learned: the next request carries it from the start (the kept text when there is one).
    m.complete(&after_one_round(Some("I looked up A1029."))).await?;
    assert_eq!(mock.bodies()[2]["messages"][2]["reasoning_content"], "I looked up A1029.");

    // Classified as a refused shape; with no tool-call message to fix, it is not resent unchanged.
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![refused.clone(), refused])).await?;
    let e = model(&mock)?.complete(&work_request()).await.err().context("must fail")?;
    assert!(matches!(e, LlmError::Rejected { status: 400, kind: Rejection::ReasoningMissing, .. }), "{e:?}");
    assert!(!e.is_transient());
    assert_eq!(mock.stats().requests, 1);
    Ok(())
}

#[tokio::test]
async fn empty_reasoning_the_provider_sent_is_kept_and_sent_back() -> Result<()> {
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![
        case("kimi-thinking-empty-reasoning-tool-call")?,
        final_answer("paid"),
    ]))
    .await?;
    let m = model_with(&mock, |_| {})?;
    let r = m.complete(&work_request()).await?;
    assert_eq!(r.reasoning_content.as_deref(), Some(""), "the field was sent, so it is kept");
    assert_eq!(calls(&r), vec![("functions.get_order:0", "get_order", r#"{"order_id": "A1029"}"#)]);
    let mut next = work_request();
    next.messages.push(ChatMessage::Assistant {
        content: r.content.clone(),
        tool_calls: r.tool_calls.clone(),
        reasoning_content: r.reasoning_content.clone(),
    });
    next.messages.push(ChatMessage::Tool { tool_call_id: "functions.get_order:0".into(), content: "{}".into() });
    m.complete(&next).await?;
    assert_eq!(mock.bodies()[1]["messages"][2]["reasoning_content"], "");
    Ok(())
}

#[tokio::test]
async fn a_length_cut_with_only_reasoning_is_asked_once_more_with_a_larger_limit() -> Result<()> {
    let cut = case("length-cut-only-reasoning")?;
    let (mock, m) = serve(vec![cut.clone(), final_answer("Order A1029 is paid.")]).await?;
    let r = m.complete(&work_request()).await?;
    assert_eq!((r.content.as_deref(), &r.finish_reason), (Some("Order A1029 is paid."), &FinishReason::Stop));
    let bodies = mock.bodies();
    assert_eq!((bodies[0]["max_tokens"].as_u64(), bodies[1]["max_tokens"].as_u64()), (Some(512), Some(1024)));
    assert_eq!(bodies[0]["messages"], bodies[1]["messages"]);
    assert_eq!(r.usage, usage(Some(950), Some(2058), None), "both attempts are counted");

    // A larger limit the model refuses: the cut answer stands, for the caller to handle.
    let too_large = ScriptedResponse::json(
        400,
        &json!({"error": {"message": "max_tokens is too large: 1024. This model supports at most 512 completion tokens."}}),
    );
    let (mock, m) = serve(vec![cut.clone(), too_large]).await?;
    let r = m.complete(&work_request()).await?;
    assert_eq!((r.content, r.finish_reason), (None, FinishReason::Length));
    assert_eq!(mock.stats().requests, 2);

    // A provider that takes no limit field: nothing to raise, no second request.
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![cut.clone()])).await?;
    let m = model_with(&mock, |p| p.output_limit_field = OutputLimitField::None)?;
    assert_eq!(m.complete(&work_request()).await?.finish_reason, FinishReason::Length);
    assert_eq!(mock.stats().requests, 1);
    assert!(mock.bodies()[0].get("max_tokens").is_none());

    // `unset`: no limit on the first request; the retry sets one.
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![cut, final_answer("ok")])).await?;
    let m = model_with(&mock, |p| p.max_output_tokens = OutputTokens::Unset)?;
    m.complete(&work_request()).await?;
    let bodies = mock.bodies();
    assert!(bodies[0].get("max_tokens").is_none());
    assert_eq!(bodies[1]["max_tokens"], 32_768);
    Ok(())
}

#[tokio::test]
async fn the_last_round_keeps_the_tools_with_tool_choice_none_or_flattens_per_preset() -> Result<()> {
    let (_, mock) = MockLlm::start(MockConfig::scripted(vec![final_answer("a"), final_answer("b")])).await?;
    let mut last = after_one_round(Some("r"));
    last.tool_choice = ToolChoice::None;
    model(&mock)?.complete(&last).await?;
    let b = &mock.bodies()[0];
    assert_eq!(b["tool_choice"], "none");
    assert_eq!(b["tools"].as_array().map(Vec::len), Some(3), "tool history always travels with the tools");
    assert_eq!(roles(b), ["system", "user", "assistant", "tool"]);

    let flat = model_with(&mock, |p| p.tool_history = ToolHistory::Flatten)?;
    flat.complete(&last).await?;
    let b = &mock.bodies()[1];
    assert!(b.get("tools").is_none() && b.get("tool_choice").is_none(), "{b}");
    assert_eq!(roles(b), ["system", "user", "assistant", "user"]);
    assert!(b["messages"][2].get("tool_calls").is_none());
    let results = b["messages"][3]["content"].as_str().unwrap_or("");
    assert!(
        results.contains(r#"get_order (functions.get_order:0): {"order_id":"A1029","status":"paid"}"#),
        "{results}"
    );
    Ok(())
}

#[tokio::test]
async fn a_bedrock_400_on_tool_history_without_tools_is_resent_flattened_and_remembered() -> Result<()> {
    let refused = case("bedrock-400-tool-history-without-tools")?;
    let (_, mock) =
        MockLlm::start(MockConfig::scripted(vec![refused, final_answer("A1029 is paid."), final_answer("ok")])).await?;
    let m = model(&mock)?;
    let mut last = after_one_round(None);
    last.tool_choice = ToolChoice::None;
    assert_eq!(m.complete(&last).await?.content.as_deref(), Some("A1029 is paid."));
    let bodies = mock.bodies();
    assert_eq!(bodies[0]["tool_choice"], "none");
    assert_eq!(roles(&bodies[1]), ["system", "user", "assistant", "user"], "flattened");
    assert!(bodies[1].get("tools").is_none());
    // The gateway drops tools next to `tool_choice: none`: such requests go flattened from now on.
    m.complete(&last).await?;
    assert_eq!(mock.stats().requests, 3);
    assert_eq!(roles(&mock.bodies()[2]), ["system", "user", "assistant", "user"]);
    // A request with tool history but no tools to offer is flattened before it is sent.
    let mut no_tools = after_one_round(None);
    no_tools.tools.clear();
    let body: Value = serde_json::from_slice(&m.request_body(&no_tools)?)?;
    assert_eq!(roles(&body), ["system", "user", "assistant", "user"]);
    Ok(())
}

#[tokio::test]
async fn a_refused_max_tokens_is_resent_as_max_completion_tokens_and_remembered() -> Result<()> {
    let (mock, m) =
        serve(vec![case("openai-400-max-tokens-unsupported")?, final_answer("a"), final_answer("b")]).await?;
    m.complete(&work_request()).await?;
    m.complete(&work_request()).await?;
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 3);
    assert_eq!(bodies[0]["max_tokens"], 512);
    for b in &bodies[1..] {
        assert_eq!((b.get("max_tokens"), &b["max_completion_tokens"]), (None, &json!(512)));
    }
    Ok(())
}

#[tokio::test]
async fn context_length_after_a_large_round_and_an_invalid_schema_are_not_resent() -> Result<()> {
    let (r, mock) = call_case("context-length-after-large-round").await?;
    assert!(matches!(r, Err(LlmError::ContextLength { status: 400, .. })), "{r:?}");
    assert_eq!(mock.stats().requests, 1);
    let (r, mock) = call_case("openai-400-invalid-schema-untyped-property").await?;
    match r {
        Err(LlmError::Permanent { status: 400, message }) => assert!(message.contains("'type' key"), "{message}"),
        other => panic!("expected a permanent 400, got {other:?}"),
    }
    assert_eq!(mock.stats().requests, 1);
    Ok(())
}

// ---------------------------------------------------------------- request shape

#[tokio::test]
async fn work_requests_carry_tools_and_openai_tool_calls_while_others_carry_no_tools() -> Result<()> {
    let (_, mock) = MockLlm::start(MockConfig::default()).await?;
    let m = model(&mock)?;
    let mut work = work_request();
    work.messages.push(ChatMessage::Assistant {
        content: Some(String::new()),
        tool_calls: vec![ToolCall {
            id: "functions.get_order:0".into(),
            name: "get_order".into(),
            arguments: String::new(),
        }],
        reasoning_content: Some("thinking".into()),
    });
    work.messages.push(ChatMessage::Tool {
        tool_call_id: "functions.get_order:0".into(),
        content: "{\"status\":\"shipped\"}".into(),
    });
    m.complete(&work).await?;
    let plan = ChatRequest { purpose: Purpose::Plan, max_tokens: None, ..work_request() };
    m.complete(&plan).await?;

    let bodies = mock.bodies();
    let w = &bodies[0];
    assert_eq!(w["model"], "test-model");
    assert_eq!(w["stream"], false);
    assert_eq!(w["max_tokens"], 512);
    assert_eq!(
        w["tools"][0],
        json!({"type": "function", "function": {"name": "get_order", "description": "get_order tool",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}})
    );
    assert_eq!(
        w["messages"][2],
        json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "functions.get_order:0", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}]})
    );
    assert_eq!(
        w["messages"][3],
        json!({"role": "tool", "tool_call_id": "functions.get_order:0", "content": "{\"status\":\"shipped\"}"})
    );
    let p = &bodies[1];
    assert!(p.get("tools").is_none(), "the plan prompt lists the tools itself");
    assert!(p.get("max_tokens").is_none());
    assert_eq!(p["messages"][0], json!({"role": "system", "content": "You are a worker"}));
    Ok(())
}

#[tokio::test]
async fn unknown_finish_reason_is_kept_with_text_and_transient_without_anything() -> Result<()> {
    let with_text = ScriptedResponse::json(
        200,
        &json!({"choices": [{"message": {"content": "ok"}, "finish_reason": "insufficient_system_resource"}]}),
    );
    let empty = ScriptedResponse::json(
        200,
        &json!({"choices": [{"message": {"content": ""}, "finish_reason": "insufficient_system_resource"}]}),
    );
    let (_mock, m) = serve(vec![with_text, empty]).await?;
    let r = m.complete(&work_request()).await?;
    assert_eq!(r.finish_reason, FinishReason::Other("insufficient_system_resource".into()));
    assert_eq!(r.content.as_deref(), Some("ok"));
    let e = m.complete(&work_request()).await.err().context("expected an error")?;
    assert!(matches!(e, LlmError::Transient { status: Some(200), .. }), "{e:?}");
    Ok(())
}

#[tokio::test]
async fn malformed_and_choiceless_bodies_are_transient() -> Result<()> {
    let truncated =
        ScriptedResponse { status: 200, headers: vec![], body: r#"{"choices":[{"message":{"content":"Your or"#.into() };
    let no_choices = ScriptedResponse::json(200, &json!({"id": "x", "choices": []}));
    let (_mock, m) = serve(vec![truncated, no_choices]).await?;
    for _ in 0..2 {
        let e = m.complete(&work_request()).await.err().context("expected an error")?;
        assert!(matches!(e, LlmError::Transient { status: Some(200), .. }), "{e:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_refused_connection_is_transient() -> Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    drop(listener);
    let ep = LlmEndpoint::new(format!("http://{addr}/v1"), None, "m");
    let m = HttpChatModel::new(&ep, Duration::from_secs(5), 4, PriceTable::default())?;
    let e = m.complete(&work_request()).await.err().context("expected an error")?;
    assert!(
        matches!(&e, LlmError::Transient { status: None, message } if message.starts_with("connection failed")),
        "{e:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_hanging_server_times_out_as_transient() -> Result<()> {
    let config = MockConfig {
        faults: Faults { hang: 1.0, hang_for: Duration::from_secs(30), ..Faults::default() },
        ..MockConfig::default()
    };
    let (_, mock) = MockLlm::start(config).await?;
    let m = HttpChatModel::new(&endpoint(&mock, false), Duration::from_millis(300), 4, PriceTable::default())?;
    let e = m.complete(&work_request()).await.err().context("expected an error")?;
    assert!(
        matches!(&e, LlmError::Transient { status: None, message } if message.starts_with("no answer within 300ms")),
        "{e:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_calls_than_the_cap_reach_the_provider_at_once() -> Result<()> {
    let config = MockConfig { latency: Latency::Fixed(Duration::from_millis(100)), ..MockConfig::default() };
    let (_, mock) = MockLlm::start(config).await?;
    let m = HttpChatModel::new(&endpoint(&mock, false), Duration::from_secs(10), 3, PriceTable::default())?;
    let request = work_request();
    let results = futures::future::join_all((0..12).map(|_| m.complete(&request))).await;
    assert!(results.iter().all(Result::is_ok));
    let stats = mock.stats();
    assert_eq!(stats.requests, 12);
    assert_eq!(stats.max_concurrent, 3);
    Ok(())
}

#[tokio::test]
async fn a_rate_limit_halves_the_in_flight_cap() -> Result<()> {
    let config = MockConfig { faults: Faults { rate_limit: 1.0, ..Faults::default() }, ..MockConfig::default() };
    let (_, mock) = MockLlm::start(config).await?;
    let m = HttpChatModel::new(&endpoint(&mock, false), Duration::from_secs(10), 8, PriceTable::default())?;
    assert_eq!(m.in_flight_limit(), 8);
    let e = m.complete(&work_request()).await.err().context("expected an error")?;
    assert!(
        matches!(e, LlmError::RateLimited { status: 429, retry_after: Some(d), .. } if d == Duration::from_secs(1))
    );
    assert_eq!(m.in_flight_limit(), 4);
    Ok(())
}
