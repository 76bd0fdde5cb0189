//! Transcript care: the tool-call/result pairing check, context compression at turn boundaries, the per-round budget of tool results, and tool history flattened to text.
//!
//! Invariant 4 (DESIGN.md): every assistant `tool_calls` entry gets exactly
//! one `tool` message with its `tool_call_id`, in the order of the calls,
//! before the next assistant or user message; compression never separates a
//! call from its result.

use tokio::time::Instant;

use crate::domain::truncate_chars;
use crate::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use crate::ports::{ChatMessage, ChatModel, ChatRequest, LlmError, Purpose, ToolCall};
use crate::prompts::COMPRESS_PROMPT;

/// Opens the user message that replaces compressed rounds.
pub const SUMMARY_MARKER: &str = "Summary of earlier steps: ";
/// Longest text of one message shown to the compressing model, characters.
const MAX_RENDERED_CHARS: usize = 4_000;
/// Upper bound on the summary's length, tokens.
const MAX_SUMMARY_TOKENS: u32 = 1_024;

/// A broken tool-call transcript; `index` is the position of the offending
/// message. Permanent: the transcript must be repaired, not re-sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    /// A call has no `tool` message before the next assistant/user/system message (or the end).
    #[error("tool call {id:?} of message {index} has no result")]
    MissingResult { index: usize, id: String },
    /// A `tool` message answers no open call of the preceding assistant message.
    #[error("tool message {index} answers no open call (tool_call_id {id:?})")]
    OrphanResult { index: usize, id: String },
    /// A second `tool` message for the same call.
    #[error("tool message {index} answers call {id:?} a second time")]
    DuplicateResult { index: usize, id: String },
    /// Results not in the order of the calls.
    #[error("tool message {index} answers {found:?} but the next call to answer is {expected:?}")]
    OutOfOrder { index: usize, expected: String, found: String },
    /// Two calls of one assistant message share an id, or an id is empty.
    #[error("assistant message {index} has an empty or repeated tool call id {id:?}")]
    BadCallId { index: usize, id: String },
}

/// Makes the ids of one assistant message's tool calls unique before anything runs: a missing
/// (empty) id, or one an earlier call of the same message already has, becomes `call_r<round>_<position>`
/// (with `_` added until no call of the message has it). Ids that are fine stay verbatim, so a
/// provider gets its own ids back. Returns how many ids were replaced. Every call then gets exactly
/// one `tool` message, and [`check_pairing`] holds, whatever ids the provider sent.
pub fn unique_tool_call_ids(calls: &mut [ToolCall], round: u32) -> usize {
    let mut replaced = 0;
    for i in 0..calls.len() {
        let (earlier, rest) = calls.split_at_mut(i);
        let call = &mut rest[0];
        if !call.id.is_empty() && !earlier.iter().any(|c| c.id == call.id) {
            continue;
        }
        let mut id = format!("call_r{round}_{i}");
        while earlier.iter().any(|c| c.id == id) || rest[1..].iter().any(|c| c.id == id) {
            id.push('_');
        }
        rest[0].id = id;
        replaced += 1;
    }
    replaced
}

