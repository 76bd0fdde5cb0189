//! When a conversation ends in `HANDOFF`: the customer asked for a person, the tools kept failing, or the gateway's policy refused what was asked — decided on stored kinds, never on text.
//!
//! The aggregator asks [`handoff_reason`] when it writes the reply; a conversation handed off
//! ends in [`ConversationStatus::Handoff`](crate::domain::ConversationStatus::Handoff) with its
//! reply, and the change of its item is the hand-off event (on AWS an EventBridge pipe from the
//! table's stream puts it on the event bus; the local stack prints it and keeps a list).

use crate::domain::{Conversation, FailureKind, HandoffReason, SubtaskRecord, SubtaskResult};

/// Subtasks failed because the tools were unavailable that make a conversation a hand-off
/// (or every subtask, when fewer were planned).
pub const TOOL_FAILURES_FOR_HANDOFF: usize = 2;

/// Why `conversation` goes to a person, if it does: the customer asked (recorded on the
/// conversation while it ran); the gateway refused a subtask's tools for policy
/// ([`FailureKind::ToolsRefused`]); or the tools kept failing ([`FailureKind::ToolsUnavailable`]
/// on [`TOOL_FAILURES_FOR_HANDOFF`] subtasks, or on all of them).
pub fn handoff_reason(conversation: &Conversation, subtasks: &[SubtaskRecord]) -> Option<HandoffReason> {
    if let Some(h) = conversation.handoff {
        return Some(h.reason);
    }
    let kinds: Vec<FailureKind> = subtasks.iter().filter_map(|r| r.result.as_ref()?.failure_kind()).collect();
    if kinds.contains(&FailureKind::ToolsRefused) {
        return Some(HandoffReason::Policy);
    }
    let unavailable = kinds.iter().filter(|k| **k == FailureKind::ToolsUnavailable).count();
    let counted =
        subtasks.iter().filter(|r| r.result.as_ref().is_some_and(|r| !matches!(r, SubtaskResult::Skipped { .. })));
    if unavailable >= TOOL_FAILURES_FOR_HANDOFF || (unavailable > 0 && unavailable == counted.count()) {
        return Some(HandoffReason::ToolFailures);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Handoff, Subtask};

    fn rec(c: &Conversation, id: &str, result: SubtaskResult) -> SubtaskRecord {
        let mut r = SubtaskRecord::new(
            c,
            Subtask { id: id.into(), instruction: id.into(), tools: vec![], depends_on: vec![] },
            "support".into(),
        );
        r.status = result.status();
        r.result = Some(result);
        r
    }

    fn ok() -> SubtaskResult {
        SubtaskResult::Succeeded { text: "fine".into(), tool_calls: vec![] }
    }

    #[test]
    fn the_customer_asking_wins_whatever_happened() {
        let mut c = Conversation::new("C1", "I want a person", 0, 120);
        assert_eq!(handoff_reason(&c, &[rec(&c, "w01", ok())]), None);
        c.handoff = Some(Handoff { reason: HandoffReason::CustomerAsked, at_ms: 5 });
        assert_eq!(handoff_reason(&c, &[rec(&c, "w01", ok())]), Some(HandoffReason::CustomerAsked));
    }

    #[test]
    fn tools_that_keep_failing_or_a_policy_refusal_hand_off_on_the_kind_not_the_text() {
        let c = Conversation::new("C1", "q", 0, 120);
        let unavailable = || SubtaskResult::failed(FailureKind::ToolsUnavailable, "policy says no");
        let one = [rec(&c, "w01", ok()), rec(&c, "w02", unavailable())];
        assert_eq!(handoff_reason(&c, &one), None, "one failure among answers is not repeated");
        let only = [rec(&c, "w01", unavailable())];
        assert_eq!(handoff_reason(&c, &only), Some(HandoffReason::ToolFailures));
        let two = [rec(&c, "w01", ok()), rec(&c, "w02", unavailable()), rec(&c, "w03", unavailable())];
        assert_eq!(handoff_reason(&c, &two), Some(HandoffReason::ToolFailures));
        let refused = [rec(&c, "w01", ok()), rec(&c, "w02", SubtaskResult::failed(FailureKind::ToolsRefused, "x"))];
        assert_eq!(handoff_reason(&c, &refused), Some(HandoffReason::Policy));
        let model = [rec(&c, "w01", SubtaskResult::failed(FailureKind::ModelFailed, "tools unavailable"))];
        assert_eq!(handoff_reason(&c, &model), None);
    }
}
