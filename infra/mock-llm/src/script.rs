//! Customer messages the agent follows as scripts: each line `- <id>[ after <ids>]: <text>` a subtask, a `[call <tool> <JSON>]` at its end the call its worker makes (several: one per round, in order).

use serde_json::Value;

use crate::request::{messages, role, text};

/// Opens the user message that carries the customer's text (as the swarm's planner writes it).
const CUSTOMER_MESSAGE: &str = "Customer message:\n";
/// Opens a scripted call at the end of a step's text.
const CALL_OPEN: &str = "[call ";

/// One step of a customer message the agent follows ([`AgentConfig::plan_from_message`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptStep {
    /// The subtask id, e.g. `w03`.
    pub id: String,
    /// Ids of the steps this one needs first.
    pub after: Vec<String>,
    /// The subtask's instruction: the step's text, its `[call …]` included.
    pub instruction: String,
    /// `(tool, arguments)` of the call its worker makes, if any.
    pub call: Option<(String, Value)>,
    /// The calls its worker makes after that one, one per round, each after the round before
    /// answered (`[call …]`s after the first).
    pub then: Vec<(String, Value)>,
}

impl ScriptStep {
    /// A step with text `text` and, optionally, the call its worker makes.
    pub fn new(id: &str, after: &[&str], text: &str, call: Option<(&str, Value)>) -> Self {
        let instruction = match &call {
            Some((tool, args)) => format!("{text} {CALL_OPEN}{tool} {args}]"),
            None => text.to_owned(),
        };
        Self {
            id: id.to_owned(),
            after: after.iter().map(|a| (*a).to_owned()).collect(),
            instruction,
            call: call.map(|(t, a)| (t.to_owned(), a)),
            then: Vec::new(),
        }
    }

    /// The same step with one more call, made in the round after the calls before it answered.
    pub fn then_call(mut self, tool: &str, args: Value) -> Self {
        self.instruction = format!("{} {CALL_OPEN}{tool} {args}]", self.instruction);
        let call = (tool.to_owned(), args);
        match self.call {
            None => self.call = Some(call),
            Some(_) => self.then.push(call),
        }
        self
    }

    /// Every tool its worker calls, first call first, each once.
    pub fn tools(&self) -> Vec<&str> {
        let mut tools: Vec<&str> = Vec::new();
        for (t, _) in self.call.iter().chain(&self.then) {
            if !tools.contains(&t.as_str()) {
                tools.push(t);
            }
        }
        tools
    }

    /// The step as one line of a customer message: `- <id>[ after <ids>]: <instruction>`.
    pub fn line(&self) -> String {
        let after = if self.after.is_empty() { String::new() } else { format!(" after {}", self.after.join(",")) };
        format!("- {}{after}: {}", self.id, self.instruction)
    }
}

/// The steps a customer message scripts: every line `- <id>[ after <id>,<id>]: <text>`, where the
/// id is 1–16 ASCII letters or digits; a text ending in `[call <tool> <JSON object>]` names the
/// call. Other lines are ignored; a line whose call does not parse is a step without a call.
pub fn script_steps(text: &str) -> Vec<ScriptStep> {
    text.lines().filter_map(script_step).collect()
}

fn script_step(line: &str) -> Option<ScriptStep> {
    let (head, instruction) = line.trim().strip_prefix("- ")?.split_once(": ")?;
    let (id, after) = match head.split_once(" after ") {
        Some((id, after)) => (id, after.split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect()),
        None => (head, Vec::new()),
    };
    let id_ok = (1..=16).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric());
    if !id_ok {
        return None;
    }
    let instruction = instruction.trim().to_owned();
    let mut calls = parse_calls(&instruction).into_iter();
    let call = calls.next();
    Some(ScriptStep { id: id.to_owned(), after, instruction, call, then: calls.collect() })
}

/// The `[call <tool> <JSON object>]`s ending `text`, in order (none when the last does not parse).
fn parse_calls(text: &str) -> Vec<(String, Value)> {
    let mut calls = Vec::new();
    let mut rest = text.trim_end();
    while let Some(start) = rest.rfind(CALL_OPEN) {
        let Some(inner) = rest[start + CALL_OPEN.len()..].strip_suffix(']') else { break };
        let Some((tool, args)) = inner.split_once(' ') else { break };
        let Some(args) = serde_json::from_str::<Value>(args.trim()).ok().filter(Value::is_object) else { break };
        calls.push((tool.to_owned(), args));
        rest = rest[..start].trim_end();
    }
    calls.reverse();
    calls
}

/// The steps of the customer message of a plan request.
pub(crate) fn customer_script(msgs: &[Value]) -> Vec<ScriptStep> {
    msgs.iter()
        .filter(|m| role(m) == "user")
        .find_map(|m| text(m).strip_prefix(CUSTOMER_MESSAGE))
        .map(script_steps)
        .unwrap_or_default()
}

/// The calls a work request's subtask scripts, one per round: the `[call …]`s ending the first
/// line of its `Subtask <id>: <instruction>` message.
pub(crate) fn scripted_calls(req: &Value) -> Vec<(String, Value)> {
    let own = messages(req).iter().rev().filter(|m| role(m) == "user").find(|m| text(m).starts_with("Subtask "));
    own.and_then(|m| text(m).lines().next()).map(parse_calls).unwrap_or_default()
}
