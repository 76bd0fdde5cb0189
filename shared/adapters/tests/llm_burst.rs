//! A burst of 50 concurrent calls against the mock LLM with 30% 429s (`Retry-After: 1`): all succeed, few attempts, retries spread out and none early.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use mock_llm::{Arrival, Faults, MockConfig, MockLlm};
use swarm_adapters::llm::HttpChatModel;
use swarm_adapters::llm::config::LlmEndpoint;
use swarm_core::llm::pricing::PriceTable;
use swarm_core::llm::retry::{LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{ChatMessage, ChatRequest, Purpose};

const CALLS: usize = 50;

// Real time on loopback; only ordering and spread facts recorded by the mock are asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_fifty_with_thirty_percent_rate_limits_all_succeed_with_spread_out_retries() -> Result<()> {
    let config = MockConfig {
        seed: 7,
        faults: Faults { rate_limit: 0.3, retry_after: Some(Duration::from_secs(1)), ..Faults::default() },
        ..MockConfig::default()
    };
    let (_, mock) = MockLlm::start(config).await?;
    let endpoint = LlmEndpoint::new(mock.base_url(), None, "burst-model");
    let model = HttpChatModel::new(&endpoint, Duration::from_secs(10), 64, PriceTable::default())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let policy = LlmRetryPolicy::default();
    let requests: Vec<ChatRequest> = (0..CALLS)
        .map(|i| ChatRequest {
            purpose: Purpose::Reply,
            messages: vec![ChatMessage::User { content: format!("burst call {i:02}") }],
            tools: vec![],
            max_tokens: None,
            tool_choice: Default::default(),
        })
        .collect();
    let results =
        futures::future::join_all(requests.iter().map(|r| complete_with_retry(&model, r, &policy, deadline))).await;
    for (i, r) in results.iter().enumerate() {
        assert!(r.is_ok(), "call {i}: {r:?}");
    }

    let stats = mock.stats();
    let attempts = stats.requests as f64 / CALLS as f64;
    assert!(attempts < 3.0, "{attempts} attempts per call on average");

    let mut by_call: BTreeMap<&str, Vec<&Arrival>> = BTreeMap::new();
    for a in &stats.arrivals {
        by_call.entry(a.key.as_str()).or_default().push(a);
    }
    assert_eq!(by_call.len(), CALLS);
    let mut retry_starts = Vec::new();
    for (key, arrivals) in &mut by_call {
        arrivals.sort_by_key(|a| a.seq);
        assert_eq!(arrivals.last().map(|a| a.status), Some(200), "{key} ends with a success");
        for pair in arrivals.windows(2) {
            let (limited, retry) = (pair[0], pair[1]);
            assert_eq!(limited.status, 429, "{key}: only rate limits are retried here");
            let answered = limited.responded_ms.context("429 answered")?;
            let wait_ms = limited.retry_after_ms.context("429 carries Retry-After")? as f64;
            assert!(
                retry.arrived_ms >= answered + wait_ms,
                "{key}: retry at {:.0} ms, before the Retry-After ended at {:.0} ms",
                retry.arrived_ms,
                answered + wait_ms
            );
            retry_starts.push(retry.arrived_ms);
        }
    }
    assert!(retry_starts.len() >= 5, "the seed gives a burst with retries: {}", retry_starts.len());
    let first = retry_starts.iter().copied().fold(f64::INFINITY, f64::min);
    let last = retry_starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert!(last - first >= 500.0, "retries spread over {:.0} ms only", last - first);
    Ok(())
}
