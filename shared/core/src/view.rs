//! The public conversation object: the body of `GET /conversations/{id}` and of `swarm-local ask --json`.

use serde::{Deserialize, Serialize};

use crate::domain::{Conversation, SubtaskRecord, SubtaskResult, Usage};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub finished: u32,
    pub total: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubtaskView {
    pub id: String,
    pub instruction: String,
    pub depends_on: Vec<String>,
    /// Tool names called, in call order (repeats kept).
    pub tools_used: Vec<String>,
    /// `PENDING | QUEUED | RUNNING | SUCCEEDED | FAILED | SKIPPED`.
    pub status: String,
    /// Why the subtask failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /conversations/{id}` (DESIGN.md API section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationView {
    pub conversation_id: String,
    pub customer_id: String,
    /// `PLANNING | RUNNING | AGGREGATING | DONE | FAILED`.
    pub status: String,
    pub progress: Progress,
    pub subtasks: Vec<SubtaskView>,
    pub reply: Option<String>,
    /// `null` when no provider reported usage; fields not reported are `null`, not 0.
    pub usage: Option<Usage>,
}

impl ConversationView {
    pub fn build(conversation: &Conversation, subtasks: &[SubtaskRecord]) -> Self {
        let subtasks = subtasks
            .iter()
            .map(|r| SubtaskView {
                id: r.subtask.id.clone(),
                instruction: r.subtask.instruction.clone(),
                depends_on: r.subtask.depends_on.clone(),
                tools_used: r.tools_used.clone(),
                status: r.status.as_str().to_owned(),
                error: match &r.result {
                    Some(SubtaskResult::Failed { reason }) => Some(reason.clone()),
                    Some(SubtaskResult::Skipped { dependency }) => {
                        Some(format!("skipped: dependency {dependency} did not succeed"))
                    }
                    _ => None,
                },
            })
            .collect();
        Self {
            conversation_id: conversation.id.to_string(),
            customer_id: conversation.customer_id.clone(),
            status: conversation.status.as_str().to_owned(),
            progress: Progress { finished: conversation.finished.len() as u32, total: conversation.total },
            subtasks,
            reply: conversation.reply.clone(),
            usage: if conversation.usage.is_empty() { None } else { Some(conversation.usage) },
        }
    }
}
