//! Issue 11's kinds through the worker loop against the mock LLM on the wire: a Kimi-style thinking model (reasoning every turn, 400 without it), a `length` cut with only reasoning, a Bedrock-style 400 on tool history without tools, a context-length error after a large round, resource-only MCP results and a schema without types.
//!
//! Each test asserts the subtask's facts (its status, which tool results
//! reached its answer) and what was sent on the wire (the mock LLM records
//! every request body).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use mock_llm::{AgentConfig, AgentSubtask, MockConfig, MockHandle, MockLlm, Mode, Quirks};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_adapters::llm::{LlmConfig, build_models};
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::domain::{Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskResult, TaskMessage, Usage};
use swarm_core::llm::Models;
use swarm_core::ports::{ConversationRecords, SubtaskStore, TaskQueue, ToolGateway, ToolOutput};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;
use swarm_local::{LocalStack, StackOptions};
use swarm_testing::StaticTools;
use swarm_tests::normalise;
use worker::{Outcome, Worker, WorkerSettings};

// ---------------------------------------------------------------- helpers

/// Starts the mock LLM as an agent with these subtasks and quirks.
async fn start_mock(subtasks: Vec<AgentSubtask>, quirks: Quirks) -> Result<MockHandle> {
    let agent = AgentConfig { subtasks, reply_from_results: true, quirks, ..AgentConfig::default() };
    let (_, mock) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await?;
    Ok(mock)
}

/// The models a function builds from these `LLM_*` variables, pointed at `mock`.
fn models(mock: &MockHandle, vars: &[(&str, &str)]) -> Result<Models> {
    let base = mock.base_url();
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let llm = LlmConfig::from_lookup(|k| match k {
        "LLM_BASE_URL" => Some(base.clone()),
        other => vars.get(other).cloned(),
    })?;
    Ok(build_models(&llm)?)
}

/// Three subtasks over the demo shop, each with the facts its answer must carry.
fn shop_subtasks() -> (Vec<AgentSubtask>, Vec<[&'static str; 2]>) {
    (
        vec![
            AgentSubtask::new("Get the status of order A1029", &[("shop__get_order", json!({"order_id": "A1029"}))]),
            AgentSubtask::new("Check coupon SAVE20", &[("shop__check_coupon", json!({"code": "SAVE20"}))]),
            AgentSubtask::new("Is SKU-1002 in stock?", &[("shop__get_product", json!({"sku": "SKU-1002"}))]),
        ],
        vec![["A1029", "3105"], ["SAVE20", "2026-12-31"], ["SKU-1002", "2026-12-12"]],
    )
}

/// Runs one conversation through the local stack and checks every subtask's facts: each
/// succeeded, its answer holds its facts, and so does the reply.
/// `max_rounds` overrides the table's rounds per subtask.
async fn converse(models: Models, max_rounds: Option<u32>) -> Result<Vec<SubtaskRecord>> {
    let mut timings = Timings::standard().clone();
    timings.worker.min_round = Duration::from_secs(1);
    if let Some(rounds) = max_rounds {
        timings.worker.max_rounds = rounds;
    }
    let stack = LocalStack::start(StackOptions { models: Some(models), timings, ..StackOptions::default() }).await?;
    let (status, body) = stack
        .post_conversation("Where is A1029, can I use SAVE20, and is the Blue Linen Shirt M back?", "C104", None)
        .await?;
    anyhow::ensure!(status == 202, "{body}");
    let id = body["conversation_id"].as_str().context("conversation id")?.to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await?;
    let records = stack.store().list_subtasks(&ConversationId::parse(&id).context("bad id")?).await?;
    stack.shutdown().await;
    assert_eq!(view.status, swarm_core::domain::ConversationStatus::Done);
    let (_, facts) = shop_subtasks();
    assert_eq!(records.len(), facts.len());
    let reply = normalise(view.reply.as_deref().unwrap_or(""));
    for (rec, facts) in records.iter().zip(&facts) {
        let Some(SubtaskResult::Succeeded { text, .. }) = &rec.result else {
            panic!("{} did not succeed: {:?}", rec.subtask.id, rec.result)
        };
        for fact in facts {
            assert!(normalise(text).contains(&normalise(fact)), "{}: {fact} missing from {text}", rec.subtask.id);
            assert!(reply.contains(&normalise(fact)), "the reply misses {fact}: {reply}");
        }
    }
    Ok(records)
}

/// Work requests the mock received (their last user message opens with `Subtask `).
fn work_bodies(mock: &MockHandle) -> Vec<Value> {
    mock.bodies()
        .into_iter()
        .filter(|b| {
            b["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x["content"].as_str().is_some_and(|c| c.starts_with("Subtask "))))
        })
        .collect()
}

fn assistant_tool_calls(body: &Value) -> Vec<&Value> {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|x| x["role"] == "assistant" && x.get("tool_calls").is_some()).collect())
        .unwrap_or_default()
}

