//! What the mock is told to be: scripted answers or the generic agent (with its provider quirks), its latency and its injected faults.

use std::time::Duration;

use serde_json::{Value, json};

/// How the mock answers requests that no fault hit.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Answers from the queue, in order; once it is empty, 500 "script exhausted".
    Scripted(Vec<ScriptedResponse>),
    /// The generic agent ([`AgentConfig`]).
    Agent(AgentConfig),
}

/// One canned answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptedResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Error reading a case file line.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("line {line}: not JSON: {source}")]
    Json { line: usize, source: serde_json::Error },
    #[error("line {line}: {message}")]
    Shape { line: usize, message: String },
}

impl ScriptedResponse {
    /// A JSON answer with `content-type: application/json`.
    pub fn json(status: u16, body: &Value) -> Self {
        Self { status, headers: vec![("content-type".into(), "application/json".into())], body: body.to_string() }
    }

    /// From one case of `llm-responses.jsonl`: `{"status", "headers"?, "body"}`;
    /// a string body is sent as is, any other JSON body serialised (with
    /// `content-type: application/json` unless the case sets one).
    pub fn from_case(case: &Value) -> Result<Self, String> {
        let status = case
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (100..600).contains(s))
            .ok_or("missing or bad \"status\"")?;
        let mut headers: Vec<(String, String)> = match case.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                .collect(),
            Some(_) => return Err("\"headers\" must be an object".into()),
        };
        let body = match case.get("body") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                if !headers.iter().any(|(k, _)| k == "content-type") {
                    headers.push(("content-type".into(), "application/json".into()));
                }
                other.to_string()
            }
        };
        Ok(Self { status, headers, body })
    }
}

/// Reads a JSON-lines case file: `(name, response)` per non-empty line.
pub fn load_cases(text: &str) -> Result<Vec<(String, ScriptedResponse)>, CaseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|source| CaseError::Json { line: i + 1, source })?;
        let name = v.get("name").and_then(Value::as_str).unwrap_or("").to_owned();
        let r = ScriptedResponse::from_case(&v).map_err(|message| CaseError::Shape { line: i + 1, message })?;
        out.push((name, r));
    }
    Ok(out)
}

/// The generic agent used by swarm benchmarks and whole-conversation tests.
///
/// - a plan request (no tools, the system prompt contains `"subtasks"`): the
///   configured [`subtasks`](Self::subtasks) as `w01`, `w02`…, or else a plan of
///   `plan_subtasks` subtasks `{"id":"w001","instruction":plan_instruction,"tools":[plan_tool]}`;
/// - a work request with tools, no tool result yet and `tool_choice` not `"none"`:
///   the calls of its configured subtask (the `Subtask wNN:` message names it),
///   all in one answer, or else one call of the first tool whose name contains
///   `tool_match` (else the first tool) with `tool_args`;
/// - a work request after tool results (as `tool` messages, or flattened into a
///   user message) or with `tool_choice: "none"`: `final_text`, or
///   `"Done: <each tool result, at most 2,000 characters, joined by \" | \">"`;
/// - a reply request (`Subtask results (JSON):`) with `reply_from_results`: the
///   results' answers, one per line (a failed one as `<id>: could not be done`);
/// - otherwise `reply_text`.
///
/// With [`plan_from_message`](Self::plan_from_message), the customer's message is a
/// script the agent follows ([`script_steps`]): each line `- <id>[ after <id>,<id>]: <text>`
/// becomes a subtask (`depends_on` from `after`), and a `[call <tool> <JSON arguments>]` at the
/// end of its text is the call its worker makes (the instruction keeps it, so the work
/// request carries it back). [`vary_reasons`](Self::vary_reasons) makes free text differ
/// between two answers to the same request, as a real model's does.
///
/// [`quirks`](Self::quirks) make it behave like a particular provider.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub tool_match: String,
    pub tool_args: Value,
    pub final_text: Option<String>,
    pub plan_subtasks: usize,
    pub plan_instruction: String,
    pub plan_tool: String,
    pub reply_text: String,
    /// Planned instead of `plan_subtasks` copies when not empty.
    pub subtasks: Vec<AgentSubtask>,
    pub reply_from_results: bool,
    /// Plan (and call) what the customer's message scripts, when it scripts anything.
    pub plan_from_message: bool,
    /// A `reason` argument of a scripted call gets ` (draft <request seq>)` appended: the
    /// free text of two answers to the same request differs, as a real model's does.
    pub vary_reasons: bool,
    pub quirks: Quirks,
}

/// One subtask the agent plans, and the tool calls it makes for it (in one answer).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSubtask {
    pub instruction: String,
    /// `(tool name, arguments)`.
    pub calls: Vec<(String, Value)>,
}

impl AgentSubtask {
    pub fn new(instruction: &str, calls: &[(&str, Value)]) -> Self {
        Self {
            instruction: instruction.to_owned(),
            calls: calls.iter().map(|(t, a)| ((*t).to_owned(), a.clone())).collect(),
        }
    }
}