/// Checks the OpenAI tool-call pairing: every assistant `tool_calls` entry is
/// answered by exactly one following `tool` message with its id, in call
/// order, before the next assistant/user/system message; no orphan tool
/// message; call ids within one message non-empty and distinct.
pub fn check_pairing(messages: &[ChatMessage]) -> Result<(), PairingError> {
    // Open calls of the latest assistant message: (message index, ids), next to answer.
    let mut open: Option<(usize, Vec<&str>, usize)> = None;
    let close = |open: &mut Option<(usize, Vec<&str>, usize)>| -> Result<(), PairingError> {
        if let Some((index, ids, next)) = open.take()
            && let Some(id) = ids.get(next)
        {
            return Err(PairingError::MissingResult { index, id: (*id).to_owned() });
        }
        Ok(())
    };
    for (i, m) in messages.iter().enumerate() {
        match m {
            ChatMessage::Tool { tool_call_id, .. } => {
                let Some((_, ids, next)) = open.as_mut() else {
                    return Err(PairingError::OrphanResult { index: i, id: tool_call_id.clone() });
                };
                match ids.iter().position(|id| id == tool_call_id) {
                    Some(p) if p == *next => *next += 1,
                    Some(p) if p < *next => {
                        return Err(PairingError::DuplicateResult { index: i, id: tool_call_id.clone() });
                    }
                    Some(_) => {
                        return Err(PairingError::OutOfOrder {
                            index: i,
                            expected: ids[*next].to_owned(),
                            found: tool_call_id.clone(),
                        });
                    }
                    None => return Err(PairingError::OrphanResult { index: i, id: tool_call_id.clone() }),
                }
            }
            ChatMessage::Assistant { tool_calls, .. } => {
                close(&mut open)?;
                let ids: Vec<&str> = tool_calls.iter().map(|c| c.id.as_str()).collect();
                for (k, id) in ids.iter().enumerate() {
                    if id.is_empty() || ids[..k].contains(id) {
                        return Err(PairingError::BadCallId { index: i, id: (*id).to_owned() });
                    }
                }
                if !ids.is_empty() {
                    open = Some((i, ids, 0));
                }
            }
            ChatMessage::User { .. } | ChatMessage::System { .. } => close(&mut open)?,
        }
    }
    close(&mut open)
}

/// Rough token estimate of a transcript, for budget decisions only: per
/// message 4 tokens of overhead plus its text (content, reasoning, each tool
/// call's name and arguments, 4 more per call), where 4 ASCII characters make
/// one token and every other character is one token (CJK text runs near one
/// token per character); plus 3 tokens of reply priming. Overestimates
/// English slightly, which is the safe side for a budget.
pub fn estimate_tokens(messages: &[ChatMessage]) -> u64 {
    let text = estimate_text_tokens;
    3 + messages
        .iter()
        .map(|m| {
            4 + match m {
                ChatMessage::System { content } | ChatMessage::User { content } => text(content),
                ChatMessage::Tool { tool_call_id, content } => text(tool_call_id) + text(content),
                ChatMessage::Assistant { content, tool_calls, reasoning_content } => {
                    content.as_deref().map_or(0, text)
                        + reasoning_content.as_deref().map_or(0, text)
                        + tool_calls.iter().map(|c| 4 + text(&c.id) + text(&c.name) + text(&c.arguments)).sum::<u64>()
                }
            }
        })
        .sum::<u64>()
}

/// Estimated tokens of one text, by [`estimate_tokens`]'s rule: 4 ASCII characters make one
/// token, every other character is one.
pub fn estimate_text_tokens(s: &str) -> u64 {
    let (mut ascii, mut other) = (0u64, 0u64);
    for c in s.chars() {
        if c.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
    }
    ascii.div_ceil(4) + other
}

/// `true` when the transcript holds an assistant tool call or a tool result: a request carrying
/// it must also carry the tool definitions, or have that history flattened to text.
pub fn has_tool_history(messages: &[ChatMessage]) -> bool {
    messages.iter().any(|m| match m {
        ChatMessage::Assistant { tool_calls, .. } => !tool_calls.is_empty(),
        ChatMessage::Tool { .. } => true,
        _ => false,
    })
}

/// Opens the user message that carries one round's tool results in a flattened transcript.
pub const FLATTENED_RESULTS_MARKER: &str = "Results of the tools called above:";

