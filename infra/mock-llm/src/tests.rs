//! The mock's tests: the agent's answers, its quirks, scripted customers, faults drawn and spaced, scripted answers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

async fn post(url: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, String) {
    let r = reqwest::Client::new().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

fn work_request(with_result: bool) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a worker"}),
        json!({"role": "user", "content": "Subtask w1"}),
    ];
    if with_result {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shop__get_order", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"shipped\"}"}));
    }
    json!({"model": "m", "messages": messages, "tools": [
        {"type": "function", "function": {"name": "shop__check_coupon", "parameters": {}}},
        {"type": "function", "function": {"name": "shop__get_order", "parameters": {}}},
    ]})
}

#[tokio::test]
async fn agent_calls_the_matching_tool_then_answers_with_its_result() {
    let (_, h) = MockLlm::start(MockConfig::default()).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let (status, _, body) = post(&url, &work_request(false)).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.pointer("/choices/0/message/tool_calls/0/function/name"), Some(&json!("shop__get_order")));
    assert_eq!(
        v.pointer("/choices/0/message/tool_calls/0/function/arguments"),
        Some(&json!("{\"order_id\":\"A1029\"}"))
    );
    let (_, _, body) = post(&url, &work_request(true)).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("Done: {\"status\":\"shipped\"}")));
    assert_eq!(h.stats().requests, 2);
}

#[tokio::test]
async fn agent_plans_the_configured_number_of_subtasks() {
    let config = MockConfig {
        mode: Mode::Agent(AgentConfig { plan_subtasks: 5, ..AgentConfig::default() }),
        ..MockConfig::default()
    };
    let (_, h) = MockLlm::start(config).await.unwrap();
    let req = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"}, {"role": "user", "content": "hi"}]});
    let (_, _, body) = post(&format!("{}/chat/completions", h.base_url()), &req).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    let plan: Value =
        serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
    let subtasks = plan["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 5);
    assert_eq!(subtasks[4], json!({"id": "w005", "instruction": "Check order A1029", "tools": ["shop__get_order"]}));
}

#[tokio::test]
async fn same_seed_gives_the_same_faults_in_the_same_order() {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let config = MockConfig {
            seed: 42,
            faults: Faults { rate_limit: 0.3, server_error: 0.2, ..Faults::default() },
            ..MockConfig::default()
        };
        let (_, h) = MockLlm::start(config).await.unwrap();
        for _ in 0..40 {
            post(&format!("{}/chat/completions", h.base_url()), &work_request(false)).await;
        }
        runs.push(h.stats().arrivals.iter().map(|a| a.status).collect::<Vec<_>>());
    }
    assert_eq!(runs[0], runs[1]);
    let limited = runs[0].iter().filter(|s| **s == 429).count();
    assert!((4..=22).contains(&limited), "{limited} of 40 rate-limited");
    assert!(runs[0].iter().any(|s| *s >= 500));
}

#[tokio::test]
async fn rate_limits_carry_retry_after_and_stats_are_served() {
    let config = MockConfig { faults: Faults { rate_limit: 1.0, ..Faults::default() }, ..MockConfig::default() };
    let (addr, h) = MockLlm::start(config).await.unwrap();
    let (status, headers, _) = post(&format!("http://{addr}/v1/chat/completions"), &work_request(false)).await;
    assert_eq!(status, 429);
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    let s: Value = reqwest::get(format!("http://{addr}/_stats")).await.unwrap().json().await.unwrap();
    assert_eq!(s["requests"], 1);
    assert_eq!(s["arrivals"][0]["retry_after_ms"], 1000);
    assert_eq!(s["arrivals"][0]["key"], "Subtask w1");
    h.shutdown().await;
}

fn agent_with(quirks: Quirks) -> MockConfig {
    MockConfig { mode: Mode::Agent(AgentConfig { quirks, ..AgentConfig::default() }), ..MockConfig::default() }
}

fn error_message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    v.pointer("/error/message").and_then(Value::as_str).unwrap_or("").to_owned()
}

