//! Lenient JSON recovery for model output: prose, code fences, trailing commas — but never guessed content.
//!
//! Models wrap JSON in prose and code fences and leave trailing commas. Those
//! are recovered here. A truncated object (unbalanced brackets, an open string)
//! is *not* completed: completing it would be guessing, and a guessed
//! argument must never reach a tool (DESIGN.md, invariant 4 and issue 5).

use serde_json::Value;

/// Why text could not be read as JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonFixError {
    #[error("no JSON object or array found in the text")]
    NotFound,
    #[error("the JSON is cut off (unbalanced brackets or an open string)")]
    Truncated,
    #[error("invalid JSON: {0}")]
    Invalid(String),
}

/// Finds the first complete JSON object or array in `text` — inside a
/// ```` ```json ```` fence if there is one, else the first balanced `{…}` / `[…]`
/// — removes trailing commas, and parses it.
pub fn extract_json(text: &str) -> Result<Value, JsonFixError> {
    let body = fenced_block(text).unwrap_or(text);
    let start = body.find(['{', '[']).ok_or(JsonFixError::NotFound)?;
    let end = balanced_end(&body[start..]).ok_or(JsonFixError::Truncated)?;
    parse_relaxed(&body[start..start + end])
}

/// Parses tool-call arguments: empty or whitespace means `{}`; trailing commas
/// are removed; the result must be a JSON object. Anything else is an error
/// (the call is then answered with an error tool message, not executed).
pub fn parse_tool_arguments(raw: &str) -> Result<serde_json::Map<String, Value>, JsonFixError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return Ok(serde_json::Map::new());
    }
    let start = trimmed.find(['{', '[']).ok_or(JsonFixError::NotFound)?;
    if !trimmed[..start].trim().is_empty() {
        return Err(JsonFixError::Invalid("text before the arguments object".into()));
    }
    let end = balanced_end(&trimmed[start..]).ok_or(JsonFixError::Truncated)?;
    if !trimmed[start + end..].trim().is_empty() {
        return Err(JsonFixError::Invalid("text after the arguments object".into()));
    }
    match parse_relaxed(&trimmed[start..start + end])? {
        Value::Object(map) => Ok(map),
        other => Err(JsonFixError::Invalid(format!("arguments must be an object, got {}", kind(&other)))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_relaxed(s: &str) -> Result<Value, JsonFixError> {
    match serde_json::from_str(s) {
        Ok(v) => Ok(v),
        Err(_) => serde_json::from_str(&strip_trailing_commas(s)).map_err(|e| JsonFixError::Invalid(e.to_string())),
    }
}

/// The content of the first ```` ``` ```` fenced block, if any.
fn fenced_block(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after = &text[open + 3..];
    // Skip the info string (e.g. `json`) up to the end of the line.
    let body_start = after.find('\n').map(|i| i + 1)?;
    let body = &after[body_start..];
    let close = body.find("```")?;
    Some(&body[..close])
}

/// Byte length of the balanced JSON value starting at `s[0]` (`{` or `[`),
/// honouring strings and escapes; `None` when it never closes.
fn balanced_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes commas that directly precede `}` or `]` (outside strings).
fn strip_trailing_commas(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|ch| !ch.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plan_is_recovered_from_prose_and_a_fence() {
        let text = "Sure! Here is the plan:\n```json\n{\"subtasks\": [{\"id\": \"w01\"}]}\n```\nLet me know.";
        assert_eq!(extract_json(text).unwrap(), json!({"subtasks": [{"id": "w01"}]}));
    }

    #[test]
    fn trailing_commas_are_removed_but_not_inside_strings() {
        let text = r#"{"subtasks": [{"id": "w01", "instruction": "a ,}", "tools": ["x"],},],}"#;
        let v = extract_json(text).unwrap();
        assert_eq!(v["subtasks"][0]["instruction"], "a ,}");
        assert_eq!(v["subtasks"][0]["tools"], json!(["x"]));
    }

    #[test]
    fn truncated_arguments_are_refused_not_completed() {
        assert_eq!(parse_tool_arguments(r#"{"order_id": "A10"#), Err(JsonFixError::Truncated));
    }

    #[test]
    fn empty_arguments_mean_an_empty_object() {
        assert!(parse_tool_arguments("").unwrap().is_empty());
        assert!(parse_tool_arguments("  ").unwrap().is_empty());
    }

    #[test]
    fn arguments_with_trailing_comma_are_accepted() {
        let m = parse_tool_arguments(r#"{"order_id": "A1029",}"#).unwrap();
        assert_eq!(m["order_id"], "A1029");
    }

    #[test]
    fn non_object_arguments_are_refused() {
        assert!(matches!(parse_tool_arguments("[1,2]"), Err(JsonFixError::Invalid(_))));
        assert!(matches!(parse_tool_arguments("order A1029"), Err(JsonFixError::NotFound)));
        assert!(matches!(parse_tool_arguments(r#"{"a":1} extra"#), Err(JsonFixError::Invalid(_))));
    }

    #[test]
    fn text_without_json_is_not_found() {
        assert_eq!(extract_json("no plan here"), Err(JsonFixError::NotFound));
    }
}
