//! Bench: CPU time of the HTTP chat client for a swarm-shaped load (subtasks × 2 rounds, all concurrent) against the in-process mock LLM; prints numbers.
//!
//! `cargo run -p swarm-local --release --example llm_client_bench -- [subtasks] [repeats]`
//! (defaults 100 and 10). With `BENCH_BASE_URL=http://127.0.0.1:8089/v1` it calls
//! an external mock (`mock-llm --port 8089`) and the CPU figure is the client's
//! alone; otherwise it is the client and the in-process mock server together.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mock_llm::{MockConfig, MockLlm};
use serde_json::json;
use swarm_adapters::llm::HttpChatModel;
use swarm_adapters::llm::config::LlmEndpoint;
use swarm_core::llm::pricing::PriceTable;
use swarm_core::llm::retry::{LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{ChatMessage, ChatRequest, Purpose, ToolSpec};

/// User + system CPU time of this process (Linux `/proc/self/stat`, fields 14 and 15, in clock ticks of 10 ms).
fn process_cpu() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat (Linux only)")?;
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).context("bad /proc/self/stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 =
        fields.get(11).context("utime")?.parse::<u64>()? + fields.get(12).context("stime")?.parse::<u64>()?;
    Ok(Duration::from_millis(ticks * 10))
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let subtasks: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(100);
    let repeats: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10);

    let external = std::env::var("BENCH_BASE_URL").ok();
    let (_, mock) = MockLlm::start(MockConfig { record_bodies: false, ..MockConfig::default() }).await?;
    let base_url = external.clone().unwrap_or_else(|| mock.base_url());
    let endpoint = LlmEndpoint::new(base_url, None, "bench-model");
    let model = HttpChatModel::new(&endpoint, Duration::from_secs(30), subtasks.max(1), PriceTable::with_defaults())?;
    let tools: Vec<ToolSpec> = ["get_order", "list_customer_orders", "track_shipment", "get_product", "check_coupon", "get_refund_policy"]
        .iter()
        .map(|n| ToolSpec {
            name: format!("shop__{n}"),
            description: format!("{n}: looks up the shop's records; answers JSON."),
            input_schema: json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
            side_effecting: false,
        })
        .collect();
    let policy = LlmRetryPolicy::default();

    // Warm-up: connections and allocator.
    let warm = ChatRequest {
        purpose: Purpose::Reply,
        messages: vec![ChatMessage::User { content: "hi".into() }],
        tools: vec![],
        max_tokens: None,
        tool_choice: Default::default(),
    };
    complete_with_retry(&model, &warm, &policy, tokio::time::Instant::now() + Duration::from_secs(30)).await?;

    let cpu0 = process_cpu()?;
    let wall0 = Instant::now();
    for _ in 0..repeats {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let runs = (0..subtasks).map(|i| {
            let tools = tools.clone();
            let model = &model;
            let policy = &policy;
            async move {
                let mut req = ChatRequest {
                    purpose: Purpose::Work,
                    messages: vec![
                        ChatMessage::System { content: swarm_core::prompts::WORKER_PROMPT.to_owned() },
                        ChatMessage::User {
                            content: "Customer message:\nwhere is order A1029 and can I use SAVE20?".into(),
                        },
                        ChatMessage::User { content: format!("Subtask w{i:03}: Check order A1029") },
                    ],
                    tools,
                    max_tokens: Some(512),
                    tool_choice: Default::default(),
                };
                let first = complete_with_retry(model, &req, policy, deadline).await?;
                req.messages.push(ChatMessage::Assistant {
                    content: first.content.clone(),
                    tool_calls: first.tool_calls.clone(),
                    reasoning_content: None,
                });
                for c in &first.tool_calls {
                    req.messages.push(ChatMessage::Tool {
                        tool_call_id: c.id.clone(),
                        content: r#"{"order_id":"A1029","status":"shipped","carrier":"SF","eta":"2025-12-02"}"#.into(),
                    });
                }
                complete_with_retry(model, &req, policy, deadline).await
            }
        });
        for r in futures::future::join_all(runs).await {
            r?;
        }
    }
    let wall = wall0.elapsed();
    let cpu = process_cpu()?.saturating_sub(cpu0);
    let n = (subtasks * repeats) as f64;
    println!("subtasks: {subtasks} x 2 rounds, repeated {repeats} times ({} calls)", subtasks * repeats * 2);
    println!("wall: {:.1} ms per burst", wall.as_secs_f64() * 1000.0 / repeats as f64);
    let whose = if external.is_some() { "client only" } else { "client + in-process mock" };
    println!(
        "cpu ({whose}): {:.1} ms total, {:.3} ms per subtask, {:.3} ms per call",
        cpu.as_secs_f64() * 1000.0,
        cpu.as_secs_f64() * 1000.0 / n,
        cpu.as_secs_f64() * 1000.0 / (2.0 * n)
    );
    println!("in-flight cap at the end: {}", model.in_flight_limit());
    Ok(())
}
