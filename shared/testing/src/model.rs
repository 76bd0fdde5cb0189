//! `ScriptedModel`: a chat model that answers from a script, records what it was asked and counts calls per purpose.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use swarm_core::domain::Usage;
use swarm_core::ports::{ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose};
use swarm_core::prompts::SUBTASK_MARKER;
use tokio::time::Instant;

/// One scripted answer.
pub type Reply = Result<ChatResponse, LlmError>;

/// What answers once the script is used up.
enum Then {
    /// `LlmError::Permanent { status: 500, message: "script exhausted" }`.
    Exhausted,
    /// This answer, every time.
    Repeat(Reply),
    /// Another model (e.g. the offline model): the script only overrides it.
    Delegate(Arc<dyn ChatModel>),
}

/// A [`ChatModel`] for tests. For each request, in this order:
/// 1. the request is recorded (with the instant it arrived, on tokio's clock) and counted by purpose;
/// 2. the task yields once (concurrent callers interleave) and, when [`hanging`](Self::hanging), waits an hour;
/// 3. an answer set for the request's purpose ([`answer`](Self::answer)) is given;
/// 4. a work request whose subtask message contains a marker fails ([`fail_work_on`](Self::fail_work_on))
///    or waits first ([`stall_work_on`](Self::stall_work_on)); every work request waits [`work_delay`](Self::work_delay);
/// 5. the next answer of the script is given;
/// 6. then: "script exhausted" (HTTP 500, permanent), a repeated answer, or the delegate's answer.
pub struct ScriptedModel {
    script: Mutex<VecDeque<Reply>>,
    per_purpose: Vec<(Purpose, Reply)>,
    fail_on: Option<(String, Reply)>,
    stall_on: Option<(String, Duration)>,
    work_delay: Duration,
    hang: bool,
    then: Then,
    log: Mutex<Vec<(Instant, ChatRequest)>>,
    plan: AtomicU64,
    work: AtomicU64,
    reply: AtomicU64,
}

impl ScriptedModel {
    fn with(script: VecDeque<Reply>, then: Then) -> Self {
        Self {
            script: Mutex::new(script),
            per_purpose: Vec::new(),
            fail_on: None,
            stall_on: None,
            work_delay: Duration::ZERO,
            hang: false,
            then,
            log: Mutex::new(Vec::new()),
            plan: AtomicU64::new(0),
            work: AtomicU64::new(0),
            reply: AtomicU64::new(0),
        }
    }

    /// Answers `replies` in order, then fails with "script exhausted" (HTTP 500, permanent).
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        Self::with(replies.into_iter().collect(), Then::Exhausted)
    }

    /// Answers `reply` to every request.
    pub fn always(reply: Reply) -> Self {
        Self::with(VecDeque::new(), Then::Repeat(reply))
    }

    /// Passes every request on to `inner` unless an answer, marker or script says otherwise
    /// (a counting wrapper when nothing is set).
    pub fn delegating(inner: Arc<dyn ChatModel>) -> Self {
        Self::with(VecDeque::new(), Then::Delegate(inner))
    }

    /// Answers every request of `purpose` with `reply`.
    pub fn answer(mut self, purpose: Purpose, reply: Reply) -> Self {
        self.per_purpose.push((purpose, reply));
        self
    }

    /// Work requests whose subtask message contains `marker` get `reply` (typically an error).
    pub fn fail_work_on(mut self, marker: &str, reply: Reply) -> Self {
        self.fail_on = Some((marker.to_owned(), reply));
        self
    }

    /// Work requests whose subtask message contains `marker` wait `wait` before they are answered.
    pub fn stall_work_on(mut self, marker: &str, wait: Duration) -> Self {
        self.stall_on = Some((marker.to_owned(), wait));
        self
    }

    /// Every work request waits `delay` before it is answered (load and concurrency tests).
    pub fn work_delay(mut self, delay: Duration) -> Self {
        self.work_delay = delay;
        self
    }

    /// Every request waits an hour before it is answered (deadline tests on the paused clock).
    pub fn hanging(mut self) -> Self {
        self.hang = true;
        self
    }

    /// Every request received, in arrival order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.log).iter().map(|(_, r)| r.clone()).collect()
    }

    /// When each request arrived (tokio's clock).
    pub fn call_times(&self) -> Vec<Instant> {
        lock(&self.log).iter().map(|(t, _)| *t).collect()
    }

    /// Requests received so far.
    pub fn calls(&self) -> usize {
        lock(&self.log).len()
    }

    /// Requests per purpose: `(plan, work, reply or compress)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.plan.load(Ordering::SeqCst), self.work.load(Ordering::SeqCst), self.reply.load(Ordering::SeqCst))
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        lock(&self.log).push((Instant::now(), request.clone()));
        match request.purpose {
            Purpose::Plan => &self.plan,
            Purpose::Work => &self.work,
            Purpose::Reply | Purpose::Compress => &self.reply,
        }
        .fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        if self.hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if let Some((_, reply)) = self.per_purpose.iter().find(|(p, _)| *p == request.purpose) {
            return reply.clone();
        }
        if request.purpose == Purpose::Work {
            let text = subtask_text(request);
            if let Some((marker, reply)) = &self.fail_on
                && text.contains(marker.as_str())
            {
                return reply.clone();
            }
            if let Some((marker, wait)) = &self.stall_on
                && text.contains(marker.as_str())
            {
                tokio::time::sleep(*wait).await;
            }
            if !self.work_delay.is_zero() {
                tokio::time::sleep(self.work_delay).await;
            }
        }
        let next = lock(&self.script).pop_front();
        if let Some(reply) = next {
            return reply;
        }
        match &self.then {
            Then::Exhausted => Err(LlmError::Permanent { status: 500, message: "script exhausted".into() }),
            Then::Repeat(reply) => reply.clone(),
            Then::Delegate(inner) => inner.complete(request).await,
        }
    }

    fn label(&self) -> String {
        match &self.then {
            Then::Delegate(inner) => inner.label(),
            _ => "scripted".into(),
        }
    }

    fn model_name(&self) -> String {
        match &self.then {
            Then::Delegate(inner) => inner.model_name(),
            _ => "scripted".into(),
        }
    }

    fn is_offline(&self) -> bool {
        matches!(&self.then, Then::Delegate(inner) if inner.is_offline())
    }
}

/// A plain text answer (`finish_reason: stop`, unknown usage).
pub fn text_response(content: &str) -> ChatResponse {
    ChatResponse {
        content: Some(content.to_owned()),
        tool_calls: vec![],
        finish_reason: FinishReason::Stop,
        reasoning_content: None,
        usage: Usage::default(),
        model: "scripted".into(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The latest `Subtask <id>: …` user message of a work request.
fn subtask_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } if content.starts_with(SUBTASK_MARKER) => Some(content.clone()),
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
}
