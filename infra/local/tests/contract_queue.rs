//! Contract tests of the `TaskQueue` port and the local platform's `QueueConsumer`: each test is written once and runs against the embedded queue and SQS on a local emulator.
//!
//! The SQS instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000`
//! after `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`.
//! Each test creates its own queues, so tests run in parallel. Visibility
//! timeouts are 1–2 s, so these tests take a few seconds of wall time each.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use swarm_adapters::embedded::{InMemoryQueue, QueueSettings};
use swarm_core::domain::{ConversationId, TaskMessage, now_ms};
use swarm_core::ports::TaskQueue;
use swarm_local::platform::{Delivery, QueueConsumer, QueueDepth};

/// One queue with its DLQ, as the functions see them.
struct Queues {
    tx: Arc<dyn TaskQueue>,
    rx: Arc<dyn QueueConsumer>,
    dlq: Arc<dyn QueueConsumer>,
}

/// Which adapter a test runs against; makes fresh queues per test.
enum Backend {
    Embedded,
    Sqs(aws_sdk_sqs::Client),
}

impl Backend {
    /// A fresh queue (`VisibilityTimeout` seconds, redrive after `max_receive_count`) and its DLQ.
    async fn queues(&self, visibility_secs: u32, max_receive_count: u32) -> Result<Queues> {
        match self {
            Backend::Embedded => {
                let dlq = InMemoryQueue::new(QueueSettings { name: "tasks-dlq".into(), ..Default::default() });
                let main = InMemoryQueue::with_dlq(
                    QueueSettings {
                        name: "tasks".into(),
                        visibility_timeout: Duration::from_secs(u64::from(visibility_secs)),
                        max_receive_count,
                    },
                    dlq.clone(),
                );
                Ok(Queues { tx: Arc::new(main.clone()), rx: Arc::new(main), dlq: Arc::new(dlq) })
            }
            Backend::Sqs(client) => {
                use swarm_adapters::aws::sqs::SqsTaskQueue;
                use swarm_local::platform::sqs::{QueueSpec, SqsConsumer, create_queue_with_dlq};
                let name = format!("contract-{}", uuid::Uuid::now_v7().simple());
                let spec = QueueSpec {
                    name: &name,
                    visibility_timeout_secs: visibility_secs,
                    dlq_visibility_timeout_secs: 30,
                    max_receive_count,
                };
                let (url, dlq_url) = create_queue_with_dlq(client, spec).await?;
                Ok(Queues {
                    tx: Arc::new(SqsTaskQueue::new(client.clone(), url.clone())),
                    rx: Arc::new(SqsConsumer::new(client.clone(), url)),
                    dlq: Arc::new(SqsConsumer::new(client.clone(), dlq_url)),
                })
            }
        }
    }
}

/// Instantiates every listed contract test for each adapter.
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(super::Backend::Embedded).await
                }
            )*
        }

        mod sqs {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    match super::aws::client(stringify!($name))? {
                        Some(client) => super::$name(super::Backend::Sqs(client)).await,
                        None => Ok(()),
                    }
                }
            )*
        }
    };
}

contract_tests!(
    every_message_of_a_25_message_send_is_received_exactly_once,
    an_unacknowledged_message_returns_after_the_visibility_timeout,
    a_message_received_too_often_moves_to_the_dlq,
    a_delayed_message_stays_invisible_until_its_delay,
    a_deleted_message_never_returns,
    a_stale_receipt_is_not_an_error_and_the_current_one_deletes,
    a_handed_back_message_is_visible_again_after_the_new_timeout,
    changing_the_visibility_of_a_deleted_message_is_a_permanent_error,
    a_batch_visibility_change_holds_and_then_releases_every_message_and_names_the_stale_handles,
    a_delay_over_fifteen_minutes_is_rejected_and_nothing_is_sent,
    sending_no_messages_is_a_no_op,
    depth_counts_visible_in_flight_and_delayed_messages,
    a_message_carries_the_trace_context_of_the_span_that_sent_it,
);

fn run(i: usize) -> TaskMessage {
    TaskMessage::run(&ConversationId::from_trusted("0190f5a2-0000-7000-8000-000000000001"), &format!("w{i:02}").into())
}

/// Receives until `want` messages arrived or `within` passed.
async fn receive_n(rx: &Arc<dyn QueueConsumer>, want: usize, within: Duration) -> Result<Vec<Delivery>> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        got.extend(rx.receive(10, Duration::from_secs(1)).await?);
    }
    Ok(got)
}

