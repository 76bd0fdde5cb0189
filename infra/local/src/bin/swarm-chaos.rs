//! `swarm-chaos`: drives many scripted conversations through the Lambda handlers of the local platform (embedded, or the AWS adapters on an emulator) while injecting every kind of fault at a rate from the command line and deciding every refund's approval as an operator, then checks every conversation against the store, an audit of the table's stream, the operator's own log and the shop's ledger, and prints one table; exits 1 on any broken guarantee, 2 when every guarantee held but a fault kind was injected zero times (inconclusive: too small; the table sizes the rates for the run).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use mock_llm::{AgentConfig, Faults, Latency, MockConfig, MockHandle, MockLlm, Mode};
use swarm_adapters::llm::{LlmConfig, build_models};
use swarm_core::access::CustomerLimits;
use swarm_core::approval::Approval;
use swarm_core::domain::{Conversation, ConversationId, SubtaskRecord};
use swarm_core::faults::CrashPoint;
use swarm_core::time::now_ms;
use swarm_core::timings::Timings;
use swarm_local::chaos::audit::Audit;
use swarm_local::chaos::client::{Patience, customer};
use swarm_local::chaos::customer_turn::judged_turn;
use swarm_local::chaos::operator::{Operator, OperatorLog};
use swarm_local::chaos::report::{
    ClientOutcome, DeadLetterFacts, FaultLine, LedgerRefund, LedgerTicket, Outcome, RunFacts, verdict,
};
use swarm_local::chaos::restart::Stacks;
use swarm_local::chaos::scenario::{Scenario, has_refund};
use swarm_local::platform::chaos::{Chaos, ChaosSettings, ToolFaults};
use swarm_local::{BackendChoice, EmulatorOptions, Function, LocalStack, Queue, StackOptions};
use tokio::sync::{Notify, Semaphore};

/// Longest wait for the audit to catch up with the table at the end.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the audit polls the emulator's stream when it found nothing.
const AUDIT_POLL: Duration = Duration::from_millis(250);
/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Every duration below is in the timing table's seconds (or milliseconds) and is multiplied by
/// `--time-scale`, like every timing of the platform.
#[derive(Parser, Debug)]
#[command(
    name = "swarm-chaos",
    version,
    about = "Drive scripted conversations through the swarm under injected faults and check every guarantee",
    after_help = "Exit status: 0 passed; 1 a guarantee broke (or the run could not be made); 2 inconclusive: too small \
                  (every guarantee held, but a fault kind was injected 0 times; the table prints rates sized for this run)."
)]
struct Args {
    /// Run on DynamoDB (with its stream) and SQS of this AWS emulator instead of in memory.
    #[arg(long, value_name = "URL")]
    aws_endpoint: Option<String>,
    /// The emulator enforces IAM (`MOTO_IAM=1 infra/aws/moto.sh start`, its own port): every function
    /// signs with its own IAM user, holding its role's policies from template.yaml.
    #[arg(long, requires = "aws_endpoint")]
    iam: bool,
    /// Conversations to drive.
    #[arg(long, default_value_t = 100)]
    conversations: usize,
    /// Subtasks each conversation is planned with (a chain, a join and a refund among them).
    #[arg(long, default_value_t = 10)]
    subtasks: usize,
    /// Conversations open at once (a client waits for its conversation before the next one starts).
    #[arg(long, default_value_t = 10)]
    in_flight: usize,
    /// Multiply every timing of the table (and every duration below) by this.
    #[arg(long, default_value_t = 0.05, value_name = "FACTOR")]
    time_scale: f64,
    /// Seed of every fault decision (the platform's and the mock LLM's).
    #[arg(long, default_value_t = 9)]
    seed: u64,
    /// The tasks queue's MaximumConcurrency (default: the table's worker.max_concurrency).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Share of conversations scripted with a refund subtask (spread evenly; the refund worker
    /// runs the table's refund_worker.max_concurrency at a time, as the template says).
    #[arg(long, default_value_t = 0.25)]
    refund_share: f64,

