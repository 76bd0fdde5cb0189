//! What `swarm-local ask` prints while a conversation runs, and whether it answered: progress lines drawn from the subtask records' own timestamps (`started_at`, `finished_at`), so a subtask that starts and ends between two polls still gets its start line, each end with its elapsed time; and the verdict behind the exit code.

use std::collections::HashMap;

use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_core::view::{ConversationView, SubtaskView};

/// Milliseconds since the epoch of an RFC 3339 time, if it is one.
fn epoch_ms(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339).ok().map(|t| t.timestamp_millis())
}

/// When the view's turn started: the conversation's creation for its first turn.
fn turn_start(view: &ConversationView) -> &str {
    view.turns.iter().find(|t| t.turn == view.turn).map_or(&view.created_at, |t| &t.started_at)
}

/// `+1.25 s` from the start of the view's turn.
fn offset(view: &ConversationView, at: Option<&str>) -> String {
    match (epoch_ms(turn_start(view)), at.and_then(epoch_ms)) {
        (Some(created), Some(at)) => format!("+{:.2} s", (at - created).max(0) as f64 / 1000.0),
        _ => "+?".to_owned(),
    }
}

/// How far a subtask has been told: nothing yet, its start, its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Told {
    Started,
    Ended,
}

/// The progress lines told so far; [`Progress::lines`] answers the new ones for each view.
#[derive(Debug, Default)]
pub struct Progress {
    planned: bool,
    told: HashMap<String, Told>,
    aggregating: bool,
}

impl Progress {
    /// The lines `view` adds to what was told: the plan once, each subtask's start (from its
    /// `started_at`, also when it is first seen finished) and end (with its elapsed time), and
    /// the reply being written.
    pub fn lines(&mut self, view: &ConversationView) -> Vec<String> {
        let mut out = Vec::new();
        if !self.planned && view.progress.total > 0 {
            self.planned = true;
            let turn = if view.turn > 0 { format!(" turn {}", view.turn) } else { String::new() };
            out.push(format!(
                "▸ conversation {}{turn}: {} subtasks planned",
                view.conversation_id, view.progress.total
            ));
            for s in &view.subtasks {
                let deps = if s.depends_on.is_empty() {
                    String::new()
                } else {
                    format!(" (after {})", s.depends_on.join(", "))
                };
                out.push(format!("  · {} {}{}", s.id, s.instruction, deps));
            }
        }
        for s in &view.subtasks {
            let told = self.told.get(&s.id).copied();
            let started = s.started_at.is_some() || s.status == SubtaskStatus::Running;
            if told.is_none() && started {
                out.push(format!("  ▶ {} started {}  {}", s.id, offset(view, s.started_at.as_deref()), s.instruction));
                self.told.insert(s.id.clone(), Told::Started);
            }
            if told < Some(Told::Ended) && s.status.is_terminal() {
                out.push(end_line(view, s));
                self.told.insert(s.id.clone(), Told::Ended);
            }
        }
        if !self.aggregating && view.status == ConversationStatus::Aggregating {
            self.aggregating = true;
            out.push("▸ all subtasks finished: writing the reply".to_owned());
        }
        out
    }
}

fn end_line(view: &ConversationView, s: &SubtaskView) -> String {
    let mark = match s.status {
        SubtaskStatus::Succeeded => "✔",
        SubtaskStatus::AwaitingApproval | SubtaskStatus::Submitted => "⏸",
        _ => "✘",
    };
    let took = match (s.started_at.as_deref().and_then(epoch_ms), s.finished_at.as_deref().and_then(epoch_ms)) {
        (Some(a), Some(b)) => format!("{:.2} s", (b - a).max(0) as f64 / 1000.0),
        _ => "—".to_owned(),
    };
    let tools = if s.tools_used.is_empty() { String::new() } else { format!("  [{}]", s.tools_used.join(", ")) };
    let error = s.error.as_deref().map(|e| format!(" — {e}")).unwrap_or_default();
    let at = offset(view, s.finished_at.as_deref());
    format!("  {mark} {} {:<9} {at} took {took}  {}{tools}{error}", s.id, s.status, s.instruction)
}

