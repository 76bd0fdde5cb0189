//! The worker's settings, read once at cold start from the timing table: what each room of the worker is given (rounds and tool waits for the agent loop, confirmation delays for side effects, the re-arm, lease and sweep for the closer).

use std::time::Duration;

use swarm_core::llm::retry::LlmRetryPolicy;
use swarm_core::ports::{MAX_DELAY_SECONDS, MAX_VISIBILITY_SECONDS};
use swarm_core::timings::{Timings, seconds_rounded_up};

/// Worker settings, read once at cold start.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Most LLM rounds per subtask; the last one forbids tool calls (`tool_choice: "none"`), forcing an answer.
    pub max_rounds: u32,
    /// Longest wait for one tool call.
    pub tool_timeout: Duration,
    /// Wait before a tools/list answered with a transient error is asked again (while a round still fits).
    pub tool_list_retry: Duration,
    /// Time that must remain before starting an LLM round; less hands the work back.
    pub min_round_time: Duration,
    /// `DelaySeconds` of a handed-back message.
    pub handback_delay_secs: u32,
    /// Hand-backs allowed before a partial result is recorded.
    pub max_handbacks: u32,
    pub retry: LlmRetryPolicy,
    /// Conversation-wide token budget; past it remaining subtasks stop with that reason.
    pub token_budget: Option<u64>,
    /// Transcript size (estimated tokens) above which older rounds are compressed.
    pub compress_above_tokens: u64,
    /// Characters of one tool output kept in the transcript.
    pub max_tool_output_chars: usize,
    /// Estimated tokens the tool results of one round may take together; a larger round is cut
    /// fairly (`transcript::fit_round`), each cut result saying so.
    pub round_budget_tokens: u64,
    /// Kept back from the Lambda deadline for writing results and returning.
    pub safety_margin: Duration,
    /// How long an approval asked for can be decided (`money.approval_expiry_secs`).
    pub approval_expiry: Duration,
    /// A conversation's idle time after a turn (`conversation.idle_expiry_secs`): a decision told
    /// as a turn refreshes it like any turn.
    pub idle_expiry: Duration,
    /// `DelaySeconds` of a subtask with its own queue handed back while its dependencies are open.
    pub dependency_wait_secs: u32,
    /// `DelaySeconds` before a side effect whose outcome is not known is replayed to confirm it.
    pub confirm_delay_secs: u32,
    /// Replays of such a side effect before it is left as submitted.
    pub confirm_attempts: u32,
    /// Kept back from the conversation's deadline: a subtask stops by the earlier of the two deadlines.
    pub conversation_margin: Duration,
    /// Tool calls of one round running at once, at most (the rest wait, answers stay in call order).
    pub max_parallel_tool_calls: usize,
    /// Seconds until a message reported in `batchItemFailures` comes back (`ChangeMessageVisibility`).
    pub retry_visibility_secs: u32,
    /// The receipt heartbeat and the attempt lease's ([`Heartbeat`]).
    pub heartbeat: Heartbeat,
    /// `DelaySeconds` of the deadline path's next run while the conversation is not terminal.
    pub rearm_secs: u32,
    /// The aggregation lease the deadline path takes when it answers the conversation itself.
    pub aggregation_lease: Duration,
    /// The sweep's shards, and how much one sweep takes on.
    pub sweep: SweepSettings,
}

/// How a live invocation keeps what it holds (the table's `[worker]` heartbeat values): its batch's
/// messages in flight (the receipt visibility) and its subtask's attempt lease. A crashed or
/// timed-out invocation stops beating with it, so both are free again soon after it died.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Visibility timeout, whole seconds (at least 1), every message of the batch is kept at while
    /// the invocation is alive (`ChangeMessageVisibilityBatch` at its start and every beat).
    pub receipt_visibility_secs: u32,
    /// Time between two beats.
    pub every: Duration,
    /// Longest wait for one beat's calls (one AWS attempt's deadline): a late one is cut and tried
    /// again on the next beat.
    pub cut: Duration,
    /// The attempt lease a running subtask holds, renewed every beat.
    pub attempt_lease: Duration,
}

/// How the sweep walks the sparse index (the table's `[sweep]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepSettings {
    /// Shards of the index: `sweep_shard` 0..shards.
    pub shards: u32,
    /// Conversations whose deadline path runs at once.
    pub max_parallel: usize,
    /// Conversations taken from each shard by one sweep.
    pub per_shard: usize,
    /// An approved side effect not run this long after its token was issued is past the token's
    /// window (`money.approval_execute_within_secs`): the sweep counts it and, holding the approval
    /// key, re-enqueues it with a fresh token valid as long again.
    pub reissue_after: Duration,
}

