//! Reading a chat request the way the mock needs: its messages, roles and texts, the tools offered, the subtask a work request is for, and an estimate of its prompt tokens.

use serde_json::Value;

pub(crate) fn messages(req: &Value) -> &[Value] {
    req.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

pub(crate) fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn text(m: &Value) -> &str {
    m.get("content").and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn last_user_text(req: &Value) -> String {
    let t = messages(req).iter().rev().find(|m| role(m) == "user").map_or("", text);
    t.chars().take(200).collect()
}

pub(crate) fn offered_tools(req: &Value) -> &[Value] {
    req.get("tools").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

pub(crate) fn has_tool_calls(m: &Value) -> bool {
    role(m) == "assistant" && m.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty())
}

/// Estimated prompt tokens: 4 ASCII characters or 1 other character make a token.
pub(crate) fn request_tokens(req: &Value) -> u64 {
    fn tokens(s: &str) -> u64 {
        let ascii = s.chars().filter(char::is_ascii).count() as u64;
        ascii.div_ceil(4) + (s.chars().count() as u64 - ascii)
    }
    messages(req)
        .iter()
        .map(|m| {
            4 + tokens(text(m))
                + m.get("reasoning_content").and_then(Value::as_str).map_or(0, tokens)
                + m.get("tool_calls").map_or(0, |c| tokens(&c.to_string()))
        })
        .sum::<u64>()
        + offered_tools(req).iter().map(|t| tokens(&t.to_string())).sum::<u64>()
}

/// The id of a work request's subtask (`Subtask w01: …` → `w01`).
pub(crate) fn subtask_id(req: &Value) -> Option<String> {
    messages(req).iter().rev().filter(|m| role(m) == "user").find_map(|m| {
        let rest = text(m).strip_prefix("Subtask ")?;
        Some(rest.split(':').next()?.trim().to_owned())
    })
}
