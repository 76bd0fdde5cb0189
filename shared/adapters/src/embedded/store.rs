//! Embedded conversation store: DynamoDB's single-table semantics (conditional writes, a lossless stream of new images) in memory — its tables and stream, and its conversation, answer and accounting roles (the subtask and journal roles in `subtasks`, approvals in `approvals`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::mpsc;

use swarm_core::approval::Approval;
use swarm_core::decisions::{Notice, TellOutcome, ToldTurn};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, Lease, NextTurn, SubtaskId, SubtaskRecord, TurnRecord,
    Usage,
};
use swarm_core::events::{Event, of};
use swarm_core::ports::{
    AccountingStore, AnswerStore, ConversationHistory, ConversationPage, ConversationPosition, ConversationRecords,
    CountOutcome, CreateOutcome, LeaseOutcome, LeasePhase, StoreError, TurnOutcome,
};

/// One write of one item, as a DynamoDB stream record (`NEW_IMAGE`) carries it.
#[derive(Clone, Debug)]
pub struct ItemChange {
    /// Position in the store's write order, from 1 (the record's `SequenceNumber`).
    pub sequence: u64,
    /// The write created the item (`INSERT`); otherwise it changed it (`MODIFY`).
    pub created: bool,
    /// The item after the write.
    pub item: ChangedItem,
}

/// The item a write left, by kind (the kinds of the DynamoDB table's items; their keys are its codec's).
#[derive(Clone, Debug)]
pub enum ChangedItem {
    /// The conversation item.
    Conversation(Conversation),
    /// A subtask item.
    Subtask(SubtaskRecord),
    /// The idempotency key's claim, written with its conversation.
    IdempotencyKey {
        customer_id: String,
        key: String,
        conversation_id: ConversationId,
        /// The claiming request's hash ([`swarm_core::domain::request_hash`]).
        request_hash: Option<String>,
        ttl: i64,
    },
    /// An approval item.
    Approval(Approval),
    /// A finished turn's archive (`TURN#<n>`), written when the next turn started.
    Turn(ConversationId, TurnRecord),
    /// A told turn's notice (`NOTICE#<key>`), written with that turn.
    Notice(ConversationId, Notice),
}

impl ItemChange {
    /// The conversation the item belongs to.
    pub fn conversation_id(&self) -> &ConversationId {
        match &self.item {
            ChangedItem::Conversation(c) => &c.id,
            ChangedItem::Subtask(r) => &r.conversation_id,
            ChangedItem::IdempotencyKey { conversation_id, .. } => conversation_id,
            ChangedItem::Approval(a) => &a.conversation_id,
            ChangedItem::Turn(id, _) | ChangedItem::Notice(id, _) => id,
        }
    }
}

/// The table's items, by kind, and its stream's readers.
#[derive(Default)]
pub(super) struct Tables {
    conversations: HashMap<ConversationId, Conversation>,
    pub(super) subtasks: HashMap<ConversationId, BTreeMap<SubtaskId, SubtaskRecord>>,
    /// Archived turns by conversation, oldest first.
    turns: HashMap<ConversationId, Vec<TurnRecord>>,
    /// Told turns' notices by conversation, by key.
    notices: HashMap<ConversationId, BTreeMap<String, Notice>>,
    /// (customer, key) → the conversation it created and the hash of the request that claimed it.
    idempotency: HashMap<(String, String), (ConversationId, Option<String>)>,
    /// Approvals by id (ids start with their conversation's UUIDv7: id order is creation order).
    pub(super) approvals: BTreeMap<String, Approval>,
    /// The event log: each source's events, in the order their writes were applied (`events`).
    pub(super) events: HashMap<ConversationId, BTreeMap<super::events::SourceKey, Vec<swarm_core::events::Stamped>>>,
    /// The stream's readers; each gets every change, in write order.
    subscribers: Vec<mpsc::UnboundedSender<ItemChange>>,
    last_sequence: u64,
}

impl Tables {
    /// The conversation item of `id`.
    pub(super) fn conversation(&self, id: &ConversationId) -> Option<&Conversation> {
        self.conversations.get(id)
    }

