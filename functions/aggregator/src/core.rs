//! The aggregator's logic: take the aggregation lease (`RUNNING → AGGREGATING`, or a takeover once an earlier holder's lease expired), write one reply from every result, bounded to its item, and finish the conversation.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{ConversationId, ConversationStatus, Handoff, MAX_REPLY_BYTES, Usage, now_ms};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::handoff::handoff_reason;
use swarm_core::llm::retry::{LlmRetryPolicy, complete_with_retry};
use swarm_core::obs;
use swarm_core::ports::{
    ChatModel, ChatRequest, ConversationStore, FinishReason, LeaseOutcome, LeasePhase, Purpose, StoreError,
};
use swarm_core::prompts::reply_messages;
use swarm_core::reply::{compose_reply, handoff_note, reply_input_in, written_without_model_note};
use swarm_core::timings::Timings;
use swarm_core::untrusted::clean_text_bytes;

/// Tokens the reply needs; the client adds a thinking model's reasoning budget to it.
pub const REPLY_ANSWER_TOKENS: u32 = 2_048;

/// Aggregator settings.
#[derive(Clone, Debug)]
pub struct AggregatorSettings {
    /// Longest wait for the reply model, retries included; past it the model-free reply is written.
    pub reply_timeout: Duration,
    pub retry: LlmRetryPolicy,
    /// How long the aggregation lease holds the conversation (longer than any invocation that holds it).
    pub lease: Duration,
}

impl Default for AggregatorSettings {
    /// The standard timing table's values ([`AggregatorSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl AggregatorSettings {
    /// The reply budget (`aggregator.reply_budget_secs`), the lease (`aggregator.lease_secs`) and the
    /// LLM retries (`[llm]`) of `timings`.
    pub fn from_timings(timings: &Timings) -> Self {
        Self {
            reply_timeout: timings.aggregator.reply_budget,
            retry: LlmRetryPolicy::from_timings(timings),
            lease: timings.aggregator.lease,
        }
    }
}

/// What one trigger did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AggregateOutcome {
    /// This call took the lease and wrote the reply.
    Replied {
        by_model: bool,
    },
    /// Another trigger holds a live lease, or the conversation is already over: nothing done.
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

    /// Aggregates a conversation whose `remaining` reached 0. It starts from the aggregation
    /// lease (DESIGN.md invariant 2): `RUNNING → AGGREGATING` with a lease of
    /// [`AggregatorSettings::lease`], or the takeover of an aggregation whose lease expired (its
    /// holder died); any trigger meeting a live lease stops. One reply is written: the conditional
    /// `AGGREGATING → DONE` lets only the first finisher through.
    pub async fn aggregate(&self, id: &ConversationId) -> Result<AggregateOutcome, StoreError> {
        let Some(conversation) = self.store.get_conversation(id).await? else {
            return Ok(AggregateOutcome::Unknown);
        };
        match conversation.status {
            ConversationStatus::Running if conversation.remaining > 0 => {
                return Ok(AggregateOutcome::NotReady { remaining: conversation.remaining });
            }
            ConversationStatus::Running | ConversationStatus::Aggregating => {}
            ConversationStatus::Planning
            | ConversationStatus::Done
            | ConversationStatus::Failed
            | ConversationStatus::Handoff => {
                return Ok(AggregateOutcome::AlreadyHandled);
            }
        }
        let holder = format!("aggregator:{}", uuid::Uuid::now_v7());
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(self.settings.lease.as_millis()).unwrap_or(i64::MAX));
        let phase = LeasePhase::Aggregating { turn: conversation.turn };
        match self.store.acquire_lease(id, phase, &holder, now, until).await? {
            LeaseOutcome::Acquired { taken_over: None } => {}
            LeaseOutcome::Acquired { taken_over: Some(expired) } => {
                obs::metrics::lease_taken_over(obs::metrics::LeaseKind::Aggregating);
                tracing::warn!(conversation_id = %id, expired_holder = %expired.holder, "aggregation lease expired: taking over");
            }
            LeaseOutcome::Held(lease) => {
                tracing::info!(conversation_id = %id, holder = %lease.holder, "aggregation lease held: another trigger aggregates");
                return Ok(AggregateOutcome::AlreadyHandled);
            }
            LeaseOutcome::NotInPhase { status: ConversationStatus::Running, remaining } if remaining > 0 => {
                return Ok(AggregateOutcome::NotReady { remaining });
            }
            LeaseOutcome::NotInPhase { .. } => return Ok(AggregateOutcome::AlreadyHandled),
            LeaseOutcome::Missing => return Ok(AggregateOutcome::Unknown),
        }
        faults::at(CrashPoint::AggregatorAfterFlip).await;
        let subtasks = self.store.list_subtasks(id).await?;
        let handoff = handoff_reason(&conversation, &subtasks).map(|reason| Handoff { reason, at_ms: now_ms() });
        let language = conversation.reply_language();
        let mut notes = conversation.notes.clone();
        if handoff.is_some() {
            notes.push(handoff_note(language).to_owned());
        }
        let input = reply_input_in(&subtasks, &notes, language);
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
            format!("{reply}\n\n{}", written_without_model_note(language))
        };
        // Model output bound for a terminal and a DynamoDB item: no display controls, bounded in bytes.
        let reply = clean_text_bytes(&reply, MAX_REPLY_BYTES);
        // The conversation item reaching HANDOFF is the hand-off event (the stream carries it on).
        let flipped = match &handoff {
            Some(h) => self.store.hand_off(id, &reply, &usage, h).await?,
            None => self.store.finish_conversation(id, &reply, &usage).await?,
        };
        if !flipped {
            tracing::warn!(conversation_id = %id, "another aggregation answered first (this lease was taken over)");
            return Ok(AggregateOutcome::AlreadyHandled);
        }
        obs::metrics::reply_written(by_model);
        let status = if handoff.is_some() { ConversationStatus::Handoff } else { ConversationStatus::Done };
        obs::metrics::conversation_finished(status, conversation.created_at_ms, now_ms());
        obs::metrics::conversation_cost(&conversation.usage.add(&usage));
        if let Some(h) = &handoff {
            obs::metrics::handoff(h.reason);
            tracing::info!(conversation_id = %id, reason = h.reason.code(), "conversation handed to a person");
        }
        tracing::info!(conversation_id = %id, subtasks = subtasks.len(), by_model, "conversation answered");
        Ok(AggregateOutcome::Replied { by_model })
    }
}
