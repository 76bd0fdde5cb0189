//! The `orchestrator-stream` binary under a stand-in of Lambda's Runtime and Extensions APIs: it takes a function URL event and posts its answer in Lambda's streaming mode (`Lambda-Runtime-Function-Response-Mode: streaming`, the HTTP prelude, eight NUL bytes, then the body), serves only the long-running routes, and refuses to start with `AUTH_MODE=jwt` but no issuer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

mod common;
use common::{Running, lambda_env, register, serve};

const BINARY: &str = env!("CARGO_BIN_EXE_orchestrator-stream");

/// The events served, one per invocation, and the answers posted: (request id, headers, body).
#[derive(Default)]
struct Runtime {
    events: Vec<Value>,
    served: usize,
    answers: Vec<(String, HeaderMap, Vec<u8>)>,
}

type Shared = Arc<Mutex<Runtime>>;

/// The extension waits forever: this test reads the runtime's side only.
async fn extension_next() -> axum::response::Response {
    std::future::pending::<()>().await;
    StatusCode::OK.into_response()
}

/// The next function URL event, then nothing more.
async fn invocation_next(State(runtime): State<Shared>) -> axum::response::Response {
    let (n, event) = {
        let mut r = runtime.lock().unwrap();
        r.served += 1;
        (r.served, r.events.get(r.served - 1).cloned())
    };
    let Some(event) = event else {
        std::future::pending::<()>().await;
        return StatusCode::OK.into_response();
    };
    let deadline = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 30_000;
    let headers = [
        ("lambda-runtime-aws-request-id", format!("req-{n}")),
        ("lambda-runtime-deadline-ms", deadline.to_string()),
        ("lambda-runtime-invoked-function-arn", "arn:aws:lambda:us-east-1:123456789012:function:stream-fn".into()),
        (
            "lambda-runtime-trace-id",
            "Root=1-6774a580-3c1b2a9d0e4f5a6b7c8d9e0f;Parent=53995c3f42cd8ad8;Sampled=1".into(),
        ),
    ];
    let mut response = axum::Json(event).into_response();
    for (k, v) in headers {
        response.headers_mut().insert(k, v.parse().unwrap());
    }
    response
}

async fn invocation_response(
    State(runtime): State<Shared>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    runtime.lock().unwrap().answers.push((id, headers, body.to_vec()));
    StatusCode::ACCEPTED
}

/// The function URL fixture for `method path`.
fn event(method: &str, path: &str) -> Value {
    let mut event: Value =
        serde_json::from_str(include_str!("../../../events/function-url-chat-completions.json")).unwrap();
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["requestContext"]["http"]["method"] = json!(method);
    event["body"] = Value::Null;
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_url_event_is_answered_in_lambdas_streaming_mode() {
    let runtime: Shared = Arc::default();
    // The HTTP API's routes are not the URL's: an operator's list and a customer's create answer 404 there.
    runtime.lock().unwrap().events =
        vec![event("GET", "/v1/models"), event("GET", "/approvals"), event("POST", "/conversations")];
    let api = serve(
        Router::new()
            .route("/2020-01-01/extension/register", post(register))
            .route("/2020-01-01/extension/event/next", get(extension_next))
            .route("/2018-06-01/runtime/invocation/next", get(invocation_next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(invocation_response))
            .with_state(runtime.clone()),
    )
    .await;
    let mut command = std::process::Command::new(BINARY);
    command.env_clear();
    for (var, value) in swarm_testing::preflight::FUNCTION_ENV {
        command.env(var, value);
    }
    lambda_env(&mut command, &api, "stream-fn");
    command.env("TRACE_EXPORT", "off").stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = Running(Some(command.spawn().unwrap()));

    let patience = Instant::now() + Duration::from_secs(60);
    while runtime.lock().unwrap().answers.len() < 3 {
        assert!(Instant::now() < patience, "the function did not answer every invocation");
        if let Ok(Some(status)) = child.get().try_wait() {
            let output = child.take().wait_with_output().unwrap();
            panic!("orchestrator-stream exited early ({status}):\n{}", String::from_utf8_lossy(&output.stderr));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answers = std::mem::take(&mut runtime.lock().unwrap().answers);
    let mut seen = Vec::new();
    for (id, headers, body) in answers {
        assert_eq!(headers["lambda-runtime-function-response-mode"], "streaming", "{id}");
        assert_eq!(headers["content-type"], "application/vnd.awslambda.http-integration-response", "{id}");
        let at = body.windows(8).position(|w| w == [0u8; 8]).expect("the prelude's eight NUL bytes");
        let prelude: Value = serde_json::from_slice(&body[..at]).unwrap();
        let payload: Value = serde_json::from_slice(&body[at + 8..]).unwrap();
        seen.push((id, prelude["statusCode"].clone(), prelude["headers"]["content-type"].clone(), payload));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let models = &seen[0];
    assert_eq!((&models.0[..], &models.1, &models.2), ("req-1", &json!(200), &json!("application/json")));
    assert_eq!(models.3["data"][0]["id"], "lambda-swarm");
    for (other, id) in seen[1..].iter().zip(["req-2", "req-3"]) {
        assert_eq!((&other.0[..], &other.1), (id, &json!(404)), "only the URL's routes");
        assert_eq!(other.3["error"]["code"], "not_found", "{id}");
    }
}

#[test]
fn jwt_mode_without_an_issuer_or_an_audience_refuses_to_start() {
    use swarm_testing::preflight::refuses_to_start;
    refuses_to_start(BINARY, &[("AUTH_MODE", Some("jwt"))], "JWT_ISSUER is required");
    let issuer = Some("https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Test");
    refuses_to_start(BINARY, &[("AUTH_MODE", Some("jwt")), ("JWT_ISSUER", issuer)], "JWT_AUDIENCE is required");
    refuses_to_start(
        BINARY,
        &[("AUTH_MODE", Some("jwt")), ("JWT_ISSUER", Some("http://issuer.example.com")), ("JWT_AUDIENCE", Some("a"))],
        "JWT_ISSUER must be an https URL",
    );
}
