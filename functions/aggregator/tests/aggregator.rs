//! The aggregator on the embedded store: one reply under concurrent triggers, the model-free reply when the model fails or its reply is cut off, the reply cleaned and bounded, stream events from the fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use aggregator::{AggregateOutcome, Aggregator, AggregatorSettings};
use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::LambdaEvent;
use swarm_adapters::embedded::InMemoryConversationStore;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Subtask, SubtaskRecord, SubtaskResult, Usage,
};
use swarm_core::ports::{
    AccountingStore, AnswerStore, ChatResponse, ConversationRecords, ConversationStore, FinishReason, LlmError,
    SubtaskStore,
};
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
    store.start_run(&c.id, None, &recs, &[], &Usage::default()).await.unwrap();
    let results = [
        ("w01", SubtaskResult::Succeeded { text: "Order A1029 is paid.".into(), tool_calls: vec![] }),
        ("w02", SubtaskResult::failed(FailureKind::ToolsUnavailable, "HTTP 500 upstream exploded")),
    ];
    for (sid, r) in results {
        store.record_result(&c.id, &sid.into(), &r, &Usage::default(), &[], 0).await.unwrap();
        store.count_finished(&c.id, &sid.into(), &Usage::default()).await.unwrap();
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

#[tokio::test]
async fn a_reply_cut_off_by_length_is_never_stored_the_model_free_reply_is() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d09").await;
    let cut = ChatResponse {
        finish_reason: FinishReason::Length,
        usage: Usage { prompt_tokens: Some(80), completion_tokens: Some(2048), cached_tokens: None, cost_usd: None },
        ..text_response("Your order A1029 is pa")
    };
    let agg = Aggregator::new(store.clone(), Arc::new(ScriptedModel::always(Ok(cut))), AggregatorSettings::default());
    assert_eq!(agg.aggregate(&id).await.unwrap(), AggregateOutcome::Replied { by_model: false });
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    let reply = conv.reply.unwrap();
    assert!(!reply.contains("is pa\n") && !reply.ends_with("is pa"), "{reply}");
    assert!(reply.contains("Order A1029 is paid.") && reply.contains("Check coupon SAVE20"), "{reply}");
    assert_eq!(conv.usage.completion_tokens, Some(2048), "the cut attempt is still counted");
}

#[tokio::test]
async fn the_model_written_reply_is_stored_without_display_controls_and_bounded() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d0a").await;
    // 300 KB of multi-byte text: within any character bound, over the item's byte budget.
    let text = format!("Your order\u{1b}]0;pwned\u{7} A1029 is paid.\u{202E}{}", "订".repeat(100_000));
    let agg = Aggregator::new(
        store.clone(),
        Arc::new(ScriptedModel::always(Ok(text_response(&text)))),
        AggregatorSettings::default(),
    );
    agg.aggregate(&id).await.unwrap();
    let reply = store.get_conversation(&id).await.unwrap().unwrap().reply.unwrap();
    assert!(reply.starts_with("Your order]0;pwned A1029 is paid.订订"), "{}", &reply[..60]);
    assert!(reply.len() <= swarm_core::domain::MAX_REPLY_BYTES, "{} bytes", reply.len());
    assert!(reply.ends_with("[truncated]"));
}