fn refusals(mock: &MockHandle) -> usize {
    mock.stats().arrivals.iter().filter(|a| a.kind == "quirk").count()
}

// ---------------------------------------------------------------- thinking models

/// Issue 11's "done when": the seed's own kind of model — Kimi K2.5 thinks on every turn and
/// answers 400 when an assistant tool-call message comes back without its reasoning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_with_a_kimi_style_thinking_model_completes_with_every_subtask_fact() -> Result<()> {
    let (subtasks, _) = shop_subtasks();
    let mock = start_mock(subtasks, Quirks::named("kimi-thinking").context("preset")?).await?;
    let models = models(&mock, &[("LLM_MODEL", "kimi-k2.5"), ("LLM_PRESET", "kimi")])?;
    converse(models, None).await?;

    assert_eq!(refusals(&mock), 0, "reasoning went back every time: no 400");
    let work = work_bodies(&mock);
    let rounds_after_tools: Vec<&Value> = work.iter().filter(|b| !assistant_tool_calls(b).is_empty()).collect();
    assert_eq!(rounds_after_tools.len(), 3, "one second round per subtask");
    for b in &rounds_after_tools {
        for m in assistant_tool_calls(b) {
            assert_eq!(m["reasoning_content"], "I need facts: I will call the tools.", "kept with its message");
        }
    }
    // The thinking model's budget leaves room for the answer: 2,048 for the answer + 16,384 for reasoning.
    assert!(work.iter().all(|b| b["max_tokens"] == 2_048 + 16_384), "{:?}", work[0]["max_tokens"]);
    Ok(())
}

/// The same model reached with reasoning sending off and no preset: the 400 is classified, the
/// request resent once with the reasoning, and the answer starved by reasoning is asked again
/// with a larger limit — the conversation still completes with every fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_preset_a_thinking_model_is_recovered_by_one_resend_and_one_larger_limit() -> Result<()> {
    let (subtasks, _) = shop_subtasks();
    let mock = start_mock(subtasks, Quirks::named("kimi-thinking").context("preset")?).await?;
    let models = models(&mock, &[("LLM_MODEL", "kimi-k2.5"), ("LLM_SEND_REASONING", "false")])?;
    converse(models, None).await?;

    let refused = refusals(&mock);
    assert!((1..=3).contains(&refused), "refused until the client learned: {refused}");
    let bodies = mock.bodies();
    // 3,000 tokens of reasoning do not fit 2,048: each such answer was asked once more with 4,096.
    let limits: Vec<u64> = bodies.iter().filter_map(|b| b["max_tokens"].as_u64()).collect();
    assert!(limits.contains(&2_048) && limits.contains(&4_096), "{limits:?}");
    assert!(limits.iter().all(|l| *l == 2_048 || *l == 4_096 || *l == 8_192), "{limits:?}");
    // Never the same request twice in a row.
    for pair in bodies.windows(2) {
        assert_ne!(pair[0], pair[1]);
    }
    Ok(())
}

// ---------------------------------------------------------------- tool history on the last round

