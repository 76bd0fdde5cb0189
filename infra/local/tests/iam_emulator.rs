//! IAM as deployed, on the emulator: with IAM enforced (`MOTO_IAM=1 infra/aws/moto.sh start`, its own port), each function signs with its own IAM user holding its role's policies from template.yaml, and what its role may not do is refused — a send to a queue it may not send to is answered 403 and surfaces as a permanent queue error, a table call outside its grants as a permanent store error.
//!
//! Needs `SWARM_AWS_IAM_ENDPOINT` (the IAM-enforcing emulator); without it the tests fail and say so,
//! unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::io::Write as _;

use anyhow::Result;
use swarm_core::domain::{Conversation, ConversationId, SubtaskId, TaskMessage, now_ms};
use swarm_core::ports::CreateOutcome;
use swarm_core::timings::Timings;
use swarm_local::platform::emulator::{EmulatorBackend, EmulatorOptions};
use swarm_local::platform::{Backend, FunctionClients, Queue};

/// The IAM-enforcing emulator's endpoint; `None` (after a loud line) only when `SWARM_SKIP_AWS=1`.
fn iam_endpoint(test: &str) -> Option<String> {
    match std::env::var("SWARM_AWS_IAM_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => Some(e.trim().to_owned()),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            let _ =
                writeln!(std::io::stderr(), "!!!!!!!! SKIPPED {test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_IAM_ENDPOINT");
            None
        }
        _ => panic!(
            "{test} needs an emulator that enforces IAM: `MOTO_PORT=5001 MOTO_IAM=1 infra/aws/moto.sh start`, then \
             SWARM_AWS_IAM_ENDPOINT=http://127.0.0.1:5001 (or SWARM_SKIP_AWS=1 to skip it)"
        ),
    }
}

async fn backend(test: &str) -> Option<EmulatorBackend> {
    let endpoint = iam_endpoint(test)?;
    let options = EmulatorOptions::new(endpoint).with_iam(true);
    Some(EmulatorBackend::provision(&options, Timings::standard()).await.expect("provisioning with IAM on"))
}

fn clients(backend: &EmulatorBackend, function: &str) -> FunctionClients {
    backend.clients(function).unwrap_or_else(|| panic!("no identity for {function}"))
}

/// `function` sends one message to `queue`, signed as itself.
async fn send(backend: &EmulatorBackend, function: &str, queue: Queue) -> Result<(), swarm_core::ports::QueueError> {
    let url = &backend.queue(queue).url;
    let message = TaskMessage::run(&ConversationId::new(), &SubtaskId::from("w01"));
    clients(backend, function).senders[url].send(&[message], 0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_support_worker_sending_to_the_refund_queue_is_refused_403_as_a_permanent_queue_error() -> Result<()> {
    let Some(backend) = backend("the_support_worker_sending_to_the_refund_queue").await else { return Ok(()) };
    let refused = send(&backend, "Worker", Queue::Refund).await;
    let allowed = send(&backend, "Worker", Queue::Tasks).await;
    let admin = backend
        .queue(Queue::Refund)
        .sender
        .send(&[TaskMessage::run(&ConversationId::new(), &SubtaskId::from("w02"))], 0)
        .await;
    backend.teardown().await;

    let e = refused.expect_err("WorkerRole may not send to the refund queue");
    assert!(!e.is_transient(), "a refusal is permanent, never retried: {e}");
    let text = e.to_string();
    assert!(text.contains("403") || text.contains("AccessDenied"), "the emulator's 403: {text}");
    assert!(allowed.is_ok(), "it may send to the tasks queue: {allowed:?}");
    assert!(admin.is_ok(), "the platform signs as the administrator: {admin:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_function_reaches_only_what_its_role_grants() -> Result<()> {
    let Some(backend) = backend("each_function_reaches_only_what_its_role_grants").await else { return Ok(()) };
    let queues = [
        ("Worker", Queue::Refund),
        ("Sweeper", Queue::Tasks),
        ("Aggregator", Queue::Tasks),
        ("RefundWorker", Queue::Refund),
        ("RefundWorker", Queue::Tasks),
        ("Orchestrator", Queue::Refund),
        ("DlqConsumer", Queue::Refund),
    ];
    let mut sends = Vec::new();
    for (function, queue) in queues {
        sends.push((function, queue, send(&backend, function, queue).await.is_ok()));
    }
    // The orchestrator writes a conversation with its idempotency claim (one transaction: two PutItems);
    // the aggregator, whose role writes with UpdateItem only, may not.
    let mut conversation = Conversation::new("C104", "q", now_ms(), 120);
    conversation.idempotency_key = Some("k-iam".into());
    let created = clients(&backend, "Orchestrator").store.create_conversation(&conversation).await;
    let other = Conversation::new("C104", "q", now_ms(), 120);
    let by_aggregator = clients(&backend, "Aggregator").store.create_conversation(&other).await;
    // The sweep index: the sweeper's role names it, the DLQ consumer's does not.
    let swept = clients(&backend, "Sweeper").store.overdue_conversations(0, now_ms(), 10).await;
    let by_dlq = clients(&backend, "DlqConsumer").store.overdue_conversations(0, now_ms(), 10).await;
    let read = clients(&backend, "Worker").store.get_conversation(&conversation.id).await;
    backend.teardown().await;

    assert_eq!(
        sends,
        [
            ("Worker", Queue::Refund, false),
            ("Sweeper", Queue::Tasks, false),
            ("Aggregator", Queue::Tasks, false),
            ("RefundWorker", Queue::Refund, true),
            ("RefundWorker", Queue::Tasks, true),
            ("Orchestrator", Queue::Refund, true),
            // A dead-lettered confirmation handed back as its next replay.
            ("DlqConsumer", Queue::Refund, true),
        ]
    );
    assert!(matches!(created, Ok(CreateOutcome::Created)), "{created:?}");
    let e = by_aggregator.expect_err("AggregatorRole has no PutItem");
    assert!(!e.is_transient(), "{e}");
    assert!(swept.is_ok(), "{swept:?}");
    let e = by_dlq.expect_err("DlqConsumerRole does not name the sweep index");
    assert!(!e.is_transient(), "{e}");
    assert_eq!(read.unwrap().map(|c| c.id), Some(conversation.id), "every function reads the table");
    Ok(())
}
