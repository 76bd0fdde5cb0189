//! The OpenAI mapping's pure parts: which requests are refused and how, the message read, the answers' and chunks' shapes, and the progress told between two views.

use serde_json::json;
use swarm_core::domain::{ConversationStatus, SubtaskStatus, Usage};
use swarm_core::view::{Progress, TurnView};

use super::*;

fn request(body: Value) -> ChatRequest {
    serde_json::from_value(body).unwrap()
}

fn refused(body: Value) -> OpenAiError {
    check_request(&request(body)).unwrap_err()
}

#[test]
fn the_last_user_message_is_the_customer_s_message() {
    let ask = check_request(&request(json!({
        "model": "lambda-swarm",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": [{"type": "text", "text": "Where is"}, {"type": "text", "text": "order 1042?"}]},
        ],
        "stream": true, "stream_options": {"include_usage": true}, "user": "c104", "temperature": 0.2,
    })))
    .unwrap();
    assert_eq!(
        ask,
        ChatAsk {
            message: "Where is\norder 1042?".into(),
            stream: true,
            include_usage: true,
            user: Some("c104".into())
        }
    );
    let plain = check_request(&request(
        json!({"model": "lambda-swarm", "messages": [{"role": "user", "content": "hi"}], "n": 1, "tools": []}),
    ))
    .unwrap();
    assert_eq!((plain.message.as_str(), plain.stream, plain.include_usage), ("hi", false, false));
}

#[test]
fn what_the_swarm_cannot_honour_is_refused_in_openai_s_shape() {
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"model": "gpt-4o", "messages": user}), Some("model"), "model_not_found"),
        (json!({"messages": user}), Some("model"), "missing_model"),
        (
            json!({"model": "lambda-swarm", "messages": user, "tools": [{"type": "function"}]}),
            Some("tools"),
            "tools_not_supported",
        ),
        (
            json!({"model": "lambda-swarm", "messages": user, "functions": [{"name": "f"}]}),
            Some("functions"),
            "tools_not_supported",
        ),
        (json!({"model": "lambda-swarm", "messages": user, "n": 2}), Some("n"), "n_not_supported"),
        (json!({"model": "lambda-swarm", "messages": user, "n": 0}), Some("n"), "n_not_supported"),
        (
            json!({"model": "lambda-swarm", "messages": [{"role": "system", "content": "x"}]}),
            Some("messages"),
            "no_user_message",
        ),
        (json!({"model": "lambda-swarm"}), Some("messages"), "no_user_message"),
        (
            json!({"model": "lambda-swarm", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            Some("messages"),
            "unsupported_content",
        ),
    ];
    for (body, param, code) in cases {
        let e = refused(body.clone());
        assert_eq!((e.status.as_u16(), e.param, e.code, e.kind), (400, param, code, "invalid_request_error"), "{body}");
        assert_eq!(
            e.body(),
            json!({"error": {"message": e.message, "type": "invalid_request_error", "param": param, "code": code}})
        );
    }
}

#[test]
fn a_long_unknown_model_name_is_cut_in_the_message() {
    let e = refused(json!({"model": "m".repeat(500), "messages": [{"role": "user", "content": "hi"}]}));
    assert!(e.message.len() < 200, "{}", e.message);
}

#[test]
fn error_types_follow_the_status() {
    let of = |s: u16| error_type(StatusCode::from_u16(s).unwrap());
    assert_eq!(
        [of(400), of(401), of(403), of(404), of(409), of(410), of(429), of(503), of(504)],
        [
            "invalid_request_error",
            "authentication_error",
            "permission_error",
            "not_found_error",
            "conflict_error",
            "not_found_error",
            "rate_limit_error",
            "server_error",
            "timeout_error"
        ]
    );
}

fn turn() -> SwarmTurn {
    SwarmTurn { conversation_id: "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07".into(), turn: 1, status: None }
}

fn usage() -> Usage {
    Usage { prompt_tokens: Some(1200), completion_tokens: Some(300), cached_tokens: Some(100), cost_usd: Some(0.01) }
}

#[test]
fn a_done_turn_is_a_chat_completion_with_its_reply_and_usage() {
    let end = TurnEnd {
        status: ConversationStatus::Done,
        reply: Some("Order 1042 ships today.".into()),
        usage: Some(usage()),
    };
    let answer = completion(&turn(), &end, 1_700_000_000);
    assert_eq!(
        answer,
        json!({
            "id": "chatcmpl-0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07-1",
            "object": "chat.completion", "created": 1_700_000_000, "model": "lambda-swarm", "system_fingerprint": null,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Order 1042 ships today.", "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
                      "prompt_tokens_details": {"cached_tokens": 100}},
            "swarm": {"conversation_id": "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07", "turn": 1, "status": "DONE"},
        })
    );
}