    /// Share of the times an invocation reaches a named crash point that it dies there (every point).
    #[arg(long, default_value_t = 0.02)]
    crash_rate: f64,
    /// A crash point's own rate, e.g. `aggregator_after_flip=0.1` (repeatable).
    #[arg(long = "crash-at", value_name = "POINT=RATE")]
    crash_at: Vec<String>,
    /// Share of SQS batches handed to a second invocation as well.
    #[arg(long, default_value_t = 0.05)]
    duplicate_delivery_rate: f64,
    /// Share of SQS batches held before their invocation …
    #[arg(long, default_value_t = 0.05)]
    delayed_delivery_rate: f64,
    /// … for up to this long (table seconds).
    #[arg(long, default_value_t = 30.0)]
    delivery_delay_max_secs: f64,
    /// Share of tasks-queue messages poisoned at their first receive: failed on every receive (in
    /// batchItemFailures, with the worker's retry visibility) until the redrive policy moves them to
    /// the DLQ, whose consumer closes their subtask.
    #[arg(long, default_value_t = 0.001)]
    poison_message_rate: f64,
    /// Share of the aggregator's stream records dropped.
    #[arg(long, default_value_t = 0.03)]
    stream_drop_rate: f64,
    /// Share of the aggregator's stream records delivered twice.
    #[arg(long, default_value_t = 0.05)]
    stream_duplicate_rate: f64,
    /// Share of failed POSTs (5xx or no answer) the client posts again with the same Idempotency-Key.
    #[arg(long, default_value_t = 0.5)]
    client_repost_rate: f64,

    /// Share of the store writes a function's store applied whose answer is lost (a 5xx or a
    /// timeout after DynamoDB applied it): the caller sees a transient error and retries.
    #[arg(long, default_value_t = 0.002)]
    store_answer_lost_rate: f64,
    /// Share of the store writes refused as throttled (ProvisionedThroughputExceededException after
    /// the adapter's own retries; journal writes included): nothing written, a transient error.
    #[arg(long, default_value_t = 0.002)]
    store_throttle_rate: f64,
    /// Share of the sends of two or more messages that go out in part (SendMessageBatch entries
    /// still failing): the first half sent, a transient error for the rest.
    #[arg(long, default_value_t = 0.05)]
    sqs_send_partial_rate: f64,

    /// Share of the approvals the operator decides whose decision it posts twice at once.
    #[arg(long, default_value_t = 0.2)]
    approval_twice_rate: f64,
    /// Share of the approvals the operator rejects (it approves the others).
    #[arg(long, default_value_t = 0.1)]
    approval_reject_rate: f64,
    /// How often the operator lists the pending approvals (table seconds).
    #[arg(long, default_value_t = 2.0)]
    operator_poll_secs: f64,

    /// Share of LLM requests answered 429 with Retry-After.
    #[arg(long, default_value_t = 0.02)]
    llm_rate_limit_rate: f64,
    /// The Retry-After of those 429s (table seconds).
    #[arg(long, default_value_t = 2.0)]
    llm_retry_after_secs: f64,
    /// Share of LLM requests answered 500 or 502.
    #[arg(long, default_value_t = 0.02)]
    llm_server_error_rate: f64,
    /// Share of LLM requests that hang …
    #[arg(long, default_value_t = 0.01)]
    llm_hang_rate: f64,
    /// … for this long (table seconds).
    #[arg(long, default_value_t = 600.0)]
    llm_hang_secs: f64,
    /// Share of LLM requests answered with a malformed body.
    #[arg(long, default_value_t = 0.02)]
    llm_malformed_rate: f64,
    /// Share of LLM answers cut off by the output limit (finish_reason length).
    #[arg(long, default_value_t = 0.02)]
    llm_truncation_rate: f64,
    /// Latency of every LLM answer (table milliseconds).
    #[arg(long, default_value_t = 0)]
    llm_latency_ms: u64,

    /// Share of tools/call requests answered with an error before reaching the tool server.
    #[arg(long, default_value_t = 0.03)]
    tool_error_rate: f64,
    /// Share of tools/call requests whose answer is held back …
    #[arg(long, default_value_t = 0.01)]
    tool_hang_rate: f64,
    /// … for this long (table seconds).
    #[arg(long, default_value_t = 60.0)]
    tool_hang_secs: f64,
    /// The tool server goes down at this tools/call …
    #[arg(long, default_value_t = 200)]
    tool_down_after_calls: u64,
    /// … for this long (table seconds; 0: never down).
    #[arg(long, default_value_t = 30.0)]
    tool_down_secs: f64,

    /// Longest wait, after the last client, for every conversation to end and every queue to
    /// drain (table seconds; default: the deadline plus max_receive_count tasks visibility
    /// timeouts plus a DLQ visibility timeout).
    #[arg(long)]
    settle_secs: Option<f64>,

