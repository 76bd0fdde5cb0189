//! Replies in the customer's language and script through the whole local stack: every case written in Chinese — the public ones and those of `tests/fixtures/queries-zh-hans.jsonl` (Simplified) and `tests/fixtures/queries-zh-hant.jsonl` (Traditional) — is answered in Chinese of its script and every English one in English, with the offline model, on both backends; the language is stored on the conversation once; the deadline path's model-free reply is written in the stored script; and, through the mock LLM on the wire, the plan, work and reply requests of a real model name the language.
//!
//! The emulator instantiations need `SWARM_AWS_ENDPOINT`; without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;
use std::time::Duration;

use mock_llm::{AgentConfig, AgentSubtask, MockConfig, MockLlm, Mode};
use serde_json::{Value, json};
use swarm_core::domain::{ConversationId, ConversationStatus, FailureKind};
use swarm_core::faults::{CrashPoint, FaultPlan};
use swarm_core::language::Language;
use swarm_core::llm::Models;
use swarm_core::ports::ConversationStore;
use swarm_core::prompts::{
    ANSWER_LANGUAGE_MARKER, INSTRUCTION_LANGUAGE_MARKER, REPLY_LANGUAGE_MARKER, SUBTASK_RESULTS_MARKER, language_named,
};
use swarm_core::timings::Timings;
use swarm_local::{BackendChoice, Function, LocalStack, StackOptions, Wraps};
use swarm_offline::offline_label;
use swarm_tests::{
    FlakyStore, StoreOp, case_language, cases, over_offline, script_problems, simplified_cases, traditional_cases,
    unmet_expectations, with_plan,
};

/// How long a test waits for one conversation.
const PATIENCE: Duration = Duration::from_secs(60);

swarm_tests::on_both_backends!(
    every_case_is_answered_in_the_language_and_script_it_was_written_in,
    the_deadline_paths_model_free_reply_is_written_in_the_stored_script,
);

async fn every_case_is_answered_in_the_language_and_script_it_was_written_in(backend: BackendChoice) {
    let stack = LocalStack::start(StackOptions { backend, ..StackOptions::default() }).await.unwrap();
    let all: Vec<_> = cases().into_iter().chain(simplified_cases()).chain(traditional_cases()).collect();
    assert_eq!(all.iter().filter(|c| case_language(c) == Language::SimplifiedChinese).count(), 7);
    assert_eq!(all.iter().filter(|c| case_language(c) == Language::TraditionalChinese).count(), 6);
    // Every message at once: the conversations run side by side, as customers' do.
    let mut posted = Vec::new();
    for case in &all {
        let (status, body) = stack.post_conversation(&case.query, &case.customer_id, None).await.unwrap();
        assert_eq!(status, 202, "{}: {body}", case.id);
        posted.push(body["conversation_id"].as_str().unwrap().to_owned());
    }
    let mut failures = Vec::new();
    for (case, id) in all.iter().zip(&posted) {
        let view = stack.wait_finished(id, PATIENCE).await.unwrap();
        let stored = stack.store().get_conversation(&ConversationId::parse(id).unwrap()).await.unwrap().unwrap();
        let language = case_language(case);
        let reply = view.reply.clone().unwrap_or_default();
        let mut problems = unmet_expectations(case, &view);
        problems.extend(script_problems(&reply, language));
        if stored.language != Some(language) {
            problems.push(format!("stored language {:?}, expected {language}", stored.language));
        }
        if !reply.trim_end().ends_with(offline_label(language)) {
            problems.push(format!("no {language} offline label"));
        }
        if !problems.is_empty() {
            failures.push(format!("{} ({language}): {}\nreply: {reply}", case.id, problems.join("; ")));
        }
    }
    stack.shutdown().await;
    assert!(failures.is_empty(), "{} case(s) fall short:\n{}", failures.len(), failures.join("\n\n"));
}

