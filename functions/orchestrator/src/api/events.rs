//! `GET /conversations/{id}/events`: the conversation's event log as `text/event-stream` (DESIGN.md "Events") — each event with its cursor as `id:`, its kind as `event:` and JSON `data:`, `Last-Event-ID` resumes, a `: keep-alive` comment while quiet, the end after the current turn's last event, and a maximum duration.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use swarm_core::domain::ConversationId;
use swarm_core::events::{EventCursor, LoggedEvent};
use swarm_core::ports::EventLog;
use tokio::time::Instant;

use super::{ApiState, Caller, HttpError};

/// The event stream's timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventStreamSettings {
    /// Between two reads of the log while the turn runs (each read is one `Query`): default 500 ms.
    pub poll: Duration,
    /// A `: keep-alive` comment after this long with nothing sent: default 15 s.
    pub heartbeat: Duration,
    /// The stream ends after this long whatever the turn (the client resumes with `Last-Event-ID`):
    /// default 14 min, under a streaming Lambda's 15 min.
    pub max_duration: Duration,
}

impl Default for EventStreamSettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(500),
            heartbeat: Duration::from_secs(15),
            max_duration: Duration::from_secs(840),
        }
    }
}

impl EventStreamSettings {
    /// These settings with the stream's maximum duration at most `cap`: on AWS the streaming
    /// function's timeout holds the conversation's deadline + 80 s (the template lint's rule), so
    /// its streams end by [`crate::openai::max_duration`] of the deadline, before Lambda cuts them.
    pub fn capped(mut self, cap: Duration) -> Self {
        self.max_duration = self.max_duration.min(cap);
        self
    }

    /// The defaults, each overridden by its variable when set to a number: `SWARM_EVENTS_POLL_MS`,
    /// `SWARM_EVENTS_HEARTBEAT_MS`, `SWARM_EVENTS_MAX_SECS`. A poll under 100 ms is taken as 100 ms
    /// (each poll is a store read).
    pub fn from_env() -> Self {
        let read = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
        let d = Self::default();
        Self {
            poll: read("SWARM_EVENTS_POLL_MS").map_or(d.poll, |ms| Duration::from_millis(ms.max(100))),
            heartbeat: read("SWARM_EVENTS_HEARTBEAT_MS").map_or(d.heartbeat, |ms| Duration::from_millis(ms.max(100))),
            max_duration: read("SWARM_EVENTS_MAX_SECS").map_or(d.max_duration, Duration::from_secs),
        }
    }
}

/// One SSE frame of `event`, whose `id` is `cursor` (the reader's cursor after it).
pub fn frame(event: &LoggedEvent, cursor: &EventCursor) -> String {
    // A struct of plain fields always serializes; `data` is one line (JSON escapes newlines).
    let data = serde_json::to_string(event).unwrap_or_default();
    format!("id: {}\nevent: {}\ndata: {data}\n\n", cursor.encode(), event.event.kind())
}

/// The comment sent while nothing happens (keeps proxies and clients from closing an idle stream).
pub const KEEP_ALIVE: &str = ": keep-alive\n\n";

