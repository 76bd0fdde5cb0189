//! The swarm as an OpenAI-compatible model over a real socket, on both backends: a chat completion answers the turn's reply with the usage the conversation recorded, a streamed follow-up (`X-Swarm-Conversation-Id`) is the same conversation's next turn told as progress then reply, and refusals and a missing credential are in OpenAI's error shape.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use async_trait::async_trait;
use orchestrator::Auth;
use orchestrator::api::TokenTable;
use serde_json::{Value, json};
use swarm_core::domain::Usage;
use swarm_core::llm::Models;
use swarm_core::ports::{ChatModel, ChatRequest, ChatResponse, LlmError};
use swarm_local::{BackendChoice, LocalStack, StackOptions};
use swarm_offline::OfflineModel;

const TOKEN: &str = "tok-c106-0123456789abcdef";

/// The offline model, reporting 100 prompt and 20 completion tokens per call (the offline model reports none).
struct Metered(OfflineModel);

#[async_trait]
impl ChatModel for Metered {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut response = self.0.complete(request).await?;
        response.usage =
            Usage { prompt_tokens: Some(100), completion_tokens: Some(20), cached_tokens: None, cost_usd: None };
        Ok(response)
    }
    fn label(&self) -> String {
        "metered offline model".into()
    }
}

async fn serve(stack: &LocalStack) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let table = TokenTable::parse(&format!("{TOKEN}=C106\n")).unwrap();
    let app = stack.api_router(Auth::Tokens(Arc::new(table)), None);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), server)
}

fn ask(message: &str) -> Value {
    json!({"model": "lambda-swarm", "messages": [{"role": "system", "content": "ignored"}, {"role": "user", "content": message}]})
}

/// The `data:` payloads of an event stream, in order (comments skipped).
fn events(text: &str) -> Vec<String> {
    text.split("\n\n").filter_map(|frame| frame.strip_prefix("data: ")).map(str::to_owned).collect()
}

async fn a_chat_completion_is_a_turn_of_the_conversation(backend: BackendChoice) {
    let models = Models::single(Arc::new(Metered(OfflineModel::new())));
    let stack =
        LocalStack::start(StackOptions { backend, models: Some(models), time_scale: 0.25, ..StackOptions::default() })
            .await
            .unwrap();
    let (base, server) = serve(&stack).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/chat/completions");

    let models: Value =
        http.get(format!("{base}/v1/models")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "lambda-swarm");

    // Non-streamed: the reply and the usage the conversation recorded.
    let answer =
        http.post(&url).bearer_auth(TOKEN).json(&ask("Where is my parcel for order A1031?")).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let id = answer.headers()["x-swarm-conversation-id"].to_str().unwrap().to_owned();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["swarm"], json!({"conversation_id": id, "turn": 0, "status": "DONE"}));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let view = stack.orchestrator().status(&id, Some("C106")).await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"].as_str(), view.reply.as_deref());
    assert!(view.reply.as_deref().unwrap().contains("SF Express"), "{body}");
    let usage = view.usage.unwrap();
    let (prompt, completion) = (usage.prompt_tokens.unwrap(), usage.completion_tokens.unwrap());
    assert!(prompt >= 200 && completion >= 40, "planning, a subtask and the reply at least: {usage:?}");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
    );

    // Streamed follow-up: the same conversation's next turn, progress then reply.
    let mut follow = ask("And when will it arrive?");
    follow["stream"] = json!(true);
    follow["stream_options"] = json!({"include_usage": true});
    let streamed =
        http.post(&url).bearer_auth(TOKEN).header("X-Swarm-Conversation-Id", &id).json(&follow).send().await.unwrap();
    assert_eq!(streamed.status().as_u16(), 200);
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    assert_eq!(streamed.headers()["x-swarm-conversation-id"].to_str().unwrap(), id);
    let frames = events(&streamed.text().await.unwrap());
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(f).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == format!("chatcmpl-{id}-1")));
    assert_eq!(chunks[0]["swarm"], json!({"conversation_id": id, "turn": 1}));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let delta = |field: &str| -> String {
        chunks.iter().filter_map(|c| c["choices"][0]["delta"][field].as_str()).collect::<Vec<_>>().concat()
    };
    let progress = delta("reasoning_content");
    assert!(progress.starts_with("Planned "), "{progress}");
    let view = stack.orchestrator().status(&id, Some("C106")).await.unwrap();
    assert_eq!((view.turn, view.turns.len()), (1, 2), "the follow-up is the conversation's second turn");
    assert_eq!(Some(delta("content").as_str()), view.reply.as_deref());
    let first_content =
        chunks.iter().position(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|s| !s.is_empty()));
    let last_progress = chunks.iter().rposition(|c| c["choices"][0]["delta"]["reasoning_content"].is_string());
    assert!(last_progress < first_content, "progress first, then the reply");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = view.usage.unwrap();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], json!(usage.prompt_tokens.unwrap()));

    // OpenAI's error shape: a refusal and a missing credential.
    let mut refused = ask("hi");
    refused["n"] = json!(2);
    let answer = http.post(&url).bearer_auth(TOKEN).json(&refused).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 400);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!((body["error"]["param"].as_str(), body["error"]["code"].as_str()), (Some("n"), Some("n_not_supported")));
    let anonymous = http.post(&url).json(&ask("hi")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(
        (body["error"]["type"].as_str(), body["error"]["code"].as_str()),
        (Some("authentication_error"), Some("unauthenticated"))
    );
    assert_eq!(stack.conversation_count().await.unwrap(), 1, "refusals store nothing");

    server.abort();
    stack.shutdown().await;
}

swarm_tests::on_both_backends!(a_chat_completion_is_a_turn_of_the_conversation);
