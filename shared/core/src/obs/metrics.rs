//! The swarm's metrics: one catalogue of names, kinds, units and dimensions ([`CATALOG`]), and one call per event that records it through the `metrics` facade.
//!
//! The same name is a CloudWatch metric in namespace [`NAMESPACE`] (EMF on
//! Lambda; dimensions = labels) and a Prometheus series on `swarm-local serve`'s
//! `/metrics` (counters get Prometheus' `_total` suffix there). Labels are
//! low-cardinality by construction: enums of ours, configured model names, tool
//! and upstream names the gateway knows — never a conversation id, a customer
//! id, model-written text or a secret. The template's dashboard and alarms name
//! only metrics of this catalogue (a test compares them).

use std::time::Duration;

use ::metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

use crate::domain::{ConversationStatus, HandoffReason, SubtaskResult, Usage};
use crate::ports::{LlmError, Purpose};

/// CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "LambdaSwarm";

/// What kind of instrument a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows; Prometheus shows it as `<name>_total`, CloudWatch sums it per period.
    Counter,
    /// A level at the time it is read.
    Gauge,
    /// A distribution (CloudWatch keeps the values: p50/p99 on the dashboard; Prometheus a summary).
    Histogram,
}

/// The unit of a metric's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricUnit {
    Count,
    Seconds,
    /// US dollars (CloudWatch has no currency unit: `None` there).
    UsDollars,
}

impl MetricUnit {
    /// The facade's unit (EMF writes it as CloudWatch's `Unit`).
    pub fn facade(self) -> Option<Unit> {
        match self {
            Self::Count => Some(Unit::Count),
            Self::Seconds => Some(Unit::Seconds),
            Self::UsDollars => None,
        }
    }

    /// The unit as a CloudWatch EMF document names it (`None` when none is written).
    pub fn cloudwatch(self) -> Option<&'static str> {
        match self {
            Self::Count => Some("Count"),
            Self::Seconds => Some("Seconds"),
            Self::UsDollars => None,
        }
    }
}

/// Which code records a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Recorded by this function of [`self`](crate::obs::metrics), called from that crate.
    Emitted { call: &'static str, by: &'static str },
    /// Named here; recorded by this function once the issue that builds its source lands.
    Awaiting { call: &'static str, issue: u32 },
}

/// One metric of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: MetricUnit,
    /// Dimension (label) names, in the order they are recorded.
    pub labels: &'static [&'static str],
    pub help: &'static str,
    pub source: Source,
}

pub const CONVERSATIONS_STARTED: &str = "swarm_conversations_started";
pub const PLANNING_SECONDS: &str = "swarm_planning_seconds";
pub const SUBTASKS_PER_CONVERSATION: &str = "swarm_subtasks_per_conversation";
pub const CONVERSATION_SECONDS: &str = "swarm_conversation_seconds";
pub const CONVERSATION_COST_USD: &str = "swarm_conversation_cost_usd";
pub const REPLIES: &str = "swarm_replies";
pub const ACTIVE_WORKERS: &str = "swarm_active_workers";
pub const SUBTASK_ATTEMPT_SECONDS: &str = "swarm_subtask_attempt_seconds";
pub const SUBTASKS_FINISHED: &str = "swarm_subtasks_finished";
pub const SUBTASK_FAILURES: &str = "swarm_subtask_failures";
pub const HANDBACKS: &str = "swarm_handbacks";
pub const DEAD_LETTERS: &str = "swarm_dead_letters";
pub const DEADLINE_EXPIRED: &str = "swarm_deadline_expired";
pub const LLM_CALLS: &str = "swarm_llm_calls";
pub const LLM_CALL_SECONDS: &str = "swarm_llm_call_seconds";
pub const LLM_TOKENS: &str = "swarm_llm_tokens";
pub const LLM_ERRORS: &str = "swarm_llm_errors";
pub const LLM_RETRIES: &str = "swarm_llm_retries";
pub const TOOL_CALLS: &str = "swarm_tool_calls";
pub const TOOL_CALL_SECONDS: &str = "swarm_tool_call_seconds";
pub const BREAKER_TRANSITIONS: &str = "swarm_breaker_transitions";
pub const TOOL_DISCOVERY_FAILURES: &str = "swarm_tool_discovery_failures";
pub const SWEEP_RUNS: &str = "swarm_sweep_runs";
pub const SWEEP_CONVERSATIONS: &str = "swarm_sweep_conversations";
pub const LEASE_TAKEOVERS: &str = "swarm_lease_takeovers";
pub const APPROVALS_REQUESTED: &str = "swarm_approvals_requested";
pub const APPROVALS_PENDING: &str = "swarm_approvals_pending";
pub const APPROVAL_OLDEST_PENDING_SECONDS: &str = "swarm_approval_oldest_pending_seconds";
pub const APPROVALS_DECIDED: &str = "swarm_approvals_decided";
pub const APPROVAL_WAIT_SECONDS: &str = "swarm_approval_wait_seconds";
pub const HANDOFFS: &str = "swarm_handoffs";
pub const EFFECTS_UNCONFIRMED: &str = "swarm_effects_unconfirmed";

