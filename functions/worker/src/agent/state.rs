//! The agent loop's state: the transcript, the calls' records and the usage so far, the checkpoint an interrupted attempt saves, how a run ends, and what a run that must stop has found.

use serde::{Deserialize, Serialize};
use swarm_core::domain::{FailureKind, SubtaskResult, ToolCallRecord, Usage};
use swarm_core::ports::{ChatMessage, ToolCall};

/// Saved progress of an interrupted attempt (stored as JSON on the subtask item).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    pub messages: Vec<ChatMessage>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub usage: Usage,
    /// Journal entries the transcript accounts for: a resumed attempt continues only from a
    /// checkpoint that knows every side effect (otherwise it finishes from the journal).
    #[serde(default)]
    pub effects: usize,
}

/// Result of running the loop.
pub enum LoopEnd {
    Done(SubtaskResult),
    OutOfTime,
    /// The subtask was closed by someone else, or another attempt took it over, before a side
    /// effect could be recorded: nothing was dispatched, nothing more to do here.
    Abandoned(String),
    /// A journal write around a side effect failed: the message must come back (its redelivery
    /// finishes from the journal, replaying what it holds with its keys).
    Retry(String),
}

/// What a run of the loop has so far.
pub struct LoopState {
    pub messages: Vec<ChatMessage>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub usage: Usage,
    /// Entries of the subtask's journal (side-effecting calls recorded so far).
    pub effects: usize,
}

impl LoopState {
    /// A first attempt's state: the work messages, nothing called, nothing used.
    pub fn fresh(messages: Vec<ChatMessage>) -> Self {
        Self { messages, tool_calls: Vec::new(), usage: Usage::default(), effects: 0 }
    }

    /// The state an interrupted attempt saved.
    pub fn resumed(cp: Checkpoint) -> Self {
        Self { messages: cp.messages, tool_calls: cp.tool_calls, usage: cp.usage, effects: cp.effects }
    }

    /// What an attempt handed back saves.
    pub fn into_checkpoint(self) -> Checkpoint {
        Checkpoint { messages: self.messages, tool_calls: self.tool_calls, usage: self.usage, effects: self.effects }
    }

    /// The tools called so far, in call order (the subtask's `tools_used`).
    pub fn tools_used(&self) -> Vec<String> {
        self.tool_calls.iter().map(|c| c.name.clone()).collect()
    }
}

/// What the loop had when it had to stop (`why`: time ran out for good, the answer was cut off):
/// the outputs of the calls whose records say they succeeded, marked partial, or a failure of
/// `kind` saying why when there are none.
pub fn partial_result(state: &LoopState, kind: FailureKind, why: &str) -> SubtaskResult {
    let facts: Vec<&str> = tool_outcomes(&state.messages, &state.tool_calls)
        .into_iter()
        .filter(|(_, record)| record.is_some_and(|r| r.ok))
        .map(|(content, _)| content)
        .collect();
    if facts.is_empty() {
        SubtaskResult::failed(kind, format!("{why} before any result"))
    } else {
        SubtaskResult::Succeeded {
            text: format!("(partial: {why}) Facts found so far: {}", facts.join("; ")),
            tool_calls: state.tool_calls.clone(),
        }
    }
}

