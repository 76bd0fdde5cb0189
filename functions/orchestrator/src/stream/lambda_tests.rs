//! The streaming function as Lambda runs it, without AWS: a function URL event (`events/function-url-chat-completions.json`) through lambda_http's `StreamAdapter` (what `run_with_streaming_response` wraps the router in) into the streaming router, and the response's head and body chunks as Lambda streams them — a 401 without a token, 503 for a valid one while the issuer is down, 404 off the long-running routes and the console's page and reads, and a chat completion's SSE frames arriving one by one.

use std::sync::Arc;

use futures::StreamExt as _;
use lambda_http::request::LambdaRequest;
use lambda_http::{Context, LambdaEvent, Service as _, StreamAdapter};
use serde_json::{Value, json};
use swarm_adapters::config::ClaimMapping;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::ports::{TaskQueue, ToolError};
use swarm_core::roles::{RoleTable, TaskQueues};
use swarm_testing::{ScriptedModel, StaticTools, text_response};

use super::jwt::JwksError;
use super::tests::{SigningKey, TestJwks, good_claims, verifier};
use crate::api::{ApiState, Auth, JwtIdentity};
use crate::{Orchestrator, OrchestratorSettings};

/// The streaming router over an in-memory swarm whose planner plans one subtask (no worker runs
/// it: the turn stays open), callers identified by tokens of `key` whose `customer_id` claim is
/// the customer (`JWT_CUSTOMER_MAPPING=direct`).
fn app(key: &SigningKey) -> axum::Router {
    app_over(TestJwks::of(&[key]))
}

/// [`app`] with the issuer's keys from `jwks`.
fn app_over(jwks: Arc<TestJwks>) -> axum::Router {
    let store = Arc::new(InMemoryConversationStore::new());
    let plan = r#"{"subtasks": [{"id": "w01", "instruction": "Check order A1029", "tools": ["shop__get_order"]}]}"#;
    let tools = StaticTools::named(&["shop__get_order"], "{name} tool", json!({"type": "object"}))
        .on_any_call(|_, _| Err(ToolError::Permanent("the planner calls no tools".into())));
    let queues = TaskQueues::new(Arc::new(InMemoryQueue::new(QueueSettings::default())) as Arc<dyn TaskQueue>);
    let settings = OrchestratorSettings { deadline_secs: 5, ..OrchestratorSettings::default() };
    let core = Orchestrator::new(
        store.clone(),
        queues,
        Arc::new(ScriptedModel::always(Ok(text_response(plan)))),
        Arc::new(tools),
        RoleTable::demo(),
        settings,
    );
    let identity = JwtIdentity { claim: "customer_id".into(), mapping: ClaimMapping::Direct, directory: store };
    let auth = Auth::VerifiedJwt(Arc::new(verifier(jwks)), identity);
    super::router(ApiState::new(Arc::new(core), auth))
}

/// The fixture with `method`, `path`, `body` and the `authorization` header when given.
fn event(method: &str, path: &str, body: Option<&str>, authorization: Option<&str>) -> LambdaEvent<LambdaRequest> {
    let mut event: Value =
        serde_json::from_str(include_str!("../../../../events/function-url-chat-completions.json")).unwrap();
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["requestContext"]["http"]["method"] = json!(method);
    if let Some(body) = body {
        event["body"] = json!(body);
    }
    if let Some(value) = authorization {
        event["headers"]["authorization"] = json!(value);
    }
    LambdaEvent::new(serde_json::from_value(event).unwrap(), Context::default())
}

/// The response's head (status, headers) and its body as the chunks Lambda streams, in order.
async fn invoke(app: axum::Router, event: LambdaEvent<LambdaRequest>) -> (u16, axum::http::HeaderMap, Vec<String>) {
    let mut adapter = StreamAdapter::from(app);
    let response = adapter.call(event).await.unwrap();
    let head = response.metadata_prelude;
    let chunks: Vec<String> = response
        .stream
        .map(|chunk| String::from_utf8(chunk.unwrap().to_vec()).unwrap())
        .filter(|chunk| std::future::ready(!chunk.is_empty()))
        .collect()
        .await;
    (head.status_code.as_u16(), head.headers, chunks)
}

fn token(key: &SigningKey, customer: &str) -> String {
    let mut claims = good_claims("user-1");
    claims["customer_id"] = json!(customer);
    format!("Bearer {}", key.token(&claims))
}