#[tokio::test]
async fn a_kimi_thinking_agent_reasons_every_turn_and_refuses_a_tool_call_without_its_reasoning() {
    let (_, h) = MockLlm::start(agent_with(Quirks::named("kimi-thinking").unwrap())).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let (status, _, body) = post(&url, &work_request(false)).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.pointer("/choices/0/message/reasoning_content"), Some(&json!("I need facts: I will call the tools.")));
    let (status, _, body) = post(&url, &work_request(true)).await;
    assert_eq!(status, 400);
    assert_eq!(
        error_message(&body),
        "thinking is enabled but reasoning_content is missing in assistant tool call message at index 2"
    );
    let mut with = work_request(true);
    with["messages"][2]["reasoning_content"] = json!("");
    let (status, _, _) = post(&url, &with).await;
    assert_eq!(status, 200, "present, even empty, is enough");
    // A limit that leaves no room after 3,000 tokens of reasoning: cut, reasoning only.
    with["max_tokens"] = json!(2048);
    let (_, _, body) = post(&url, &with).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
    assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("")));
    assert_eq!(h.stats().arrivals.iter().filter(|a| a.kind == "quirk").count(), 1);
}

#[tokio::test]
async fn a_bedrock_style_gateway_refuses_tool_history_without_tools_and_drops_them_for_choice_none() {
    let (_, h) = MockLlm::start(agent_with(Quirks::named("bedrock").unwrap())).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let mut last = work_request(true);
    assert_eq!(post(&url, &last).await.0, 200);
    last["tool_choice"] = json!("none");
    let (status, _, body) = post(&url, &last).await;
    assert_eq!(status, 400);
    assert!(error_message(&body).contains("The toolConfig field must be defined"), "{body}");
}

#[tokio::test]
async fn context_window_max_tokens_and_schema_quirks_answer_like_their_providers() {
    let q = Quirks { context_tokens: Some(100), reject_max_tokens: true, strict_schemas: true, ..Quirks::default() };
    let (_, h) = MockLlm::start(agent_with(q)).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let mut r = work_request(false);
    r["max_tokens"] = json!(10);
    assert!(error_message(&post(&url, &r).await.2).starts_with("Unsupported parameter: 'max_tokens'"));
    let mut r = work_request(false);
    r["tools"][0]["function"]["parameters"] =
        json!({"type": "object", "properties": {"f": {"type": "object", "additionalProperties": {}}}});
    let m = error_message(&post(&url, &r).await.2);
    assert!(m.contains("In context=('properties', 'f', 'additionalProperties')"), "{m}");
    let mut r = work_request(false);
    r["tools"] = json!([]);
    r["messages"][1]["content"] = json!("订".repeat(200));
    let (status, _, body) = post(&url, &r).await;
    assert_eq!(status, 400);
    assert!(body.contains("context_length_exceeded"), "{body}");
}

#[tokio::test]
async fn configured_subtasks_are_planned_called_in_parallel_and_echoed_in_the_reply() {
    let agent = AgentConfig {
        subtasks: vec![
            AgentSubtask::new("Check A1029", &[("shop__get_order", json!({"order_id": "A1029"}))]),
            AgentSubtask::new(
                "Check two coupons",
                &[
                    ("shop__check_coupon", json!({"code": "SAVE20"})),
                    ("shop__check_coupon", json!({"code": "TECH100"})),
                ],
            ),
        ],
        reply_from_results: true,
        ..AgentConfig::default()
    };
    let (_, h) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let plan = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"}, {"role": "user", "content": "hi"}]});
    let v: Value = serde_json::from_str(&post(&url, &plan).await.2).unwrap();
    let plan: Value =
        serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
    assert_eq!(
        plan["subtasks"][1],
        json!({"id": "w02", "instruction": "Check two coupons", "tools": ["shop__check_coupon"]})
    );
    let mut work = work_request(false);
    work["messages"][1]["content"] = json!("Subtask w02: Check two coupons");
    let v: Value = serde_json::from_str(&post(&url, &work).await.2).unwrap();
    let calls = v.pointer("/choices/0/message/tool_calls").and_then(Value::as_array).unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].pointer("/function/arguments"), Some(&json!("{\"code\":\"TECH100\"}")));
    let reply = json!({"model": "m", "messages": [{"role": "system", "content": "You write the reply"},
        {"role": "user", "content": "Customer message:\nhi\n\nSubtask results (JSON):\n{\"results\": [{\"id\": \"w01\", \"answer\": \"A1029 is paid\"}, {\"id\": \"w02\", \"problem\": \"x\"}]}"}]});
    let v: Value = serde_json::from_str(&post(&url, &reply).await.2).unwrap();
    assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("A1029 is paid\nw02: could not be done")));
    // A reply request ending in its language paragraph reads the same results.
    let mut named = reply.clone();
    let content = format!(
        "{}\n\nReply language: zh-Hans. Write the whole reply in Simplified Chinese.",
        named["messages"][1]["content"].as_str().unwrap()
    );
    named["messages"][1]["content"] = json!(content);
    let v: Value = serde_json::from_str(&post(&url, &named).await.2).unwrap();
    assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("A1029 is paid\nw02: could not be done")));
}

