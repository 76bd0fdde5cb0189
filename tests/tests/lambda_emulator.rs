//! One whole conversation through the Lambda handlers on the AWS emulator: API event from the fixture, worker events from real SQS receives, aggregator events from the real DynamoDB stream, and the DLQ path.
//!
//! Needs moto: `infra/aws/moto.sh start`, then
//! `SWARM_AWS_ENDPOINT=http://127.0.0.1:5000 cargo test -p swarm-tests --test lambda_emulator`.
//! Without `SWARM_AWS_ENDPOINT` the test fails and says so, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_core::llm::Models;
use swarm_core::timings::Timings;
use swarm_local::{BackendChoice, EmulatorOptions, Function, LocalStack, Queue, QueueDepth, StackOptions, Wraps};
use swarm_tests::{case, emulator_endpoint, failing_to_begin, over_offline, subtask_of, unmet_expectations, with_plan};

/// q03's three orders, plus a coupon check whose message will keep failing.
fn plan() -> String {
    json!({"subtasks": [
        {"id": "w01", "instruction": "Check the status of order A1001.", "tools": ["shop__get_order"]},
        {"id": "w02", "instruction": "Check the status of order A1013.", "tools": ["shop__get_order"]},
        {"id": "w03", "instruction": "Check the status of order A1025.", "tools": ["shop__get_order"]},
        {"id": "w04", "instruction": "Check whether coupon SAVE20 can be used.", "tools": ["shop__check_coupon"]}
    ]})
    .to_string()
}

