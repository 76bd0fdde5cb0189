//! Follow-up messages: `POST /conversations/{id}/messages` starts the conversation's next turn once the latest is over (409 while it runs, 410 once the conversation expired, 404 for another customer's), and a retry with the same `Idempotency-Key` answers the same turn.

use swarm_core::domain::{Conversation, ConversationId, Lease, NextTurn, Plan, SubtaskId, request_hash, sweep_shard};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::language::Language;
use swarm_core::memory::Memory;
use swarm_core::obs;
use swarm_core::ports::TurnOutcome;
use swarm_core::time::{self, now_ms};
use tracing::Instrument;

use super::{ApiError, CreateRequest, Created, Orchestrator, planner_id};
use crate::budget::Budget;

/// `plan` with every subtask id (and dependency) in `turn`'s scope ([`SubtaskId::in_turn`]): turn 0's
/// ids as planned, later turns' prefixed, so no turn's items, messages or side-effect keys meet another's.
pub(super) fn plan_in_turn(mut plan: Plan, turn: u32) -> Plan {
    if turn == 0 {
        return plan;
    }
    for s in &mut plan.subtasks {
        s.id = SubtaskId::in_turn(turn, s.id.as_str());
        for d in &mut s.depends_on {
            *d = SubtaskId::in_turn(turn, d.as_str());
        }
    }
    plan
}