/// Each `tool` message of `messages` with the record of the call it answers.
///
/// The loop appends one record per answered call, in call order, together
/// with its `tool` message, and compression only replaces the oldest rounds:
/// the transcript's `tool` messages are the last ones recorded, so they pair
/// with the records from the end, by position. The call a message answers (its
/// `tool_call_id` in the assistant message before it) must name the record's
/// tool, or the message gets no record (an outcome never guessed).
fn tool_outcomes<'a>(
    messages: &'a [ChatMessage],
    records: &'a [ToolCallRecord],
) -> Vec<(&'a str, Option<&'a ToolCallRecord>)> {
    let mut calls: &[ToolCall] = &[];
    let mut answered: Vec<(&str, Option<&str>)> = Vec::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => calls = tool_calls,
            ChatMessage::Tool { tool_call_id, content } => {
                let name = calls.iter().find(|c| &c.id == tool_call_id).map(|c| c.name.as_str());
                answered.push((content.as_str(), name));
            }
            ChatMessage::System { .. } | ChatMessage::User { .. } => calls = &[],
        }
    }
    // From the end: the last message with the last record, and so on; a message
    // older than every record (never written so) gets none.
    let mut paired: Vec<(&str, Option<&ToolCallRecord>)> = answered
        .into_iter()
        .rev()
        .zip(records.iter().rev().map(Some).chain(std::iter::repeat(None)))
        .map(|((content, name), record)| (content, record.filter(|r| name == Some(r.name.as_str()))))
        .collect();
    paired.reverse();
    paired
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::prompts::work_messages;

    fn assistant(calls: &[(&str, &str)]) -> ChatMessage {
        ChatMessage::Assistant {
            content: None,
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall { id: (*id).into(), name: (*name).into(), arguments: "{}".into() })
                .collect(),
            reasoning_content: None,
        }
    }

    fn answer(id: &str, content: &str) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), content: content.into() }
    }

    fn record(name: &str, ok: bool) -> ToolCallRecord {
        ToolCallRecord { name: name.into(), ok, error: (!ok).then(|| "refused".to_owned()), facts: vec![] }
    }

    fn state(messages: Vec<ChatMessage>, tool_calls: Vec<ToolCallRecord>) -> LoopState {
        let mut all = work_messages("q", &"w01".into(), "Check A1029.", &[]);
        all.extend(messages);
        LoopState { messages: all, tool_calls, usage: Usage::default(), effects: 0 }
    }

    #[test]
    fn partial_result_keeps_what_the_records_say_succeeded_whatever_the_text() {
        let s = state(
            vec![
                assistant(&[("call_a", "shop__get_order"), ("call_b", "shop__refund")]),
                // A successful output that mentions "error", and a failed one that does not.
                answer("call_a", r#"{"order_id":"A1029","status":"PAID","error":null}"#),
                answer("call_b", "refund refused: over the limit"),
            ],
            vec![record("shop__get_order", true), record("shop__refund", false)],
        );
        let SubtaskResult::Succeeded { text, tool_calls } =
            partial_result(&s, FailureKind::OutOfTime, "ran out of time")
        else {
            panic!("facts were found")
        };
        assert_eq!(
            text,
            r#"(partial: ran out of time) Facts found so far: {"order_id":"A1029","status":"PAID","error":null}"#
        );
        assert_eq!(tool_calls.len(), 2);
    }

    #[test]
    fn partial_result_pairs_a_compressed_transcript_with_its_latest_records() {
        // Two earlier calls were compressed into a summary; their records are still kept.
        let s = state(
            vec![
                ChatMessage::User { content: "Summary of earlier steps: order A1029 is paid".into() },
                assistant(&[("call_0", "shop__get_order"), ("call_1", "shop__track_shipment")]),
                answer("call_0", "timed out"),
                answer("call_1", r#"{"carrier":"SF"}"#),
            ],
            vec![
                record("shop__get_order", true),
                record("shop__track_shipment", true),
                record("shop__get_order", false),
                record("shop__track_shipment", true),
            ],
        );
        let SubtaskResult::Succeeded { text, .. } = partial_result(&s, FailureKind::OutOfTime, "ran out of time")
        else {
            panic!("one fact was found")
        };
        assert_eq!(text, r#"(partial: ran out of time) Facts found so far: {"carrier":"SF"}"#);
    }

    #[test]
    fn partial_result_without_a_successful_record_is_out_of_time() {
        // No records at all, a record for another tool than the call named, and a failed record.
        for records in [vec![], vec![record("shop__track_shipment", true)], vec![record("shop__get_order", false)]] {
            let s = state(vec![assistant(&[("c1", "shop__get_order")]), answer("c1", r#"{"status":"PAID"}"#)], records);
            let result = partial_result(&s, FailureKind::OutOfTime, "ran out of time");
            assert_eq!(result.failure_kind(), Some(FailureKind::OutOfTime), "{result:?}");
        }
    }
}
