//! Retries without storms: exponential backoff with full jitter, `Retry-After`, bounded by a deadline.
//!
//! Rules (DESIGN.md "Time"): a rate-limited answer with a `Retry-After`
//! (or `retry-after-ms`) waits at least that long plus a positive jitter, so
//! a burst of workers told "1 s" does not come back in lockstep; any other
//! transient failure waits a full-jitter exponential backoff. No wait and no
//! attempt runs past the caller's deadline (the Lambda's remaining time).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tracing::Instrument;

use crate::obs;

use crate::ports::{ChatModel, ChatRequest, ChatResponse, LlmError};
use crate::timings::Timings;

/// Shortest time worth starting an attempt with: a retry whose wait leaves
/// less than this before the deadline is not made (the answer could not arrive).
pub const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(500);

/// How often and how long to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlmRetryPolicy {
    /// Attempts in all, the first included (≥ 1).
    pub max_attempts: u32,
    /// Backoff cap of the first retry; doubles per attempt.
    pub base_delay: Duration,
    /// Largest backoff cap; also the largest jitter added to a `Retry-After`.
    pub max_delay: Duration,
}

impl Default for LlmRetryPolicy {
    /// The standard timing table's `[llm]` retries (6 attempts, 500 ms base, 20 s cap).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl LlmRetryPolicy {
    /// `llm.retry_attempts`, `llm.retry_base_ms`, `llm.retry_max_ms` of `timings`.
    pub fn from_timings(timings: &Timings) -> Self {
        Self {
            max_attempts: timings.llm.retry_attempts,
            base_delay: timings.llm.retry_base,
            max_delay: timings.llm.retry_max,
        }
    }
}

/// Why [`complete_with_retry`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A permanent or context-length failure (not retried), or the last
    /// transient failure once `max_attempts` were made.
    #[error("{0}")]
    Failed(LlmError),
    /// The deadline would pass before the next attempt could finish (or
    /// passed during one); `last` is the failure that asked for the retry.
    /// The worker hands the message back rather than failing the subtask.
    #[error("out of time for the LLM call{}", last.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    OutOfTime { last: Option<LlmError> },
}

impl CallError {
    /// `true` when a later attempt (a redelivery) may succeed: out of time, or a transient failure.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Failed(e) => e.is_transient(),
            Self::OutOfTime { .. } => true,
        }
    }

    /// What a log line may say of this error: the model error's class and HTTP status, never the
    /// provider's message ([`LlmError::log_safe`]).
    pub fn log_safe(&self) -> String {
        match self {
            Self::Failed(e) => e.log_safe().to_string(),
            Self::OutOfTime { last: Some(e) } => format!("out of time for the LLM call (last error: {})", e.log_safe()),
            Self::OutOfTime { last: None } => "out of time for the LLM call".to_owned(),
        }
    }

    /// The underlying model error, if any.
    pub fn llm_error(&self) -> Option<&LlmError> {
        match self {
            Self::Failed(e) => Some(e),
            Self::OutOfTime { last } => last.as_ref(),
        }
    }
}

/// The wait before retry number `attempt + 1` (`attempt` = failed attempts so
/// far minus one: 0 after the first failure).
///
/// - With `retry_after`: `retry_after + j`, `j` uniform in
///   `[1 ms, min(max(retry_after, base_delay), max_delay)]` — never sooner
///   than the provider asked, and spread over up to one more such interval.
/// - Without: full jitter, uniform in `[0, min(max_delay, base_delay · 2^attempt)]`.
pub fn backoff_delay(
    attempt: u32,
    retry_after: Option<Duration>,
    policy: &LlmRetryPolicy,
    rng: &mut impl Rng,
) -> Duration {
    match retry_after {
        Some(ra) => {
            let span = ra.max(policy.base_delay).min(policy.max_delay).max(Duration::from_millis(1));
            let jitter_ms = rng.random_range(1..=span.as_millis().max(1) as u64);
            ra + Duration::from_millis(jitter_ms)
        }
        None => {
            let cap = policy.base_delay.saturating_mul(2u32.saturating_pow(attempt.min(31))).min(policy.max_delay);
            let cap_ms = cap.as_millis() as u64;
            Duration::from_millis(if cap_ms == 0 { 0 } else { rng.random_range(0..=cap_ms) })
        }
    }
}

