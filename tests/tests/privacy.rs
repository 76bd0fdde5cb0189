//! Customer text never reaches the logs: a conversation through the whole local stack takes the unusable-plan path (the model's first plan names a tool after the customer's words), the approval path (a refund whose model-written reason quotes the customer waits for a person) and the provider-error path (the LLM provider refuses a subtask), with telemetry installed as a Lambda installs it (JSON logs at the template's default level, spans recorded); every log line and every span's name and attributes are scanned for the customer's words. Runs on both backends.
//!
//! Logs go to the process's stderr, past the test harness, so each run is a child process of this
//! test binary (the ignored `child` test) whose stderr the parent reads; the child prints its spans'
//! texts there too once the conversation has finished.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use swarm_adapters::telemetry::{self, MetricsSink, Options, TelemetryConfig, TraceExport};
use swarm_core::domain::SubtaskStatus;
use swarm_core::llm::Models;
use swarm_core::ports::{ChatModel, ChatRequest, ChatResponse, LlmError, Purpose};
use swarm_local::{BackendChoice, EmulatorOptions, LocalStack, StackOptions};
use swarm_tests::{over_offline, with_plan};

/// The customer's own words: nothing else in the run says them.
const WORDS: &str = "Zephyrine Quillback";
const MESSAGE: &str = "My parrot Zephyrine Quillback chewed the earbuds of order A1033, please refund it. \
                       And where is order A1029?";
/// The child's environment variable: the backend it runs on.
const CHILD: &str = "SWARM_PRIVACY_CHILD";
/// Set in the child's environment: the provider's error quotes the customer's message.
const PROVIDER_ECHO: &str = "SWARM_PRIVACY_PROVIDER_ECHO";
/// Marks the child's span lines on its stderr.
const SPAN_LINE: &str = "PRIVACY-SPAN ";

/// The model following the plan, whose refund reason quotes the customer (as models do), and
/// whose first plan names a tool after the customer's words (unusable: planned again).
struct QuotingTheCustomer {
    inner: Arc<dyn ChatModel>,
    planned_once: AtomicBool,
}

#[async_trait]
impl ChatModel for QuotingTheCustomer {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut response = self.inner.complete(request).await?;
        if request.purpose == Purpose::Plan && !self.planned_once.swap(true, Ordering::SeqCst) {
            let unusable = serde_json::json!({"subtasks": [
                {"id": "w01", "instruction": "Refund order A1033.", "tools": [format!("shop__{WORDS}")]}
            ]});
            response.content = Some(unusable.to_string());
            return Ok(response);
        }
        for call in response.tool_calls.iter_mut().filter(|c| c.name == "shop__refund") {
            let mut args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
            args["reason"] = serde_json::json!(format!("the customer says: my parrot {WORDS} chewed the earbuds"));
            call.arguments = args.to_string();
        }
        Ok(response)
    }

    fn label(&self) -> String {
        self.inner.label()
    }

    fn is_offline(&self) -> bool {
        true
    }
}

fn models() -> Models {
    let plan = serde_json::json!({"subtasks": [
        {"id": "w01", "instruction": format!("Refund order A1033; the customer's reason: \"my parrot {WORDS} chewed the earbuds\"."),
         "tools": ["shop__get_order", "shop__refund"]},
        {"id": "w02", "instruction": "Where is the parcel of order A1029?", "tools": ["shop__track_shipment"]}
    ]})
    .to_string();
    // What providers answer a request they refuse; some quote what they refused.
    let refused = if std::env::var(PROVIDER_ECHO).is_ok() {
        format!("Invalid request: content policy violation in message 'My parrot {WORDS} chewed...'")
    } else {
        "Invalid 'messages[1].content': the request was rejected by the provider's safety system".to_owned()
    };
    let scripted = with_plan(over_offline(), &plan)
        .fail_work_on("A1029", Err(LlmError::Permanent { status: 400, message: refused }));
    Models::single(Arc::new(QuotingTheCustomer { inner: Arc::new(scripted), planned_once: AtomicBool::new(false) }))
}

