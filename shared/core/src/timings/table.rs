//! The shape of the timing table (`shared/core/timings.toml`), shared by `swarm-core` and its build script, which parses the table with it and writes the standard table as Rust.
//!
//! Every section is declared once with [`section!`]: the struct (serde names as in the
//! table, so `*_secs` / `*_ms` keys become [`Duration`]s), how [`Timings::scaled`](super::Timings)
//! treats each field, and how the build script writes it. A key the table has and no
//! struct reads, or a key a struct needs and the table lacks, fails the build.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// What every field of the table is: scaled by the local platform, written as Rust by the build script.
pub(crate) trait Field: Sized {
    /// Durations × `factor` (at least 1 ms); counts unchanged.
    fn scaled(&self, factor: f64) -> Self;
    /// A Rust expression of the value (build script only).
    #[allow(dead_code)] // used by build.rs, which includes this file
    fn to_rust(&self) -> String;
}

/// The shortest duration a scaled table holds.
pub(crate) const MIN_SCALED: Duration = Duration::from_millis(1);

impl Field for Duration {
    fn scaled(&self, factor: f64) -> Self {
        let secs = self.as_secs_f64() * factor;
        // Not a positive finite product (a factor the platform refuses anyway): the floor.
        if secs.is_nan() || secs <= 0.0 {
            return MIN_SCALED;
        }
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX).max(MIN_SCALED)
    }

    fn to_rust(&self) -> String {
        format!("::core::time::Duration::new({}, {})", self.as_secs(), self.subsec_nanos())
    }
}

macro_rules! count_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn scaled(&self, _factor: f64) -> Self {
                *self
            }

            fn to_rust(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
count_field!(u32, usize, i64);

/// Declares one section of the table: its struct and its [`Field`] implementation.
macro_rules! section {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl Field for $name {
            fn scaled(&self, factor: f64) -> Self {
                Self { $($field: self.$field.scaled(factor),)* }
            }

            fn to_rust(&self) -> String {
                let mut out = String::from(concat!(stringify!($name), " { "));
                $(
                    out.push_str(concat!(stringify!($field), ": "));
                    out.push_str(&self.$field.to_rust());
                    out.push_str(", ");
                )*
                out.push('}');
                out
            }
        }
    };
}

fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_secs)
}

fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

section! {
    /// Every timing and capacity of the swarm (the table's sections, `[template]` and `[[rule]]` aside).
    Timings {
        conversation: ConversationTimings,
        api: ApiTimings,
        orchestrator: OrchestratorTimings,
        worker: WorkerTimings,
        refund_worker: SqsFunctionTimings,
        dlq_consumer: SqsFunctionTimings,
        aggregator: AggregatorTimings,
        queues: QueueTimings,
        sweep: SweepTimings,
        gateway: GatewayTimings,
        shop: ToolServerTimings,
        llm: LlmTimings,
        aws: AwsTimings,
        money: MoneyTimings,
        local: LocalTimings,
    }
}

section! {
    /// `[conversation]`.
    ConversationTimings {
        /// After this the conversation is aggregated with what it has (template: `DeadlineSecs`).
        #[serde(rename = "deadline_secs", deserialize_with = "secs")]
        deadline: Duration,
        /// The deadline path re-arms itself this long after it ran while the conversation is not terminal.
        #[serde(rename = "rearm_secs", deserialize_with = "secs")]
        rearm: Duration,
        /// A conversation takes follow-ups for this long after its latest turn started (then 410).
        #[serde(rename = "idle_expiry_secs", deserialize_with = "secs")]
        idle_expiry: Duration,
    }
}

section! {
    /// `[api]`.
    ApiTimings {
        /// API Gateway HTTP API's integration timeout.
        #[serde(rename = "integration_timeout_ms", deserialize_with = "millis")]
        integration_timeout: Duration,
    }
}

section! {
    /// `[orchestrator]`.
    OrchestratorTimings {
        /// The function's timeout.
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// The whole `POST /conversations`, from the invocation's start to its answer.
        #[serde(rename = "request_budget_secs", deserialize_with = "secs")]
        request_budget: Duration,
        /// Whole planning budget, model retries included.
        #[serde(rename = "plan_budget_secs", deserialize_with = "secs")]
        plan_budget: Duration,
        /// Kept back from the request budget for start_run, the sends and the `queued` marker.
        #[serde(rename = "post_plan_secs", deserialize_with = "secs")]
        post_plan: Duration,
        /// The per-call deadline of a store write or queue send after planning.
        #[serde(rename = "aws_call_secs", deserialize_with = "secs")]
        aws_call: Duration,
        /// The planning lease of a `PLANNING` conversation's creator.
        #[serde(rename = "lease_secs", deserialize_with = "secs")]
        lease: Duration,
    }
}

