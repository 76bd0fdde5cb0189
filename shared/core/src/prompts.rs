//! Prompts and message layouts for planning, tool loops and the reply, laid out for providers' prefix caches.
//!
//! Every worker of a conversation sends the same leading messages byte for
//! byte (system prompt, the customer's message), and only then its own
//! subtask, so providers that cache prompt prefixes bill most input at the
//! cached rate. The offline model reads the same layout, through the markers
//! below.

use serde::{Deserialize, Serialize};

use crate::domain::SubtaskId;
use crate::ports::{ChatMessage, ToolSpec};

/// Opens the user message that carries the customer's text.
pub const CUSTOMER_MESSAGE_MARKER: &str = "Customer message:\n";
/// Opens a worker's own user message: `Subtask <id>: <instruction>`.
pub const SUBTASK_MARKER: &str = "Subtask ";
/// Opens the dependency context inside the subtask message; each following
/// line is `- <id> (<instruction>): <answer>`.
pub const DEPENDENCY_RESULTS_MARKER: &str = "Results of the subtasks this one depends on:";
/// Opens the JSON ([`ReplyInput`]) in the aggregator's user message.
pub const SUBTASK_RESULTS_MARKER: &str = "Subtask results (JSON):\n";

pub const PLAN_PROMPT: &str = "You split a customer's message to an online shop into independent subtasks for tool-using workers.\n\
Answer with one JSON object and nothing else: {\"subtasks\": [{\"id\": \"w01\", \"instruction\": \"...\", \"tools\": [\"tool_name\"], \"depends_on\": []}]}.\n\
Rules: one subtask per independent question (at most 100); ids unique; `tools` only names from the tool list below; \
`depends_on` only when a subtask needs another's result; write each instruction so a worker can act on it alone, \
keeping order ids, SKUs, product names and coupon codes exactly as the customer wrote them. \
A greeting or a message that needs no tool gets one subtask with no tools. \
When the customer asks to talk to a person (a human agent), add \"handoff\": true to the object (subtasks may then be empty).\n\nTools:\n";

pub const WORKER_PROMPT: &str = "You are a worker of an online shop's support team. You handle exactly one subtask of a customer's message, \
using the tools offered. Call tools for facts; never invent order states, dates, prices or stock. \
When a tool refuses or fails, say so plainly. Finish with a short factual answer to your subtask only, \
naming the ids, codes, dates and amounts you found.";

pub const REPLY_PROMPT: &str = "You write the shop's reply to the customer from the results of the subtasks. \
Answer every part of the customer's message in the customer's language, using only facts from the results. \
For a subtask that failed or was skipped, say plainly that this part could not be done right now; \
never repeat internal error text. A subtask `awaiting_approval` is waiting for review by a person: say exactly that, \
with what it would do, and never that it was done or failed. A subtask `submitted` was sent and is being confirmed: \
say it was submitted and is being confirmed, never that it failed. Be concise.";

pub const COMPRESS_PROMPT: &str = "Summarise the earlier tool-calling steps below into a short list of facts \
(ids, statuses, dates, amounts, refusals). Keep every fact the remaining work may need; drop everything else.";

/// Planning request messages: system prompt with the tool list, then the customer's message.
pub fn plan_messages(query: &str, tools: &[ToolSpec]) -> Vec<ChatMessage> {
    let mut system = String::from(PLAN_PROMPT);
    for t in tools {
        system.push_str("- ");
        system.push_str(&t.name);
        system.push_str(": ");
        system.push_str(t.description.lines().next().unwrap_or(""));
        system.push('\n');
    }
    vec![
        ChatMessage::System { content: system },
        ChatMessage::User { content: format!("{CUSTOMER_MESSAGE_MARKER}{query}") },
    ]
}

/// The follow-up when a plan was unusable: shows the model its validation error.
pub fn plan_retry_message(error: &str) -> ChatMessage {
    ChatMessage::User {
        content: format!(
            "That plan was not usable: {error}. Answer again with only the JSON object, using only the listed tools."
        ),
    }
}

