//! The fixture files of `tests/fixtures/`: the customer-message cases with their expectations, the recorded provider responses, and what MCP upstreams send.

use serde::Deserialize;
use serde_json::Value;
use swarm_core::language::{Language, is_han};

/// `tests/fixtures/queries.jsonl`: one case per line (`id`, `customer_id`, `query`, `expect`).
pub const QUERIES_JSONL: &str = include_str!("../../../tests/fixtures/queries.jsonl");
/// `tests/fixtures/queries-zh-hant.jsonl`: cases written in Traditional Chinese, same shape, with
/// `expect.language` = `zh-Hant` (the public cases' Chinese is Simplified).
pub const QUERIES_ZH_HANT_JSONL: &str = include_str!("../../../tests/fixtures/queries-zh-hant.jsonl");
/// `tests/fixtures/queries-zh-hans.jsonl`: further cases in Simplified Chinese (a Chinese q11, a
/// product named in Chinese with its size), same shape, with `expect.language` = `zh-Hans`.
pub const QUERIES_ZH_HANS_JSONL: &str = include_str!("../../../tests/fixtures/queries-zh-hans.jsonl");
/// `tests/fixtures/llm-responses.jsonl`: provider responses, one case per line, served by the mock LLM.
pub const LLM_RESPONSES_JSONL: &str = include_str!("../../../tests/fixtures/llm-responses.jsonl");
/// `tests/fixtures/mcp-cases.jsonl`: what MCP upstreams send, one case per line: `kind` `call_result`
/// (a `tools/call` result) or `tool` (a `tools/list` entry), with what the swarm must make of it.
pub const MCP_CASES_JSONL: &str = include_str!("../../../tests/fixtures/mcp-cases.jsonl");

/// The MCP case `name` (its whole JSON line). Panics when there is none.
pub fn mcp_case(name: &str) -> Value {
    MCP_CASES_JSONL
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad MCP case line {l}: {e}")))
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no MCP case {name}"))
}

/// One line of `tests/fixtures/queries.jsonl`.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    pub id: String,
    pub customer_id: String,
    pub query: String,
    /// `min_subtasks`, `max_subtasks`, `max_tool_calls`, `tools` (kinds, `a|b` for either), `mentions`.
    pub expect: Value,
}

/// All cases, in file order. Panics on a malformed line (a broken fixture).
pub fn cases() -> Vec<Case> {
    parse_cases(QUERIES_JSONL)
}

/// The further Simplified Chinese cases ([`QUERIES_ZH_HANS_JSONL`]), in file order.
pub fn simplified_cases() -> Vec<Case> {
    parse_cases(QUERIES_ZH_HANS_JSONL)
}

/// The Traditional Chinese cases ([`QUERIES_ZH_HANT_JSONL`]), in file order.
pub fn traditional_cases() -> Vec<Case> {
    parse_cases(QUERIES_ZH_HANT_JSONL)
}

fn parse_cases(jsonl: &str) -> Vec<Case> {
    jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad case line {l}: {e}")))
        .collect()
}

/// The case with this id. Panics when there is none.
pub fn case(id: &str) -> Case {
    cases().into_iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no case {id}"))
}

/// The language a case must be answered in: its `expect.language`, else (the public cases, whose
/// Chinese is all Simplified) Simplified Chinese for a message with a Han character, else English.
/// Deliberately not [`Language::detect`]: the expectation must not come from the code under test.
pub fn case_language(case: &Case) -> Language {
    match case.expect.get("language").and_then(Value::as_str) {
        Some(tag) => Language::parse(tag).unwrap_or_else(|| panic!("case {}: unknown language {tag}", case.id)),
        None if case.query.chars().any(is_han) => Language::SimplifiedChinese,
        None => Language::English,
    }
}

/// How `reply` falls short of being written in `language` (empty when it is): a Chinese reply
/// has at least ten Han characters, reads as Chinese of its script, and holds no character only
/// the other script writes; an English reply holds no Han character.
pub fn script_problems(reply: &str, language: Language) -> Vec<String> {
    let mut problems = Vec::new();
    let han = reply.chars().filter(|c| is_han(*c)).count();
    if language.is_chinese() {
        if han < 10 {
            problems.push(format!("only {han} Han characters in a {language} reply"));
        }
        let foreign: String = reply.chars().filter(|c| language.foreign_character(*c)).collect();
        if !foreign.is_empty() {
            problems.push(format!("characters of the other script in a {language} reply: {foreign}"));
        }
        let read = Language::detect(reply, None);
        if read != language {
            problems.push(format!("the reply reads as {read}, not {language}"));
        }
    } else if han > 0 {
        problems.push(format!("{han} Han characters in an English reply"));
    }
    problems
}

/// Tool names (without upstream prefix) that satisfy a kind of the cases' `expect.tools`.
pub fn tools_of_kind(kind: &str) -> &'static [&'static str] {
    match kind {
        "order" => &["get_order", "list_customer_orders"],
        "shipment" => &["track_shipment"],
        "inventory" => &["get_product"],
        "coupon" => &["check_coupon"],
        "refund" => &["refund", "get_refund_policy"],
        _ => &[],
    }
}
