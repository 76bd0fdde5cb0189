//! Pages of the store's lists: where a page of a customer's conversations ends, so the next one starts after it.

use crate::domain::{Conversation, ConversationId};

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
