//! The worker's part in "no conversation hangs", on embedded adapters: tool-call ids made unique before anything runs, a dependent never `QUEUED` without a message, a subtask that stops for the conversation's deadline, a retried message brought back with `ChangeMessageVisibility`, the deadline path that re-arms and aggregates through the lease, the sweep, and the DLQ consumer as a closer alone. Timing rules run on tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use serde_json::json;
use swarm_adapters::embedded::{ChangedItem, InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, Subtask, SubtaskRecord, SubtaskResult,
    SubtaskStatus, TaskMessage, Usage, link_dependents, now_ms, sweep_shard,
};
use swarm_core::ports::{
    AccountingStore, AnswerStore, Call, ChatMessage, ChatModel, ChatRequest, ChatResponse, ConversationRecords,
    ConversationStore, FinishReason, LlmError, QueueError, StoreDecorator, StoreError, StoreOp, SubtaskStore,
    TaskQueue, ToolCall,
};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;
use swarm_testing::{FlakyStore, ScriptedModel, StaticTools, text_response};
use worker::{Closer, Outcome, SweepReport, Worker, WorkerSettings};

fn subtask(id: &str, depends_on: &[&str]) -> Subtask {
    Subtask {
        id: id.into(),
        instruction: format!("Check order A1029 ({id})."),
        tools: vec!["shop__get_order".into(), "shop__track_shipment".into()],
        depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
    }
}

/// A `RUNNING` conversation of `subtasks`, created `age_secs` ago with a deadline of `deadline_secs`.
async fn running(
    store: &InMemoryConversationStore,
    subtasks: Vec<Subtask>,
    age_secs: i64,
    deadline_secs: u64,
) -> ConversationId {
    let mut c = Conversation::new("C104", "Where is A1029?", now_ms() - age_secs * 1000, deadline_secs);
    c.sweep_shard = Some(sweep_shard(&c.id, 8));
    store.create_conversation(&c).await.unwrap();
    let mut records: Vec<SubtaskRecord> =
        subtasks.into_iter().map(|s| SubtaskRecord::new(&c, s, "support".into())).collect();
    link_dependents(&mut records);
    assert!(store.start_run(&c.id, None, &records, &[], &Usage::default()).await.unwrap());
    c.id
}

fn tools() -> Arc<StaticTools> {
    Arc::new(StaticTools::named(
        &["shop__get_order", "shop__track_shipment"],
        "",
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
    ))
}

fn worker(store: Arc<dyn ConversationStore>, queue: Arc<dyn TaskQueue>, model: Arc<dyn ChatModel>) -> Worker {
    Worker::new(
        store,
        TaskQueues::new(queue),
        model.clone(),
        model,
        tools(),
        WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() },
    )
}

fn queue(name: &str, visibility_secs: u64) -> InMemoryQueue {
    InMemoryQueue::new(QueueSettings {
        name: name.into(),
        visibility_timeout: Duration::from_secs(visibility_secs),
        max_receive_count: 3,
    })
}

fn lambda_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

fn calls(calls: &[(&str, &str)]) -> ChatResponse {
    ChatResponse {
        content: None,
        tool_calls: calls
            .iter()
            .map(|(id, name)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: r#"{"order_id":"A1029"}"#.into(),
            })
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        reasoning_content: None,
        usage: Usage::default(),
        model: "m".into(),
    }
}

#[tokio::test]
async fn repeated_missing_and_empty_tool_call_ids_are_made_unique_and_every_call_is_answered_once() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[])], 0, 120).await;
    // As some OpenAI-compatible servers answer: one id for every call of the message, or none.
    let model = Arc::new(ScriptedModel::new([
        Ok(calls(&[("call_0", "shop__get_order"), ("call_0", "shop__track_shipment"), ("", "shop__get_order")])),
        Ok(calls(&[("call_0", "shop__track_shipment")])),
        Ok(text_response("A1029 is paid and on its way.")),
    ]));
    let tools = tools();
    let w = Worker::new(
        store.clone(),
        TaskQueues::new(Arc::new(queue("tasks", 30))),
        model.clone(),
        model.clone(),
        tools.clone(),
        WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() },
    );
    let outcome = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;

    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Succeeded), "no internal transcript error");
    assert_eq!(tools.ran().len(), 4, "every call ran once");
    let last = model.requests().pop().unwrap().messages;
    swarm_core::llm::transcript::check_pairing(&last).unwrap();
    let ids_of = |m: &ChatMessage| match m {
        ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().map(|c| c.id.clone()).collect(),
        _ => Vec::new(),
    };
    let asked: Vec<Vec<String>> = last.iter().map(ids_of).filter(|ids| !ids.is_empty()).collect();
    assert_eq!(asked, vec![vec!["call_0", "call_r1_1", "call_r1_2"], vec!["call_0"]], "the first id kept verbatim");
    let answered: Vec<&str> = last
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["call_0", "call_r1_1", "call_r1_2", "call_0"], "one answer per call, in call order");
}

