//! Plan parsing and validation: the model's split of a message into subtasks, checked before anything is queued.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use crate::domain::{MAX_INSTRUCTION_CHARS, MAX_SUBTASKS, Plan, Subtask, SubtaskId};
use crate::jsonfix::{JsonFixError, extract_json};
use crate::untrusted::{clean_text, is_safe_id, safe_id};

/// Why a plan is unusable. Shown to the model once on retry, so each message
/// says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the answer holds no usable JSON plan ({0})")]
    NoJson(JsonFixError),
    #[error("the plan must be an object with a \"subtasks\" array")]
    BadShape,
    #[error("subtask {0} has an empty instruction")]
    EmptyInstruction(String),
    #[error("subtask id {0} is used twice")]
    DuplicateId(String),
    #[error("subtask {subtask} names unknown tool {tool}")]
    UnknownTool { subtask: String, tool: String },
    #[error("subtask {subtask} depends on unknown subtask {dependency}")]
    UnknownDependency { subtask: String, dependency: String },
    #[error("dependencies form a cycle through {0}")]
    Cycle(String),
}

impl PlanError {
    /// What a log line may say of this error: its class, never the ids, tool names or JSON text
    /// it quotes (the model writes them, and models echo the customer's words).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoJson(_) => "no_json",
            Self::BadShape => "bad_shape",
            Self::EmptyInstruction(_) => "empty_instruction",
            Self::DuplicateId(_) => "duplicate_id",
            Self::UnknownTool { .. } => "unknown_tool",
            Self::UnknownDependency { .. } => "unknown_dependency",
            Self::Cycle(_) => "cycle",
        }
    }
}

/// Reads the subtasks out of a model answer: JSON found in prose or fences,
/// trailing commas tolerated, a bare array accepted, missing ids numbered
/// `w01…`, a `depends_on` string taken as a one-element list.
/// Whether the planner's answer asks to hand the conversation to a person (`"handoff": true` on
/// the plan object): the customer asked for one.
pub fn plan_requests_handoff(text: &str) -> bool {
    matches!(extract_json(text), Ok(Value::Object(map)) if map.get("handoff").and_then(Value::as_bool) == Some(true))
}