// ------------------------------------------------------------------ the contract

async fn a_message_carries_the_trace_context_of_the_span_that_sent_it(backend: Backend) -> Result<()> {
    use swarm_adapters::telemetry::{self, MetricsSink, Options, TelemetryConfig, TraceExport, propagation};
    use tracing::Instrument;
    telemetry::install(Options {
        default_level: "warn".into(),
        config: TelemetryConfig { service: "contract".into(), traces: TraceExport::Off, on_lambda: false },
        keep_spans: true,
        metrics: MetricsSink::Off,
    })?;
    let q = backend.queues(30, 3).await?;
    // A span of the swarm's crates (the telemetry records only those).
    let span = tracing::info_span!(target: "swarm_local::contract", "send");
    let sender = propagation::traceparent_of(&span);
    ensure!(sender.is_some(), "the span is recorded");
    q.tx.send(&[run(1), run(2)], 0).instrument(span).await?;
    q.tx.send(&[run(3)], 0).await?;
    let got = receive_n(&q.rx, 3, Duration::from_secs(10)).await?;
    ensure!(got.len() == 3, "got {}", got.len());
    for d in &got {
        let message: TaskMessage = serde_json::from_str(&d.body)?;
        let expected = if message == run(3) { None } else { sender.clone() };
        assert_eq!(
            d.trace_parent, expected,
            "{message:?}: the `traceparent` attribute of its sender, none outside a span"
        );
    }
    Ok(())
}

async fn every_message_of_a_25_message_send_is_received_exactly_once(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 3).await?;
    let sent: Vec<TaskMessage> = (0..25).map(run).collect();
    q.tx.send(&sent, 0).await?;

    let got = receive_n(&q.rx, 25, Duration::from_secs(20)).await?;
    assert_eq!(got.len(), 25, "all 25 received within 20 s");
    let ids: BTreeSet<&str> = got.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!(ids.len(), 25, "no message delivered twice");
    let mut bodies: Vec<TaskMessage> = got.iter().map(|d| serde_json::from_str(&d.body)).collect::<Result<_, _>>()?;
    bodies.sort_by_key(|m| serde_json::to_string(m).unwrap_or_default());
    let mut expected = sent.clone();
    expected.sort_by_key(|m| serde_json::to_string(m).unwrap_or_default());
    assert_eq!(bodies, expected, "bodies are the TaskMessage JSON, ids only");
    for d in &got {
        assert_eq!(d.receive_count, 1);
        assert!((d.sent_at_ms - now_ms()).abs() < 60_000, "sent_at_ms {} is now-ish", d.sent_at_ms);
        q.rx.delete(&d.receipt_handle).await?;
    }
    assert!(q.rx.receive(10, Duration::from_secs(1)).await?.is_empty(), "all deleted");
    Ok(())
}

async fn an_unacknowledged_message_returns_after_the_visibility_timeout(backend: Backend) -> Result<()> {
    let q = backend.queues(1, 5).await?;
    q.tx.send(&[run(1)], 0).await?;
    let first = receive_n(&q.rx, 1, Duration::from_secs(5)).await?;
    ensure!(first.len() == 1, "first receive got {}", first.len());
    assert_eq!(first[0].receive_count, 1);
    assert!(q.rx.receive(10, Duration::ZERO).await?.is_empty(), "in flight: invisible");

    let again = q.rx.receive(10, Duration::from_secs(5)).await?;
    ensure!(again.len() == 1, "redelivery got {}", again.len());
    assert_eq!(again[0].message_id, first[0].message_id);
    assert_eq!(again[0].receive_count, 2);
    assert_eq!(again[0].body, first[0].body);
    assert_eq!(again[0].sent_at_ms, first[0].sent_at_ms, "sent time is the first send's");
    assert_ne!(again[0].receipt_handle, first[0].receipt_handle, "each receive has its own receipt");
    Ok(())
}

async fn a_message_received_too_often_moves_to_the_dlq(backend: Backend) -> Result<()> {
    let q = backend.queues(1, 2).await?;
    q.tx.send(&[run(7)], 0).await?;
    for n in 1..=2 {
        let got = q.rx.receive(1, Duration::from_secs(5)).await?;
        ensure!(got.len() == 1, "receive {n} got {}", got.len());
        assert_eq!(got[0].receive_count, n);
    }
    assert!(q.rx.receive(1, Duration::from_secs(3)).await?.is_empty(), "moved to the DLQ after 2 receives");
    let dead = q.dlq.receive(1, Duration::from_secs(5)).await?;
    ensure!(dead.len() == 1, "DLQ got {}", dead.len());
    assert_eq!(serde_json::from_str::<TaskMessage>(&dead[0].body)?, run(7));
    Ok(())
}

