//! Pure reply building: what the reply writer sees of each subtask, and the deterministic reply used when no model can write one.

use crate::domain::{SubtaskRecord, SubtaskResult, SubtaskStatus};
use crate::prompts::{ReplyInput, ReplyItem};

/// The plain text a customer may see for a subtask that did not succeed.
/// Internal error text (HTTP statuses, provider messages) never goes here.
pub fn plain_problem(record: &SubtaskRecord) -> String {
    match &record.result {
        Some(SubtaskResult::Skipped { dependency }) => {
            format!("not done because an earlier step ({dependency}) could not be completed")
        }
        Some(SubtaskResult::Failed { reason }) if reason.contains("deadline") => {
            "could not be finished in time".to_owned()
        }
        _ => "could not be completed right now".to_owned(),
    }
}

/// The reply writer's input, in plan (id) order. Subtasks not finished (the
/// deadline path) count as failed.
pub fn reply_input(subtasks: &[SubtaskRecord], notes: &[String]) -> ReplyInput {
    let results = subtasks
        .iter()
        .map(|r| match (&r.status, &r.result) {
            (SubtaskStatus::Succeeded, Some(SubtaskResult::Succeeded { text, .. })) => ReplyItem {
                id: r.subtask.id.clone(),
                instruction: r.subtask.instruction.clone(),
                status: "succeeded".into(),
                answer: Some(text.clone()),
                problem: None,
            },
            _ => ReplyItem {
                id: r.subtask.id.clone(),
                instruction: r.subtask.instruction.clone(),
                status: if r.status == SubtaskStatus::Skipped { "skipped".into() } else { "failed".into() },
                answer: None,
                problem: Some(plain_problem(r)),
            },
        })
        .collect();
    ReplyInput { results, notes: notes.to_vec() }
}

/// A reply written without a model: every answer, then plainly what could not
/// be done, then the notes. Used when the reply model fails or is out of time.
pub fn compose_reply(input: &ReplyInput) -> String {
    let mut out = String::new();
    for item in input.results.iter().filter(|i| i.status == "succeeded") {
        if let Some(a) = &item.answer {
            out.push_str(a.trim());
            out.push_str("\n\n");
        }
    }
    let failed: Vec<&ReplyItem> = input.results.iter().filter(|i| i.status != "succeeded").collect();
    if !failed.is_empty() {
        out.push_str("What I could not do right now:\n");
        for item in failed {
            out.push_str(&format!(
                "- {} ({})\n",
                item.instruction.trim_end_matches('.'),
                item.problem.as_deref().unwrap_or("could not be completed")
            ));
        }
        out.push('\n');
    }
    for n in &input.notes {
        out.push_str(n);
        out.push('\n');
    }
    if out.trim().is_empty() {
        out.push_str("Sorry, I could not work on your message right now. Please try again later.");
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Conversation, Subtask};

    fn rec(id: &str, result: SubtaskResult) -> SubtaskRecord {
        let c = Conversation::new("C1", "q", 0, 120);
        let mut r = SubtaskRecord::new(
            &c,
            Subtask { id: id.into(), instruction: format!("Check order {id}."), tools: vec![], depends_on: vec![] },
            "support".into(),
        );
        r.status = result.status();
        r.result = Some(result);
        r
    }

    #[test]
    fn failed_subtask_error_text_never_reaches_the_reply() {
        let subtasks = vec![
            rec("w01", SubtaskResult::Succeeded { text: "Order w01 is paid.".into(), tool_calls: vec![] }),
            rec("w02", SubtaskResult::Failed { reason: "HTTP 402 Insufficient Balance".into() }),
        ];
        let input = reply_input(&subtasks, &[]);
        assert_eq!(input.results[1].status, "failed");
        let reply = compose_reply(&input);
        assert!(reply.contains("Order w01 is paid."));
        assert!(reply.contains("Check order w02"));
        assert!(!reply.contains("402"));
        assert!(!reply.contains("Insufficient"));
        let json = serde_json::to_string(&input).unwrap();
        assert!(!json.contains("Insufficient"), "the reply model must not see the raw error either");
    }

    #[test]
    fn skipped_subtask_names_its_dependency_plainly() {
        let subtasks = vec![rec("w02", SubtaskResult::Skipped { dependency: "w01".into() })];
        let input = reply_input(&subtasks, &["note".into()]);
        assert_eq!(input.results[0].status, "skipped");
        assert!(compose_reply(&input).contains("earlier step (w01)"));
        assert!(compose_reply(&input).ends_with("note"));
    }
}
