//! The AWS call retry policy and the transient/permanent classes of AWS SDK errors, shared by the DynamoDB and SQS adapters (and the local platform's AWS calls).
//!
//! The adapters switch the SDK's own retries off and own the policy, so attempts
//! do not multiply: [`AwsRetryPolicy::run`] retries what [`sdk_error_is_transient`]
//! calls transient, with full-jitter backoff and a deadline on every attempt.

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use swarm_core::timings::Timings;

/// Error codes worth retrying in place: throttling, contention, server faults.
const TRANSIENT_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "PriorRequestNotComplete",
    // SQS names for the same conditions (the policy is shared with the SQS adapter).
    "RequestThrottled",
    "InternalError",
    "KmsThrottled",
    "OverLimit",
];

/// How an AWS adapter retries a transient failure in place: bounded attempts,
/// exponential backoff with full jitter, and a deadline on every attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwsRetryPolicy {
    /// Attempts in all, including the first (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time, up to `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Deadline of one attempt (one HTTP exchange); a timeout counts as transient.
    pub attempt_timeout: Duration,
}

impl Default for AwsRetryPolicy {
    /// The standard timing table's `[aws]` retries: 4 attempts, 50 ms base, 1 s cap, 10 s per attempt (at most ~43 s in all).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl AwsRetryPolicy {
    /// `aws.retry_attempts`, `aws.retry_base_ms`, `aws.retry_max_ms`, `aws.attempt_timeout_secs` of `timings`.
    pub fn from_timings(timings: &Timings) -> Self {
        Self {
            max_attempts: timings.aws.retry_attempts,
            base_delay: timings.aws.retry_base,
            max_delay: timings.aws.retry_max,
            attempt_timeout: timings.aws.attempt_timeout,
        }
    }

    /// Full-jitter delay before attempt `attempt + 1` (0-based `attempt` that failed):
    /// uniform in `0..=min(max_delay, base_delay * 2^attempt)`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(2u32.saturating_pow(attempt.min(16))).min(self.max_delay);
        let ms = u64::try_from(exp.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::random_range(0..=ms))
    }

    /// Runs `call` until it succeeds, fails with an error `is_transient` rejects,
    /// or `max_attempts` are used up; each attempt is cut off after `attempt_timeout`.
    pub async fn run<T, E, R, F, Fut>(
        &self,
        service: &'static str,
        op: &'static str,
        is_transient: impl Fn(&SdkError<E, R>) -> bool,
        call: F,
    ) -> Result<T, SdkError<E, R>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let mut attempt = 0u32;
        loop {
            let outcome = match tokio::time::timeout(self.attempt_timeout, call()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(SdkError::timeout_error(format!(
                    "{service} {op} gave no answer within {:?}",
                    self.attempt_timeout
                ))),
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) if attempt + 1 < self.max_attempts.max(1) && is_transient(&e) => {
                    let delay = self.backoff(attempt);
                    tracing::warn!(
                        service,
                        op,
                        attempt = attempt + 1,
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        error = %DisplayErrorContext(&e),
                        "transient AWS failure, retrying in place"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
/// Whether an SDK failure may go away on retry: timeouts, connection failures,
/// unparseable responses, throttling/contention codes and HTTP 5xx.
pub fn sdk_error_is_transient<E>(e: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    match e {
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => true,
        SdkError::DispatchFailure(d) => !d.is_user(),
        SdkError::ServiceError(ctx) => {
            let code_transient = ctx.err().code().is_some_and(|c| TRANSIENT_CODES.contains(&c));
            code_transient || http_status(e).is_some_and(|s| s >= 500)
        }
        _ => false,
    }
}

fn http_status<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_backoff_stays_under_the_cap() {
        let p = AwsRetryPolicy::default();
        for attempt in 0..40 {
            assert!(p.backoff(attempt) <= p.max_delay);
        }
    }
}