#[tokio::test]
async fn a_scripted_customer_message_is_planned_with_its_dependencies_and_its_calls_are_made() {
    let steps = [
        ScriptStep::new("w01", &[], "Look up A1007", Some(("shop__get_order", json!({"order_id": "A1007"})))),
        ScriptStep::new("w02", &[], "Say thanks", None),
        ScriptStep::new(
            "w03",
            &["w01", "w02"],
            "Refund 1 CNY on A1007",
            Some(("shop__refund", json!({"order_id": "A1007", "amount": 1.0, "reason": "chaos c7/w03"}))),
        ),
    ];
    let message: String = std::iter::once("Please handle each part:".to_owned())
        .chain(steps.iter().map(ScriptStep::line))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(script_steps(&message), steps, "a step survives its line");
    let agent = AgentConfig { plan_from_message: true, vary_reasons: true, ..AgentConfig::default() };
    let (_, h) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let plan = json!({"model": "m", "messages": [{"role": "system", "content": "Answer {\"subtasks\": [...]}"},
        {"role": "user", "content": format!("Customer message:\n{message}")}]});
    let v: Value = serde_json::from_str(&post(&url, &plan).await.2).unwrap();
    let plan: Value =
        serde_json::from_str(v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap()).unwrap();
    assert_eq!(
        plan["subtasks"][2],
        json!({"id": "w03", "instruction": steps[2].instruction, "tools": ["shop__refund"], "depends_on": ["w01", "w02"]})
    );
    assert_eq!(plan["subtasks"][1]["tools"], json!([]));
    // The worker of w03 sends its instruction back, dependency results below it.
    let mut work = work_request(false);
    work["messages"][1]["content"] = json!(format!(
        "Subtask w03: {}\n\nResults of the subtasks this one depends on:\n- w01 (x): [y]",
        steps[2].instruction
    ));
    let mut reasons = Vec::new();
    for _ in 0..2 {
        let v: Value = serde_json::from_str(&post(&url, &work).await.2).unwrap();
        assert_eq!(v.pointer("/choices/0/message/tool_calls/0/function/name"), Some(&json!("shop__refund")));
        let args: Value = serde_json::from_str(
            v.pointer("/choices/0/message/tool_calls/0/function/arguments").and_then(Value::as_str).unwrap(),
        )
        .unwrap();
        assert_eq!((args["order_id"].as_str(), args["amount"].as_f64()), (Some("A1007"), Some(1.0)));
        reasons.push(args["reason"].as_str().unwrap().to_owned());
    }
    assert!(reasons.iter().all(|r| r.starts_with("chaos c7/w03 (draft ")), "{reasons:?}");
    assert_ne!(reasons[0], reasons[1], "two answers to the same request word the reason differently");
}

#[tokio::test]
async fn a_truncated_answer_is_cut_with_finish_reason_length_and_counted_by_kind() {
    let config = MockConfig { faults: Faults { truncated: 1.0, ..Faults::default() }, ..MockConfig::default() };
    let (_, h) = MockLlm::start(config).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let v: Value = serde_json::from_str(&post(&url, &work_request(false)).await.2).unwrap();
    assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
    let args = v.pointer("/choices/0/message/tool_calls/0/function/arguments").and_then(Value::as_str).unwrap();
    assert_eq!(args, "{\"order_id", "the call's arguments are cut mid-JSON");
    let v: Value = serde_json::from_str(&post(&url, &work_request(true)).await.2).unwrap();
    assert_eq!(v.pointer("/choices/0/finish_reason"), Some(&json!("length")));
    assert_eq!(v.pointer("/choices/0/message/content"), Some(&json!("Done: {\"statu")));
    assert_eq!(h.stats().by_kind, BTreeMap::from([("truncated", 2)]));
}

