//! The generic agent's answers: tool calls for a work request, a final text after tool results, a plan for a plan request, a reply for a reply request — shaped by the provider quirks it emulates — and answers cut off by the output limit.

use serde_json::{Value, json};

use crate::config::{ANSWER_ROOM_TOKENS, AgentConfig};
use crate::request::{messages, role, subtask_id, text};
use crate::script::{customer_script, scripted_calls};

/// Opens the user message of a flattened round's tool results (as the swarm's client writes it).
const FLATTENED_RESULTS: &str = "Results of the tools called above:";
/// Opens the JSON of a reply request (as the swarm's aggregator writes it).
const REPLY_RESULTS: &str = "Subtask results (JSON):\n";
/// Opens the paragraph a reply request may end in (`swarm_core::prompts::REPLY_LANGUAGE_MARKER`).
const REPLY_LANGUAGE: &str = "\n\nReply language: ";

/// The agent's whole chat completion for `req`, the `seq`-th request, whose body was `body_len` bytes.
pub(crate) fn agent_answer(agent: &AgentConfig, req: &Value, seq: u64, body_len: usize) -> Value {
    let msgs = messages(req);
    let tools = req.get("tools").and_then(Value::as_array).filter(|t| !t.is_empty());
    let choice_none = req.get("tool_choice") == Some(&json!("none"));
    let results: Vec<&str> = msgs
        .iter()
        .filter(|m| role(m) == "tool" || (role(m) == "user" && text(m).starts_with(FLATTENED_RESULTS)))
        .map(text)
        .collect();
    let work = subtask_id(req).is_some();
    // A later round of a subtask scripted with several calls: the next one, after the rounds before answered.
    let rounds = msgs
        .iter()
        .filter(|m| role(m) == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()))
        .count();
    let later = (agent.plan_from_message && work && !results.is_empty() && !choice_none)
        .then(|| scripted_calls(req).into_iter().nth(rounds))
        .flatten();
    let (content, calls, finish) = match tools {
        Some(tools) if results.is_empty() && !choice_none => {
            (Value::Null, Some(tool_calls(agent, req, tools, seq)), "tool_calls")
        }
        Some(_) if later.is_some() => {
            let call = later.map(|(tool, args)| scripted(agent, tool, args, seq));
            (Value::Null, Some(call_values(call.into_iter().collect(), seq)), "tool_calls")
        }
        _ if tools.is_some() || !results.is_empty() || (work && choice_none) => {
            let text = agent.final_text.clone().unwrap_or_else(|| {
                let facts: Vec<String> = results.iter().map(|r| r.chars().take(2_000).collect()).collect();
                format!("Done: {}", facts.join(" | "))
            });
            (Value::String(text), None, "stop")
        }
        _ => (Value::String(plan_or_reply(agent, msgs)), None, "stop"),
    };
    completion(agent, req, seq, body_len, content, calls, finish)
}

/// The calls a work request gets, all in one answer: its configured subtask's, the one its
/// scripted instruction names, or one call of the first tool matching `tool_match`.
fn tool_calls(agent: &AgentConfig, req: &Value, tools: &[Value], seq: u64) -> Vec<Value> {
    let name_of = |t: &Value| t.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_owned();
    let planned = subtask_id(req)
        .and_then(|id| id.strip_prefix('w').and_then(|n| n.parse::<usize>().ok()))
        .and_then(|n| agent.subtasks.get(n.wrapping_sub(1)));
    let first = if agent.plan_from_message { scripted_calls(req).into_iter().next() } else { None };
    let calls: Vec<(String, String)> = match (planned, first) {
        (Some(s), _) if !s.calls.is_empty() => s.calls.iter().map(|(t, a)| (t.clone(), a.to_string())).collect(),
        (_, Some((tool, args))) => vec![scripted(agent, tool, args, seq)],
        _ => {
            let name =
                tools.iter().map(name_of).find(|n| n.contains(&agent.tool_match)).unwrap_or_else(|| name_of(&tools[0]));
            vec![(name, agent.tool_args.to_string())]
        }
    };
    call_values(calls, seq)
}

/// A scripted call as the agent makes it: its `reason` worded anew on every answer with `vary_reasons`.
fn scripted(agent: &AgentConfig, tool: String, mut args: Value, seq: u64) -> (String, String) {
    if agent.vary_reasons
        && let Some(Value::String(reason)) = args.get_mut("reason")
    {
        reason.push_str(&format!(" (draft {seq})"));
    }
    (tool, args.to_string())
}

/// `(tool, JSON arguments)` as the answer's `tool_calls`.
fn call_values(calls: Vec<(String, String)>, seq: u64) -> Vec<Value> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("call_{seq}_{i}"), "type": "function", "function": {"name": name, "arguments": args}})
        })
        .collect()
}

