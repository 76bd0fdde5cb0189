//! The SQS handler's spans: records of one batch run concurrently, and every line logged for a record carries that record's ids and no other's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use serde_json::json;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{Conversation, ConversationId, Subtask, SubtaskRecord, SubtaskStatus, TaskMessage, Usage};
use swarm_core::ports::{ConversationRecords, SubtaskStore, TaskQueue};
use swarm_core::roles::TaskQueues;
use swarm_testing::{ScriptedModel, StaticTools, text_response};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use worker::{Worker, WorkerSettings};

/// The fields a span or an event recorded, as text.
#[derive(Clone, Debug, Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// One event as logged: its own fields, and every value of each id field over the spans it was logged in.
#[derive(Clone, Debug)]
struct Logged {
    fields: Fields,
    in_spans: BTreeMap<&'static str, BTreeSet<String>>,
}

const IDS: [&str; 3] = ["message_id", "conversation_id", "subtask_id"];

/// A layer that keeps every event with the ids of the spans around it.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Logged>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        ctx.span(id).expect("a new span is registered").extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span is registered");
        if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut in_spans: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
        for span in ctx.event_scope(event).into_iter().flat_map(|scope| scope.from_root()) {
            if let Some(f) = span.extensions().get::<Fields>() {
                for name in IDS {
                    if let Some(v) = f.0.get(name) {
                        in_spans.entry(name).or_default().insert(v.clone());
                    }
                }
            }
        }
        self.0.lock().expect("capture lock").push(Logged { fields, in_spans });
    }
}

/// Two conversations with one subtask each (`w01` and `w02`), in one store.
async fn two_conversations(store: &InMemoryConversationStore) -> [(ConversationId, &'static str); 2] {
    let mut out = Vec::new();
    for (id, subtask_id) in
        [("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07", "w01"), ("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d08", "w02")]
    {
        let mut c = Conversation::new("C104", "Where is A1029?", swarm_core::domain::now_ms(), 120);
        c.id = ConversationId::from_trusted(id);
        store.create_conversation(&c).await.unwrap();
        let subtask = Subtask {
            id: subtask_id.into(),
            instruction: "Check order A1029.".into(),
            tools: vec![],
            depends_on: vec![],
        };
        let rec = SubtaskRecord::new(&c, subtask, "support".into());
        assert!(store.start_run(&c.id, None, &[rec], &[], &Usage::default()).await.unwrap());
        out.push((c.id, subtask_id));
    }
    [out[0].clone(), out[1].clone()]
}

fn batch(messages: &[&TaskMessage]) -> SqsEvent {
    let records: Vec<serde_json::Value> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| json!({"messageId": format!("m{i}"), "receiptHandle": format!("r{i}"), "body": serde_json::to_string(m).unwrap(), "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {}, "eventSource": "aws:sqs"}))
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

#[tokio::test(start_paused = true)]
async fn each_record_of_a_concurrent_batch_logs_only_under_its_own_ids() {
    let store = Arc::new(InMemoryConversationStore::new());
    let [(a, a_subtask), (b, b_subtask)] = two_conversations(&store).await;
    // Every work request waits, so the two records' futures are suspended inside their work at the same time.
    let model = Arc::new(
        ScriptedModel::always(Ok(text_response("Order A1029 is paid."))).work_delay(Duration::from_millis(50)),
    );
    let queue: Arc<dyn TaskQueue> = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let w = Worker::new(
        store.clone(),
        TaskQueues::new(queue),
        model.clone(),
        model.clone(),
        Arc::new(StaticTools::new(vec![])),
        WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() },
    );
    let mut context = lambda_runtime::Context::default();
    context.deadline = (swarm_core::domain::now_ms() as u64) + 60_000;
    let event = batch(&[&TaskMessage::run(&a, &a_subtask.into()), &TaskMessage::run(&b, &b_subtask.into())]);

    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let response =
        worker::handler::handle(&w, LambdaEvent::new(event, context)).with_subscriber(subscriber).await.unwrap();
    assert_eq!(serde_json::to_value(&response).unwrap(), json!({"batchItemFailures": []}));
    for (id, subtask_id) in [(&a, a_subtask), (&b, b_subtask)] {
        assert_eq!(store.get_subtask(id, &subtask_id.into()).await.unwrap().unwrap().status, SubtaskStatus::Succeeded);
    }

    let logged = capture.0.lock().unwrap().clone();
    let expected = BTreeMap::from([("m0", (a.to_string(), a_subtask)), ("m1", (b.to_string(), b_subtask))]);
    let mut per_record: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for event in &logged {
        let messages: Vec<&String> = event.in_spans.get("message_id").into_iter().flatten().collect();
        assert_eq!(messages.len(), 1, "logged in exactly one record's span: {event:?}");
        let message_id = messages[0].as_str();
        let (conversation, subtask) = &expected[message_id];
        // Every id the event carries, from its spans or its own fields, is its record's.
        let mut conversations = event.in_spans.get("conversation_id").cloned().unwrap_or_default();
        conversations.extend(event.fields.0.get("conversation_id").cloned());
        let mut subtasks = event.in_spans.get("subtask_id").cloned().unwrap_or_default();
        subtasks.extend(event.fields.0.get("subtask_id").cloned());
        assert_eq!(conversations, BTreeSet::from([conversation.clone()]), "{event:?}");
        assert_eq!(subtasks, BTreeSet::from([subtask.to_string()]), "{event:?}");
        per_record.entry(message_id).or_default().push(event.fields.0.get("message").cloned().unwrap_or_default());
    }
    // Both records logged their whole run, and the two runs overlapped (both started before either finished).
    for message_id in ["m0", "m1"] {
        let lines = &per_record[message_id];
        for line in ["subtask started", "subtask finished", "subtask counted", "message handled"] {
            assert!(lines.iter().any(|l| l == line), "{message_id} logged {line:?}: {lines:?}");
        }
    }
    let order: Vec<String> = logged.iter().filter_map(|e| e.fields.0.get("message").cloned()).collect();
    let started = order.iter().rposition(|l| l == "subtask started").unwrap();
    let finished = order.iter().position(|l| l == "subtask finished").unwrap();
    assert!(started < finished, "the records ran concurrently: {order:?}");
}
