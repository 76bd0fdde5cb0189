//! The conversation store port: the single table keyed by conversation (DESIGN.md "Data"), as narrow role traits.
//!
//! Every mutating call is one conditional write (or one transaction), so the invariants hold
//! under at-least-once delivery and concurrent workers. A function asks for the roles it uses
//! (`&dyn SubtaskStore`, `Arc<dyn JournalStore>`); adapters implement every role, which makes
//! them a [`ConversationStore`], the union, for callers that use them all (an
//! `Arc<dyn ConversationStore>` upcasts to any role). Each signature is written once, in the
//! `store_roles!` invocation below, which also implements every role for every
//! [`StoreDecorator`]: a decorator (spans per operation, injected faults) answers
//! [`StoreDecorator::inner`] and [`StoreDecorator::around`], and each role's method runs the
//! inner store's call inside `around` with a [`Call`] that names it.

use std::future::Future;

use crate::approval::{Approval, ApprovalDecision, ApprovalStatus, DecideOutcome};
use crate::decisions::{TellOutcome, ToldTurn};
use crate::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, NextTurn, SubtaskId, SubtaskRecord, SubtaskResult,
    SubtaskStatus, Usage,
};
use crate::effects::{AttemptLease, Effect, EffectChange, EffectOutcome};
use crate::events::{EventCursor, EventPage};

mod outcomes;
mod pages;
mod roles_macro;

pub use outcomes::{
    AttemptStart, CloseOutcome, CountOutcome, CreateOutcome, IntentOutcome, LeaseOutcome, LeasePhase, RecordOutcome,
    StoreError,
};
pub use pages::{ConversationHistory, ConversationPage, ConversationPosition, TurnOutcome};
use roles_macro::store_roles;

/// One store call as a decorator sees it: which operation, and the arguments a decorator keys on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call<'a> {
    pub op: StoreOp,
    /// The subtask the call reads or writes (for `create_approval`, the approval's subtask);
    /// `None` for calls on a conversation or an approval alone.
    pub subtask: Option<&'a SubtaskId>,
    /// The lease `acquire_lease` asks for; `None` for every other operation.
    pub lease: Option<LeaseAsk<'a>>,
}

impl Call<'_> {
    /// A call of `op` with no keyed arguments.
    pub fn of(op: StoreOp) -> Self {
        Self { op, subtask: None, lease: None }
    }
}

/// The arguments of an `acquire_lease` call: who asks, at what time, until when (epoch milliseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseAsk<'a> {
    pub holder: &'a str,
    pub now_ms: i64,
    pub until_ms: i64,
}

/// A store around another: every role trait's call goes to [`Self::inner`] through [`Self::around`].
///
/// Implementing this trait implements every role trait (and so [`ConversationStore`]); the
/// decorator cannot change a call's arguments, only observe them, delay, refuse or observe the answer.
pub trait StoreDecorator: Send + Sync {
    /// The store the calls go on to.
    fn inner(&self) -> &dyn ConversationStore;

    /// Answers `call`: normally by awaiting `run` (the inner store's answer to it), possibly
    /// inside a span or after a check; a decorator may also answer without running it. `T` is the
    /// operation's `Ok` type (owned, so a decorator may downcast it through [`std::any::Any`]).
    fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> impl Future<Output = Result<T, StoreError>> + Send + 'a
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'a;
}

