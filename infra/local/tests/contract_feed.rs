//! Contract test of the backends' change feeds: the same writes give the same stream records on the embedded backend and on DynamoDB Streams of the emulator — one per write of every item, in write order, none for a failed condition or a cancelled transaction.
//!
//! The emulator instantiation needs `SWARM_AWS_ENDPOINT`; without it it fails, unless `SWARM_SKIP_AWS=1`.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use swarm_core::domain::{Conversation, ConversationStatus, Subtask, SubtaskRecord, SubtaskResult, Usage};
use swarm_core::ports::CreateOutcome;
use swarm_core::timings::Timings;
use swarm_local::platform::Backend;
use swarm_local::platform::embedded::EmbeddedBackend;
use swarm_local::platform::emulator::{EmulatorBackend, EmulatorOptions};

/// `(eventName, item, status)` of every record, e.g. `("MODIFY", "TASK#w01", "RUNNING")`.
type Seen = Vec<(String, String, String)>;

/// Writes one conversation's life through the backend's store and reads its feed.
async fn writes_and_records(backend: &dyn Backend) -> Result<Seen> {
    let mut feed = backend.change_feed().await?;
    let store = backend.store();
    let mut c = Conversation::new("C104", "q", swarm_core::domain::now_ms(), 120);
    c.idempotency_key = Some("feed-contract".into());
    store.create_conversation(&c).await?;
    // Read what the create wrote, so the reader holds an iterator taken before the next write.
    let mut records: Vec<Value> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while records.len() < 2 && tokio::time::Instant::now() < deadline {
        records.extend(feed.next_records(Duration::from_secs(1)).await?);
    }
    // The same key again: the transaction is cancelled — no write, no record, and the records
    // of the writes after it all come.
    let mut again = Conversation::new("C104", "q", swarm_core::domain::now_ms(), 120);
    again.idempotency_key = c.idempotency_key.clone();
    assert_eq!(store.create_conversation(&again).await?, CreateOutcome::Existing(c.id.clone()));
    let subtask = |id: &str| {
        SubtaskRecord::new(
            &c,
            Subtask { id: id.into(), instruction: id.into(), tools: vec![], depends_on: vec![] },
            "support".into(),
        )
    };
    store.start_run(&c.id, None, &[subtask("w01"), subtask("w02")], &[], &Usage::default()).await?;
    store.begin_attempt(&c.id, &"w01".into(), &swarm_core::effects::AttemptLease::new(2), 1).await?;
    store.save_checkpoint(&c.id, &"w01".into(), "{\"round\":1}").await?;
    let done = SubtaskResult::Succeeded { text: "ok".into(), tool_calls: vec![] };
    store.record_result(&c.id, &"w01".into(), &done, &Usage::default(), &[], 2).await?;
    store.count_finished(&c.id, &"w01".into(), &Usage::default()).await?;
    // Failed conditions: no write, no record.
    store.count_finished(&c.id, &"w01".into(), &Usage::default()).await?;
    store.transition_conversation(&c.id, ConversationStatus::Planning, ConversationStatus::Failed).await?;
    store.record_result(&c.id, &"w02".into(), &done, &Usage::default(), &[], 3).await?;
    store.count_finished(&c.id, &"w02".into(), &Usage::default()).await?;
    store.transition_conversation(&c.id, ConversationStatus::Running, ConversationStatus::Aggregating).await?;
    store.finish_conversation(&c.id, 0, "the reply", &Usage::default()).await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while records.len() < EXPECTED.len() && tokio::time::Instant::now() < deadline {
        records.extend(feed.next_records(Duration::from_secs(1)).await?);
    }
    // Anything beyond the expected records would show here.
    records.extend(feed.next_records(Duration::from_millis(500)).await?);
    Ok(records
        .iter()
        .map(|r| {
            let keys = &r["dynamodb"]["Keys"];
            let item = match keys["SK"]["S"].as_str() {
                Some("IDEM") => "IDEM".to_owned(),
                Some(sk) => sk.to_owned(),
                None => String::new(),
            };
            let status = r["dynamodb"]["NewImage"]["status"]["S"].as_str().unwrap_or("").to_owned();
            (r["eventName"].as_str().unwrap_or("").to_owned(), item, status)
        })
        .collect())
}

const EXPECTED: &[(&str, &str, &str)] = &[
    ("INSERT", "META", "PLANNING"),
    ("INSERT", "IDEM", ""),
    ("INSERT", "TASK#w01", "QUEUED"),
    ("INSERT", "TASK#w02", "QUEUED"),
    ("MODIFY", "META", "RUNNING"),
    ("MODIFY", "TASK#w01", "RUNNING"),
    ("MODIFY", "TASK#w01", "RUNNING"),
    ("MODIFY", "TASK#w01", "SUCCEEDED"),
    ("MODIFY", "META", "RUNNING"),
    ("MODIFY", "TASK#w02", "SUCCEEDED"),
    ("MODIFY", "META", "RUNNING"),
    ("MODIFY", "META", "AGGREGATING"),
    ("MODIFY", "META", "DONE"),
];

fn expected() -> Seen {
    EXPECTED.iter().map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned())).collect()
}

/// Sorts the two items a transaction writes together (their relative order is not defined).
fn with_transaction_unordered(mut seen: Seen) -> Seen {
    if seen.len() >= 2 {
        seen[..2].sort();
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_feed_has_a_record_for_every_write_in_order() -> Result<()> {
    let backend = EmbeddedBackend::provision(Timings::standard());
    let seen = writes_and_records(&backend).await?;
    assert_eq!(with_transaction_unordered(seen), with_transaction_unordered(expected()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_stream_has_a_record_for_every_write_in_order() -> Result<()> {
    let Some(endpoint) = endpoint("dynamodb_stream_has_a_record_for_every_write_in_order") else { return Ok(()) };
    let backend = EmulatorBackend::provision(&EmulatorOptions::new(endpoint), Timings::standard()).await?;
    let seen = writes_and_records(&backend).await;
    backend.teardown().await;
    assert_eq!(with_transaction_unordered(seen?), with_transaction_unordered(expected()));
    Ok(())
}

/// The emulator's endpoint; `None` (after a loud line) only when `SWARM_SKIP_AWS=1`.
fn endpoint(test: &str) -> Option<String> {
    match std::env::var("SWARM_AWS_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => Some(e.trim().to_owned()),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            let _ = writeln!(std::io::stderr(), "!!!!!!!! SKIPPED {test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_ENDPOINT");
            None
        }
        _ => panic!("{test} needs SWARM_AWS_ENDPOINT (infra/aws/moto.sh start), or SWARM_SKIP_AWS=1 to skip it"),
    }
}
