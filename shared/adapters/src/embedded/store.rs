//! Embedded conversation store: DynamoDB's single-table semantics (conditional writes, a stream of new images) in memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::broadcast;

use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, SubtaskRecord, SubtaskResult, SubtaskStatus, Usage,
};
use swarm_core::ports::{AttemptStart, ConversationStore, CountOutcome, CreateOutcome, RecordOutcome, StoreError};

/// A change of an item, as a DynamoDB stream (`NEW_AND_OLD_IMAGES` of the new image) would carry it.
#[derive(Clone, Debug)]
pub enum ItemChange {
    /// The conversation item (`SK = META`) after an `INSERT` or `MODIFY`.
    Conversation(Conversation),
    /// A subtask item (`SK = TASK#…`) after a write.
    Subtask(SubtaskRecord),
}

#[derive(Default)]
struct Tables {
    conversations: HashMap<ConversationId, Conversation>,
    subtasks: HashMap<ConversationId, BTreeMap<String, SubtaskRecord>>,
    idempotency: HashMap<(String, String), ConversationId>,
}

/// In-memory [`ConversationStore`]. Each call takes one lock, so every
/// operation is atomic like a DynamoDB conditional write or transaction.
/// [`subscribe`](Self::subscribe) gives the conversation items' stream.
pub struct InMemoryConversationStore {
    tables: Mutex<Tables>,
    stream: broadcast::Sender<ItemChange>,
}

impl Default for InMemoryConversationStore {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryConversationStore {
    pub fn new() -> Self {
        let (stream, _) = broadcast::channel(4096);
        Self { tables: Mutex::new(Tables::default()), stream }
    }

    /// The stream of item changes (like a DynamoDB stream with `NEW_IMAGE`), in write order.
    pub fn subscribe(&self) -> broadcast::Receiver<ItemChange> {
        self.stream.subscribe()
    }

    /// Number of conversation items (for "bad input writes nothing" tests).
    pub fn conversation_count(&self) -> usize {
        self.lock().map(|t| t.conversations.len()).unwrap_or(0)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Tables>, StoreError> {
        self.tables.lock().map_err(|_| StoreError::Permanent("store lock poisoned".into()))
    }

    fn emit(&self, conv: &Conversation) {
        // No subscriber is fine: nobody listens to the stream in some tests.
        let _ = self.stream.send(ItemChange::Conversation(conv.clone()));
    }

    fn emit_subtask(&self, rec: &SubtaskRecord) {
        let _ = self.stream.send(ItemChange::Subtask(rec.clone()));
    }
}

#[async_trait]
impl ConversationStore for InMemoryConversationStore {
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        let mut t = self.lock()?;
        if let Some(key) = &conversation.idempotency_key {
            let k = (conversation.customer_id.clone(), key.clone());
            if let Some(existing) = t.idempotency.get(&k) {
                return Ok(CreateOutcome::Existing(existing.clone()));
            }
        }
        if t.conversations.contains_key(&conversation.id) {
            return Err(StoreError::Permanent(format!("conversation {} already exists", conversation.id)));
        }
        if let Some(key) = &conversation.idempotency_key {
            t.idempotency.insert((conversation.customer_id.clone(), key.clone()), conversation.id.clone());
        }
        t.conversations.insert(conversation.id.clone(), conversation.clone());
        self.emit(conversation);
        Ok(CreateOutcome::Created)
    }

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        Ok(self.lock()?.conversations.get(id).cloned())
    }

    async fn start_run(
        &self,
        id: &ConversationId,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status != ConversationStatus::Planning {
            return Ok(false);
        }
        conv.status = ConversationStatus::Running;
        conv.total = subtasks.len() as u32;
        conv.remaining = subtasks.len() as u32;
        conv.notes = notes.to_vec();
        conv.usage = conv.usage.add(usage);
        let snapshot = conv.clone();
        let map = t.subtasks.entry(id.clone()).or_default();
        for s in subtasks {
            map.insert(s.subtask.id.clone(), s.clone());
        }
        self.emit(&snapshot);
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
        let snapshot = conv.clone();
        self.emit(&snapshot);
        Ok(true)
    }

