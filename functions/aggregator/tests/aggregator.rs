//! The aggregator on the embedded store: one reply under concurrent triggers, the model-free reply when the model fails, stream events from the fixtures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aggregator::{AggregateOutcome, Aggregator, AggregatorSettings};
use async_trait::async_trait;
use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::LambdaEvent;
use swarm_adapters::embedded::InMemoryConversationStore;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Subtask, SubtaskRecord, SubtaskResult, Usage,
};
use swarm_core::ports::{ChatModel, ChatRequest, ChatResponse, ConversationStore, FinishReason, LlmError};

struct Replier {
    calls: AtomicU32,
    fail: bool,
}

#[async_trait]
impl ChatModel for Replier {
    async fn complete(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        if self.fail {
            return Err(LlmError::Permanent { status: 401, message: "Invalid Authentication".into() });
        }
        Ok(ChatResponse {
            content: Some("Your order A1029 is paid.".into()),
            tool_calls: vec![],
            finish_reason: FinishReason::Stop,
            reasoning_content: None,
            usage: Usage { prompt_tokens: Some(50), completion_tokens: Some(10), cached_tokens: None, cost_usd: None },
            model: "m".into(),
        })
    }
    fn label(&self) -> String {
        "replier".into()
    }
}

async fn finished_conversation(store: &InMemoryConversationStore, id: &str) -> ConversationId {
    let mut c = Conversation::new("C104", "Where is A1029? SAVE20?", swarm_core::domain::now_ms(), 120);
    c.id = ConversationId::from_trusted(id);
    store.create_conversation(&c).await.unwrap();
    let mk = |sid: &str, text: &str| {
        SubtaskRecord::new(
            &c,
            Subtask { id: sid.into(), instruction: text.into(), tools: vec![], depends_on: vec![] },
            "support".into(),
        )
    };
    let recs = vec![mk("w01", "Check order A1029."), mk("w02", "Check coupon SAVE20.")];
    store.start_run(&c.id, &recs, &[], &Usage::default()).await.unwrap();
    let results = [
        ("w01", SubtaskResult::Succeeded { text: "Order A1029 is paid.".into(), tool_calls: vec![] }),
        ("w02", SubtaskResult::Failed { reason: "HTTP 500 upstream exploded".into() }),
    ];
    for (sid, r) in results {
        store.record_result(&c.id, sid, &r, &Usage::default(), &[], 0).await.unwrap();
        store.count_finished(&c.id, sid, &Usage::default()).await.unwrap();
    }
    c.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_triggers_write_exactly_one_reply() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07").await;
    let model = Arc::new(Replier { calls: AtomicU32::new(0), fail: false });
    let agg = Arc::new(Aggregator::new(store.clone(), model.clone(), AggregatorSettings::default()));
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let agg = agg.clone();
            let id = id.clone();
            tokio::spawn(async move { agg.aggregate(&id).await.unwrap() })
        })
        .collect();
    let mut replied = 0;
    for r in runs {
        if matches!(r.await.unwrap(), AggregateOutcome::Replied { .. }) {
            replied += 1;
        }
    }
    assert_eq!(replied, 1);
    assert_eq!(model.calls.load(Ordering::SeqCst), 1);
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Done);
    assert_eq!(conv.reply.as_deref(), Some("Your order A1029 is paid."));
    assert_eq!(conv.usage.prompt_tokens, Some(50));
}

#[tokio::test]
async fn failed_reply_model_still_answers_without_leaking_error_text() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d08").await;
    let agg = Aggregator::new(
        store.clone(),
        Arc::new(Replier { calls: AtomicU32::new(0), fail: true }),
        AggregatorSettings::default(),
    );
    assert_eq!(agg.aggregate(&id).await.unwrap(), AggregateOutcome::Replied { by_model: false });
    let reply = store.get_conversation(&id).await.unwrap().unwrap().reply.unwrap();
    assert!(reply.contains("Order A1029 is paid."));
    assert!(reply.contains("Check coupon SAVE20"), "says what could not be done: {reply}");
    assert!(
        !reply.contains("500") && !reply.contains("exploded") && !reply.contains("Invalid Authentication"),
        "{reply}"
    );
}

#[tokio::test]
async fn stream_fixture_event_triggers_the_aggregation_of_its_conversation() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07").await;
    let text = std::fs::read_to_string(format!(
        "{}/../../events/dynamodb-stream-remaining-zero.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let event: Event = serde_json::from_str(&text).unwrap();
    assert_eq!(aggregator::handler::conversation_of(&event.records[0]), Some(id.clone()));
    let agg = Aggregator::new(
        store.clone(),
        Arc::new(Replier { calls: AtomicU32::new(0), fail: false }),
        AggregatorSettings::default(),
    );
    aggregator::handler::handle(&agg, LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
        .await
        .unwrap();
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().status, ConversationStatus::Done);
    // Delivered again (streams are at-least-once): nothing changes.
    aggregator::handler::handle(&agg, LambdaEvent::new(event, lambda_runtime::Context::default())).await.unwrap();
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().reply.as_deref(), Some("Your order A1029 is paid."));
}