#[test]
fn a_failed_turn_finishes_with_error_and_unreported_usage_counts_zero() {
    let end = TurnEnd { status: ConversationStatus::Failed, reply: None, usage: None };
    let answer = completion(&turn(), &end, 1);
    assert_eq!(answer["choices"][0]["finish_reason"], "error");
    assert_eq!(answer["choices"][0]["message"]["content"], NO_REPLY);
    assert_eq!(answer["usage"], json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}));
    let handoff =
        TurnEnd { status: ConversationStatus::Handoff, reply: Some("A person will write.".into()), usage: None };
    assert_eq!(finish(&handoff), ("stop", "A person will write.".to_owned()));
}

#[test]
fn chunks_have_openai_s_shape() {
    let first = chunk(&turn(), 7, json!({"role": "assistant", "content": ""}), None, true);
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(
        first["choices"][0],
        json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})
    );
    assert_eq!(first["swarm"], json!({"conversation_id": "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07", "turn": 1}));
    let last = chunk(&turn(), 7, json!({}), Some("stop"), false);
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(last.get("swarm").is_none());
    let usage = usage_chunk(&turn(), 7, Some(&usage()));
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 1500);
    assert_eq!(models()["data"][0]["id"], "lambda-swarm");
    assert_eq!(models()["object"], "list");
}

fn view(status: ConversationStatus) -> TurnView {
    TurnView {
        turn: 0,
        message: String::new(),
        status,
        progress: Progress { finished: 0, total: 0 },
        subtasks: vec![],
        reply: None,
        usage: None,
        started_at: String::new(),
        author: Default::default(),
    }
}

#[test]
fn each_logged_event_is_one_line_and_the_reply_is_announced_once_every_subtask_finished() {
    use swarm_core::events::{Event, PlannedSubtask};
    let mut told = super::from_log::Told::default();
    let planned = Event::TurnPlanned {
        turn: 0,
        subtasks: vec![
            PlannedSubtask { id: "w01".into(), instruction: "do w01".into(), depends_on: vec![] },
            PlannedSubtask { id: "w02".into(), instruction: "do w02".into(), depends_on: vec!["w01".into()] },
        ],
    };
    assert_eq!(
        told.lines([&planned, &Event::SubtaskStarted { subtask: "w01".into() }]),
        vec![
            ProgressLine::Planned { subtasks: vec![("w01".into(), "do w01".into()), ("w02".into(), "do w02".into())] },
            ProgressLine::Started { subtask: "w01".into() },
        ]
    );
    let finished = |id: &str, status, tools: &[&str]| Event::SubtaskFinished {
        subtask: id.into(),
        status,
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        tokens: None,
        duration_ms: None,
    };
    let tool =
        Event::ToolCalled { subtask: "w01".into(), tool: "shop__refund".into(), ordinal: 1, status: "intent".into() };
    let lines = told.lines([&tool, &finished("w01", SubtaskStatus::Succeeded, &["get_order"])]);
    assert_eq!(lines.iter().map(ProgressLine::text).collect::<Vec<_>>(), ["w01 succeeded (tools: get_order)"]);
    let lines = told.lines([&finished("w02", SubtaskStatus::AwaitingApproval, &[])]);
    assert_eq!(
        lines.iter().map(ProgressLine::text).collect::<Vec<_>>(),
        ["w02 waits for a person's approval", "Writing the reply"],
        "every planned subtask finished: the reply is next"
    );
    assert_eq!(told.lines([&Event::TurnDone { turn: 0, status: ConversationStatus::Done }]), vec![], "told once");
}

#[test]
fn a_turn_ends_with_its_status_reply_and_usage() {
    let mut done = view(ConversationStatus::Done);
    assert_eq!(progress::ended(&view(ConversationStatus::Running)), None);
    done.reply = Some("ok".into());
    done.usage = Some(usage());
    assert_eq!(
        progress::ended(&done),
        Some(TurnEnd { status: ConversationStatus::Done, reply: Some("ok".into()), usage: Some(usage()) })
    );
}

#[test]
fn the_poll_interval_and_patience_follow_the_deadline() {
    let standard = progress::PollPlan::for_deadline(std::time::Duration::from_secs(120));
    assert_eq!(standard.interval, std::time::Duration::from_secs(1));
    assert_eq!(standard.patience, std::time::Duration::from_secs(180));
    let scaled = progress::PollPlan::for_deadline(std::time::Duration::from_secs(12));
    assert_eq!(scaled.interval, std::time::Duration::from_millis(100));
}