#[tokio::test]
async fn spaced_faults_come_at_their_rate_and_each_kind_within_its_first_gap() {
    let faults = Faults {
        rate_limit: 0.1,
        retry_after: None,
        server_error: 0.05,
        hang: 0.05,
        hang_for: Duration::ZERO,
        malformed: 0.05,
        truncated: 0.1,
        spaced: true,
    };
    let (_, h) = MockLlm::start(MockConfig { seed: 3, faults, ..MockConfig::default() }).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    for _ in 0..20 {
        post(&url, &work_request(false)).await;
    }
    let after_20 = h.stats().by_kind;
    for kind in ["rate_limit", "server_error", "hang", "malformed", "truncated"] {
        assert!(after_20.get(kind).copied().unwrap_or(0) >= 1, "{kind} within 1/rate requests: {after_20:?}");
    }
    for _ in 0..180 {
        post(&url, &work_request(false)).await;
    }
    let by_kind = h.stats().by_kind;
    for (kind, expected) in
        [("rate_limit", 20), ("server_error", 10), ("hang", 10), ("malformed", 10), ("truncated", 20)]
    {
        let n = by_kind.get(kind).copied().unwrap_or(0);
        assert!(n.abs_diff(expected) <= expected / 4 + 2, "{kind}: {n} of 200, about {expected} expected");
    }
}

#[tokio::test]
async fn scripted_answers_come_in_order_then_the_script_is_exhausted() {
    let cases = load_cases(
        "{\"name\":\"a\",\"status\":503,\"headers\":{\"content-type\":\"text/html\"},\"body\":\"<html>x</html>\"}\n\n{\"name\":\"b\",\"status\":200,\"body\":{\"choices\":[]}}\n",
    )
    .unwrap();
    assert_eq!(cases.len(), 2);
    let (addr, _h) = MockLlm::start(MockConfig::scripted(cases.into_iter().map(|(_, r)| r).collect())).await.unwrap();
    let url = format!("http://{addr}/v1/chat/completions");
    let (s1, h1, b1) = post(&url, &json!({})).await;
    assert_eq!(
        (s1, h1.get("content-type").unwrap().to_str().unwrap(), b1.as_str()),
        (503, "text/html", "<html>x</html>")
    );
    let (s2, _, b2) = post(&url, &json!({})).await;
    assert_eq!((s2, b2.as_str()), (200, "{\"choices\":[]}"));
    let (s3, _, _) = post(&url, &json!({})).await;
    assert_eq!(s3, 500);
}

#[tokio::test]
async fn a_step_scripted_with_two_calls_makes_one_per_round_then_answers() {
    let step = ScriptStep::new(
        "w02",
        &[],
        "Open a ticket, then refund",
        Some(("shop__open_ticket", json!({"order_id": "A1007", "subject": "s"}))),
    )
    .then_call("shop__refund", json!({"order_id": "A1007", "amount": 1.0, "reason": "chaos c1/w02"}));
    assert_eq!(step.tools(), ["shop__open_ticket", "shop__refund"]);
    assert_eq!(script_steps(&step.line()), std::slice::from_ref(&step), "both calls survive the line");
    let agent = AgentConfig { plan_from_message: true, ..AgentConfig::default() };
    let (_, h) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
    let url = format!("{}/chat/completions", h.base_url());
    let mut work = work_request(false);
    work["messages"][1]["content"] = json!(format!("Subtask w02: {}", step.instruction));
    let name = |v: &Value| v.pointer("/choices/0/message/tool_calls/0/function/name").cloned();
    let mut seen = Vec::new();
    for round in 0..3 {
        let v: Value = serde_json::from_str(&post(&url, &work).await.2).unwrap();
        seen.push(name(&v).unwrap_or_else(|| json!(v.pointer("/choices/0/finish_reason"))));
        let call = json!({"id": format!("c{round}"), "type": "function", "function": {"name": "x", "arguments": "{}"}});
        let messages = work["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{round}"), "content": "{\"ok\":true}"}));
    }
    assert_eq!(seen, [json!("shop__open_ticket"), json!("shop__refund"), json!("stop")]);
}