/// The child: one conversation on `backend`, then every span's texts on stderr.
async fn converse_and_print_spans(backend: BackendChoice) {
    let telemetry = telemetry::install(Options {
        default_level: "info,rmcp=warn".into(),
        config: TelemetryConfig { service: "privacy-test".into(), traces: TraceExport::Off, on_lambda: false },
        keep_spans: true,
        metrics: MetricsSink::Off,
    })
    .expect("telemetry installs");
    let stack =
        LocalStack::start(StackOptions { backend, models: Some(models()), ..StackOptions::default() }).await.unwrap();
    let (status, created) = stack.post_conversation(MESSAGE, "C108", None).await.unwrap();
    assert_eq!(status, 202);
    let id = created["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    // Both paths ran (the assertions print no customer text: the parent reads this stderr).
    let by_id = |id: &str| view.subtasks.iter().find(|s| s.id == id).map(|s| s.status);
    assert_eq!(by_id("w01"), Some(SubtaskStatus::AwaitingApproval), "the approval path ran");
    assert_eq!(by_id("w02"), Some(SubtaskStatus::Failed), "the provider-error path ran");
    assert_eq!(view.approvals.len(), 1, "one approval asked for");
    stack.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut err = std::io::stderr().lock();
    for span in telemetry.take_spans() {
        let texts = std::iter::once(span.name.clone()).chain(span.attributes.iter().map(|(k, v)| format!("{k}={v}")));
        for text in texts {
            let _ = writeln!(err, "{SPAN_LINE}{}", text.replace('\n', " "));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the privacy tests; run by them"]
async fn child() {
    let backend = match std::env::var(CHILD).as_deref() {
        Ok("emulator") => BackendChoice::Emulator(EmulatorOptions::new(
            std::env::var("SWARM_AWS_ENDPOINT").expect("emulator endpoint"),
        )),
        _ => BackendChoice::Embedded,
    };
    converse_and_print_spans(backend).await;
}

/// Runs the child on `backend` with telemetry configured as the template deploys it (JSON logs,
/// `ApplicationLogLevel` INFO); answers its stderr lines after checking it passed.
fn run_child(backend: &str, provider_echo: bool) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut command = std::process::Command::new(exe);
    if provider_echo {
        command.env(PROVIDER_ECHO, "1");
    }
    let output = command
        .args(["--ignored", "--exact", "child", "--test-threads", "1"])
        .env(CHILD, backend)
        .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "the child failed on {backend}:\n{stdout}\n{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with(SPAN_LINE)), "the child recorded no span on {backend}");
    assert!(stderr.lines().any(|l| l.starts_with('{')), "the child logged no JSON line on {backend}");
    stderr.lines().chain(stdout.lines()).map(str::to_owned).collect()
}

fn no_customer_words_in(backend: &str, provider_echo: bool) {
    let lines = run_child(backend, provider_echo);
    assert!(
        lines.iter().any(|l| l.contains("unusable plan")),
        "the unusable first plan was logged (by its class) on {backend}"
    );
    let leaks: Vec<&String> = lines.iter().filter(|l| l.contains("Zephyrine") || l.contains("Quillback")).collect();
    assert!(
        leaks.is_empty(),
        "the customer's words reached {} log line(s) or span(s) on {backend}:\n{leaks:#?}",
        leaks.len()
    );
}

#[test]
fn the_customers_words_reach_no_log_line_and_no_span_on_the_embedded_backend() {
    no_customer_words_in("embedded", false);
}

#[test]
fn the_customers_words_reach_no_log_line_and_no_span_on_the_emulator() {
    if swarm_tests::emulator_endpoint("privacy on the emulator").is_some() {
        no_customer_words_in("emulator", false);
    }
}

#[test]
fn a_provider_error_quoting_the_customer_reaches_no_log_line_and_no_span_on_the_embedded_backend() {
    no_customer_words_in("embedded", true);
}

#[test]
fn a_provider_error_quoting_the_customer_reaches_no_log_line_and_no_span_on_the_emulator() {
    if swarm_tests::emulator_endpoint("privacy on the emulator").is_some() {
        no_customer_words_in("emulator", true);
    }
}
