//! gateway-bench: prints the latency the tool gateway adds per `tools/call` (p50/p99 vs calling the upstream directly) and the calls per second through it.
//!
//! Everything runs in this process on loopback: a trivial rmcp upstream, the
//! gateway in front of it, and the worker's `McpToolGateway` adapter as the
//! client (the same client for both paths, so the difference is the gateway).
//! Run in release: `cargo run --release -p tool-gateway --bin gateway-bench`.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::Parser;
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
        ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService, streamable_http_server::session::never::NeverSessionManager,
    },
};
use secrecy::SecretString;
use swarm_adapters::mcp::McpToolGateway;
use swarm_core::domain::ConversationId;
use swarm_core::ports::{ToolContext, ToolGateway};
use tokio::time::Instant;
use tool_gateway::{GatewayConfig, RoleConfig, UpstreamConfig};

#[derive(Parser, Debug)]
#[command(about = "Latency the tool gateway adds per tools/call, and calls per second through it")]
struct Args {
    /// Sequential calls measured per path (direct and through the gateway).
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Calls made before measuring, per path.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Concurrent callers in the throughput run (the local swarm runs 100 subtasks).
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// Calls in the throughput run.
    #[arg(long, default_value_t = 10_000)]
    throughput_calls: usize,
    /// Keep idle connections from the gateway to the upstream (`upstream_keep_alive`).
    #[arg(long)]
    keep_alive: bool,
}

/// A trivial upstream: `lookup(sku)` answers a small JSON text at once.
#[derive(Clone)]
struct BenchUpstream;

fn lookup_tool() -> Tool {
    let schema = serde_json::json!({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]});
    let serde_json::Value::Object(schema) = schema else { unreachable!("literal object") };
    Tool::new("lookup", "Look up a product by SKU", Arc::new(schema))
}

impl ServerHandler for BenchUpstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![lookup_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let sku = request.arguments.as_ref().and_then(|a| a.get("sku")).and_then(|s| s.as_str()).unwrap_or("?");
        let text = format!(r#"{{"sku":"{sku}","name":"Blue jacket","stock":3}}"#);
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(text)])))
    }
}

async fn start_upstream() -> anyhow::Result<String> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    let service = StreamableHttpService::new(|| Ok(BenchUpstream), Arc::new(NeverSessionManager::default()), config);
    let router = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}/mcp"))
}

const TOKEN: &str = "bench-token-0123456789abcdef";

fn ctx() -> ToolContext {
    ToolContext {
        role: "bench".into(),
        customer_id: "C104".into(),
        conversation_id: ConversationId::from_trusted("bench"),
        subtask_id: "w01".into(),
    }
}

fn client(url: &str) -> anyhow::Result<McpToolGateway> {
    McpToolGateway::new(url, HashMap::from([("bench".to_owned(), TOKEN.to_owned())]), Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("{e}"))
}

async fn call(client: &McpToolGateway, tool: &str, ctx: &ToolContext) -> anyhow::Result<()> {
    let out = client
        .call_tool(ctx, tool, serde_json::json!({"sku": "JKT-BLU-M"}), Duration::from_secs(10))
        .await
        .map_err(|e| anyhow::anyhow!("{tool}: {e}"))?;
    anyhow::ensure!(!out.is_error, "{tool} answered an error: {}", out.text);
    Ok(())
}

/// Sequential latencies of `n` calls, sorted, in microseconds.
async fn latencies(client: &McpToolGateway, tool: &str, warmup: usize, n: usize) -> anyhow::Result<Vec<u64>> {
    let ctx = ctx();
    for _ in 0..warmup {
        call(client, tool, &ctx).await?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        call(client, tool, &ctx).await?;
        out.push(started.elapsed().as_micros() as u64);
    }
    out.sort_unstable();
    Ok(out)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)] as f64 / 1000.0
}

/// Process CPU time (user + system) from /proc/self/stat, if available (Linux, 100 Hz ticks).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Calls per second with `concurrency` callers sharing one client, and CPU per call.
async fn throughput(
    client: Arc<McpToolGateway>,
    tool: &'static str,
    concurrency: usize,
    total: usize,
) -> anyhow::Result<(f64, Option<f64>)> {
    let per_task = total.div_ceil(concurrency.max(1));
    let cpu_before = cpu_time();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let ctx = ctx();
            for _ in 0..per_task {
                call(&client, tool, &ctx).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("bench task panicked")??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls = (per_task * concurrency) as f64;
    let cpu_per_call_ms =
        cpu_before.zip(cpu_time()).map(|(before, after)| (after - before).as_secs_f64() * 1000.0 / calls);
    Ok((calls / elapsed, cpu_per_call_ms))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let upstream_url = start_upstream().await?;
    let config = GatewayConfig {
        upstreams: vec![UpstreamConfig::new("bench", &upstream_url)],
        roles: BTreeMap::from([(
            "bench".to_owned(),
            RoleConfig { token: SecretString::from(TOKEN), tools: vec!["*".into()], deny: vec![], call: true },
        )]),
        list_ttl_secs: 60.0,
        discovery_retry_secs: 1.0,
        global_rate_limit_per_sec: None,
        allowed_hosts: vec!["127.0.0.1".into()],
        anonymous_role: None,
        upstream_keep_alive: args.keep_alive,
        side_effects: BTreeMap::new(),
        approval_key: None,
    };
    let (gateway_addr, _server) = tool_gateway::serve("127.0.0.1:0".parse()?, config).await?;
    let direct = client(&upstream_url)?;
    let through = Arc::new(client(&format!("http://{gateway_addr}/mcp"))?);

    let d = latencies(&direct, "lookup", args.warmup, args.calls).await?;
    let g = latencies(&through, "bench__lookup", args.warmup, args.calls).await?;
    let (direct_rate, direct_cpu) =
        throughput(Arc::new(direct), "lookup", args.concurrency, args.throughput_calls).await?;
    let (gateway_rate, gateway_cpu) =
        throughput(through, "bench__lookup", args.concurrency, args.throughput_calls).await?;

    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "tool gateway bench: {} sequential calls per path, {} cores, loopback, all in one process, upstream keep-alive {}",
        args.calls,
        cores,
        if args.keep_alive { "on" } else { "off" }
    );
    println!("{:<28}{:>10}{:>10}", "tools/call latency (ms)", "p50", "p99");
    println!("{:<28}{:>10.3}{:>10.3}", "direct to upstream", percentile(&d, 0.5), percentile(&d, 0.99));
    println!("{:<28}{:>10.3}{:>10.3}", "through the gateway", percentile(&g, 0.5), percentile(&g, 0.99));
    println!(
        "{:<28}{:>10.3}{:>10.3}",
        "added by the gateway",
        percentile(&g, 0.5) - percentile(&d, 0.5),
        percentile(&g, 0.99) - percentile(&d, 0.99)
    );
    let fmt_cpu = |c: Option<f64>| c.map_or("n/a".to_owned(), |c| format!("{c:.3}"));
    println!(
        "throughput, {} concurrent callers: direct {:.0} calls/s, through the gateway {:.0} calls/s",
        args.concurrency, direct_rate, gateway_rate
    );
    println!(
        "process CPU per call (client + gateway + upstream), ms: direct {}, through the gateway {}",
        fmt_cpu(direct_cpu),
        fmt_cpu(gateway_cpu)
    );
    Ok(())
}
