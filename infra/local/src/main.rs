//! `swarm-local`: run the whole swarm on this machine — `ask` one message with live progress, `chat` turn by turn, or `serve` the HTTP API.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use orchestrator::api::AllowedOrigins;
use orchestrator::{Auth, OperatorAuth};
use swarm_adapters::telemetry;
use swarm_core::access::CustomerLimits;
use swarm_local::operator::{self, Action, Credential};
use swarm_local::progress::{Progress, verdict};
use swarm_local::{BackendChoice, EmulatorOptions, LocalStack, StackOptions};

/// The variables `ask` and `serve` read, for their `--help`.
const LLM_HELP: &str = "\
Environment:
  LLM_BASE_URL                  an OpenAI-compatible endpoint; unset: the offline model (deterministic, not an LLM)
  LLM_MODEL                     the model (required with LLM_BASE_URL)
  LLM_API_KEY                   the provider's key (none for a local server, or with LLM_AUTH=sigv4)
  LLM_AUTH                      bearer (default) or sigv4: sign with your AWS credentials (Amazon Bedrock)
  LLM_*                         every other setting: docs/llm-providers.md and docs/configuration.md
  OTEL_EXPORTER_OTLP_ENDPOINT   also send the spans to this collector, e.g. http://127.0.0.1:4318
  RUST_LOG                      log filter (default: warn)";

const ASK_EXAMPLE: &str = "

Examples:
  swarm-local ask --customer C104 \"Where is order A1029? Can I still use SAVE20?\"
  LLM_BASE_URL=https://api.deepseek.com/v1 LLM_API_KEY=sk-... LLM_MODEL=deepseek-chat \\
    swarm-local ask --trace --customer C109 \"Where is A1022, and is TECH100 valid for a keyboard?\"

  swarm-local ask --conversation <conversation_id> \"And is SAVE20 still valid?\"   (the next turn, on a running serve)

Exit status: 0 when every subtask answered (or waits for a person), 1 otherwise.";

const CHAT_EXAMPLE: &str = "

Each line is a turn of one conversation (the first starts it); its progress shows live and its
reply is printed before the next line is read. An empty line is ignored; Ctrl-D ends the chat and
prints the conversation's id.

Examples:
  swarm-local chat --customer C104
  printf 'Where is A1029?\\nAnd is SAVE20 valid?\\n' | swarm-local chat --url http://127.0.0.1:8080";

const SERVE_EXAMPLE: &str = "

Example:
  swarm-local serve --operator-token ops-0123456789abcdef=alice &
  curl -s -XPOST localhost:8080/conversations -d '{\"message\":\"Where is A1031?\",\"customer_id\":\"C106\"}'";

const APPROVALS_HELP: &str = "\
Environment:
  SWARM_OPERATOR_TOKEN   the operator token (instead of --operator-token)
  AWS_PROFILE, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
                         with --aws: the AWS SDK's credential chain (environment, profiles and SSO,
                         container and instance credentials)

Examples:
  SWARM_OPERATOR_TOKEN=ops-0123456789abcdef swarm-local approvals list
  AWS_PROFILE=operator swarm-local approvals --aws --url https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com approve <approval_id>";

const WIRING_EXAMPLE: &str = "\
Example:
  swarm-local wiring --json > wiring.json
  .venv/bin/python infra/aws/check_template.py template.yaml samconfig.toml --wiring wiring.json";

const ADMIN_HELP: &str = "\
Environment:
  AWS_PROFILE, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
                         the AWS SDK's credential chain and region (without --aws-endpoint)

Example:
  AWS_PROFILE=admin swarm-local admin map-customer sub:5c8e2f1a-0b3d-4e6f-8a9b-1c2d3e4f5a6b C104 --table swarm-dev-Table-1A2B3C";

/// Where `serve` listens by default (`ask --conversation`'s `--url`).
const DEFAULT_SERVE: &str = "http://127.0.0.1:8080";