/// Bedrock-style gateways refuse tool history without tool definitions, and drop the tools of
/// a `tool_choice: "none"` request. With two rounds the second is the forced last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_style_gateway_gets_tool_history_only_with_tools_or_flattened() -> Result<()> {
    let last_is_second = Some(2);

    // Its preset flattens the last round: no refusal at all.
    let (subtasks, _) = shop_subtasks();
    let mock_a = start_mock(subtasks, Quirks::named("bedrock").context("preset")?).await?;
    converse(models(&mock_a, &[("LLM_MODEL", "claude-sonnet"), ("LLM_PRESET", "bedrock")])?, last_is_second).await?;
    assert_eq!(refusals(&mock_a), 0);
    for b in work_bodies(&mock_a).iter().filter(|b| b["messages"].as_array().is_some_and(|m| m.len() > 3)) {
        assert!(b.get("tools").is_none() && assistant_tool_calls(b).is_empty(), "flattened: {b}");
    }

    // Without the preset: tools with `tool_choice: "none"`, refused once, resent flattened, learned.
    let (subtasks, _) = shop_subtasks();
    let mock_b = start_mock(subtasks, Quirks::named("bedrock").context("preset")?).await?;
    converse(models(&mock_b, &[("LLM_MODEL", "claude-sonnet")])?, last_is_second).await?;
    let refused = refusals(&mock_b);
    assert!((1..=3).contains(&refused), "{refused}");
    let last_rounds: Vec<Value> = work_bodies(&mock_b).into_iter().filter(|b| b["tool_choice"] == "none").collect();
    assert!(!last_rounds.is_empty());
    assert!(last_rounds.iter().all(|b| b["tools"].as_array().is_some_and(|t| !t.is_empty())), "tools kept with none");
    Ok(())
}

// ---------------------------------------------------------------- one subtask on the worker directly

struct Direct {
    store: Arc<InMemoryConversationStore>,
    id: ConversationId,
    worker: Worker,
}

/// One conversation with subtask `w01` (`tools`), and a worker over `models` and `gateway`.
async fn direct(
    tools: &[&str],
    models: Models,
    gateway: Arc<dyn ToolGateway>,
    settings: WorkerSettings,
) -> Result<Direct> {
    let store = Arc::new(InMemoryConversationStore::new());
    let conversation = Conversation::new("C104", "Tell me about my orders.", swarm_core::domain::now_ms(), 120);
    store.create_conversation(&conversation).await?;
    let subtask = Subtask {
        id: "w01".into(),
        instruction: "Look it up.".into(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        depends_on: vec![],
    };
    let rec = SubtaskRecord::new(&conversation, subtask, "support".into());
    anyhow::ensure!(store.start_run(&conversation.id, None, &[rec], &[], &Usage::default()).await?);
    let queue: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let worker = Worker::new(
        store.clone(),
        TaskQueues::new(queue),
        models.main,
        models.sub,
        gateway,
        WorkerSettings { min_round_time: Duration::from_millis(10), ..settings },
    );
    Ok(Direct { store, id: conversation.id, worker })
}

impl Direct {
    async fn run(&self) -> Result<SubtaskRecord> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let outcome = self.worker.handle(TaskMessage::run(&self.id, &"w01".into()), deadline).await;
        anyhow::ensure!(matches!(outcome, Outcome::Finished(_)), "{outcome:?}");
        self.store.get_subtask(&self.id, &"w01".into()).await?.context("subtask")
    }
}

fn answer(rec: &SubtaskRecord) -> &str {
    match &rec.result {
        Some(SubtaskResult::Succeeded { text, .. }) => text,
        other => panic!("not succeeded: {other:?}"),
    }
}

fn tool_contents(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|m| {
            m.iter().filter(|x| x["role"] == "tool").filter_map(|x| x["content"].as_str().map(str::to_owned)).collect()
        })
        .unwrap_or_default()
}

/// Five parallel lookups answering 8,000 Chinese characters each after their fact: about 40k tokens.
fn large_round() -> (AgentSubtask, Arc<StaticTools>) {
    let calls: Vec<(&str, Value)> =
        (1..=5).map(|i| ("shop__get_order", json!({"order_id": format!("A10{i:02}")}))).collect();
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    let tools = StaticTools::named(&["shop__get_order"], "Look up an order", schema).on_call("shop__get_order", |a| {
        let id = a["order_id"].as_str().unwrap_or("?").to_owned();
        Ok(ToolOutput {
            text: format!("订单 {id} 已付款。{}", "物流记录".repeat(2_000)),
            is_error: false,
            refused: false,
        })
    });
    (AgentSubtask::new("Look up five orders", &calls), Arc::new(tools))
}