/// A stream event of the conversation items `ids`, each a record with sequence number `seq<i>`.
fn stream_event(ids: &[&ConversationId]) -> Event {
    let records: Vec<serde_json::Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            serde_json::json!({
                "eventID": format!("e{i}"), "eventName": "MODIFY", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {"Keys": {"PK": {"S": format!("CONV#{id}")}, "SK": {"S": "META"}},
                             "SequenceNumber": format!("seq{i}"), "SizeBytes": 10, "StreamViewType": "NEW_IMAGE"},
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/s"
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

#[tokio::test]
async fn a_record_that_fails_is_reported_by_its_sequence_number_and_the_others_of_its_batch_are_done() {
    let memory = Arc::new(InMemoryConversationStore::new());
    let ready = finished_conversation(&memory, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d11").await;
    let failing = finished_conversation(&memory, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d12").await;
    let after = finished_conversation(&memory, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d13").await;
    // The second lease write is throttled: the second record's.
    let flaky = swarm_testing::FlakyStore::new(memory.clone()).fail_times_after(
        swarm_testing::StoreOp::AcquireLease,
        1,
        1,
        "ThrottlingException",
    );
    let store: Arc<dyn ConversationStore> = Arc::new(flaky);
    let agg = Aggregator::new(store.clone(), replier(false), AggregatorSettings::default());
    let event = stream_event(&[&ready, &failing, &after]);
    let response =
        aggregator::handler::handle(&agg, LambdaEvent::new(event, lambda_runtime::Context::default())).await.unwrap();

    assert_eq!(
        serde_json::to_value(&response).unwrap(),
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "seq1"}]}),
        "the failed record, not the batch"
    );
    let status = |id: &ConversationId| {
        let memory = memory.clone();
        let id = id.clone();
        async move { memory.get_conversation(&id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(&ready).await, ConversationStatus::Done, "the record before it is done");
    assert_eq!(status(&failing).await, ConversationStatus::Running);
    // The batch's records run at once: the one after the failure is answered already, and Lambda's
    // retry from the failed record on finds it answered (the lease: one reply).
    assert_eq!(status(&after).await, ConversationStatus::Done, "aggregated with the batch, not after it");
    // Lambda's retry from the failed record on answers the failed one.
    let retry = stream_event(&[&failing, &after]);
    let response =
        aggregator::handler::handle(&agg, LambdaEvent::new(retry, lambda_runtime::Context::default())).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!((status(&failing).await, status(&after).await), (ConversationStatus::Done, ConversationStatus::Done));
}

#[tokio::test]
async fn a_live_lease_is_never_taken_over_and_an_expired_one_is_once() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d14").await;
    let now = swarm_core::domain::now_ms();
    let phase = swarm_core::ports::LeasePhase::Aggregating { turn: 0 };
    store.acquire_lease(&id, phase, "aggregator:dead", now - 100_000, now + 60_000).await.unwrap();
    let model = replier(false);
    let agg = Aggregator::new(store.clone(), model.clone(), AggregatorSettings::default());
    assert_eq!(agg.aggregate(&id).await.unwrap(), AggregateOutcome::AlreadyHandled, "live: left alone");
    assert_eq!(model.counts().2, 0);
    // The holder died and its lease ran out: the next trigger (a stream retry) takes over, once.
    let expired = finished_conversation(&store, "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d15").await;
    store.acquire_lease(&expired, phase, "aggregator:dead", now - 100_000, now - 10_000).await.unwrap();
    assert_eq!(agg.aggregate(&expired).await.unwrap(), AggregateOutcome::Replied { by_model: true });
    assert_eq!(agg.aggregate(&expired).await.unwrap(), AggregateOutcome::AlreadyHandled);
    let conv = store.get_conversation(&expired).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Done);
    assert!(conv.lease.unwrap().holder.starts_with("aggregator:"), "the taker's lease");
    assert_eq!(model.counts().2, 1, "one reply");
}

/// A reply model that answers each request after `.1`.
struct SlowReplier(ScriptedModel, std::time::Duration);

#[async_trait::async_trait]
impl swarm_core::ports::ChatModel for SlowReplier {
    async fn complete(
        &self,
        request: &swarm_core::ports::ChatRequest,
    ) -> Result<swarm_core::ports::ChatResponse, LlmError> {
        tokio::time::sleep(self.1).await;
        self.0.complete(request).await
    }

    fn label(&self) -> String {
        "slow replier".into()
    }
}

fn slow_replier(wait: std::time::Duration) -> Arc<SlowReplier> {
    Arc::new(SlowReplier(ScriptedModel::always(Ok(text_response("Your order A1029 is paid."))), wait))
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_ten_records_takes_one_reply_budget_not_ten() {
    let memory = Arc::new(InMemoryConversationStore::new());
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(finished_conversation(&memory, &format!("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1e{i:02}")).await);
    }
    // Each reply takes 30 s of the 45 s budget: one after another the batch would need 300 s of a 60 s function.
    let settings = AggregatorSettings::default();
    assert_eq!(settings.max_parallel_records, 10);
    let agg = Aggregator::new(memory.clone(), slow_replier(std::time::Duration::from_secs(30)), settings);
    let event = stream_event(&ids.iter().collect::<Vec<_>>());
    let started = tokio::time::Instant::now();
    let response =
        aggregator::handler::handle(&agg, LambdaEvent::new(event, lambda_runtime::Context::default())).await.unwrap();
    let took = started.elapsed();
    assert!(response.batch_item_failures.is_empty());
    assert!(took < std::time::Duration::from_secs(45), "the batch took {took:?}: its records ran one after another");
    for id in &ids {
        let c = memory.get_conversation(id).await.unwrap().unwrap();
        assert_eq!(c.status, ConversationStatus::Done);
        assert_eq!(c.reply.as_deref(), Some("Your order A1029 is paid."), "written by the model, within its budget");
    }
}
