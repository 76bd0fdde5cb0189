//! The tool calls of the agent loop: the subtask's tools listed, each call of one answer checked in call order (allowed, valid JSON, its schema, the side-effect limits), run concurrently (a side-effecting one through the journal), and every call answered with exactly one tool message.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use swarm_core::approval::PendingApproval;
use swarm_core::domain::now_ms;
use swarm_core::domain::{FailureKind, SubtaskResult, ToolCallRecord, truncate_chars};
use swarm_core::effects::{Effect, MAX_EFFECT_ARGUMENT_BYTES, MAX_EFFECTS_PER_SUBTASK};
use swarm_core::jsonfix::parse_tool_arguments;
use swarm_core::llm::transcript::{fit_round, unique_tool_call_ids};
use swarm_core::obs;
use swarm_core::ports::{ChatMessage, ChatResponse, FinishReason, ToolCall, ToolContext, ToolGateway, ToolSpec};
use swarm_core::untrusted::safe_id;
use tokio::time::Instant;
use tracing::Instrument;

use super::state::{LoopEnd, LoopState};
use crate::effects::{Attempt, EffectEnd, EffectRun, JournalStop, Journaled, SideEffects};
use crate::settings::WorkerSettings;

/// One tool call after its checks, before it runs.
enum Prepared {
    /// Refused before dispatch: the tool message and its record.
    Refused(String, ToolCallRecord),
    /// Runs (no side effects).
    Ready(serde_json::Value),
    /// Has side effects: `ordinal` is its position among the subtask's side-effecting calls; its
    /// intent is not in the journal yet.
    Effect { ordinal: u32, arguments: serde_json::Map<String, serde_json::Value> },
    /// Has side effects, its intent in the journal: dispatched as the journal holds it.
    Journaled(Journaled),
}

/// How one call ended.
struct CallEnd {
    content: String,
    record: ToolCallRecord,
    /// A side effect now waiting for a person.
    approval: Option<PendingApproval>,
    /// A side effect whose outcome is not known after its dispatches.
    unknown: bool,
    /// A journal write failed: the loop stops and the message comes back.
    store_failed: Option<String>,
}

impl CallEnd {
    fn answered(content: String, record: ToolCallRecord) -> Self {
        Self { content, record, approval: None, unknown: false, store_failed: None }
    }

    /// A refused call's tool message (`{"error": why}`) and record.
    fn refused(name: &str, why: String) -> Self {
        let content = serde_json::json!({ "error": why }).to_string();
        Self::answered(content, ToolCallRecord::failed(name, why))
    }

    /// A call's output as the transcript keeps it (`max_chars` of it) and its record, with the facts
    /// of its structured result (read from the whole output, before the cut): the conversation's
    /// memory reads those in later turns, never the output.
    fn output(name: &str, text: &str, is_error: bool, max_chars: usize) -> Self {
        let record = ToolCallRecord {
            name: name.to_owned(),
            ok: !is_error,
            error: is_error.then(|| truncate_chars(text, 200)),
            facts: if is_error { Vec::new() } else { swarm_core::memory::facts_from_tool_output(text) },
        };
        Self::answered(truncate_chars(text, max_chars), record)
    }
}

/// The subtask run a round's calls are made for: the tool context, the attempt (journal writes
/// are conditional on its lease), the tools it may call, and when it must stop.
pub struct Caller<'a> {
    pub ctx: &'a ToolContext,
    pub attempt: &'a Attempt,
    pub allowed: &'a HashMap<&'a str, &'a ToolSpec>,
    pub deadline: Instant,
}

/// Runs the tool calls of the loop's rounds.
pub struct ToolCalls {
    tools: Arc<dyn ToolGateway>,
    effects: Arc<SideEffects>,
    /// Longest wait for one tool call.
    tool_timeout: Duration,
    /// Wait before a tools/list answered with a transient error is asked again.
    tool_list_retry: Duration,
    /// Time that must remain before starting a round: a tools/list is asked again only while it does.
    min_round_time: Duration,
    /// Characters of one tool output kept in the transcript.
    max_tool_output_chars: usize,
    /// Estimated tokens the tool results of one round may take together.
    round_budget_tokens: u64,
    /// Tool calls of one round running at once, at most.
    max_parallel: usize,
    /// Compiled argument schemas by tool name; `Err` keeps why a schema did not compile.
    validators: Mutex<HashMap<String, Result<Arc<jsonschema::Validator>, String>>>,
}