const fn def(
    name: &'static str,
    kind: Kind,
    unit: MetricUnit,
    labels: &'static [&'static str],
    help: &'static str,
    source: Source,
) -> MetricDef {
    MetricDef { name, kind, unit, labels, help, source }
}

const fn emitted(call: &'static str, by: &'static str) -> Source {
    Source::Emitted { call, by }
}

use Kind::{Counter, Gauge, Histogram};
use MetricUnit::{Count, Seconds, UsDollars};

/// Every metric the swarm records, in dashboard order.
pub const CATALOG: &[MetricDef] = &[
    def(
        CONVERSATIONS_STARTED,
        Counter,
        Count,
        &[],
        "Conversations created (POST /conversations answered 202 with a new conversation).",
        emitted("conversation_started", "orchestrator"),
    ),
    def(
        PLANNING_SECONDS,
        Histogram,
        Seconds,
        &["outcome"],
        "Time to plan one conversation (tool catalogue, model rounds, validation); outcome planned or fallback (the single-subtask fallback plan).",
        emitted("planning_finished", "orchestrator"),
    ),
    def(
        SUBTASKS_PER_CONVERSATION,
        Histogram,
        Count,
        &[],
        "Subtasks in a conversation's plan.",
        emitted("conversation_planned", "orchestrator"),
    ),
    def(
        CONVERSATION_SECONDS,
        Histogram,
        Seconds,
        &["status"],
        "End to end: creation until the conversation is done (reply written) or failed.",
        emitted("conversation_finished", "aggregator, worker"),
    ),
    def(
        CONVERSATION_COST_USD,
        Histogram,
        UsDollars,
        &[],
        "Model cost of one conversation in US dollars, when the price table knows the model.",
        emitted("conversation_cost", "aggregator"),
    ),
    def(
        REPLIES,
        Counter,
        Count,
        &["by"],
        "Replies written: by the model, or the model-free fallback (model failed, cut off, or the aggregator died).",
        emitted("reply_written", "aggregator, worker"),
    ),
    def(
        ACTIVE_WORKERS,
        Gauge,
        Count,
        &[],
        "Subtask attempts running now in this process (Prometheus); on CloudWatch use swarm_subtask_attempt_seconds Sum / period.",
        emitted("worker_busy", "worker"),
    ),
    def(
        SUBTASK_ATTEMPT_SECONDS,
        Histogram,
        Seconds,
        &[],
        "One message's handling by a worker; the Sum per period divided by the period is the average number of active workers.",
        emitted("subtask_attempt", "worker"),
    ),
    def(
        SUBTASKS_FINISHED,
        Counter,
        Count,
        &["status"],
        "Subtasks that reached a terminal status: succeeded, failed, skipped.",
        emitted("subtask_finished", "worker"),
    ),
    def(
        SUBTASK_FAILURES,
        Counter,
        Count,
        &["kind"],
        "Failed subtasks by failure kind (the stable code customers see).",
        emitted("subtask_finished", "worker"),
    ),
    def(
        HANDBACKS,
        Counter,
        Count,
        &[],
        "Subtasks handed back (progress saved, message re-sent with a delay) for lack of invocation time.",
        emitted("handed_back", "worker"),
    ),
    def(
        DEAD_LETTERS,
        Counter,
        Count,
        &[],
        "Messages that reached a dead-letter queue and were recorded as failed subtasks.",
        emitted("dead_letter", "worker"),
    ),
    def(
        DEADLINE_EXPIRED,
        Counter,
        Count,
        &[],
        "Conversations past their deadline the deadline path (its message or the sweep) moved on: planning failed, open subtasks closed, answered without the model, or an expired aggregation taken over.",
        emitted("deadline_expired", "worker"),
    ),
    def(
        LLM_CALLS,
        Counter,
        Count,
        &["model"],
        "Requests sent to the language model (every attempt, retries included).",
        emitted("llm_attempt", "swarm-core (every function's model calls)"),
    ),
    def(
        LLM_CALL_SECONDS,
        Histogram,
        Seconds,
        &["model", "purpose"],
        "Latency of one model request, by configured model and purpose (plan, work, reply, compress).",
        emitted("llm_attempt", "swarm-core (every function's model calls)"),
    ),
    def(
        LLM_TOKENS,
        Counter,
        Count,
        &["model", "purpose", "kind"],
        "Tokens reported by the provider: kind input, output or cached (input tokens read from the provider's cache).",
        emitted("llm_attempt", "swarm-core (every function's model calls)"),
    ),
    def(
        LLM_ERRORS,
        Counter,
        Count,
        &["model", "class"],
        "Failed model requests by class: rate_limited (429), transient, context_length, permanent, rejected, timeout.",
        emitted("llm_attempt", "swarm-core (every function's model calls)"),
    ),
    def(
        LLM_RETRIES,
        Counter,
        Count,
        &["model", "class"],
        "Model requests retried after a failure of this class (rate_limited, transient).",
        emitted("llm_retry", "swarm-core (every function's model calls)"),
    ),
    def(
        TOOL_CALLS,
        Counter,
        Count,
        &["tool", "outcome"],
        "tools/call through the gateway by tool and outcome: ok, tool_error, refused, rate_limited, breaker_open, timeout, upstream_error.",
        emitted("tool_call", "tool-gateway"),
    ),
    def(
        TOOL_CALL_SECONDS,
        Histogram,
        Seconds,
        &["tool"],
        "The gateway's handling time of one tools/call, upstream included.",
        emitted("tool_call", "tool-gateway"),
    ),
    def(
        BREAKER_TRANSITIONS,
        Counter,
        Count,
        &["upstream", "state"],
        "Circuit breaker state changes of an upstream: open, half_open, closed.",
        emitted("breaker_transition", "tool-gateway"),
    ),
    def(
        TOOL_DISCOVERY_FAILURES,
        Counter,
        Count,
        &["upstream"],
        "tools/list of an upstream that failed (its tools stay listed from the last success).",
        emitted("discovery_failed", "tool-gateway"),
    ),
    def(
        SWEEP_RUNS,
        Counter,
        Count,
        &[],
        "Runs of the periodic deadline sweep (the sweeper: the worker binary with WORKER_MODE=sweep).",
        emitted("sweep_ran", "worker"),
    ),
    def(
        SWEEP_CONVERSATIONS,
        Counter,
        Count,
        &["action"],
        "Conversations past their deadline the sweep found, by what it did: failed (planning never finished), closed (open subtasks closed for the aggregator), aggregated (answered without the model), taken_over (an expired aggregation answered), untouched (a live lease or uncounted subtasks left alone), cut_off (the sweep's own deadline came first), error (a store error; the next sweep retries).",
        emitted("sweep_conversation", "worker"),
    ),
    def(
        LEASE_TAKEOVERS,
        Counter,
        Count,
        &["phase"],
        "Leases taken over after their holder's time ran out (the holder died or overran): phase planning (a retry with the same Idempotency-Key) or aggregating (the aggregator or the deadline path).",
        emitted("lease_taken_over", "orchestrator, aggregator, worker"),
    ),
    def(
        APPROVALS_REQUESTED,
        Counter,
        Count,
        &[],
        "Refunds held for a person's approval.",
        emitted("approval_requested", "worker"),
    ),
    def(
        APPROVALS_PENDING,
        Gauge,
        Count,
        &[],
        "Refunds awaiting approval now.",
        emitted("approvals_waiting", "worker (the sweep)"),
    ),
    def(
        APPROVAL_OLDEST_PENDING_SECONDS,
        Gauge,
        Seconds,
        &[],
        "Age of the oldest refund awaiting approval.",
        emitted("approvals_waiting", "worker (the sweep)"),
    ),
    def(
        APPROVALS_DECIDED,
        Counter,
        Count,
        &["decision"],
        "Approvals decided: approved, rejected, expired.",
        emitted("approval_decided", "orchestrator (the approvals API)"),
    ),
    def(
        APPROVAL_WAIT_SECONDS,
        Histogram,
        Seconds,
        &["decision"],
        "Time from a refund's hold to its decision.",
        emitted("approval_decided", "orchestrator (the approvals API)"),
    ),
    def(
        HANDOFFS,
        Counter,
        Count,
        &["reason"],
        "Conversations handed to a person: customer_asked, tool_failures, policy.",
        emitted("handoff", "aggregator, worker (the deadline path)"),
    ),
    def(
        EFFECTS_UNCONFIRMED,
        Counter,
        Count,
        &[],
        "Side effects whose outcome is still not known after every confirmation (replays used up, or the confirmation dead-lettered): left as submitted.",
        emitted("effect_unconfirmed", "worker (confirmations, the DLQ consumer)"),
    ),
];