#[derive(Parser)]
#[command(
    name = "swarm-local",
    version,
    about = "Run the lambda-swarm locally: API, orchestrator, queue, workers, aggregator, tool gateway and the demo shop in one process"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Settings both `ask` and `serve` take.
#[derive(Args)]
struct Platform {
    /// Run the AWS way: DynamoDB (with its stream) and SQS on this emulator endpoint
    /// (start one with `infra/aws/moto.sh start`), e.g. http://127.0.0.1:5000.
    /// Tables and queues get names unique to the run and are deleted at the end, unless --stack names them.
    #[arg(long, value_name = "URL")]
    aws_endpoint: Option<String>,
    /// With --aws-endpoint: keep the table and queues under this stack name across restarts (the
    /// table `<NAME>`, the queues `<NAME>-tasks`, `<NAME>-refund` and their `-dlq`s): created if
    /// missing, reused if present, never deleted at the end — stop or kill the process and the next
    /// start with the same name carries on what was in flight, as a deployed stack does.
    #[arg(long, value_name = "NAME", requires = "aws_endpoint")]
    stack: Option<String>,
    /// With --stack: delete the stack's table and queues first, and start clean.
    #[arg(long, requires = "stack")]
    fresh: bool,
    /// Conversations one customer may start per minute (past it: 429 with Retry-After), counted in the store.
    #[arg(long, default_value_t = CustomerLimits::DEFAULT.conversations_per_minute, value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=100_000), value_name = "N")]
    conversations_per_minute: u32,
    /// Most subtasks one conversation may fan out to (1-100).
    #[arg(long, default_value_t = CustomerLimits::DEFAULT.subtasks_per_conversation, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100), value_name = "N")]
    max_subtasks: usize,
    /// Concurrent worker invocations on the tasks queue (the event source mapping's
    /// MaximumConcurrency; default: the timing table's worker.max_concurrency).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Multiply every timing of the table (timeouts, visibility timeouts, the deadline…) by this.
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    time_scale: f64,
}