impl Orchestrator {
    /// The memory of `conversation`'s turns before its current one ([`Memory::of`]), read from its
    /// own items only (so only its customer's), by `deadline`. Turn 0 has none; a read that fails
    /// or is cut plans the turn without memory (logged): a follow-up is still answered, only
    /// without the earlier turns to resolve "it" against.
    pub(super) async fn memory(&self, conversation: &Conversation, deadline: tokio::time::Instant) -> Memory {
        if conversation.turn == 0 {
            return Memory::default();
        }
        match tokio::time::timeout_at(deadline, self.store.conversation_history(&conversation.id)).await {
            Ok(Ok(history)) => {
                let memory = Memory::of(&conversation.id, &history.turns, &history.subtasks, conversation.turn);
                tracing::info!(turns = memory.turns.len(), dropped = memory.dropped, "memory of earlier turns read");
                memory
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "earlier turns unreadable; planning without memory");
                Memory::default()
            }
            Err(_) => {
                tracing::warn!("reading the earlier turns timed out; planning without memory");
                Memory::default()
            }
        }
    }

    /// `POST /conversations/{id}/messages`: the customer's next message on conversation `id`, as a
    /// new turn (202), once the latest turn is over.
    ///
    /// Counts against the customer's conversations per minute like a new conversation (every
    /// accepted request, retries included). Errors: 404 for an unknown id or another customer's
    /// conversation (the same answer: it never says another's exists); 409 `turn_in_progress` with
    /// `Retry-After` while the latest turn is being answered; 410 `conversation_expired` past the
    /// conversation's idle time; 422 for an `Idempotency-Key` used on this conversation with another
    /// message. A retry with the key of an earlier request answers that request's turn, moved on
    /// like a retried create ([`Self::resume`]) when it is the latest.
    pub async fn follow_up(&self, id: &str, request: CreateRequest) -> Result<Created, ApiError> {
        let budget = Budget::starting_now(&self.settings);
        self.admit(&request.customer_id, &budget).await?;
        let id = ConversationId::parse(id).ok_or(ApiError::NotFound)?;
        let mut conversation = self
            .store
            .get_conversation(&id)
            .await?
            .filter(|c| c.customer_id == request.customer_id)
            .ok_or(ApiError::NotFound)?;
        // A decision still untold goes first: the customer's message is the turn after it.
        if self.tell_untold(&conversation).await? {
            conversation = self.store.get_conversation(&id).await?.ok_or(ApiError::NotFound)?;
        }
        if let Some(answer) = self.answered_before(&conversation, &request, &budget).await? {
            return answer;
        }
        let now = now_ms();
        self.may_start_turn(&conversation, now)?;
        let next = self.next_turn(&conversation, &request, now);
        let started = match self.store.start_turn(&conversation, &next, now).await? {
            TurnOutcome::Started(started) => started,
            TurnOutcome::Refused(None) => return Err(ApiError::NotFound),
            TurnOutcome::Refused(Some(stored)) => {
                // Moved on since it was read: this request's own turn (a concurrent retry started it),
                // another message's turn, or expired.
                if let Some(answer) = self.answered_before(&stored, &request, &budget).await? {
                    return answer;
                }
                self.may_start_turn(&stored, now_ms())?;
                return Err(in_progress(&stored, now_ms()));
            }
        };
        obs::metrics::conversation_started();
        faults::at(CrashPoint::OrchestratorAfterStartTurn).await;
        let span = tracing::info_span!("orchestrate", conversation_id = %id, turn = started.turn);
        self.plan_and_queue(started, &budget).instrument(span).await
    }

    /// The answer to a request whose `Idempotency-Key` an earlier request of this conversation used:
    /// its turn (the latest moved on like a retried create), or 422 for another message; `None` when
    /// the key is new here (or none was given).
    async fn answered_before(
        &self,
        conversation: &Conversation,
        request: &CreateRequest,
        budget: &Budget,
    ) -> Result<Option<Result<Created, ApiError>>, ApiError> {
        let Some(key) = request.idempotency_key.as_deref() else { return Ok(None) };
        let hash = request_hash(&request.customer_id, &request.message);
        let same = |stored: Option<&str>| stored.is_none_or(|h| h == hash);
        if conversation.idempotency_key.as_deref() == Some(key) {
            if !same(conversation.request_hash.as_deref()) {
                return Ok(Some(Err(ApiError::KeyReused(conversation.id.clone()))));
            }
            tracing::info!(conversation_id = %conversation.id, turn = conversation.turn, "idempotency key reused: the same turn");
            return Ok(Some(self.resume(conversation.id.clone(), budget).await));
        }
        if conversation.turn == 0 {
            return Ok(None);
        }
        let history = self.store.conversation_history(&conversation.id).await?;
        let Some(earlier) = history.turns.iter().find(|t| t.idempotency_key.as_deref() == Some(key)) else {
            return Ok(None);
        };
        if !same(earlier.request_hash.as_deref()) {
            return Ok(Some(Err(ApiError::KeyReused(conversation.id.clone()))));
        }
        Ok(Some(Ok(Created { conversation_id: conversation.id.clone(), new: false, turn: earlier.turn })))
    }

    /// Whether a new turn may start on `conversation` at `now` (epoch ms): not expired (410), its
    /// latest turn over (409 with `Retry-After` otherwise).
    fn may_start_turn(&self, conversation: &Conversation, now: i64) -> Result<(), ApiError> {
        if now >= conversation.expires_at(self.settings.idle_expiry) {
            return Err(ApiError::Expired(conversation.id.clone()));
        }
        if !conversation.status.is_terminal() {
            return Err(in_progress(conversation, now));
        }
        Ok(())
    }

    /// What the new turn writes: the message, the planner's lease, the turn's deadline, the
    /// conversation's refreshed expiry, its sweep shard.
    fn next_turn(&self, conversation: &Conversation, request: &CreateRequest, now: i64) -> NextTurn {
        let turn = conversation.turn + 1;
        NextTurn {
            turn,
            query: request.message.clone(),
            // Each turn is answered in the language of its own message.
            language: Language::detect(&request.message, None),
            idempotency_key: request.idempotency_key.clone(),
            request_hash: request_hash(&request.customer_id, &request.message),
            trace_parent: obs::context::current_traceparent(),
            lease: Lease { holder: planner_id(), until_ms: self.lease_until(now), turn },
            started_at_ms: now,
            deadline_ms: time::after_ms(now, std::time::Duration::from_secs(self.settings.deadline_secs)),
            expires_at_ms: time::after_ms(now, self.settings.idle_expiry),
            sweep_shard: sweep_shard(&conversation.id, self.settings.sweep_shards),
        }
    }
}

/// 409 for a conversation whose latest turn is still answered: come back when its deadline has
/// passed (it is answered by then, with what it has), at least 1 s.
fn in_progress(conversation: &Conversation, now: i64) -> ApiError {
    let left_ms = (conversation.deadline_ms - now).max(0);
    ApiError::TurnInProgress {
        conversation: conversation.id.clone(),
        turn: conversation.turn,
        status: conversation.status.as_str(),
        retry_after_secs: (left_ms as u64).div_ceil(1000).max(1),
    }
}