#[tokio::test]
async fn without_a_token_the_streaming_url_answers_401_in_openais_shape() {
    let key = SigningKey::generate("k1");
    let (status, headers, chunks) = invoke(app(&key), event("POST", "/v1/chat/completions", None, None)).await;
    assert_eq!(status, 401);
    assert_eq!(headers["www-authenticate"], "Bearer");
    let body: Value = serde_json::from_str(&chunks.concat()).unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    // A token of another issuer's key is refused the same way.
    let stranger = SigningKey::generate("k1");
    let (status, ..) = invoke(app(&key), event("GET", "/v1/models", None, Some(&token(&stranger, "C104")))).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_valid_token_while_the_issuer_is_down_answers_503_not_401() {
    let key = SigningKey::generate("k1");
    let jwks = TestJwks::of(&[&key]);
    jwks.answer(Err(JwksError::Unavailable("connection refused".into())));
    let (status, headers, chunks) =
        invoke(app_over(jwks), event("GET", "/v1/models", None, Some(&token(&key, "C104")))).await;
    assert_eq!(status, 503, "{chunks:?}");
    assert!(!headers.contains_key("www-authenticate"));
    let body: Value = serde_json::from_str(&chunks.concat()).unwrap();
    assert_eq!((&body["error"]["type"], &body["error"]["code"]), (&json!("server_error"), &json!("unavailable")));
}

// Paused time: the streamed completion below runs to its turn's end (deadline plus a minute) at once.
#[tokio::test(start_paused = true)]
async fn only_the_long_running_routes_and_the_consoles_page_and_reads_are_served_on_the_url() {
    let key = SigningKey::generate("k1");
    let app = app(&key);
    let auth = token(&key, "C104");
    let (status, _, chunks) = invoke(app.clone(), event("GET", "/v1/models", None, Some(&auth))).await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&chunks.concat()).unwrap();
    assert_eq!(models["data"][0]["id"], "lambda-swarm");
    // The console's page, with no credential (it holds no data), under its CSP.
    for path in crate::console::ROUTES {
        let (status, headers, chunks) = invoke(app.clone(), event("GET", path, None, None)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(headers["content-security-policy"], crate::console::CONTENT_SECURITY_POLICY, "{path}");
        assert!(!chunks.concat().is_empty(), "{path}");
    }
    // Its reads, with the customer's token only: a conversation started through the URL's completions
    // is in C104's list and readable; without a token, 401; another customer's token does not see it.
    let (_, headers, _) = invoke(app.clone(), event("POST", "/v1/chat/completions", None, Some(&auth))).await;
    let id = headers["x-swarm-conversation-id"].to_str().unwrap().to_owned();
    let (status, _, chunks) = invoke(app.clone(), event("GET", "/conversations", None, Some(&auth))).await;
    assert_eq!(status, 200, "{chunks:?}");
    let page: Value = serde_json::from_str(&chunks.concat()).unwrap();
    assert_eq!(page["conversations"][0]["conversation_id"], json!(id), "{page}");
    let (status, _, chunks) =
        invoke(app.clone(), event("GET", &format!("/conversations/{id}"), None, Some(&auth))).await;
    assert_eq!(status, 200, "{chunks:?}");
    let view: Value = serde_json::from_str(&chunks.concat()).unwrap();
    assert_eq!((&view["conversation_id"], &view["subtasks"][0]["id"]), (&json!(id), &json!("w01")), "{view}");
    let (status, ..) = invoke(app.clone(), event("GET", "/conversations", None, None)).await;
    assert_eq!(status, 401);
    let stranger = token(&key, "C105");
    let (status, ..) = invoke(app.clone(), event("GET", &format!("/conversations/{id}"), None, Some(&stranger))).await;
    assert_eq!(status, 404, "another customer's conversation is not found");
    // Nothing that writes but the long-running routes, and never the operators' routes.
    for (method, path) in [
        ("POST", "/conversations".to_owned()),
        ("POST", format!("/conversations/{id}/messages")),
        ("GET", "/approvals".to_owned()),
        ("POST", "/approvals/a1".to_owned()),
        ("GET", format!("/operator/conversations/{id}")),
        ("GET", "/health".to_owned()),
        ("GET", "/console/other.js".to_owned()),
    ] {
        let (status, _, chunks) = invoke(app.clone(), event(method, &path, Some("{}"), Some(&auth))).await;
        assert_eq!(status, 404, "{method} {path}");
        assert!(chunks.concat().contains("not_found"), "{method} {path}: {chunks:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_streamed_completion_reaches_lambda_as_separate_sse_chunks() {
    let key = SigningKey::generate("k1");
    let event = event("POST", "/v1/chat/completions", None, Some(&token(&key, "C104")));
    let (status, headers, chunks) = invoke(app(&key), event).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(headers.contains_key("x-swarm-conversation-id"), "{headers:?}");
    // Progress first, a heartbeat while the open turn is quiet, then (no worker runs it) the turn not
    // answered within the deadline plus a minute, each written as its own chunk, then [DONE].
    let data: Vec<&String> = chunks.iter().filter(|c| c.starts_with("data: ")).collect();
    assert!(chunks.len() >= 4, "{chunks:?}");
    assert!(data[0].contains("chat.completion.chunk"), "{chunks:?}");
    assert!(chunks.iter().any(|c| c.starts_with(": ")), "a heartbeat comment: {chunks:?}");
    assert!(chunks.iter().any(|c| c.contains("turn_not_answered")), "{chunks:?}");
    assert!(chunks.iter().all(|c| c.ends_with("\n\n")), "whole SSE frames: {chunks:?}");
}
