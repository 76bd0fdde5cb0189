//! The offline reply writer and transcript compressor: subtask answers joined in plan order, plain sentences for what failed, and a label saying no LLM wrote it, in the language the request names.

use swarm_core::domain::truncate_chars;
use swarm_core::language::Language;
use swarm_core::ports::ChatMessage;
use swarm_core::prompts::{ReplyInput, ReplyItem, ReplyStatus, parse_reply_input};

use crate::intent::analyse;
use crate::lang::{greeting, offline_label, zh, zh_clause};
use crate::planner::{GREET_INSTRUCTION, HELP_INSTRUCTION};
use crate::render;
use crate::worker::{SUMMARY_ARROW, SUMMARY_BULLET};

/// Longest facts line of a compressed tool call.
const MAX_FACT_CHARS: usize = 300;
/// Longest compression summary.
const MAX_SUMMARY_CHARS: usize = 4_000;

/// The customer's reply from a reply request's messages.
pub(crate) fn reply(messages: &[ChatMessage]) -> String {
    let parsed = messages.iter().rev().find_map(|m| match m {
        ChatMessage::User { content } => parse_reply_input(content),
        _ => None,
    });
    let Some((query, input)) = parsed else {
        let label = offline_label(Language::English);
        return format!("I could not put an answer together right now; please ask again.\n\n{label}");
    };
    compose(&query, &input)
}

/// Succeeded answers in plan order, then one plain sentence per failed or
/// skipped subtask (never its `problem` text), then the notes, then the label; our sentences in
/// the language the input names, else the one the customer's message reads as.
pub(crate) fn compose(query: &str, input: &ReplyInput) -> String {
    let language = input.language.unwrap_or_else(|| Language::detect(query, None));
    let (greetings, work): (Vec<&ReplyItem>, Vec<&ReplyItem>) =
        input.results.iter().partition(|r| is_greeting(&r.instruction));
    let mut parts: Vec<String> = Vec::new();
    if work.is_empty() {
        let own = greetings.iter().find_map(|g| succeeded_answer(g));
        parts.push(own.map_or_else(|| greeting(language), str::to_owned));
    }
    for item in &work {
        match succeeded_answer(item) {
            Some(answer) => parts.push(answer.to_owned()),
            None => parts.push(could_not(&item.instruction, language)),
        }
    }
    for note in &input.notes {
        let note = note.trim();
        if !note.is_empty() {
            parts.push(note.to_owned());
        }
    }
    parts.push(offline_label(language).to_owned());
    parts.join("\n\n")
}

/// "I could not check whether coupon SAVE20 can be used right now." / "抱歉，暂时无法查询优惠券 SAVE20 能否使用。"
fn could_not(instruction: &str, language: Language) -> String {
    match zh_clause(instruction, language) {
        Some(clause) => zh!(language, "抱歉，暂时无法{clause}。", "抱歉，暫時無法{clause}。"),
        None => format!("I could not {} right now.", as_clause(instruction)),
    }
}

/// The answer the reply states: a succeeded subtask's, or our own sentence for a side effect
/// waiting for review or being confirmed.
fn succeeded_answer(item: &ReplyItem) -> Option<&str> {
    matches!(item.status, ReplyStatus::Succeeded | ReplyStatus::AwaitingApproval | ReplyStatus::Submitted)
        .then_some(item.answer.as_deref()?.trim())
        .filter(|a| !a.is_empty())
}

fn is_greeting(instruction: &str) -> bool {
    if instruction == GREET_INSTRUCTION || instruction == HELP_INSTRUCTION {
        return true;
    }
    let i = analyse(instruction).intents;
    i.greeting && !i.actionable()
}

/// "Check the status of order A1029." → "check the status of order A1029"; the
/// refund reason after ";" is dropped.
fn as_clause(instruction: &str) -> String {
    let head = instruction.split_once("; ").map_or(instruction, |(h, _)| h).trim();
    let head = head.trim_end_matches(['.', '。', '!', '！', '?', '？', ' ']);
    let mut chars = head.chars();
    match (chars.next(), chars.clone().next()) {
        (Some(first), second) if first.is_uppercase() && !second.is_some_and(char::is_uppercase) => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => head.to_owned(),
    }
}

