//! The conversation's event log (DESIGN.md "Events"): typed events each store write appends to the item it changes, the reader's per-source cursor, and the `GET /conversations/{id}/events` stream's frames.
//!
//! An event is appended **in the same conditional write** as the change it records, to the
//! list of that very item (the conversation item for the turn's events, a subtask item for
//! its own): a write refused writes no event, and no crash can separate an event from its
//! change. Each item is an event *source*; an event's position is its index in its source's
//! list (dense, from 0, fixed at commit). A reader's [`EventCursor`] holds, for the turn it
//! reads, how many events of each source it has emitted: a resumed reader emits exactly the
//! events at or after those counts, so an event committed late (a slow writer on another
//! source) is never skipped and none is sent twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::{ConversationStatus, HandoffReason, Subtask, SubtaskId, SubtaskResult, SubtaskStatus, Usage};
use crate::effects::Effect;

/// The source name of the conversation item's events (a subtask's source is its id, e.g. `t2.w01`).
pub const CONVERSATION_SOURCE: &str = "c";

/// Longest `Last-Event-ID` accepted, in bytes (a cursor of a 100-subtask turn is about 1.5 KB).
pub const MAX_CURSOR_BYTES: usize = 16 * 1024;

/// One subtask of a planned turn, as [`Event::TurnPlanned`] lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSubtask {
    pub id: SubtaskId,
    /// The subtask's instruction: the customer's own data, shown only to the conversation's owner.
    pub instruction: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<SubtaskId>,
}

/// One change of a conversation, as its log keeps it. Serialized with a `kind` tag
/// (`{"kind":"subtask_started","subtask":"t1~w01"}`), which is also the SSE `event:` name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The planner's flip to `RUNNING`: the turn's subtasks. `subtasks` is filled by the reader
    /// from the plan's subtask items (the conversation item, rewritten by every count, keeps the
    /// event small).
    TurnPlanned {
        turn: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        subtasks: Vec<PlannedSubtask>,
    },
    /// An attempt of the subtask began (one per attempt: a redelivery's attempt is another).
    SubtaskStarted { subtask: SubtaskId },
    /// A side-effecting tool call's journal entry: its intent before dispatch (`status`
    /// `intent`), then each state it reaches (`done`, `awaiting_approval`, `rejected`,
    /// `expired`). Never its arguments.
    ToolCalled { subtask: SubtaskId, tool: String, ordinal: u32, status: String },
    /// The subtask reached a terminal status (or `SUBMITTED`/`AWAITING_APPROVAL`, which count as
    /// finished). `duration_ms` is filled by the reader from the item's first start;
    /// `tokens` is prompt + completion, when the finishing write carried usage.
    SubtaskFinished {
        subtask: SubtaskId,
        status: SubtaskStatus,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<i64>,
    },
    /// The subtask waits for a person: the approvals it asked for.
    ApprovalAsked { subtask: SubtaskId, approvals: Vec<String> },
    /// Every approval of the subtask was decided and the subtask took the decision in.
    ApprovalDecided { subtask: SubtaskId, status: SubtaskStatus },
    /// The conversation goes to a person when its turn ends.
    HandoffRequested { reason: HandoffReason },
    /// The turn's reply was written. `reply` is filled by the reader from the conversation item
    /// (the log does not hold the reply twice).
    ReplyWritten {
        turn: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reply: Option<String>,
    },
    /// The turn ended with a reply (`DONE`, `HANDOFF`).
    TurnDone { turn: u32, status: ConversationStatus },
    /// The turn failed; `reason` is the operator's words the conversation's `error` shows.
    TurnFailed { turn: u32, reason: String },
}

impl Event {
    /// The kind, as the `kind` tag and the SSE `event:` name spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TurnPlanned { .. } => "turn_planned",
            Self::SubtaskStarted { .. } => "subtask_started",
            Self::ToolCalled { .. } => "tool_called",
            Self::SubtaskFinished { .. } => "subtask_finished",
            Self::ApprovalAsked { .. } => "approval_asked",
            Self::ApprovalDecided { .. } => "approval_decided",
            Self::HandoffRequested { .. } => "handoff_requested",
            Self::ReplyWritten { .. } => "reply_written",
            Self::TurnDone { .. } => "turn_done",
            Self::TurnFailed { .. } => "turn_failed",
        }
    }
}