/// `GET /conversations/{id}/events` → 200 `text/event-stream`; 404 as `GET /conversations/{id}`;
/// 400 `bad_cursor` for a `Last-Event-ID` this API did not write.
pub(super) async fn events(
    State(state): State<ApiState>,
    caller: Caller,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, HttpError> {
    let Path(id) = id?;
    let cursor = match headers.get("last-event-id") {
        None => None,
        Some(v) => {
            let text = v.to_str().map_err(|_| HttpError::bad_request("bad_cursor", "Last-Event-ID is not text"))?;
            Some(EventCursor::decode(text).map_err(|e| HttpError::bad_request("bad_cursor", e.to_string()))?)
        }
    };
    let (id, log) = state.core.event_log(&id, caller.customer()).await?;
    let reader = Reader::new(log, id, cursor, state.events);
    let body = Body::from_stream(futures::stream::unfold(reader, |mut r| async move {
        r.next_chunk().await.map(|chunk| (Ok::<Bytes, Infallible>(chunk), r))
    }));
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer (nginx) would hold the events back.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// One stream's reader: polls the log, queues frames, ends after the terminal turn's events or at its deadline.
struct Reader {
    log: Arc<dyn EventLog>,
    id: ConversationId,
    /// `None` until the first read names the turn (no `Last-Event-ID`: the current turn from its start).
    cursor: Option<EventCursor>,
    settings: EventStreamSettings,
    deadline: Instant,
    last_sent: Instant,
    queued: VecDeque<String>,
    /// The turn was read terminal: what is queued is the last.
    ended: bool,
    read_once: bool,
}

impl Reader {
    fn new(
        log: Arc<dyn EventLog>,
        id: ConversationId,
        cursor: Option<EventCursor>,
        settings: EventStreamSettings,
    ) -> Self {
        let now = Instant::now();
        Self {
            log,
            id,
            cursor,
            settings,
            deadline: now + settings.max_duration,
            last_sent: now,
            queued: VecDeque::new(),
            ended: false,
            read_once: false,
        }
    }

    /// The next bytes to send, `None` when the stream ends. Waits at most a poll interval between
    /// reads and never past the deadline.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.queued.pop_front() {
                self.last_sent = Instant::now();
                return Some(Bytes::from(frame));
            }
            if self.ended || Instant::now() >= self.deadline {
                return None;
            }
            if self.read_once {
                tokio::time::sleep_until((Instant::now() + self.settings.poll).min(self.deadline)).await;
            }
            self.read_once = true;
            self.read().await;
            if self.queued.is_empty() && self.last_sent.elapsed() >= self.settings.heartbeat {
                self.queued.push_back(KEEP_ALIVE.to_owned());
            }
        }
    }

    /// One read of the log: its unseen events queued as frames; a terminal turn ends the stream.
    async fn read(&mut self) {
        let asked = self.cursor.clone().unwrap_or_default();
        match self.log.events_after(&self.id, &asked).await {
            Ok(Some(page)) => {
                let mut cursor = match self.cursor.take() {
                    Some(c) if c.turn == page.turn => c,
                    _ => EventCursor::start(page.turn),
                };
                for event in &page.events {
                    cursor.advance(event);
                    self.queued.push_back(frame(event, &cursor));
                }
                self.cursor = Some(cursor);
                self.ended = page.status.is_terminal();
            }
            // Deleted (expired) while read: nothing more will come.
            Ok(None) => self.ended = true,
            // A store error is retried at the next poll; the stream keeps its cursor.
            Err(e) => tracing::warn!(conversation_id = %self.id, error = %e, "reading the event log failed; retrying"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failed step is the test failing
mod tests {
    use swarm_core::domain::SubtaskId;
    use swarm_core::events::Event;
    use swarm_core::ports::ConversationRecords as _;

    use super::*;

    fn settings(poll_ms: u64, heartbeat_ms: u64, max_ms: u64) -> EventStreamSettings {
        EventStreamSettings {
            poll: Duration::from_millis(poll_ms),
            heartbeat: Duration::from_millis(heartbeat_ms),
            max_duration: Duration::from_millis(max_ms),
        }
    }

    async fn drain(mut reader: Reader) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(chunk) = reader.next_chunk().await {
            out.push(String::from_utf8(chunk.to_vec()).unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_quiet_turn_gets_keep_alives_and_the_stream_ends_at_its_maximum_duration() {
        let store = Arc::new(swarm_adapters::embedded::InMemoryConversationStore::new());
        let c = swarm_core::domain::Conversation::new("C1", "q", 0, 120);
        store.create_conversation(&c).await.unwrap();
        let started = Instant::now();
        let chunks = drain(Reader::new(store, c.id.clone(), None, settings(10, 50, 240))).await;
        let waited = started.elapsed();
        assert!(chunks.len() >= 3 && chunks.iter().all(|c| c == KEEP_ALIVE), "{chunks:?}");
        assert!(waited >= Duration::from_millis(240) && waited < Duration::from_secs(2), "{waited:?}");
    }

    #[tokio::test]
    async fn a_terminal_turn_s_events_are_sent_then_the_stream_ends_and_a_resumed_one_gets_none_again() {
        let store = Arc::new(swarm_adapters::embedded::InMemoryConversationStore::new());
        let c = swarm_core::domain::Conversation::new("C1", "q", 0, 120);
        store.create_conversation(&c).await.unwrap();
        store.fail_conversation(&c.id, c.turn, "planning failed").await.unwrap();
        let chunks = drain(Reader::new(store.clone(), c.id.clone(), None, settings(10, 1_000, 5_000))).await;
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        assert!(chunks[0].starts_with("id: 0,c=1\nevent: turn_failed\n"), "{}", chunks[0]);
        let resumed = EventCursor::decode("0,c=1").unwrap();
        assert!(drain(Reader::new(store, c.id.clone(), Some(resumed), settings(10, 1_000, 5_000))).await.is_empty());
    }

    #[test]
    fn a_frame_carries_the_cursor_after_its_event_the_kind_and_one_line_of_json() {
        let event = LoggedEvent {
            source: "t1~w01".into(),
            position: 0,
            at_ms: 7,
            event: Event::SubtaskStarted { subtask: SubtaskId::from("t1~w01") },
        };
        let mut cursor = EventCursor::start(1);
        cursor.advance(&event);
        assert_eq!(
            frame(&event, &cursor),
            "id: 1,t1~w01=1\nevent: subtask_started\ndata: {\"source\":\"t1~w01\",\"position\":0,\"at_ms\":7,\"kind\":\"subtask_started\",\"subtask\":\"t1~w01\"}\n\n"
        );
    }
}
