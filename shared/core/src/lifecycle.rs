//! The status machines: a conversation's lifecycle and a subtask's, their allowed transitions and their stored names.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Lifecycle of a conversation: `PLANNING → RUNNING → AGGREGATING → DONE`, or `FAILED`, or
/// `HANDOFF` (answered, and handed to a person).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConversationStatus {
    Planning,
    Running,
    Aggregating,
    Done,
    Failed,
    /// Answered, and a person takes over (the customer asked, tools kept failing, or policy).
    Handoff,
}

impl ConversationStatus {
    /// Whether `self → next` is an allowed transition.
    pub fn can_become(self, next: Self) -> bool {
        use ConversationStatus::*;
        matches!(
            (self, next),
            (Planning, Running)
                | (Planning, Failed)
                | (Running, Aggregating)
                | (Running, Failed)
                | (Aggregating, Done)
                | (Aggregating, Failed)
                | (Aggregating, Handoff)
        )
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Handoff)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planning => "PLANNING",
            Self::Running => "RUNNING",
            Self::Aggregating => "AGGREGATING",
            Self::Done => "DONE",
            Self::Failed => "FAILED",
            Self::Handoff => "HANDOFF",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PLANNING" => Self::Planning,
            "RUNNING" => Self::Running,
            "AGGREGATING" => Self::Aggregating,
            "DONE" => Self::Done,
            "FAILED" => Self::Failed,
            "HANDOFF" => Self::Handoff,
            _ => return None,
        })
    }
}

impl fmt::Display for ConversationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Lifecycle of a subtask: `PENDING` (waits for dependencies) or `QUEUED` →
/// `RUNNING` → `SUCCEEDED | FAILED | SKIPPED | AWAITING_APPROVAL | SUBMITTED`.
///
/// `AWAITING_APPROVAL` and `SUBMITTED` are terminal for the conversation's accounting (it
/// answers without waiting for a person or a slow tool); what happens to their side effects
/// afterwards is recorded in the subtask's journal ([`crate::effects`]) and its approvals. A
/// `SUBMITTED` subtask whose confirmation learnt every outcome takes the journal's result
/// (`SUCCEEDED`, or `AWAITING_APPROVAL` when a replay asked for consent): its dependents wait for that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SubtaskStatus {
    Pending,
    Queued,
    Running,
    Succeeded,
    Failed,
    Skipped,
    /// A side effect waits for a person's approval (consent above the gateway's threshold).
    AwaitingApproval,
    /// A side effect was dispatched and its outcome is not known yet: "submitted, being confirmed".
    Submitted,
}

impl SubtaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped | Self::AwaitingApproval | Self::Submitted)
    }

    /// Whether `self → next` is an allowed transition.
    pub fn can_become(self, next: Self) -> bool {
        use SubtaskStatus::*;
        match (self, next) {
            (Pending, Queued) | (Queued, Running) | (Running, Running) | (Pending, Running) => true,
            // A side effect's confirmation settles it (already counted: the accounting is unchanged).
            (Submitted, Succeeded) | (Submitted, AwaitingApproval) => true,
            (from, to) if !from.is_terminal() && to.is_terminal() => true,
            _ => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Queued => "QUEUED",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Skipped => "SKIPPED",
            Self::AwaitingApproval => "AWAITING_APPROVAL",
            Self::Submitted => "SUBMITTED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => Self::Pending,
            "QUEUED" => Self::Queued,
            "RUNNING" => Self::Running,
            "SUCCEEDED" => Self::Succeeded,
            "FAILED" => Self::Failed,
            "SKIPPED" => Self::Skipped,
            "AWAITING_APPROVAL" => Self::AwaitingApproval,
            "SUBMITTED" => Self::Submitted,
            _ => return None,
        })
    }
}

impl fmt::Display for SubtaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_status_allows_only_forward_transitions() {
        use ConversationStatus::*;
        assert!(Planning.can_become(Running));
        assert!(Running.can_become(Aggregating));
        assert!(Aggregating.can_become(Done));
        assert!(!Done.can_become(Running));
        assert!(!Running.can_become(Planning));
        assert!(!Aggregating.can_become(Running));
        assert!(!Planning.can_become(Done));
    }

    #[test]
    fn terminal_subtask_never_changes() {
        use SubtaskStatus::*;
        for t in [Succeeded, Failed, Skipped] {
            for n in [Pending, Queued, Running, Succeeded, Failed, Skipped] {
                assert!(!t.can_become(n), "{t:?} -> {n:?}");
            }
        }
        assert!(Pending.can_become(Queued));
        assert!(Queued.can_become(Failed));
    }

    #[test]
    fn a_submitted_subtask_is_settled_by_its_confirmation_and_by_nothing_else() {
        use SubtaskStatus::*;
        assert!(Submitted.can_become(Succeeded));
        assert!(Submitted.can_become(AwaitingApproval));
        for n in [Pending, Queued, Running, Failed, Skipped, Submitted] {
            assert!(!Submitted.can_become(n), "Submitted -> {n:?}");
        }
    }
}