/// A queue whose first `fail` sends fail transiently (SQS throttling, a timeout).
struct FailingSends {
    inner: InMemoryQueue,
    fail: AtomicU32,
}

#[async_trait]
impl TaskQueue for FailingSends {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        if self.fail.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(QueueError::Transient("SendMessageBatch timed out (injected)".into()));
        }
        self.inner.send(messages, delay_seconds).await
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        self.inner.change_visibility(receipt_handle, seconds).await
    }
}

#[tokio::test]
async fn a_dependent_whose_message_could_not_be_sent_is_never_queued_and_the_retry_releases_it() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[]), subtask("w02", &["w01"])], 0, 120).await;
    let mut changes = store.subscribe();
    let tasks = queue("tasks", 30);
    let sends = Arc::new(FailingSends { inner: tasks.clone(), fail: AtomicU32::new(1) });
    let model = Arc::new(ScriptedModel::always(Ok(text_response("A1029 is paid."))));
    let w = worker(store.clone(), sends, model);

    let first = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert!(first.should_retry(), "the failed send is retried with the parent's message: {first:?}");
    let w02 = store.get_subtask(&id, &"w02".into()).await.unwrap().unwrap();
    assert_eq!((w02.status, tasks.depth()), (SubtaskStatus::Pending, 0), "no message, so not QUEUED");
    let second = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert_eq!(second, Outcome::AlreadyFinished);
    assert_eq!(store.get_subtask(&id, &"w02".into()).await.unwrap().unwrap().status, SubtaskStatus::Queued);
    let sent = tasks.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(serde_json::from_str::<TaskMessage>(&sent[0].body).unwrap(), TaskMessage::run(&id, &"w02".into()));
    // Never QUEUED before its message was sent: the only QUEUED write came after the successful send.
    let mut w02_writes = Vec::new();
    while let Ok(change) = changes.try_recv() {
        if let ChangedItem::Subtask(r) = change.item
            && r.subtask.id == "w02"
        {
            w02_writes.push(r.status);
        }
    }
    assert_eq!(w02_writes, [SubtaskStatus::Queued], "w02 went PENDING → QUEUED once, after its message");
}

#[tokio::test(start_paused = true)]
async fn a_subtask_stops_for_the_conversations_deadline_and_records_what_it_has_instead_of_handing_back() {
    let store = Arc::new(InMemoryConversationStore::new());
    // 8 s left of the conversation, 60 s of the invocation: the conversation's deadline (less its 5 s margin) binds.
    let id = running(&store, vec![subtask("w01", &[])], 112, 120).await;
    let tasks = queue("tasks", 30);
    let model =
        Arc::new(ScriptedModel::always(Ok(text_response("late"))).stall_work_on("A1029", Duration::from_secs(50)));
    let w = worker(store.clone(), Arc::new(tasks.clone()), model);
    let started = tokio::time::Instant::now();
    let outcome = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;

    assert_eq!(outcome, Outcome::Finished(SubtaskStatus::Failed), "recorded, not handed back");
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "stopped by the conversation's deadline: {:?}",
        started.elapsed()
    );
    assert_eq!(tasks.depth(), 0, "no hand-back message");
    let rec = store.get_subtask(&id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(rec.result.and_then(|r| r.failure_kind()), Some(FailureKind::DeadlinePassed));
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().remaining, 0, "counted");
}