/// Provider behaviour the agent emulates; each is off by default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quirks {
    /// A thinking model: every answer carries `reasoning_content`, tool-call answers included.
    pub thinking: bool,
    /// Kimi's thinking models: an assistant tool-call message sent back without
    /// `reasoning_content` is answered 400 "thinking is enabled but reasoning_content
    /// is missing in assistant tool call message at index N".
    pub require_reasoning: bool,
    /// Tokens a thinking answer spends on reasoning first: a request whose output limit
    /// (`max_tokens` or `max_completion_tokens`) leaves less than [`ANSWER_ROOM_TOKENS`]
    /// after it is answered `finish_reason: "length"` with reasoning only.
    pub reasoning_tokens: Option<u32>,
    /// A Bedrock-style gateway: a transcript with tool calls or results but no tool
    /// definitions is answered 400 "The toolConfig field must be defined…"; like such
    /// gateways, it drops the tools of a `tool_choice: "none"` request (Bedrock has no "none").
    pub bedrock: bool,
    /// Context window, estimated tokens (4 ASCII characters or 1 other character make a
    /// token): a longer request is answered 400 `context_length_exceeded`.
    pub context_tokens: Option<u64>,
    /// Newer OpenAI models: `max_tokens` is answered 400 "Unsupported parameter".
    pub reject_max_tokens: bool,
    /// OpenAI's schema check: a tool whose parameters have a non-object root, a property
    /// without `type` or an array without `items` is answered 400 "Invalid schema for function".
    pub strict_schemas: bool,
}

/// Tokens a thinking answer needs after its reasoning ([`Quirks::reasoning_tokens`]).
pub const ANSWER_ROOM_TOKENS: u32 = 256;

impl Quirks {
    /// A named provider: `kimi-thinking` (reasoning every turn, 400 without it, 3,000
    /// tokens of reasoning), `bedrock`, `openai-reasoning` (refuses `max_tokens`, 3,000
    /// tokens of reasoning), `openai-strict` (schema check), `none`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "kimi-thinking" => {
                Self { thinking: true, require_reasoning: true, reasoning_tokens: Some(3_000), ..Self::default() }
            }
            "bedrock" => Self { bedrock: true, ..Self::default() },
            "openai-reasoning" => Self { reject_max_tokens: true, reasoning_tokens: Some(3_000), ..Self::default() },
            "openai-strict" => Self { strict_schemas: true, ..Self::default() },
            "none" => Self::default(),
            _ => return None,
        })
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            tool_match: "get_order".into(),
            tool_args: json!({"order_id": "A1029"}),
            final_text: None,
            plan_subtasks: 3,
            plan_instruction: "Check order A1029".into(),
            plan_tool: "shop__get_order".into(),
            reply_text: "Here is what we found about your request.".into(),
            subtasks: Vec::new(),
            reply_from_results: false,
            plan_from_message: false,
            vary_reasons: false,
            quirks: Quirks::default(),
        }
    }
}

/// Time taken before answering.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Latency {
    #[default]
    None,
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform {
        min: Duration,
        max: Duration,
    },
}

/// Injected faults: each a probability in `[0, 1]` per request (their sum ≤ 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    /// 429 with `retry_after`.
    pub rate_limit: f64,
    /// Sent as `retry-after` (whole seconds) or `retry-after-ms`; `None` sends neither.
    pub retry_after: Option<Duration>,
    /// 500 with a JSON error or 502 with an HTML body.
    pub server_error: f64,
    /// No answer for `hang_for`, then 504.
    pub hang: f64,
    pub hang_for: Duration,
    /// 200 with a truncated JSON body.
    pub malformed: f64,
    /// Agent mode: the answer cut off by the output limit (`finish_reason: "length"`): its text
    /// halved, or its last tool call's arguments cut mid-JSON. Scripted mode answers as usual.
    pub truncated: f64,
    /// Space each kind's faults instead of drawing a fate per request: a kind of rate `r` comes
    /// every `1/r` requests times a factor drawn from `[0.5, 1.5]` (its own seeded stream), the
    /// first within `1/r` requests — so `n ≥ 1/r` requests always see it. A kind due while
    /// another is injected waits for the next request.
    pub spaced: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rate_limit: 0.0,
            retry_after: Some(Duration::from_secs(1)),
            server_error: 0.0,
            hang: 0.0,
            hang_for: Duration::from_secs(600),
            malformed: 0.0,
            truncated: 0.0,
            spaced: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct MockConfig {
    pub seed: u64,
    pub mode: Mode,
    pub latency: Latency,
    pub faults: Faults,
    /// Keep request bodies for [`MockHandle::bodies`] (at most 10,000).
    pub record_bodies: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            mode: Mode::Agent(AgentConfig::default()),
            latency: Latency::None,
            faults: Faults::default(),
            record_bodies: true,
        }
    }
}

impl MockConfig {
    /// Scripted mode with these answers, no latency, no faults.
    pub fn scripted(responses: Vec<ScriptedResponse>) -> Self {
        Self { mode: Mode::Scripted(responses), ..Self::default() }
    }
}
