//! The aggregator's logic: a conversation with nothing remaining answered through `swarm_core::answer` (the aggregation lease `RUNNING → AGGREGATING`, or a takeover once an earlier holder's lease expired; one reply, bounded to its item; the conversation finished) with the reply model as its writer, the model-free reply when the model cannot write one.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::answer::{AnswerOutcome, Answerer, ReplyWriter, WrittenReply, answer_conversation};
use swarm_core::domain::{Conversation, ConversationId, ConversationStatus, Usage};
use swarm_core::llm::retry::{LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{
    AnswerStore, ChatModel, ChatRequest, ConversationRecords, ConversationStore, FinishReason, Purpose, StoreError,
    SubtaskStore,
};
use swarm_core::prompts::{ReplyInput, reply_messages};
use swarm_core::reply::{compose_reply, written_without_model_note};
use swarm_core::timings::Timings;

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
    /// Records of one stream batch aggregated at once (at least 1).
    pub max_parallel_records: usize,
    /// A conversation's idle time after a turn (`conversation.idle_expiry_secs`): a decision told
    /// once the answer is written refreshes it.
    pub idle_expiry: Duration,
}

impl Default for AggregatorSettings {
    /// The standard timing table's values ([`AggregatorSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl AggregatorSettings {
    /// The reply budget (`aggregator.reply_budget_secs`), the lease (`aggregator.lease_secs`), the
    /// records aggregated at once (`aggregator.max_parallel_records`) and the LLM retries (`[llm]`) of `timings`.
    pub fn from_timings(timings: &Timings) -> Self {
        Self {
            reply_timeout: timings.aggregator.reply_budget,
            retry: LlmRetryPolicy::from_timings(timings),
            lease: timings.aggregator.lease,
            max_parallel_records: timings.aggregator.max_parallel_records,
            idle_expiry: timings.conversation.idle_expiry,
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
    /// This call took the lease and failed the conversation: none of its subtasks ever began
    /// ([`AnswerOutcome::NeverStarted`]).
    NeverStarted,
    /// Another trigger holds a live lease, or the conversation is already over: nothing done.
    AlreadyHandled,
    /// Subtasks still open: not ready (a filter mismatch or an early trigger).
    NotReady {
        remaining: u32,
    },
    Unknown,
}

/// The aggregator: answers a conversation whose subtasks are all counted (the stream's trigger).
pub struct Aggregator {
    conversations: Arc<dyn ConversationRecords>,
    answers: Arc<dyn AnswerStore>,
    subtasks: Arc<dyn SubtaskStore>,
    model: Arc<dyn ChatModel>,
    settings: AggregatorSettings,
}

impl Aggregator {
    /// The aggregator over `store` (it reads conversations and subtasks and answers through the
    /// lease: those roles only) with the reply `model`.
    pub fn new(store: Arc<dyn ConversationStore>, model: Arc<dyn ChatModel>, settings: AggregatorSettings) -> Self {
        Self { conversations: store.clone(), answers: store.clone(), subtasks: store, model, settings }
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &AggregatorSettings {
        &self.settings
    }

    /// Aggregates a conversation whose `remaining` reached 0. It starts from the aggregation
    /// lease (DESIGN.md invariant 2): `RUNNING → AGGREGATING` with a lease of
    /// [`AggregatorSettings::lease`], or the takeover of an aggregation whose lease expired (its
    /// holder died); any trigger meeting a live lease stops. One reply is written: the conditional
    /// `AGGREGATING → DONE` lets only the first finisher through ([`answer_conversation`]).
    pub async fn aggregate(&self, id: &ConversationId) -> Result<AggregateOutcome, StoreError> {
        let Some(conversation) = self.conversations.get_conversation(id).await? else {
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
        let answerer =
            Answerer { kind: "aggregator", lease: self.settings.lease, idle_expiry: self.settings.idle_expiry };
        let writer = ModelReply { model: self.model.as_ref(), settings: &self.settings };
        let answered = answer_conversation(
            self.conversations.as_ref(),
            self.answers.as_ref(),
            self.subtasks.as_ref(),
            &conversation,
            answerer,
            &writer,
        )
        .await?;
        Ok(match answered {
            AnswerOutcome::Answered { by_model, .. } => {
                tracing::info!(conversation_id = %id, by_model, "conversation answered");
                AggregateOutcome::Replied { by_model }
            }
            AnswerOutcome::NeverStarted { .. } => {
                tracing::warn!(conversation_id = %id, "none of its subtasks ever began: failed, not answered");
                AggregateOutcome::NeverStarted
            }
            AnswerOutcome::Held(lease) => {
                tracing::info!(conversation_id = %id, holder = %lease.holder, "aggregation lease held: another trigger aggregates");
                AggregateOutcome::AlreadyHandled
            }
            AnswerOutcome::NotInPhase { status: ConversationStatus::Running, remaining } if remaining > 0 => {
                AggregateOutcome::NotReady { remaining }
            }
            AnswerOutcome::NotInPhase { .. } | AnswerOutcome::Overtaken => AggregateOutcome::AlreadyHandled,
            AnswerOutcome::Missing => AggregateOutcome::Unknown,
        })
    }
}

/// The reply model as the aggregator's writer, within [`AggregatorSettings::reply_timeout`]
/// (retries included); the model-free reply when it fails, answers nothing or is cut off.
struct ModelReply<'a> {
    model: &'a dyn ChatModel,
    settings: &'a AggregatorSettings,
}

impl ReplyWriter for ModelReply<'_> {
    async fn write(&self, conversation: &Conversation, input: &ReplyInput) -> WrittenReply {
        let id = &conversation.id;
        let request = ChatRequest {
            purpose: Purpose::Reply,
            messages: reply_messages(&conversation.query, input),
            tools: Vec::new(),
            max_tokens: Some(REPLY_ANSWER_TOKENS),
            tool_choice: Default::default(),
        };
        let deadline = tokio::time::Instant::now() + self.settings.reply_timeout;
        let (text, usage, by_model) = match complete_with_retry(self.model, &request, &self.settings.retry, deadline)
            .await
        {
            // A reply cut off by the output limit (the client already asked once more with a larger
            // one) is never stored as final: the model-free reply has every answer whole.
            Ok(r) if r.finish_reason == FinishReason::Length => {
                tracing::warn!(conversation_id = %id, "reply cut off by the output limit (finish_reason length); writing the model-free reply");
                (compose_reply(input), r.usage, false)
            }
            Ok(r) if r.content.as_deref().is_some_and(|c| !c.trim().is_empty()) => {
                (r.content.unwrap_or_default(), r.usage, true)
            }
            Ok(r) => {
                tracing::warn!(conversation_id = %id, finish_reason = ?r.finish_reason, "reply model gave no text; writing the model-free reply");
                (compose_reply(input), r.usage, false)
            }
            Err(e) => {
                tracing::warn!(conversation_id = %id, error = %e.log_safe(), "reply model failed; writing the model-free reply");
                (compose_reply(input), Usage::default(), false)
            }
        };
        let text = if by_model || !self.model.is_offline() {
            text
        } else {
            format!("{text}\n\n{}", written_without_model_note(conversation.reply_language()))
        };
        WrittenReply { text, usage, by_model }
    }
}