/// Whether the conversation answered what was asked: it ended `DONE` (or was handed to a person)
/// with every subtask succeeded or waiting for a person. Otherwise, why not, in one sentence —
/// the reason `ask` exits non-zero.
pub fn verdict(view: &ConversationView) -> Result<(), String> {
    if !matches!(view.status, ConversationStatus::Done | ConversationStatus::Handoff) {
        return Err(format!("the conversation ended {} without a full answer", view.status));
    }
    let unanswered: Vec<&SubtaskView> = view
        .subtasks
        .iter()
        .filter(|s| {
            !matches!(s.status, SubtaskStatus::Succeeded | SubtaskStatus::AwaitingApproval | SubtaskStatus::Submitted)
        })
        .collect();
    if unanswered.is_empty() {
        return Ok(());
    }
    let which: Vec<String> = unanswered
        .iter()
        .map(|s| {
            format!("{} {}", s.id, s.error_code.map(|c| c.code().to_owned()).unwrap_or_else(|| s.status.to_string()))
        })
        .collect();
    Err(format!(
        "{} of {} subtasks did not answer ({}): the reply says what could not be done",
        unanswered.len(),
        view.subtasks.len(),
        which.join(", ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    fn view(subtasks: serde_json::Value, status: &str) -> ConversationView {
        serde_json::from_value(serde_json::json!({
            "conversation_id": "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07", "customer_id": "C104", "status": status,
            "progress": {"finished": 0, "total": 2}, "subtasks": subtasks, "reply": null, "usage": null,
            "created_at": "2026-01-01T00:00:00.000Z", "deadline_at": "2026-01-01T00:02:00.000Z"
        }))
        .unwrap()
    }

    #[test]
    fn a_subtask_seen_only_finished_still_gets_its_start_and_its_time() {
        let mut progress = Progress::default();
        let pending = serde_json::json!([
            {"id": "w01", "instruction": "Check A1029", "depends_on": [], "tools_used": [], "status": "QUEUED"},
            {"id": "w02", "instruction": "Check SAVE20", "depends_on": [], "tools_used": [], "status": "QUEUED"}
        ]);
        let first = progress.lines(&view(pending, "RUNNING"));
        assert_eq!(first.len(), 3, "{first:?}");
        let done = serde_json::json!([
            {"id": "w01", "instruction": "Check A1029", "depends_on": [], "tools_used": ["shop__get_order"], "status": "SUCCEEDED",
             "started_at": "2026-01-01T00:00:00.250Z", "finished_at": "2026-01-01T00:00:01.500Z"},
            {"id": "w02", "instruction": "Check SAVE20", "depends_on": [], "tools_used": [], "status": "RUNNING",
             "started_at": "2026-01-01T00:00:00.300Z"}
        ]);
        let next = progress.lines(&view(done, "RUNNING"));
        assert_eq!(
            next,
            [
                "  ▶ w01 started +0.25 s  Check A1029",
                "  ✔ w01 SUCCEEDED +1.50 s took 1.25 s  Check A1029  [shop__get_order]",
                "  ▶ w02 started +0.30 s  Check SAVE20",
            ]
        );
        let again = serde_json::json!([
            {"id": "w01", "instruction": "Check A1029", "depends_on": [], "tools_used": ["shop__get_order"], "status": "SUCCEEDED",
             "started_at": "2026-01-01T00:00:00.250Z", "finished_at": "2026-01-01T00:00:01.500Z"},
            {"id": "w02", "instruction": "Check SAVE20", "depends_on": [], "tools_used": [], "status": "RUNNING",
             "started_at": "2026-01-01T00:00:00.300Z"}
        ]);
        assert!(progress.lines(&view(again, "RUNNING")).is_empty(), "nothing told twice");
    }

    #[test]
    fn a_failed_subtask_or_an_unfinished_conversation_is_not_an_answer() {
        let ok = serde_json::json!([{"id": "w01", "instruction": "a", "depends_on": [], "tools_used": [], "status": "SUCCEEDED"},
            {"id": "w02", "instruction": "b", "depends_on": [], "tools_used": [], "status": "AWAITING_APPROVAL"}]);
        assert_eq!(verdict(&view(ok, "DONE")), Ok(()));
        let failed = serde_json::json!([{"id": "w01", "instruction": "a", "depends_on": [], "tools_used": [], "status": "SUCCEEDED"},
            {"id": "w02", "instruction": "b", "depends_on": [], "tools_used": [], "status": "FAILED", "error": "x", "error_code": "model_failed"}]);
        assert_eq!(
            verdict(&view(failed, "DONE")).unwrap_err(),
            "1 of 2 subtasks did not answer (w02 model_failed): the reply says what could not be done"
        );
        assert!(verdict(&view(serde_json::json!([]), "FAILED")).unwrap_err().contains("ended FAILED"));
    }
}