#[tokio::test(start_paused = true)]
async fn a_message_reported_for_retry_comes_back_after_the_retry_visibility_not_the_queues() {
    let timings = Timings::standard();
    let tasks = queue("tasks", timings.queues.tasks.visibility_timeout.as_secs());
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
    let throttled = Arc::new(FlakyStore::new(Arc::new(InMemoryConversationStore::new())).fail_everything("Throttling"));
    let w = worker(throttled, Arc::new(tasks.clone()), model);
    tasks.send(&[TaskMessage::run(&ConversationId::new(), &"w01".into())], 0).await.unwrap();
    let received = tasks.receive(1, Duration::ZERO).await.unwrap();
    let event: SqsEvent = serde_json::from_value(json!({"Records": [{
        "messageId": received[0].message_id, "receiptHandle": received[0].receipt_handle, "body": received[0].body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {}, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tasks"
    }]}))
    .unwrap();
    let mut context = lambda_runtime::Context::default();
    context.deadline = (now_ms() as u64) + 60_000;
    let response = worker::handler::handle(&w, LambdaEvent::new(event, context)).await.unwrap();
    assert_eq!(response.batch_item_failures.len(), 1);

    let sent_back = tokio::time::Instant::now();
    let again = tasks.receive(1, timings.queues.tasks.visibility_timeout).await.unwrap();
    assert_eq!(again.len(), 1, "it came back");
    assert_eq!(again[0].receive_count, 2);
    let after = sent_back.elapsed();
    assert!(after >= timings.worker.retry_visibility, "not before the retry visibility: {after:?}");
    assert!(after < timings.queues.tasks.visibility_timeout, "{after:?}: the queue's visibility timeout");
    assert_eq!(after, Duration::from_secs(10), "the worker's retry visibility, to the second");
}

/// Every message `queue` holds, whatever its delay.
async fn deadline_messages(queue: &InMemoryQueue, id: &ConversationId) -> usize {
    let mut n = 0;
    for m in queue.receive(10, Duration::from_secs(900)).await.unwrap() {
        assert_eq!(
            serde_json::from_str::<TaskMessage>(&m.body).unwrap(),
            TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }
        );
        queue.delete(&m.receipt_handle).await.unwrap();
        n += 1;
    }
    n
}

#[tokio::test(start_paused = true)]
async fn the_deadline_path_re_arms_until_the_conversation_is_answered_and_answers_it_itself() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[]), subtask("w02", &[])], 200, 120).await;
    let result = SubtaskResult::Succeeded { text: "A1029 is paid.".into(), tool_calls: vec![] };
    store.record_result(&id, &"w01".into(), &result, &Usage::default(), &[], now_ms()).await.unwrap();
    store.count_finished(&id, &"w01".into(), &Usage::default()).await.unwrap();
    let tasks = queue("tasks", 30);
    let w = worker(store.clone(), Arc::new(tasks.clone()), Arc::new(ScriptedModel::new([])));

    // Past the deadline: w02 is closed, which brings remaining to 0 (the stream would now trigger the
    // aggregator), and the path re-arms in case that trigger is lost.
    let first = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;
    assert!(matches!(first, Outcome::Ignored(_)), "{first:?}");
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((conv.status, conv.remaining), (ConversationStatus::Running, 0));
    assert_eq!(deadline_messages(&tasks, &id).await, 1, "re-armed");
    // Nothing answered since: this run aggregates itself, through the lease, and stops re-arming.
    let second = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;
    assert_eq!(second, Outcome::Concluded(ConversationStatus::Done));
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Done);
    assert!(conv.lease.unwrap().holder.starts_with("deadline:"));
    let reply = conv.reply.unwrap();
    assert!(reply.contains("A1029 is paid.") && reply.contains("could not be finished in time"), "{reply}");
    assert_eq!(deadline_messages(&tasks, &id).await, 0, "terminal: no more deadline messages");
    let third = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;
    assert_eq!(third, Outcome::Ignored("conversation already over".into()));
}