async fn a_delayed_message_stays_invisible_until_its_delay(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 3).await?;
    let sent_at = Instant::now();
    q.tx.send(&[TaskMessage::Deadline { conversation_id: ConversationId::new() }], 2).await?;
    assert!(q.rx.receive(10, Duration::ZERO).await?.is_empty(), "delayed: not visible yet");
    let got = q.rx.receive(10, Duration::from_secs(6)).await?;
    ensure!(got.len() == 1, "after the delay got {}", got.len());
    let waited = sent_at.elapsed();
    assert!(waited >= Duration::from_millis(1_500), "visible after {waited:?}, before its 2 s delay");
    assert!(matches!(serde_json::from_str(&got[0].body)?, TaskMessage::Deadline { .. }));
    Ok(())
}

async fn a_deleted_message_never_returns(backend: Backend) -> Result<()> {
    let q = backend.queues(1, 5).await?;
    q.tx.send(&[run(1), run(2)], 0).await?;
    let got = receive_n(&q.rx, 2, Duration::from_secs(5)).await?;
    ensure!(got.len() == 2, "got {}", got.len());
    let kept = &got[1];
    q.rx.delete(&got[0].receipt_handle).await?;
    let later = q.rx.receive(10, Duration::from_secs(3)).await?;
    ensure!(later.len() == 1, "after the timeout got {}", later.len());
    assert_eq!(later[0].message_id, kept.message_id, "only the undeleted message returns");
    q.rx.delete(&later[0].receipt_handle).await?;
    assert!(q.rx.receive(10, Duration::from_secs(2)).await?.is_empty());
    Ok(())
}

async fn a_stale_receipt_is_not_an_error_and_the_current_one_deletes(backend: Backend) -> Result<()> {
    // SQS: deleting with an older receipt "succeeds, but the message might not be
    // deleted"; the contract is only that it is no error and the newest receipt deletes.
    let q = backend.queues(1, 5).await?;
    q.tx.send(&[run(3)], 0).await?;
    let first = receive_n(&q.rx, 1, Duration::from_secs(5)).await?;
    ensure!(first.len() == 1);
    let second = q.rx.receive(1, Duration::from_secs(5)).await?;
    ensure!(second.len() == 1, "redelivery got {}", second.len());
    q.rx.delete(&first[0].receipt_handle).await?;
    q.rx.delete(&second[0].receipt_handle).await?;
    assert!(q.rx.receive(10, Duration::from_secs(3)).await?.is_empty(), "deleted with the current receipt");
    Ok(())
}

async fn a_handed_back_message_is_visible_again_after_the_new_timeout(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 5).await?;
    q.tx.send(&[run(4)], 0).await?;
    let first = receive_n(&q.rx, 1, Duration::from_secs(5)).await?;
    ensure!(first.len() == 1);
    let handed_back = Instant::now();
    q.rx.change_visibility(&first[0].receipt_handle, 1).await?;
    let again = q.rx.receive(1, Duration::from_secs(5)).await?;
    ensure!(again.len() == 1, "after the handback got {}", again.len());
    assert!(handed_back.elapsed() >= Duration::from_millis(500), "reappeared after {:?}", handed_back.elapsed());
    assert_eq!(again[0].message_id, first[0].message_id);
    assert_eq!(again[0].receive_count, 2);
    Ok(())
}

async fn changing_the_visibility_of_a_deleted_message_is_a_permanent_error(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 5).await?;
    q.tx.send(&[run(5)], 0).await?;
    let got = receive_n(&q.rx, 1, Duration::from_secs(5)).await?;
    ensure!(got.len() == 1);
    q.rx.delete(&got[0].receipt_handle).await?;
    let err = q.rx.change_visibility(&got[0].receipt_handle, 5).await;
    assert!(matches!(&err, Err(e) if !e.is_transient()), "got {err:?}");
    Ok(())
}

