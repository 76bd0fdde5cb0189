//! `swarm-local`: run the whole swarm on this machine — `ask` one message with live progress, or `serve` the HTTP API.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use orchestrator::Auth;
use swarm_adapters::embedded::ItemChange;
use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_local::{AwsOptions, AwsStack, LocalStack, StackOptions, describe};

#[derive(Parser)]
#[command(
    name = "swarm-local",
    version,
    about = "Run the lambda-swarm locally: API, orchestrator, queue, workers, aggregator, tool gateway and the demo shop in one process"
)]
struct Cli {
    /// Run the AWS way: DynamoDB (with its stream) and SQS on this emulator endpoint
    /// (start one with `infra/aws/moto.sh start`), e.g. http://127.0.0.1:5000.
    /// Tables and queues get names unique to the run and are deleted at the end.
    #[arg(long, global = true, value_name = "URL")]
    aws_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer one customer message, showing each subtask as it starts and ends.
    Ask {
        /// The customer's message.
        message: String,
        /// Customer the message is from (demo shop ids C100–C111).
        #[arg(long, default_value = "C104")]
        customer: String,
        /// Print the conversation object (as `GET /conversations/{id}` answers it) as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// Concurrent worker invocations (the event source mapping's MaximumConcurrency).
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Seconds until the conversation's deadline.
        #[arg(long, default_value_t = 120)]
        deadline: u64,
    },
    /// Serve the HTTP API (`POST /conversations`, `GET /conversations/{id}`) on 127.0.0.1.
    Serve {
        /// Port of the HTTP API.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// How callers are identified: `none` (the body's `customer_id`, as with
        /// `AuthMode=none`) or `tokens` (`Authorization: Bearer <token>`, each token naming one customer).
        #[arg(long, value_enum, default_value_t = LocalAuth::None)]
        auth: LocalAuth,
        /// With `--auth tokens`: a file of `<token>=<customer_id>` lines (`#` starts a comment).
        #[arg(long, value_name = "FILE")]
        tokens_file: Option<std::path::PathBuf>,
        /// With `--auth tokens`: one `<token>=<customer_id>` (repeatable).
        #[arg(long = "token", value_name = "TOKEN=CUSTOMER")]
        tokens: Vec<String>,
    },
}

/// `swarm-local serve --auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LocalAuth {
    None,
    Tokens,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    swarm_adapters::telemetry::init_with_default("warn");
    let cli = Cli::parse();
    match (cli.command, cli.aws_endpoint) {
        (Command::Ask { message, customer, json, concurrency, deadline }, Some(endpoint)) => {
            ask_aws(&endpoint, &message, &customer, json, concurrency, deadline).await
        }
        (Command::Ask { message, customer, json, concurrency, deadline }, None) => {
            ask(&message, &customer, json, concurrency, deadline).await
        }
        (Command::Serve { .. }, Some(_)) => {
            anyhow::bail!("--aws-endpoint works with `ask` only; `serve` runs the embedded stack")
        }
        (Command::Serve { port, concurrency, auth, tokens_file, tokens }, None) => {
            let auth = match auth {
                LocalAuth::None => {
                    anyhow::ensure!(
                        tokens_file.is_none() && tokens.is_empty(),
                        "--tokens-file and --token need --auth tokens"
                    );
                    Auth::None
                }
                LocalAuth::Tokens => {
                    Auth::Tokens(Arc::new(swarm_local::http::token_table(tokens_file.as_deref(), &tokens)?))
                }
            };
            serve(port, concurrency, auth).await
        }
    }
}

