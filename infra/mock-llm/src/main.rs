//! `mock-llm`: runs the mock OpenAI-compatible server until Ctrl-C (for benchmarks and manual runs).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use mock_llm::{AgentConfig, Faults, Latency, MockConfig, MockLlm, Mode, Quirks, ScriptedResponse, load_cases};

/// A mock OpenAI-compatible chat-completions server.
#[derive(Debug, Parser)]
#[command(name = "mock-llm", version)]
struct Args {
    /// TCP port (0 picks a free one).
    #[arg(long, default_value_t = 8089)]
    port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Seed of every random draw (latency, faults).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// JSON-lines file of cases (`{"status", "headers", "body"}`): answered in order (scripted mode).
    #[arg(long)]
    script: Option<std::path::PathBuf>,
    /// Fixed latency, milliseconds.
    #[arg(long, conflicts_with_all = ["latency_min_ms", "latency_max_ms"])]
    latency_ms: Option<u64>,
    /// Uniform latency lower bound, milliseconds.
    #[arg(long, requires = "latency_max_ms")]
    latency_min_ms: Option<u64>,
    /// Uniform latency upper bound, milliseconds.
    #[arg(long, requires = "latency_min_ms")]
    latency_max_ms: Option<u64>,
    /// Share of requests answered 429 (0..1).
    #[arg(long, default_value_t = 0.0)]
    rate_limit_rate: f64,
    /// `Retry-After` of injected 429s, seconds (0 sends none).
    #[arg(long, default_value_t = 1.0)]
    retry_after_secs: f64,
    /// Share of requests answered 500/502 (0..1).
    #[arg(long, default_value_t = 0.0)]
    server_error_rate: f64,
    /// Share of requests that hang (0..1).
    #[arg(long, default_value_t = 0.0)]
    hang_rate: f64,
    /// How long a hung request hangs, seconds.
    #[arg(long, default_value_t = 600)]
    hang_secs: u64,
    /// Share of requests answered with a truncated JSON body (0..1).
    #[arg(long, default_value_t = 0.0)]
    malformed_rate: f64,
    /// Agent mode: share of answers cut off by the output limit (`finish_reason: length`) (0..1).
    #[arg(long, default_value_t = 0.0)]
    truncation_rate: f64,
    /// Space each fault kind (every 1/rate requests, jittered) instead of a draw per request.
    #[arg(long)]
    spaced_faults: bool,
    /// Agent mode: subtasks in a plan.
    #[arg(long, default_value_t = 3)]
    plan_subtasks: usize,
    /// Agent mode: the tool named in each planned subtask.
    #[arg(long, default_value = "shop__get_order")]
    plan_tool: String,
    /// Agent mode: the instruction of each planned subtask.
    #[arg(long, default_value = "Check order A1029")]
    plan_instruction: String,
    /// Agent mode: call the first tool whose name contains this.
    #[arg(long, default_value = "get_order")]
    tool_match: String,
    /// Agent mode: the arguments of that call (JSON object).
    #[arg(long, default_value = r#"{"order_id":"A1029"}"#)]
    tool_args: String,
    /// Agent mode: the final answer after a tool result (default: echo the result).
    #[arg(long)]
    final_text: Option<String>,
    /// Agent mode: the reply lists the subtasks' answers instead of a fixed text.
    #[arg(long)]
    reply_from_results: bool,
    /// Agent mode: plan and call what the customer's message scripts (`- w01 after w02: text [call tool {…}]` lines).
    #[arg(long)]
    plan_from_message: bool,
    /// Agent mode: a scripted call's `reason` differs between two answers (` (draft <n>)` appended).
    #[arg(long)]
    vary_reasons: bool,
    /// Agent mode: behave like a provider: `kimi-thinking` (reasoning every turn, 400 when an
    /// assistant tool-call message comes back without it), `bedrock` (400 on tool history
    /// without tools), `openai-reasoning` (refuses `max_tokens`), `openai-strict` (schema check).
    #[arg(long, default_value = "none")]
    provider: String,
    /// Agent mode: context window in estimated tokens; longer requests get a 400 context-length error.
    #[arg(long)]
    context_tokens: Option<u64>,
    /// Agent mode: tokens each answer spends on reasoning (thinking providers); a smaller output
    /// limit gets `finish_reason: length` with reasoning only.
    #[arg(long)]
    reasoning_tokens: Option<u32>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = Args::parse();
    for (name, rate) in [
        ("--rate-limit-rate", args.rate_limit_rate),
        ("--server-error-rate", args.server_error_rate),
        ("--hang-rate", args.hang_rate),
        ("--malformed-rate", args.malformed_rate),
        ("--truncation-rate", args.truncation_rate),
    ] {
        anyhow::ensure!((0.0..=1.0).contains(&rate), "{name} must be between 0 and 1, got {rate}");
    }
    let total =
        args.rate_limit_rate + args.server_error_rate + args.hang_rate + args.malformed_rate + args.truncation_rate;
    anyhow::ensure!(total <= 1.0, "the fault rates add up to {total}, more than 1");
    anyhow::ensure!(
        args.retry_after_secs.is_finite() && args.retry_after_secs >= 0.0,
        "--retry-after-secs must be a number of seconds >= 0"
    );