/// Polls a queue until its depth is as wanted, or 10 s pass; answers the last depth seen.
async fn settle(stack: &LocalStack, queue: Queue, want: impl Fn(&QueueDepth) -> bool) -> anyhow::Result<QueueDepth> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let depth = stack.queue_depth(queue).await?;
        if want(&depth) || tokio::time::Instant::now() >= deadline {
            return Ok(depth);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_conversation_runs_through_the_lambda_handlers_on_the_emulator_and_a_dead_lettered_subtask_still_completes_it()
 {
    let test = "lambda_emulator::whole_conversation";
    let Some(endpoint) = emulator_endpoint(test) else { return };
    // Warnings and errors of the emulated platform show with a failure (RUST_LOG=info for the whole story).
    swarm_adapters::telemetry::init_with_default("warn");
    let started = Instant::now();
    let q03 = case("q03");
    let model = Arc::new(with_plan(over_offline(), &plan()));
    let mut timings = Timings::standard().clone();
    // Short, so the redrive happens within seconds; not below the invocation
    // timeout (Lambda requires visibility timeout ≥ function timeout), and that must
    // exceed the worker's 3 s safety margin plus one round.
    timings.queues.tasks.visibility_timeout = Duration::from_secs(5);
    timings.worker.timeout = Duration::from_secs(5);
    timings.queues.max_receive_count = 2;
    timings.worker.min_round = Duration::from_millis(500);
    timings.local.stream_poll = Duration::from_millis(100);
    let options = StackOptions {
        backend: BackendChoice::Emulator(EmulatorOptions::new(endpoint)),
        models: Some(Models::single(model.clone())),
        wraps: Wraps::default().store(&Function::WORKERS, Arc::new(|inner| failing_to_begin(inner, "w04"))),
        timings,
        ..StackOptions::default()
    };
    let stack = LocalStack::start(options).await.unwrap();

    // The API request: the fixture event, with this conversation's message and a fresh Idempotency-Key.
    let mut event: Value = serde_json::from_str(include_str!("../../events/apigw-post-conversation.json")).unwrap();
    let body = json!({ "message": q03.query, "customer_id": q03.customer_id }).to_string();
    let key = format!("lambda-emulator-{}", uuid_like());
    event["headers"]["content-length"] = json!(body.len().to_string());
    event["headers"]["idempotency-key"] = json!(key);
    event["body"] = json!(body);
    let first = stack.api_event(&event).await;

    // Everything observed is collected first and the stack shut down (its table and
    // queues deleted) before any assertion, so a failure leaves nothing on the emulator.
    let id = first.as_ref().ok().and_then(|(_, a)| a["conversation_id"].as_str()).unwrap_or_default().to_owned();
    let finished = match id.as_str() {
        "" => Err(anyhow::anyhow!("no conversation was created: {first:?}")),
        id => stack.wait_finished(id, Duration::from_secs(45)).await,
    };
    // The same request again once it is answered: the same conversation, nothing sent again. (Inside the
    // creator's planning lease a retry sends the subtasks that have not begun — a creator killed before
    // its send holds its lease too — and w04 never begins here, so a retry then would deliver it twice more.)
    let again = stack.api_event(&event).await;
    let depths = async {
        let dlq = settle(&stack, Queue::TasksDeadLetters, |d| d.total() == 0).await?;
        let tasks = settle(&stack, Queue::Tasks, |d| d.visible == 0 && d.in_flight == 0).await?;
        let refund = stack.queue_depth(Queue::Refund).await?;
        let refund_dlq = stack.queue_depth(Queue::RefundDeadLetters).await?;
        anyhow::Ok([dlq, tasks, refund, refund_dlq])
    }
    .await;
    let tasks_queue = stack.queue_name(Queue::Tasks).to_owned();
    let dlq = stack.queue_name(Queue::TasksDeadLetters).to_owned();
    let received = stack.received();
    let c = stack.counters().snapshot();
    let counters = [
        c.worker_records,
        c.batch_item_failures,
        c.dead_letter_invocations,
        c.stream_records,
        c.stream_records_matched,
        c.aggregator_invocations,
    ];
    stack.shutdown().await;
    let (status, answer) = first.unwrap();
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["status_url"], format!("/conversations/{id}"));
    let (again_status, again) = again.unwrap();
    assert_eq!(again_status, 202, "{again}");
    assert_eq!(again["conversation_id"], id.as_str(), "the same Idempotency-Key answers the same conversation");
    let view = finished.unwrap();
    assert_eq!(view.conversation_id, id);
    let [dlq_depth, tasks_depth, refund_depth, refund_dlq_depth] = depths.unwrap();
    let [
        worker_records,
        batch_item_failures,
        dead_letter_invocations,
        stream_records,
        stream_records_matched,
        aggregator_invocations,
    ] = counters;

    // The conversation.
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.customer_id, "C100");
    assert_eq!((view.progress.finished, view.progress.total), (4, 4));
    let statuses: Vec<(&str, SubtaskStatus)> = view.subtasks.iter().map(|s| (s.id.as_str(), s.status)).collect();
    assert_eq!(
        statuses,
        vec![
            ("w01", SubtaskStatus::Succeeded),
            ("w02", SubtaskStatus::Succeeded),
            ("w03", SubtaskStatus::Succeeded),
            ("w04", SubtaskStatus::Failed)
        ]
    );
    for s in &view.subtasks[..3] {
        assert_eq!(s.tools_used, vec!["shop__get_order".to_owned()], "{}", s.id);
    }
    let w04 = &view.subtasks[3];
    assert!(w04.tools_used.is_empty(), "w04 never ran: {:?}", w04.tools_used);
    assert_eq!(w04.error.as_deref(), Some(swarm_core::domain::FailureKind::DeadLetter.customer_message()));
    let problems = unmet_expectations(&q03, &view);
    assert!(problems.is_empty(), "q03's facts: {problems:?}\nreply: {:?}", view.reply);
    let reply = view.reply.clone().unwrap();
    for fact in ["A1001", "A1013", "A1025", "customs", "delivered"] {
        assert!(reply.contains(fact), "reply lacks {fact}: {reply}");
    }
    assert!(reply.contains("could not"), "the reply says plainly what could not be done: {reply}");
    assert!(!reply.contains("ProvisionedThroughputExceeded"), "no error text passed on as an answer: {reply}");

    // What SQS delivered: w04 twice on the tasks queue (both reported as batch item
    // failures), then once from the DLQ; every other subtask once, acknowledged.
    let of = |queue: &str, subtask: &str| -> Vec<(u32, bool)> {
        received
            .iter()
            .filter(|m| m.queue == queue && subtask_of(&m.body) == subtask)
            .map(|m| (m.receive_count, m.retried))
            .collect()
    };
    assert_eq!(of(&tasks_queue, "w04"), vec![(1, true), (2, true)], "{received:?}");
    assert_eq!(of(&dlq, "w04").len(), 1, "{received:?}");
    assert!(!of(&dlq, "w04")[0].1, "the DLQ consumer acknowledged it");
    for s in ["w01", "w02", "w03"] {
        assert_eq!(of(&tasks_queue, s), vec![(1, false)], "{s}: {received:?}");
        assert!(of(&dlq, s).is_empty(), "{s}");
    }
    assert_eq!(batch_item_failures, 2);
    assert_eq!(dead_letter_invocations, 1);
    // Messages the worker got (in batches of up to `worker.batch_size`).
    assert_eq!(worker_records, 5, "3 subtasks once, w04 twice");

    // The stream: every write read, exactly one record passed the filter, one aggregation, one reply.
    assert!(stream_records >= 18, "every write of the run shows on the stream: {stream_records}");
    assert_eq!(stream_records_matched, 1);
    assert_eq!(aggregator_invocations, 1);
    let (plans, _, replies) = model.counts();
    assert_eq!((plans, replies), (1, 1), "planned once (the idempotent retry did not plan again), replied once");

    // The queues at the end: the DLQ and the tasks queue empty; the side effects' queue holds only the
    // deadline path's not-yet-due first run (armed there at planning: the refund worker may send a
    // never-sent subtask to either queue; it is due when the planning lease ends).
    assert_eq!(dlq_depth, QueueDepth::default(), "the DLQ is empty at the end");
    assert_eq!(tasks_depth, QueueDepth::default(), "the tasks queue is empty at the end");
    assert_eq!(
        refund_depth,
        QueueDepth { visible: 0, in_flight: 0, delayed: 1 },
        "only the not-yet-due first run of the deadline path is left"
    );
    assert_eq!(refund_dlq_depth.total(), 0);

    let took = started.elapsed();
    eprintln!(
        "{test}: {:.1} s wall on {}",
        took.as_secs_f64(),
        std::env::var("SWARM_AWS_ENDPOINT").unwrap_or_default()
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// A key unique to this run (no extra dependency for UUIDs).
fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{nanos:x}-{}", std::process::id())
}
