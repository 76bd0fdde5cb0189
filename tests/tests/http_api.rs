//! `swarm-local serve`'s HTTP API over a real socket: POST answers 202 with a status URL, GET follows the conversation to its reply, errors are JSON.

use std::sync::Arc;
use std::time::Duration;

use swarm_local::{LocalStack, StackOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_api_creates_and_reports_a_conversation() {
    let stack = Arc::new(LocalStack::start(StackOptions::default()).await.unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(axum::serve(listener, swarm_local::http::router(stack.clone())).into_future());
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");

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
}