/// A request without tools: the plan (the system prompt asks for `"subtasks"`), the reply from
/// the results (with `reply_from_results`), or `reply_text`.
fn plan_or_reply(agent: &AgentConfig, msgs: &[Value]) -> String {
    let system = msgs.iter().find(|m| role(m) == "system").map_or("", text);
    let user = msgs.iter().rev().find(|m| role(m) == "user").map_or("", text);
    if system.contains("\"subtasks\"") {
        json!({ "subtasks": plan(agent, msgs) }).to_string()
    } else if agent.reply_from_results
        && let Some((_, json_text)) = user.rsplit_once(REPLY_RESULTS)
    {
        // The request may end in a paragraph naming the reply's language, after the JSON.
        reply_from_results(json_text.split_once(REPLY_LANGUAGE).map_or(json_text, |(json, _)| json))
    } else {
        agent.reply_text.clone()
    }
}

/// The subtasks of a plan: the customer's script, the configured subtasks, or `plan_subtasks` copies.
fn plan(agent: &AgentConfig, msgs: &[Value]) -> Vec<Value> {
    let script = if agent.plan_from_message { customer_script(msgs) } else { Vec::new() };
    if !script.is_empty() {
        script
            .iter()
            .map(|step| {
                let tools = step.tools();
                json!({"id": step.id, "instruction": step.instruction, "tools": tools, "depends_on": step.after})
            })
            .collect()
    } else if agent.subtasks.is_empty() {
        (1..=agent.plan_subtasks)
            .map(|i| json!({"id": format!("w{i:03}"), "instruction": agent.plan_instruction, "tools": [agent.plan_tool]}))
            .collect()
    } else {
        agent
            .subtasks
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut tools: Vec<&str> = s.calls.iter().map(|(t, _)| t.as_str()).collect();
                tools.dedup();
                json!({"id": format!("w{:02}", i + 1), "instruction": s.instruction, "tools": tools})
            })
            .collect()
    }
}

/// The chat completion around an answer, as the agent's quirks shape it: a thinking model's
/// reasoning, or — when the output limit leaves no room after its reasoning — reasoning only,
/// cut off with `finish_reason: "length"`.
fn completion(
    agent: &AgentConfig,
    req: &Value,
    seq: u64,
    body_len: usize,
    content: Value,
    tool_calls: Option<Vec<Value>>,
    finish: &'static str,
) -> Value {
    let q = &agent.quirks;
    let limit = req.get("max_tokens").or_else(|| req.get("max_completion_tokens")).and_then(Value::as_u64);
    let starved = q.thinking
        && q.reasoning_tokens.is_some_and(|r| limit.is_some_and(|l| l < u64::from(r) + u64::from(ANSWER_ROOM_TOKENS)));
    let mut completion_tokens = content.as_str().map_or(12, |c| c.len() / 4 + 1);
    let mut message = json!({"role": "assistant", "content": content});
    let finish = if starved {
        // The whole budget went to reasoning: no answer, no call.
        let spent = limit.unwrap_or(0) as usize;
        message = json!({"role": "assistant", "content": "", "reasoning_content": "Let me think about this step by step. ".repeat(spent / 9 + 1)});
        completion_tokens = spent;
        "length"
    } else {
        if let Some(calls) = tool_calls {
            message["tool_calls"] = Value::Array(calls);
        }
        if q.thinking {
            let thought =
                if finish == "tool_calls" { "I need facts: I will call the tools." } else { "I have what I need." };
            message["reasoning_content"] = Value::String(thought.into());
        }
        finish
    };
    json!({
        "id": format!("chatcmpl-mock-{seq}"),
        "object": "chat.completion",
        "created": 1_764_500_000u64,
        "model": req.get("model").and_then(Value::as_str).unwrap_or("mock-llm"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": body_len / 4 + 1,
            "completion_tokens": completion_tokens,
            "total_tokens": body_len / 4 + 1 + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    })
}

/// An answer cut off by the output limit: `finish_reason: "length"`, the last tool call's
/// arguments cut mid-JSON, or else the text halved.
pub(crate) fn truncate_answer(mut answer: Value) -> Value {
    let half = |s: &str| s.chars().take(s.chars().count() / 2).collect::<String>();
    if let Some(choice) = answer.pointer_mut("/choices/0") {
        choice["finish_reason"] = json!("length");
        let message = &mut choice["message"];
        let last_call = message.get_mut("tool_calls").and_then(Value::as_array_mut).and_then(|c| c.last_mut());
        if let Some(call) = last_call {
            let cut = half(call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or(""));
            call["function"]["arguments"] = Value::String(cut);
        } else {
            let cut = half(message.get("content").and_then(Value::as_str).unwrap_or(""));
            message["content"] = Value::String(cut);
        }
    }
    answer
}

/// The answers of a reply request's results, one per line.
fn reply_from_results(json_text: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(json_text) else { return "No results could be read.".into() };
    let lines: Vec<String> = v["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| match r["answer"].as_str() {
                    Some(a) => a.to_owned(),
                    None => format!("{}: could not be done", r["id"].as_str().unwrap_or("?")),
                })
                .collect()
        })
        .unwrap_or_default();
    lines.join("\n")
}
