//! The orchestrator binary under a stand-in of Lambda's Runtime and Extensions APIs: the answer is posted before the span export runs (the internal extension flushes after the response, so no API call waits on the export), the extension asks for its next event only once the export is done (nothing is lost to the freeze), and every JSON log line of the invocation names its request, trace and cold start.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

mod common;
use common::{Running, lambda_env, register, serve};

const REQUEST_ID: &str = "8476a536-e9f4-11e8-9739-2dfe598c3fcd";
/// How long the stand-in collector takes to answer an export.
const EXPORT_TAKES: Duration = Duration::from_millis(1500);

/// When each thing happened, as the stand-ins saw it.
#[derive(Default)]
struct Seen {
    invocations_served: u32,
    extension_events: u32,
    response: Option<(Instant, Value)>,
    export_started: Option<Instant>,
    export_done: Option<Instant>,
    next_after_flush: Option<Instant>,
}

type Shared = Arc<Mutex<Seen>>;

/// The extension's next event: one INVOKE, then (once flushed) nothing more.
async fn extension_next(State(seen): State<Shared>) -> axum::response::Response {
    let first = {
        let mut s = seen.lock().unwrap();
        s.extension_events += 1;
        if s.extension_events > 1 {
            s.next_after_flush = Some(Instant::now());
        }
        s.extension_events == 1
    };
    if !first {
        std::future::pending::<()>().await;
    }
    let deadline = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 30_000;
    axum::Json(json!({
        "eventType": "INVOKE",
        "deadlineMs": deadline,
        "requestId": REQUEST_ID,
        "invokedFunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:orchestrator-fn",
        "tracing": {"type": "X-Amzn-Trace-Id", "value": "Root=1-6774a580-3c1b2a9d0e4f5a6b7c8d9e0f;Parent=53995c3f42cd8ad8;Sampled=1"}
    }))
    .into_response()
}

/// The runtime's next invocation: one API Gateway request, then nothing more.
async fn invocation_next(State(seen): State<Shared>) -> axum::response::Response {
    let first = {
        let mut s = seen.lock().unwrap();
        s.invocations_served += 1;
        s.invocations_served == 1
    };
    if !first {
        std::future::pending::<()>().await;
    }
    let mut event: Value = serde_json::from_str(include_str!("../../../events/apigw-get-conversation.json")).unwrap();
    event["rawPath"] = json!("/conversations/not-a-conversation");
    event["requestContext"]["http"]["path"] = json!("/conversations/not-a-conversation");
    event["pathParameters"]["id"] = json!("not-a-conversation");
    let deadline = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 30_000;
    let headers = [
        ("lambda-runtime-aws-request-id", REQUEST_ID.to_owned()),
        ("lambda-runtime-deadline-ms", deadline.to_string()),
        (
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:123456789012:function:orchestrator-fn".into(),
        ),
        (
            "lambda-runtime-trace-id",
            "Root=1-6774a580-3c1b2a9d0e4f5a6b7c8d9e0f;Parent=53995c3f42cd8ad8;Sampled=1".into(),
        ),
    ];
    let mut response = axum::Json(event).into_response();
    for (name, value) in headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

async fn invocation_response(State(seen): State<Shared>, body: axum::body::Bytes) -> StatusCode {
    seen.lock().unwrap().response = Some((Instant::now(), serde_json::from_slice(&body).unwrap_or(Value::Null)));
    StatusCode::ACCEPTED
}

/// The collector: takes [`EXPORT_TAKES`] to answer.
async fn traces(State(seen): State<Shared>, _headers: HeaderMap, _body: axum::body::Bytes) -> StatusCode {
    seen.lock().unwrap().export_started = Some(Instant::now());
    tokio::time::sleep(EXPORT_TAKES).await;
    seen.lock().unwrap().export_done = Some(Instant::now());
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_goes_out_before_the_span_export_and_the_sandbox_waits_for_it() {
    let seen: Shared = Arc::default();
    let runtime = serve(
        Router::new()
            .route("/2020-01-01/extension/register", post(register))
            .route("/2020-01-01/extension/event/next", get(extension_next))
            .route("/2018-06-01/runtime/invocation/next", get(invocation_next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(invocation_response))
            .with_state(seen.clone()),
    )
    .await;
    let collector = serve(Router::new().route("/v1/traces", post(traces)).with_state(seen.clone())).await;

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_orchestrator"));
    command.env_clear();
    for (var, value) in swarm_testing::preflight::FUNCTION_ENV {
        command.env(var, value);
    }
    lambda_env(&mut command, &runtime, "orchestrator-fn");
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = Running(Some(command.spawn().unwrap()));

    let patience = Instant::now() + Duration::from_secs(60);
    loop {
        if seen.lock().unwrap().next_after_flush.is_some() {
            break;
        }
        assert!(Instant::now() < patience, "the extension never asked for its next event after the flush");
        if let Ok(Some(status)) = child.get().try_wait() {
            let output = child.take().wait_with_output().unwrap();
            panic!("the orchestrator exited early ({status}):\n{}", String::from_utf8_lossy(&output.stderr));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut process = child.take();
    process.kill().unwrap();
    let output = process.wait_with_output().unwrap();

    let s = seen.lock().unwrap();
    let (answered, response) = s.response.clone().expect("the invocation's answer was posted");
    assert_eq!(response["statusCode"], 404, "{response}");
    let (started, done) = (s.export_started.expect("spans exported"), s.export_done.expect("export answered"));
    assert!(answered < done, "the answer did not wait for the {EXPORT_TAKES:?} export");
    assert!(started + EXPORT_TAKES <= done);
    assert!(s.next_after_flush.unwrap() >= done, "the sandbox may freeze only after the export");

    let stderr = String::from_utf8_lossy(&output.stderr);
    let answered_line: Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "request answered")
        .unwrap_or_else(|| panic!("no 'request answered' line in:\n{stderr}"));
    assert_eq!(answered_line["function_request_id"], REQUEST_ID);
    assert_eq!(answered_line["cold_start"], true);
    assert_eq!(answered_line["service"], "orchestrator-fn");
    assert_eq!(answered_line["status"], 404);
    assert_eq!(answered_line["route"], "/conversations/{id}");
    assert!(answered_line["xray_trace_id"].as_str().unwrap().starts_with("Root=1-6774a580"));
    // The request span continues API Gateway's X-Ray trace: the same trace id, W3C-shaped.
    assert_eq!(answered_line["trace_id"], "6774a5803c1b2a9d0e4f5a6b7c8d9e0f");
    assert!(!stderr.contains("\u{1b}["), "no colour codes in JSON logs");
}
