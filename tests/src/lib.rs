//! Helpers for the cross-function tests: the cases' expectation checks, the test doubles of `swarm-testing` set up over the offline model, and the emulator's endpoint.

use std::io::Write as _;
use std::sync::Arc;

use serde_json::Value;
use swarm_core::domain::ConversationStatus;
use swarm_core::ports::{ChatModel, ConversationStore, LlmError, Purpose};
use swarm_core::view::ConversationView;
use swarm_offline::OfflineModel;
pub use swarm_testing::{
    Case, FlakyStore, HangingTools, RecordLog, Recorded, Reply, ScriptedModel, StoreOp, case, case_language, cases,
    script_problems, simplified_cases, text_response, tools_of_kind, traditional_cases,
};

/// A scripted model over the offline model: it counts calls per purpose and
/// answers like the offline model unless told otherwise.
pub fn over_offline() -> ScriptedModel {
    ScriptedModel::delegating(Arc::new(OfflineModel::new()) as Arc<dyn ChatModel>)
}

/// `model` with `plan` (JSON text) as the answer to every planning request.
pub fn with_plan(model: ScriptedModel, plan: &str) -> ScriptedModel {
    model.answer(Purpose::Plan, Ok(text_response(plan)))
}

/// What a provider with a spent balance answers (HTTP 402, permanent).
pub fn insufficient_balance() -> Reply {
    Err(LlmError::Permanent { status: 402, message: "Insufficient Balance".into() })
}

/// `inner` whose `begin_attempt` always fails transiently for `subtask`, so its
/// message is reported in `batchItemFailures` on every delivery until it is dead-lettered.
pub fn failing_to_begin(inner: Arc<dyn ConversationStore>, subtask: &str) -> Arc<dyn ConversationStore> {
    Arc::new(FlakyStore::new(inner).fail_for_subtask(
        StoreOp::BeginAttempt,
        subtask,
        "ProvisionedThroughputExceeded (injected)",
    ))
}