    async fn finish_conversation(&self, id: &ConversationId, reply: &str, usage: &Usage) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status != ConversationStatus::Aggregating {
            return Ok(false);
        }
        conv.status = ConversationStatus::Done;
        conv.reply = Some(reply.to_owned());
        conv.usage = conv.usage.add(usage);
        let snapshot = conv.clone();
        self.emit(&snapshot);
        Ok(true)
    }

    async fn fail_conversation(&self, id: &ConversationId, reason: &str) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(false) };
        if conv.status.is_terminal() {
            return Ok(false);
        }
        conv.status = ConversationStatus::Failed;
        conv.error = Some(reason.to_owned());
        let snapshot = conv.clone();
        self.emit(&snapshot);
        Ok(true)
    }

    async fn get_subtask(&self, id: &ConversationId, subtask_id: &str) -> Result<Option<SubtaskRecord>, StoreError> {
        Ok(self.lock()?.subtasks.get(id).and_then(|m| m.get(subtask_id)).cloned())
    }

    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        Ok(self.lock()?.subtasks.get(id).map(|m| m.values().cloned().collect()).unwrap_or_default())
    }

    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(false);
        };
        if !from.contains(&rec.status) {
            return Ok(false);
        }
        rec.status = to;
        let snapshot = rec.clone();
        self.emit_subtask(&snapshot);
        Ok(true)
    }

    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(AttemptStart::Missing);
        };
        if rec.status.is_terminal() {
            return Ok(AttemptStart::AlreadyFinished(rec.clone()));
        }
        rec.status = SubtaskStatus::Running;
        rec.attempts += 1;
        if rec.started_at_ms.is_none() {
            rec.started_at_ms = Some(now_ms);
        }
        let snapshot = rec.clone();
        self.emit_subtask(&snapshot);
        Ok(AttemptStart::Started(snapshot))
    }

    async fn save_checkpoint(&self, id: &ConversationId, subtask_id: &str, checkpoint: &str) -> Result<(), StoreError> {
        let mut t = self.lock()?;
        if let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id))
            && !rec.status.is_terminal()
        {
            rec.checkpoint = Some(checkpoint.to_owned());
        }
        Ok(())
    }

    async fn record_result(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        usage: &Usage,
        tools_used: &[String],
        now_ms: i64,
    ) -> Result<RecordOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(rec) = t.subtasks.get_mut(id).and_then(|m| m.get_mut(subtask_id)) else {
            return Ok(RecordOutcome::Missing);
        };
        if rec.status.is_terminal() {
            return Ok(RecordOutcome::AlreadyFinished(rec.clone()));
        }
        rec.status = result.status();
        rec.result = Some(result.clone());
        rec.usage = *usage;
        rec.tools_used = tools_used.to_vec();
        rec.finished_at_ms = Some(now_ms);
        rec.checkpoint = None;
        let snapshot = rec.clone();
        self.emit_subtask(&snapshot);
        Ok(RecordOutcome::Recorded)
    }

    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError> {
        let mut t = self.lock()?;
        let Some(conv) = t.conversations.get_mut(id) else { return Ok(CountOutcome::Missing) };
        if conv.finished.contains(subtask_id) {
            return Ok(CountOutcome::AlreadyCounted);
        }
        if conv.remaining == 0 {
            // DynamoDB guard `remaining > 0`: never go negative.
            return Ok(CountOutcome::AlreadyCounted);
        }
        conv.finished.insert(subtask_id.to_owned());
        conv.remaining -= 1;
        conv.usage = conv.usage.add(usage);
        let remaining = conv.remaining;
        let snapshot = conv.clone();
        self.emit(&snapshot);
        Ok(CountOutcome::Counted { remaining })
    }
}
