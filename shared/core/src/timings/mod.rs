//! The timing table (`shared/core/timings.toml`) as Rust reads it: every timing and capacity of the swarm, typed, and scaled only by an explicit factor.
//!
//! The functions take their defaults from [`Timings::STANDARD`] (`WorkerSettings::default()`,
//! `LlmRetryPolicy::default()`, [`crate::domain::DEFAULT_DEADLINE_SECS`] …); the local platform
//! builds its settings from [`Timings::scaled`]; the template lint checks `template.yaml`
//! against the same file.
//!
//! The table is read at build time: `build.rs` parses `timings.toml` with the types of
//! this module and writes [`Timings::STANDARD`] as a Rust constant. A table that does not
//! parse, lacks a value, has a value nobody reads or a zero count fails the build, so no
//! binary ships with a broken table and nothing parses it at run time (no error path).

mod table;

pub use table::{
    AggregatorTimings, ApiTimings, AwsTimings, ConversationTimings, GatewayTimings, LlmTimings, LocalTimings,
    MoneyTimings, OrchestratorTimings, QueueTiming, QueueTimings, SqsFunctionTimings, StreamTimings, SweepTimings,
    Timings, ToolServerTimings, WorkerTimings,
};

use std::time::Duration;

use table::Field;

/// The table file as it is embedded in the crate (what the build script parsed).
pub const TABLE: &str = include_str!("../../timings.toml");

impl Timings {
    /// The table as `timings.toml` states it, built at compile time.
    pub const STANDARD: Timings = include!(concat!(env!("OUT_DIR"), "/standard_timings.rs"));

    /// The standard table ([`Timings::STANDARD`]).
    pub fn standard() -> &'static Timings {
        &Self::STANDARD
    }

    /// Every duration × `factor`, floored at 1 ms (a scaled value never reaches 0); counts
    /// (batch sizes, receives, attempts, concurrency) unchanged. Values the services need in
    /// whole seconds are rounded up where they are used ([`seconds_rounded_up`]).
    ///
    /// `factor` should be a positive finite number (the local platform refuses others);
    /// otherwise every duration becomes 1 ms, or `Duration::MAX` for a product too large.
    pub fn scaled(&self, factor: f64) -> Timings {
        Field::scaled(self, factor)
    }
}