#[tokio::test]
async fn a_context_length_error_after_a_large_round_shrinks_that_round_and_every_result_still_reaches_the_answer()
-> Result<()> {
    let (subtask, tools) = large_round();
    let mock = start_mock(vec![subtask], Quirks { context_tokens: Some(24_000), ..Quirks::default() }).await?;
    // A round budget above the context, so the round reaches the provider whole and is refused.
    let settings = WorkerSettings { round_budget_tokens: 60_000, ..WorkerSettings::default() };
    let d = direct(&["shop__get_order"], models(&mock, &[("LLM_MODEL", "m")])?, tools, settings).await?;
    let rec = d.run().await?;
    let text = answer(&rec);
    for i in 1..=5 {
        assert!(text.contains(&format!("订单 A10{i:02} 已付款")), "A10{i:02} missing from the answer");
    }
    let bodies = mock.bodies();
    let statuses: Vec<u16> = mock.stats().arrivals.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![200, 400, 200], "one refusal, then a shorter request");
    let (whole, shrunk) = (tool_contents(&bodies[1]), tool_contents(&bodies[2]));
    assert_ne!(whole, shrunk, "the same request is never resent");
    let chars = |v: &[String]| v.iter().map(|c| c.chars().count()).sum::<usize>();
    // Halved, the five notes aside.
    assert!(chars(&shrunk) <= chars(&whole) / 2 + 5 * 80, "{} -> {}", chars(&whole), chars(&shrunk));
    assert!(shrunk.iter().all(|c| c.contains("已付款") && c.contains("characters shown")));

    // With the default round budget the round is cut before it is sent: no refusal at all.
    let (subtask, tools) = large_round();
    let mock = start_mock(vec![subtask], Quirks { context_tokens: Some(24_000), ..Quirks::default() }).await?;
    let d =
        direct(&["shop__get_order"], models(&mock, &[("LLM_MODEL", "m")])?, tools, WorkerSettings::default()).await?;
    let rec = d.run().await?;
    assert!(answer(&rec).contains("订单 A1005 已付款"));
    assert_eq!(refusals(&mock), 0);
    Ok(())
}

// ---------------------------------------------------------------- MCP upstreams: content and schemas

/// An MCP upstream answering from `tests/fixtures/mcp-cases.jsonl`: every `call_result` case is a
/// tool of that name (dashes as underscores) returning the case's result; every `tool` case is
/// listed as it is and answers with its arguments.
#[derive(Clone, Default)]
struct CaseUpstream {
    calls: Arc<Mutex<Vec<(String, JsonObject)>>>,
}

fn mcp_cases() -> Vec<Value> {
    swarm_testing::fixtures::MCP_CASES_JSONL
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect()
}

