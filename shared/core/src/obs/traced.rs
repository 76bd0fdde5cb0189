//! Decorators that give every store and queue operation its own span: `TracedStore` (`{system} {operation}`, kind client; a [`StoreDecorator`]) around any [`ConversationStore`], `TracedQueue` (`send {queue}`, kind producer; `change_visibility {queue}`, kind client) around any [`TaskQueue`].
//!
//! A message sent inside the `send` span carries that span's context (the queue
//! adapters read it through [`crate::obs::context`]), so the worker's record span
//! is the producer span's child. Wrap once where the adapters are built (the
//! functions' AWS clients, the local stack); every port method delegates
//! (the store's through [`StoreDecorator::around`], so a new store method needs no line here).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::domain::TaskMessage;
use crate::ports::{Call, ConversationStore, QueueError, StoreDecorator, StoreError, TaskQueue};

/// A [`ConversationStore`] whose every call runs in a span `{system} {operation}`
/// (`db.system.name`, `db.operation.name`; `error.type` transient/permanent on failure).
pub struct TracedStore {
    inner: Arc<dyn ConversationStore>,
    /// `db.system.name`: `aws.dynamodb`, or `memory` for the embedded store.
    system: &'static str,
}

impl TracedStore {
    pub fn new(inner: Arc<dyn ConversationStore>, system: &'static str) -> Self {
        Self { inner, system }
    }

    /// `inner` wrapped, as the functions take it.
    pub fn wrap(inner: Arc<dyn ConversationStore>, system: &'static str) -> Arc<dyn ConversationStore> {
        Arc::new(Self::new(inner, system))
    }
}

impl StoreDecorator for TracedStore {
    fn inner(&self) -> &dyn ConversationStore {
        &*self.inner
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        let operation = call.op.name();
        let span = tracing::info_span!(
            "store",
            otel.name = %format_args!("{} {operation}", self.system),
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = self.system,
            db.operation.name = operation,
            error.type = Empty,
        );
        let result = run.instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }
}

fn record_error(span: &Span, transient: bool) {
    span.record("error.type", if transient { "transient" } else { "permanent" });
    span.record("otel.status_code", "ERROR");
}

/// A [`TaskQueue`] whose every send runs in a producer span `send {queue}`
/// (`messaging.system`, `messaging.destination.name`, `messaging.batch.message_count`,
/// `messaging.delay_seconds`). Messages sent inside it carry its context.
pub struct TracedQueue {
    inner: Arc<dyn TaskQueue>,
    /// `messaging.system`: `aws_sqs`, or `memory` for the embedded queue.
    system: &'static str,
    /// The queue's logical name (`tasks`, `refund`).
    queue: &'static str,
}

impl TracedQueue {
    pub fn new(inner: Arc<dyn TaskQueue>, system: &'static str, queue: &'static str) -> Self {
        Self { inner, system, queue }
    }

    /// `inner` wrapped, as the functions take it.
    pub fn wrap(inner: Arc<dyn TaskQueue>, system: &'static str, queue: &'static str) -> Arc<dyn TaskQueue> {
        Arc::new(Self::new(inner, system, queue))
    }
}

#[async_trait]
impl TaskQueue for TracedQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        let span = tracing::info_span!(
            "change_visibility",
            otel.name = %format_args!("change_visibility {}", self.queue),
            otel.kind = "client",
            otel.status_code = Empty,
            messaging.system = self.system,
            messaging.operation.name = "ChangeMessageVisibility",
            messaging.destination.name = self.queue,
            swarm.visibility_seconds = seconds,
            error.type = Empty,
        );
        let result = self.inner.change_visibility(receipt_handle, seconds).instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }

    async fn change_visibility_batch(
        &self,
        receipt_handles: &[String],
        seconds: u32,
    ) -> Result<Vec<String>, QueueError> {
        let span = tracing::info_span!(
            "change_visibility_batch",
            otel.name = %format_args!("change_visibility_batch {}", self.queue),
            otel.kind = "client",
            otel.status_code = Empty,
            messaging.system = self.system,
            messaging.operation.name = "ChangeMessageVisibilityBatch",
            messaging.destination.name = self.queue,
            messaging.batch.message_count = receipt_handles.len(),
            swarm.visibility_seconds = seconds,
            error.type = Empty,
        );
        let result = self.inner.change_visibility_batch(receipt_handles, seconds).instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        let span = tracing::info_span!(
            "send",
            otel.name = %format_args!("send {}", self.queue),
            otel.kind = "producer",
            otel.status_code = Empty,
            messaging.system = self.system,
            messaging.operation.type = "send",
            messaging.destination.name = self.queue,
            messaging.batch.message_count = messages.len(),
            swarm.delay_seconds = delay_seconds,
            error.type = Empty,
        );
        let result = self.inner.send(messages, delay_seconds).instrument(span.clone()).await;
        if let Err(e) = &result {
            record_error(&span, e.is_transient());
        }
        result
    }
}