store_roles! {
    /// The conversation item's life: created, read, planned into subtasks, flipped, failed, and
    /// found by the sweep when overdue.
    pub trait ConversationRecords {
        /// Writes the conversation item, conditional on the id being new. When
        /// `conversation.idempotency_key` is set, atomically claims
        /// `(customer_id, key)`; a key already claimed returns
        /// [`CreateOutcome::Existing`] and writes nothing.
        async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError>
            as CreateConversation;

        async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError>
            as GetConversation;

        /// Writes all subtask items and flips the conversation `PLANNING → RUNNING`
        /// with `total = remaining = subtasks.len()`, the plan's ids, `notes`, and `usage` added —
        /// conditional on `planner` (when given) holding the planning lease. Returns `false` (and
        /// flips nothing) when the conversation is not in `PLANNING` or another planner holds it;
        /// `true` when this planner's own flip is found already made (its answer was lost).
        /// Subtask items of the conversation outside this plan (a planner taken over wrote them)
        /// are removed, and are never listed nor counted whatever is left of them.
        /// DynamoDB: at most 100 items per transaction, so large plans write the
        /// subtasks first and flip the conversation last.
        async fn start_run(
            &self,
            id: &ConversationId,
            planner: Option<&str>,
            subtasks: &[SubtaskRecord],
            notes: &[String],
            usage: &Usage,
        ) -> Result<bool, StoreError>
            as StartRun;

        /// Records that the subtasks turn `turn` sent at planning were sent: sets `queued_at_ms` to
        /// `at_ms` unless it is set already (the first instant stays, so a retry whose first write was
        /// applied and its answer lost changes nothing and answers `true` again) — conditional on the
        /// conversation being on `turn`: a late marker of an earlier turn writes nothing on the next
        /// (whose subtasks it never sent). Returns whether the conversation exists on `turn`.
        async fn mark_queued(&self, id: &ConversationId, turn: u32, at_ms: i64) -> Result<bool, StoreError>
            as MarkQueued;

        /// Flips a conversation `from → to` if it is in `from` (a terminal `to` takes it out of the sweep
        /// index). Returns whether this call made the flip. The aggregation flip is [`AnswerStore::acquire_lease`].
        async fn transition_conversation(
            &self,
            id: &ConversationId,
            from: ConversationStatus,
            to: ConversationStatus,
        ) -> Result<bool, StoreError>
            as TransitionConversation;

        /// `PLANNING | RUNNING | AGGREGATING → FAILED` with `reason`, conditional on the conversation
        /// being on `turn` (a late writer of an earlier turn fails nothing of the next); the
        /// conversation leaves the sweep index. Returns whether the conversation is now failed by this
        /// write: `true` when this call made the flip, and when it finds the flip made on `turn` with
        /// the same `reason` (its own write, applied by an attempt whose answer was lost — or a peer's
        /// that decided alike from the same state); `false` otherwise, with nothing written.
        async fn fail_conversation(&self, id: &ConversationId, turn: u32, reason: &str) -> Result<bool, StoreError>
            as FailConversation;

        /// Conversations of sweep shard `shard` whose deadline is before `now_ms` and that are not terminal,
        /// earliest deadline first, at most `limit`. DynamoDB: a query of the sparse sweep index
        /// (`sweep_shard`, `deadline_ms`), which only non-terminal conversations carry; eventually consistent.
        async fn overdue_conversations(
            &self,
            shard: u32,
            now_ms: i64,
            limit: usize,
        ) -> Result<Vec<ConversationId>, StoreError>
            as OverdueConversations;

        /// Starts turn `next.turn` on `previous` (the conversation as the caller read it), in one
        /// transaction: archives `previous`'s turn ([`crate::domain::TurnRecord`], its own item) and
        /// writes [`Conversation::next_turn`] over the conversation item — conditional on the stored
        /// conversation being on turn `next.turn - 1`, in `previous.status` (terminal) and not expired
        /// at `now_ms` (epoch milliseconds). [`TurnOutcome::Started`] with the new item; a retry whose
        /// answer was lost finds its own write ([`Conversation::is_turn_started_by`]) and is answered
        /// the same. Otherwise nothing is written: [`TurnOutcome::Refused`] with the stored conversation.
        async fn start_turn(&self, previous: &Conversation, next: &NextTurn, now_ms: i64) -> Result<TurnOutcome, StoreError>
            as StartTurn;

        /// Tells `told` as the next turn on `previous` (the conversation as the caller read it), in
        /// one transaction: the notice of `told.key` ([`crate::decisions::Notice`], its own item,
        /// new), the archive of `previous`'s turn, and [`Conversation::told_turn`] over the
        /// conversation item — conditional on no notice of that key existing and the stored
        /// conversation being on `previous.turn` in `previous.status` (terminal). No expiry
        /// condition: a decision is told even on an idle conversation (the turn refreshes it).
        /// [`TellOutcome::Told`] with the new item; [`TellOutcome::AlreadyTold`] with the stored
        /// notice when the key was told before (also a retry whose answer was lost: its own notice);
        /// otherwise nothing is written: [`TellOutcome::Refused`] with the stored conversation.
        async fn tell_turn(&self, previous: &Conversation, told: &ToldTurn) -> Result<TellOutcome, StoreError>
            as TellTurn;

        /// The conversation's archived turns (oldest first) and every subtask item of every turn
        /// (in id order), strongly consistent: what `GET /conversations/{id}` shows as `turns[]`.
        async fn conversation_history(&self, id: &ConversationId) -> Result<ConversationHistory, StoreError>
            as GetConversationHistory;

        /// The conversations of `customer_id`, newest first (by `created_at_ms`, then id): at most
        /// `limit` (1..=100), starting after `after` (a page's [`ConversationPage::next`]).
        /// DynamoDB: a query of the `customer` index (`customer_id`, `created_at_ms`), which only
        /// conversation items carry both of; eventually consistent.
        async fn list_customer_conversations(
            &self,
            customer_id: &str,
            after: Option<&ConversationPosition>,
            limit: usize,
        ) -> Result<ConversationPage, StoreError>
            as ListCustomerConversations;
    }

    /// Who answers a conversation, and how: the planning or aggregation lease, the reply, and the
    /// hand-off to a person.
    pub trait AnswerStore {
        /// Takes the lease of `phase` for `holder` until `until_ms`, in one conditional write:
        /// - [`LeasePhase::Planning`]: the conversation is `PLANNING` and holds no live lease (or, for
        ///   the lease's own holder, `PLANNING` or `RUNNING`: its planner may end it after the flip);
        /// - [`LeasePhase::Aggregating`]: the conversation is on `turn` and either `RUNNING` with
        ///   `remaining = 0` (it becomes `AGGREGATING`: the aggregation flip) or `AGGREGATING` under a
        ///   lease that expired before `now_ms` (a takeover).
        ///
        /// A live lease is never taken over ([`LeaseOutcome::Held`]); the holder's own lease is taken
        /// again (renewed, or ended with an `until_ms` already past), so a call retried after its write
        /// was applied and its answer lost answers [`LeaseOutcome::Acquired`] with nothing taken over.
        async fn acquire_lease(
            &self,
            id: &ConversationId,
            phase: LeasePhase,
            holder: &str,
            now_ms: i64,
            until_ms: i64,
        ) -> Result<LeaseOutcome, StoreError>
            as AcquireLease { lease: LeaseAsk { holder, now_ms, until_ms } };

        /// `AGGREGATING → DONE` with the reply of `turn`, adding `usage`, conditional on the
        /// conversation being on `turn` (a late aggregation of an earlier turn writes nothing); the
        /// conversation leaves the sweep index. Returns whether this call made the flip.
        async fn finish_conversation(&self, id: &ConversationId, turn: u32, reply: &str, usage: &Usage) -> Result<bool, StoreError>
            as FinishConversation;

        /// Records on a non-terminal conversation that it goes to a person when it ends. Returns
        /// whether the conversation was non-terminal.
        async fn request_handoff(&self, id: &ConversationId, handoff: &Handoff) -> Result<bool, StoreError>
            as RequestHandoff;

        /// `AGGREGATING → HANDOFF` with the reply of `turn` and why, adding `usage`, conditional on the
        /// conversation being on `turn`. Returns whether this call made the flip.
        async fn hand_off(
            &self,
            id: &ConversationId,
            turn: u32,
            reply: &str,
            usage: &Usage,
            handoff: &Handoff,
        ) -> Result<bool, StoreError>
            as HandOff;
    }

    /// The subtask items: read, flipped, attempted under a lease, checkpointed and finished.
    pub trait SubtaskStore {
        async fn get_subtask(&self, id: &ConversationId, subtask_id: &SubtaskId) -> Result<Option<SubtaskRecord>, StoreError>
            as GetSubtask { subtask: subtask_id };

        /// All subtasks of a conversation's plan (once it has one: see [`ConversationRecords::start_run`]),
        /// strongly consistent, in id order.
        async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError>
            as ListSubtasks;

        /// Flips a subtask's status if it is currently one of `from`. Returns whether this call made the flip.
        async fn transition_subtask(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            from: &[SubtaskStatus],
            to: SubtaskStatus,
        ) -> Result<bool, StoreError>
            as TransitionSubtask { subtask: subtask_id };

        /// Marks a non-terminal subtask `RUNNING` under `lease`, increments `attempts` and sets
        /// `started_at_ms` on the first attempt — conditional on no other holder's lease being live
        /// at `now_ms` ([`AttemptStart::Leased`] then, and nothing written). A subtask already under
        /// `lease.holder`'s lease is that attempt's own start (a retry after a lost answer): answered
        /// [`AttemptStart::Started`] as stored, not counted again.
        async fn begin_attempt(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            lease: &AttemptLease,
            now_ms: i64,
        ) -> Result<AttemptStart, StoreError>
            as BeginAttempt { subtask: subtask_id };

        /// Extends `lease.holder`'s lease to `lease.until_ms` (the live attempt's heartbeat), one
        /// conditional write: on the subtask being non-terminal and `lease.holder` holding its lease
        /// (live or expired, as long as no other attempt took it). Answers whether the lease is still
        /// the caller's; `false` (nothing written): another attempt holds it, the subtask is
        /// terminal, or it does not exist. A retry after a lost answer meets its own write (the same
        /// holder) and is answered `true` again.
        async fn renew_attempt(&self, id: &ConversationId, subtask_id: &SubtaskId, lease: &AttemptLease) -> Result<bool, StoreError>
            as RenewAttempt { subtask: subtask_id };

        /// Ends `holder`'s lease early (a hand-back or a wait): the next delivery need not wait for
        /// it to expire. Nothing happens when another holder has it.
        async fn release_attempt(&self, id: &ConversationId, subtask_id: &SubtaskId, holder: &str) -> Result<(), StoreError>
            as ReleaseAttempt { subtask: subtask_id };

        /// Saves an interrupted attempt's progress (JSON) on a non-terminal subtask.
        async fn save_checkpoint(&self, id: &ConversationId, subtask_id: &SubtaskId, checkpoint: &str) -> Result<(), StoreError>
            as SaveCheckpoint { subtask: subtask_id };

        /// Writes the subtask's terminal result, usage and tools used, conditional
        /// on the subtask not being terminal yet; answers the record as written — also to a retry of the
        /// same finish whose answer was lost ([`crate::domain::SubtaskRecord::is_finish_of`]).
        async fn record_result(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            result: &SubtaskResult,
            usage: &Usage,
            tools_used: &[String],
            now_ms: i64,
        ) -> Result<RecordOutcome, StoreError>
            as RecordResult { subtask: subtask_id };

        /// [`SubtaskStore::record_result`] for a subtask someone else was running (the deadline
        /// path, the dead-letter consumer), conditional also on its journal still holding
        /// `journal_len` entries: an intent recorded since the caller read it wins
        /// ([`CloseOutcome::JournalChanged`]), so a side effect is never reported as not done.
        async fn close_subtask(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            result: &SubtaskResult,
            journal_len: usize,
            now_ms: i64,
        ) -> Result<CloseOutcome, StoreError>
            as CloseSubtask { subtask: subtask_id };

        /// Settles a `SUBMITTED` subtask whose side effects' confirmation learnt every outcome: its
        /// status and result become `result`'s (the journal's: `SUCCEEDED` or `AWAITING_APPROVAL`),
        /// one write conditional on the subtask being `SUBMITTED`. It was counted when it was
        /// submitted: nothing else changes. Answers [`RecordOutcome::Recorded`] with the record as
        /// written — also to a retry whose answer was lost (the stored status and result are
        /// `result`'s); [`RecordOutcome::AlreadyFinished`] with the record as it stands when it is
        /// not `SUBMITTED` (open, or finished otherwise).
        async fn settle_submitted(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            result: &SubtaskResult,
        ) -> Result<RecordOutcome, StoreError>
            as SettleSubmitted { subtask: subtask_id };

        /// [`SubtaskStore::settle_submitted`] for a subtask whose approvals were all decided
        /// ([`crate::decisions::decided_result`]): one write conditional on it being
        /// `AWAITING_APPROVAL`; answered alike (a retry whose answer was lost finds its own write).
        async fn settle_decided(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            result: &SubtaskResult,
        ) -> Result<RecordOutcome, StoreError>
            as SettleDecided { subtask: subtask_id };
    }

    /// Exactly-once accounting of finished subtasks on the conversation item (DESIGN.md invariant 1).
    pub trait AccountingStore {
        /// Exactly-once accounting: one conditional update of the conversation
        /// item adds `subtask_id` to the finished set, decrements `remaining` and
        /// adds `usage`, guarded by "id not yet in the set" and "id in the plan" (DESIGN.md
        /// invariant 1); an id outside the plan changes nothing ([`CountOutcome::AlreadyCounted`]).
        async fn count_finished(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            usage: &Usage,
        ) -> Result<CountOutcome, StoreError>
            as CountFinished { subtask: subtask_id };
    }

    /// A subtask's journal of side-effecting calls ([`crate::effects`]): the intent before
    /// dispatch, the outcome after.
    pub trait JournalStore {
        /// Appends `effect` (its intent, before dispatch) to the subtask's journal as entry
        /// `effect.ordinal - 1` — one conditional write, on the subtask being non-terminal, `holder`
        /// holding its lease and the journal holding exactly `ordinal - 1` entries.
        async fn record_intent(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            holder: &str,
            effect: &Effect,
        ) -> Result<IntentOutcome, StoreError>
            as RecordIntent { subtask: subtask_id };

        /// Applies `change` to journal entry `ordinal` unless it is already final (also on a terminal
        /// subtask: an outcome may land after the deadline closed it). Answers the stored entry after
        /// the call (`None`: no such subtask or entry).
        async fn record_effect_outcome(
            &self,
            id: &ConversationId,
            subtask_id: &SubtaskId,
            ordinal: u32,
            change: &EffectChange,
        ) -> Result<Option<Effect>, StoreError>
            as RecordEffectOutcome { subtask: subtask_id };
    }

    /// Approvals of side effects a person must consent to ([`crate::approval`]).
    pub trait ApprovalStore {
        /// Writes `approval` unless one with its id exists; answers the stored approval (the
        /// existing one when it did).
        async fn create_approval(&self, approval: &Approval) -> Result<Approval, StoreError>
            as CreateApproval { subtask: &approval.subtask_id };

        async fn get_approval(&self, approval_id: &str) -> Result<Option<Approval>, StoreError>
            as GetApproval;

        /// At most `limit` approvals, newest conversation first.
        async fn list_approvals(&self, limit: usize) -> Result<Vec<Approval>, StoreError>
            as ListApprovals;

        /// At most `limit` approvals listed after the approval `after` (its id; `None`: from the
        /// newest), newest conversation first: a page of [`ApprovalStore::list_approvals`]'s order.
        async fn list_approvals_after(&self, after: Option<&str>, limit: usize) -> Result<Vec<Approval>, StoreError>
            as ListApprovalsAfter;

        /// At most `limit` approvals whose stored status is `PENDING` (a pending one past its
        /// expiry included: [`Approval::status_at`] tells), listed after the approval `after` (its
        /// id; `None`: from the newest), in [`ApprovalStore::list_approvals`]'s order, however many
        /// decided approvals are newer: the operator's queue and the approvals-waiting gauges.
        async fn list_pending_approvals_after(
            &self,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<Approval>, StoreError>
            as ListPendingApprovalsAfter;

        /// Puts a pending approval written before the pending approvals' index existed into it
        /// (the sweep's backfill), conditional on it being `PENDING` and not yet indexed. Answers
        /// whether this call added it (`false`: already indexed, decided, missing, or a store whose
        /// listing needs no index). A retry after a lost answer finds it indexed: `false`, no harm.
        async fn index_pending_approval(&self, approval_id: &str) -> Result<bool, StoreError>
            as IndexPendingApproval;

        /// `PENDING → APPROVED | REJECTED` with who and when (and the token of an approval),
        /// conditional on it being pending and not expired at `decision.at_ms`; a pending approval
        /// past its expiry is marked `EXPIRED` instead.
        async fn decide_approval(
            &self,
            approval_id: &str,
            decision: &ApprovalDecision,
        ) -> Result<DecideOutcome, StoreError>
            as DecideApproval;

        /// `APPROVED → EXECUTED | EXPIRED` with what happened. Returns whether this call made the change.
        async fn finish_approval(
            &self,
            approval_id: &str,
            status: ApprovalStatus,
            outcome: &EffectOutcome,
            at_ms: i64,
        ) -> Result<bool, StoreError>
            as FinishApproval;

        /// Gives an approved call that has not run a fresh `token`, issued at `at_ms` (the sweep's
        /// re-issue, past the old token's window), conditional on it being `APPROVED`. Answers the
        /// approval after it, or `None` when it is not approved (executed, expired) or missing. A
        /// retry after a lost answer writes the same again: the condition still holds.
        async fn reissue_token(
            &self,
            approval_id: &str,
            token: &str,
            at_ms: i64,
        ) -> Result<Option<Approval>, StoreError>
            as ReissueToken;
    }

    /// The conversation's event log ([`crate::events`], DESIGN.md "Events"): read only here —
    /// every other role's write appends the events of its change in that same write.
    pub trait EventLog {
        /// The events of the conversation's current turn that `cursor` has not seen (all of
        /// them for a cursor of another turn), each source's in position order, with the status
        /// read alongside; strongly consistent. `None`: no such conversation.
        /// DynamoDB: one `Query` of the conversation's partition (every page).
        async fn events_after(&self, id: &ConversationId, cursor: &EventCursor) -> Result<Option<EventPage>, StoreError>
            as EventsAfter;
    }
}

/// The whole store, every role: what the adapters are and what a caller using them all holds.
///
/// Implemented for every type with every role (adapters, decorators); an `Arc<dyn ConversationStore>`
/// upcasts to the role a part of a function needs (`Arc<dyn SubtaskStore>`).
pub trait ConversationStore:
    ConversationRecords + AnswerStore + SubtaskStore + AccountingStore + JournalStore + ApprovalStore + EventLog
{
}

impl<T> ConversationStore for T where
    T: ConversationRecords
        + AnswerStore
        + SubtaskStore
        + AccountingStore
        + JournalStore
        + ApprovalStore
        + EventLog
        + ?Sized
{
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A store that refuses every call, naming it.
    struct Refusing;

    impl StoreDecorator for Refusing {
        // Never awaited: `around` answers without running the inner call.
        fn inner(&self) -> &dyn ConversationStore {
            self
        }

        async fn around<'a, T, F>(&'a self, call: Call<'a>, _run: F) -> Result<T, StoreError>
        where
            T: Send + 'static,
            F: Future<Output = Result<T, StoreError>> + Send + 'a,
        {
            Err(StoreError::Permanent(format!("{} refused", call.op.name())))
        }
    }

    /// Records each call's keyed arguments, then refuses it.
    struct Seeing {
        seen: Mutex<Vec<String>>,
        inner: Refusing,
    }

    impl StoreDecorator for Seeing {
        fn inner(&self) -> &dyn ConversationStore {
            &self.inner
        }

        fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> impl Future<Output = Result<T, StoreError>> + Send + 'a
        where
            T: Send + 'static,
            F: Future<Output = Result<T, StoreError>> + Send + 'a,
        {
            let line = format!(
                "{} {} {:?}",
                call.op.name(),
                call.subtask.map_or("-", SubtaskId::as_str),
                call.lease.map(|l| (l.holder, l.now_ms, l.until_ms))
            );
            self.seen.lock().unwrap().push(line);
            run
        }
    }

    #[tokio::test]
    async fn a_decorator_sees_each_call_by_name_with_its_keyed_arguments_and_passes_the_answer_on() {
        let store = Arc::new(Seeing { seen: Mutex::new(Vec::new()), inner: Refusing });
        let id = ConversationId::from_trusted("c1");
        let sid = SubtaskId::from("w02");
        let done = SubtaskResult::Skipped { dependency: SubtaskId::from("w01") };
        let as_subtasks: Arc<dyn SubtaskStore> = store.clone() as Arc<dyn ConversationStore>;
        let err = as_subtasks.record_result(&id, &sid, &done, &Usage::default(), &[], 5).await.unwrap_err();
        assert_eq!(err.to_string(), "store error: record_result refused");
        let err = store.acquire_lease(&id, LeasePhase::Planning, "h1", 10, 20).await.unwrap_err();
        assert_eq!(err.to_string(), "store error: acquire_lease refused");
        assert_eq!(*store.seen.lock().unwrap(), ["record_result w02 None", r#"acquire_lease - Some(("h1", 10, 20))"#]);
    }

    #[test]
    fn every_operation_has_its_own_name() {
        let names: HashSet<&str> = StoreOp::ALL.iter().map(|op| op.name()).collect();
        assert_eq!(names.len(), StoreOp::ALL.len());
        assert_eq!(StoreOp::ALL.len(), 39);
        assert_eq!(StoreOp::SettleSubmitted.name(), "settle_submitted");
        assert_eq!(StoreOp::CountFinished.name(), "count_finished");
    }
}