/// The events a store's write appends, by the change it makes: one place, so both stores log alike.
pub mod of {
    use super::{ConversationStatus, Effect, Event, SubtaskId, SubtaskResult, SubtaskStatus, Usage};

    /// The flip to `RUNNING` of `turn` (its subtasks are filled in when read: [`super::fill`]).
    pub fn planned(turn: u32) -> Vec<Event> {
        vec![Event::TurnPlanned { turn, subtasks: Vec::new() }]
    }

    /// A subtask's write of `result` (`usage`: when the write carries it; `decided`: the write
    /// takes its approvals' decisions in).
    pub fn finished(
        subtask: &SubtaskId,
        result: &SubtaskResult,
        usage: Option<&Usage>,
        tools: &[String],
        decided: bool,
    ) -> Vec<Event> {
        let status = result.status();
        let mut out = Vec::new();
        if decided {
            out.push(Event::ApprovalDecided { subtask: subtask.clone(), status });
        }
        out.push(Event::SubtaskFinished {
            subtask: subtask.clone(),
            status,
            tools: tools.to_vec(),
            tokens: usage.filter(|u| !u.is_empty()).map(Usage::total_tokens),
            duration_ms: None,
        });
        if let SubtaskResult::AwaitingApproval { approvals } = result {
            let approvals = approvals.iter().map(|a| a.approval_id.clone()).collect();
            out.push(Event::ApprovalAsked { subtask: subtask.clone(), approvals });
        }
        out
    }

    /// A journal entry written as `effect` (its intent, or a state it reached).
    pub fn tool(subtask: &SubtaskId, effect: &Effect) -> Vec<Event> {
        vec![Event::ToolCalled {
            subtask: subtask.clone(),
            tool: effect.tool.clone(),
            ordinal: effect.ordinal,
            status: effect.state.code().to_owned(),
        }]
    }

    /// A subtask flipped to terminal `status` with nothing else written (a skip).
    pub fn closed(subtask: &SubtaskId, status: SubtaskStatus) -> Vec<Event> {
        vec![Event::SubtaskFinished {
            subtask: subtask.clone(),
            status,
            tools: vec![],
            tokens: None,
            duration_ms: None,
        }]
    }

    /// The turn's end with a reply, in `status` (`DONE`, `HANDOFF`).
    pub fn answered(turn: u32, status: ConversationStatus) -> Vec<Event> {
        vec![Event::ReplyWritten { turn, reply: None }, Event::TurnDone { turn, status }]
    }
}

/// An event as stored in its source's list: the event and when it was written (epoch ms).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stamped {
    pub at_ms: i64,
    #[serde(flatten)]
    pub event: Event,
}

impl Stamped {
    /// The stored form: one JSON object per entry.
    pub fn to_json(&self) -> String {
        // An enum of plain fields always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a stored entry; `None` for one this version does not know (a newer kind).
    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// An event as a reader gets it: where it is in the log and what it says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoggedEvent {
    /// [`CONVERSATION_SOURCE`] or the subtask's id.
    pub source: String,
    /// Index in its source's list, from 0.
    pub position: u32,
    pub at_ms: i64,
    #[serde(flatten)]
    pub event: Event,
}

/// What a reader has emitted of one turn: per source, how many events (the next position).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventCursor {
    pub turn: u32,
    pub seen: BTreeMap<String, u32>,
}

