//! The aggregator on the embedded store: one reply under concurrent triggers, the model-free reply when the model fails, stream events from the fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use aggregator::{AggregateOutcome, Aggregator, AggregatorSettings};
use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::LambdaEvent;
use swarm_adapters::embedded::InMemoryConversationStore;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Subtask, SubtaskRecord, SubtaskResult, Usage,
};
use swarm_core::ports::{ChatResponse, ConversationStore, LlmError};
use swarm_testing::{ScriptedModel, text_response};

/// The reply model: writes the same reply every time, or (`fail`) is refused every time.
fn replier(fail: bool) -> Arc<ScriptedModel> {
    let reply = if fail {
        Err(LlmError::Permanent { status: 401, message: "Invalid Authentication".into() })
    } else {
        Ok(ChatResponse {
            usage: Usage { prompt_tokens: Some(50), completion_tokens: Some(10), cached_tokens: None, cost_usd: None },
            ..text_response("Your order A1029 is paid.")
        })
    };
    Arc::new(ScriptedModel::always(reply))
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
        ("w02", SubtaskResult::failed(FailureKind::ToolsUnavailable, "HTTP 500 upstream exploded")),
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
    let model = replier(false);
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
    assert_eq!(model.calls(), 1);
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Done);
    assert_eq!(conv.reply.as_deref(), Some("Your order A1029 is paid."));
    assert_eq!(conv.usage.prompt_tokens, Some(50));
}

#[tokio::test]
async fn failed_reply_model_still_answers_without_leaking_error_text() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d08").await;
    let agg = Aggregator::new(store.clone(), replier(true), AggregatorSettings::default());
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
    let agg = Aggregator::new(store.clone(), replier(false), AggregatorSettings::default());
    aggregator::handler::handle(&agg, LambdaEvent::new(event.clone(), lambda_runtime::Context::default()))
        .await
        .unwrap();
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().status, ConversationStatus::Done);
    // Delivered again (streams are at-least-once): nothing changes.
    aggregator::handler::handle(&agg, LambdaEvent::new(event, lambda_runtime::Context::default())).await.unwrap();
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().reply.as_deref(), Some("Your order A1029 is paid."));
}
