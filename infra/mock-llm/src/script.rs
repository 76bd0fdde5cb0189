//! Customer messages the agent follows as scripts: each line `- <id>[ after <ids>]: <text>` a subtask, a `[call <tool> <JSON>]` at its end the call its worker makes.

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
        }
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
    let call = parse_call(&instruction);
    Some(ScriptStep { id: id.to_owned(), after, instruction, call })
}

/// The `[call <tool> <JSON object>]` at the end of `text`, if there is one.
fn parse_call(text: &str) -> Option<(String, Value)> {
    let start = text.rfind(CALL_OPEN)?;
    let inner = text[start + CALL_OPEN.len()..].trim_end().strip_suffix(']')?;
    let (tool, args) = inner.split_once(' ')?;
    let args: Value = serde_json::from_str(args.trim()).ok().filter(Value::is_object)?;
    Some((tool.to_owned(), args))
}

/// The steps of the customer message of a plan request.
pub(crate) fn customer_script(msgs: &[Value]) -> Vec<ScriptStep> {
    msgs.iter()
        .filter(|m| role(m) == "user")
        .find_map(|m| text(m).strip_prefix(CUSTOMER_MESSAGE))
        .map(script_steps)
        .unwrap_or_default()
}

/// The call a work request's subtask scripts: the `[call …]` ending the first line of its
/// `Subtask <id>: <instruction>` message.
pub(crate) fn scripted_call(req: &Value) -> Option<(String, Value)> {
    let own = messages(req).iter().rev().filter(|m| role(m) == "user").find(|m| text(m).starts_with("Subtask "))?;
    parse_call(text(own).lines().next()?)
}