    /// Kill the stack mid-run once this share of the conversations has been accepted (202), the way
    /// `kill -9` kills `serve` (every mapping, invocation, trigger, schedule and server dropped, API
    /// requests in flight unanswered, no drain), and start it again on the same emulator stack with
    /// its secrets and the shop's ledger; the verdict judges every conversation accepted before and
    /// after. Emulator only (in memory nothing outlives the process). E.g. 0.5.
    #[arg(long, value_name = "SHARE")]
    restart_at: Option<f64>,
    /// Fail the run when fewer than this share (0..1) of the subtasks end SUCCEEDED, counting every
    /// subtask but those still awaiting an operator and those the operator rejected (default: the
    /// share is shown, not judged).
    #[arg(long, value_name = "SHARE")]
    min_succeeded: Option<f64>,
}

fn rate(name: &str, r: f64) -> anyhow::Result<f64> {
    anyhow::ensure!((0.0..=1.0).contains(&r), "{name} must be between 0 and 1, not {r}");
    Ok(r)
}

fn seconds(name: &str, s: f64, scale: f64) -> anyhow::Result<Duration> {
    anyhow::ensure!(s.is_finite() && s >= 0.0, "{name} must be a number of seconds >= 0, not {s}");
    Ok(Duration::from_secs_f64(s * scale))
}

/// `POINT=RATE` → the point and its rate.
fn crash_override(spec: &str) -> anyhow::Result<(CrashPoint, f64)> {
    let (name, r) = spec.split_once('=').with_context(|| format!("--crash-at {spec:?} is not POINT=RATE"))?;
    let point = CrashPoint::ALL.iter().copied().find(|p| p.name() == name.trim()).with_context(|| {
        let known: Vec<&str> = CrashPoint::ALL.iter().map(|p| p.name()).collect();
        format!("--crash-at: unknown crash point {name:?} (known: {})", known.join(", "))
    })?;
    let r: f64 = r.trim().parse().with_context(|| format!("--crash-at {spec:?}: the rate is not a number"))?;
    Ok((point, rate("--crash-at", r)?))
}

fn chaos_settings(a: &Args) -> anyhow::Result<ChaosSettings> {
    let scale = a.time_scale;
    let mut crash: BTreeMap<CrashPoint, f64> =
        CrashPoint::ALL.iter().map(|p| Ok((*p, rate("--crash-rate", a.crash_rate)?))).collect::<anyhow::Result<_>>()?;
    for spec in &a.crash_at {
        let (point, r) = crash_override(spec)?;
        crash.insert(point, r);
    }
    Ok(ChaosSettings {
        seed: a.seed,
        crash,
        duplicate_delivery: rate("--duplicate-delivery-rate", a.duplicate_delivery_rate)?,
        delayed_delivery: rate("--delayed-delivery-rate", a.delayed_delivery_rate)?,
        delivery_delay_max: seconds("--delivery-delay-max-secs", a.delivery_delay_max_secs, scale)?,
        poison_message: rate("--poison-message-rate", a.poison_message_rate)?,
        stream_drop: rate("--stream-drop-rate", a.stream_drop_rate)?,
        stream_duplicate: rate("--stream-duplicate-rate", a.stream_duplicate_rate)?,
        client_repost: rate("--client-repost-rate", a.client_repost_rate)?,
        approval_twice: rate("--approval-twice-rate", a.approval_twice_rate)?,
        approval_reject: rate("--approval-reject-rate", a.approval_reject_rate)?,
        store_answer_lost: rate("--store-answer-lost-rate", a.store_answer_lost_rate)?,
        store_throttle: rate("--store-throttle-rate", a.store_throttle_rate)?,
        sqs_send_partial: rate("--sqs-send-partial-rate", a.sqs_send_partial_rate)?,
        tools: ToolFaults {
            error: rate("--tool-error-rate", a.tool_error_rate)?,
            hang: rate("--tool-hang-rate", a.tool_hang_rate)?,
            hang_for: seconds("--tool-hang-secs", a.tool_hang_secs, scale)?,
            down_after_calls: (a.tool_down_after_calls > 0).then_some(a.tool_down_after_calls),
            down_for: seconds("--tool-down-secs", a.tool_down_secs, scale)?,
        },
    })
}

