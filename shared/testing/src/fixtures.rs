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

/// English words that only an English sentence has: function words and the verbs and nouns the
/// shop's sentences are made of. None of them is in a product, carrier or place name of the demo
/// shop, so a Chinese reply holding one quotes an English sentence.
const ENGLISH_SENTENCE_WORDS: [&str; 36] = [
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "has", "have", "can", "cannot", "not", "no", "only",
    "for", "of", "on", "to", "and", "or", "this", "that", "it", "its", "with", "already", "least", "needs", "applies",
    "expired", "refunds", "accepted", "window", "customer",
];

/// The English sentence words ([`ENGLISH_SENTENCE_WORDS`]) `text` holds, in order (`A1034` is an
/// id, not the word "a").
fn english_sentence_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| ENGLISH_SENTENCE_WORDS.contains(&w.to_ascii_lowercase().as_str()))
        .map(str::to_owned)
        .collect()
}

/// How `reply` falls short of being written in `language` (empty when it is): a Chinese reply
/// has at least ten Han characters, reads as Chinese of its script, holds no character only
/// the other script writes and no English sentence (no word of [`ENGLISH_SENTENCE_WORDS`]:
/// product names, ids and codes stay as the shop has them, but nothing is quoted in English);
/// an English reply holds no Han character.
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
        let english = english_sentence_words(reply);
        if !english.is_empty() {
            problems.push(format!("English sentence words in a {language} reply: {}", english.join(" ")));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chinese_reply_quoting_an_english_sentence_falls_short_and_names_and_codes_do_not() {
        let quoted = "优惠券 DOUBLE11 不能使用：DOUBLE11 expired on 2026-11-12。使用条件：立减 15%，最低消费 500 CNY。";
        assert_eq!(
            script_problems(quoted, Language::SimplifiedChinese),
            ["English sentence words in a zh-Hans reply: expired on"]
        );
        let names = "订单 A1034 已于 2026-11-25 送达：2 × Blue Linen Shirt S、2 × Grey Running Shoes 43；包裹由 JD Logistics 承运。";
        assert_eq!(script_problems(names, Language::SimplifiedChinese), Vec::<String>::new());
    }
}
