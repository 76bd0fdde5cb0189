//! A fan-out of 50 subtasks against a provider that rate-limits 30% of requests: every subtask succeeds, retries honour `Retry-After` and spread out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::collections::HashMap;
use std::time::Duration;

use mock_llm::{AgentConfig, Faults, MockConfig, MockLlm, Mode};
use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_local::{LocalStack, StackOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subtasks_survive_thirty_percent_429s_without_a_retry_storm() {
    let config = MockConfig {
        seed: 7,
        mode: Mode::Agent(AgentConfig {
            plan_subtasks: 50,
            final_text: Some("Order A1029 is paid.".into()),
            ..AgentConfig::default()
        }),
        faults: Faults { rate_limit: 0.3, retry_after: Some(Duration::from_secs(1)), ..Faults::default() },
        record_bodies: false,
        ..MockConfig::default()
    };
    let (_, mock) = MockLlm::start(config).await.unwrap();
    let base = mock.base_url();
    let lookup = |k: &str| match k {
        "LLM_BASE_URL" => Some(base.clone()),
        "LLM_MODEL" => Some("mock".to_owned()),
        _ => None,
    };
    let llm = swarm_adapters::llm::LlmConfig::from_lookup(lookup).unwrap();
    let models = swarm_adapters::llm::build_models(&llm).unwrap();
    let stack = LocalStack::start(StackOptions {
        models: Some(models),
        worker_concurrency: Some(50),
        ..StackOptions::default()
    })
    .await
    .unwrap();

    let (status, body) = stack.post_conversation("Check order A1029 fifty times", "C104", None).await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["conversation_id"].as_str().unwrap().to_owned();
    let view = stack.wait_finished(&id, Duration::from_secs(90)).await.unwrap();
    assert_eq!(view.status, ConversationStatus::Done);
    assert_eq!(view.subtasks.len(), 50);
    assert!(
        view.subtasks.iter().all(|s| s.status == SubtaskStatus::Succeeded),
        "{:?}",
        view.subtasks.iter().filter(|s| s.status != SubtaskStatus::Succeeded).collect::<Vec<_>>()
    );

    let stats = mock.stats();
    let ok = stats.arrivals.iter().filter(|a| a.status == 200).count();
    let limited = stats.arrivals.iter().filter(|a| a.status == 429).count();
    assert!(limited > 10, "the mock did rate-limit ({limited} of {})", stats.requests);
    // Every call ends in exactly one success, so requests / successes = attempts per call.
    let attempts_per_call = stats.requests as f64 / ok as f64;
    assert!(attempts_per_call < 3.0, "{attempts_per_call:.2} attempts per call");
    // A retry is the next arrival of the same call (same last user message) after its 429.
    let mut last_429: HashMap<&str, (f64, u64)> = HashMap::new();
    let mut retry_starts = Vec::new();
    for a in &stats.arrivals {
        if let Some((at, wait_ms)) = last_429.remove(a.key.as_str()) {
            assert!(
                a.arrived_ms >= at + wait_ms as f64,
                "a retry came {:.0} ms after its 429, before Retry-After {wait_ms} ms",
                a.arrived_ms - at
            );
            retry_starts.push(a.arrived_ms);
        }
        if a.status == 429 {
            last_429.insert(a.key.as_str(), (a.arrived_ms, a.retry_after_ms.unwrap_or(0)));
        }
    }
    retry_starts.sort_by(f64::total_cmp);
    let span = retry_starts.last().unwrap() - retry_starts.first().unwrap();
    assert!(span >= 500.0, "retries spread over {span:.0} ms");
    stack.shutdown().await;
}