/// A `Last-Event-ID` that is not a cursor this API wrote.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Last-Event-ID is not a cursor of this stream: {0}")]
pub struct BadCursor(pub &'static str);

impl EventCursor {
    /// A cursor at the start of `turn`.
    pub fn start(turn: u32) -> Self {
        Self { turn, seen: BTreeMap::new() }
    }

    /// The next position this cursor wants from `source` (0: none seen).
    pub fn next_of(&self, source: &str) -> u32 {
        self.seen.get(source).copied().unwrap_or(0)
    }

    /// Marks `event` emitted.
    pub fn advance(&mut self, event: &LoggedEvent) {
        let next = self.seen.entry(event.source.clone()).or_insert(0);
        *next = (*next).max(event.position + 1);
    }

    /// The SSE `id`: `<turn>,<source>=<next>,…` — subtask ids (`t2~w01`) and digits only, so no
    /// escaping and no newline; about 12 bytes a source.
    pub fn encode(&self) -> String {
        let mut out = self.turn.to_string();
        for (source, next) in &self.seen {
            out.push(',');
            out.push_str(source);
            out.push('=');
            out.push_str(&next.to_string());
        }
        out
    }

    /// Reads an SSE id [`Self::encode`] wrote. Untrusted input: bounded length, strict characters.
    pub fn decode(text: &str) -> Result<Self, BadCursor> {
        if text.len() > MAX_CURSOR_BYTES {
            return Err(BadCursor("too long"));
        }
        let mut parts = text.split(',');
        let turn = parts.next().and_then(|t| t.parse().ok()).ok_or(BadCursor("no turn"))?;
        let mut seen = BTreeMap::new();
        for part in parts {
            let (source, next) = part.split_once('=').ok_or(BadCursor("a source without a position"))?;
            let well_formed = !source.is_empty()
                && source.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '~' | '.' | '-' | '_'));
            if !well_formed {
                return Err(BadCursor("a source name"));
            }
            let next: u32 = next.parse().map_err(|_| BadCursor("a position"))?;
            seen.insert(source.to_owned(), next);
        }
        Ok(Self { turn, seen })
    }
}

/// One read of a conversation's log: its current turn's events the cursor had not seen.
#[derive(Clone, Debug, PartialEq)]
pub struct EventPage {
    /// The turn read: the conversation's current turn.
    pub turn: u32,
    /// The conversation's status as read with the events (a terminal status is read in the same
    /// item as its `turn_done`/`turn_failed` event).
    pub status: ConversationStatus,
    /// Unseen events: each source's in position order; sources merged by `at_ms`.
    pub events: Vec<LoggedEvent>,
}

/// The unseen events of `turn` among `sources` (each a source name and its stored list, `None`
/// for an entry of a kind this version cannot read: it keeps its position and is never emitted),
/// given `cursor`: a cursor of another turn starts the turn afresh. Sources merged by `at_ms`
/// (a stable sort, so each source keeps its order).
pub fn unseen(turn: u32, cursor: &EventCursor, sources: Vec<(String, Vec<Option<Stamped>>)>) -> Vec<LoggedEvent> {
    let fresh = EventCursor::start(turn);
    let cursor = if cursor.turn == turn { cursor } else { &fresh };
    let mut out: Vec<LoggedEvent> = Vec::new();
    for (source, list) in sources {
        let from = cursor.next_of(&source) as usize;
        for (position, stamped) in list.into_iter().enumerate().skip(from) {
            let Some(stamped) = stamped else { continue };
            out.push(LoggedEvent {
                source: source.clone(),
                position: position as u32,
                at_ms: stamped.at_ms,
                event: stamped.event,
            });
        }
    }
    out.sort_by_key(|e| e.at_ms);
    out
}

/// What the reader fills events in from: the items it read them with.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadAlong<'a> {
    /// The first start of the event's subtask ([`Event::SubtaskFinished`]'s duration).
    pub started_at_ms: Option<i64>,
    /// The conversation's reply ([`Event::ReplyWritten`]).
    pub reply: Option<&'a str>,
    /// The turn's planned subtasks, in id order ([`Event::TurnPlanned`]).
    pub plan: &'a [Subtask],
}