/// The mock LLM, in this process, following the scripts, with its faults.
async fn start_mock(a: &Args) -> anyhow::Result<MockHandle> {
    let scale = a.time_scale;
    let faults = Faults {
        rate_limit: rate("--llm-rate-limit-rate", a.llm_rate_limit_rate)?,
        retry_after: Some(seconds("--llm-retry-after-secs", a.llm_retry_after_secs, scale)?)
            .filter(|d| !d.is_zero())
            .map(|d| d.max(Duration::from_millis(1))),
        server_error: rate("--llm-server-error-rate", a.llm_server_error_rate)?,
        hang: rate("--llm-hang-rate", a.llm_hang_rate)?,
        hang_for: seconds("--llm-hang-secs", a.llm_hang_secs, scale)?,
        malformed: rate("--llm-malformed-rate", a.llm_malformed_rate)?,
        truncated: rate("--llm-truncation-rate", a.llm_truncation_rate)?,
        spaced: true,
    };
    let total = faults.rate_limit + faults.server_error + faults.hang + faults.malformed + faults.truncated;
    anyhow::ensure!(total <= 1.0, "the LLM fault rates add up to {total}, more than 1");
    let agent =
        AgentConfig { plan_from_message: true, vary_reasons: true, reply_from_results: true, ..AgentConfig::default() };
    let latency = Duration::from_millis(a.llm_latency_ms).mul_f64(scale);
    let config = MockConfig {
        seed: a.seed,
        mode: Mode::Agent(agent),
        latency: if latency.is_zero() { Latency::None } else { Latency::Fixed(latency) },
        faults,
        record_bodies: false,
    };
    let (_, handle) = MockLlm::start(config).await.context("starting the mock LLM")?;
    Ok(handle)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // rmcp logs every request whose caller went away (a hung tool call cut by its timeout) as an error.
    swarm_adapters::telemetry::init_with_default("error,rmcp=off");
    let args = Args::parse();
    anyhow::ensure!(args.conversations > 0 && args.subtasks > 0, "--conversations and --subtasks must be at least 1");
    if let Some(share) = args.restart_at {
        anyhow::ensure!(
            args.aws_endpoint.is_some(),
            "--restart-at needs --aws-endpoint: in memory nothing outlives the stack, so a restart would lose everything"
        );
        anyhow::ensure!(
            share > 0.0 && share < 1.0,
            "--restart-at must be a share between 0 and 1 (exclusive), not {share}"
        );
    }
    rate("--refund-share", args.refund_share)?;
    if let Some(min) = args.min_succeeded {
        rate("--min-succeeded", min)?;
    }
    anyhow::ensure!(
        args.time_scale.is_finite() && args.time_scale > 0.0,
        "--time-scale must be a positive number, not {}",
        args.time_scale
    );
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let settings = chaos_settings(&args)?;
    let chaos = Arc::new(Chaos::new(settings).map_err(anyhow::Error::msg)?);
    let mock = start_mock(&args).await?;
    let scaled = Timings::standard().scaled(args.time_scale);
    let llm_timeout = scaled.llm.request_timeout.as_secs_f64().to_string();
    let base_url = mock.base_url();
    let llm = LlmConfig::from_lookup(|k| match k {
        "LLM_BASE_URL" => Some(base_url.clone()),
        "LLM_MODEL" => Some("mock-llm".into()),
        "LLM_TIMEOUT_SECS" => Some(llm_timeout.clone()),
        // Every function instance on AWS has its own client (16 calls each): the stack's one
        // client stands for all of them.
        "LLM_MAX_IN_FLIGHT" => Some("256".into()),
        _ => None,
    })?;
    let backend = match &args.aws_endpoint {
        Some(endpoint) => {
            let emulator = EmulatorOptions::new(endpoint.clone()).with_iam(args.iam);
            // A restart needs a stack that outlives its processes: one named for this run only.
            BackendChoice::Emulator(match args.restart_at {
                Some(_) => emulator.on_stack(&format!("chaos-{}-{}", std::process::id(), now_ms()), true)?,
                None => emulator,
            })
        }
        None => BackendChoice::Embedded,
    };
    let options = StackOptions {
        backend,
        time_scale: args.time_scale,
        worker_concurrency: args.concurrency,
        models: Some(build_models(&llm)?),
        chaos: Some(chaos.clone()),
        // Four customers carry the whole run: their per-minute limit is not what is measured here
        // (the highest CUSTOMER_CONVERSATIONS_PER_MINUTE the orchestrator's config accepts).
        limits: CustomerLimits { conversations_per_minute: 100_000, ..CustomerLimits::DEFAULT },
        ..StackOptions::default()
    };
    let stacks = Stacks::new(LocalStack::start(options.clone()).await?, options.clone());
    let result = run(&args, &stacks, &chaos, &mock, &command_line).await;
    let stopped = stacks.shutdown().await;
    if let (BackendChoice::Emulator(e), Some(_)) = (&options.backend, args.restart_at) {
        e.delete_stack().await;
    }
    mock.shutdown().await;
    stopped?;
    std::process::exit(result?.exit_code());
}