#[tokio::test(start_paused = true)]
async fn a_running_conversation_with_nothing_remaining_whose_trigger_was_lost_is_answered_by_the_deadline_path() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[])], 200, 120).await;
    let result = SubtaskResult::Succeeded { text: "A1029 is paid.".into(), tool_calls: vec![] };
    store.record_result(&id, &"w01".into(), &result, &Usage::default(), &[], now_ms()).await.unwrap();
    store.count_finished(&id, &"w01".into(), &Usage::default()).await.unwrap();
    // The stream record of remaining = 0 never reached the aggregator.
    let tasks = queue("tasks", 30);
    let w = worker(store.clone(), Arc::new(tasks.clone()), Arc::new(ScriptedModel::new([])));
    let outcome = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;

    assert_eq!(outcome, Outcome::Concluded(ConversationStatus::Done));
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!(conv.status, ConversationStatus::Done);
    assert_eq!(conv.reply.as_deref(), Some("A1029 is paid."));
}

#[tokio::test(start_paused = true)]
async fn an_aggregation_whose_lease_is_live_is_left_alone_and_the_deadline_path_re_arms() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[])], 200, 120).await;
    store.count_finished(&id, &"w01".into(), &Usage::default()).await.unwrap();
    let phase = swarm_core::ports::LeasePhase::Aggregating { turn: 0 };
    store.acquire_lease(&id, phase, "aggregator:alive", now_ms(), now_ms() + 90_000).await.unwrap();
    let tasks = queue("tasks", 30);
    let w = worker(store.clone(), Arc::new(tasks.clone()), Arc::new(ScriptedModel::new([])));
    let outcome = w.handle(TaskMessage::Deadline { conversation_id: id.clone(), turn: 0 }, lambda_deadline()).await;

    assert!(matches!(&outcome, Outcome::Ignored(why) if why.contains("aggregator:alive")), "{outcome:?}");
    let conv = store.get_conversation(&id).await.unwrap().unwrap();
    assert_eq!((conv.status, conv.reply), (ConversationStatus::Aggregating, None), "never taken while live");
    assert_eq!(deadline_messages(&tasks, &id).await, 1, "re-armed until the conversation is terminal");
}

#[tokio::test(start_paused = true)]
async fn the_sweep_runs_the_deadline_path_of_every_overdue_conversation_and_only_those() {
    let store = Arc::new(InMemoryConversationStore::new());
    // Answered by the sweep: nothing remaining, its trigger lost.
    let lost = running(&store, vec![subtask("w01", &[])], 200, 120).await;
    let result = SubtaskResult::Succeeded { text: "A1029 is paid.".into(), tool_calls: vec![] };
    store.record_result(&lost, &"w01".into(), &result, &Usage::default(), &[], now_ms()).await.unwrap();
    store.count_finished(&lost, &"w01".into(), &Usage::default()).await.unwrap();
    // Its creator died while planning.
    let mut planning = Conversation::new("C104", "q", now_ms() - 200_000, 120);
    planning.sweep_shard = Some(sweep_shard(&planning.id, 8));
    store.create_conversation(&planning).await.unwrap();
    // Open subtasks: closed for the aggregator.
    let open = running(&store, vec![subtask("w01", &[])], 200, 120).await;
    // Not due yet.
    let young = running(&store, vec![subtask("w01", &[])], 0, 120).await;
    let tasks = queue("tasks", 30);
    // The sweeper: the closer alone (no model, no tools).
    let settings = WorkerSettings { min_round_time: Duration::from_millis(10), ..WorkerSettings::default() };
    let w = Closer::new(store.clone(), TaskQueues::new(Arc::new(tasks.clone())), &settings);
    let report = w.sweep(tokio::time::Instant::now() + Duration::from_secs(50)).await;

    assert_eq!(
        report,
        SweepReport { found: 3, answered: 2, moved: 1, unfinished: 0, errors: 0, approved_not_run: 0, reissued: 0 }
    );
    let status = |c: Option<Conversation>| c.map(|c| (c.status, c.remaining));
    assert_eq!(status(store.get_conversation(&lost).await.unwrap()), Some((ConversationStatus::Done, 0)));
    assert_eq!(status(store.get_conversation(&planning.id).await.unwrap()), Some((ConversationStatus::Failed, 0)));
    assert_eq!(status(store.get_conversation(&open).await.unwrap()), Some((ConversationStatus::Running, 0)));
    assert_eq!(status(store.get_conversation(&young).await.unwrap()), Some((ConversationStatus::Running, 1)));
    assert_eq!(tasks.depth(), 0, "the sweep re-arms nothing: it comes back itself");
    // The next sweep answers the one whose subtasks it closed, if nothing else did.
    let again = w.sweep(tokio::time::Instant::now() + Duration::from_secs(50)).await;
    assert_eq!(
        again,
        SweepReport { found: 1, answered: 1, moved: 0, unfinished: 0, errors: 0, approved_not_run: 0, reissued: 0 }
    );
    // Its w01 never began (closed at the deadline with no attempt): nothing of it ran, so it ends
    // FAILED, never DONE with a reply about work that never ran.
    assert_eq!(store.get_conversation(&open).await.unwrap().unwrap().status, ConversationStatus::Failed);
    assert_eq!(w.sweep(tokio::time::Instant::now() + Duration::from_secs(50)).await, SweepReport::default());
}