    let mode = match &args.script {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let cases = load_cases(&text).with_context(|| format!("parsing {}", path.display()))?;
            Mode::Scripted(cases.into_iter().map(|(_, r)| r).collect::<Vec<ScriptedResponse>>())
        }
        None => Mode::Agent(AgentConfig {
            quirks: {
                let mut q = Quirks::named(&args.provider).with_context(|| {
                    format!(
                        "--provider {:?}: use kimi-thinking, bedrock, openai-reasoning, openai-strict or none",
                        args.provider
                    )
                })?;
                q.context_tokens = args.context_tokens.or(q.context_tokens);
                if args.reasoning_tokens.is_some() {
                    q.thinking = true;
                    q.reasoning_tokens = args.reasoning_tokens;
                }
                q
            },
            reply_from_results: args.reply_from_results,
            plan_from_message: args.plan_from_message,
            vary_reasons: args.vary_reasons,
            tool_match: args.tool_match.clone(),
            tool_args: serde_json::from_str(&args.tool_args).context("--tool-args must be JSON")?,
            final_text: args.final_text.clone(),
            plan_subtasks: args.plan_subtasks,
            plan_instruction: args.plan_instruction.clone(),
            plan_tool: args.plan_tool.clone(),
            ..AgentConfig::default()
        }),
    };
    let latency = match (args.latency_ms, args.latency_min_ms, args.latency_max_ms) {
        (Some(ms), _, _) => Latency::Fixed(Duration::from_millis(ms)),
        (None, Some(min), Some(max)) => {
            anyhow::ensure!(min <= max, "--latency-min-ms must not exceed --latency-max-ms");
            Latency::Uniform { min: Duration::from_millis(min), max: Duration::from_millis(max) }
        }
        _ => Latency::None,
    };
    let config = MockConfig {
        seed: args.seed,
        mode,
        latency,
        faults: Faults {
            rate_limit: args.rate_limit_rate,
            retry_after: (args.retry_after_secs > 0.0).then(|| Duration::from_secs_f64(args.retry_after_secs)),
            server_error: args.server_error_rate,
            hang: args.hang_rate,
            hang_for: Duration::from_secs(args.hang_secs),
            malformed: args.malformed_rate,
            truncated: args.truncation_rate,
            spaced: args.spaced_faults,
        },
        record_bodies: false,
    };
    let (addr, handle) = MockLlm::start_on(SocketAddr::new(args.host, args.port), config)
        .await
        .with_context(|| format!("binding {}:{}", args.host, args.port))?;
    println!("mock-llm listening on http://{addr}/v1 (stats: http://{addr}/_stats)");
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    let stats = handle.stats();
    println!("requests: {}, most at once: {}", stats.requests, stats.max_concurrent);
    handle.shutdown().await;
    Ok(())
}