/// A short deterministic summary of the tool calls in `messages`: one line per
/// call, `• <tool> <args JSON> → <facts>`, so a later round knows they were
/// made. Reads structured rounds as well as the text layout the transcript
/// compressor sends (`Called name(args)` / `Result of name: ...`), and keeps
/// the lines of an earlier summary.
pub(crate) fn compress(messages: &[ChatMessage]) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, content, .. } => {
                for c in tool_calls {
                    calls.push((c.id.clone(), c.name.clone(), c.arguments.clone()));
                }
                lines.extend(content.iter().flat_map(|c| from_text(c)));
            }
            ChatMessage::Tool { tool_call_id, content } => {
                if let Some((_, name, args)) = calls.iter().find(|(id, ..)| id == tool_call_id) {
                    lines.push(fact_line(name, args, content));
                }
            }
            ChatMessage::User { content } => lines.extend(from_text(content)),
            ChatMessage::System { .. } => {}
        }
    }
    if lines.is_empty() {
        let text: Vec<&str> = messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::User { content } => Some(content.as_str()),
                ChatMessage::Assistant { content, .. } => content.as_deref(),
                ChatMessage::Tool { content, .. } => Some(content.as_str()),
                ChatMessage::System { .. } => None,
            })
            .collect();
        let flat = text.join(" ").split_whitespace().collect::<Vec<_>>().join(" ");
        return truncate_chars(&format!("Earlier steps: {flat}"), 1_500);
    }
    let mut unique: Vec<String> = Vec::new();
    for l in lines {
        if !unique.contains(&l) {
            unique.push(l);
        }
    }
    truncate_chars(&format!("Facts from earlier tool calls:\n{}", unique.join("\n")), MAX_SUMMARY_CHARS)
}

/// `• <tool> <args JSON> → <facts>` for one call and its result.
fn fact_line(name: &str, args: &str, result: &str) -> String {
    let parsed = serde_json::from_str(args).unwrap_or(serde_json::Value::Null);
    // Facts for the model's own later rounds, in English whatever the conversation's language.
    let facts = render::render(None, &parsed, result, Language::English).join(" ").replace('\n', " ");
    let args = serde_json::to_string(&parsed).unwrap_or_else(|_| "null".into());
    format!("{SUMMARY_BULLET}{name} {args}{SUMMARY_ARROW}{}", truncate_chars(&facts, MAX_FACT_CHARS))
}