/// `d` in whole seconds, rounded up: for values SQS and the domain hold as integers
/// (visibility timeouts, `DelaySeconds`, `WaitTimeSeconds`, the conversation deadline),
/// so a scaled value is never rounded down to something shorter.
pub fn seconds_rounded_up(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Timings, String> {
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        for section in table::LINT_SECTIONS {
            doc.remove(section);
        }
        toml::Value::Table(doc).try_into().map_err(|e: toml::de::Error| e.to_string())
    }

    #[test]
    fn the_embedded_table_parses_to_the_standard_timings() {
        assert_eq!(parse(TABLE).unwrap(), Timings::STANDARD);
        assert!(table::positive_counts(Timings::standard()).iter().all(|(_, n)| *n > 0));
    }

    #[test]
    fn the_standard_table_holds_todays_values() {
        let t = Timings::standard();
        assert_eq!(t.conversation.deadline, Duration::from_secs(120));
        assert_eq!(t.api.integration_timeout, Duration::from_millis(30_000));
        assert_eq!(
            (t.orchestrator.timeout, t.orchestrator.plan_budget),
            (Duration::from_secs(29), Duration::from_secs(19))
        );
        assert_eq!(
            (t.orchestrator.request_budget, t.orchestrator.post_plan, t.orchestrator.aws_call),
            (Duration::from_secs(27), Duration::from_secs(8), Duration::from_secs(2))
        );
        assert_eq!(t.aggregator.max_parallel_records, 10);
        let w = &t.worker;
        assert_eq!((w.timeout, w.batch_size, w.max_concurrency), (Duration::from_secs(60), 5, 10));
        assert_eq!((w.max_parallel_tool_calls, w.retry_visibility), (4, Duration::from_secs(10)));
        assert_eq!(w.conversation_margin, Duration::from_secs(5));
        assert_eq!(
            (w.safety_margin, w.min_round, w.handback_delay),
            (Duration::from_secs(3), Duration::from_secs(5), Duration::from_secs(5))
        );
        assert_eq!((w.max_handbacks, w.max_rounds, w.tool_timeout), (1, 8, Duration::from_secs(10)));
        assert_eq!((t.aggregator.stream.batch_size, t.aggregator.stream.max_retry_attempts), (10, 5));
        assert_eq!(t.queues.max_receive_count, 5);
        assert_eq!(t.queues.tasks.visibility_timeout, Duration::from_secs(360));
        assert_eq!((t.aggregator.lease, t.orchestrator.lease), (Duration::from_secs(90), Duration::from_secs(35)));
        assert_eq!((t.sweep.period, t.sweep.shards), (Duration::from_secs(60), 8));
        assert_eq!((t.gateway.reserved_concurrency, t.shop.reserved_concurrency), (-1, -1));
        assert_eq!(t.queues.dead_letters.visibility_timeout, Duration::from_secs(360));
        assert_eq!(
            (t.llm.retry_attempts, t.llm.retry_base, t.llm.retry_max),
            (6, Duration::from_millis(500), Duration::from_secs(20))
        );
        assert_eq!(t.aws.attempt_timeout, Duration::from_secs(10));
        assert_eq!(t.local.stream_poll, Duration::from_millis(250));
    }

    #[test]
    fn a_table_with_an_unknown_or_missing_key_is_refused() {
        let unknown = TABLE.replacen("[worker]\n", "[worker]\nvisibility_secs = 3\n", 1);
        let e = parse(&unknown).unwrap_err();
        assert!(e.contains("visibility_secs"), "{e}");
        let missing = TABLE.replacen("max_rounds = 8\n", "", 1);
        let e = parse(&missing).unwrap_err();
        assert!(e.contains("max_rounds"), "{e}");
        let fractional = TABLE.replacen("deadline_secs = 120", "deadline_secs = 1.5", 1);
        assert!(parse(&fractional).is_err(), "durations are whole units of their key");
    }

    #[test]
    fn scaling_multiplies_every_duration_and_no_count() {
        let t = Timings::standard();
        let s = t.scaled(0.5);
        assert_eq!(s.conversation.deadline, Duration::from_secs(60));
        assert_eq!(s.queues.tasks.visibility_timeout, Duration::from_secs(180));
        assert_eq!(s.worker.safety_margin, Duration::from_millis(1500));
        assert_eq!(s.llm.retry_base, Duration::from_millis(250));
        assert_eq!(s.api.integration_timeout, Duration::from_secs(15));
        assert_eq!(s.aggregator.stream, t.aggregator.stream, "counts only");
        assert_eq!(
            (s.worker.batch_size, s.worker.max_concurrency, s.worker.max_rounds, s.queues.max_receive_count),
            (5, 10, 8, 5)
        );
        assert_eq!(t.scaled(1.0), *t);
        // Scaling back and forth returns the table (exact for powers of two).
        assert_eq!(t.scaled(0.25).scaled(4.0), *t);
    }

    #[test]
    fn scaled_durations_never_fall_below_one_millisecond() {
        let tiny = Timings::standard().scaled(1e-9);
        assert_eq!(tiny.local.stream_poll, Duration::from_millis(1));
        assert_eq!(tiny.queues.tasks.visibility_timeout, Duration::from_millis(1));
        for bad in [0.0, -1.0, f64::NAN] {
            assert_eq!(Timings::standard().scaled(bad).conversation.deadline, Duration::from_millis(1), "{bad}");
        }
        assert_eq!(Timings::standard().scaled(f64::INFINITY).conversation.deadline, Duration::MAX);
    }

    #[test]
    fn whole_seconds_round_up() {
        assert_eq!(seconds_rounded_up(Duration::from_millis(1)), 1);
        assert_eq!(seconds_rounded_up(Duration::from_secs(6)), 6);
        assert_eq!(seconds_rounded_up(Duration::from_millis(6001)), 7);
        assert_eq!(seconds_rounded_up(Duration::ZERO), 0);
    }
}