#[tokio::test(start_paused = true)]
async fn the_dlq_consumer_is_a_closer_alone_and_records_a_dead_letter_failed_counted_and_its_dependent_skipped() {
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[]), subtask("w02", &["w01"])], 0, 120).await;
    let tasks = queue("tasks", 30);
    // No model, no gateway: the function holds neither.
    let dlq = Closer::new(store.clone(), TaskQueues::new(Arc::new(tasks.clone())), &WorkerSettings::default());
    let response = worker::handler::handle(
        &dlq,
        LambdaEvent::new(
            serde_json::from_value::<SqsEvent>(json!({"Records": [{
                "messageId": "m1",
                "body": serde_json::to_string(&TaskMessage::run(&id, &"w01".into())).unwrap(),
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tasks-dlq"
            }]}))
            .unwrap(),
            lambda_runtime::Context::default(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(serde_json::to_value(&response).unwrap(), json!({"batchItemFailures": []}));

    let w01 = store.get_subtask(&id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!(w01.result.and_then(|r| r.failure_kind()), Some(FailureKind::DeadLetter));
    let w02 = store.get_subtask(&id, &"w02".into()).await.unwrap().unwrap();
    assert_eq!(w02.status, SubtaskStatus::Skipped, "its dependent is decided too");
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().remaining, 0, "both counted");
    assert_eq!(
        dlq.handle_dead_letter(TaskMessage::run(&id, &"w01".into())).await,
        Outcome::Finished(SubtaskStatus::Failed),
        "a duplicate dead letter finds it closed and counts nothing twice"
    );
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().remaining, 0);
    assert_eq!(tasks.depth(), 0, "nothing enqueued: the dependent was skipped, not released");
}

// ------------------------------------------------------------------ a crash costs a retry: the heartbeats

/// A model whose first work request waits `stall` (an attempt stuck in its model call), and every
/// later one answers at once.
struct StallsFirst {
    stall: Duration,
    calls: AtomicU32,
}

#[async_trait]
impl ChatModel for StallsFirst {
    async fn complete(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::time::sleep(self.stall).await;
        }
        Ok(text_response("A1029 is paid."))
    }

    fn label(&self) -> String {
        "stalls first".into()
    }
}

/// A store whose `begin_attempt` never answers (an invocation stuck before its attempt began), and
/// whose `renew_attempt` answers are lost after the renewal was applied (every one, while `lose_renewals`).
struct StoreFaults {
    inner: Arc<dyn ConversationStore>,
    stall_begin: bool,
    lose_renewals: bool,
    renewals: AtomicU32,
}

impl StoreFaults {
    fn new(inner: Arc<dyn ConversationStore>) -> Self {
        Self { inner, stall_begin: false, lose_renewals: false, renewals: AtomicU32::new(0) }
    }
}

impl StoreDecorator for StoreFaults {
    fn inner(&self) -> &dyn ConversationStore {
        self.inner.as_ref()
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        match call.op {
            StoreOp::BeginAttempt if self.stall_begin => std::future::pending().await,
            StoreOp::RenewAttempt if self.lose_renewals => {
                run.await?;
                self.renewals.fetch_add(1, Ordering::SeqCst);
                Err(StoreError::Transient("renew_attempt answer lost (injected)".into()))
            }
            _ => run.await,
        }
    }
}