/// The transcript with its tool history as plain text, for a provider that must get no tool
/// definitions (or cannot take `tool_choice: "none"`) on this request: each assistant tool-call
/// message becomes an assistant message saying which tools it called with which arguments, and the
/// `tool` messages that answer it become one user message opening with
/// [`FLATTENED_RESULTS_MARKER`], one `- <tool> (<tool_call_id>): <result>` line per call, in call
/// order. Reasoning stays on its assistant message; every other message is unchanged. The result
/// holds no tool call and no tool message, so [`check_pairing`] holds trivially.
pub fn flatten_tool_history(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut names: Vec<(&str, &str)> = Vec::new();
    let mut results: Option<String> = None;
    for m in messages {
        if let ChatMessage::Tool { tool_call_id, content } = m {
            let name = names.iter().rev().find(|(id, _)| id == tool_call_id).map_or("tool", |(_, n)| n);
            let block = results.get_or_insert_with(|| FLATTENED_RESULTS_MARKER.to_owned());
            block.push_str(&format!("\n- {name} ({tool_call_id}): {content}"));
            continue;
        }
        if let Some(block) = results.take() {
            out.push(ChatMessage::User { content: block });
        }
        match m {
            ChatMessage::Assistant { content, tool_calls, reasoning_content } if !tool_calls.is_empty() => {
                let mut text = content.as_deref().map(str::trim).filter(|c| !c.is_empty()).unwrap_or("").to_owned();
                for c in tool_calls {
                    names.push((&c.id, &c.name));
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    let args = if c.arguments.trim().is_empty() { "{}" } else { c.arguments.as_str() };
                    text.push_str(&format!("[called {} with {args}]", c.name));
                }
                out.push(ChatMessage::Assistant {
                    content: Some(text),
                    tool_calls: Vec::new(),
                    reasoning_content: reasoning_content.clone(),
                });
            }
            other => out.push(other.clone()),
        }
    }
    if let Some(block) = results {
        out.push(ChatMessage::User { content: block });
    }
    out
}

/// Opens the note that ends a tool result cut to fit its round's budget.
const CUT_NOTE_OPEN: &str = "\n…[cut to fit the context: ";
/// Fewest tokens a cut result keeps besides its note, however small the budget.
const MIN_CUT_TOKENS: u64 = 48;

/// Shrinks the tool results of one round so that together they fit `budget_tokens`
/// ([`estimate_text_tokens`]), fairly: results within the fair share stay whole, and every larger
/// one is cut to the same share (max-min fairness), ending with a note that says how many of its
/// characters are shown — so the model knows the result was cut and can ask for less. A result
/// cut before is cut again from its shown text, its note counting from the original length. Each
/// cut result keeps at least [`MIN_CUT_TOKENS`] tokens besides its note, so a budget too small
/// for that is exceeded by the difference. Returns how many results were cut.
pub fn fit_round(contents: &mut [String], budget_tokens: u64) -> usize {
    let sizes: Vec<u64> = contents.iter().map(|c| estimate_text_tokens(c)).collect();
    if sizes.iter().sum::<u64>() <= budget_tokens {
        return 0;
    }
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    let mut left = budget_tokens;
    let mut open = sorted.len() as u64;
    let mut share = left / open.max(1);
    for size in sorted {
        share = left / open.max(1);
        if size > share {
            break;
        }
        left -= size;
        open -= 1;
    }
    let mut cut = 0;
    for (content, size) in contents.iter_mut().zip(sizes) {
        if size > share {
            *content = cut_to_tokens(content, share);
            cut += 1;
        }
    }
    cut
}

/// `text` cut to about `max_tokens` tokens, its cut note included (see [`fit_round`]).
fn cut_to_tokens(text: &str, max_tokens: u64) -> String {
    let (body, total_chars) = match text.rfind(CUT_NOTE_OPEN) {
        Some(i) => {
            let total = text[i + CUT_NOTE_OPEN.len()..]
                .split_whitespace()
                .nth(2)
                .and_then(|t| t.replace(',', "").parse::<usize>().ok());
            match total {
                Some(total) => (&text[..i], total),
                None => (text, text.chars().count()),
            }
        }
        None => (text, text.chars().count()),
    };
    let note_tokens = estimate_text_tokens(&cut_note(total_chars, total_chars));
    let keep = max_tokens.saturating_sub(note_tokens).max(MIN_CUT_TOKENS);
    let (mut ascii, mut other, mut shown, mut end) = (0u64, 0u64, 0usize, 0usize);
    for (i, c) in body.char_indices() {
        if c.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
        if ascii.div_ceil(4) + other > keep {
            break;
        }
        shown += 1;
        end = i + c.len_utf8();
    }
    format!("{}{}", &body[..end], cut_note(shown, total_chars))
}

fn cut_note(shown: usize, total: usize) -> String {
    format!("{CUT_NOTE_OPEN}{shown} of {total} characters shown; ask for less if the rest is needed]")
}