/// The run itself; answers how it ended.
async fn run(
    args: &Args,
    stacks: &Stacks,
    chaos: &Arc<Chaos>,
    mock: &MockHandle,
    command: &str,
) -> anyhow::Result<Outcome> {
    // On the emulator the audit polls the stream at most every AUDIT_POLL (its completion times are that coarse).
    let poll = args.aws_endpoint.as_ref().map(|_| AUDIT_POLL);
    // On the emulator the audit reads the table's stream with its own client: it outlives a restart.
    let stack = stacks.stack().await?;
    let audit = Arc::new(Audit::start(stack.change_feed().await.context("opening the audit's stream reader")?, poll));
    let started = Instant::now();
    let scenarios: Vec<Scenario> =
        (0..args.conversations).map(|i| Scenario::new(i, args.subtasks, has_refund(i, args.refund_share))).collect();
    let driver = Driver {
        args,
        stacks,
        timings: stack.timings().clone(),
        chaos,
        audit,
        operator: Operator::default(),
        backoff: Duration::from_secs(2).mul_f64(args.time_scale),
    };
    let notes = driver.notes(command)?;
    eprintln!("{}", notes[1]);
    let t = stack.timings().clone();
    eprintln!(
        "swarm-chaos: {} conversations × {} subtasks on {} (time scale {}, deadline {:.2} s)",
        args.conversations,
        args.subtasks,
        stack.describe_backend(),
        args.time_scale,
        t.conversation.deadline.as_secs_f64()
    );
    drop(stack);
    let clients = driver.drive(&scenarios, started).await?;
    let client_ids: BTreeSet<String> = clients.values().filter_map(|c| c.conversation_id.clone()).collect();
    driver.settle(&client_ids, started).await?;
    let quiet = (t.local.stream_poll * 4).max(Duration::from_secs(1));
    if !driver.audit.caught_up(quiet, CATCH_UP_TIMEOUT).await {
        eprintln!("!!! the audit did not catch up with the table's stream within {CATCH_UP_TIMEOUT:?}");
    }
    let wall = started.elapsed();
    let facts = driver.facts(clients, client_ids, &scenarios, mock, wall, notes).await?;
    let v = verdict(&facts);
    println!("{}", v.table);
    Ok(v.outcome)
}

/// One run's clients, operator and audit over the stack.
struct Driver<'a> {
    args: &'a Args,
    /// The stack, restarted mid-run with `--restart-at`.
    stacks: &'a Stacks,
    /// The stack's timing table (the same after a restart).
    timings: Timings,
    chaos: &'a Arc<Chaos>,
    audit: Arc<Audit>,
    operator: Operator,
    /// A client's and the operator's wait before posting again (2 table seconds).
    backoff: Duration,
}