/// The catalogue entry of `name`.
pub fn find(name: &str) -> Option<&'static MetricDef> {
    CATALOG.iter().find(|d| d.name == name)
}

/// Registers every metric's unit and help with the installed recorder (EMF writes the unit, Prometheus the help).
pub fn describe() {
    for d in CATALOG {
        let (name, help) = (d.name, d.help);
        match (d.kind, d.unit.facade()) {
            (Kind::Counter, Some(unit)) => describe_counter!(name, unit, help),
            (Kind::Counter, None) => describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => describe_histogram!(name, help),
        }
    }
}

// ---------------------------------------------------------------- orchestrator

/// How planning ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanOutcome {
    /// The model's plan was valid.
    Planned,
    /// The single-subtask fallback plan was used.
    Fallback,
}

/// A new conversation was written.
pub fn conversation_started() {
    counter!(CONVERSATIONS_STARTED).increment(1);
}

/// Planning took `elapsed` and ended as `outcome`.
pub fn planning_finished(elapsed: Duration, outcome: PlanOutcome) {
    let outcome = match outcome {
        PlanOutcome::Planned => "planned",
        PlanOutcome::Fallback => "fallback",
    };
    histogram!(PLANNING_SECONDS, "outcome" => outcome).record(elapsed.as_secs_f64());
}