impl Default for WorkerSettings {
    /// The standard timing table's values ([`WorkerSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl WorkerSettings {
    /// Rounds, tool timeout, minimum round time, hand-back delay (rounded up to whole
    /// seconds: `DelaySeconds`), hand-backs, margins, parallel calls, the retry visibility timeout
    /// and LLM retries from the table's `[worker]` and `[llm]`; the deadline path's re-arm
    /// (`conversation.rearm_secs`), the aggregation lease (`aggregator.lease_secs`) and `[sweep]`;
    /// no token budget.
    pub fn from_timings(timings: &Timings) -> Self {
        let w = &timings.worker;
        let whole_secs = |d: Duration| u32::try_from(seconds_rounded_up(d)).unwrap_or(u32::MAX);
        Self {
            max_rounds: w.max_rounds,
            tool_timeout: w.tool_timeout,
            tool_list_retry: w.tool_list_retry,
            min_round_time: w.min_round,
            handback_delay_secs: u32::try_from(seconds_rounded_up(w.handback_delay)).unwrap_or(MAX_DELAY_SECONDS),
            max_handbacks: w.max_handbacks,
            retry: LlmRetryPolicy::from_timings(timings),
            token_budget: None,
            compress_above_tokens: 24_000,
            max_tool_output_chars: 8_000,
            round_budget_tokens: 12_000,
            safety_margin: w.safety_margin,
            approval_expiry: timings.money.approval_expiry,
            idle_expiry: timings.conversation.idle_expiry,
            dependency_wait_secs: delay_secs(timings.money.dependency_wait),
            confirm_delay_secs: delay_secs(timings.money.confirm_delay),
            confirm_attempts: timings.money.confirm_attempts,
            conversation_margin: w.conversation_margin,
            max_parallel_tool_calls: w.max_parallel_tool_calls.max(1),
            retry_visibility_secs: whole_secs(w.retry_visibility).max(1),
            heartbeat: Heartbeat {
                receipt_visibility_secs: whole_secs(w.receipt_visibility).clamp(1, MAX_VISIBILITY_SECONDS),
                every: w.heartbeat.max(Duration::from_millis(1)),
                cut: timings.aws.attempt_timeout.max(Duration::from_millis(1)),
                attempt_lease: w.attempt_lease,
            },
            rearm_secs: whole_secs(timings.conversation.rearm).clamp(1, MAX_DELAY_SECONDS),
            aggregation_lease: timings.aggregator.lease,
            sweep: SweepSettings {
                shards: timings.sweep.shards.max(1),
                max_parallel: timings.sweep.max_parallel.max(1),
                per_shard: timings.sweep.per_shard.max(1),
                reissue_after: timings.money.approval_execute_within,
            },
        }
    }
}

/// `d` as SQS `DelaySeconds`: whole seconds rounded up, at least 1, at most 900.
fn delay_secs(d: Duration) -> u32 {
    u32::try_from(seconds_rounded_up(d)).unwrap_or(MAX_DELAY_SECONDS).clamp(1, MAX_DELAY_SECONDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_timing_table_with_the_hand_back_delay_in_whole_seconds() {
        let standard = WorkerSettings::default();
        assert_eq!((standard.max_rounds, standard.max_handbacks, standard.handback_delay_secs), (8, 1, 5));
        assert_eq!((standard.tool_timeout, standard.min_round_time), (Duration::from_secs(10), Duration::from_secs(5)));
        assert_eq!(standard.safety_margin, Duration::from_secs(3));
        assert_eq!(standard.retry, LlmRetryPolicy::default());
        let fast = WorkerSettings::from_timings(&Timings::standard().scaled(0.01));
        assert_eq!(fast.tool_timeout, Duration::from_millis(100));
        assert_eq!(fast.safety_margin, Duration::from_millis(30));
        assert_eq!(fast.handback_delay_secs, 1, "50 ms of DelaySeconds is rounded up, never down to 0");
        assert_eq!(fast.retry.base_delay, Duration::from_millis(5));
        assert_eq!(fast.max_rounds, 8);
    }

    #[test]
    fn the_heartbeat_comes_from_the_table_with_the_receipt_visibility_in_whole_seconds() {
        let standard = WorkerSettings::default().heartbeat;
        assert_eq!(
            standard,
            Heartbeat {
                receipt_visibility_secs: 30,
                every: Duration::from_secs(5),
                cut: Duration::from_secs(10),
                attempt_lease: Duration::from_secs(30),
            }
        );
        let fast = WorkerSettings::from_timings(&Timings::standard().scaled(0.01)).heartbeat;
        assert_eq!(fast.receipt_visibility_secs, 1, "300 ms of visibility is held as 1 s, never 0");
        assert_eq!(
            (fast.every, fast.cut, fast.attempt_lease),
            (Duration::from_millis(50), Duration::from_millis(100), Duration::from_millis(300))
        );
    }
}