/// A finished dependency, as a dependent subtask sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyResult {
    pub id: SubtaskId,
    pub instruction: String,
    pub answer: String,
}

/// A worker's leading messages: the shared prefix (system prompt, customer
/// message), then its own subtask with any dependency results.
pub fn work_messages(
    query: &str,
    subtask_id: &SubtaskId,
    instruction: &str,
    dependencies: &[DependencyResult],
) -> Vec<ChatMessage> {
    let mut own = format!("{SUBTASK_MARKER}{subtask_id}: {instruction}");
    if !dependencies.is_empty() {
        own.push_str("\n\n");
        own.push_str(DEPENDENCY_RESULTS_MARKER);
        for d in dependencies {
            own.push_str(&format!("\n- {} ({}): {}", d.id, d.instruction, d.answer.replace('\n', " ")));
        }
    }
    vec![
        ChatMessage::System { content: WORKER_PROMPT.to_owned() },
        ChatMessage::User { content: format!("{CUSTOMER_MESSAGE_MARKER}{query}") },
        ChatMessage::User { content: own },
    ]
}

/// Number of leading messages of a worker transcript that compression must keep (the cached prefix and the subtask).
pub const WORK_LEADING_MESSAGES: usize = 3;

/// A subtask's outcome as the reply writer sees it: `succeeded`, `failed` (also
/// a subtask the deadline path found unfinished), `skipped`, `awaiting_approval` (a side
/// effect waits for a person) or `submitted` (a side effect is being confirmed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyStatus {
    Succeeded,
    Failed,
    Skipped,
    AwaitingApproval,
    Submitted,
}

/// One subtask as the reply writer sees it. Failed and skipped subtasks carry
/// a plain `problem`, never the internal error text; `awaiting_approval` and `submitted`
/// ones carry our own sentence saying so as their `answer`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyItem {
    pub id: SubtaskId,
    pub instruction: String,
    pub status: ReplyStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The aggregator's input to the reply writer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyInput {
    pub results: Vec<ReplyItem>,
    /// Plan notes, e.g. subtasks dropped over the limit.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// The aggregator's messages: reply prompt, then the customer's message and the results as JSON.
pub fn reply_messages(query: &str, input: &ReplyInput) -> Vec<ChatMessage> {
    let json = serde_json::to_string_pretty(input).unwrap_or_else(|_| "{}".into());
    vec![
        ChatMessage::System { content: REPLY_PROMPT.to_owned() },
        ChatMessage::User { content: format!("{CUSTOMER_MESSAGE_MARKER}{query}\n\n{SUBTASK_RESULTS_MARKER}{json}") },
    ]
}

/// Reads the [`ReplyInput`] back out of a reply request's user message (used by the offline model).
pub fn parse_reply_input(user_content: &str) -> Option<(String, ReplyInput)> {
    let rest = user_content.strip_prefix(CUSTOMER_MESSAGE_MARKER)?;
    let (query, json) = rest.split_once(&format!("\n\n{SUBTASK_RESULTS_MARKER}"))?;
    let input = serde_json::from_str(json).ok()?;
    Some((query.to_owned(), input))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_of_one_conversation_share_the_leading_messages_byte_for_byte() {
        let a = work_messages("q?", &"w01".into(), "do a", &[]);
        let b = work_messages("q?", &"w02".into(), "do b", &[]);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
    }

    #[test]
    fn reply_input_round_trips_through_the_message() {
        let input = ReplyInput {
            results: vec![ReplyItem {
                id: "w01".into(),
                instruction: "Check A1029".into(),
                status: ReplyStatus::Succeeded,
                answer: Some("PAID".into()),
                problem: None,
            }],
            notes: vec!["n".into()],
        };
        let msgs = reply_messages("hello\n\nthere", &input);
        let ChatMessage::User { content } = &msgs[1] else { panic!("user message expected") };
        let (q, back) = parse_reply_input(content).unwrap();
        assert_eq!(q, "hello\n\nthere");
        assert_eq!(back, input);
        assert!(content.contains("\"status\": \"succeeded\""), "the reply model sees today's words: {content}");
    }
}
