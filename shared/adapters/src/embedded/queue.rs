//! Embedded queue with SQS semantics: delay, visibility timeout, receive count, redrive to a DLQ, long polling by notification.
//!
//! The sending side is the [`TaskQueue`] port; the receiving side (what an event
//! source mapping does: receive, delete, change visibility) is inherent here,
//! and the local platform in `infra/local` puts its consumer trait over it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use swarm_core::domain::TaskMessage;
use swarm_core::ports::{MAX_DELAY_SECONDS, QueueError, SQS_BATCH_LIMIT, TaskQueue};
use swarm_core::time::now_ms;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Queue settings, named as SQS names them.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    pub name: String,
    /// `VisibilityTimeout` in seconds.
    pub visibility_timeout: Duration,
    /// Redrive policy: after this many receives a message moves to the DLQ.
    pub max_receive_count: u32,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self { name: "tasks".into(), visibility_timeout: Duration::from_secs(30), max_receive_count: 3 }
    }
}

/// Messages of a queue by state, as SQS's `ApproximateNumberOfMessages`,
/// `…NotVisible` and `…Delayed` attributes count them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Ready to be received.
    pub visible: u64,
    /// Received and neither deleted nor visible again yet.
    pub in_flight: u64,
    /// Sent with a delay that has not passed yet.
    pub delayed: u64,
}

impl QueueDepth {
    /// Every message stored.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// One received message, as SQS's `ReceiveMessage` answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    /// `ApproximateReceiveCount`, 1 on first delivery.
    pub receive_count: u32,
    /// When the message was first sent, Unix epoch milliseconds.
    pub sent_at_ms: i64,
    /// The `traceparent` message attribute, when the sender's span was recorded.
    pub trace_parent: Option<String>,
}

#[derive(Clone, Debug)]
struct Stored {
    message_id: String,
    body: String,
    trace_parent: Option<String>,
    visible_at: Instant,
    receive_count: u32,
    sent_at_ms: i64,
    /// Receipt handle of the latest receive; older handles are stale.
    receipt: Option<String>,
}

struct State {
    messages: VecDeque<Stored>,
    next_receipt: u64,
}

/// In-memory SQS-like queue. Cloning shares the queue.
#[derive(Clone)]
pub struct InMemoryQueue {
    settings: QueueSettings,
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    dlq: Option<Box<InMemoryQueue>>,
}

impl InMemoryQueue {
    /// A queue without a DLQ (messages are received forever until deleted).
    pub fn new(settings: QueueSettings) -> Self {
        Self {
            settings,
            state: Arc::new(Mutex::new(State { messages: VecDeque::new(), next_receipt: 0 })),
            notify: Arc::new(Notify::new()),
            dlq: None,
        }
    }