#[derive(Subcommand)]
enum Command {
    /// Answer one customer message, showing each subtask as it starts and ends.
    #[command(after_help = format!("{LLM_HELP}{ASK_EXAMPLE}"))]
    Ask {
        /// The customer's message.
        message: String,
        /// Customer the message is from: one of the demo shop's, C100–C111.
        #[arg(long, default_value = "C104")]
        customer: String,
        /// Print the conversation object (as `GET /conversations/{id}` answers it) as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// Seconds until the conversation's deadline (default: the timing table's conversation.deadline_secs; scaled by --time-scale like every timing).
        #[arg(long)]
        deadline: Option<u64>,
        /// Print the conversation's span tree as a waterfall (stderr) with the critical path
        /// marked; the spans also go to the collector named by OTEL_EXPORTER_OTLP_ENDPOINT, if set.
        #[arg(long)]
        trace: bool,
        /// Send the message as the next turn of this conversation of a running `serve` (--url);
        /// a turn still being answered is said (409) and not waited for.
        #[arg(long, value_name = "ID", conflicts_with_all = ["trace", "deadline", "aws_endpoint"])]
        conversation: Option<String>,
        /// With --conversation: the `serve` to send it to.
        #[arg(long, default_value = DEFAULT_SERVE, requires = "conversation")]
        url: String,
        /// With --conversation: a customer token of `serve --auth tokens --token` (sent as
        /// `Authorization: Bearer`; the token names the customer, so --customer is not sent).
        #[arg(long, env = "SWARM_CUSTOMER_TOKEN", hide_env_values = true, requires = "conversation")]
        token: Option<String>,
        #[command(flatten)]
        platform: Platform,
    },
    /// Talk with the swarm turn by turn: each line of stdin is the next message of one conversation.
    #[command(after_help = format!("{LLM_HELP}{CHAT_EXAMPLE}"))]
    Chat {
        /// Customer the messages are from: one of the demo shop's, C100–C111.
        #[arg(long, default_value = "C104")]
        customer: String,
        /// Talk to a running `serve` instead of a stack of this process.
        #[arg(long, value_name = "URL", conflicts_with = "aws_endpoint")]
        url: Option<String>,
        /// With --url: a customer token of `serve --auth tokens --token` (sent as `Authorization:
        /// Bearer`; the token names the customer, so --customer is not sent).
        #[arg(long, env = "SWARM_CUSTOMER_TOKEN", hide_env_values = true, requires = "url")]
        token: Option<String>,
        #[command(flatten)]
        platform: Platform,
    },
    /// Serve the HTTP API (`POST /conversations`, `GET /conversations/{id}`, `GET /health`,
    /// `GET /openapi.json`), the swarm's metrics (`GET /metrics`, Prometheus text) and the live console
    /// (`GET /console`, docs/console.md) on 127.0.0.1.
    #[command(after_help = format!("{LLM_HELP}{SERVE_EXAMPLE}"))]
    Serve {
        /// Port of the HTTP API.
        #[arg(long, default_value_t = 8080)]
        port: u16,
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
        /// An operator of the approvals API (`GET /approvals`, `POST /approvals/{id}`): `<token>=<name>`
        /// (repeatable); the name is recorded with each decision. Operator tokens are not customer
        /// tokens. Without one the approvals API answers 401.
        #[arg(long = "operator-token", value_name = "TOKEN=NAME")]
        operator_tokens: Vec<String>,
        /// Refunds above this amount (e.g. `797.5`) need an operator's approval (default: every refund does).
        #[arg(long, value_name = "AMOUNT", value_parser = amount_cents)]
        approval_above: Option<i64>,
        /// A browser origin allowed to call the API (CORS), repeatable; `*` for any. Default: the
        /// template's CorsAllowOrigins default, http://localhost:3000 and http://127.0.0.1:3000.
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origins: Vec<String>,
        #[command(flatten)]
        platform: Platform,
    },
    /// Decide refunds waiting for a person, through the approvals API: `serve`'s (an operator
    /// token) or the deployed stack's (`--aws`: requests signed with your AWS credentials).
    #[command(after_help = APPROVALS_HELP)]
    Approvals {
        #[command(subcommand)]
        action: ApprovalsAction,
        /// The API: `serve`'s, or the deployed stack's ApiUrl output.
        #[arg(long, default_value = "http://127.0.0.1:8080", global = true)]
        url: String,
        /// An operator token given to `serve --operator-token` (or SWARM_OPERATOR_TOKEN).
        #[arg(long, env = "SWARM_OPERATOR_TOKEN", hide_env_values = true, global = true)]
        operator_token: Option<String>,
        /// Sign every request with SigV4 (service execute-api), credentials from the AWS SDK's
        /// chain: the deployed API's approvals routes are IAM-authorised.
        #[arg(long, global = true)]
        aws: bool,
        /// With --aws: the region to sign for (default: the URL's, else AWS_REGION or the profile's).
        #[arg(long, global = true, value_name = "REGION")]
        region: Option<String>,
        /// Print the API's JSON answer on stdout instead of lines for people.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Print each function's wiring as the stack builds it: its variables (template.yaml's names),
    /// the queues it holds a sender for, the role token it holds.
    #[command(after_help = WIRING_EXAMPLE)]
    Wiring {
        /// As JSON: what infra/aws/check_template.py holds against the template.
        #[arg(long)]
        json: bool,
    },
    /// Operator commands on a deployed table (AWS credentials from the usual chain) or, with
    /// --aws-endpoint, on an emulator's table.
    #[command(after_help = ADMIN_HELP)]
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
        /// Use the table on this AWS emulator endpoint instead of AWS, e.g. http://127.0.0.1:5000.
        #[arg(long, value_name = "URL", global = true)]
        aws_endpoint: Option<String>,
    },
}