/// A conversation was planned into `subtasks` subtasks and started running.
pub fn conversation_planned(subtasks: usize) {
    histogram!(SUBTASKS_PER_CONVERSATION).record(subtasks as f64);
}

// ---------------------------------------------------------------- end of a conversation

/// A conversation created at `created_at_ms` reached `status` (`Done` or `Failed`) at `now_ms`
/// (Unix epoch milliseconds).
pub fn conversation_finished(status: ConversationStatus, created_at_ms: i64, now_ms: i64) {
    let status = match status {
        ConversationStatus::Failed => "failed",
        ConversationStatus::Handoff => "handoff",
        _ => "done",
    };
    let seconds = crate::time::between(created_at_ms, now_ms).as_secs_f64();
    histogram!(CONVERSATION_SECONDS, "status" => status).record(seconds);
}

/// The conversation's whole usage; its cost is recorded when known.
pub fn conversation_cost(usage: &Usage) {
    if let Some(cost) = usage.cost_usd {
        histogram!(CONVERSATION_COST_USD).record(cost);
    }
}

/// A reply was written, by the model or as the model-free fallback.
pub fn reply_written(by_model: bool) {
    counter!(REPLIES, "by" => if by_model { "model" } else { "fallback" }).increment(1);
}

// ---------------------------------------------------------------- worker

/// One subtask attempt started (`true`) or ended (`false`) in this process.
pub fn worker_busy(started: bool) {
    let g = gauge!(ACTIVE_WORKERS);
    if started { g.increment(1.0) } else { g.decrement(1.0) }
}

/// A worker handled one message in `elapsed`.
pub fn subtask_attempt(elapsed: Duration) {
    histogram!(SUBTASK_ATTEMPT_SECONDS).record(elapsed.as_secs_f64());
}

/// A subtask reached its terminal `result` (recorded by this attempt).
pub fn subtask_finished(result: &SubtaskResult) {
    counter!(SUBTASKS_FINISHED, "status" => result.status().as_str().to_ascii_lowercase()).increment(1);
    if let Some(kind) = result.failure_kind() {
        counter!(SUBTASK_FAILURES, "kind" => kind.code()).increment(1);
    }
}

/// A subtask was handed back for lack of time.
pub fn handed_back() {
    counter!(HANDBACKS).increment(1);
}

/// A message from a dead-letter queue was recorded as a failed subtask.
pub fn dead_letter() {
    counter!(DEAD_LETTERS).increment(1);
}

