//! The event log of [`InMemoryConversationStore`]: each write appends its events under the same lock as its change (as DynamoDB's same `UpdateItem`), and the reader of a conversation's current turn.

use async_trait::async_trait;
use swarm_core::domain::Subtask;
use swarm_core::domain::{ConversationId, SubtaskId};
use swarm_core::events::{CONVERSATION_SOURCE, Event, EventCursor, EventPage, ReadAlong, Stamped, fill, unseen};
use swarm_core::ports::{EventLog, StoreError};

use super::store::{InMemoryConversationStore, Tables};

/// Where a source's list is kept: the conversation item's per turn (DynamoDB's conversation item
/// starts each turn with none), a subtask's by its id (which names its turn).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SourceKey {
    Conversation { turn: u32 },
    Subtask(SubtaskId),
}

impl Tables {
    /// Appends `events`, stamped `at_ms`, to `source`'s list: called in the write that makes
    /// their change, under its lock.
    pub(super) fn log(&mut self, id: &ConversationId, source: SourceKey, at_ms: i64, events: Vec<Event>) {
        let list = self.events.entry(id.clone()).or_default().entry(source).or_default();
        list.extend(events.into_iter().map(|event| Stamped { at_ms, event }));
    }

    /// Appends the conversation item's `events` for its current turn (a missing conversation logs nothing).
    pub(super) fn log_turn(&mut self, id: &ConversationId, events: Vec<Event>) {
        if let Some(turn) = self.conversation(id).map(|c| c.turn) {
            self.log(id, SourceKey::Conversation { turn }, swarm_core::time::now_ms(), events);
        }
    }

    /// Appends a subtask item's `events`.
    pub(super) fn log_subtask(&mut self, id: &ConversationId, subtask: &SubtaskId, at_ms: i64, events: Vec<Event>) {
        self.log(id, SourceKey::Subtask(subtask.clone()), at_ms, events);
    }
}

#[async_trait]
impl EventLog for InMemoryConversationStore {
    async fn events_after(&self, id: &ConversationId, cursor: &EventCursor) -> Result<Option<EventPage>, StoreError> {
        let t = self.lock()?;
        let Some(conv) = t.conversation(id) else { return Ok(None) };
        let turn = conv.turn;
        let subtasks = t.subtasks.get(id);
        let mut started = std::collections::HashMap::new();
        let mut sources = Vec::new();
        for (key, list) in t.events.get(id).into_iter().flatten() {
            let name = match key {
                SourceKey::Conversation { turn: of } if *of == turn => CONVERSATION_SOURCE.to_owned(),
                SourceKey::Subtask(sid) if sid.turn() == turn => {
                    let first = subtasks.and_then(|m| m.get(sid)).and_then(|r| r.started_at_ms);
                    started.insert(sid.to_string(), first);
                    sid.to_string()
                }
                _ => continue,
            };
            sources.push((name, list.iter().cloned().map(Some).collect()));
        }
        // The plan's subtasks (of a planner taken over, none), in id order, as `list_subtasks` holds them.
        let plan: Vec<Subtask> = subtasks
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|r| {
                r.subtask.id.turn() == turn && (conv.plan.is_empty() || conv.plan.contains(r.subtask.id.as_str()))
            })
            .map(|r| r.subtask.clone())
            .collect();
        let mut events = unseen(turn, cursor, sources);
        for e in &mut events {
            let started_at_ms = started.get(&e.source).copied().flatten();
            fill(e, ReadAlong { started_at_ms, reply: conv.reply.as_deref(), plan: &plan });
        }
        Ok(Some(EventPage { turn, status: conv.status, events }))
    }
}