    /// Hands one write to every reader. Called with the lock held, so readers see writes in
    /// the order they were applied; a reader that went away is dropped.
    pub(super) fn emit(&mut self, created: bool, item: ChangedItem) {
        self.last_sequence += 1;
        let change = ItemChange { sequence: self.last_sequence, created, item };
        self.subscribers.retain(|s| s.send(change.clone()).is_ok());
    }
}

/// In-memory [`ConversationStore`](swarm_core::ports::ConversationStore). Each call takes one lock, so every
/// operation is atomic like a DynamoDB conditional write or transaction.
/// [`subscribe`](Self::subscribe) gives the table's stream.
pub struct InMemoryConversationStore {
    tables: Mutex<Tables>,
    /// Identity mappings and rate counters ([`swarm_core::access::AccessStore`], in `access.rs`).
    pub(super) access: Mutex<super::access::AccessTables>,
}

impl Default for InMemoryConversationStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryConversationStore {
    pub fn new() -> Self {
        Self { tables: Mutex::new(Tables::default()), access: Mutex::default() }
    }

    /// The table's stream from now on, like a DynamoDB stream with `NEW_IMAGE`: a record for
    /// every write of every item (conversation, subtasks, idempotency keys), in write order.
    /// Lossless: each reader has its own unbounded channel, so a slow reader delays nothing
    /// and misses nothing. A failed conditional write writes nothing and emits nothing.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<ItemChange> {
        let (tx, rx) = mpsc::unbounded_channel();
        match self.tables.lock() {
            Ok(mut t) => t.subscribers.push(tx),
            // A poisoned store serves no call; the reader sees the stream end.
            Err(_) => drop(tx),
        }
        rx
    }

    /// Number of conversation items (for "bad input writes nothing" tests).
    pub fn conversation_count(&self) -> usize {
        self.lock().map(|t| t.conversations.len()).unwrap_or(0)
    }

    pub(super) fn lock(&self) -> Result<std::sync::MutexGuard<'_, Tables>, StoreError> {
        self.tables.lock().map_err(|_| StoreError::Permanent("store lock poisoned".into()))
    }
}