/// Lower-cases and drops thousands separators, so `1,299.00` contains `1299`.
pub fn normalise(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, c) in chars.iter().enumerate() {
        if *c == ',' && i > 0 && chars[i - 1].is_ascii_digit() && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit()) {
            continue;
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// Every way `view` falls short of the case's `expect` (empty when it meets them).
pub fn unmet_expectations(case: &Case, view: &ConversationView) -> Vec<String> {
    let mut problems = Vec::new();
    let e = &case.expect;
    let n = view.subtasks.len() as u64;
    if let Some(min) = e.get("min_subtasks").and_then(Value::as_u64)
        && n < min
    {
        problems.push(format!("{n} subtasks, expected at least {min}"));
    }
    if let Some(max) = e.get("max_subtasks").and_then(Value::as_u64)
        && n > max
    {
        problems.push(format!("{n} subtasks, expected at most {max}"));
    }
    let used: Vec<String> = view
        .subtasks
        .iter()
        .flat_map(|s| s.tools_used.iter())
        .map(|t| t.rsplit_once("__").map_or(t.as_str(), |(_, b)| b).to_owned())
        .collect();
    if let Some(max) = e.get("max_tool_calls").and_then(Value::as_u64)
        && used.len() as u64 > max
    {
        problems.push(format!("{} tool calls, expected at most {max}", used.len()));
    }
    for kind in e.get("tools").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        let ok = kind.split('|').any(|k| tools_of_kind(k).iter().any(|t| used.iter().any(|u| u == t)));
        if !ok {
            problems.push(format!("no tool of kind {kind} was used (used: {used:?})"));
        }
    }
    let reply = normalise(view.reply.as_deref().unwrap_or(""));
    for m in e.get("mentions").and_then(Value::as_array).into_iter().flatten() {
        let alternatives: Vec<&str> = match m {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !alternatives.iter().any(|a| reply.contains(&normalise(a))) {
            problems.push(format!("reply does not mention {alternatives:?}"));
        }
    }
    if view.status != ConversationStatus::Done {
        problems.push(format!("status {}", view.status));
    }
    problems
}

/// `timings` with room for one tool call at a small time scale: the worker's tool timeout, the
/// gateway's per-call timeout and its discovery timeout (`tools/list` upstream) at 50 s (the
/// gateway's and the shop's function timeouts at 60 s, so the table's rules between them still
/// hold). At 1/240 the table's 10 s leave a call 42 ms and its 5 s leave discovery 21 ms (the
/// planner then sees no tools), which a loaded 2-core machine misses now and then; these leave about 200 ms.
pub fn with_room_for_tool_calls(mut timings: swarm_core::timings::Timings) -> swarm_core::timings::Timings {
    let secs = std::time::Duration::from_secs;
    timings.gateway.timeout = secs(60);
    timings.shop.timeout = secs(60);
    timings.gateway.call_timeout = secs(50);
    timings.gateway.discovery_timeout = secs(50);
    timings.worker.tool_timeout = secs(50);
    timings
}

/// The emulator's slowest usual store call on the 2-core machine: the 90th percentile of 100
/// `UpdateItem` calls on moto's server with `stress-ng --cpu 2` beside it (26 ms median, 40 ms p90,
/// 55 ms at most). The emulator's calls take their own time, never a scaled one.
pub const EMULATOR_CALL_P90: std::time::Duration = std::time::Duration::from_millis(40);

/// How many of the emulator's slowest usual calls a scaled per-call budget must hold at least: the
/// rule that keeps an emulator test no harsher than AWS, where the orchestrator's 2 s per call hold
/// about 200 of DynamoDB's 5-10 ms. Below it (the table's 2 s at 1/240 are 8 ms), a call AWS would
/// answer in time is cut on the emulator.
pub const EMULATOR_CALL_HEADROOM: u32 = 10;

/// `timings` with room to plan at a small time scale: the orchestrator's timeout, request budget and
/// planning lease × 40, its planning budget × 20, the rest of the request budget kept for what
/// follows the plan and a quarter of it per call (the rules between them kept). At 1/240 the table's 25 s
/// plan budget leaves 79 ms and its 29 s timeout 1 s (whole seconds), which a loaded 2-core machine
/// misses (the plan falls back to one task, or the POST times out); these leave 1.6 s to plan, 2.9 s
/// after it (0.7 s a call), an answer within 4.5 s, a 5 s timeout and a 5.8 s lease.
/// For tests whose subject is not the orchestrator's budgets.
pub fn with_room_to_plan(mut timings: swarm_core::timings::Timings) -> swarm_core::timings::Timings {
    let o = &mut timings.orchestrator;
    o.timeout *= 40;
    o.request_budget *= 40;
    o.lease *= 40;
    // Planning ×20, and the rest of the request budget after it for the writes and sends: the
    // emulator's store calls take their real time (a start_run is several), not a scaled one.
    o.plan_budget *= 20;
    o.post_plan = o.request_budget - o.plan_budget;
    o.aws_call = o.post_plan / 4;
    timings
}

/// `timings` with the orchestrator's every budget × `factor` — the API's integration timeout, the
/// function's timeout, the request budget, the plan budget, what is kept after the plan, the per-call
/// deadline and the planning lease — so every rule between them holds as in the table. For a test at a
/// scale where the table's per-call 2 s would fall under the emulator's headroom
/// ([`EMULATOR_CALL_P90`] × [`EMULATOR_CALL_HEADROOM`], 400 ms) and whose waits cannot afford
/// [`with_room_to_plan`]'s × 40 lease: at 1/12 a factor of 3 gives each call 500 ms (at 1/24 the
/// table's 83 ms were cut on a loaded CI machine: a 503 for a write moto answered late).
pub fn with_orchestrator_slowed(
    mut timings: swarm_core::timings::Timings,
    factor: u32,
) -> swarm_core::timings::Timings {
    timings.api.integration_timeout *= factor;
    let o = &mut timings.orchestrator;
    for budget in
        [&mut o.timeout, &mut o.request_budget, &mut o.plan_budget, &mut o.post_plan, &mut o.aws_call, &mut o.lease]
    {
        *budget *= factor;
    }
    timings
}

/// `timings` with room for whole invocations at a small time scale, and the table's rule between
/// them and the aggregation lease kept. Function timeouts are held in whole seconds (at least 1 s),
/// so at 1/240 the table's 60 s become 1 s, in which a loaded 2-core machine's invocation on the
/// emulator is cut now and then (a sweep or a deadline path that never answers), and the
/// aggregation lease (90 s → 375 ms, not rounded) ends before the 1 s a live holder may still run:
/// the rule `aggregator.lease > every timeout of a function that can hold it` no longer holds and
/// a live holder is taken over, which AWS's own timings never allow. Here, each by an explicit factor:
/// - × 12: the worker's, the refund worker's, the DLQ consumer's and the aggregator's timeouts
///   (60 s → 720 s: 3 s at 1/240) and the aggregator's reply budget (45 s → 540 s, inside its timeout);
/// - × 10: the sweep's period and timeout (60 s → 600 s: 2.5 s; the rule `2 × period ≤ deadline`
///   holds for deadlines from 1200 s, 5 s at 1/240);
/// - × 12: the aggregation lease (90 s → 1080 s: 4.5 s), longer than every timeout above;
/// - × 4: the tasks, refund and dead-letter queues' visibility timeouts (360 s → 1440 s: 6 s), still
///   longer than the function's timeout, so a message comes back only after its invocation is over
///   (the template's 6 × would bring a killed message back after the deadlines these tests set);
/// - × 12: the worker's receipt heartbeat, as its timeout: the beat (5 s → 60 s: 250 ms), the per-beat
///   cut (`aws.attempt_timeout`, which only the heartbeat reads from the scaled table: 10 s → 120 s:
///   500 ms), the receipt visibility and the attempt lease (30 s → 360 s: 1.5 s, held as 2 s by SQS),
///   so the table's rule `2 × (beat + cut) ≤ receipt visibility, attempt lease` holds as it does at
///   AWS speed. At 1/240 the table's beat is 21 ms and its cut 42 ms, under the emulator's own
///   latency ([`EMULATOR_CALL_P90`] × [`EMULATOR_CALL_HEADROOM`]): every live invocation sent a
///   `ChangeMessageVisibilityBatch` and a `renew_attempt` every 21 ms, most of them cut, and the one
///   emulator process that serialises every table request fell seconds behind (a planning lease's
///   read then took 700 ms, a deadline path its whole 3 s invocation).
///
/// For tests whose subject is what moves a conversation on, not the invocations' own budgets.
pub fn with_room_for_invocations(mut timings: swarm_core::timings::Timings) -> swarm_core::timings::Timings {
    for timeout in [
        &mut timings.worker.timeout,
        &mut timings.refund_worker.timeout,
        &mut timings.dlq_consumer.timeout,
        &mut timings.aggregator.timeout,
        &mut timings.aggregator.reply_budget,
        &mut timings.aggregator.lease,
    ] {
        *timeout *= 12;
    }
    timings.sweep.period *= 10;
    timings.sweep.timeout *= 10;
    for beat in [
        &mut timings.worker.heartbeat,
        &mut timings.aws.attempt_timeout,
        &mut timings.worker.receipt_visibility,
        &mut timings.worker.attempt_lease,
    ] {
        *beat *= 12;
    }
    for visibility in [
        &mut timings.queues.tasks.visibility_timeout,
        &mut timings.queues.refund.visibility_timeout,
        &mut timings.queues.dead_letters.visibility_timeout,
    ] {
        *visibility *= 4;
    }
    timings
}

/// The emulator backend for `test` (the AWS adapters on `SWARM_AWS_ENDPOINT`), logs at `warn`;
/// `None` only when `SWARM_SKIP_AWS=1` ([`emulator_endpoint`]).
pub fn emulator_backend(test: &str) -> Option<swarm_local::BackendChoice> {
    swarm_adapters::telemetry::init_with_default("warn");
    emulator_endpoint(test).map(|e| swarm_local::BackendChoice::Emulator(swarm_local::EmulatorOptions::new(e)))
}

/// Instantiates every named `async fn name(backend: BackendChoice)` of the calling file as two
/// tests, `embedded::name` and `emulator::name` (the latter through [`emulator_backend`]); attributes
/// written before a name (`#[ignore = "why"]`) go to both.
#[macro_export]
macro_rules! on_both_backends {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {
        mod embedded {
            $(
                $(#[$attr])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(swarm_local::BackendChoice::Embedded).await
                }
            )*
        }

        mod emulator {
            $(
                $(#[$attr])*
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(backend) = $crate::emulator_backend(stringify!($name)) {
                        super::$name(backend).await
                    }
                }
            )*
        }
    };
}

/// The emulator's endpoint (`SWARM_AWS_ENDPOINT`); `None` (after a loud line) only when
/// `SWARM_SKIP_AWS=1`. Without either, the test fails and says how to start the emulator.
pub fn emulator_endpoint(test: &str) -> Option<String> {
    match std::env::var("SWARM_AWS_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => Some(e.trim().to_owned()),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            // Straight to the process's stderr, past the test harness's capture: a skip is never silent.
            let _ = writeln!(
                std::io::stderr(),
                "!!!!!!!! SKIPPED {test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_ENDPOINT; the Lambda handlers were NOT run on the emulator"
            );
            None
        }
        _ => panic!(
            "{test} needs a local AWS emulator: run `infra/aws/moto.sh start`, then \
             `SWARM_AWS_ENDPOINT=http://127.0.0.1:5000 cargo test -p swarm-tests` \
             (or set SWARM_SKIP_AWS=1 to skip it)"
        ),
    }
}