/// The tool results of the latest tool round (the `tool` messages after the last assistant
/// tool-call message): their estimated tokens together, and their indices.
pub fn latest_round(messages: &[ChatMessage]) -> (u64, Vec<usize>) {
    let Some(start) =
        messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
    else {
        return (0, Vec::new());
    };
    let indices: Vec<usize> =
        (start + 1..messages.len()).take_while(|&i| matches!(messages[i], ChatMessage::Tool { .. })).collect();
    let tokens = indices
        .iter()
        .map(|&i| match &messages[i] {
            ChatMessage::Tool { content, .. } => estimate_text_tokens(content),
            _ => 0,
        })
        .sum();
    (tokens, indices)
}

/// Cuts the tool results of the latest tool round to `budget_tokens` together ([`fit_round`]).
/// Returns how many were cut (0: the round already fits, or there is none). Pairing is untouched:
/// only the contents of `tool` messages change.
pub fn shrink_latest_round(messages: &mut [ChatMessage], budget_tokens: u64) -> usize {
    let (_, indices) = latest_round(messages);
    let mut contents: Vec<String> = indices
        .iter()
        .map(|&i| match &messages[i] {
            ChatMessage::Tool { content, .. } => content.clone(),
            _ => String::new(),
        })
        .collect();
    let cut = fit_round(&mut contents, budget_tokens);
    if cut > 0 {
        for (&i, text) in indices.iter().zip(contents) {
            if let ChatMessage::Tool { content, .. } = &mut messages[i] {
                *content = text;
            }
        }
    }
    cut
}

/// If `messages` exceed `budget_tokens` ([`estimate_tokens`]), replaces the
/// oldest whole rounds after the first `keep_leading` messages (the
/// provider's prefix-cache prefix and the subtask) — an assistant tool-call
/// message always together with all its tool results, never the latest round
/// — by one user message `"Summary of earlier steps: ..."` written by `sub`
/// (`Purpose::Compress`, retried within `deadline`). As few rounds as needed
/// to fit are replaced (all older ones when even that does not fit); an
/// earlier summary is summarised again with them. Below budget, or with
/// nothing to replace, returns the input unchanged. The latest round is never
/// summarised (the model is about to read it); when it alone is too large,
/// [`shrink_latest_round`] cuts its tool results instead.
///
/// The result passes [`check_pairing`] whenever the input did. Errors: the
/// sub model's [`CallError`]; a result that fails the pairing check (the
/// input was already broken) as `CallError::Failed(LlmError::Permanent)` with
/// status 0.
pub async fn compress(
    messages: &[ChatMessage],
    keep_leading: usize,
    budget_tokens: u64,
    sub: &dyn ChatModel,
    deadline: Instant,
) -> Result<Vec<ChatMessage>, CallError> {
    let total = estimate_tokens(messages);
    if total <= budget_tokens || keep_leading >= messages.len() {
        return Ok(messages.to_vec());
    }
    let units = rounds(messages, keep_leading);
    // The latest round (the last assistant tool-call round, with whatever follows it) stays.
    let Some(last_round) = units.iter().rposition(|u| u.is_tool_round) else {
        return Ok(messages.to_vec());
    };
    if last_round == 0 {
        return Ok(messages.to_vec());
    }
    // Smallest number of oldest units whose replacement brings the estimate under budget.
    let summary_allowance = u64::from(MAX_SUMMARY_TOKENS) / 2 + 8;
    let mut take = last_round;
    let mut removed = 0u64;
    for (k, u) in units[..last_round].iter().enumerate() {
        removed += estimate_tokens(&messages[u.start..u.end]) - 3;
        if total - removed + summary_allowance <= budget_tokens {
            take = k + 1;
            break;
        }
    }
    let cut = units[take - 1].end;
    let old = &messages[keep_leading..cut];

    let request = ChatRequest {
        purpose: Purpose::Compress,
        messages: vec![
            ChatMessage::System { content: COMPRESS_PROMPT.to_owned() },
            ChatMessage::User { content: render(old) },
        ],
        tools: Vec::new(),
        max_tokens: Some(MAX_SUMMARY_TOKENS),
        tool_choice: Default::default(),
    };
    let response = complete_with_retry(sub, &request, &LlmRetryPolicy::default(), deadline).await?;
    let summary = response.content.unwrap_or_else(|| digest(old));

    let mut out = Vec::with_capacity(messages.len() - (cut - keep_leading) + 1);
    out.extend_from_slice(&messages[..keep_leading]);
    out.push(ChatMessage::User { content: format!("{SUMMARY_MARKER}{}", summary.trim()) });
    out.extend_from_slice(&messages[cut..]);
    check_pairing(&out).map_err(|e| {
        CallError::Failed(LlmError::Permanent { status: 0, message: format!("transcript pairing broken: {e}") })
    })?;
    tracing::debug!(
        model = %sub.label(),
        before_tokens = total,
        after_tokens = estimate_tokens(&out),
        replaced_messages = cut - keep_leading,
        "transcript compressed"
    );
    Ok(out)
}

