//! Helpers for the cross-function tests: the cases, their expectation checks, and model wrappers that count, script or fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, SubtaskRecord, SubtaskResult, SubtaskStatus, Usage,
};
use swarm_core::llm::Models;
use swarm_core::ports::{AttemptStart, ConversationStore, CountOutcome, CreateOutcome, RecordOutcome, StoreError};
use swarm_core::ports::{ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose};
use swarm_core::view::ConversationView;
use swarm_offline::OfflineModel;

/// One line of `fixtures/queries.jsonl`.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    pub id: String,
    pub customer_id: String,
    pub query: String,
    pub expect: Value,
}

/// All cases of `tests/fixtures/queries.jsonl` (a copy of `../shared/cases/queries.jsonl`).
pub fn cases() -> Vec<Case> {
    include_str!("../fixtures/queries.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad case line {l}: {e}")))
        .collect()
}

pub fn case(id: &str) -> Case {
    cases().into_iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no case {id}"))
}

/// Tool names (without upstream prefix) that satisfy a kind of the cases.
pub fn tools_of_kind(kind: &str) -> &'static [&'static str] {
    match kind {
        "order" => &["get_order", "list_customer_orders"],
        "shipment" => &["track_shipment"],
        "inventory" => &["get_product"],
        "coupon" => &["check_coupon"],
        "refund" => &["refund", "get_refund_policy"],
        _ => &[],
    }
}

/// Lower-cases and drops thousands separators, so `1,299.00` contains `1299`.
pub fn normalise(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, c) in chars.iter().enumerate() {
        if *c == ',' && i > 0 && chars[i - 1].is_ascii_digit() && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit()) {
            continue;
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// Every way `view` falls short of the case's `expect` (empty when it meets them).
pub fn unmet_expectations(case: &Case, view: &ConversationView) -> Vec<String> {
    let mut problems = Vec::new();
    let e = &case.expect;
    let n = view.subtasks.len() as u64;
    if let Some(min) = e.get("min_subtasks").and_then(Value::as_u64)
        && n < min
    {
        problems.push(format!("{n} subtasks, expected at least {min}"));
    }
    if let Some(max) = e.get("max_subtasks").and_then(Value::as_u64)
        && n > max
    {
        problems.push(format!("{n} subtasks, expected at most {max}"));
    }
    let used: Vec<String> = view
        .subtasks
        .iter()
        .flat_map(|s| s.tools_used.iter())
        .map(|t| t.rsplit_once("__").map_or(t.as_str(), |(_, b)| b).to_owned())
        .collect();
    if let Some(max) = e.get("max_tool_calls").and_then(Value::as_u64)
        && used.len() as u64 > max
    {
        problems.push(format!("{} tool calls, expected at most {max}", used.len()));
    }
    for kind in e.get("tools").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        let ok = kind.split('|').any(|k| tools_of_kind(k).iter().any(|t| used.iter().any(|u| u == t)));
        if !ok {
            problems.push(format!("no tool of kind {kind} was used (used: {used:?})"));
        }
    }
    let reply = normalise(view.reply.as_deref().unwrap_or(""));
    for m in e.get("mentions").and_then(Value::as_array).into_iter().flatten() {
        let alternatives: Vec<&str> = match m {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !alternatives.iter().any(|a| reply.contains(&normalise(a))) {
            problems.push(format!("reply does not mention {alternatives:?}"));
        }
    }
    if view.status != "DONE" {
        problems.push(format!("status {}", view.status));
    }
    problems
}

/// Counts calls per purpose, then delegates.
pub struct CountingModel {
    inner: Arc<dyn ChatModel>,
    pub plan: AtomicU64,
    pub work: AtomicU64,
    pub reply: AtomicU64,
}

impl CountingModel {
    pub fn new(inner: Arc<dyn ChatModel>) -> Arc<Self> {
        Arc::new(Self { inner, plan: AtomicU64::new(0), work: AtomicU64::new(0), reply: AtomicU64::new(0) })
    }

    pub fn counts(&self) -> (u64, u64, u64) {
        (self.plan.load(Ordering::SeqCst), self.work.load(Ordering::SeqCst), self.reply.load(Ordering::SeqCst))
    }
}

#[async_trait]
impl ChatModel for CountingModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        match request.purpose {
            Purpose::Plan => &self.plan,
            Purpose::Work => &self.work,
            Purpose::Reply | Purpose::Compress => &self.reply,
        }
        .fetch_add(1, Ordering::SeqCst);
        self.inner.complete(request).await
    }
    fn label(&self) -> String {
        self.inner.label()
    }
    fn is_offline(&self) -> bool {
        self.inner.is_offline()
    }
}