#[async_trait]
impl ConversationRecords for InMemoryConversationStore {
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        let mut t = self.lock()?;
        if let Some(key) = &conversation.idempotency_key {
            let k = (conversation.customer_id.clone(), key.clone());
            if let Some((existing, claimed_by)) = t.idempotency.get(&k) {
                if existing == &conversation.id
                    && t.conversations.get(existing).is_some_and(|c| c.is_created_by(conversation))
                {
                    // This call's own write, asked again after its answer was lost.
                    return Ok(CreateOutcome::Created);
                }
                // As the DynamoDB store: a claim without a hash (older) matches any request.
                return Ok(match (claimed_by, &conversation.request_hash) {
                    (Some(a), Some(b)) if a != b => CreateOutcome::KeyReused(existing.clone()),
                    _ => CreateOutcome::Existing(existing.clone()),
                });
            }
        }
        if let Some(stored) = t.conversations.get(&conversation.id) {
            if stored.is_created_by(conversation) {
                return Ok(CreateOutcome::Created);
            }
            return Err(StoreError::Permanent(format!("conversation {} already exists", conversation.id)));
        }
        if let Some(key) = &conversation.idempotency_key {
            t.idempotency.insert(
                (conversation.customer_id.clone(), key.clone()),
                (conversation.id.clone(), conversation.request_hash.clone()),
            );
            t.emit(
                true,
                ChangedItem::IdempotencyKey {
                    customer_id: conversation.customer_id.clone(),
                    key: key.clone(),
                    conversation_id: conversation.id.clone(),
                    request_hash: conversation.request_hash.clone(),
                    ttl: conversation.ttl,
                },
            );
        }
        t.conversations.insert(conversation.id.clone(), conversation.clone());
        t.emit(true, ChangedItem::Conversation(conversation.clone()));
        Ok(CreateOutcome::Created)
    }

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        Ok(self.lock()?.conversations.get(id).cloned())
    }

    async fn start_run(
        &self,
        id: &ConversationId,
        planner: Option<&str>,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        let plan: std::collections::BTreeSet<String> = subtasks.iter().map(|s| s.subtask.id.to_string()).collect();
        let holds = |conv: &Conversation| planner.is_none_or(|p| conv.lease.as_ref().is_some_and(|l| l.holder == p));
        if conv.status != ConversationStatus::Planning {
            // This planner's own flip, made before (as DynamoDB's retried write finds it).
            let own =
                planner.is_some() && conv.status == ConversationStatus::Running && holds(conv) && conv.plan == plan;
            return Ok(own);
        }
        if !holds(conv) {
            return Ok(false);
        }
        conv.status = ConversationStatus::Running;
        conv.total = subtasks.len() as u32;
        conv.remaining = subtasks.len() as u32;
        conv.plan = plan;
        conv.notes = notes.to_vec();
        conv.usage = conv.usage.add(usage);
        let snapshot = conv.clone();
        let map = t.subtasks.entry(id.clone()).or_default();
        // Written atomically, so no other plan's items exist here; kept as DynamoDB's takeover leaves it
        // (earlier turns' items stay: they are those turns' record).
        map.retain(|sid, _| sid.turn() != snapshot.turn || snapshot.plan.contains(sid.as_str()));
        for s in subtasks {
            map.insert(s.subtask.id.clone(), s.clone());
        }
        // As the DynamoDB store writes them: the subtask items, then the conversation's flip.
        for s in subtasks {
            t.emit(true, ChangedItem::Subtask(s.clone()));
        }
        t.log_turn(id, of::planned(snapshot.turn));
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn mark_queued(&self, id: &ConversationId, turn: u32, at_ms: i64) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.turn != turn {
            return Ok(false);
        }
        if conv.queued_at_ms.is_some() {
            return Ok(true);
        }
        conv.queued_at_ms = Some(at_ms);
        let snapshot = conv.clone();
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn transition_conversation(
        &self,
        id: &ConversationId,
        from: ConversationStatus,
        to: ConversationStatus,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status != from {
            return Ok(false);
        }
        conv.status = to;
        if to.is_terminal() {
            conv.sweep_shard = None;
        }
        let snapshot = conv.clone();
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn fail_conversation(&self, id: &ConversationId, turn: u32, reason: &str) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.turn != turn || conv.status.is_terminal() {
            // As DynamoDB's retried write finds it: this flip, made before, is answered as made.
            return Ok(conv.is_failed_on(turn, reason));
        }
        conv.status = ConversationStatus::Failed;
        conv.error = Some(reason.to_owned());
        conv.sweep_shard = None;
        let snapshot = conv.clone();
        t.log_turn(id, vec![Event::TurnFailed { turn, reason: reason.to_owned() }]);
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn overdue_conversations(
        &self,
        shard: u32,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ConversationId>, StoreError> {
        let t = self.lock()?;
        let mut due: Vec<(i64, &ConversationId)> = t
            .conversations
            .values()
            .filter(|c| c.sweep_shard == Some(shard) && c.deadline_ms < now_ms)
            .map(|c| (c.deadline_ms, &c.id))
            .collect();
        due.sort();
        Ok(due.into_iter().take(limit).map(|(_, id)| id.clone()).collect())
    }

    async fn start_turn(
        &self,
        previous: &Conversation,
        next: &NextTurn,
        now_ms: i64,
    ) -> Result<TurnOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get(&previous.id) else { return Ok(TurnOutcome::Refused(None)) };
        if conv.is_turn_started_by(next) {
            // This call's own start, asked again after its answer was lost.
            return Ok(TurnOutcome::Started(conv.clone()));
        }
        let on_turn = conv.turn.checked_add(1) == Some(next.turn) && conv.turn == previous.turn;
        let live = conv.expires_at_ms.is_none_or(|at| now_ms < at);
        if !on_turn || conv.status != previous.status || !conv.status.is_terminal() || !live {
            return Ok(TurnOutcome::Refused(Some(conv.clone())));
        }
        // As DynamoDB's transaction: the archive of the stored turn and the new conversation item, together.
        let archived = TurnRecord::of(conv);
        let started = conv.next_turn(next);
        t.turns.entry(previous.id.clone()).or_default().push(archived.clone());
        t.conversations.insert(previous.id.clone(), started.clone());
        t.emit(true, ChangedItem::Turn(previous.id.clone(), archived));
        t.emit(false, ChangedItem::Conversation(started.clone()));
        Ok(TurnOutcome::Started(started))
    }

    async fn tell_turn(&self, previous: &Conversation, told: &ToldTurn) -> Result<TellOutcome, StoreError> {
        let mut t = self.lock()?;
        if let Some(notice) = t.notices.get(&previous.id).and_then(|m| m.get(&told.key)) {
            return Ok(TellOutcome::AlreadyTold(notice.clone()));
        }
        let Some(conv) = t.conversations.get(&previous.id) else { return Ok(TellOutcome::Refused(None)) };
        if conv.turn != previous.turn || conv.status != previous.status || !conv.status.is_terminal() {
            return Ok(TellOutcome::Refused(Some(conv.clone())));
        }
        // As DynamoDB's transaction: the notice, the archive of the stored turn and the told turn, together.
        let archived = TurnRecord::of(conv);
        let notice = conv.notice_of(told);
        let after = conv.told_turn(told);
        t.notices.entry(previous.id.clone()).or_default().insert(told.key.clone(), notice.clone());
        t.turns.entry(previous.id.clone()).or_default().push(archived.clone());
        t.conversations.insert(previous.id.clone(), after.clone());
        t.log_turn(&previous.id, of::answered(after.turn, after.status));
        t.emit(true, ChangedItem::Notice(previous.id.clone(), notice));
        t.emit(true, ChangedItem::Turn(previous.id.clone(), archived));
        t.emit(false, ChangedItem::Conversation(after.clone()));
        Ok(TellOutcome::Told(after))
    }

    async fn conversation_history(&self, id: &ConversationId) -> Result<ConversationHistory, StoreError> {
        let t = self.lock()?;
        Ok(ConversationHistory {
            turns: t.turns.get(id).cloned().unwrap_or_default(),
            subtasks: t.subtasks.get(id).map(|m| m.values().cloned().collect()).unwrap_or_default(),
            notices: t.notices.get(id).map(|m| m.values().cloned().collect()).unwrap_or_default(),
        })
    }

    async fn list_customer_conversations(
        &self,
        customer_id: &str,
        after: Option<&ConversationPosition>,
        limit: usize,
    ) -> Result<ConversationPage, StoreError> {
        let t = self.lock()?;
        let mut mine: Vec<&Conversation> = t.conversations.values().filter(|c| c.customer_id == customer_id).collect();
        let place = |c: &Conversation| (c.created_at_ms, c.id.as_str().to_owned());
        mine.sort_by_key(|c| std::cmp::Reverse(place(c)));
        let start = after.map_or(0, |p| {
            let p = (p.created_at_ms, p.id.as_str().to_owned());
            mine.iter().position(|c| place(c) < p).unwrap_or(mine.len())
        });
        let page: Vec<Conversation> = mine[start..].iter().take(limit.clamp(1, 100)).map(|c| (*c).clone()).collect();
        let more = mine.len() > start + page.len();
        let next = if more { page.last().map(ConversationPosition::of) } else { None };
        Ok(ConversationPage { conversations: page, next })
    }
}

#[async_trait]
impl AnswerStore for InMemoryConversationStore {
    async fn acquire_lease(
        &self,
        id: &ConversationId,
        phase: LeasePhase,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<LeaseOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(LeaseOutcome::Missing) };
        // Expired, or the caller's own (a renewal, or a retry of a write whose answer was lost).
        let own = conv.lease.as_ref().is_some_and(|l| l.holder == holder);
        let expired = own || conv.lease.as_ref().is_none_or(|l| l.until_ms < now_ms);
        let (in_phase, turn) = match phase {
            // Its own holder may end the planning lease after the flip to RUNNING too (a failed enqueue).
            LeasePhase::Planning => (
                conv.status == ConversationStatus::Planning || (conv.status == ConversationStatus::Running && own),
                conv.turn,
            ),
            LeasePhase::Aggregating { turn } => {
                let ready = match conv.status {
                    ConversationStatus::Running => conv.remaining == 0,
                    ConversationStatus::Aggregating => true,
                    _ => false,
                };
                (ready && conv.turn == turn, turn)
            }
        };
        if !in_phase {
            return Ok(LeaseOutcome::NotInPhase { status: conv.status, remaining: conv.remaining });
        }
        // A RUNNING conversation's lease (its planning one) does not hold back its aggregation.
        let fresh = conv.status == ConversationStatus::Running;
        if !fresh && !expired {
            return Ok(LeaseOutcome::Held(conv.lease.clone().unwrap_or_else(|| Lease {
                holder: String::new(),
                until_ms: 0,
                turn,
            })));
        }
        let taken_over = if fresh || own { None } else { conv.lease.clone() };
        if matches!(phase, LeasePhase::Aggregating { .. }) {
            conv.status = ConversationStatus::Aggregating;
        }
        conv.lease = Some(Lease { holder: holder.to_owned(), until_ms, turn });
        let snapshot = conv.clone();
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(LeaseOutcome::Acquired { taken_over })
    }

    async fn finish_conversation(
        &self,
        id: &ConversationId,
        turn: u32,
        reply: &str,
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status != ConversationStatus::Aggregating || conv.turn != turn {
            return Ok(false);
        }
        conv.status = ConversationStatus::Done;
        conv.reply = Some(reply.to_owned());
        conv.usage = conv.usage.add(usage);
        conv.sweep_shard = None;
        let snapshot = conv.clone();
        t.log_turn(id, of::answered(turn, ConversationStatus::Done));
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn request_handoff(&self, id: &ConversationId, handoff: &Handoff) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status.is_terminal() {
            return Ok(false);
        }
        conv.handoff = Some(*handoff);
        let snapshot = conv.clone();
        t.log_turn(id, vec![Event::HandoffRequested { reason: handoff.reason }]);
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }

    async fn hand_off(
        &self,
        id: &ConversationId,
        turn: u32,
        reply: &str,
        usage: &Usage,
        handoff: &Handoff,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status != ConversationStatus::Aggregating || conv.turn != turn {
            return Ok(false);
        }
        conv.status = ConversationStatus::Handoff;
        conv.reply = Some(reply.to_owned());
        conv.usage = conv.usage.add(usage);
        conv.handoff = Some(*handoff);
        conv.sweep_shard = None;
        let snapshot = conv.clone();
        t.log_turn(id, of::answered(turn, ConversationStatus::Handoff));
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(true)
    }
}

