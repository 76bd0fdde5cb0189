//! The aggregator's logic: win the `RUNNING → AGGREGATING` flip once, write one reply from every result, finish the conversation.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{ConversationId, ConversationStatus, Handoff, MAX_REPLY_CHARS, Usage, now_ms};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::handoff::handoff_reason;
use swarm_core::llm::retry::{LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{ChatModel, ChatRequest, ConversationStore, FinishReason, Purpose, StoreError};
use swarm_core::prompts::reply_messages;
use swarm_core::reply::{HANDOFF_NOTE, compose_reply, reply_input};
use swarm_core::timings::Timings;
use swarm_core::untrusted::clean_text;

/// Tokens the reply needs; the client adds a thinking model's reasoning budget to it.
pub const REPLY_ANSWER_TOKENS: u32 = 2_048;

/// Aggregator settings.
#[derive(Clone, Debug)]
pub struct AggregatorSettings {
    /// Longest wait for the reply model, retries included; past it the model-free reply is written.
    pub reply_timeout: Duration,
    pub retry: LlmRetryPolicy,
}

impl Default for AggregatorSettings {
    /// The standard timing table's values ([`AggregatorSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl AggregatorSettings {
    /// The reply budget (`aggregator.reply_budget_secs`) and the LLM retries (`[llm]`) of `timings`.
    pub fn from_timings(timings: &Timings) -> Self {
        Self { reply_timeout: timings.aggregator.reply_budget, retry: LlmRetryPolicy::from_timings(timings) }
    }
}

/// What one trigger did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AggregateOutcome {
    /// This call won the flip and wrote the reply.
    Replied {
        by_model: bool,
    },
    /// Another trigger won the flip, or the conversation is already over: nothing done.
    AlreadyHandled,
    /// Subtasks still open: not ready (a filter mismatch or an early trigger).
    NotReady {
        remaining: u32,
    },
    Unknown,
}

pub struct Aggregator {
    store: Arc<dyn ConversationStore>,
    model: Arc<dyn ChatModel>,
    settings: AggregatorSettings,
}

impl Aggregator {
    pub fn new(store: Arc<dyn ConversationStore>, model: Arc<dyn ChatModel>, settings: AggregatorSettings) -> Self {
        Self { store, model, settings }
    }

    /// Aggregates a conversation whose `remaining` reached 0. Runs once per
    /// conversation: it starts from the conditional flip `RUNNING → AGGREGATING`
    /// and any second trigger loses the flip and stops (DESIGN.md invariant 2).
    pub async fn aggregate(&self, id: &ConversationId) -> Result<AggregateOutcome, StoreError> {
        let Some(conversation) = self.store.get_conversation(id).await? else {
            return Ok(AggregateOutcome::Unknown);
        };
        if conversation.status != ConversationStatus::Running {
            return Ok(AggregateOutcome::AlreadyHandled);
        }
        if conversation.remaining > 0 {
            return Ok(AggregateOutcome::NotReady { remaining: conversation.remaining });
        }
        if !self.store.transition_conversation(id, ConversationStatus::Running, ConversationStatus::Aggregating).await?
        {
            tracing::info!(conversation_id = %id, "lost the aggregation flip: another trigger aggregates");
            return Ok(AggregateOutcome::AlreadyHandled);
        }
        faults::at(CrashPoint::AggregatorAfterFlip).await;
        let subtasks = self.store.list_subtasks(id).await?;
        let handoff = handoff_reason(&conversation, &subtasks).map(|reason| Handoff { reason, at_ms: now_ms() });
        let mut notes = conversation.notes.clone();
        if handoff.is_some() {
            notes.push(HANDOFF_NOTE.to_owned());
        }
        let input = reply_input(&subtasks, &notes);
        let request = ChatRequest {
            purpose: Purpose::Reply,
            messages: reply_messages(&conversation.query, &input),
            tools: Vec::new(),
            max_tokens: Some(REPLY_ANSWER_TOKENS),
            tool_choice: Default::default(),
        };
        let deadline = tokio::time::Instant::now() + self.settings.reply_timeout;
        let (reply, usage, by_model) = match complete_with_retry(
            self.model.as_ref(),
            &request,
            &self.settings.retry,
            deadline,
        )
        .await
        {
            // A reply cut off by the output limit (the client already asked once more with a larger
            // one) is never stored as final: the model-free reply has every answer whole.
            Ok(r) if r.finish_reason == FinishReason::Length => {
                tracing::warn!(conversation_id = %id, "reply cut off by the output limit (finish_reason length); writing the model-free reply");
                (compose_reply(&input), r.usage, false)
            }
            Ok(r) if r.content.as_deref().is_some_and(|c| !c.trim().is_empty()) => {
                (r.content.unwrap_or_default(), r.usage, true)
            }
            Ok(r) => {
                tracing::warn!(conversation_id = %id, finish_reason = ?r.finish_reason, "reply model gave no text; writing the model-free reply");
                (compose_reply(&input), r.usage, false)
            }
            Err(e) => {
                tracing::warn!(conversation_id = %id, error = %e, "reply model failed; writing the model-free reply");
                (compose_reply(&input), Usage::default(), false)
            }
        };
        let reply = if by_model || !self.model.is_offline() {
            reply
        } else {
            format!("{reply}\n\n— Written without a language model (offline mode).")
        };
        // Model output bound for a terminal and a DynamoDB item: no display controls, bounded size.
        let reply = clean_text(&reply, MAX_REPLY_CHARS);
        match &handoff {
            // The conversation item reaching HANDOFF is the hand-off event (the stream carries it on).
            Some(h) => {
                self.store.hand_off(id, &reply, &usage, h).await?;
                tracing::info!(conversation_id = %id, reason = h.reason.code(), "conversation handed to a person");
            }
            None => {
                self.store.finish_conversation(id, &reply, &usage).await?;
            }
        }
        tracing::info!(conversation_id = %id, subtasks = subtasks.len(), by_model, "conversation answered");
        Ok(AggregateOutcome::Replied { by_model })
    }
}