pub fn parse_plan(text: &str) -> Result<Vec<Subtask>, PlanError> {
    let value = extract_json(text).map_err(PlanError::NoJson)?;
    let items = match &value {
        Value::Array(items) => items,
        Value::Object(map) => match map.get("subtasks").or_else(|| map.get("tasks")) {
            Some(Value::Array(items)) => items,
            _ => return Err(PlanError::BadShape),
        },
        _ => return Err(PlanError::BadShape),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(m) = item else { return Err(PlanError::BadShape) };
        let id = match m.get("id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
            Some(Value::Number(n)) => format!("w{n:0>2}"),
            _ => format!("w{:02}", i + 1),
        };
        let instruction = m
            .get("instruction")
            .or_else(|| m.get("task"))
            .or_else(|| m.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_owned();
        out.push(Subtask {
            id: id.into(),
            instruction,
            tools: string_list(m.get("tools")),
            depends_on: string_list(m.get("depends_on").or_else(|| m.get("dependencies")))
                .into_iter()
                .map(SubtaskId::from)
                .collect(),
        });
    }
    Ok(out)
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_owned()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|x| match x {
                Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
                Value::Number(n) => Some(format!("w{n:0>2}")),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Checks a parsed plan against the tool catalogue and the limits:
/// at most [`MAX_SUBTASKS`] subtasks (extras and their dependents dropped, with
/// a note), unique ids, non-empty instructions, only known tools (an unprefixed
/// name that matches exactly one catalogue tool's suffix is mapped to it),
/// dependencies that exist and form no cycle.
///
/// Ids and instructions are model output that becomes DynamoDB keys, HTTP headers, log fields and
/// text shown to the customer: an id that is not 1–64 of `[A-Za-z0-9_.:-]` is renumbered
/// (`w01`, `w02`… by position, dependencies on it following), and an instruction loses display
/// control characters and is cut to [`MAX_INSTRUCTION_CHARS`].
pub fn validate_plan(subtasks: Vec<Subtask>, known_tools: &HashSet<String>) -> Result<Plan, PlanError> {
    validate_plan_within(subtasks, known_tools, MAX_SUBTASKS)
}

/// [`validate_plan`] with at most `max_subtasks` subtasks (a customer's fan-out limit, itself
/// capped at [`MAX_SUBTASKS`]; at least 1): extras and their dependents are dropped with a note.
pub fn validate_plan_within(
    mut subtasks: Vec<Subtask>,
    known_tools: &HashSet<String>,
    max_subtasks: usize,
) -> Result<Plan, PlanError> {
    let max = max_subtasks.clamp(1, MAX_SUBTASKS);
    renumber_unsafe_ids(&mut subtasks);
    for s in &mut subtasks {
        s.instruction = clean_text(&s.instruction, MAX_INSTRUCTION_CHARS).trim().to_owned();
    }
    let mut notes = Vec::new();
    if subtasks.len() > max {
        let dropped = subtasks.len() - max;
        subtasks.truncate(max);
        notes.push(format!("The request had more than {max} separate parts; {dropped} of them were not handled."));
    }
    let mut seen = HashSet::new();
    for s in &mut subtasks {
        if s.instruction.is_empty() {
            return Err(PlanError::EmptyInstruction(s.id.to_string()));
        }
        if !seen.insert(s.id.clone()) {
            return Err(PlanError::DuplicateId(s.id.to_string()));
        }
        let mut tools = Vec::with_capacity(s.tools.len());
        for t in &s.tools {
            let resolved = resolve_tool(t, known_tools)
                .ok_or_else(|| PlanError::UnknownTool { subtask: s.id.to_string(), tool: safe_id(t) })?;
            if !tools.contains(&resolved) {
                tools.push(resolved);
            }
        }
        s.tools = tools;
        s.depends_on.dedup();
    }
    // Dependencies on subtasks dropped over the limit drop their dependents too.
    let mut dropped_for_deps = Vec::new();
    loop {
        let ids: HashSet<&str> = subtasks.iter().map(|s| s.id.as_str()).collect();
        let missing = subtasks.iter().position(|s| s.depends_on.iter().any(|d| !ids.contains(d.as_str())));
        let Some(pos) = missing else { break };
        let s = &subtasks[pos];
        let dep = s.depends_on.iter().find(|d| !ids.contains(d.as_str())).map(SubtaskId::to_string).unwrap_or_default();
        if notes.is_empty() {
            return Err(PlanError::UnknownDependency { subtask: s.id.to_string(), dependency: dep });
        }
        dropped_for_deps.push(subtasks.remove(pos).id);
    }
    if !dropped_for_deps.is_empty() {
        notes.push(format!(
            "{} more part(s) depended on unhandled ones and were not handled either.",
            dropped_for_deps.len()
        ));
    }
    if let Some(id) = find_cycle(&subtasks) {
        return Err(PlanError::Cycle(id));
    }
    Ok(Plan { subtasks, notes })
}

/// Gives every subtask whose id is not [`is_safe_id`] the id `w<position>` (not otherwise taken),
/// and points dependencies on the old id at the new one.
fn renumber_unsafe_ids(subtasks: &mut [Subtask]) {
    let mut renamed: Vec<(SubtaskId, SubtaskId)> = Vec::new();
    let mut taken: HashSet<SubtaskId> = subtasks.iter().map(|s| s.id.clone()).collect();
    for (i, s) in subtasks.iter_mut().enumerate() {
        if is_safe_id(s.id.as_str()) {
            continue;
        }
        let mut n = i + 1;
        let mut id = SubtaskId::new(format!("w{n:02}"));
        while taken.contains(&id) {
            n += 1;
            id = SubtaskId::new(format!("w{n:02}"));
        }
        taken.insert(id.clone());
        renamed.push((std::mem::replace(&mut s.id, id.clone()), id));
    }
    if renamed.is_empty() {
        return;
    }
    for s in subtasks.iter_mut() {
        for d in &mut s.depends_on {
            if let Some((_, new)) = renamed.iter().find(|(old, _)| old == d) {
                d.clone_from(new);
            }
        }
    }
}

fn resolve_tool(name: &str, known: &HashSet<String>) -> Option<String> {
    if known.contains(name) {
        return Some(name.to_owned());
    }
    let suffix = format!("__{name}");
    let mut matches = known.iter().filter(|k| k.ends_with(&suffix));
    let first = matches.next()?;
    // Ambiguous across upstreams: refuse rather than pick one.
    if matches.next().is_some() {
        return None;
    }
    Some(first.clone())
}

/// A subtask id on a dependency cycle, if any (depth-first search).
fn find_cycle(subtasks: &[Subtask]) -> Option<String> {
    let deps: BTreeMap<&str, &[SubtaskId]> =
        subtasks.iter().map(|s| (s.id.as_str(), s.depends_on.as_slice())).collect();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for start in deps.keys() {
        let mut on_path: BTreeSet<&str> = BTreeSet::new();
        if visit(start, &deps, &mut on_path, &mut done) {
            return Some((*start).to_owned());
        }
    }
    None
}

fn visit<'a>(
    id: &'a str,
    deps: &BTreeMap<&'a str, &'a [SubtaskId]>,
    on_path: &mut BTreeSet<&'a str>,
    done: &mut BTreeSet<&'a str>,
) -> bool {
    if done.contains(id) {
        return false;
    }
    if !on_path.insert(id) {
        return true;
    }
    for d in deps.get(id).copied().unwrap_or_default() {
        if visit(d.as_str(), deps, on_path, done) {
            return true;
        }
    }
    on_path.remove(id);
    done.insert(id);
    false
}

/// The plan used when the model's plans stay unusable: one subtask with the
/// whole message and every tool the caller may plan with.
pub fn fallback_plan(query: &str, tools: &[String], reason: &str) -> Plan {
    Plan {
        subtasks: vec![Subtask {
            id: "w01".into(),
            instruction: format!("Answer the customer's whole message: {query}"),
            tools: tools.to_vec(),
            depends_on: Vec::new(),
        }],
        notes: vec![format!("The message was handled as one task ({reason}).")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> HashSet<String> {
        ["shop__get_order", "shop__check_coupon", "shop__track_shipment"].iter().map(|s| s.to_string()).collect()
    }

    fn st(id: &str, deps: &[&str]) -> Subtask {
        Subtask {
            id: id.into(),
            instruction: format!("do {id}"),
            tools: vec![],
            depends_on: deps.iter().map(|d| (*d).into()).collect(),
        }
    }

    #[test]
    fn a_plan_errors_kind_quotes_nothing_the_model_wrote() {
        let quoting = PlanError::UnknownTool { subtask: "w01".into(), tool: "Zephyrine Quillback".into() };
        assert!(quoting.to_string().contains("Zephyrine"), "the model is told the name it wrote");
        assert_eq!(quoting.kind(), "unknown_tool");
        assert_eq!(PlanError::Cycle("Zephyrine".into()).kind(), "cycle");
        assert_eq!(PlanError::DuplicateId("Zephyrine".into()).kind(), "duplicate_id");
    }

    #[test]
    fn fenced_plan_with_prose_is_parsed_and_unprefixed_tools_resolved() {
        let text = "Sure! Here is the plan:\n```json\n{\"subtasks\": [{\"id\": \"w01\", \"instruction\": \"Get status of order A1029\", \"tools\": [\"get_order\"]}, {\"id\": \"w02\", \"instruction\": \"Check coupon SAVE20\", \"tools\": [\"check_coupon\"]}]}\n```\nLet me know if you need more.";
        let plan = validate_plan(parse_plan(text).unwrap(), &tools()).unwrap();
        assert_eq!(plan.subtasks.len(), 2);
        assert_eq!(plan.subtasks[0].tools, vec!["shop__get_order"]);
        assert_eq!(plan.subtasks[1].tools, vec!["shop__check_coupon"]);
    }

    #[test]
    fn plan_with_trailing_commas_is_parsed() {
        let text =
            "{\"subtasks\": [{\"id\": \"w01\", \"instruction\": \"Track A1022\", \"tools\": [\"track_shipment\"],},],}";
        let plan = validate_plan(parse_plan(text).unwrap(), &tools()).unwrap();
        assert_eq!(plan.subtasks.len(), 1);
        assert_eq!(plan.subtasks[0].tools, vec!["shop__track_shipment"]);
    }

    #[test]
    fn model_written_ids_that_could_not_be_keys_or_headers_are_renumbered_with_their_dependents() {
        let bad = "w1\r\nx-swarm-customer-id: C999";
        let mut a = st(bad, &[]);
        a.instruction = "Check A1029\u{1b}[31m".into();
        let b = st("w02", &[bad]);
        let plan = validate_plan(vec![a, b], &tools()).unwrap();
        assert_eq!(plan.subtasks[0].id, "w01");
        assert_eq!(plan.subtasks[0].instruction, "Check A1029[31m");
        assert_eq!(plan.subtasks[1].depends_on, vec!["w01"]);
        // A taken id is never reused.
        let plan = validate_plan(vec![st("w02", &[]), st("x y", &["w02"])], &tools()).unwrap();
        let ids: Vec<&str> = plan.subtasks.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["w02", "w03"]);
    }

    #[test]
    fn unknown_tool_is_an_error_naming_it() {
        let mut s = st("w01", &[]);
        s.tools = vec!["delete_everything".into()];
        let err = validate_plan(vec![s], &tools()).unwrap_err();
        assert_eq!(err, PlanError::UnknownTool { subtask: "w01".into(), tool: "delete_everything".into() });
    }

    #[test]
    fn duplicate_ids_are_refused() {
        assert_eq!(
            validate_plan(vec![st("a", &[]), st("a", &[])], &tools()).unwrap_err(),
            PlanError::DuplicateId("a".into())
        );
    }

    #[test]
    fn missing_dependency_is_refused() {
        assert!(matches!(
            validate_plan(vec![st("a", &["zz"])], &tools()).unwrap_err(),
            PlanError::UnknownDependency { .. }
        ));
    }

    #[test]
    fn dependency_cycle_is_refused() {
        let err =
            validate_plan(vec![st("a", &["c"]), st("b", &["a"]), st("c", &["b"]), st("d", &[])], &tools()).unwrap_err();
        assert!(matches!(err, PlanError::Cycle(_)));
    }

    #[test]
    fn over_one_hundred_subtasks_are_cut_with_a_note() {
        let mut many: Vec<Subtask> = (0..105).map(|i| st(&format!("w{i:03}"), &[])).collect();
        // One kept subtask depends on a dropped one: it is dropped too.
        many[5].depends_on = vec!["w104".into()];
        let plan = validate_plan(many, &tools()).unwrap();
        assert_eq!(plan.subtasks.len(), 99);
        assert_eq!(plan.notes.len(), 2);
        assert!(plan.notes[0].contains("5 of them"));
    }

    #[test]
    fn a_customers_fan_out_limit_cuts_the_plan_the_same_way() {
        let mut plan: Vec<Subtask> = (1..=6).map(|i| st(&format!("w{i:02}"), &[])).collect();
        plan[1].depends_on = vec!["w05".into()];
        let within = validate_plan_within(plan.clone(), &tools(), 4).unwrap();
        let ids: Vec<&str> = within.subtasks.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["w01", "w03", "w04"]);
        assert_eq!(within.notes[0], "The request had more than 4 separate parts; 2 of them were not handled.");
        assert_eq!(validate_plan_within(plan.clone(), &tools(), 0).unwrap().subtasks.len(), 1, "at least one");
        assert_eq!(validate_plan_within(plan, &tools(), 500).unwrap().subtasks.len(), 6);
    }

    #[test]
    fn missing_ids_are_numbered_and_bare_arrays_accepted() {
        let subtasks = parse_plan(r#"[{"instruction": "one"}, {"instruction": "two", "depends_on": "w01"}]"#).unwrap();
        assert_eq!(subtasks[0].id, "w01");
        assert_eq!(subtasks[1].id, "w02");
        assert_eq!(subtasks[1].depends_on, vec!["w01"]);
    }

    #[test]
    fn empty_instruction_is_refused() {
        let mut s = st("w01", &[]);
        s.instruction.clear();
        assert_eq!(validate_plan(vec![s], &tools()).unwrap_err(), PlanError::EmptyInstruction("w01".into()));
    }
}