/// The SQS event of `received` messages of the `tasks` queue, with a Lambda deadline 60 s away.
fn sqs_event(received: &[swarm_adapters::embedded::ReceivedMessage]) -> LambdaEvent<SqsEvent> {
    let records: Vec<serde_json::Value> = received
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id, "receiptHandle": m.receipt_handle, "body": m.body,
                "attributes": {"ApproximateReceiveCount": m.receive_count.to_string()}, "messageAttributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tasks"
            })
        })
        .collect();
    let event: SqsEvent = serde_json::from_value(json!({ "Records": records })).unwrap();
    let mut context = lambda_runtime::Context::default();
    context.deadline = (now_ms() as u64) + 60_000;
    LambdaEvent::new(event, context)
}

#[tokio::test(start_paused = true)]
async fn a_killed_invocations_messages_never_begun_come_back_after_the_receipt_visibility_not_the_queues() {
    let timings = Timings::standard();
    let queue_visibility = timings.queues.tasks.visibility_timeout;
    let receipt_visibility = timings.worker.receipt_visibility;
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[]), subtask("w02", &[])], 0, 120).await;
    let tasks = queue("tasks", queue_visibility.as_secs());
    let stuck = Arc::new(StoreFaults { stall_begin: true, ..StoreFaults::new(store.clone()) });
    let model = Arc::new(ScriptedModel::always(Ok(text_response("A1029 is paid."))));
    let w = worker(stuck, Arc::new(tasks.clone()), model);
    tasks.send(&[TaskMessage::run(&id, &"w01".into()), TaskMessage::run(&id, &"w02".into())], 0).await.unwrap();
    let received = tasks.receive(10, Duration::ZERO).await.unwrap();
    assert_eq!(received.len(), 2);

    // Alive for three receipt visibilities: the heartbeat holds both messages in flight.
    let alive = receipt_visibility * 3;
    let handled = tokio::time::timeout(alive, worker::handler::handle(&w, sqs_event(&received))).await;
    assert!(handled.is_err(), "the invocation was still stuck before begin_attempt");
    assert_eq!(
        tasks.approximate_depth().in_flight,
        2,
        "held while the invocation lived: {:?}",
        tasks.approximate_depth()
    );
    // Dropped there (a crash): nothing extends them any more.
    let killed = tokio::time::Instant::now();
    let again = tasks.receive(10, queue_visibility).await.unwrap();
    let after = killed.elapsed();
    assert_eq!(again.len(), 2, "both came back");
    assert!(again.iter().all(|m| m.receive_count == 2));
    assert!(after <= receipt_visibility, "back within the receipt visibility: {after:?}");
    assert!(
        after >= receipt_visibility - timings.worker.heartbeat,
        "not before the last beat's visibility ran out: {after:?}"
    );
    for sid in ["w01", "w02"] {
        let rec = store.get_subtask(&id, &sid.into()).await.unwrap().unwrap();
        assert_eq!((rec.status, rec.attempts), (SubtaskStatus::Queued, 0), "{sid} never began");
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_reported_for_retry_is_let_go_by_the_heartbeat_and_a_finished_batch_stays_held_until_it_returns() {
    // The retry visibility (10 s) wins over the receipt visibility (30 s) for a message given back:
    // the heartbeat lets go of it before it is made visible again.
    let timings = Timings::standard();
    let tasks = queue("tasks", timings.queues.tasks.visibility_timeout.as_secs());
    let throttled = Arc::new(FlakyStore::new(Arc::new(InMemoryConversationStore::new())).fail_everything("Throttling"));
    let model: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
    let w = worker(throttled, Arc::new(tasks.clone()), model);
    tasks.send(&[TaskMessage::run(&ConversationId::new(), &"w01".into())], 0).await.unwrap();
    let received = tasks.receive(1, Duration::ZERO).await.unwrap();
    let response = worker::handler::handle(&w, sqs_event(&received)).await.unwrap();
    assert_eq!(response.batch_item_failures.len(), 1);
    let sent_back = tokio::time::Instant::now();
    let again = tasks.receive(1, timings.queues.tasks.visibility_timeout).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(sent_back.elapsed(), timings.worker.retry_visibility, "the retry visibility, not the receipt's");
}

#[tokio::test]
async fn a_dropped_attempt_frees_its_lease_within_the_attempt_lease_and_the_redelivery_succeeds() {
    // Real time at 1/20 of the table (the lease is on the wall clock): heartbeat 250 ms, lease 1.5 s.
    let settings = WorkerSettings {
        min_round_time: Duration::from_millis(10),
        ..WorkerSettings::from_timings(&Timings::standard().scaled(0.05))
    };
    let lease = settings.heartbeat.attempt_lease;
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[])], 0, 120).await;
    let tasks = queue("tasks", 30);
    let model = Arc::new(StallsFirst { stall: Duration::from_secs(3600), calls: AtomicU32::new(0) });
    let w =
        Worker::new(store.clone(), TaskQueues::new(Arc::new(tasks.clone())), model.clone(), model, tools(), settings);

    // The first attempt runs past its first lease (renewed by its heartbeat), then dies in its model call.
    let first =
        tokio::time::timeout(lease * 2, w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline())).await;
    assert!(first.is_err(), "the first attempt was still in its model call");
    let killed = tokio::time::Instant::now();
    let held = store.get_subtask(&id, &"w01".into()).await.unwrap().unwrap();
    let until = held.lease.as_ref().unwrap().until_ms;
    let began = held.started_at_ms.unwrap();
    assert!(until > began + swarm_core::time::millis(lease), "renewed past its first term while alive: {held:?}");
    assert!(until <= now_ms() + swarm_core::time::millis(lease), "never beyond one lease from now");

    // A redelivery inside the lease is told to come back once it has ended, and sends itself back.
    let early = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert!(matches!(early, Outcome::Requeued(_)), "{early:?}");
    // Past it, the redelivery reruns the subtask: it succeeds as the second attempt.
    tokio::time::sleep(swarm_core::time::between(now_ms(), until) + Duration::from_millis(20)).await;
    let rerun = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert_eq!(rerun, Outcome::Finished(SubtaskStatus::Succeeded));
    assert!(killed.elapsed() <= lease * 3, "freed within the lease, not the invocation: {:?}", killed.elapsed());
    let rec = store.get_subtask(&id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempts), (SubtaskStatus::Succeeded, 2));
    assert_eq!(store.get_conversation(&id).await.unwrap().unwrap().remaining, 0, "counted once");
}

