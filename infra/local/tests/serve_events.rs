//! `GET /conversations/{id}/events` through a running `swarm-local serve`, on both backends: an SSE client reads a conversation's events live, drops the connection mid-conversation, reconnects with `Last-Event-ID` and receives every event exactly once, each source's in order, the stream ending after `turn_done`; a `Last-Event-ID` the API never wrote is 400 and another customer's conversation 404.
//!
//! The emulator instantiation needs `SWARM_AWS_ENDPOINT`; without it it fails, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

#[path = "common/serve.rs"]
#[allow(dead_code)] // this suite starts its serve with an environment
mod serve;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use eventsource_stream::{Event, Eventsource as _};
use futures::StreamExt as _;
use serde_json::Value;

/// Polls every 100 ms, keeps alive after 400 ms of quiet.
const EVENT_ENV: &[(&str, &str)] = &[("SWARM_EVENTS_POLL_MS", "100"), ("SWARM_EVENTS_HEARTBEAT_MS", "400")];

/// What one connection read: its events, whether the server ended it, the keep-alives seen.
struct Read {
    events: Vec<Event>,
    ended: bool,
}

/// Opens the stream of `id` (resuming after `last_id`) and reads until `stop` says so (the client
/// drops the connection), the server ends it, or 60 s pass.
async fn read(base: &str, id: &str, last_id: Option<&str>, stop: impl Fn(&[Event]) -> bool) -> Result<Read> {
    let mut request = reqwest::Client::new().get(format!("{base}/conversations/{id}/events"));
    if let Some(last) = last_id {
        request = request.header("Last-Event-ID", last);
    }
    let response = request.send().await?;
    ensure!(response.status() == 200, "status {}", response.status());
    let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    ensure!(kind == "text/event-stream", "content type {kind}");
    let chunks = futures::stream::unfold(response, |mut r| async move {
        match r.chunk().await {
            Ok(Some(bytes)) => Some((Ok::<_, reqwest::Error>(bytes), r)),
            Ok(None) => None,
            Err(e) => Some((Err(e), r)),
        }
    });
    let mut stream = Box::pin(chunks.eventsource());
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => anyhow::bail!("no end within 60 s after {} events", events.len()),
            Ok(None) => return Ok(Read { events, ended: true }),
            Ok(Some(event)) => {
                events.push(event.context("a well-formed SSE event")?);
                if stop(&events) {
                    // Dropping the stream closes the connection mid-conversation.
                    return Ok(Read { events, ended: false });
                }
            }
        }
    }
}

/// `(source, position)` of an event's data.
fn place(event: &Event) -> Result<(String, u64)> {
    let data: Value = serde_json::from_str(&event.data)?;
    Ok((data["source"].as_str().context("source")?.to_owned(), data["position"].as_u64().context("position")?))
}

async fn drop_and_resume(extra: &[&str]) -> Result<()> {
    let (_server, base) = serve::serve_with(extra, EVENT_ENV)?;
    let http = reqwest::Client::new();
    let id = serve::created(&base, "Where is order A1029? And is coupon SAVE20 still valid?", "C104").await?;

    // Live, from the start; dropped right after the plan and one more event.
    let first = read(&base, &id, None, |events| events.len() >= 2).await?;
    ensure!(
        !first.ended,
        "the turn ended before the drop: {:?}",
        first.events.iter().map(|e| &e.event).collect::<Vec<_>>()
    );
    assert_eq!(first.events[0].event, "turn_planned");
    let last_id = first.events.last().map(|e| e.id.clone()).context("an id")?;
    let second = read(&base, &id, Some(&last_id), |_| false).await?;
    ensure!(second.ended, "the server ends the stream");
    let all: Vec<&Event> = first.events.iter().chain(&second.events).collect();
    assert_eq!(all.last().map(|e| e.event.as_str()), Some("turn_done"), "the stream ends after turn_done");

    // Exactly once each, each source's in position order from 0.
    let mut next: BTreeMap<String, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for e in &all {
        let (source, position) = place(e)?;
        ensure!(seen.insert((source.clone(), position)), "{source}#{position} received twice");
        let want = next.entry(source.clone()).or_insert(0);
        assert_eq!(position, *want, "{source} out of order");
        *want += 1;
        let data: Value = serde_json::from_str(&e.data)?;
        assert_eq!(data["kind"].as_str(), Some(e.event.as_str()), "the SSE event names the kind");
    }
    // Every event of the turn: a reader from the start, after the end, gets the same set.
    let whole = read(&base, &id, None, |_| false).await?;
    ensure!(whole.ended);
    let everything: BTreeSet<(String, u64)> = whole.events.iter().map(place).collect::<Result<_>>()?;
    assert_eq!(seen, everything);
    let kinds: BTreeSet<&str> = whole.events.iter().map(|e| e.event.as_str()).collect();
    for kind in ["turn_planned", "subtask_started", "subtask_finished", "reply_written", "turn_done"] {
        ensure!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
    let reply = whole.events.iter().find(|e| e.event == "reply_written").context("reply")?;
    let view: Value = http.get(format!("{base}/conversations/{id}")).send().await?.json().await?;
    let data: Value = serde_json::from_str(&reply.data)?;
    assert_eq!(data["reply"], view["reply"], "the reply event carries the reply");

    // At the end, resuming from the last id: nothing more, the stream ends.
    let last = whole.events.last().map(|e| e.id.clone()).context("an id")?;
    let after = read(&base, &id, Some(&last), |_| false).await?;
    ensure!(after.ended && after.events.is_empty(), "{} events after the end", after.events.len());

    // A cursor the API never wrote; an unknown conversation.
    let bad = http.get(format!("{base}/conversations/{id}/events")).header("Last-Event-ID", "x,y").send().await?;
    assert_eq!(bad.status(), 400);
    let problem: Value = bad.json().await?;
    assert_eq!(problem["error"]["code"], "bad_cursor");
    let unknown = http.get(format!("{base}/conversations/0190a0a0-0000-7000-8000-000000000000/events")).send().await?;
    assert_eq!(unknown.status(), 404);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_dropped_stream_resumed_with_last_event_id_gets_every_event_once() -> Result<()> {
    drop_and_resume(&[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_a_dropped_stream_resumed_with_last_event_id_gets_every_event_once() -> Result<()> {
    let endpoint = match std::env::var("SWARM_AWS_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => e,
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            eprintln!("!!!!!!!! SKIPPED serve_events emulator: SWARM_SKIP_AWS=1; the AWS backend was NOT tested");
            return Ok(());
        }
        _ => anyhow::bail!("needs a local AWS emulator: run `infra/aws/moto.sh start` and export SWARM_AWS_ENDPOINT"),
    };
    drop_and_resume(&["--aws-endpoint", &endpoint]).await
}