section! {
    /// `[worker]`: the tasks queue's worker and its event source mapping.
    WorkerTimings {
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// Messages per invocation (`BatchSize`).
        batch_size: usize,
        /// The event source mapping's `MaximumConcurrency`.
        max_concurrency: usize,
        /// Kept back from the Lambda deadline for writing results and returning.
        #[serde(rename = "safety_margin_secs", deserialize_with = "secs")]
        safety_margin: Duration,
        /// Kept back from the conversation's deadline: the worker stops by the earlier of the two.
        #[serde(rename = "conversation_margin_secs", deserialize_with = "secs")]
        conversation_margin: Duration,
        /// An LLM round starts only with at least this much time left.
        #[serde(rename = "min_round_secs", deserialize_with = "secs")]
        min_round: Duration,
        /// `DelaySeconds` of a handed-back message.
        #[serde(rename = "handback_delay_secs", deserialize_with = "secs")]
        handback_delay: Duration,
        max_handbacks: u32,
        max_rounds: u32,
        #[serde(rename = "tool_timeout_secs", deserialize_with = "secs")]
        tool_timeout: Duration,
        /// Tool calls of one round running at once, at most.
        max_parallel_tool_calls: usize,
        /// Visibility timeout set (`ChangeMessageVisibility`) on a message reported in `batchItemFailures`.
        #[serde(rename = "retry_visibility_secs", deserialize_with = "secs")]
        retry_visibility: Duration,
        /// Visibility timeout the worker keeps its batch's messages at while its invocation is alive
        /// (`ChangeMessageVisibilityBatch` at the start and every heartbeat).
        #[serde(rename = "receipt_visibility_secs", deserialize_with = "secs")]
        receipt_visibility: Duration,
        /// How often the receipt visibility and the attempt lease are extended.
        #[serde(rename = "heartbeat_secs", deserialize_with = "secs")]
        heartbeat: Duration,
        /// The attempt lease of a running subtask, renewed every heartbeat by its live attempt.
        #[serde(rename = "attempt_lease_secs", deserialize_with = "secs")]
        attempt_lease: Duration,
        /// Wait before a tools/list answered with a transient error is asked again.
        #[serde(rename = "tool_list_retry_secs", deserialize_with = "secs")]
        tool_list_retry: Duration,
    }
}

section! {
    /// A function fed by an SQS event source mapping: `[refund_worker]`, `[dlq_consumer]`.
    SqsFunctionTimings {
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        batch_size: usize,
        max_concurrency: usize,
    }
}

section! {
    /// `[aggregator]`.
    AggregatorTimings {
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// Longest wait for the reply model, retries included.
        #[serde(rename = "reply_budget_secs", deserialize_with = "secs")]
        reply_budget: Duration,
        /// The aggregation lease (`RUNNING → AGGREGATING` holds the conversation this long).
        #[serde(rename = "lease_secs", deserialize_with = "secs")]
        lease: Duration,
        /// Records of one stream batch aggregated at once.
        max_parallel_records: usize,
        stream: StreamTimings,
    }
}

section! {
    /// `[aggregator.stream]`: the DynamoDB stream event source mapping.
    StreamTimings {
        batch_size: usize,
        /// `MaximumRetryAttempts` of a failed batch.
        max_retry_attempts: u32,
    }
}

section! {
    /// `[queues]`.
    QueueTimings {
        /// Redrive policy: receives before a message moves to its DLQ.
        max_receive_count: u32,
        tasks: QueueTiming,
        refund: QueueTiming,
        dead_letters: QueueTiming,
    }
}

section! {
    /// One queue: `[queues.tasks]`, `[queues.refund]`, `[queues.dead_letters]`.
    QueueTiming {
        #[serde(rename = "visibility_timeout_secs", deserialize_with = "secs")]
        visibility_timeout: Duration,
    }
}

section! {
    /// `[sweep]`: the periodic sweep of conversations past their deadline.
    SweepTimings {
        /// Time between two sweeps (EventBridge Scheduler's rate on AWS).
        #[serde(rename = "period_secs", deserialize_with = "secs")]
        period: Duration,
        /// The sweep function's timeout.
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// Shards of the sweep index (`sweep_shard` 0..shards).
        shards: u32,
        /// Conversations whose deadline path one sweep runs at once.
        max_parallel: usize,
        /// Conversations one sweep takes from each shard at most.
        per_shard: usize,
    }
}

section! {
    /// `[gateway]`.
    GatewayTimings {
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// Per upstream `tools/call`.
        #[serde(rename = "call_timeout_secs", deserialize_with = "secs")]
        call_timeout: Duration,
        /// Per upstream `tools/list`.
        #[serde(rename = "discovery_timeout_secs", deserialize_with = "secs")]
        discovery_timeout: Duration,
        /// Reserved concurrency (the instance cap); negative: unreserved.
        reserved_concurrency: i64,
    }
}

