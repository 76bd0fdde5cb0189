//! The deterministic offline model: a keyword planner, tool picker and reply writer behind the `ChatModel` port (never presented as an LLM).
//!
//! It runs the whole swarm without an LLM key, in `swarm-local` / `swarm-bench`
//! and in tests; no Lambda links it (a deployed function without an LLM
//! endpoint refuses to start instead). Per
//! [`Purpose`]:
//! - `Plan`: splits the customer's message into questions and answers the
//!   plan JSON `{"subtasks": [{id, instruction, tools, depends_on}]}`, tools
//!   picked from `request.tools` by name and description ([`catalog`]); a
//!   follow-up's references ("it", "the other one", "那个订单") are first
//!   resolved from the memory block of earlier turns, and an order's facts
//!   that cannot change are handed to its subtask ([`recall`]);
//! - `Work`: reads `Subtask <id>: <instruction>` and the transcript, asks for
//!   the next tool calls (`call_<n>`, arguments shaped to each tool's schema)
//!   or writes a short factual answer from the tool results ([`worker`]);
//! - `Reply`: joins the subtask answers, says plainly what could not be done
//!   and ends with [`offline_label`] ([`reply`]);
//!
//! Answers and replies are written in the language the request names (`Answer language:` /
//! `Reply language:`, [`swarm_core::prompts`]), else in the one the customer's message reads as
//! ([`swarm_core::language::Language::detect`]): English, Simplified or Traditional Chinese, each
//! from its own templates ([`lang`]).
//! - `Compress`: one facts line per earlier tool call.
//!
//! Everything is deterministic and takes microseconds; usage is reported as
//! unknown (all `None`).

mod catalog;
mod fold;
mod intent;
mod lang;
mod planner;
mod recall;
mod render;
mod reply;
mod text;
mod worker;

use async_trait::async_trait;

use swarm_core::domain::Usage;
use swarm_core::ports::{ChatMessage, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, ToolSpec};
use swarm_core::prompts::CUSTOMER_MESSAGE_MARKER;

pub use lang::{OFFLINE_LABEL, offline_label};

/// The `model` field of every offline response.
pub const OFFLINE_MODEL_NAME: &str = "offline";

/// Deterministic stand-in for an LLM when none is configured.
#[derive(Clone, Debug, Default)]
pub struct OfflineModel;

impl OfflineModel {
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl ChatModel for OfflineModel {
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(respond(request))
    }

    fn label(&self) -> String {
        "offline model".into()
    }

    fn model_name(&self) -> String {
        "offline".into()
    }

    fn is_offline(&self) -> bool {
        true
    }
}

/// The answer to one request; never fails.
fn respond(request: &ChatRequest) -> ChatResponse {
    match request.purpose {
        Purpose::Plan => {
            let memory = swarm_core::memory::Memory::in_messages(&request.messages).unwrap_or_default();
            text_response(planner::plan_json(&customer_query(&request.messages), &plan_tools(request), &memory))
        }
        Purpose::Work => match worker::work(&request.messages, &request.tools) {
            worker::Outcome::Calls(tool_calls) => ChatResponse {
                content: None,
                tool_calls,
                finish_reason: FinishReason::ToolCalls,
                reasoning_content: None,
                usage: Usage::default(),
                model: OFFLINE_MODEL_NAME.into(),
            },
            worker::Outcome::Answer(text) => text_response(text),
        },
        Purpose::Reply => text_response(reply::reply(&request.messages)),
        Purpose::Compress => text_response(reply::compress(&request.messages)),
    }
}

fn text_response(content: String) -> ChatResponse {
    ChatResponse {
        content: Some(content),
        tool_calls: Vec::new(),
        finish_reason: FinishReason::Stop,
        reasoning_content: None,
        usage: Usage::default(),
        model: OFFLINE_MODEL_NAME.into(),
    }
}

/// The customer's text: the first user message carrying the customer marker, else the first user message.
fn customer_query(messages: &[ChatMessage]) -> String {
    let users = || {
        messages.iter().filter_map(|m| match m {
            ChatMessage::User { content } => Some(content.as_str()),
            _ => None,
        })
    };
    users()
        .find_map(|u| u.strip_prefix(CUSTOMER_MESSAGE_MARKER))
        .or_else(|| users().next())
        .unwrap_or_default()
        .to_owned()
}

/// The catalogue to plan against: `request.tools`, else the `- name: description`
/// lines of the planning prompt.
fn plan_tools(request: &ChatRequest) -> Vec<ToolSpec> {
    if !request.tools.is_empty() {
        return request.tools.clone();
    }
    let system = request.messages.iter().find_map(|m| match m {
        ChatMessage::System { content } => Some(content.as_str()),
        _ => None,
    });
    let Some((_, list)) = system.and_then(|s| s.rsplit_once("Tools:\n")) else { return Vec::new() };
    list.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| {
            let (name, description) = l.split_once(": ").unwrap_or((l, ""));
            let name = name.trim();
            (!name.is_empty()).then(|| ToolSpec {
                name: name.to_owned(),
                description: description.trim().to_owned(),
                input_schema: serde_json::json!({"type": "object"}),
                side_effecting: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::prompts::plan_messages;

    #[test]
    fn the_plan_tools_are_read_back_from_the_prompt_when_none_are_sent() {
        let tools = vec![ToolSpec {
            name: "shop__get_order".into(),
            description: "Look up an order.".into(),
            input_schema: serde_json::json!({}),
            side_effecting: false,
        }];
        let request = ChatRequest {
            purpose: Purpose::Plan,
            messages: plan_messages("A1029?", &tools),
            tools: vec![],
            max_tokens: None,
            tool_choice: Default::default(),
        };
        let read = plan_tools(&request);
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].name, "shop__get_order");
        assert_eq!(read[0].description, "Look up an order.");
        assert_eq!(customer_query(&request.messages), "A1029?");
    }

    #[test]
    fn every_response_reports_unknown_usage() {
        let request = ChatRequest {
            purpose: Purpose::Compress,
            messages: vec![],
            tools: vec![],
            max_tokens: None,
            tool_choice: Default::default(),
        };
        let response = respond(&request);
        assert!(response.usage.is_empty());
        assert_eq!(response.finish_reason, FinishReason::Stop);
        assert_eq!(response.model, OFFLINE_MODEL_NAME);
    }
}