/// The `subtask_id` of a task message body (empty for any other body).
pub fn subtask_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["subtask_id"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Polls `GET /conversations/{id}` every 50 ms until `done` holds for the view, and answers it.
/// Panics with `what` and the last view after `patience`.
pub async fn until_view(
    stack: &swarm_local::LocalStack,
    id: &str,
    what: &str,
    patience: std::time::Duration,
    done: impl Fn(&ConversationView) -> bool,
) -> ConversationView {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let view = match stack.view(id).await {
            Ok(view) => view,
            Err(e) => panic!("{what}: GET /conversations/{id} failed: {e}"),
        };
        if done(&view) {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {view:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of [`EMULATOR_CALL_HEADROOM`] at the smallest scale the emulator tests use (1/240):
    /// each call after planning, and the window before it (the rate counter, the conversation's
    /// write, arming the deadline: three store and queue calls), hold the headroom.
    #[test]
    fn room_to_plan_keeps_the_per_call_budgets_above_the_emulators_latency_at_1_240() {
        let t = with_room_to_plan(swarm_core::timings::Timings::standard().clone()).scaled(1.0 / 240.0);
        let o = &t.orchestrator;
        let floor = EMULATOR_CALL_P90 * EMULATOR_CALL_HEADROOM;
        assert!(o.aws_call >= floor, "{:?} per call, at least {floor:?}", o.aws_call);
        assert!(o.request_budget - o.post_plan >= floor * 3, "{:?} before planning", o.request_budget - o.post_plan);
        // The table as it is would not: 2 s at 1/240 is 8 ms.
        assert!(swarm_core::timings::Timings::standard().scaled(1.0 / 240.0).orchestrator.aws_call < floor);
    }

    /// The same rule for a slowed orchestrator at the scales the tests use it at.
    #[test]
    fn a_slowed_orchestrator_keeps_the_per_call_budget_above_the_emulators_latency() {
        let floor = EMULATOR_CALL_P90 * EMULATOR_CALL_HEADROOM;
        for (factor, scale) in [(3, 1.0 / 12.0), (6, 1.0 / 30.0)] {
            let table = swarm_core::timings::Timings::standard().clone();
            let t = with_orchestrator_slowed(table.clone(), factor).scaled(scale);
            let o = &t.orchestrator;
            assert!(o.aws_call >= floor, "× {factor} at {scale}: {:?} per call, at least {floor:?}", o.aws_call);
            assert!(
                o.plan_budget + o.post_plan <= o.request_budget && o.request_budget < o.timeout && o.timeout < o.lease
            );
            assert!(o.timeout < t.api.integration_timeout);
            assert!(table.scaled(scale).orchestrator.aws_call < floor, "the table alone would not at {scale}");
        }
    }

    /// The same rule for the worker's receipt heartbeat with room for invocations at 1/240: each
    /// beat's cut holds the headroom, and the table's rule between the beat, its cut, the receipt
    /// visibility and the attempt lease still holds.
    #[test]
    fn room_for_invocations_keeps_the_heartbeat_above_the_emulators_latency_at_1_240() {
        let t = with_room_for_invocations(swarm_core::timings::Timings::standard().clone()).scaled(1.0 / 240.0);
        let floor = EMULATOR_CALL_P90 * EMULATOR_CALL_HEADROOM;
        assert!(t.aws.attempt_timeout >= floor, "{:?} per beat, at least {floor:?}", t.aws.attempt_timeout);
        let beat = (t.worker.heartbeat + t.aws.attempt_timeout) * 2;
        assert!(beat <= t.worker.receipt_visibility && beat <= t.worker.attempt_lease, "{beat:?}");
        assert!(t.worker.receipt_visibility <= t.worker.timeout && t.worker.attempt_lease <= t.worker.timeout);
        assert!(t.worker.receipt_visibility < t.queues.tasks.visibility_timeout);
        // The table as it is would not: 10 s at 1/240 is 42 ms.
        assert!(swarm_core::timings::Timings::standard().scaled(1.0 / 240.0).aws.attempt_timeout < floor);
    }
}