section! {
    /// A tool server: `[shop]`.
    ToolServerTimings {
        #[serde(rename = "timeout_secs", deserialize_with = "secs")]
        timeout: Duration,
        /// Reserved concurrency; negative: unreserved.
        reserved_concurrency: i64,
    }
}

section! {
    /// `[llm]`.
    LlmTimings {
        /// One HTTP request to the provider.
        #[serde(rename = "request_timeout_secs", deserialize_with = "secs")]
        request_timeout: Duration,
        /// Attempts in all of a transient failure.
        retry_attempts: u32,
        /// Backoff cap of the first retry (doubles).
        #[serde(rename = "retry_base_ms", deserialize_with = "millis")]
        retry_base: Duration,
        /// Largest backoff cap.
        #[serde(rename = "retry_max_ms", deserialize_with = "millis")]
        retry_max: Duration,
    }
}

section! {
    /// `[aws]`: in-place retries of a transient DynamoDB or SQS call.
    AwsTimings {
        retry_attempts: u32,
        #[serde(rename = "retry_base_ms", deserialize_with = "millis")]
        retry_base: Duration,
        #[serde(rename = "retry_max_ms", deserialize_with = "millis")]
        retry_max: Duration,
        /// Deadline of one attempt.
        #[serde(rename = "attempt_timeout_secs", deserialize_with = "secs")]
        attempt_timeout: Duration,
    }
}

section! {
    /// `[money]`: approvals, refund subtasks waiting for their dependencies, side effects being confirmed.
    MoneyTimings {
        /// A pending approval can be decided for this long after it was asked for.
        #[serde(rename = "approval_expiry_secs", deserialize_with = "secs")]
        approval_expiry: Duration,
        /// An approval's token is valid this long after the decision: the approved call must run within it.
        #[serde(rename = "approval_execute_within_secs", deserialize_with = "secs")]
        approval_execute_within: Duration,
        /// `DelaySeconds` of a refund subtask handed back to its own queue while its dependencies are open.
        #[serde(rename = "dependency_wait_secs", deserialize_with = "secs")]
        dependency_wait: Duration,
        /// `DelaySeconds` before a side effect whose outcome is not known is replayed (same key) to confirm it.
        #[serde(rename = "confirm_delay_secs", deserialize_with = "secs")]
        confirm_delay: Duration,
        /// Replays of a side effect being confirmed before it is left as submitted.
        confirm_attempts: u32,
    }
}

section! {
    /// `[local]`: the local platform's own waits.
    LocalTimings {
        /// The SQS long poll (`WaitTimeSeconds`).
        #[serde(rename = "receive_wait_secs", deserialize_with = "secs")]
        receive_wait: Duration,
        /// Wait between two empty DynamoDB stream polls on the emulator.
        #[serde(rename = "stream_poll_ms", deserialize_with = "millis")]
        stream_poll: Duration,
    }
}

/// The sections of the table file that are not timings: the template lint's.
#[allow(dead_code)] // read by build.rs and the tests
pub(crate) const LINT_SECTIONS: [&str; 2] = ["template", "rule"];

/// Counts that must be at least 1 for the swarm to run at all, with their table names.
#[allow(dead_code)] // checked by build.rs and the tests
pub(crate) fn positive_counts(t: &Timings) -> [(&'static str, usize); 17] {
    [
        ("worker.max_parallel_tool_calls", t.worker.max_parallel_tool_calls),
        ("sweep.shards", t.sweep.shards as usize),
        ("sweep.max_parallel", t.sweep.max_parallel),
        ("sweep.per_shard", t.sweep.per_shard),
        ("worker.batch_size", t.worker.batch_size),
        ("worker.max_concurrency", t.worker.max_concurrency),
        ("worker.max_rounds", t.worker.max_rounds as usize),
        ("refund_worker.batch_size", t.refund_worker.batch_size),
        ("refund_worker.max_concurrency", t.refund_worker.max_concurrency),
        ("dlq_consumer.batch_size", t.dlq_consumer.batch_size),
        ("dlq_consumer.max_concurrency", t.dlq_consumer.max_concurrency),
        ("aggregator.stream.batch_size", t.aggregator.stream.batch_size),
        ("aggregator.max_parallel_records", t.aggregator.max_parallel_records),
        ("queues.max_receive_count", t.queues.max_receive_count as usize),
        ("llm.retry_attempts", t.llm.retry_attempts as usize),
        ("aws.retry_attempts", t.aws.retry_attempts as usize),
        ("money.confirm_attempts", t.money.confirm_attempts as usize),
    ]
}