/// A run of messages that must stay together: an assistant tool-call message
/// with its tool results, or any other single message.
struct Unit {
    start: usize,
    end: usize,
    is_tool_round: bool,
}

fn rounds(messages: &[ChatMessage], from: usize) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut i = from;
    while i < messages.len() {
        let start = i;
        let is_tool_round = matches!(&messages[i], ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty());
        i += 1;
        // Tool messages belong to the round before them (also stray ones, so a cut never lands on one).
        while i < messages.len() && matches!(messages[i], ChatMessage::Tool { .. }) {
            i += 1;
        }
        units.push(Unit { start, end: i, is_tool_round });
    }
    units
}

/// The rounds as plain text for the compressing model.
fn render(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    let mut names: Vec<(&str, &str)> = Vec::new();
    for m in messages {
        match m {
            ChatMessage::System { content } | ChatMessage::User { content } => {
                out.push_str("Note: ");
                out.push_str(&truncate_chars(content, MAX_RENDERED_CHARS));
            }
            ChatMessage::Assistant { content, tool_calls, .. } => {
                if let Some(c) = content.as_deref().filter(|c| !c.trim().is_empty()) {
                    out.push_str("Assistant: ");
                    out.push_str(&truncate_chars(c, MAX_RENDERED_CHARS));
                    out.push('\n');
                }
                for c in tool_calls {
                    names.push((&c.id, &c.name));
                    out.push_str(&format!("Called {}({})\n", c.name, truncate_chars(&c.arguments, 500)));
                }
                out.pop();
            }
            ChatMessage::Tool { tool_call_id, content } => {
                let name = names.iter().rev().find(|(id, _)| id == tool_call_id).map_or("tool", |(_, n)| n);
                out.push_str(&format!("Result of {name}: {}", truncate_chars(content, MAX_RENDERED_CHARS)));
            }
        }
        out.push('\n');
    }
    out
}

/// A mechanical summary when the sub model answered with no text.
fn digest(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => {
                for c in tool_calls {
                    out.push_str(&format!("called {}({}); ", c.name, truncate_chars(&c.arguments, 200)));
                }
            }
            ChatMessage::Tool { content, .. } => {
                out.push_str(&format!("result: {}; ", truncate_chars(content, 200)));
            }
            ChatMessage::User { content } | ChatMessage::System { content } => {
                out.push_str(&format!("{}; ", truncate_chars(content, 200)));
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;
    use crate::ports::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "get_order".into(), arguments: "{}".into() }
    }

    #[test]
    fn estimate_counts_cjk_characters_as_whole_tokens() {
        let ascii = [ChatMessage::User { content: "a".repeat(400) }];
        let cjk = [ChatMessage::User { content: "订".repeat(400) }];
        assert_eq!(estimate_tokens(&ascii), 3 + 4 + 100);
        assert_eq!(estimate_tokens(&cjk), 3 + 4 + 400);
    }

    #[test]
    fn rounds_keep_tool_results_with_their_call() {
        let m = vec![
            ChatMessage::User { content: "x".into() },
            ChatMessage::Assistant { content: None, tool_calls: vec![call("a"), call("b")], reasoning_content: None },
            ChatMessage::Tool { tool_call_id: "a".into(), content: "1".into() },
            ChatMessage::Tool { tool_call_id: "b".into(), content: "2".into() },
            ChatMessage::Assistant { content: Some("done".into()), tool_calls: vec![], reasoning_content: None },
        ];
        let u = rounds(&m, 1);
        assert_eq!(
            u.iter().map(|u| (u.start, u.end, u.is_tool_round)).collect::<Vec<_>>(),
            vec![(1, 4, true), (4, 5, false)]
        );
    }
}