/// Fills what the reader adds from the items the event was read with (see
/// [`Event::TurnPlanned`], [`Event::SubtaskFinished`], [`Event::ReplyWritten`]).
pub fn fill(logged: &mut LoggedEvent, along: ReadAlong<'_>) {
    let ReadAlong { started_at_ms, reply, plan } = along;
    match &mut logged.event {
        Event::TurnPlanned { subtasks, .. } => {
            *subtasks = plan
                .iter()
                .map(|s| PlannedSubtask {
                    id: s.id.clone(),
                    instruction: s.instruction.clone(),
                    depends_on: s.depends_on.clone(),
                })
                .collect();
        }
        Event::SubtaskFinished { duration_ms, .. } => {
            *duration_ms = started_at_ms.map(|started| (logged.at_ms - started).max(0));
        }
        Event::ReplyWritten { reply: slot, .. } => *slot = reply.map(str::to_owned),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamped(at_ms: i64, subtask: &str) -> Stamped {
        Stamped { at_ms, event: Event::SubtaskStarted { subtask: SubtaskId::from(subtask) } }
    }

    #[test]
    fn a_cursor_reads_back_as_written_and_refuses_what_it_never_wrote() {
        let mut cursor = EventCursor::start(2);
        cursor.seen.insert("c".into(), 3);
        cursor.seen.insert("t2~w01".into(), 1);
        assert_eq!(cursor.encode(), "2,c=3,t2~w01=1");
        assert_eq!(EventCursor::decode(&cursor.encode()), Ok(cursor));
        assert_eq!(EventCursor::decode("2"), Ok(EventCursor::start(2)));
        assert_eq!(EventCursor::decode("x,c=1"), Err(BadCursor("no turn")));
        assert_eq!(EventCursor::decode("1,c"), Err(BadCursor("a source without a position")));
        assert_eq!(EventCursor::decode("1,c d=1"), Err(BadCursor("a source name")));
        assert_eq!(EventCursor::decode("1,c=-1"), Err(BadCursor("a position")));
        assert_eq!(EventCursor::decode(&"1".repeat(MAX_CURSOR_BYTES + 1)), Err(BadCursor("too long")));
    }

    #[test]
    fn a_late_event_of_a_source_is_unseen_after_later_events_of_others_were_emitted() {
        // The reader emitted w02's event (at 20) before w01's first (at 10) had committed.
        let mut cursor = EventCursor::start(1);
        cursor.seen.insert("t1~w02".into(), 1);
        let sources = vec![
            ("t1~w01".to_owned(), vec![Some(stamped(10, "t1~w01"))]),
            ("t1~w02".to_owned(), vec![Some(stamped(20, "t1~w02")), None, Some(stamped(30, "t1~w02"))]),
        ];
        let got = unseen(1, &cursor, sources.clone());
        let keys: Vec<(&str, u32)> = got.iter().map(|e| (e.source.as_str(), e.position)).collect();
        // The entry this version cannot read (position 1) keeps its place and is never emitted.
        assert_eq!(keys, [("t1~w01", 0), ("t1~w02", 2)]);
        for e in &got {
            cursor.advance(e);
        }
        assert!(unseen(1, &cursor, sources.clone()).is_empty());
        // A cursor of an earlier turn reads the current turn from its start.
        assert_eq!(unseen(2, &cursor, sources).len(), 3);
    }

    #[test]
    fn an_event_is_stored_tagged_with_its_kind_and_filled_from_its_item() {
        let done = Stamped {
            at_ms: 1_500,
            event: Event::SubtaskFinished {
                subtask: SubtaskId::from("t1~w01"),
                status: SubtaskStatus::Succeeded,
                tools: vec!["shop__order".into()],
                tokens: Some(42),
                duration_ms: None,
            },
        };
        let json = done.to_json();
        assert_eq!(
            json,
            r#"{"at_ms":1500,"kind":"subtask_finished","subtask":"t1~w01","status":"SUCCEEDED","tools":["shop__order"],"tokens":42}"#
        );
        let back = Stamped::from_json(&json).unwrap();
        assert_eq!(back.event.kind(), "subtask_finished");
        let mut logged = LoggedEvent { source: "t1~w01".into(), position: 2, at_ms: back.at_ms, event: back.event };
        fill(&mut logged, ReadAlong { started_at_ms: Some(1_000), ..ReadAlong::default() });
        assert!(matches!(logged.event, Event::SubtaskFinished { duration_ms: Some(500), .. }));
        assert_eq!(Stamped::from_json(r#"{"at_ms":1,"kind":"from_the_future"}"#), None);
    }
}