/// The deadline path moved a conversation past its deadline on ([`DeadlineAction`]). A
/// conversation counts again only when a later run has to move it on once more (its
/// aggregation lost after its subtasks were closed).
pub fn deadline_expired() {
    counter!(DEADLINE_EXPIRED).increment(1);
}

// ---------------------------------------------------------------- model calls

/// The class of a model failure, as the `class` label and the span's `error.type` name it.
pub fn llm_error_class(error: &LlmError) -> &'static str {
    match error {
        LlmError::RateLimited { .. } => "rate_limited",
        LlmError::Transient { .. } => "transient",
        LlmError::ContextLength { .. } => "context_length",
        LlmError::Permanent { .. } => "permanent",
        LlmError::Rejected { .. } => "rejected",
    }
}

/// The purpose as a label value.
pub fn purpose_label(purpose: Purpose) -> &'static str {
    match purpose {
        Purpose::Plan => "plan",
        Purpose::Work => "work",
        Purpose::Reply => "reply",
        Purpose::Compress => "compress",
    }
}

/// One model request to `model` (its configured name) for `purpose` took `elapsed` and
/// answered `Ok(usage)` or failed with the class `Err(class)` ([`llm_error_class`], or `timeout`).
pub fn llm_attempt(model: &str, purpose: Purpose, elapsed: Duration, outcome: Result<&Usage, &'static str>) {
    let purpose = purpose_label(purpose);
    counter!(LLM_CALLS, "model" => model.to_owned()).increment(1);
    histogram!(LLM_CALL_SECONDS, "model" => model.to_owned(), "purpose" => purpose).record(elapsed.as_secs_f64());
    match outcome {
        Ok(usage) => {
            for (kind, tokens) in
                [("input", usage.prompt_tokens), ("output", usage.completion_tokens), ("cached", usage.cached_tokens)]
            {
                if let Some(n) = tokens {
                    counter!(LLM_TOKENS, "model" => model.to_owned(), "purpose" => purpose, "kind" => kind)
                        .increment(n);
                }
            }
        }
        Err(class) => counter!(LLM_ERRORS, "model" => model.to_owned(), "class" => class).increment(1),
    }
}

/// A model request failed with `class` and will be retried.
pub fn llm_retry(model: &str, class: &'static str) {
    counter!(LLM_RETRIES, "model" => model.to_owned(), "class" => class).increment(1);
}

// ---------------------------------------------------------------- tool gateway

/// One `tools/call` of `tool` (a name the gateway's catalogue holds, else `unknown`) ended as
/// `outcome` after `elapsed`.
pub fn tool_call(tool: &str, outcome: &'static str, elapsed: Duration) {
    counter!(TOOL_CALLS, "tool" => tool.to_owned(), "outcome" => outcome).increment(1);
    histogram!(TOOL_CALL_SECONDS, "tool" => tool.to_owned()).record(elapsed.as_secs_f64());
}

/// `upstream`'s circuit breaker changed to `state` (`open`, `half_open`, `closed`).
pub fn breaker_transition(upstream: &str, state: &'static str) {
    counter!(BREAKER_TRANSITIONS, "upstream" => upstream.to_owned(), "state" => state).increment(1);
}

/// A `tools/list` of `upstream` failed.
pub fn discovery_failed(upstream: &str) {
    counter!(TOOL_DISCOVERY_FAILURES, "upstream" => upstream.to_owned()).increment(1);
}

// ---------------------------------------------------------------- the deadline path, the sweep and the leases

/// What the deadline path did to a conversation past its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlineAction {
    /// Planning never finished: the conversation failed.
    Failed,
    /// Open subtasks closed (failed or skipped): `remaining` reaches 0 and the aggregator answers.
    Closed,
    /// Nothing open and nothing answered: answered with the model-free reply.
    Aggregated,
    /// An aggregation whose lease expired, taken over and answered with the model-free reply.
    TakenOver,
}

/// What one sweep did with one conversation the index held as overdue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepOutcome {
    /// The deadline path moved it on.
    Moved(DeadlineAction),
    /// Nothing to do now: a live lease, subtasks still uncounted, already over, or not due yet.
    Untouched,
    /// The sweep's own deadline came first (the next sweep takes it).
    CutOff,
    /// A store error (the next sweep takes it).
    Error,
}

/// One run of the deadline sweep.
pub fn sweep_ran() {
    counter!(SWEEP_RUNS).increment(1);
}

