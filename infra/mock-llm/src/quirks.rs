//! The provider quirks that refuse a request (400 bodies in each provider's own words): unsupported parameters, OpenAI's schema rules, the context window, Bedrock-style tool history, Kimi's missing reasoning.

use serde_json::{Value, json};

use crate::config::Quirks;
use crate::request::{has_tool_calls, messages, offered_tools, request_tokens, role};

/// The 400 body a provider with these quirks answers `req` with, if it refuses it.
pub(crate) fn quirk_refusal(q: &Quirks, req: &Value) -> Option<Value> {
    let error = |message: String, code: &str| json!({"error": {"message": message, "type": "invalid_request_error", "code": code}});
    if q.reject_max_tokens && req.get("max_tokens").is_some() {
        return Some(error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
                .into(),
            "unsupported_parameter",
        ));
    }
    if q.strict_schemas {
        for t in offered_tools(req) {
            let name = t.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
            let params = t.pointer("/function/parameters").unwrap_or(&Value::Null);
            if let Some(context) = schema_problem(params, &mut Vec::new()) {
                return Some(error(
                    format!(
                        "Invalid schema for function '{name}': In context=({context}), schema must have a 'type' key."
                    ),
                    "invalid_function_parameters",
                ));
            }
        }
    }
    if let Some(window) = q.context_tokens {
        let used = request_tokens(req);
        if used > window {
            return Some(error(
                format!(
                    "This model's maximum context length is {window} tokens. However, your messages resulted in {used} tokens. Please reduce the length of the messages."
                ),
                "context_length_exceeded",
            ));
        }
    }
    let msgs = messages(req);
    if q.bedrock {
        let history = msgs.iter().any(|m| role(m) == "tool" || has_tool_calls(m));
        let tools_defined = !offered_tools(req).is_empty() && req.get("tool_choice") != Some(&json!("none"));
        if history && !tools_defined {
            return Some(
                json!({"error": {"message": "litellm.BadRequestError: BedrockException - {\"message\":\"The toolConfig field must be defined when using toolUse and toolResult content blocks.\"}", "type": null, "code": "400"}}),
            );
        }
    }
    if q.require_reasoning
        && let Some(index) =
            msgs.iter().position(|m| has_tool_calls(m) && !m.get("reasoning_content").is_some_and(Value::is_string))
    {
        return Some(error(
            format!(
                "thinking is enabled but reasoning_content is missing in assistant tool call message at index {index}"
            ),
            "invalid_request_error",
        ));
    }
    None
}

/// Where a tool's parameters break OpenAI's schema rules (`'properties', 'x'`), if anywhere.
fn schema_problem(schema: &Value, path: &mut Vec<String>) -> Option<String> {
    let context = |path: &[String]| path.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(", ");
    let Some(o) = schema.as_object() else { return Some(context(path)) };
    if path.is_empty() && o.get("type") != Some(&json!("object")) {
        return Some("'parameters'".into());
    }
    let typed = o.contains_key("type") || ["$ref", "anyOf", "oneOf", "allOf"].iter().any(|k| o.contains_key(*k));
    if !typed {
        return Some(context(path));
    }
    if o.get("type") == Some(&json!("array")) && !o.contains_key("items") {
        path.push("items".into());
        return Some(context(path));
    }
    for key in ["properties"] {
        if let Some(props) = o.get(key).and_then(Value::as_object) {
            for (name, prop) in props {
                path.extend([key.to_owned(), name.clone()]);
                if let Some(p) = schema_problem(prop, path) {
                    return Some(p);
                }
                path.truncate(path.len() - 2);
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = o.get(key).filter(|v| v.is_object()) {
            path.push(key.to_owned());
            if let Some(p) = schema_problem(sub, path) {
                return Some(p);
            }
            path.pop();
        }
    }
    None
}