/// Answers planning with a fixed plan; fails or stalls work on subtasks whose
/// message contains a marker; everything else goes to the offline model.
pub struct ScriptedModel {
    pub plan: Option<String>,
    /// Work requests whose subtask text contains this fail with a permanent error (HTTP 402).
    pub fail_on: Option<String>,
    /// Work requests whose subtask text contains this wait this long first.
    pub stall_on: Option<(String, Duration)>,
    /// Every work round waits this long (load, concurrency tests).
    pub work_delay: Duration,
    pub inner: OfflineModel,
}

impl ScriptedModel {
    pub fn new() -> Self {
        Self { plan: None, fail_on: None, stall_on: None, work_delay: Duration::ZERO, inner: OfflineModel::new() }
    }
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

fn subtask_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::User { content } if content.starts_with(swarm_core::prompts::SUBTASK_MARKER) => {
                Some(content.clone())
            }
            _ => None,
        })
        .next_back()
        .unwrap_or_default()
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if request.purpose == Purpose::Plan
            && let Some(plan) = &self.plan
        {
            return Ok(ChatResponse {
                content: Some(plan.clone()),
                tool_calls: vec![],
                finish_reason: FinishReason::Stop,
                reasoning_content: None,
                usage: Default::default(),
                model: "scripted".into(),
            });
        }
        if request.purpose == Purpose::Work {
            let text = subtask_text(request);
            if let Some(marker) = &self.fail_on
                && text.contains(marker.as_str())
            {
                return Err(LlmError::Permanent { status: 402, message: "Insufficient Balance".into() });
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
        self.inner.complete(request).await
    }
    fn label(&self) -> String {
        "scripted test model".into()
    }
    fn is_offline(&self) -> bool {
        true
    }
}

/// The same model for every purpose.
pub fn models_of(model: Arc<dyn ChatModel>) -> Models {
    Models { main: model.clone(), sub: model }
}

/// A store whose `begin_attempt` always fails transiently for one subtask, so its
/// message is reported in `batchItemFailures` on every delivery until it is dead-lettered.
pub struct FlakyStore {
    pub inner: Arc<dyn ConversationStore>,
    pub subtask: String,
}

#[async_trait]
impl ConversationStore for FlakyStore {
    async fn create_conversation(&self, c: &Conversation) -> Result<CreateOutcome, StoreError> {
        self.inner.create_conversation(c).await
    }
    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        self.inner.get_conversation(id).await
    }
    async fn start_run(
        &self,
        id: &ConversationId,
        s: &[SubtaskRecord],
        n: &[String],
        u: &Usage,
    ) -> Result<bool, StoreError> {
        self.inner.start_run(id, s, n, u).await
    }
    async fn transition_conversation(
        &self,
        id: &ConversationId,
        f: ConversationStatus,
        t: ConversationStatus,
    ) -> Result<bool, StoreError> {
        self.inner.transition_conversation(id, f, t).await
    }
    async fn finish_conversation(&self, id: &ConversationId, r: &str, u: &Usage) -> Result<bool, StoreError> {
        self.inner.finish_conversation(id, r, u).await
    }
    async fn fail_conversation(&self, id: &ConversationId, r: &str) -> Result<bool, StoreError> {
        self.inner.fail_conversation(id, r).await
    }
    async fn get_subtask(&self, id: &ConversationId, s: &str) -> Result<Option<SubtaskRecord>, StoreError> {
        self.inner.get_subtask(id, s).await
    }
    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        self.inner.list_subtasks(id).await
    }
    async fn transition_subtask(
        &self,
        id: &ConversationId,
        s: &str,
        f: &[SubtaskStatus],
        t: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        self.inner.transition_subtask(id, s, f, t).await
    }
    async fn begin_attempt(&self, id: &ConversationId, s: &str, now: i64) -> Result<AttemptStart, StoreError> {
        if s == self.subtask {
            return Err(StoreError::Transient("ProvisionedThroughputExceeded (injected)".into()));
        }
        self.inner.begin_attempt(id, s, now).await
    }
    async fn save_checkpoint(&self, id: &ConversationId, s: &str, c: &str) -> Result<(), StoreError> {
        self.inner.save_checkpoint(id, s, c).await
    }
    async fn record_result(
        &self,
        id: &ConversationId,
        s: &str,
        r: &SubtaskResult,
        u: &Usage,
        t: &[String],
        now: i64,
    ) -> Result<RecordOutcome, StoreError> {
        self.inner.record_result(id, s, r, u, t, now).await
    }
    async fn count_finished(&self, id: &ConversationId, s: &str, u: &Usage) -> Result<CountOutcome, StoreError> {
        self.inner.count_finished(id, s, u).await
    }
}
