//! `swarm-bench`: the local stack at a fan-out of 100 against the mock LLM; prints overhead over the critical path, CPU-ms per subtask and peak RSS.
//!
//! Set-up (issue 2's figures): the mock LLM answers in 200 ms (a separate
//! process, so its CPU is not counted), the tool in 20 ms, each subtask is two
//! LLM rounds and one tool call, worker concurrency 100. The critical path of
//! one conversation is plan + round 1 + tool + round 2 + reply =
//! 200 + 200 + 20 + 200 + 200 = 820 ms.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_trait::async_trait;
use clap::Parser;
use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_core::ports::{ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec};
use swarm_local::{Function, LocalStack, StackOptions, Wraps};

#[derive(Parser)]
#[command(name = "swarm-bench", about = "Fan-out benchmark of the local stack against the mock LLM")]
struct Args {
    /// Subtasks per conversation.
    #[arg(long, default_value_t = 100)]
    subtasks: usize,
    /// Worker concurrency (MaximumConcurrency).
    #[arg(long, default_value_t = 100)]
    concurrency: usize,
    /// LLM latency, milliseconds.
    #[arg(long, default_value_t = 200)]
    llm_ms: u64,
    /// Tool latency, milliseconds.
    #[arg(long, default_value_t = 20)]
    tool_ms: u64,
    /// Measured conversations (after one warm-up).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The mock-llm binary (default: next to this one).
    #[arg(long)]
    mock_llm: Option<PathBuf>,
}

/// Adds a fixed latency to every tool call (the tool "answers in 20 ms").
struct SlowTools {
    inner: Arc<dyn ToolGateway>,
    delay: Duration,
}

#[async_trait]
impl ToolGateway for SlowTools {
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        self.inner.list_tools(ctx).await
    }
    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        args: serde_json::Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(self.delay).await;
        self.inner.call_tool(ctx, name, args, timeout).await
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time of every thread of this process, from `/proc/self/task/*/schedstat` (nanoseconds).
fn process_cpu_ns() -> u64 {
    let mut total = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                total += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    total
}

/// Peak resident set size (`VmHWM`), kilobytes.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The mock LLM as its own process (its CPU is not counted), answering after `--llm-ms`; waits
/// until it listens (at most 15 s).
async fn start_mock(args: &Args) -> anyhow::Result<(KillOnDrop, u16)> {
    let mock_bin = match &args.mock_llm {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("mock-llm"),
    };
    anyhow::ensure!(
        mock_bin.exists(),
        "mock-llm binary not found at {} (build it: cargo build --release -p mock-llm)",
        mock_bin.display()
    );
    let port = free_port()?;
    let mock = KillOnDrop(
        Command::new(&mock_bin)
            .args([
                "--port",
                &port.to_string(),
                "--latency-ms",
                &args.llm_ms.to_string(),
                "--plan-subtasks",
                &args.subtasks.to_string(),
            ])
            .args([
                "--plan-tool",
                "shop__get_order",
                "--tool-match",
                "get_order",
                "--final-text",
                "Order A1029 is paid.",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", mock_bin.display()))?,
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "mock-llm did not start within 15 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((mock, port))
}

/// The local stack against the mock on `port`, every tool call `--tool-ms` slower.
async fn start_stack(args: &Args, port: u16) -> anyhow::Result<LocalStack> {
    let lookup = move |k: &str| match k {
        "LLM_BASE_URL" => Some(format!("http://127.0.0.1:{port}/v1")),
        "LLM_MODEL" => Some("mock".to_owned()),
        "LLM_MAX_IN_FLIGHT" => Some("256".to_owned()),
        _ => None,
    };
    let config = swarm_adapters::llm::LlmConfig::from_lookup(lookup).context("LLM config")?;
    let models = swarm_adapters::llm::build_models(&config)?;
    let delay = Duration::from_millis(args.tool_ms);
    LocalStack::start(StackOptions {
        worker_concurrency: Some(args.concurrency),
        models: Some(models),
        // The tool latency of the functions that call tools as workers (the planner only lists them).
        wraps: Wraps::default().tools(
            &[Function::Worker, Function::RefundWorker],
            Arc::new(move |inner| Arc::new(SlowTools { inner, delay }) as Arc<dyn ToolGateway>),
        ),
        ..StackOptions::default()
    })
    .await
}

/// One conversation of `--subtasks` subtasks, all of them done: its wall time and this process's CPU time.
async fn one_round(stack: &LocalStack, args: &Args, round: usize) -> anyhow::Result<(Duration, u64)> {
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    let (status, body) = stack.post_conversation("Check order A1029 for every line", "C104", None).await?;
    anyhow::ensure!(status == 202, "POST answered {status}: {body}");
    let id = body["conversation_id"].as_str().context("conversation id")?.to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(120)).await?;
    let wall = t0.elapsed();
    let cpu = process_cpu_ns() - cpu0;
    let ok = view.subtasks.iter().filter(|s| s.status == SubtaskStatus::Succeeded).count();
    anyhow::ensure!(
        view.status == ConversationStatus::Done && ok == args.subtasks,
        "round {round}: {} with {ok}/{} succeeded",
        view.status,
        args.subtasks
    );
    Ok((wall, cpu))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    swarm_adapters::telemetry::init_with_default("error");
    let args = Args::parse();
    let (_mock, port) = start_mock(&args).await?;
    let stack = start_stack(&args, port).await?;
    let critical = Duration::from_millis(4 * args.llm_ms + args.tool_ms);
    println!(
        "swarm-bench: {} subtasks/conversation, concurrency {}, LLM {} ms, tool {} ms, critical path {} ms",
        args.subtasks,
        args.concurrency,
        args.llm_ms,
        args.tool_ms,
        critical.as_millis()
    );
    let over = |wall: Duration| (wall.as_secs_f64() / critical.as_secs_f64() - 1.0) * 100.0;
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for round in 0..=args.rounds {
        let (wall, cpu) = one_round(&stack, &args, round).await?;
        if round == 0 {
            continue; // warm-up: connections, caches
        }
        walls.push(wall);
        cpus.push(cpu);
        println!(
            "  round {round}: wall {:7.1} ms ({:+5.2}% over critical path), CPU {:6.1} ms = {:.3} CPU-ms/subtask",
            wall.as_secs_f64() * 1e3,
            over(wall),
            cpu as f64 / 1e6,
            cpu as f64 / 1e6 / args.subtasks as f64
        );
    }
    walls.sort();
    cpus.sort();
    let median_wall = walls[walls.len() / 2];
    let median_cpu = cpus[cpus.len() / 2];
    println!(
        "median: wall {:.1} ms ({:+.2}% over the {} ms critical path) · {:.3} CPU-ms per subtask · peak RSS {:.1} MB",
        median_wall.as_secs_f64() * 1e3,
        over(median_wall),
        critical.as_millis(),
        median_cpu as f64 / 1e6 / args.subtasks as f64,
        peak_rss_kb() as f64 / 1024.0
    );
    stack.shutdown().await;
    Ok(())
}
