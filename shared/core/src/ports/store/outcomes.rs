//! What the store's calls answer: `StoreError` (transient or permanent) and one outcome enum per conditional write whose caller decides on what happened.

use crate::domain::{ConversationId, ConversationStatus, Lease, SubtaskRecord};
use crate::effects::Effect;

/// Errors of a [`super::ConversationStore`] (of each of its role traits).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Throttling, contention (`TransactionConflict`), timeouts: retry with backoff.
    #[error("store temporarily unavailable: {0}")]
    Transient(String),
    /// Validation, missing table, access denied, corrupt item: retrying will not help.
    #[error("store error: {0}")]
    Permanent(String),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Outcome of [`super::ConversationRecords::create_conversation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    Created,
    /// The customer's `Idempotency-Key` was already used by the same request: this is the conversation it created.
    Existing(ConversationId),
    /// The customer's `Idempotency-Key` was already used by another request (its
    /// [`request_hash`](crate::domain::request_hash) differs): nothing written; this is the conversation it created.
    KeyReused(ConversationId),
}

/// What a lease is taken for (see [`super::AnswerStore::acquire_lease`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeasePhase {
    /// Planning a `PLANNING` conversation (its creator died, or is still at it).
    Planning,
    /// Aggregating `turn`: `RUNNING` with nothing remaining becomes `AGGREGATING`.
    Aggregating { turn: u32 },
}

/// Outcome of [`super::AnswerStore::acquire_lease`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// This call holds the lease now. `taken_over`: the expired lease it replaced (its holder died or stalled).
    Acquired {
        taken_over: Option<Lease>,
    },
    /// Another holder's lease is live: it moves the conversation on; do nothing now.
    Held(Lease),
    /// The conversation is not in the phase (e.g. `RUNNING` with subtasks open, already `DONE`): nothing written.
    NotInPhase {
        status: ConversationStatus,
        remaining: u32,
    },
    Missing,
}

/// Outcome of [`super::SubtaskStore::begin_attempt`].
// Returned once per store call, never stored in bulk: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptStart {
    /// The subtask is now `RUNNING` under the caller's lease with `attempts` incremented; the record after the update.
    Started(SubtaskRecord),
    /// The subtask already has a terminal result (a duplicate delivery); the stored record.
    AlreadyFinished(SubtaskRecord),
    /// Another attempt holds a live lease: the stored record (its `lease` says until when).
    Leased(SubtaskRecord),
    /// No such conversation or subtask (a poison message).
    Missing,
}

/// Outcome of [`super::JournalStore::record_intent`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum IntentOutcome {
    /// The intent is the journal's entry `ordinal - 1` now: dispatch may follow.
    Recorded,
    /// The journal already has this entry (a re-run): the stored one, to replay as recorded.
    Existing(Effect),
    /// The subtask is terminal (the deadline path or a duplicate closed it): do not dispatch.
    Closed(SubtaskRecord),
    /// Another attempt holds the lease now (this one's expired): do not dispatch.
    LeaseLost,
    Missing,
}

/// Outcome of [`super::SubtaskStore::close_subtask`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum CloseOutcome {
    /// This call closed the subtask; the record as written.
    Recorded(SubtaskRecord),
    /// Already terminal; the stored record.
    AlreadyFinished(SubtaskRecord),
    /// The journal no longer has the number of entries the caller read: read again and decide again.
    JournalChanged,
    Missing,
}

/// Outcome of [`super::SubtaskStore::record_result`].
// Returned once per store call, never stored in bulk: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum RecordOutcome {
    /// This call wrote the result; the record as written.
    Recorded(SubtaskRecord),
    /// Another delivery (or the deadline path) recorded a result first; the stored record.
    AlreadyFinished(SubtaskRecord),
    Missing,
}

/// Outcome of [`super::AccountingStore::count_finished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountOutcome {
    /// This call counted the subtask; `remaining` after the decrement.
    Counted {
        remaining: u32,
    },
    /// The subtask id was already in the finished set: nothing changed.
    AlreadyCounted,
    Missing,
}