/// Calls `model`, retrying transient and rate-limited failures: after a
/// `Retry-After` / `retry-after-ms` it waits at least that long plus a
/// positive jitter, otherwise exponential backoff with full jitter
/// ([`backoff_delay`]). Never sleeps past `deadline`; each attempt (the wait
/// for an in-flight slot included) is bounded by the remaining time
/// (`tokio::time::timeout_at`).
///
/// Errors: [`CallError::Failed`] for permanent and context-length failures at
/// once, and for the last transient failure after `policy.max_attempts`;
/// [`CallError::OutOfTime`] when the deadline comes first.
pub async fn complete_with_retry(
    model: &dyn ChatModel,
    request: &ChatRequest,
    policy: &LlmRetryPolicy,
    deadline: Instant,
) -> Result<ChatResponse, CallError> {
    // One `chat {model}` span per round, retries included (GenAI semantic conventions).
    let name = model.model_name();
    let span = obs::spans::llm_round(&name, request);
    let mut attempts = Attempts { model: &name, purpose: request.purpose, made: 0, retry_class: None };
    let result = rounds(model, request, policy, deadline, &mut attempts).instrument(span.clone()).await;
    match &result {
        Ok(response) => obs::spans::record_llm_answer(&span, response, attempts.made, attempts.retry_class),
        Err(e) => {
            let class = match e {
                CallError::Failed(e) => obs::metrics::llm_error_class(e),
                CallError::OutOfTime { .. } => "timeout",
            };
            obs::spans::record_llm_failure(&span, class, attempts.made, attempts.retry_class);
        }
    }
    result
}

/// What one round's attempts were, for its span and metrics.
struct Attempts<'a> {
    model: &'a str,
    purpose: crate::ports::Purpose,
    made: u32,
    /// The class of the latest failure that was retried.
    retry_class: Option<&'static str>,
}

impl Attempts<'_> {
    /// One request to the model, timed and counted (`swarm_llm_*`).
    async fn attempt(
        &mut self,
        model: &dyn ChatModel,
        request: &ChatRequest,
        deadline: Instant,
    ) -> Result<Result<ChatResponse, LlmError>, tokio::time::error::Elapsed> {
        self.made += 1;
        let started = Instant::now();
        let answer = tokio::time::timeout_at(deadline, model.complete(request)).await;
        let outcome = match &answer {
            Ok(Ok(response)) => Ok(&response.usage),
            Ok(Err(e)) => Err(obs::metrics::llm_error_class(e)),
            Err(_) => Err("timeout"),
        };
        obs::metrics::llm_attempt(self.model, self.purpose, started.elapsed(), outcome);
        answer
    }
}

async fn rounds(
    model: &dyn ChatModel,
    request: &ChatRequest,
    policy: &LlmRetryPolicy,
    deadline: Instant,
    attempts: &mut Attempts<'_>,
) -> Result<ChatResponse, CallError> {
    let max_attempts = policy.max_attempts.max(1);
    let mut last: Option<LlmError> = None;
    for attempt in 0..max_attempts {
        if Instant::now() >= deadline {
            return Err(CallError::OutOfTime { last });
        }
        let error = match attempts.attempt(model, request, deadline).await {
            Err(_elapsed) => {
                return Err(CallError::OutOfTime {
                    last: Some(LlmError::Transient { status: None, message: "no answer before the deadline".into() }),
                });
            }
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(e)) if !e.is_transient() => return Err(CallError::Failed(e)),
            Ok(Err(e)) => e,
        };
        if attempt + 1 >= max_attempts {
            return Err(CallError::Failed(error));
        }
        let retry_after = match &error {
            LlmError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        };
        let delay = backoff_delay(attempt, retry_after, policy, &mut rand::rng());
        let wake = Instant::now() + delay;
        if wake + MIN_ATTEMPT_TIME > deadline {
            tracing::info!(model = %model.label(), attempt = attempt + 1, delay_ms = delay.as_millis() as u64, error = %error.log_safe(), "llm retry would pass the deadline");
            return Err(CallError::OutOfTime { last: Some(error) });
        }
        tracing::info!(model = %model.label(), attempt = attempt + 1, delay_ms = delay.as_millis() as u64, error = %error.log_safe(), "llm call will be retried");
        let class = obs::metrics::llm_error_class(&error);
        obs::metrics::llm_retry(attempts.model, class);
        attempts.retry_class = Some(class);
        last = Some(error);
        tokio::time::sleep_until(wake).await;
    }
    Err(CallError::OutOfTime { last })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn full_jitter_stays_under_the_doubling_cap() {
        let p = LlmRetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 0..12 {
            let cap = (p.base_delay * 2u32.pow(attempt)).min(p.max_delay);
            let samples: Vec<Duration> = (0..200).map(|_| backoff_delay(attempt, None, &p, &mut rng)).collect();
            assert!(samples.iter().all(|d| *d <= cap), "attempt {attempt}");
            // Full jitter: both halves of the range are used.
            assert!(samples.iter().any(|d| *d < cap / 2) && samples.iter().any(|d| *d > cap / 2), "attempt {attempt}");
        }
    }

    #[test]
    fn retry_after_is_honoured_plus_a_positive_jitter() {
        let p = LlmRetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let ra = Duration::from_secs(1);
        let samples: Vec<Duration> = (0..500).map(|_| backoff_delay(0, Some(ra), &p, &mut rng)).collect();
        assert!(samples.iter().all(|d| *d > ra && *d <= ra * 2));
        let spread = *samples.iter().max().unwrap() - *samples.iter().min().unwrap();
        assert!(spread > Duration::from_millis(800), "{spread:?}");
    }
}