#[tokio::test]
async fn a_lease_renewal_whose_answer_was_lost_keeps_the_lease_and_no_second_attempt_begins() {
    // Real time at 1/20 (heartbeat 250 ms, lease 1.5 s): every renewal is applied and its answer
    // lost; the attempt runs for 4 leases.
    let settings = WorkerSettings {
        min_round_time: Duration::from_millis(10),
        ..WorkerSettings::from_timings(&Timings::standard().scaled(0.05))
    };
    let lease = settings.heartbeat.attempt_lease;
    let store = Arc::new(InMemoryConversationStore::new());
    let id = running(&store, vec![subtask("w01", &[])], 0, 120).await;
    let tasks = queue("tasks", 30);
    let lossy = Arc::new(StoreFaults { lose_renewals: true, ..StoreFaults::new(store.clone()) });
    let model = Arc::new(StallsFirst { stall: lease * 4, calls: AtomicU32::new(0) });
    let w = Arc::new(Worker::new(
        lossy.clone(),
        TaskQueues::new(Arc::new(tasks.clone())),
        model.clone(),
        model,
        tools(),
        settings,
    ));

    let first = tokio::spawn({
        let (w, id) = (w.clone(), id.clone());
        async move { w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await }
    });
    // Past two leases, a duplicate delivery still finds the first attempt's lease live.
    tokio::time::sleep(lease * 2).await;
    let duplicate = w.handle(TaskMessage::run(&id, &"w01".into()), lambda_deadline()).await;
    assert!(matches!(duplicate, Outcome::Requeued(_)), "the renewed lease held it: {duplicate:?}");
    assert_eq!(first.await.unwrap(), Outcome::Finished(SubtaskStatus::Succeeded));
    assert!(lossy.renewals.load(Ordering::SeqCst) >= 3, "renewed (answers lost) while it ran");
    let rec = store.get_subtask(&id, &"w01".into()).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempts), (SubtaskStatus::Succeeded, 1), "one attempt, never taken over");
}