impl ToolCalls {
    pub fn new(tools: Arc<dyn ToolGateway>, effects: Arc<SideEffects>, settings: &WorkerSettings) -> Self {
        Self {
            tools,
            effects,
            tool_timeout: settings.tool_timeout,
            tool_list_retry: settings.tool_list_retry,
            min_round_time: settings.min_round_time,
            max_tool_output_chars: settings.max_tool_output_chars,
            round_budget_tokens: settings.round_budget_tokens,
            max_parallel: settings.max_parallel_tool_calls.max(1),
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// The tools a subtask planned with `wanted` may call: the gateway's list for its role,
    /// narrowed to the plan's allowlist (the gateway's allowlist is the hard limit). No tools
    /// wanted, none listed. A transient failure (the gateway or a tool server unavailable, a
    /// timeout) is asked again every `tool_list_retry` while a round still fits before `deadline`:
    /// a tool server down for a while costs the wait, not the subtask. `Err` ends the loop: the
    /// gateway still unavailable when no round fits any more, refusing, or no time left.
    pub async fn listed(
        &self,
        ctx: &ToolContext,
        wanted: &[String],
        deadline: Instant,
    ) -> Result<Vec<ToolSpec>, LoopEnd> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let listed = loop {
            let e = match tokio::time::timeout_at(deadline, self.tools.list_tools(ctx)).await {
                Ok(Ok(t)) => break t,
                Ok(Err(e)) => e,
                Err(_) => return Err(LoopEnd::OutOfTime),
            };
            if !e.is_transient() {
                return Err(LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::ToolsRefused,
                    format!("the tool gateway refused: {e}"),
                )));
            }
            let again = Instant::now() + self.tool_list_retry;
            if deadline.saturating_duration_since(again) < self.min_round_time {
                tracing::warn!(error = %e.log_safe(), "tool list unavailable; no time left to ask again");
                return Err(LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::ToolsUnavailable,
                    format!("the tool gateway is unavailable: {e}"),
                )));
            }
            tracing::info!(error = %e.log_safe(), "tool list unavailable; asked again shortly");
            tokio::time::sleep_until(again).await;
        };
        let wanted: HashSet<&str> = wanted.iter().map(String::as_str).collect();
        Ok(listed.into_iter().filter(|t| wanted.contains(t.name.as_str())).collect())
    }

    /// Runs the tool calls of `response` (round `round`) and writes the assistant message and one
    /// tool message per call, in call order, into `state`. Answers how the loop ends when this
    /// round ends it: the journal refused an intent, a side effect waits for a person or is being
    /// confirmed (the model is not given another round in which to try it differently).
    pub async fn run_round(
        &self,
        caller: &Caller<'_>,
        state: &mut LoopState,
        response: &ChatResponse,
        round: u32,
    ) -> Option<LoopEnd> {
        let cut_off = response.finish_reason == FinishReason::Length;
        // Missing, empty or repeated ids are made unique before anything runs: every call gets one answer.
        let mut tool_calls = response.tool_calls.clone();
        let repaired = unique_tool_call_ids(&mut tool_calls, round);
        if repaired > 0 {
            tracing::warn!(repaired, "the model's tool calls had missing or repeated ids; made unique");
        }
        state.messages.push(ChatMessage::Assistant {
            content: response.content.clone(),
            tool_calls: tool_calls.clone(),
            reasoning_content: response.reasoning_content.clone(),
        });
        // Checked in call order first, so the side-effecting calls' positions (their keys) never depend on timing.
        let prepared = self.prepare_calls(caller.allowed, &tool_calls, cut_off, &mut state.effects);
        // Their intents into the journal in that order, before any of the round's calls runs.
        let prepared = match self.journal(caller, &tool_calls, prepared).await {
            Ok(prepared) => prepared,
            Err(end) => {
                let not_run = |call: &ToolCall| CallEnd::refused(&call.name, "not executed: this step stopped".into());
                let ends = tool_calls.iter().map(not_run).collect();
                self.answer_round(state, &tool_calls, ends);
                return Some(end);
            }
        };
        let calls: Vec<_> = tool_calls
            .iter()
            .zip(prepared)
            .map(|(call, prepared)| async move {
                // The model wrote the name: a span names only a tool this subtask may call. The
                // span starts when the call does, not while it waits for a free slot.
                let tool =
                    if caller.allowed.contains_key(call.name.as_str()) { call.name.as_str() } else { "not_allowed" };
                let span = obs::spans::tool_call(tool, &caller.ctx.role);
                self.run_prepared(caller, call, prepared).instrument(span).await
            })
            .collect();
        // Concurrent, at most `max_parallel_tool_calls` at once, answered in call order.
        let ends: Vec<CallEnd> = futures::stream::iter(calls).buffered(self.max_parallel).collect().await;
        self.answer_round(state, &tool_calls, ends)
    }

    /// Writes the intents of the round's side-effecting calls into the journal, in call order
    /// ([`SideEffects::journal_round`]); answers the calls with those journaled. With no time left
    /// they are refused instead (nothing journaled, so nothing runs later either). `Err` ends the
    /// loop: the journal refused an intent (the subtask was closed or taken over), or a write failed.
    async fn journal(
        &self,
        caller: &Caller<'_>,
        calls: &[ToolCall],
        mut prepared: Vec<Prepared>,
    ) -> Result<Vec<Prepared>, LoopEnd> {
        let ctx = caller.ctx;
        let no_time = caller.deadline.saturating_duration_since(Instant::now()).is_zero();
        let mut intents = Vec::new();
        for (call, p) in calls.iter().zip(prepared.iter_mut()) {
            if let Prepared::Effect { ordinal, arguments } = p {
                if no_time {
                    let why = "no time left to call the tool".to_owned();
                    let record = ToolCallRecord::failed(call.name.clone(), why.clone());
                    *p = Prepared::Refused(serde_json::json!({ "error": why }).to_string(), record);
                    continue;
                }
                let arguments = std::mem::take(arguments);
                let (id, subtask_id) = (&ctx.conversation_id, &ctx.subtask_id);
                intents.push(Effect::intent(id, subtask_id, *ordinal, &call.name, arguments, now_ms()));
            }
        }
        if intents.is_empty() {
            return Ok(prepared);
        }
        let mut journaled = match self.effects.journal_round(ctx, caller.attempt, intents).await {
            Ok(journaled) => journaled.into_iter(),
            Err(JournalStop::Refused(why)) => return Err(LoopEnd::Abandoned(why)),
            Err(JournalStop::Retry(why)) => return Err(LoopEnd::Retry(why)),
            Err(JournalStop::Unconfirmable(why)) => {
                tracing::error!(role = %ctx.role, reason = %why, "this function cannot confirm the role's side effects: none is made");
                return Err(LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::Internal,
                    format!("{why}; nothing was done"),
                )));
            }
        };
        for p in prepared.iter_mut().filter(|p| matches!(p, Prepared::Effect { .. })) {
            if let Some(entry) = journaled.next() {
                *p = Prepared::Journaled(entry);
            }
        }
        Ok(prepared)
    }

    /// Writes one tool message per call (the round's results cut fairly to its budget) and the
    /// calls' records; answers how the loop ends when the round ends it.
    fn answer_round(&self, state: &mut LoopState, tool_calls: &[ToolCall], ends: Vec<CallEnd>) -> Option<LoopEnd> {
        let store_failed = ends.iter().find_map(|e| e.store_failed.clone());
        let approvals: Vec<PendingApproval> = ends.iter().filter_map(|e| e.approval.clone()).collect();
        let unknown: Vec<String> = ends.iter().filter(|e| e.unknown).map(|e| e.record.name.clone()).collect();
        let (mut contents, records): (Vec<String>, Vec<ToolCallRecord>) =
            ends.into_iter().map(|e| (e.content, e.record)).unzip();
        let cut = fit_round(&mut contents, self.round_budget_tokens);
        if cut > 0 {
            tracing::info!(cut, budget_tokens = self.round_budget_tokens, "tool results cut to fit the round's budget");
        }
        for ((call, content), rec) in tool_calls.iter().zip(contents).zip(records) {
            state.messages.push(ChatMessage::Tool { tool_call_id: call.id.clone(), content });
            state.tool_calls.push(rec);
        }
        if let Some(why) = store_failed {
            return Some(LoopEnd::Retry(why));
        }
        if !approvals.is_empty() {
            return Some(LoopEnd::Done(SubtaskResult::AwaitingApproval { approvals }));
        }
        if !unknown.is_empty() {
            return Some(LoopEnd::Done(SubtaskResult::Submitted { tools: unknown }));
        }
        None
    }

    /// Checks each call of one answer, in call order: refused calls get their tool message now;
    /// the side-effecting ones that will run get their positions in the journal (`effects` counts
    /// the journal's entries), so the same answer always gives the same keys.
    fn prepare_calls(
        &self,
        allowed: &HashMap<&str, &ToolSpec>,
        calls: &[ToolCall],
        truncated: bool,
        effects: &mut usize,
    ) -> Vec<Prepared> {
        calls.iter().map(|call| self.prepare(allowed, call, truncated, effects)).collect()
    }

    /// One call's checks (see [`Self::prepare_calls`]).
    fn prepare(
        &self,
        allowed: &HashMap<&str, &ToolSpec>,
        call: &ToolCall,
        truncated: bool,
        effects: &mut usize,
    ) -> Prepared {
        // The name is model output: kept verbatim only when it is a tool this subtask may call.
        let name = if allowed.contains_key(call.name.as_str()) { call.name.clone() } else { safe_id(&call.name) };
        let refuse = |why: String| {
            let content = serde_json::json!({ "error": why }).to_string();
            Prepared::Refused(content, ToolCallRecord::failed(name.clone(), why))
        };
        if truncated {
            return refuse("the model's answer was cut off (finish_reason length) before this call was complete; it was not executed".into());
        }
        let Some(spec) = allowed.get(call.name.as_str()) else {
            return refuse(format!("tool {name} is not available to this subtask"));
        };
        let args = match parse_tool_arguments(&call.arguments) {
            Ok(a) => serde_json::Value::Object(a),
            Err(e) => return refuse(format!("the arguments are not valid JSON ({e}); the call was not executed")),
        };
        match self.schema_error(spec, &args) {
            Ok(None) => {}
            Ok(Some(err)) => {
                return refuse(format!(
                    "the arguments do not match the tool's schema ({err}); the call was not executed"
                ));
            }
            Err(err) => {
                return refuse(format!(
                    "the tool's argument schema does not compile ({err}), so the arguments cannot be checked; the call was not executed"
                ));
            }
        }
        if !spec.side_effecting {
            return Prepared::Ready(args);
        }
        if args.to_string().len() > MAX_EFFECT_ARGUMENT_BYTES {
            return refuse(format!(
                "the arguments of {name} are larger than {MAX_EFFECT_ARGUMENT_BYTES} bytes; the call was not executed"
            ));
        }
        if *effects >= MAX_EFFECTS_PER_SUBTASK {
            return refuse(format!(
                "this step may make at most {MAX_EFFECTS_PER_SUBTASK} calls with side effects; this one was not executed"
            ));
        }
        let serde_json::Value::Object(arguments) = args else {
            return refuse("the arguments are not a JSON object; the call was not executed".into());
        };
        *effects += 1;
        Prepared::Effect { ordinal: u32::try_from(*effects).unwrap_or(u32::MAX), arguments }
    }

    /// Runs one prepared call; always ends with the tool message content and its record.
    async fn run_prepared(&self, caller: &Caller<'_>, call: &ToolCall, prepared: Prepared) -> CallEnd {
        let args = match prepared {
            Prepared::Refused(content, record) => return CallEnd::answered(content, record),
            // Journaled: it runs whatever the time (an intent is dispatched or confirmed later).
            Prepared::Journaled(journaled) => return self.run_effect(caller, call, &journaled).await,
            Prepared::Effect { .. } => {
                return CallEnd::refused(&call.name, "not executed: its intent was not recorded".into());
            }
            Prepared::Ready(args) => args,
        };
        let left = caller.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            obs::spans::record_tool_outcome(&tracing::Span::current(), "refused");
            return CallEnd::refused(&call.name, "no time left to call the tool".into());
        }
        match self.tools.call_tool(caller.ctx, &call.name, args, self.tool_timeout.min(left)).await {
            Ok(out) => {
                let outcome = if out.is_error { "tool_error" } else { "ok" };
                obs::spans::record_tool_outcome(&tracing::Span::current(), outcome);
                CallEnd::output(&call.name, &out.text, out.is_error, self.max_tool_output_chars)
            }
            Err(e) => {
                tracing::warn!(tool = %call.name, error = %e.log_safe(), "tool call failed");
                obs::spans::record_tool_outcome(&tracing::Span::current(), "unavailable");
                CallEnd::refused(&call.name, format!("the tool call failed: {e}"))
            }
        }
    }

    /// One journaled side-effecting call, dispatched ([`SideEffects::dispatch_journaled`]),
    /// answered as the model is told it: the outcome, waiting for approval, or being confirmed.
    async fn run_effect(&self, caller: &Caller<'_>, call: &ToolCall, journaled: &Journaled) -> CallEnd {
        let name = call.name.clone();
        let ended = match self.effects.dispatch_journaled(caller.ctx, caller.attempt, journaled, caller.deadline).await
        {
            EffectRun::Ended(ended) => ended,
            EffectRun::StoreFailed(why) => {
                return CallEnd {
                    store_failed: Some(why),
                    ..CallEnd::refused(&name, "not known yet: this step is retried".into())
                };
            }
        };
        let span_outcome = match &ended {
            EffectEnd::Recorded(outcome) if !outcome.is_error => "ok",
            EffectEnd::Recorded(_) => "tool_error",
            EffectEnd::Awaiting(_) => "awaiting_approval",
            EffectEnd::Unknown => "outcome_unknown",
        };
        obs::spans::record_tool_outcome(&tracing::Span::current(), span_outcome);
        match ended {
            EffectEnd::Recorded(outcome) => {
                CallEnd::output(&name, &outcome.text, outcome.is_error, self.max_tool_output_chars)
            }
            EffectEnd::Awaiting(pending) => CallEnd {
                content: serde_json::json!({
                    "status": "awaiting_approval",
                    "message": "This needs a person's approval first and was not done. Tell the customer it is waiting for review; do not call it again."
                })
                .to_string(),
                record: ToolCallRecord::failed(name, "awaiting approval"),
                approval: Some(pending),
                unknown: false,
                store_failed: None,
            },
            EffectEnd::Unknown => CallEnd {
                content: serde_json::json!({
                    "status": "submitted",
                    "message": "Submitted; its result is being confirmed. Do not call it again."
                })
                .to_string(),
                record: ToolCallRecord::failed(name, "outcome not known yet"),
                approval: None,
                unknown: true,
                store_failed: None,
            },
        }
    }

    /// The first way `args` break the tool's argument schema (`Ok(None)`: they match). `Err` when
    /// the schema does not compile: reported (a warning, once per tool and instance) and the call
    /// refused, never run unchecked.
    fn schema_error(&self, spec: &ToolSpec, args: &serde_json::Value) -> Result<Option<String>, String> {
        let validator = {
            let mut cache = self.validators.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .entry(spec.name.clone())
                .or_insert_with(|| {
                    jsonschema::validator_for(&spec.input_schema).map(Arc::new).map_err(|e| {
                        let e = e.to_string();
                        tracing::warn!(tool = %spec.name, error = %e, "the tool's input schema does not compile; its calls are refused");
                        e
                    })
                })
                .clone()?
        };
        Ok(validator.iter_errors(args).next().map(|e| e.to_string()))
    }
}
