//! Retry timing on tokio's paused clock: `Retry-After` honoured with jitter, full-jitter backoff bounds, attempts, and the deadline.

use std::time::Duration;

use anyhow::{Context, Result};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use swarm_adapters::llm::wire::classify_error;
use swarm_core::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use swarm_core::ports::{ChatRequest, LlmError, Purpose};
use swarm_testing::{Reply, ScriptedModel, text_response};
use tokio::time::Instant;

fn ok() -> Reply {
    Ok(text_response("done"))
}

/// The `error-429-retry-after` fixture case, classified by the real client code.
fn fixture_429() -> Reply {
    let mut h = HeaderMap::new();
    h.insert(HeaderName::from_static("retry-after"), HeaderValue::from_static("3"));
    let body = br#"{"error": {"message": "Your account reached its TPM rate limit, please retry later", "type": "rate_limit_reached_error"}}"#;
    Err(classify_error(429, &h, body))
}

fn rate_limited(after: Duration) -> Reply {
    Err(LlmError::RateLimited { status: 429, retry_after: Some(after), message: "slow down".into() })
}

fn transient() -> Reply {
    Err(LlmError::Transient { status: Some(502), message: "bad gateway".into() })
}

fn request() -> ChatRequest {
    ChatRequest {
        purpose: Purpose::Work,
        messages: vec![],
        tools: vec![],
        max_tokens: None,
        tool_choice: Default::default(),
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

#[tokio::test(start_paused = true)]
async fn retry_after_of_three_seconds_delays_the_next_attempt_past_three_seconds_with_jitter() -> Result<()> {
    let mut waits = Vec::new();
    for _ in 0..20 {
        let model = ScriptedModel::new(vec![fixture_429(), ok()]);
        let r = complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), far()).await?;
        assert_eq!(r.content.as_deref(), Some("done"));
        let calls = model.call_times();
        assert_eq!(calls.len(), 2);
        let wait = calls[1] - calls[0];
        assert!(wait > Duration::from_secs(3), "jitter must be positive: {wait:?}");
        assert!(wait <= Duration::from_secs(6), "jitter bounded by one more Retry-After: {wait:?}");
        waits.push(wait);
    }
    waits.sort();
    waits.dedup();
    assert!(waits.len() > 10, "jitter varies between calls: {waits:?}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn transient_failures_back_off_within_the_doubling_cap_then_succeed() -> Result<()> {
    let policy =
        LlmRetryPolicy { max_attempts: 6, base_delay: Duration::from_millis(500), max_delay: Duration::from_secs(4) };
    let model = ScriptedModel::new(vec![transient(), transient(), transient(), transient(), transient(), ok()]);
    complete_with_retry(&model, &request(), &policy, far()).await?;
    let calls = model.call_times();
    assert_eq!(calls.len(), 6);
    for (k, pair) in calls.windows(2).enumerate() {
        let cap = (policy.base_delay * 2u32.pow(k as u32)).min(policy.max_delay);
        assert!(pair[1] - pair[0] <= cap, "retry {k}: {:?} > {cap:?}", pair[1] - pair[0]);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn attempts_stop_at_the_maximum_with_the_last_error() -> Result<()> {
    let model = ScriptedModel::new((0..10).map(|_| transient()));
    let e =
        complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), far()).await.err().context("must fail")?;
    assert!(matches!(e, CallError::Failed(LlmError::Transient { status: Some(502), .. })), "{e:?}");
    assert_eq!(model.call_times().len(), 6);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn permanent_and_context_length_failures_are_not_retried() -> Result<()> {
    let permanent: Reply = Err(LlmError::Permanent { status: 401, message: "Invalid Authentication".into() });
    let context: Reply = Err(LlmError::ContextLength { status: 400, message: "too long".into() });
    for (outcome, want_status) in [(permanent, 401), (context, 400)] {
        let model = ScriptedModel::new(vec![outcome, ok()]);
        let e = complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), far())
            .await
            .err()
            .context("must fail")?;
        let status = match e {
            CallError::Failed(LlmError::Permanent { status, .. } | LlmError::ContextLength { status, .. }) => status,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(status, want_status);
        assert_eq!(model.call_times().len(), 1);
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_deadline_gives_out_of_time_without_sleeping() -> Result<()> {
    let start = Instant::now();
    let model = ScriptedModel::new(vec![rate_limited(Duration::from_secs(10)), ok()]);
    let e = complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), start + Duration::from_secs(5))
        .await
        .err()
        .context("must run out of time")?;
    assert!(matches!(e, CallError::OutOfTime { last: Some(LlmError::RateLimited { status: 429, .. }) }), "{e:?}");
    assert_eq!(Instant::now() - start, Duration::ZERO, "gave up at once instead of sleeping");
    assert_eq!(model.call_times().len(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_hanging_model_is_cut_off_exactly_at_the_deadline() -> Result<()> {
    let start = Instant::now();
    let model = ScriptedModel::new(vec![ok()]).hanging();
    let e = complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), start + Duration::from_secs(5))
        .await
        .err()
        .context("must run out of time")?;
    assert!(matches!(e, CallError::OutOfTime { .. }), "{e:?}");
    assert!(e.is_transient());
    assert_eq!(Instant::now() - start, Duration::from_secs(5));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retries_never_sleep_past_the_deadline() -> Result<()> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(4);
    let model = ScriptedModel::new((0..20).map(|_| transient()));
    let policy =
        LlmRetryPolicy { max_attempts: 20, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(8) };
    let e = complete_with_retry(&model, &request(), &policy, deadline).await.err().context("must fail")?;
    assert!(matches!(e, CallError::OutOfTime { last: Some(LlmError::Transient { .. }) }), "{e:?}");
    assert!(Instant::now() <= deadline);
    assert!(model.call_times().iter().all(|t| *t < deadline));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_passed_makes_no_call() -> Result<()> {
    let model = ScriptedModel::new(vec![ok()]);
    let e = complete_with_retry(&model, &request(), &LlmRetryPolicy::default(), Instant::now())
        .await
        .err()
        .context("must fail")?;
    assert!(matches!(e, CallError::OutOfTime { last: None }), "{e:?}");
    assert!(model.call_times().is_empty());
    Ok(())
}