    /// A queue whose messages move to `dlq` after `max_receive_count` receives.
    pub fn with_dlq(settings: QueueSettings, dlq: InMemoryQueue) -> Self {
        let mut q = Self::new(settings);
        q.dlq = Some(Box::new(dlq));
        q
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// Messages stored (visible, delayed or in flight).
    pub fn depth(&self) -> usize {
        self.state.lock().map(|s| s.messages.len()).unwrap_or(0)
    }

    /// Messages by state now (a message due for the DLQ counts as visible until a receive moves it, as on SQS).
    pub fn approximate_depth(&self) -> QueueDepth {
        let now = Instant::now();
        let Ok(s) = self.state.lock() else { return QueueDepth::default() };
        let mut depth = QueueDepth::default();
        for m in &s.messages {
            match (m.visible_at <= now, m.receive_count) {
                (true, _) => depth.visible += 1,
                (false, 0) => depth.delayed += 1,
                (false, _) => depth.in_flight += 1,
            }
        }
        depth
    }

    /// Sends one raw body (used for bodies that are not [`TaskMessage`]s, e.g. poison-message tests).
    pub fn send_raw(&self, body: String, delay: Duration) -> Result<String, QueueError> {
        self.send_with_trace(body, delay, None)
    }

    /// Sends one body with its `traceparent` message attribute.
    fn send_with_trace(
        &self,
        body: String,
        delay: Duration,
        trace_parent: Option<String>,
    ) -> Result<String, QueueError> {
        let id = uuid::Uuid::now_v7().to_string();
        let mut s = self.lock()?;
        s.messages.push_back(Stored {
            message_id: id.clone(),
            body,
            trace_parent,
            visible_at: Instant::now() + delay,
            receive_count: 0,
            sent_at_ms: now_ms(),
            receipt: None,
        });
        drop(s);
        self.notify.notify_waiters();
        Ok(id)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, QueueError> {
        self.state.lock().map_err(|_| QueueError::Permanent("queue lock poisoned".into()))
    }

    /// Takes up to `max` visible messages; moves exhausted ones to the DLQ.
    /// Returns the deliveries and, when none are visible, the instant the next one will be.
    fn take_visible(&self, max: usize) -> Result<(Vec<ReceivedMessage>, Option<Instant>), QueueError> {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut to_dlq = Vec::new();
        let mut next: Option<Instant> = None;
        {
            let mut s = self.lock()?;
            let mut i = 0;
            while i < s.messages.len() && out.len() < max {
                if s.messages[i].visible_at > now {
                    let at = s.messages[i].visible_at;
                    next = Some(next.map_or(at, |n: Instant| n.min(at)));
                    i += 1;
                    continue;
                }
                if self.dlq.is_some() && s.messages[i].receive_count >= self.settings.max_receive_count {
                    // Redrive policy: moved on the receive after the limit, as SQS does.
                    if let Some(m) = s.messages.remove(i) {
                        to_dlq.push(m);
                    }
                    continue;
                }
                s.next_receipt += 1;
                let receipt = format!("{}-{}", s.messages[i].message_id, s.next_receipt);
                let visibility = self.settings.visibility_timeout;
                let m = &mut s.messages[i];
                m.receive_count += 1;
                m.visible_at = now + visibility;
                m.receipt = Some(receipt.clone());
                out.push(ReceivedMessage {
                    message_id: m.message_id.clone(),
                    receipt_handle: receipt,
                    body: m.body.clone(),
                    receive_count: m.receive_count,
                    sent_at_ms: m.sent_at_ms,
                    trace_parent: m.trace_parent.clone(),
                });
                i += 1;
            }
        }
        if let Some(dlq) = &self.dlq {
            for m in to_dlq {
                tracing::warn!(queue = %self.settings.name, message_id = %m.message_id, receives = m.receive_count, "message moved to DLQ");
                let mut d = dlq.lock()?;
                d.messages.push_back(Stored { visible_at: Instant::now(), receive_count: 0, receipt: None, ..m });
                drop(d);
                dlq.notify.notify_waiters();
            }
        }
        Ok((out, next))
    }
}

#[async_trait]
impl TaskQueue for InMemoryQueue {
    fn name(&self) -> &str {
        &self.settings.name
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        InMemoryQueue::change_visibility(self, receipt_handle, seconds).await
    }

    async fn change_visibility_batch(
        &self,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        if seconds > swarm_core::ports::MAX_VISIBILITY_SECONDS {
            return Err(QueueError::Permanent(format!("visibility timeout {seconds} s exceeds 12 hours")));
        }
        let visible_at = Instant::now() + Duration::from_secs(u64::from(seconds));
        let mut s = self.lock()?;
        let mut failed = Vec::new();
        // One lock for the whole batch, as SQS applies one call; a stale handle fails alone.
        for handle in receipt_handles {
            match s.messages.iter_mut().find(|m| m.receipt.as_deref() == Some(handle.as_str())) {
                Some(m) => m.visible_at = visible_at,
                None => failed.push(handle.clone()),
            }
        }
        drop(s);
        self.notify.notify_waiters();
        Ok(failed)
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        if delay_seconds > MAX_DELAY_SECONDS {
            return Err(QueueError::Permanent(format!("DelaySeconds {delay_seconds} exceeds {MAX_DELAY_SECONDS}")));
        }
        // As on SQS: the sender's trace context rides along as the `traceparent` attribute.
        let trace = swarm_core::obs::context::current_traceparent();
        for m in messages {
            let body = serde_json::to_string(m).map_err(|e| QueueError::Permanent(e.to_string()))?;
            self.send_with_trace(body, Duration::from_secs(u64::from(delay_seconds)), trace.clone())?;
        }
        Ok(())
    }
}

/// The receiving side, as SQS answers `ReceiveMessage`, `DeleteMessage` and `ChangeMessageVisibility`.
impl InMemoryQueue {
    /// Receives up to `max` (1..=10) messages, waiting up to `wait` for the first
    /// (long poll); each stays invisible for the visibility timeout unless deleted.
    pub async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>, QueueError> {
        let max = max.clamp(1, SQS_BATCH_LIMIT);
        let deadline = Instant::now() + wait;
        loop {
            // Register interest before looking, so a send between look and wait is not missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, next_visible) = self.take_visible(max)?;
            if !got.is_empty() {
                return Ok(got);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wake_at = next_visible.map_or(deadline, |n| n.min(deadline));
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// Deletes a received message (acknowledge); a stale receipt handle deletes nothing and is no error.
    pub async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        let mut s = self.lock()?;
        // Deleting with a stale receipt is a no-op, as in SQS after a re-receive.
        s.messages.retain(|m| m.receipt.as_deref() != Some(receipt_handle));
        Ok(())
    }

    /// Makes a received message visible again after `seconds`.
    ///
    /// Errors: [`QueueError::Permanent`] when the receipt handle is not the current one.
    pub async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        if seconds > swarm_core::ports::MAX_VISIBILITY_SECONDS {
            return Err(QueueError::Permanent(format!("visibility timeout {seconds} s exceeds 12 hours")));
        }
        let mut s = self.lock()?;
        let found = s.messages.iter_mut().find(|m| m.receipt.as_deref() == Some(receipt_handle));
        match found {
            Some(m) => {
                m.visible_at = Instant::now() + Duration::from_secs(u64::from(seconds));
            }
            None => return Err(QueueError::Permanent("receipt handle is not valid".into())),
        }
        drop(s);
        self.notify.notify_waiters();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::domain::ConversationId;

    fn q(max_receive: u32) -> (InMemoryQueue, InMemoryQueue) {
        let dlq = InMemoryQueue::new(QueueSettings { name: "dlq".into(), ..Default::default() });
        let main = InMemoryQueue::with_dlq(
            QueueSettings {
                name: "tasks".into(),
                visibility_timeout: Duration::from_secs(5),
                max_receive_count: max_receive,
            },
            dlq.clone(),
        );
        (main, dlq)
    }

    #[tokio::test(start_paused = true)]
    async fn unacknowledged_message_reappears_after_visibility_timeout() {
        let (main, _) = q(5);
        main.send(&[TaskMessage::run(&ConversationId::from_trusted("c"), &"w01".into())], 0).await.unwrap();
        let first = main.receive(10, Duration::ZERO).await.unwrap();
        assert_eq!(first.len(), 1);
        assert!(main.receive(10, Duration::from_secs(1)).await.unwrap().is_empty());
        let again = main.receive(10, Duration::from_secs(10)).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].receive_count, 2);
        assert_eq!(again[0].message_id, first[0].message_id);
    }

    #[tokio::test(start_paused = true)]
    async fn message_moves_to_dlq_after_max_receives() {
        let (main, dlq) = q(2);
        main.send_raw("x".into(), Duration::ZERO).unwrap();
        for _ in 0..2 {
            assert_eq!(main.receive(1, Duration::from_secs(10)).await.unwrap().len(), 1);
        }
        assert!(main.receive(1, Duration::from_secs(6)).await.unwrap().is_empty());
        assert_eq!(main.depth(), 0);
        let d = dlq.receive(1, Duration::ZERO).await.unwrap();
        assert_eq!(d[0].body, "x");
    }

    #[tokio::test(start_paused = true)]
    async fn depth_counts_visible_in_flight_and_delayed_messages() {
        let (main, _) = q(3);
        main.send_raw("a".into(), Duration::ZERO).unwrap();
        main.send_raw("b".into(), Duration::ZERO).unwrap();
        main.send_raw("c".into(), Duration::from_secs(60)).unwrap();
        assert_eq!(main.approximate_depth(), QueueDepth { visible: 2, in_flight: 0, delayed: 1 });
        main.receive(1, Duration::ZERO).await.unwrap();
        assert_eq!(main.approximate_depth(), QueueDepth { visible: 1, in_flight: 1, delayed: 1 });
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(main.approximate_depth(), QueueDepth { visible: 2, in_flight: 0, delayed: 1 });
        assert_eq!(main.approximate_depth().total(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_message_is_invisible_until_its_delay() {
        let (main, _) = q(3);
        main.send(&[TaskMessage::Deadline { conversation_id: ConversationId::from_trusted("c") }], 60).await.unwrap();
        assert!(main.receive(1, Duration::from_secs(20)).await.unwrap().is_empty());
        assert_eq!(main.receive(1, Duration::from_secs(50)).await.unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn deleted_message_never_returns_and_stale_receipt_is_ignored() {
        let (main, _) = q(5);
        main.send_raw("a".into(), Duration::ZERO).unwrap();
        let d1 = main.receive(1, Duration::ZERO).await.unwrap().remove(0);
        tokio::time::advance(Duration::from_secs(6)).await;
        let d2 = main.receive(1, Duration::ZERO).await.unwrap().remove(0);
        main.delete(&d1.receipt_handle).await.unwrap();
        assert_eq!(main.depth(), 1, "stale receipt must not delete");
        main.delete(&d2.receipt_handle).await.unwrap();
        assert_eq!(main.depth(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn long_poll_wakes_on_send() {
        let (main, _) = q(3);
        let m2 = main.clone();
        let h = tokio::spawn(async move { m2.receive(1, Duration::from_secs(20)).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        main.send_raw("b".into(), Duration::ZERO).unwrap();
        let got = h.await.unwrap().unwrap();
        assert_eq!(got[0].body, "b");
    }

    #[tokio::test]
    async fn delay_over_fifteen_minutes_is_rejected() {
        let (main, _) = q(3);
        let err = main.send(&[TaskMessage::Deadline { conversation_id: ConversationId::from_trusted("c") }], 901).await;
        assert!(matches!(err, Err(QueueError::Permanent(_))));
        assert_eq!(main.depth(), 0);
    }
}