#[derive(Subcommand)]
enum ApprovalsAction {
    /// List approvals, newest first, a page at a time.
    List {
        /// pending, approved, rejected, expired, executed or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Most approvals on the page (1-100; the API's default: 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Where to go on from: the `more: --cursor …` a page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Approve one: its refund runs once, as recorded.
    Approve { id: String },
    /// Reject one: it never runs.
    Reject { id: String },
}

#[derive(Subcommand)]
// The command names are the operator's words (`map-customer`, `show-customer`, `unmap-customer`).
#[allow(clippy::enum_variant_names)]
enum AdminCommand {
    /// Link an authenticated identity to a customer: `sub:<JWT sub>` or `iam:<IAM unique id>`
    /// (`AROA…:<session>` for one session of a role, `AROA…` for every session).
    MapCustomer {
        /// The identity, e.g. sub:5c8e2f1a-0b3d-4e6f-8a9b-1c2d3e4f5a6b or iam:AROAEXAMPLEID:support-bot.
        principal: String,
        /// The customer it acts for (stored in canonical, upper-case form).
        customer: String,
        /// The stack's table (its `TableName` output).
        #[arg(long)]
        table: String,
    },
    /// Print the customer an identity is linked to.
    ShowCustomer {
        principal: String,
        #[arg(long)]
        table: String,
    },
    /// Remove an identity's link (its requests are then refused with 403).
    UnmapCustomer {
        principal: String,
        #[arg(long)]
        table: String,
    },
}

/// `swarm-local serve --auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LocalAuth {
    None,
    Tokens,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => code,
        Err(e) => {
            // One line for people: the error and its causes, never a raw body.
            eprintln!("swarm-local: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let telemetry = telemetry::install(telemetry::Options {
        default_level: "warn".into(),
        config: telemetry::TelemetryConfig::from_env("swarm-local")?,
        keep_spans: matches!(cli.command, Command::Ask { trace: true, .. }),
        metrics: match cli.command {
            Command::Serve { .. } => telemetry::MetricsSink::Prometheus,
            _ => telemetry::MetricsSink::Off,
        },
    })?;
    match cli.command {
        Command::Admin { command, aws_endpoint } => admin(command, aws_endpoint).await.map(|()| ExitCode::SUCCESS),
        Command::Approvals { action, url, operator_token, aws, region, json } => {
            let credential = if aws {
                let region = operator::signing_region(region.as_deref(), &url).await?;
                Credential::Iam(swarm_adapters::sigv4::SigV4Signer::from_env(operator::EXECUTE_API, &region))
            } else {
                Credential::Token(operator_token.context(
                    "give --operator-token (or SWARM_OPERATOR_TOKEN): an operator token of `serve --operator-token`; or --aws for the deployed API",
                )?)
            };
            let action = match action {
                ApprovalsAction::List { status, limit, cursor } => Action::List { status, limit, cursor },
                ApprovalsAction::Approve { id } => Action::Approve(id),
                ApprovalsAction::Reject { id } => Action::Reject(id),
            };
            // A decision is told to the customer as a turn: read how many turns there are first,
            // so the one told after it is found (the refund runs asynchronously: waited for).
            let conversation = match &action {
                Action::Approve(id) | Action::Reject(id) => operator::conversation_of(id).map(str::to_owned),
                _ => None,
            };
            // An API without the operator's read (an older deployment) is not waited on.
            let before = match &conversation {
                Some(c) => operator::call(&url, &credential, &Action::View(c.clone()))
                    .await
                    .ok()
                    .and_then(|v| v["turns"].as_array().map(Vec::len)),
                None => None,
            };
            let answer = operator::call(&url, &credential, &action).await?;
            if json {
                println!("{answer}");
            } else {
                operator::describe(&action, &answer).iter().for_each(|line| println!("{line}"));
            }
            if let (Some(c), Some(before)) = (conversation, before) {
                match operator::await_told_turn(&url, &credential, &c, before, TOLD_WITHIN).await? {
                    Some(turn) if json => println!("{turn}"),
                    Some(turn) => {
                        println!("the customer is told:");
                        operator::told_lines(&turn).iter().for_each(|line| println!("  {line}"));
                    }
                    None => println!(
                        "the customer is not told yet (nothing within {} s); read it later with GET /operator/conversations/{c}",
                        TOLD_WITHIN.as_secs()
                    ),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Ask { message, customer, conversation: Some(id), url, token, json, .. } => {
            let customer = known_customer(&customer)?;
            swarm_local::chat::ask_follow_up(&url, token, &id, &message, &customer, json).await
        }
        Command::Chat { customer, url, token, platform } => {
            chat(&known_customer(&customer)?, url, token, &platform).await
        }
        Command::Ask { message, customer, json, deadline, trace, platform, .. } => {
            let customer = known_customer(&customer)?;
            check_llm().await?;
            // With a collector configured, spans leave every second (and once more at the end).
            let _flushing = telemetry.spawn_periodic_flush(Duration::from_secs(1));
            let mut options = options(&platform)?;
            if let Some(secs) = deadline {
                options.timings.conversation.deadline = Duration::from_secs(secs);
            }
            let traced = trace.then_some(&telemetry);
            let answer = ask(options, &message, &customer, json, traced).await;
            telemetry.flush().await;
            answer
        }
        Command::Serve {
            port,
            auth,
            tokens_file,
            tokens,
            operator_tokens,
            approval_above,
            allow_origins,
            platform,
        } => {
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
            let operators = if operator_tokens.is_empty() {
                OperatorAuth::Nobody
            } else {
                let mut pairs = Vec::new();
                for (n, entry) in operator_tokens.iter().enumerate() {
                    pairs.push(
                        orchestrator::api::TokenTable::entry(entry)
                            .map_err(|e| anyhow::anyhow!("--operator-token number {}: {e}", n + 1))?,
                    );
                }
                let table = orchestrator::api::TokenTable::operators(pairs)
                    .map_err(|e| anyhow::anyhow!("operator tokens: {e}"))?;
                OperatorAuth::Tokens(Arc::new(table))
            };
            let origins = if allow_origins.is_empty() {
                AllowedOrigins::defaults()
            } else {
                AllowedOrigins::parse(&allow_origins).map_err(|e| anyhow::anyhow!("--allow-origin: {e}"))?
            };
            let _flushing = telemetry.spawn_periodic_flush(Duration::from_secs(1));
            let mut options = options(&platform)?;
            options.refund_approval_above_cents = approval_above;
            let served = serve(options, port, auth, operators, origins, &telemetry).await;
            telemetry.flush().await;
            served.map(|()| ExitCode::SUCCESS)
        }
        Command::Wiring { json } => print_wiring(json).map(|()| ExitCode::SUCCESS),
    }
}

/// `customer` in canonical form when the demo shop knows it.
/// Errors: a customer the demo shop has no record of (its orders would all read "not found").
fn known_customer(customer: &str) -> anyhow::Result<String> {
    let canonical = swarm_core::access::canonical_customer_id(customer)
        .map_err(|e| anyhow::anyhow!("--customer {customer:?}: {e}"))?;
    let data = shop_tools::data::ShopData::from_json(shop_tools::shop::DEMO_SHOP_JSON)
        .map_err(|e| anyhow::anyhow!("the demo shop's data: {e}"))?;
    let ids: Vec<&str> = data.customers.iter().map(|c| c.customer_id.as_str()).collect();
    anyhow::ensure!(
        ids.contains(&canonical.as_str()),
        "unknown customer {canonical}: the demo shop's customers are {}",
        ids.join(", ")
    );
    Ok(canonical)
}

/// Longest wait for the provider's answer to the preflight request.
const LLM_PREFLIGHT: Duration = Duration::from_secs(20);
/// Longest wait of `approvals approve|reject` for the turn that tells the customer (an approved
/// refund runs through the refund worker first).
const TOLD_WITHIN: Duration = Duration::from_secs(60);

/// Asks the configured LLM (when `LLM_BASE_URL` is set) one tiny question before anything starts,
/// so a wrong URL, key or model stops `ask` with one message instead of a run of failures.
async fn check_llm() -> anyhow::Result<()> {
    use swarm_core::ports::{ChatMessage, ChatRequest, Purpose};
    use tracing::instrument::WithSubscriber as _;
    let models = swarm_local::models_from_env()?;
    if models.main.is_offline() {
        return Ok(());
    }
    let request = ChatRequest {
        purpose: Purpose::Work,
        messages: vec![ChatMessage::User { content: "Reply with the word OK.".into() }],
        tools: vec![],
        max_tokens: Some(16),
        tool_choice: Default::default(),
    };
    // The client's own warning would only repeat the message below.
    let answer = tokio::time::timeout(LLM_PREFLIGHT, models.main.complete(&request))
        .with_subscriber(tracing::subscriber::NoSubscriber::default())
        .await;
    let problem = match answer {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {LLM_PREFLIGHT:?}"),
    };
    anyhow::bail!(
        "the LLM {} did not answer a first request: {problem}. Check LLM_BASE_URL, LLM_MODEL and LLM_API_KEY (swarm-local ask --help)",
        models.main.label()
    )
}

async fn admin(command: AdminCommand, endpoint: Option<String>) -> anyhow::Result<()> {
    use swarm_local::admin::{TableAt, map_customer, show_customer, unmap_customer};
    let at = |table: String| TableAt { table, endpoint: endpoint.clone() };
    match command {
        AdminCommand::MapCustomer { principal, customer, table } => {
            let store = at(table).store().await;
            let customer = map_customer(&store, &principal, &customer).await?;
            println!("{principal} -> {customer}");
        }
        AdminCommand::ShowCustomer { principal, table } => {
            let store = at(table).store().await;
            match show_customer(&store, &principal).await? {
                Some(customer) => println!("{principal} -> {customer}"),
                None => anyhow::bail!("{principal} is not linked to a customer"),
            }
        }
        AdminCommand::UnmapCustomer { principal, table } => {
            let store = at(table).store().await;
            let removed = unmap_customer(&store, &principal).await?;
            println!("{principal}: {}", if removed { "link removed" } else { "was not linked" });
        }
    }
    Ok(())
}

/// `--approval-above`: a decimal amount of the order's currency (the CLI's edge) as whole cents.
fn amount_cents(text: &str) -> Result<i64, String> {
    match text.trim().parse::<f64>() {
        Ok(a) if a.is_finite() && (0.0..1e13).contains(&a) => Ok((a * 100.0).round() as i64),
        _ => Err(format!("{text:?} is not an amount of 0 or more, e.g. 797.5")),
    }
}

/// `swarm-local wiring [--json]`.
fn print_wiring(json: bool) -> anyhow::Result<()> {
    let wiring = swarm_local::wiring::describe()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&wiring)?);
        return Ok(());
    }
    let list = |v: &serde_json::Value| {
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", ")).unwrap_or_default()
    };
    for (name, f) in wiring["functions"].as_object().into_iter().flatten() {
        let token = f["token"]["role"].as_str().map_or("none".to_owned(), |r| format!("{r}'s"));
        println!("{name}\n  sends to   {}\n  token      {token}\n  variables  {}", list(&f["sends"]), list(&f["env"]));
    }
    println!("(configured in process, not from variables: {})", list(&wiring["servers"]));
    Ok(())
}

