//! Pages of the store's lists: where a page of a customer's conversations ends, so the next one starts after it.

use crate::decisions::Notice;
use crate::domain::{Conversation, ConversationId, SubtaskRecord, TurnRecord};

/// A place in a customer's conversations, newest first: the conversation created at
/// `created_at_ms` (epoch milliseconds) with id `id` (ties on the same millisecond ordered by id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversationPosition {
    pub created_at_ms: i64,
    pub id: ConversationId,
}

impl ConversationPosition {
    /// The position of `conversation`.
    pub fn of(conversation: &Conversation) -> Self {
        Self { created_at_ms: conversation.created_at_ms, id: conversation.id.clone() }
    }
}

/// One page of a customer's conversations, newest first.
#[derive(Clone, Debug, PartialEq)]
pub struct ConversationPage {
    pub conversations: Vec<Conversation>,
    /// Where the next page starts after; `None` when this page is the last.
    pub next: Option<ConversationPosition>,
}

/// What [`super::ConversationRecords::start_turn`] did.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutcome {
    /// The turn started (or this call's own start was found): the conversation item now.
    Started(Conversation),
    /// Nothing written: the conversation moved on (another turn started, or it is not terminal),
    /// expired, or is missing (`None`). The stored conversation, for the caller to decide.
    Refused(Option<Conversation>),
}

/// A conversation's earlier turns and all its subtask items (any turn).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConversationHistory {
    /// Archived turns, oldest first (the current turn is the conversation item's).
    pub turns: Vec<TurnRecord>,
    /// Every subtask item, in id order; [`crate::domain::SubtaskId::turn`] says whose.
    pub subtasks: Vec<SubtaskRecord>,
    /// The notices of the turns told without the customer ([`crate::decisions`]), by key.
    pub notices: Vec<Notice>,
}