#[async_trait]
impl AccountingStore for InMemoryConversationStore {
    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(CountOutcome::Missing) };
        if conv.finished.contains(subtask_id.as_str()) {
            return Ok(CountOutcome::AlreadyCounted);
        }
        if !conv.plan.is_empty() && !conv.plan.contains(subtask_id.as_str()) {
            // Not a subtask of the plan (a planner taken over wrote it): it never counts.
            return Ok(CountOutcome::AlreadyCounted);
        }
        if conv.remaining == 0 {
            // DynamoDB guard `remaining > 0`: never go negative.
            return Ok(CountOutcome::AlreadyCounted);
        }
        conv.finished.insert(subtask_id.to_string());
        conv.remaining -= 1;
        conv.usage = conv.usage.add(usage);
        let remaining = conv.remaining;
        let snapshot = conv.clone();
        t.emit(false, ChangedItem::Conversation(snapshot));
        Ok(CountOutcome::Counted { remaining })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_core::domain::{Subtask, SubtaskResult};
    use swarm_core::effects::AttemptLease;
    use swarm_core::ports::SubtaskStore;

    use super::*;

    fn subtask(c: &Conversation, id: &str) -> SubtaskRecord {
        SubtaskRecord::new(
            c,
            Subtask { id: id.into(), instruction: id.into(), tools: vec![], depends_on: vec![] },
            "support".into(),
        )
    }

    fn kind(change: &ItemChange) -> String {
        let what = match &change.item {
            ChangedItem::Conversation(c) => format!("META {} {}", c.status.as_str(), c.remaining),
            ChangedItem::Subtask(r) => format!("TASK#{} {}", r.subtask.id, r.status.as_str()),
            ChangedItem::IdempotencyKey { key, .. } => format!("IDEM {key}"),
            ChangedItem::Approval(a) => format!("APPROVAL {}", a.id),
            ChangedItem::Turn(_, turn) => format!("TURN#{}", turn.turn),
            ChangedItem::Notice(_, notice) => format!("NOTICE#{}", notice.key),
        };
        format!("{} {what}", if change.created { "INSERT" } else { "MODIFY" })
    }

    #[tokio::test]
    async fn every_write_of_every_item_is_on_the_stream_in_order_and_a_failed_condition_writes_none() {
        let store = InMemoryConversationStore::new();
        let mut stream = store.subscribe();
        let mut c = Conversation::new("C1", "q", 0, 120);
        c.idempotency_key = Some("k1".into());
        store.create_conversation(&c).await.unwrap();
        let subtasks = [subtask(&c, "w01"), subtask(&c, "w02")];
        store.start_run(&c.id, None, &subtasks, &[], &Usage::default()).await.unwrap();
        store.begin_attempt(&c.id, &"w01".into(), &AttemptLease::new(1_000), 1).await.unwrap();
        store.save_checkpoint(&c.id, &"w01".into(), "{}").await.unwrap();
        let result = SubtaskResult::Succeeded { text: "ok".into(), tool_calls: vec![] };
        store.record_result(&c.id, &"w01".into(), &result, &Usage::default(), &[], 2).await.unwrap();
        store.count_finished(&c.id, &"w01".into(), &Usage::default()).await.unwrap();
        // Failed conditions: nothing written, nothing on the stream.
        assert_eq!(
            store.count_finished(&c.id, &"w01".into(), &Usage::default()).await.unwrap(),
            CountOutcome::AlreadyCounted
        );
        assert!(
            !store
                .transition_conversation(&c.id, ConversationStatus::Planning, ConversationStatus::Failed)
                .await
                .unwrap()
        );
        // Another request with the key (the same request again is its own write: Created, nothing written).
        let mut again = Conversation::new("C1", "q", 0, 120);
        again.idempotency_key = Some("k1".into());
        assert!(matches!(store.create_conversation(&again).await.unwrap(), CreateOutcome::Existing(_)));
        assert_eq!(store.create_conversation(&c).await.unwrap(), CreateOutcome::Created);

        let mut seen = Vec::new();
        while let Ok(change) = stream.try_recv() {
            seen.push(change);
        }
        let sequences: Vec<u64> = seen.iter().map(|c| c.sequence).collect();
        assert_eq!(sequences, (1..=9).collect::<Vec<_>>());
        assert!(seen.iter().all(|ch| ch.conversation_id() == &c.id));
        let kinds: Vec<String> = seen.iter().map(kind).collect();
        assert_eq!(
            kinds,
            [
                "INSERT IDEM k1",
                "INSERT META PLANNING 0",
                "INSERT TASK#w01 QUEUED",
                "INSERT TASK#w02 QUEUED",
                "MODIFY META RUNNING 2",
                "MODIFY TASK#w01 RUNNING",
                "MODIFY TASK#w01 RUNNING",
                "MODIFY TASK#w01 SUCCEEDED",
                "MODIFY META RUNNING 1",
            ]
        );
    }

    #[tokio::test]
    async fn a_reader_that_falls_far_behind_misses_nothing() {
        let store = InMemoryConversationStore::new();
        let mut slow = store.subscribe();
        let c = Conversation::new("C1", "q", 0, 120);
        store.create_conversation(&c).await.unwrap();
        let many: Vec<SubtaskRecord> = (0..100).map(|i| subtask(&c, &format!("w{i:03}"))).collect();
        store.start_run(&c.id, None, &many, &[], &Usage::default()).await.unwrap();
        for round in 0..50 {
            for r in &many {
                store.save_checkpoint(&c.id, &r.subtask.id, &format!("{round}")).await.unwrap();
            }
        }
        let mut n = 0;
        while slow.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, 1 + 100 + 1 + 50 * 100, "a broadcast channel would have dropped most of these");
    }
}
