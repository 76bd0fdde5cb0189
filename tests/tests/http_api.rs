//! `swarm-local serve`'s HTTP API over a real socket: each request one orchestrator invocation (its timeout and fault plan applied, as API Gateway invokes it); POST answers 202 with a status URL, GET follows the conversation to its reply, errors are JSON; with a token table the bearer token names the customer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use orchestrator::Auth;
use orchestrator::api::TokenTable;
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_local::{LocalStack, StackOptions};

/// Serves the stack's API with `auth` on a free port, as `swarm-local serve` does; answers the base URL and the server task.
async fn serve(stack: &LocalStack, auth: Auth) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = stack.api_router(auth, None);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_api_creates_and_reports_a_conversation() {
    let stack = LocalStack::start(StackOptions::default()).await.unwrap();
    let (base, server) = serve(&stack, Auth::None).await;
    let client = reqwest::Client::new();

    let created = client
        .post(format!("{base}/conversations"))
        .header("Idempotency-Key", "k-1")
        .json(&serde_json::json!({"message": "Where is my parcel for order A1031?", "customer_id": "C106"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 202);
    let body: serde_json::Value = created.json().await.unwrap();
    let status_url = body["status_url"].as_str().unwrap().to_owned();
    let id = body["conversation_id"].as_str().unwrap().to_owned();

    let again: serde_json::Value = client
        .post(format!("{base}/conversations"))
        .header("Idempotency-Key", "k-1")
        .json(&serde_json::json!({"message": "Where is my parcel for order A1031?", "customer_id": "C106"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["conversation_id"], id.as_str(), "same Idempotency-Key, same conversation");

    stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    let view: serde_json::Value = client.get(format!("{base}{status_url}")).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["status"], "DONE");
    assert_eq!(view["customer_id"], "C106");
    assert_eq!(view["progress"]["finished"], view["progress"]["total"]);
    assert!(view["reply"].as_str().unwrap().contains("SF Express"), "{view}");
    assert!(view["usage"].is_null(), "the offline model reports no usage: null, not zeros");
    for s in view["subtasks"].as_array().unwrap() {
        for field in ["id", "instruction", "depends_on", "tools_used", "status"] {
            assert!(s.get(field).is_some(), "subtask lacks {field}: {s}");
        }
    }

    let bad = client.post(format!("{base}/conversations")).body("{").send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let err: serde_json::Value = bad.json().await.unwrap();
    assert_eq!(err["error"]["code"], "bad_json");
    let missing =
        client.get(format!("{base}/conversations/{}", "01900000-0000-7000-8000-000000000000")).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    server.abort();
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_with_a_token_table_the_bearer_token_names_the_customer() {
    let stack = LocalStack::start(StackOptions::default()).await.unwrap();
    let table = TokenTable::parse("# serve --tokens-file\ntok-c106-0123456789abcdef=C106\n").unwrap();
    let (base, server) = serve(&stack, Auth::Tokens(Arc::new(table))).await;
    let client = reqwest::Client::new();
    let message = serde_json::json!({"message": "Where is my parcel for order A1031?"});

    let anonymous = client.post(format!("{base}/conversations")).json(&message).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    let err: serde_json::Value = anonymous.json().await.unwrap();
    assert_eq!(err["error"]["code"], "unauthenticated");
    assert_eq!(stack.conversation_count().await.unwrap(), 0, "refused before anything was written");

    let created: serde_json::Value = client
        .post(format!("{base}/conversations"))
        .bearer_auth("tok-c106-0123456789abcdef")
        .json(&message)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(60)).await.unwrap();
    assert_eq!((view.customer_id.as_str(), view.status.as_str()), ("C106", "DONE"));

    let wrong_method = client.delete(format!("{base}/conversations")).send().await.unwrap();
    assert_eq!(wrong_method.status().as_u16(), 405);
    assert_eq!(wrong_method.headers()["allow"], "POST,GET,HEAD");
    let err: serde_json::Value = wrong_method.json().await.unwrap();
    assert_eq!(err["error"]["code"], "method_not_allowed");
    server.abort();
    stack.shutdown().await;
}

/// Kills every invocation that reaches `point`.
struct CrashAt(CrashPoint);

impl FaultPlan for CrashAt {
    fn crash(&self, point: CrashPoint) -> bool {
        point == self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_requests_are_orchestrator_invocations_with_its_fault_plan_and_timeout() {
    let stack = LocalStack::start(StackOptions {
        faults: Some(Arc::new(CrashAt(CrashPoint::OrchestratorAfterCreate))),
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let (base, server) = serve(&stack, Auth::None).await;
    let answer = reqwest::Client::new()
        .post(format!("{base}/conversations"))
        .json(&serde_json::json!({"message": "Where is my parcel for order A1031?", "customer_id": "C106"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 500, "the invocation died after writing the conversation");
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"message": "Internal Server Error"}), "API Gateway's answer, not ours");
    assert_eq!(stack.counters().snapshot().killed_invocations, 1);
    assert_eq!(stack.conversation_count().await.unwrap(), 1, "the write before the crash point stays");
    server.abort();
    stack.shutdown().await;
}