/// What the sweep did with one conversation past its deadline (when it moved it on,
/// [`deadline_expired`] is recorded too, by the deadline path).
pub fn sweep_conversation(outcome: SweepOutcome) {
    let action = match outcome {
        SweepOutcome::Moved(DeadlineAction::Failed) => "failed",
        SweepOutcome::Moved(DeadlineAction::Closed) => "closed",
        SweepOutcome::Moved(DeadlineAction::Aggregated) => "aggregated",
        SweepOutcome::Moved(DeadlineAction::TakenOver) => "taken_over",
        SweepOutcome::Untouched => "untouched",
        SweepOutcome::CutOff => "cut_off",
        SweepOutcome::Error => "error",
    };
    counter!(SWEEP_CONVERSATIONS, "action" => action).increment(1);
}

/// The phase a lease holds a conversation in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    Planning,
    Aggregating,
}

/// A lease of `kind` was taken over from a holder whose time ran out.
pub fn lease_taken_over(kind: LeaseKind) {
    let phase = match kind {
        LeaseKind::Planning => "planning",
        LeaseKind::Aggregating => "aggregating",
    };
    counter!(LEASE_TAKEOVERS, "phase" => phase).increment(1);
}

// ---------------------------------------------------------------- issue 10: approvals and hand-offs

/// A refund was held for a person's approval.
pub fn approval_requested() {
    counter!(APPROVALS_REQUESTED).increment(1);
}

/// The approvals waiting now: how many, and how long the oldest has waited.
pub fn approvals_waiting(count: usize, oldest: Duration) {
    gauge!(APPROVALS_PENDING).set(count as f64);
    gauge!(APPROVAL_OLDEST_PENDING_SECONDS).set(oldest.as_secs_f64());
}

/// How an approval was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approved,
    Rejected,
    Expired,
}

/// An approval was decided after waiting `waited`.
pub fn approval_decided(decision: Decision, waited: Duration) {
    let decision = match decision {
        Decision::Approved => "approved",
        Decision::Rejected => "rejected",
        Decision::Expired => "expired",
    };
    counter!(APPROVALS_DECIDED, "decision" => decision).increment(1);
    histogram!(APPROVAL_WAIT_SECONDS, "decision" => decision).record(waited.as_secs_f64());
}

/// A side effect's outcome is still not known after every confirmation: it stays submitted.
pub fn effect_unconfirmed() {
    counter!(EFFECTS_UNCONFIRMED).increment(1);
}

/// A conversation ended in a hand-off to a person.
pub fn handoff(reason: HandoffReason) {
    counter!(HANDOFFS, "reason" => reason.code()).increment(1);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn names_are_unique_and_valid_for_cloudwatch_and_prometheus() {
        let mut seen = BTreeSet::new();
        for d in CATALOG {
            assert!(seen.insert(d.name), "{} twice", d.name);
            assert!(d.name.starts_with("swarm_"), "{}", d.name);
            assert!(d.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'), "{}", d.name);
            // Prometheus adds `_total` to counters itself; a unit suffix matches the unit.
            assert!(!d.name.ends_with("_total"), "{}", d.name);
            assert_eq!(d.name.ends_with("_seconds"), d.unit == MetricUnit::Seconds, "{}", d.name);
            assert!(d.labels.len() <= 3, "{}: CloudWatch dimensions stay few", d.name);
            for label in d.labels {
                assert!(!label.contains("conversation") && !label.contains("customer"), "{}: {label}", d.name);
            }
            assert!(!d.help.is_empty());
        }
    }

    #[test]
    fn every_llm_error_has_a_class_among_the_documented_ones() {
        let documented = find(LLM_ERRORS).map(|d| d.help).unwrap_or_default();
        let errors = [
            LlmError::RateLimited { status: 429, retry_after: None, message: String::new() },
            LlmError::Transient { status: None, message: String::new() },
            LlmError::ContextLength { status: 400, message: String::new() },
            LlmError::Permanent { status: 401, message: String::new() },
            LlmError::Rejected { status: 400, kind: crate::ports::Rejection::ToolsMissing, message: String::new() },
        ];
        let classes: BTreeSet<&str> = errors.iter().map(llm_error_class).collect();
        assert_eq!(classes.len(), errors.len());
        for class in classes.iter().chain(&["timeout"]) {
            assert!(documented.contains(class), "{class}");
        }
    }
}
