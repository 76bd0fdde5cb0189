//! Turns told without the customer, on the orchestrator's side: decisions still untold when a reader comes (`GET`, a follow-up) are told before it reads on, and an operator's answer to a handed-off conversation becomes a turn authored `operator`.

use swarm_core::decisions::{TellOutcome, ToldTurn, tell_decisions, untold_decisions};
use swarm_core::domain::{Conversation, ConversationId, ConversationStatus, MAX_REPLY_BYTES, TurnAuthor, request_hash};
use swarm_core::language::Language;
use swarm_core::time::now_ms;
use swarm_core::untrusted::clean_text_bytes;

use super::{ApiError, Orchestrator, validate_request};

/// What `POST /operator/conversations/{id}/messages` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorAnswered {
    pub conversation_id: ConversationId,
    /// The turn the answer is (`turns[turn]` on `GET`, authored `operator`).
    pub turn: u32,
    /// `false` when this key's answer was told before (a retry): nothing new was written.
    pub new: bool,
}

impl Orchestrator {
    /// Tells the decisions of `conversation` still untold, if its latest turn is over: the
    /// reader's repair of a teller that died between its writes (or of a decision that landed
    /// while the turn ran, whose ender died). Answers whether there were any (told by this call
    /// or by another teller meanwhile): read the conversation again then. A store failure while telling is logged, not answered: the
    /// reader is shown what is stored, and the next reader tries again.
    ///
    /// Errors: the store's, reading the conversation's history.
    pub(super) async fn tell_untold(&self, conversation: &Conversation) -> Result<bool, ApiError> {
        if !conversation.status.is_terminal() {
            return Ok(false);
        }
        let history = self.store.conversation_history(&conversation.id).await?;
        if untold_decisions(&history).is_empty() {
            return Ok(false);
        }
        let store = self.store.as_ref();
        if let Err(e) = tell_decisions(store, store, &conversation.id, self.settings.idle_expiry).await {
            tracing::warn!(conversation_id = %conversation.id, error = %e, "could not tell an untold decision; the next reader will");
        }
        Ok(true)
    }

    /// `POST /operator/conversations/{id}/messages`: `operator`'s answer `text` to conversation
    /// `id`, handed to a person, told to the customer as a turn authored `operator` (its reply is
    /// the text, cleaned of display controls; `DONE` at once). Exactly once per key: the
    /// `Idempotency-Key` (else the text's hash), kept as the turn's notice; a retry answers the
    /// same turn, `new: false`. Not counted against the customer's rate limit.
    ///
    /// Errors: 400 for an empty or too long text or a bad key; 404 for an unknown conversation;
    /// 409 `not_handed_off` when its latest turn is not `HANDOFF` (and this key told nothing);
    /// 503 when the store is unavailable.
    pub async fn operator_answer(
        &self,
        id: &str,
        text: &str,
        idempotency_key: Option<&str>,
        operator: &str,
    ) -> Result<OperatorAnswered, ApiError> {
        let id = ConversationId::parse(id).ok_or(ApiError::NotFound)?;
        let conversation = self.store.get_conversation(&id).await?.ok_or(ApiError::NotFound)?;
        let request =
            validate_request(text, &conversation.customer_id, idempotency_key, self.settings.max_message_chars)?;
        let key = format!(
            "op:{}",
            request.idempotency_key.clone().unwrap_or_else(|| request_hash(operator, &request.message))
        );
        let answered = |turn, new| OperatorAnswered { conversation_id: id.clone(), turn, new };
        let history = self.store.conversation_history(&id).await?;
        if let Some(n) = history.notices.iter().find(|n| n.key == key) {
            return Ok(answered(n.turn, false));
        }
        if conversation.status != ConversationStatus::Handoff {
            return Err(ApiError::NotHandedOff(id));
        }
        let language = Language::detect(&request.message, conversation.language);
        let reply = clean_text_bytes(&request.message, MAX_REPLY_BYTES);
        let told = ToldTurn::new(&key, TurnAuthor::Operator, reply, language, now_ms(), self.settings.idle_expiry);
        match self.store.tell_turn(&conversation, &told).await? {
            TellOutcome::Told(after) => {
                tracing::info!(conversation_id = %id, operator, turn = after.turn, "operator's answer told as a turn");
                Ok(answered(after.turn, true))
            }
            TellOutcome::AlreadyTold(n) => Ok(answered(n.turn, false)),
            TellOutcome::Refused(None) => Err(ApiError::NotFound),
            TellOutcome::Refused(Some(_)) => Err(ApiError::NotHandedOff(id)),
        }
    }
}