/// The receipt heartbeat's call: `ChangeMessageVisibilityBatch` over more than one SQS batch (12
/// handles, 2 calls) first holds every message past the queue's own 2 s visibility timeout, then
/// sets them to 1 s; a deleted message's handle is answered as failed, and the others are unharmed.
async fn a_batch_visibility_change_holds_and_then_releases_every_message_and_names_the_stale_handles(
    backend: Backend,
) -> Result<()> {
    let q = backend.queues(2, 5).await?;
    q.tx.send(&(0..12).map(run).collect::<Vec<_>>(), 0).await?;
    let got = receive_n(&q.rx, 12, Duration::from_secs(10)).await?;
    ensure!(got.len() == 12, "received {}", got.len());
    q.rx.delete(&got[0].receipt_handle).await?;
    let handles: Vec<String> = got.iter().map(|d| d.receipt_handle.clone()).collect();
    let failed = q.tx.change_visibility_batch(&handles, 30).await?;
    assert_eq!(failed, vec![handles[0].clone()], "only the deleted message's handle fails");
    // Past the queue's own 2 s: held by the batch change.
    let early = q.rx.receive(10, Duration::from_secs(3)).await?;
    assert!(early.is_empty(), "{} came back while held", early.len());
    let released = Instant::now();
    let failed = q.tx.change_visibility_batch(&handles[1..], 1).await?;
    assert!(failed.is_empty(), "{failed:?}");
    let again = receive_n(&q.rx, 11, Duration::from_secs(10)).await?;
    assert!(released.elapsed() >= Duration::from_millis(500), "back after {:?}", released.elapsed());
    let ids: BTreeSet<String> = again.iter().map(|d| d.message_id.clone()).collect();
    let want: BTreeSet<String> = got[1..].iter().map(|d| d.message_id.clone()).collect();
    assert_eq!(ids, want, "every held message, and not the deleted one, came back");
    assert!(again.iter().all(|d| d.receive_count == 2));
    let err = q.tx.change_visibility_batch(&handles, 43_201).await;
    assert!(matches!(&err, Err(e) if !e.is_transient()), "beyond 12 hours: {err:?}");
    Ok(())
}

async fn a_delay_over_fifteen_minutes_is_rejected_and_nothing_is_sent(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 3).await?;
    let err = q.tx.send(&[run(1)], 901).await;
    assert!(matches!(&err, Err(e) if !e.is_transient()), "got {err:?}");
    assert!(q.rx.receive(10, Duration::from_secs(1)).await?.is_empty());
    Ok(())
}

async fn sending_no_messages_is_a_no_op(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 3).await?;
    q.tx.send(&[], 0).await?;
    assert!(q.rx.receive(10, Duration::from_secs(1)).await?.is_empty());
    Ok(())
}

// ------------------------------------------------------------------ the AWS side

async fn depth_counts_visible_in_flight_and_delayed_messages(backend: Backend) -> Result<()> {
    let q = backend.queues(30, 3).await?;
    assert_eq!(q.rx.depth().await?, QueueDepth::default(), "a new queue is empty");
    q.tx.send(&[run(1), run(2)], 0).await?;
    q.tx.send(&[run(3)], 60).await?;
    let got = receive_n(&q.rx, 1, Duration::from_secs(5)).await?;
    ensure!(!got.is_empty(), "nothing received");
    let in_flight = got.len() as u64;
    assert_eq!(q.rx.depth().await?, QueueDepth { visible: 2 - in_flight, in_flight, delayed: 1 });
    assert_eq!(q.dlq.depth().await?.total(), 0);
    Ok(())
}

mod aws {
    use anyhow::Result;
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

    /// An SQS client on the emulator, or `None` (with a loud line) when `SWARM_SKIP_AWS=1`.
    pub fn client(test: &str) -> Result<Option<aws_sdk_sqs::Client>> {
        let endpoint = match std::env::var("SWARM_AWS_ENDPOINT") {
            Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
            _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
                eprintln!(
                    "!!!!!!!! SKIPPED sqs::{test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_ENDPOINT; the AWS adapter was NOT tested"
                );
                return Ok(None);
            }
            _ => anyhow::bail!(
                "sqs::{test} needs a local AWS emulator: run `infra/aws/moto.sh start`, then \
                 `SWARM_AWS_ENDPOINT=http://127.0.0.1:5000 cargo test -p swarm-local --test contract_queue` \
                 (or set SWARM_SKIP_AWS=1 to skip the AWS side)"
            ),
        };
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "contract-tests"))
            .build();
        Ok(Some(aws_sdk_sqs::Client::from_conf(config)))
    }
}
