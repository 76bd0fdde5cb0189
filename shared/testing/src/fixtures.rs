//! The fixture files of `tests/fixtures/`: the customer-message cases with their expectations, the recorded provider responses, and what MCP upstreams send.

use serde::Deserialize;
use serde_json::Value;

/// `tests/fixtures/queries.jsonl`: one case per line (`id`, `customer_id`, `query`, `expect`).
pub const QUERIES_JSONL: &str = include_str!("../../../tests/fixtures/queries.jsonl");
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
    QUERIES_JSONL
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad case line {l}: {e}")))
        .collect()
}

/// The case with this id. Panics when there is none.
pub fn case(id: &str) -> Case {
    cases().into_iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no case {id}"))
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