/// Facts lines from text: lines of an earlier summary as they are, and calls in
/// the compressor's layout (`Called name(args)`, then `Result of name: result`,
/// which may run over several lines).
fn from_text(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut current: Option<(String, String, String)> = None;
    let finish = |current: &mut Option<(String, String, String)>, out: &mut Vec<String>| {
        if let Some((name, args, result)) = current.take() {
            out.push(fact_line(&name, &args, &result));
        }
    };
    for line in text.lines() {
        if line.starts_with(SUMMARY_BULLET) && line.contains(SUMMARY_ARROW) {
            finish(&mut current, &mut out);
            out.push(line.to_owned());
        } else if let Some(call) = line.strip_prefix("Called ").filter(|c| c.ends_with(')')) {
            finish(&mut current, &mut out);
            if let Some((name, args)) = call.split_once('(') {
                pending.push((name.to_owned(), args[..args.len() - 1].to_owned()));
            }
        } else if let Some((name, result)) = line.strip_prefix("Result of ").and_then(|r| r.split_once(": ")) {
            finish(&mut current, &mut out);
            let args = match pending.iter().position(|(n, _)| n == name) {
                Some(at) => pending.remove(at).1,
                None => "{}".to_owned(),
            };
            current = Some((name.to_owned(), args, result.to_owned()));
        } else if line.starts_with("Note: ") || line.starts_with("Assistant: ") {
            finish(&mut current, &mut out);
        } else if let Some((_, _, result)) = current.as_mut() {
            result.push('\n');
            result.push_str(line);
        }
    }
    finish(&mut current, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::OFFLINE_LABEL;
    use swarm_core::ports::ToolCall;

    fn item(
        id: &str,
        instruction: &str,
        status: ReplyStatus,
        answer: Option<&str>,
        problem: Option<&str>,
    ) -> ReplyItem {
        ReplyItem {
            id: id.into(),
            instruction: instruction.into(),
            status,
            answer: answer.map(Into::into),
            problem: problem.map(Into::into),
        }
    }

    #[test]
    fn failed_subtasks_get_a_plain_sentence_never_their_problem_text() {
        let input = ReplyInput {
            results: vec![
                item(
                    "w01",
                    "Check the status of order A1029.",
                    ReplyStatus::Succeeded,
                    Some("Order A1029 is paid."),
                    None,
                ),
                item(
                    "w02",
                    "Check whether coupon SAVE20 can be used.",
                    ReplyStatus::Failed,
                    None,
                    Some("upstream 503 from gateway"),
                ),
                item(
                    "w03",
                    "Check whether SKU-1016 is in stock.",
                    ReplyStatus::Skipped,
                    None,
                    Some("dependency w02 failed"),
                ),
            ],
            notes: vec!["2 subtasks over the limit were dropped.".into()],
            language: None,
        };
        let reply = compose("q", &input);
        assert_eq!(
            reply,
            format!(
                "Order A1029 is paid.\n\nI could not check whether coupon SAVE20 can be used right now.\n\n\
                 I could not check whether SKU-1016 is in stock right now.\n\n2 subtasks over the limit were dropped.\n\n{OFFLINE_LABEL}"
            )
        );
        assert!(!reply.contains("503") && !reply.contains("dependency w02"));
    }

    #[test]
    fn a_refund_reason_is_not_repeated_in_a_failure_sentence() {
        assert_eq!(
            as_clause("Refund order A1016 if the shop allows it; the customer's reason: \"broken\"."),
            "refund order A1016 if the shop allows it"
        );
        assert_eq!(as_clause("SKU-1016 stock."), "SKU-1016 stock");
    }

    #[test]
    fn a_greeting_only_conversation_gets_a_greeting_and_the_label() {
        let input = ReplyInput {
            results: vec![item("w01", GREET_INSTRUCTION, ReplyStatus::Failed, None, Some("boom"))],
            notes: vec![],
            language: None,
        };
        let reply = compose("hi", &input);
        assert!(reply.starts_with("Hello! How can I help you today?"), "{reply}");
        assert!(reply.ends_with(OFFLINE_LABEL));
        assert!(!reply.contains("boom") && !reply.contains("could not"));
    }

    #[test]
    fn an_unreadable_reply_request_still_carries_the_label() {
        let reply = reply(&[ChatMessage::User { content: "garbage".into() }]);
        assert!(reply.ends_with(OFFLINE_LABEL));
    }

    #[test]
    fn compression_reads_the_transcript_compressors_text_layout() {
        let text = format!(
            "Note: Summary of earlier steps: Facts from earlier tool calls:\n{SUMMARY_BULLET}shop__x {{}}{SUMMARY_ARROW}old fact\n\
             Called shop__list_customer_orders({{}})\nCalled shop__get_order({{\"order_id\":\"A1003\"}})\n\
             Result of shop__list_customer_orders: {{\"orders\": []}}\nResult of shop__get_order: {{\"order_id\": \"A1003\",\n\"status\": \"SHIPPED\"}}\n"
        );
        let msgs = vec![ChatMessage::System { content: "prompt".into() }, ChatMessage::User { content: text }];
        assert_eq!(
            compress(&msgs),
            format!(
                "Facts from earlier tool calls:\n{SUMMARY_BULLET}shop__x {{}}{SUMMARY_ARROW}old fact\n\
                 {SUMMARY_BULLET}shop__list_customer_orders {{}}{SUMMARY_ARROW}You have no orders yet.\n\
                 {SUMMARY_BULLET}shop__get_order {{\"order_id\":\"A1003\"}}{SUMMARY_ARROW}Order A1003 is shipped."
            )
        );
    }

    #[test]
    fn compression_keeps_one_facts_line_per_call_and_earlier_summaries() {
        let msgs = vec![
            ChatMessage::User { content: format!("{SUMMARY_BULLET}shop__x {{}}{SUMMARY_ARROW}old fact") },
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "shop__get_order".into(),
                    arguments: r#"{"order_id":"A1029"}"#.into(),
                }],
                reasoning_content: None,
            },
            ChatMessage::Tool { tool_call_id: "c1".into(), content: r#"{"order_id":"A1029","status":"PAID"}"#.into() },
        ];
        assert_eq!(
            compress(&msgs),
            format!(
                "Facts from earlier tool calls:\n{SUMMARY_BULLET}shop__x {{}}{SUMMARY_ARROW}old fact\n\
                 {SUMMARY_BULLET}shop__get_order {{\"order_id\":\"A1029\"}}{SUMMARY_ARROW}Order A1029 is paid."
            )
        );
    }
}