fn options(platform: &Platform) -> anyhow::Result<StackOptions> {
    let backend = match &platform.aws_endpoint {
        Some(endpoint) => {
            let options = EmulatorOptions::new(endpoint.clone());
            BackendChoice::Emulator(match &platform.stack {
                Some(name) => options.on_stack(name, platform.fresh)?,
                None => options,
            })
        }
        None => BackendChoice::Embedded,
    };
    Ok(StackOptions {
        backend,
        worker_concurrency: platform.concurrency,
        time_scale: platform.time_scale,
        limits: CustomerLimits {
            conversations_per_minute: platform.conversations_per_minute,
            subtasks_per_conversation: platform.max_subtasks,
        },
        ..StackOptions::default()
    })
}

/// Model label for people: the offline model says what it is.
fn model_line(stack: &LocalStack) -> String {
    if stack.offline {
        "offline model (no LLM_BASE_URL set; deterministic, not an LLM)".to_owned()
    } else {
        stack.model_label.clone()
    }
}

async fn ask(
    options: StackOptions,
    message: &str,
    customer: &str,
    json: bool,
    trace: Option<&telemetry::Telemetry>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let concurrency = options.worker_concurrency.unwrap_or(options.timings.worker.max_concurrency);
    let stack = LocalStack::start(options).await?;
    eprintln!(
        "lambda-swarm local · {} · model: {} · {} workers · customer {}",
        stack.describe_backend(),
        model_line(&stack),
        concurrency,
        customer
    );
    let outcome = ask_on(&stack, message, customer).await;
    let waterfall = match (trace, &outcome) {
        (Some(telemetry), Ok(view)) => Some(conversation_trace(&stack, telemetry, view).await),
        _ => None,
    };
    let c = stack.counters().snapshot();
    let platform = format!(
        "── platform: {} worker invocations ({} messages), {} batch item failures, {} timed out, {} dead-letter invocations · stream: {} records, {} passed the filter, {} aggregator invocations, {} batches dropped",
        c.worker_invocations,
        c.worker_records,
        c.batch_item_failures,
        c.timed_out_invocations,
        c.dead_letter_invocations,
        c.stream_records,
        c.stream_records_matched,
        c.aggregator_invocations,
        c.stream_batches_dropped
    );
    stack.shutdown().await;
    let view = outcome?;
    swarm_local::chat::print_outcome(&view, json, started)?;
    eprintln!("{platform}");
    if let Some(waterfall) = waterfall {
        eprintln!("\n{waterfall}");
    }
    match verdict(&view) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(why) => {
            eprintln!("swarm-local: {why}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `swarm-local chat`: on the `serve` at `url`, or on a stack of this process.
async fn chat(
    customer: &str,
    url: Option<String>,
    token: Option<String>,
    platform: &Platform,
) -> anyhow::Result<ExitCode> {
    use swarm_local::chat::{Front, chat, stdin_lines};
    if let Some(url) = url {
        let who = if token.is_some() { "the token's customer".to_owned() } else { format!("customer {customer}") };
        eprintln!("lambda-swarm chat · {url} · {who} · Ctrl-D ends it");
        return chat(&Front::serve(&url, token)?, customer, stdin_lines()).await;
    }
    check_llm().await?;
    let stack = LocalStack::start(options(platform)?).await?;
    eprintln!(
        "lambda-swarm chat · {} · model: {} · customer {customer} · Ctrl-D ends it",
        stack.describe_backend(),
        model_line(&stack)
    );
    let chatted = chat(&Front::Stack(&stack), customer, stdin_lines()).await;
    stack.shutdown().await;
    chatted
}

/// How long `--trace` waits for the conversation's trace to be whole (the spans that close just
/// after the reply: the aggregator's, the worker that triggered it).
const TRACE_PATIENCE: Duration = Duration::from_secs(5);

/// The conversation's spans as a waterfall: its trace is the one its item carries (the request's),
/// collected until it is whole ([`swarm_local::waterfall::collect`]).
async fn conversation_trace(
    stack: &LocalStack,
    telemetry: &telemetry::Telemetry,
    view: &swarm_core::view::ConversationView,
) -> String {
    let id = swarm_core::domain::ConversationId::from_trusted(view.conversation_id.clone());
    let conversation = stack.store().get_conversation(&id).await.ok().flatten();
    let Some(trace_id) = conversation.and_then(|c| c.trace_parent).and_then(|t| t.split('-').nth(1).map(str::to_owned))
    else {
        return "(no trace: the conversation carries no trace context)".to_owned();
    };
    let last = if view.status.is_terminal() { "aggregate" } else { "" };
    let (spans, _whole) =
        swarm_local::waterfall::collect(|| telemetry.take_spans(), &trace_id, last, TRACE_PATIENCE).await;
    swarm_local::waterfall::render(&spans)
}

/// Posts the message and follows the conversation to its end, printing its progress.
async fn ask_on(
    stack: &LocalStack,
    message: &str,
    customer: &str,
) -> anyhow::Result<swarm_core::view::ConversationView> {
    let (status, body) = stack.post_conversation(message, customer, None).await?;
    if status != 202 {
        let said = body["detail"].as_str().or(body["error"]["message"].as_str()).unwrap_or("no reason given");
        anyhow::bail!("the API refused the message ({status}): {said}");
    }
    let id = body["conversation_id"].as_str().context("no conversation_id in the answer")?.to_owned();
    let mut progress = Progress::default();
    // The client's patience: the conversation's deadline, and a minute for the reply.
    let patience = stack.timings().conversation.deadline + Duration::from_secs(60);
    stack.wait_until(&id, patience, |view| progress.lines(view).iter().for_each(|l| eprintln!("{l}"))).await
}

async fn serve(
    options: StackOptions,
    port: u16,
    auth: Auth,
    operators: OperatorAuth,
    origins: AllowedOrigins,
    telemetry: &telemetry::Telemetry,
) -> anyhow::Result<()> {
    let stack = LocalStack::start(options).await?;
    let callers = match &auth {
        Auth::Tokens(table) => format!("Authorization: Bearer <token> ({} tokens)", table.len()),
        _ => "no authentication: the body's customer_id".to_owned(),
    };
    let approvals = match &operators {
        OperatorAuth::Tokens(table) => {
            format!("GET /approvals, POST /approvals/{{id}} ({} operator tokens)", table.len())
        }
        _ => "off (give --operator-token <token>=<name>)".to_owned(),
    };
    let metrics = telemetry.clone();
    let app = swarm_local::console::app(&stack, auth, operators, &origins).route(
        "/metrics",
        axum::routing::get(move || async move {
            let text = metrics.prometheus().unwrap_or_default();
            ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}"))?;
    let addr = listener.local_addr()?;
    println!("lambda-swarm local stack · {}", stack.describe_backend());
    println!(
        "  API          http://{addr}/conversations   (POST {{\"message\", \"customer_id\"}}, GET /conversations/{{id}})"
    );
    println!("  openai       http://{addr}/v1   (model lambda-swarm: POST /v1/chat/completions, GET /v1/models)");
    println!("  events       http://{addr}/conversations/{{id}}/events   (text/event-stream; Last-Event-ID resumes)");
    println!("  callers      {callers}");
    println!("  health       http://{addr}/health   · contract http://{addr}/openapi.json");
    println!("  browsers     CORS for {}", origins.origins().join(", "));
    println!("  metrics      http://{addr}/metrics   (Prometheus text)");
    println!("  console      http://{addr}/console   (live conversations and approvals; docs/console.md)");
    println!("  approvals    {approvals}");
    let memory = if stack.is_embedded() {
        "in memory: conversations, queues and approvals live in this process; stop it and they are gone (--aws-endpoint <URL> --stack <NAME> keeps them on the emulator across restarts)"
    } else {
        "on the emulator (see the backend line); the demo shop's orders and refunds live in this process and start afresh"
    };
    println!("  state        {memory}");
    println!("  tool gateway {}", stack.gateway_url);
    println!("  demo shop    {}", stack.shop_url);
    println!("  model        {}", model_line(&stack));
    println!("Ctrl-C stops it.");
    // Hyper's own refusals of a request head (414, 431, 400) in the API's error shape.
    let served = axum::serve(swarm_local::serve_edges::EdgeListener(listener), app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    // The emulator's table and queues go with the server.
    stack.shutdown().await;
    Ok(served?)
}