impl ServerHandler for CaseUpstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("case-upstream", "0.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = Vec::new();
        for case in mcp_cases() {
            match case["kind"].as_str() {
                Some("call_result") => {
                    let name = case["name"].as_str().unwrap_or("").replace('-', "_");
                    let schema = json!({"type": "object", "properties": {}});
                    let schema: JsonObject = serde_json::from_value(schema).unwrap_or_default();
                    tools.push(Tool::new(name, "Returns a fixture case", Arc::new(schema)));
                }
                Some("tool") => {
                    if let Ok(t) = serde_json::from_value::<Tool>(case["tool"].clone()) {
                        tools.push(t);
                    }
                }
                _ => {}
            }
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push((request.name.to_string(), arguments.clone()));
        let case = mcp_cases()
            .into_iter()
            .find(|c| c["name"].as_str().map(|n| n.replace('-', "_")) == Some(request.name.to_string()));
        let result = match case {
            Some(c) => serde_json::from_value::<CallToolResult>(c["result"].clone())
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?,
            None => CallToolResult::success(vec![ContentBlock::text(
                json!({"tool": request.name, "arguments": arguments}).to_string(),
            )]),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

const SUPPORT_TOKEN: &str = "support-token-0123456789abcdef";

/// The case upstream behind a real tool gateway (prefix `docs__`), and the worker's MCP client for it.
async fn case_gateway() -> Result<(CaseUpstream, Arc<dyn ToolGateway>)> {
    let upstream = CaseUpstream::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let served = upstream.clone();
    let service = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_legacy_session_mode(false)
            .with_json_response(true),
    );
    let router = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    let mut roles = BTreeMap::new();
    roles.insert(
        "support".to_owned(),
        tool_gateway::RoleConfig {
            token: swarm_adapters::config::SecretString::from(SUPPORT_TOKEN),
            tools: vec!["docs__*".into()],
            deny: vec![],
            call: true,
        },
    );
    let config = tool_gateway::GatewayConfig {
        upstreams: vec![tool_gateway::UpstreamConfig::new("docs", &format!("http://{addr}/mcp"))],
        roles,
        list_ttl_secs: 60.0,
        discovery_retry_secs: 0.05,
        global_rate_limit_per_sec: None,
        allowed_hosts: vec!["127.0.0.1".into(), "localhost".into()],
        anonymous_role: None,
        upstream_keep_alive: false,
        side_effects: Default::default(),
        approval_key: None,
    };
    let (gateway_addr, _task) = tool_gateway::serve("127.0.0.1:0".parse()?, config).await?;
    let tokens = HashMap::from([("support".to_owned(), SUPPORT_TOKEN.to_owned())]);
    let client = McpToolGateway::new(&format!("http://{gateway_addr}/mcp"), tokens, Duration::from_secs(5))?;
    Ok((upstream, Arc::new(client)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_only_and_other_non_text_mcp_results_reach_the_answer_as_text() -> Result<()> {
    let (upstream, gateway) = case_gateway().await?;
    let tools = [
        "docs__resource_only_text",
        "docs__resource_only_blob",
        "docs__resource_link_only",
        "docs__image_and_audio",
        "docs__empty_content",
    ];
    let calls: Vec<(&str, Value)> = tools.iter().map(|t| (*t, json!({}))).collect();
    let mock = start_mock(vec![AgentSubtask::new("Gather the documents", &calls)], Quirks::default()).await?;
    let d = direct(&tools, models(&mock, &[("LLM_MODEL", "m")])?, gateway, WorkerSettings::default()).await?;
    let rec = d.run().await?;
    assert_eq!(upstream.calls.lock().map(|c| c.len()).unwrap_or(0), 5);
    let sent = tool_contents(&mock.bodies()[1]);
    assert_eq!(sent.len(), 5);
    assert!(sent.iter().all(|c| !c.trim().is_empty()), "no tool message is empty: {sent:?}");
    let text = answer(&rec);
    for fact in [
        "shop://orders/A1029",
        r#""status":"paid""#,
        "application/pdf, 129 bytes of binary data",
        "https://shop.example.com/track/SF1234567890",
        "image/png",
        "audio/wav",
        "(the tool returned no content)",
    ] {
        assert!(text.contains(fact), "{fact} did not reach the answer: {text}");
    }
    assert!(rec.tools_used.iter().all(|t| t.starts_with("docs__")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_without_types_is_normalised_at_discovery_so_a_strict_provider_takes_it_and_arguments_are_checked()
-> Result<()> {
    let (upstream, gateway) = case_gateway().await?;
    let calls = [
        ("docs__search", json!({"q": "jacket", "filters": {"colour": "navy"}, "tags": ["sale"]})),
        ("docs__search", json!({"q": 5})),
    ];
    let mock = start_mock(
        vec![AgentSubtask::new("Search the catalogue", &calls)],
        Quirks::named("openai-strict").context("preset")?,
    )
    .await?;
    let d = direct(
        &["docs__search", "docs__echo_text"],
        models(&mock, &[("LLM_MODEL", "m")])?,
        gateway.clone(),
        WorkerSettings::default(),
    )
    .await?;
    let rec = d.run().await?;
    assert_eq!(refusals(&mock), 0, "the provider took every schema");
    let bodies = mock.bodies();
    let offered: Vec<&str> = bodies[0]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|x| x.pointer("/function/name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    assert_eq!(offered, ["docs__search"], "the non-object root was left out");
    let props = &bodies[0]["tools"][0]["function"]["parameters"]["properties"];
    for p in ["q", "filters", "tags", "sort", "limit"] {
        assert!(props[p].get("type").is_some(), "{p} has no type: {props}");
    }
    // The valid call ran; the one against the normalised schema (q must be text) was refused.
    let ran = upstream.calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].1.get("q"), Some(&json!("jacket")));
    let sent = tool_contents(&bodies[1]);
    assert!(sent[0].contains("jacket"), "{sent:?}");
    assert!(sent[1].contains("do not match the tool's schema"), "{sent:?}");
    assert!(answer(&rec).contains("jacket"));
    Ok(())
}