/// Kills every worker that began a subtask's attempt: the subtask began, and each time its message
/// comes back (after the receipt visibility, 2.5 s here) its new attempt dies too, so it never
/// finishes before the 10 s deadline and the deadline path closes it (the fifth receive, which would
/// dead-letter it 2.5 s later, comes at the deadline at the earliest); (the aggregator never getting
/// its lease) only the deadline path answers, without a model. (A conversation none of whose subtasks
/// began is failed, not answered; since the receipt heartbeat a single crash costs only a retry.)
struct KillEveryAttempt;

impl FaultPlan for KillEveryAttempt {
    fn crash(&self, point: CrashPoint) -> bool {
        point == CrashPoint::WorkerAfterBeginAttempt
    }
}

async fn the_deadline_paths_model_free_reply_is_written_in_the_stored_script(backend: BackendChoice) {
    // The standard deadline (120 s) at 1/12: 10 s. The orchestrator's budgets × 3 (each store write or
    // send after the plan 500 ms, where the table's at 1/24 left 83 ms and a loaded emulator's write
    // missed it: a 503); its planning lease (8.75 s) still ends before the deadline.
    let timings =
        swarm_tests::with_orchestrator_slowed(swarm_tests::with_room_for_tool_calls(Timings::standard().clone()), 3);
    let plan = json!({"subtasks": [
        {"id": "w01", "instruction": "查詢訂單 A1029 的狀態", "tools": ["shop__get_order"]}
    ]});
    let stack = LocalStack::start(StackOptions {
        backend,
        models: Some(Models::single(Arc::new(with_plan(over_offline(), &plan.to_string())))),
        faults: Some(Arc::new(KillEveryAttempt)),
        wraps: Wraps::default().store(
            &[Function::Aggregator],
            Arc::new(|inner| {
                Arc::new(FlakyStore::new(inner).fail(StoreOp::AcquireLease, "ThrottlingException (injected)"))
                    as Arc<dyn ConversationStore>
            }),
        ),
        timings,
        time_scale: 1.0 / 12.0,
        ..StackOptions::default()
    })
    .await
    .unwrap();
    let (status, body) = stack.post_conversation("訂單 A1029 現在怎麼樣了？", "C104", None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = ConversationId::parse(body["conversation_id"].as_str().unwrap()).unwrap();
    let stored = stack.store().get_conversation(&id).await.unwrap().unwrap();
    let view = stack.wait_finished(id.as_str(), PATIENCE).await;
    stack.shutdown().await;

    assert_eq!(stored.language, Some(Language::TraditionalChinese), "stored before anything else ran");
    let view = view.unwrap();
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    assert_eq!(view.subtasks[0].error_code, Some(FailureKind::DeadlinePassed));
    let reply = view.reply.unwrap_or_default();
    assert_eq!(reply, "以下事項暫時無法完成：\n- 查詢訂單 A1029 的狀態（未能及時完成）");
    assert!(script_problems(&reply, Language::TraditionalChinese).is_empty(), "{reply}");
}

/// The text of a chat message of a recorded request body.
fn text(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

/// Runs `message` through the local stack with the mock LLM as the real model; answers the
/// request bodies it received.
async fn through_the_mock(message: &str) -> Vec<Value> {
    let agent = AgentConfig {
        subtasks: vec![
            AgentSubtask::new("Get the status of order A1029", &[("shop__get_order", json!({"order_id": "A1029"}))]),
            AgentSubtask::new("Check coupon SAVE20", &[("shop__check_coupon", json!({"code": "SAVE20"}))]),
        ],
        reply_from_results: true,
        ..AgentConfig::default()
    };
    let (_, mock) = MockLlm::start(MockConfig { mode: Mode::Agent(agent), ..MockConfig::default() }).await.unwrap();
    let base = mock.base_url();
    let llm = swarm_adapters::llm::LlmConfig::from_lookup(|k| match k {
        "LLM_BASE_URL" => Some(base.clone()),
        "LLM_MODEL" => Some("mock".to_owned()),
        _ => None,
    })
    .unwrap();
    let models = swarm_adapters::llm::build_models(&llm).unwrap();
    let stack = LocalStack::start(StackOptions { models: Some(models), ..StackOptions::default() }).await.unwrap();
    let (status, body) = stack.post_conversation(message, "C104", None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let view = stack.wait_finished(body["conversation_id"].as_str().unwrap(), PATIENCE).await.unwrap();
    stack.shutdown().await;
    assert_eq!(view.status, ConversationStatus::Done, "{view:?}");
    let bodies = mock.bodies();
    mock.shutdown().await;
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_models_plan_work_and_reply_requests_name_the_customers_language() {
    let bodies = through_the_mock("我的訂單 A1029 現在什麼狀態？另外優惠券 SAVE20 還能用嗎？").await;
    let messages = |b: &Value| b["messages"].as_array().cloned().unwrap_or_default();
    let plan: Vec<&Value> =
        bodies.iter().filter(|b| messages(b).first().is_some_and(|m| text(m).contains("\"subtasks\""))).collect();
    let work: Vec<&Value> = bodies
        .iter()
        .filter(|b| messages(b).iter().any(|m| m["role"] == "user" && text(m).starts_with("Subtask ")))
        .collect();
    let reply: Vec<&Value> = bodies
        .iter()
        .filter(|b| messages(b).iter().any(|m| m["role"] == "user" && text(m).contains(SUBTASK_RESULTS_MARKER)))
        .collect();
    assert_eq!((plan.len(), reply.len()), (1, 1), "{bodies:#?}");
    assert!(work.len() >= 2, "{bodies:#?}");

    let system = text(&messages(plan[0])[0]).to_owned();
    assert_eq!(language_named(&system, INSTRUCTION_LANGUAGE_MARKER), Some(Language::TraditionalChinese), "{system}");
    for b in &work {
        let own = messages(b).into_iter().rev().find(|m| text(m).starts_with("Subtask ")).unwrap();
        assert_eq!(language_named(text(&own), ANSWER_LANGUAGE_MARKER), Some(Language::TraditionalChinese));
        assert!(text(&own).contains("Write your answer in Traditional Chinese (繁體中文)"), "{own}");
        assert!(text(&own).contains("Put what the tools say into that language, a refusal's reason too"), "{own}");
    }
    let reply_messages = messages(reply[0]);
    assert_eq!(reply_messages.len(), 2, "system and one user message");
    let user = text(&reply_messages[1]);
    let last = user.rsplit("\n\n").next().unwrap_or_default();
    assert!(
        last.starts_with(
            "Reply language: zh-Hant. Write the whole reply in Traditional Chinese (繁體中文), in Traditional characters only."
        ),
        "the reply request ends in its language instruction: {user}"
    );
    assert!(last.contains("product names and carrier names exactly as the results give them"), "{last}");
    assert!(user.contains("\"language\": \"zh-Hant\""), "{user}");
    assert!(text(&reply_messages[0]).contains("`Reply language:`"), "the system prompt points at it");

    // A Simplified message gets Simplified named, and an English one English, in every request.
    for (message, language) in [
        ("能用 DOUBLE11 这张券吗？我的订单 A1029 到哪了？", Language::SimplifiedChinese),
        ("Where is order A1029, and can I use SAVE20?", Language::English),
    ] {
        let bodies = through_the_mock(message).await;
        let named = |marker: &str| -> Vec<Option<Language>> {
            bodies
                .iter()
                .flat_map(&messages)
                .filter(|m| text(m).contains(marker))
                .map(|m| language_named(text(&m), marker))
                .collect()
        };
        let (plan, work, reply) =
            (named(INSTRUCTION_LANGUAGE_MARKER), named(ANSWER_LANGUAGE_MARKER), named(REPLY_LANGUAGE_MARKER));
        assert_eq!((plan.len(), reply.len()), (1, 1), "{message}: {bodies:#?}");
        assert!(work.len() >= 2, "{message}: {bodies:#?}");
        for named in plan.iter().chain(&work).chain(&reply) {
            assert_eq!(*named, Some(language), "{message}");
        }
        let reply_request = bodies
            .iter()
            .flat_map(&messages)
            .find(|m| m["role"] == "user" && text(m).contains(SUBTASK_RESULTS_MARKER))
            .unwrap();
        let expected = format!("\"language\": \"{}\"", language.tag());
        assert!(text(&reply_request).contains(&expected), "{message}: {reply_request}");
    }
}