async fn ask(message: &str, customer: &str, json: bool, concurrency: usize, deadline: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let stack = LocalStack::start(StackOptions {
        worker_concurrency: concurrency,
        deadline_secs: deadline,
        ..StackOptions::default()
    })
    .await?;
    eprintln!(
        "lambda-swarm local · model: {} · {} workers · customer {}",
        if stack.offline {
            "offline model (no LLM_BASE_URL set; deterministic, not an LLM)".to_owned()
        } else {
            stack.model_label.clone()
        },
        concurrency,
        customer
    );
    let mut changes = stack.subscribe();
    let (status, body) = stack.post_conversation(message, customer, None).await?;
    if status != 202 {
        anyhow::bail!("the API answered {status}: {body}");
    }
    let id = body["conversation_id"].as_str().context("no conversation_id in the answer")?.to_owned();
    let conversation_id = swarm_core::domain::ConversationId::parse(&id).context("bad conversation id")?;

    let bar = ProgressBar::new(0);
    if std::io::stderr().is_terminal() {
        bar.set_style(
            ProgressStyle::with_template("{spinner} {pos}/{len} subtasks finished {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
    } else {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let say = |line: String| {
        if bar.is_hidden() { eprintln!("{line}") } else { bar.println(line) }
    };
    let store = stack.store();
    let view_now = store_view(&stack, &conversation_id).await?;
    bar.set_length(u64::from(view_now.1));
    say(format!("▸ conversation {id}: {} subtasks planned", view_now.1));
    for line in view_now.0 {
        say(format!("  · {line}"));
    }
    let timeout = Duration::from_secs(deadline + 60);
    let wait_until = tokio::time::Instant::now() + timeout;
    let mut started_at = std::collections::HashMap::new();
    loop {
        if let Some(c) =
            swarm_core::ports::ConversationStore::get_conversation(store.as_ref(), &conversation_id).await?
            && c.status.is_terminal()
        {
            break;
        }
        match tokio::time::timeout_at(wait_until, changes.recv()).await {
            Err(_) => anyhow::bail!("the conversation did not finish within {timeout:?}"),
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => anyhow::bail!("the stack stopped"),
            Ok(Err(_)) => continue,
            Ok(Ok(ItemChange::Subtask(rec))) if rec.conversation_id == conversation_id => match rec.status {
                SubtaskStatus::Running if started_at.insert(rec.subtask.id.clone(), Instant::now()).is_none() => {
                    say(format!(
                        "  ▶ {} started  {} [{}]",
                        rec.subtask.id,
                        rec.subtask.instruction,
                        rec.subtask.tools.join(", ")
                    ));
                }
                s if s.is_terminal() => {
                    let took = started_at
                        .get(&rec.subtask.id)
                        .map(|t| format!(" {:.1}s", t.elapsed().as_secs_f64()))
                        .unwrap_or_default();
                    let mark = if s == SubtaskStatus::Succeeded { "✔" } else { "✘" };
                    say(format!("  {mark} {}{took}", describe(&rec)));
                }
                _ => {}
            },
            Ok(Ok(ItemChange::Conversation(c))) if c.id == conversation_id => {
                bar.set_position(c.finished.len() as u64);
                if c.status == ConversationStatus::Aggregating {
                    say("▸ all subtasks finished: writing the reply".into());
                }
                if c.status.is_terminal() {
                    break;
                }
            }
            Ok(Ok(_)) => {}
        }
    }
    bar.finish_and_clear();
    let view = stack.view(&id).await?;
    print_outcome(&view, json, started)?;
    stack.shutdown().await;
    if view.status != ConversationStatus::Done {
        std::process::exit(1);
    }
    Ok(())
}

/// `ask` the AWS way: the same handlers on the emulator's DynamoDB and SQS, progress from polling `GET /conversations/{id}`.
async fn ask_aws(
    endpoint: &str,
    message: &str,
    customer: &str,
    json: bool,
    concurrency: usize,
    deadline: u64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let options = StackOptions { worker_concurrency: concurrency, deadline_secs: deadline, ..StackOptions::default() };
    let stack = AwsStack::start(AwsOptions::new(endpoint, options)).await?;
    let r = &stack.resources;
    eprintln!(
        "lambda-swarm local, the AWS way · emulator {endpoint} · table {} · queues {}, {} (+ DLQs) · model: {} · {} workers · customer {}",
        r.table,
        r.tasks_queue_url.rsplit('/').next().unwrap_or_default(),
        r.refund_queue_url.rsplit('/').next().unwrap_or_default(),
        if stack.offline {
            "offline model (no LLM_BASE_URL set; deterministic, not an LLM)".to_owned()
        } else {
            stack.model_label.clone()
        },
        concurrency,
        customer
    );
    let outcome = ask_on(&stack, message, customer, deadline).await;
    let c = stack.counters();
    let count = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::SeqCst);
    let platform = format!(
        "── SQS: {} worker invocations, {} batch item failures, {} dead-letter invocations · stream: {} records read, {} passed the filter, {} aggregator invocations",
        count(&c.worker_invocations),
        count(&c.batch_item_failures),
        count(&c.dead_letter_invocations),
        count(&c.stream_records),
        count(&c.stream_records_matched),
        count(&c.aggregator_invocations)
    );
    stack.shutdown().await;
    let view = outcome?;
    print_outcome(&view, json, started)?;
    eprintln!("{platform}");
    if view.status != ConversationStatus::Done {
        std::process::exit(1);
    }
    Ok(())
}

/// Posts the message and follows the conversation to its end, one line per subtask change.
async fn ask_on(
    stack: &AwsStack,
    message: &str,
    customer: &str,
    deadline: u64,
) -> anyhow::Result<swarm_core::view::ConversationView> {
    let (status, body) = stack.post_conversation(message, customer, None).await?;
    if status != 202 {
        anyhow::bail!("the API answered {status}: {body}");
    }
    let id = body["conversation_id"].as_str().context("no conversation_id in the answer")?.to_owned();
    let mut planned = false;
    let mut seen: std::collections::HashMap<String, SubtaskStatus> = std::collections::HashMap::new();
    let mut aggregating = false;
    stack
        .wait_until(&id, Duration::from_secs(deadline + 60), |view| {
            if !planned && view.progress.total > 0 {
                planned = true;
                eprintln!("▸ conversation {id}: {} subtasks planned", view.progress.total);
                for s in &view.subtasks {
                    let deps = if s.depends_on.is_empty() {
                        String::new()
                    } else {
                        format!(" (after {})", s.depends_on.join(", "))
                    };
                    eprintln!("  · {} {}{}", s.id, s.instruction, deps);
                }
            }
            for s in &view.subtasks {
                if seen.get(&s.id) == Some(&s.status) {
                    continue;
                }
                seen.insert(s.id.clone(), s.status);
                match s.status {
                    SubtaskStatus::Running => eprintln!("  ▶ {} started  {}", s.id, s.instruction),
                    SubtaskStatus::Succeeded | SubtaskStatus::Failed | SubtaskStatus::Skipped => {
                        let mark = if s.status == SubtaskStatus::Succeeded { "✔" } else { "✘" };
                        let tools = if s.tools_used.is_empty() {
                            String::new()
                        } else {
                            format!("  [{}]", s.tools_used.join(", "))
                        };
                        let error = s.error.as_deref().map(|e| format!(" — {e}")).unwrap_or_default();
                        eprintln!("  {mark} {} {:<9} {}{tools}{error}", s.id, s.status, s.instruction);
                    }
                    _ => {}
                }
            }
            if !aggregating && view.status == ConversationStatus::Aggregating {
                aggregating = true;
                eprintln!("▸ all subtasks finished: writing the reply");
            }
        })
        .await
}

/// The reply (stdout, or stderr with `--json`), the summary line, and with `--json` the conversation object as the last stdout line.
fn print_outcome(view: &swarm_core::view::ConversationView, json: bool, started: Instant) -> anyhow::Result<()> {
    let tool_calls: usize = view.subtasks.iter().map(|s| s.tools_used.len()).sum();
    let succeeded = view.subtasks.iter().filter(|s| s.status == SubtaskStatus::Succeeded).count();
    let tokens = match &view.usage {
        None => "tokens: not reported".to_owned(),
        Some(u) => {
            let mut t = format!(
                "tokens: {} in / {} out",
                u.prompt_tokens.map_or("?".into(), |n| n.to_string()),
                u.completion_tokens.map_or("?".into(), |n| n.to_string())
            );
            if let (Some(c), Some(p)) = (u.cached_tokens, u.prompt_tokens) {
                t.push_str(&format!(" ({c} cached, {:.0}%)", if p > 0 { c as f64 * 100.0 / p as f64 } else { 0.0 }));
            }
            if let Some(cost) = u.cost_usd {
                t.push_str(&format!(" · ${cost:.4}"));
            }
            t
        }
    };
    let reply = view.reply.clone().unwrap_or_else(|| format!("(no reply: conversation {})", view.status));
    if json {
        eprintln!("\n{reply}\n");
    } else {
        println!("\n{reply}\n");
    }
    eprintln!(
        "── {} · {} subtasks ({} succeeded) · {} tool calls · {} · {:.2} s wall",
        view.status,
        view.subtasks.len(),
        succeeded,
        tool_calls,
        tokens,
        started.elapsed().as_secs_f64()
    );
    if json {
        println!("{}", serde_json::to_string(view)?);
    }
    Ok(())
}

/// The planned subtasks (one line each) and their number.
async fn store_view(stack: &LocalStack, id: &swarm_core::domain::ConversationId) -> anyhow::Result<(Vec<String>, u32)> {
    let store = stack.store();
    let subtasks = swarm_core::ports::ConversationStore::list_subtasks(store.as_ref(), id).await?;
    let lines = subtasks
        .iter()
        .map(|r| {
            let deps = if r.subtask.depends_on.is_empty() {
                String::new()
            } else {
                format!(" (after {})", r.subtask.depends_on.join(", "))
            };
            format!(
                "{} {}{} [{}] role={}",
                r.subtask.id,
                r.subtask.instruction,
                deps,
                r.subtask.tools.join(", "),
                r.role
            )
        })
        .collect();
    Ok((lines, subtasks.len() as u32))
}

async fn serve(port: u16, concurrency: usize, auth: Auth) -> anyhow::Result<()> {
    let stack = LocalStack::start(StackOptions { worker_concurrency: concurrency, ..StackOptions::default() }).await?;
    let callers = match &auth {
        Auth::Tokens(table) => format!("Authorization: Bearer <token> ({} tokens)", table.len()),
        _ => "no authentication: the body's customer_id".to_owned(),
    };
    let app = swarm_local::http::router(stack.orchestrator(), auth);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    let addr = listener.local_addr()?;
    println!("lambda-swarm local stack");
    println!(
        "  API          http://{addr}/conversations   (POST {{\"message\", \"customer_id\"}}, GET /conversations/{{id}})"
    );
    println!("  callers      {callers}");
    println!("  tool gateway {}", stack.gateway_url);
    println!("  demo shop    {}", stack.shop_url);
    println!(
        "  model        {}",
        if stack.offline { "offline model (no LLM_BASE_URL set)".to_owned() } else { stack.model_label.clone() }
    );
    println!("Ctrl-C stops it.");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    stack.shutdown().await;
    Ok(())
}