impl Driver<'_> {
    /// The lines said before the table: how to reproduce the run, and what the operator does.
    fn notes(&self, command: &str) -> anyhow::Result<Vec<String>> {
        let a = self.args;
        Ok(vec![
            format!("reproduce: {command}"),
            format!(
                "consent: on (every refund waits for an operator); the operator lists pending approvals every {:.2} s, \
                 rejects a share of {}, posts a share of {} twice at once, and posts again after a 5xx or no answer",
                seconds("--operator-poll-secs", a.operator_poll_secs, a.time_scale)?.as_secs_f64(),
                a.approval_reject_rate,
                a.approval_twice_rate
            ),
        ])
    }

    /// Every scripted customer, at most `--in-flight` at once, each waiting for its conversation as
    /// long as the platform could take to end it, while the operator decides approvals; progress
    /// every [`PROGRESS_EVERY`]. Answers each client's outcome by scenario index.
    async fn drive(&self, scenarios: &[Scenario], started: Instant) -> anyhow::Result<BTreeMap<usize, ClientOutcome>> {
        let (args, stacks) = (self.args, self.stacks);
        let patience = Patience {
            wait: self.timings.conversation.deadline * 2,
            backoff: self.backoff,
            lease: self.timings.orchestrator.lease,
        };
        let operator_every = seconds("--operator-poll-secs", args.operator_poll_secs, args.time_scale)?;
        let clients_done = AtomicBool::new(false);
        let clients_done_notice = Notify::new();
        let slots = Arc::new(Semaphore::new(args.in_flight.max(1)));
        let clients = futures::future::join_all(scenarios.iter().map(|s| {
            let (slots, chaos, audit) = (slots.clone(), self.chaos.clone(), self.audit.clone());
            let key = format!("chaos-{}-{}", args.seed, s.index);
            async move {
                let _slot = slots.acquire_owned().await;
                (s.index, customer(stacks, &chaos, &audit, s, &key, patience).await)
            }
        }));
        let progress = async {
            loop {
                tokio::time::sleep(PROGRESS_EVERY).await;
                let log = self.audit.log();
                let terminal = log.conversations.values().filter(|c| c.is_terminal()).count();
                eprintln!(
                    "  {:>6.1} s: {} conversations in the store, {terminal} ended",
                    started.elapsed().as_secs_f64(),
                    log.conversations.len()
                );
            }
        };
        // The operator decides approvals while the clients run; the settle loop polls for it afterwards.
        let clients_then_stop = async {
            let c = clients.await;
            clients_done.store(true, Ordering::SeqCst);
            clients_done_notice.notify_one();
            c
        };
        let operator = self.operator.run(stacks, self.chaos, operator_every, self.backoff, &clients_done);
        let restart = async {
            match args.restart_at {
                Some(share) => {
                    let after = ((args.conversations as f64 * share).round() as usize).max(1);
                    stacks.restart_after(after, started, &clients_done_notice).await
                }
                None => Ok(()),
            }
        };
        let with_operator = async { tokio::join!(clients_then_stop, operator, restart) };
        Ok(tokio::select! {
            (c, (), restarted) = with_operator => {
                restarted?;
                c.into_iter().collect()
            }
            () = progress => unreachable!("progress never ends"),
        })
    }

    /// Waits until every conversation ended, no approval is pending and every queue is empty (the
    /// approved refunds ran), or the settle time passed (`--settle-secs`, by default the deadline
    /// plus `max_receive_count` tasks visibility timeouts plus a DLQ visibility timeout).
    async fn settle(&self, client_ids: &BTreeSet<String>, started: Instant) -> anyhow::Result<()> {
        let (stacks, t) = (self.stacks, &self.timings);
        let settle = match self.args.settle_secs {
            Some(s) => seconds("--settle-secs", s, self.args.time_scale)?,
            None => {
                t.conversation.deadline
                    + t.queues.tasks.visibility_timeout * t.queues.max_receive_count
                    + t.queues.dead_letters.visibility_timeout
            }
        };
        eprintln!(
            "  {:>6.1} s: every client is done; settling (at most {:.1} s)",
            started.elapsed().as_secs_f64(),
            settle.as_secs_f64()
        );
        let settle_until = Instant::now() + settle;
        loop {
            // The operator's poll first: a decision enqueues its refund before the queues are looked at.
            let pending = self.operator.poll_once(stacks, self.chaos, self.backoff).await;
            let decided = pending == Some(0) && self.operator.idle();
            let ended = self.all_ended(client_ids).await?;
            let (drained, depths) = self.queues_drained().await?;
            // Settled, unless an approved refund did not run: approved again, it is enqueued again.
            if ended && drained && decided && self.operator.approve_stuck_again(stacks, self.backoff).await == Some(0) {
                return Ok(());
            }
            if Instant::now() >= settle_until {
                eprintln!(
                    "!!! settle time over: every conversation ended: {ended}; approvals listed pending: {pending:?}; \
                     queues visible/in flight/delayed: {depths}"
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether every client's conversation, and every one the stream shows open, is terminal in the table.
    async fn all_ended(&self, client_ids: &BTreeSet<String>) -> anyhow::Result<bool> {
        let store = self.stacks.stack().await?.store();
        let log = self.audit.log();
        let mut ended = client_ids.iter().all(|id| log.conversations.get(id).is_some_and(|c| c.is_terminal()));
        // A conversation the stream shows open is checked in the table (it may never have been written).
        for (id, _) in log.conversations.iter().filter(|(_, c)| !c.is_terminal()) {
            let open = store.get_conversation(&ConversationId::from_trusted(id.clone())).await?;
            ended &= open.is_none_or(|c| c.status.is_terminal());
        }
        Ok(ended)
    }

    /// Whether every queue is empty, and their depths (visible/in flight/delayed) for a message.
    async fn queues_drained(&self) -> anyhow::Result<(bool, String)> {
        let mut drained = true;
        let mut depths = Vec::new();
        let stack = self.stacks.stack().await?;
        for q in Queue::ALL {
            let d = stack.queue_depth(q).await?;
            drained &= d.visible + d.in_flight + d.delayed == 0;
            depths.push(format!("{q:?} {}/{}/{}", d.visible, d.in_flight, d.delayed));
        }
        Ok((drained, depths.join(", ")))
    }

    /// Everything the verdict judges: the store, the ledger and the approvals at the end, the
    /// faults injected, the platform's counters.
    async fn facts(
        &self,
        clients: BTreeMap<usize, ClientOutcome>,
        client_ids: BTreeSet<String>,
        scenarios: &[Scenario],
        mock: &MockHandle,
        wall: Duration,
        notes: Vec<String>,
    ) -> anyhow::Result<RunFacts> {
        let (args, stack) = (self.args, self.stacks.stack().await?);
        let log = self.audit.log();
        let ids: BTreeSet<String> = log.conversations.keys().cloned().chain(client_ids).collect();
        let store = self.store_at_end(ids).await?;
        let operator = self.operator.log();
        let approvals_at_end = self.approvals_at_end(&operator, &store).await?;
        let refunds_asked = scenarios
            .iter()
            .filter_map(|s| s.refund_step.clone().map(|step| (s.index, (s.order_id.clone(), step))))
            .collect();
        Ok(RunFacts {
            backend: stack.describe_backend(),
            conversations_asked: args.conversations,
            subtasks_each: args.subtasks,
            time_scale: args.time_scale,
            deadline: self.timings.conversation.deadline,
            wall,
            faults: self.fault_lines(mock),
            clients,
            refunds_asked,
            audit: log,
            store,
            ledger: self.ledger(&stack).await?,
            tickets: self.tickets(&stack).await?,
            operator,
            approvals_at_end,
            concurrency: self.concurrency_lines().await?,
            platform: self.platform_lines().await?,
            dead_letters: self.dead_letter_facts(&stack).await?,
            unrecoverable: self
                .chaos
                .met()
                .into_iter()
                .filter(|(_, kinds)| kinds.iter().any(|k| !k.is_recoverable()))
                .map(|(key, _)| key)
                .collect(),
            store_faults: self.chaos.store_faults_by_op().into_iter().map(|(op, n)| (op.to_owned(), n)).collect(),
            notes,
            restart: args.restart_at.map(|_| self.stacks.restart_facts()),
            min_succeeded: args.min_succeeded,
        })
    }

    /// Each of `ids` in the table at the end, with its subtasks (`None`: absent).
    async fn store_at_end(&self, ids: BTreeSet<String>) -> anyhow::Result<BTreeMap<String, Option<Stored>>> {
        let store = self.stacks.stack().await?.store();
        let mut at_end = BTreeMap::new();
        for id in ids {
            let cid = ConversationId::from_trusted(id.clone());
            let entry = match store.get_conversation(&cid).await? {
                Some(c) => {
                    let current = store.list_subtasks(&cid).await?;
                    // A turn told after the customer's (a decision) is not what the run judges.
                    let history =
                        if c.author.is_customer() { None } else { Some(store.conversation_history(&cid).await?) };
                    Some(judged_turn(c, current, history))
                }
                None => None,
            };
            at_end.insert(id, entry);
        }
        Ok(at_end)
    }

    /// Every approval anyone knows of (the operator's log, the journals) and where it ended.
    async fn approvals_at_end(
        &self,
        operator: &OperatorLog,
        at_end: &BTreeMap<String, Option<Stored>>,
    ) -> anyhow::Result<BTreeMap<String, Option<Approval>>> {
        let journals = at_end
            .values()
            .flatten()
            .flat_map(|(_, subtasks)| subtasks.iter())
            .flat_map(|s| s.effects.iter())
            .filter_map(|e| e.approval_id.clone());
        let ids: BTreeSet<String> = operator.decided.keys().cloned().chain(journals).collect();
        let store = self.stacks.stack().await?.store();
        let mut approvals = BTreeMap::new();
        for id in ids {
            let approval = store.get_approval(&id).await?;
            approvals.insert(id, approval);
        }
        Ok(approvals)
    }

    /// The shop's ledger: every refund it made (one shop, carried over a restart).
    async fn ledger(&self, stack: &LocalStack) -> anyhow::Result<Vec<LedgerRefund>> {
        let refunds = stack.shop.refunds().await.context("reading the shop's refund ledger")?;
        Ok(refunds
            .into_iter()
            .map(|r| LedgerRefund {
                order_id: r.order_id,
                amount_cents: r.amount_cents,
                reason: r.reason,
                idempotency_key: r.idempotency_key,
            })
            .collect())
    }

    /// The shop's support tickets (one shop, carried over a restart).
    async fn tickets(&self, stack: &LocalStack) -> anyhow::Result<Vec<LedgerTicket>> {
        let tickets = stack.shop.tickets().await.context("reading the shop's tickets")?;
        Ok(tickets
            .into_iter()
            .map(|t| LedgerTicket { order_id: t.order_id, subject: t.subject, idempotency_key: t.idempotency_key })
            .collect())
    }

    /// Each fault kind: the platform's and the mock LLM's, with their opportunities.
    fn fault_lines(&self, mock: &MockHandle) -> Vec<FaultLine> {
        let (a, chaos) = (self.args, self.chaos);
        let mut faults: Vec<FaultLine> = chaos
            .counts()
            .into_iter()
            .map(|(kind, n)| FaultLine {
                name: kind.name(),
                rate: chaos.settings().rate(kind),
                opportunities: n.opportunities,
                injected: n.injected,
            })
            .collect();
        let stats = mock.stats();
        for (kind, name, r) in [
            ("rate_limit", "llm_429_retry_after", a.llm_rate_limit_rate),
            ("server_error", "llm_5xx", a.llm_server_error_rate),
            ("hang", "llm_hang", a.llm_hang_rate),
            ("malformed", "llm_malformed_body", a.llm_malformed_rate),
            ("truncated", "llm_truncated_length", a.llm_truncation_rate),
        ] {
            let injected = stats.by_kind.get(kind).copied().unwrap_or(0);
            faults.push(FaultLine { name: name.into(), rate: r, opportunities: stats.requests, injected });
        }
        faults
    }

    /// The dead-letter path: messages poisoned, received on a DLQ, acknowledged there, and the DLQ consumer's invocations.
    /// (Over every stack of the run: a restart keeps the queues' names.)
    async fn dead_letter_facts(&self, stack: &LocalStack) -> anyhow::Result<DeadLetterFacts> {
        let dlqs = [stack.queue_name(Queue::TasksDeadLetters), stack.queue_name(Queue::RefundDeadLetters)];
        let mut seen: BTreeMap<String, bool> = BTreeMap::new();
        for r in self.stacks.received().await?.into_iter().filter(|r| dlqs.contains(&r.queue.as_str())) {
            *seen.entry(r.message_id).or_default() |= !r.retried;
        }
        Ok(DeadLetterFacts {
            poisoned: self.chaos.poisoned_count() as u64,
            dead_lettered: seen.len() as u64,
            acknowledged: seen.values().filter(|a| **a).count() as u64,
            invocations: self.stacks.counters().await?.dead_letter_invocations,
        })
    }

    /// The platform counters worth a line (over every stack of the run).
    async fn platform_lines(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let c = self.stacks.counters().await?;
        Ok(vec![
            ("invocations killed at a crash point".to_owned(), c.killed_invocations),
            ("invocations cut at their timeout".to_owned(), c.timed_out_invocations),
            ("SQS invocations failed (whole batch retried)".to_owned(), c.failed_invocations),
            ("messages in batchItemFailures".to_owned(), c.batch_item_failures),
            ("DLQ consumer invocations".to_owned(), c.dead_letter_invocations),
            ("aggregator invocations".to_owned(), c.aggregator_invocations),
            ("aggregator invocations failed".to_owned(), c.aggregator_failures),
            ("stream batches dropped after MaximumRetryAttempts".to_owned(), c.stream_batches_dropped),
        ])
    }

    /// Each SQS-fed function's peak concurrency against its cap: `(function, peak, cap)`.
    async fn concurrency_lines(&self) -> anyhow::Result<Vec<(String, u64, u64)>> {
        let t = &self.timings;
        let peaks = self.stacks.peak_concurrency().await?;
        let peak = |f: Function| peaks.get(f.label()).copied().unwrap_or(0);
        let tasks_cap = self.args.concurrency.unwrap_or(t.worker.max_concurrency);
        Ok(vec![
            ("worker".to_owned(), peak(Function::Worker), tasks_cap as u64),
            ("refund-worker".to_owned(), peak(Function::RefundWorker), t.refund_worker.max_concurrency as u64),
            (
                "dlq-consumer (both DLQs)".to_owned(),
                peak(Function::DlqConsumer),
                2 * t.dlq_consumer.max_concurrency as u64,
            ),
        ])
    }
}

/// A conversation and its subtasks as the store holds them.
type Stored = (Conversation, Vec<SubtaskRecord>);
