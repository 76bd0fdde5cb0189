//! The event log of [`DynamoConversationStore`] (DESIGN.md "Events"): each write appends its events to the `ev` list of the item it changes, in that same `UpdateItem` (or `Put`), and the reader Queries the conversation's partition.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use swarm_core::domain::Subtask;
use swarm_core::domain::{ConversationId, ConversationStatus};
use swarm_core::events::{CONVERSATION_SOURCE, Event, EventCursor, EventPage, ReadAlong, Stamped, fill, unseen};
use swarm_core::ports::{EventLog, StoreError};

use super::codec::{Item, ItemKey, s};
use super::store::DynamoConversationStore;
use super::turns::key_of;
use super::update::Update;

/// The list attribute holding an item's events, one JSON string each ([`Stamped`]), in commit order.
pub(super) const EVENTS_ATTR: &str = "ev";

/// `events`, stamped `at_ms`, as the list value appended.
pub(super) fn events_value(at_ms: i64, events: Vec<Event>) -> AttributeValue {
    AttributeValue::L(events.into_iter().map(|event| s(Stamped { at_ms, event }.to_json())).collect())
}

/// Appends `events` to the item's log in the update `u`: `ev = list_append(if_not_exists(ev, []), :evnew)`,
/// so the events commit (or not) with the change the same update makes.
pub(super) fn append_events(u: &mut Update, at_ms: i64, events: Vec<Event>) {
    let ev = u.name(EVENTS_ATTR);
    let empty = u.value("evempty", AttributeValue::L(Vec::new()));
    let new = u.value("evnew", events_value(at_ms, events));
    u.set_expr(format!("{ev} = list_append(if_not_exists({ev}, {empty}), {new})"));
}

/// The events of one item as stored; an entry this version cannot read is skipped but keeps its
/// position (the list index), so a cursor stays valid across versions.
fn stored(item: &Item) -> Vec<Option<Stamped>> {
    match item.get(EVENTS_ATTR) {
        Some(AttributeValue::L(list)) => {
            list.iter().map(|v| v.as_s().ok().and_then(|text| Stamped::from_json(text))).collect()
        }
        _ => Vec::new(),
    }
}

fn number(item: &Item, attr: &str) -> Option<i64> {
    item.get(attr).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

#[async_trait]
impl EventLog for DynamoConversationStore {
    async fn events_after(&self, id: &ConversationId, cursor: &EventCursor) -> Result<Option<EventPage>, StoreError> {
        // Only the attributes read (RCUs are charged on whole items all the same: DESIGN.md "Events").
        let names = [
            ("#turn", "turn"),
            ("#status", "status"),
            ("#reply", "reply"),
            ("#plan", "plan"),
            ("#subtask", "subtask"),
            ("#ev", EVENTS_ATTR),
        ];
        let projection = "PK, SK, #turn, #status, #reply, #plan, #subtask, #ev, started_at_ms";
        let items = self.partition_items(id, Some((projection, &names))).await?;
        page_of(id, cursor, items)
    }
}

/// The current turn's unseen events among the partition's `items`.
fn page_of(id: &ConversationId, cursor: &EventCursor, items: Vec<Item>) -> Result<Option<EventPage>, StoreError> {
    let Some(conversation) = items.iter().find(|i| matches!(key_of(i), Some(ItemKey::Conversation(_)))) else {
        return Ok(None);
    };
    let turn = number(conversation, "turn").unwrap_or(0) as u32;
    let status = conversation
        .get("status")
        .and_then(|v| v.as_s().ok())
        .and_then(|st| ConversationStatus::parse(st))
        .ok_or_else(|| StoreError::Permanent(format!("conversation {id} has no readable status")))?;
    let reply = conversation.get("reply").and_then(|v| v.as_s().ok()).cloned();
    let in_plan: Option<&Vec<String>> = conversation.get("plan").and_then(|v| v.as_ss().ok());
    let mut plan: Vec<Subtask> = Vec::new();
    let mut started: HashMap<String, Option<i64>> = HashMap::new();
    let mut sources: Vec<(String, Vec<Option<Stamped>>)> = Vec::new();
    for item in &items {
        let name = match key_of(item) {
            Some(ItemKey::Conversation(_)) => CONVERSATION_SOURCE.to_owned(),
            Some(ItemKey::Subtask(_, sid)) if sid.turn() == turn => {
                started.insert(sid.to_string(), number(item, "started_at_ms"));
                // Items of a planner taken over are not the plan's (see `start_run`).
                if in_plan.is_none_or(|p| p.iter().any(|x| x == sid.as_str()))
                    && let Some(subtask) = item.get("subtask").and_then(|v| v.as_s().ok())
                {
                    let subtask: Subtask = serde_json::from_str(subtask)
                        .map_err(|e| StoreError::Permanent(format!("subtask {sid} of {id} is not readable: {e}")))?;
                    plan.push(subtask);
                }
                sid.to_string()
            }
            _ => continue,
        };
        sources.push((name, stored(item)));
    }
    // Query order is sort-key order: the plan in id order, as `list_subtasks` holds it.
    let mut events = unseen(turn, cursor, sources);
    for e in &mut events {
        let started_at_ms = started.get(&e.source).copied().flatten();
        fill(e, ReadAlong { started_at_ms, reply: reply.as_deref(), plan: &plan });
    }
    Ok(Some(EventPage { turn, status, events }))
}
