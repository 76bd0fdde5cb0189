//! The agent loop: LLM rounds over one subtask's transcript with its tools, the last round forbidding calls; the transcript compressed when large and shortened after a context-length error or a cut-off answer.

mod calls;
mod state;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{FailureKind, MAX_RESULT_CHARS, SubtaskRecord, SubtaskResult};
use swarm_core::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use swarm_core::llm::transcript::{check_pairing, compress, estimate_tokens, latest_round, shrink_latest_round};
use swarm_core::ports::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Purpose, ToolChoice, ToolContext, ToolGateway,
    ToolSpec,
};
use swarm_core::prompts::WORK_LEADING_MESSAGES;
use swarm_core::untrusted::clean_text;
use tokio::time::Instant;

use self::calls::{Caller, ToolCalls};
pub use self::state::{Checkpoint, LoopEnd, LoopState, partial_result};
use crate::effects::{Attempt, SideEffects};
use crate::settings::WorkerSettings;

/// Tokens a worker's answer (its text or its tool calls) needs; the client adds a thinking
/// model's reasoning budget to it.
pub const WORK_ANSWER_TOKENS: u32 = 2_048;
/// Times one subtask may shorten its transcript (each halves it) after a context-length error
/// or an answer cut off by `length`; past that the request cannot fit and the subtask fails.
const MAX_SHRINKS: u32 = 3;

/// The shortenings one run has left, and whether the one for a cut-off answer was used.
struct Shrinks {
    left: u32,
    for_length: bool,
}

/// What one request to the model gave.
enum Asked {
    Answer(ChatResponse),
    /// The transcript was shortened after a context-length error: ask again.
    Again,
    End(LoopEnd),
}

/// The agent: the work model, the compression model and the tool calls of one subtask's rounds.
pub struct Agent {
    model: Arc<dyn ChatModel>,
    sub_model: Arc<dyn ChatModel>,
    calls: ToolCalls,
    /// Most LLM rounds per subtask; the last one forbids tool calls.
    max_rounds: u32,
    /// Time that must remain before starting an LLM round.
    min_round_time: Duration,
    retry: LlmRetryPolicy,
    /// Transcript size (estimated tokens) above which older rounds are compressed.
    compress_above_tokens: u64,
}

impl Agent {
    /// The agent over `model` (work), `sub_model` (compression) and `tools`, its side effects
    /// through `effects`, with the loop's part of `settings`.
    pub fn new(
        model: Arc<dyn ChatModel>,
        sub_model: Arc<dyn ChatModel>,
        tools: Arc<dyn ToolGateway>,
        effects: Arc<SideEffects>,
        settings: &WorkerSettings,
    ) -> Self {
        Self {
            model,
            sub_model,
            calls: ToolCalls::new(tools, effects, settings),
            max_rounds: settings.max_rounds,
            min_round_time: settings.min_round_time,
            retry: settings.retry,
            compress_above_tokens: settings.compress_above_tokens,
        }
    }

    /// The LLM ↔ tool loop. Every assistant tool call gets exactly one tool
    /// message, in call order, whatever happens to the call.
    pub async fn run(
        &self,
        ctx: &ToolContext,
        record: &SubtaskRecord,
        attempt: &Attempt,
        state: &mut LoopState,
        deadline: Instant,
    ) -> LoopEnd {
        let tools = match self.calls.listed(ctx, &record.subtask.tools, deadline).await {
            Ok(tools) => tools,
            Err(end) => return end,
        };
        let allowed: HashMap<&str, &ToolSpec> = tools.iter().map(|t| (t.name.as_str(), t)).collect();
        let caller = Caller { ctx, attempt, allowed: &allowed, deadline };
        let mut shrinks = Shrinks { left: MAX_SHRINKS, for_length: false };
        let mut round = 0;
        while round < self.max_rounds {
            if deadline.saturating_duration_since(Instant::now()) < self.min_round_time {
                return LoopEnd::OutOfTime;
            }
            let last_round = round + 1 == self.max_rounds;
            if estimate_tokens(&state.messages) > self.compress_above_tokens
                && let Err(end) = self.compress_to(state, self.compress_above_tokens, deadline).await
            {
                return end;
            }
            if let Err(e) = check_pairing(&state.messages) {
                return LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::Internal,
                    format!("internal transcript error: {e}"),
                ));
            }
            let response = match self.ask(state, &tools, last_round, &mut shrinks.left, deadline).await {
                Asked::Answer(response) => response,
                Asked::Again => continue,
                Asked::End(end) => return end,
            };
            state.usage = state.usage.add(&response.usage);
            round += 1;
            if response.tool_calls.is_empty() {
                match self.answer(state, &response, &mut shrinks, deadline).await {
                    Some(end) => return end,
                    None => continue,
                }
            }
            if let Some(end) = self.calls.run_round(&caller, state, &response, round).await {
                return end;
            }
        }
        LoopEnd::Done(SubtaskResult::failed(
            FailureKind::NoAnswer,
            format!("no answer after {} rounds", self.max_rounds),
        ))
    }

    /// One request to the work model over the transcript. A context-length error shortens the
    /// transcript (never the same request again: shorter, or not at all).
    async fn ask(
        &self,
        state: &mut LoopState,
        tools: &[ToolSpec],
        last_round: bool,
        shrinks_left: &mut u32,
        deadline: Instant,
    ) -> Asked {
        // The tools travel on every round, the last one included: providers refuse tool history
        // without tool definitions, so the last round forbids calls instead of removing tools.
        let request = ChatRequest {
            purpose: Purpose::Work,
            messages: state.messages.clone(),
            tools: tools.to_vec(),
            max_tokens: Some(WORK_ANSWER_TOKENS),
            tool_choice: if last_round { ToolChoice::None } else { ToolChoice::Auto },
        };
        match complete_with_retry(self.model.as_ref(), &request, &self.retry, deadline).await {
            Ok(response) => Asked::Answer(response),
            Err(CallError::OutOfTime { .. }) => Asked::End(LoopEnd::OutOfTime),
            Err(CallError::Failed(e @ LlmError::ContextLength { .. })) => {
                match self.shrink(state, shrinks_left, deadline).await {
                    Ok(true) => Asked::Again,
                    Ok(false) => Asked::End(LoopEnd::Done(SubtaskResult::failed(
                        FailureKind::ModelFailed,
                        format!("the request is larger than the model's context and cannot be shortened further: {e}"),
                    ))),
                    Err(end) => Asked::End(end),
                }
            }
            Err(CallError::Failed(e)) => {
                tracing::warn!(error = %e.log_safe(), "language model failed");
                Asked::End(LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::ModelFailed,
                    format!("the language model failed: {e}"),
                )))
            }
        }
    }

    /// The model answered without tool calls: its text ends the loop. An answer cut off by its
    /// output limit (still cut after the client's retry with a larger limit) is never a final
    /// answer: a shorter history leaves more room once (`None`: ask again); after that, the facts
    /// found so far.
    async fn answer(
        &self,
        state: &mut LoopState,
        response: &ChatResponse,
        shrinks: &mut Shrinks,
        deadline: Instant,
    ) -> Option<LoopEnd> {
        if response.finish_reason == FinishReason::Length {
            if !shrinks.for_length {
                shrinks.for_length = true;
                match self.shrink(state, &mut shrinks.left, deadline).await {
                    Ok(true) => return None,
                    Ok(false) => {}
                    Err(end) => return Some(end),
                }
            }
            tracing::warn!("the model's answer was cut off by its output limit (finish_reason length)");
            return Some(LoopEnd::Done(partial_result(
                state,
                FailureKind::NoAnswer,
                "the model's answer was cut off by its output limit",
            )));
        }
        let text = response.content.as_deref().map(|t| clean_text(t, MAX_RESULT_CHARS)).unwrap_or_default();
        if text.trim().is_empty() {
            return Some(LoopEnd::Done(SubtaskResult::failed(
                FailureKind::NoAnswer,
                format!("the model returned no answer (finish_reason {:?})", response.finish_reason),
            )));
        }
        Some(LoopEnd::Done(SubtaskResult::Succeeded { text, tool_calls: state.tool_calls.clone() }))
    }

    /// Shortens the transcript to about half: the latest round's tool results are cut to half
    /// their size (fairly, each saying so) and older rounds summarised as needed. `Ok(false)` when
    /// nothing could be shortened or the shrinks are used up; the transcript is then unchanged.
    async fn shrink(&self, state: &mut LoopState, shrinks_left: &mut u32, deadline: Instant) -> Result<bool, LoopEnd> {
        if *shrinks_left == 0 {
            return Ok(false);
        }
        *shrinks_left -= 1;
        let before = state.messages.clone();
        let total = estimate_tokens(&state.messages);
        let (round_tokens, _) = latest_round(&state.messages);
        let cut = shrink_latest_round(&mut state.messages, round_tokens / 2);
        self.compress_to(state, (total / 2).max(1), deadline).await?;
        let changed = state.messages != before;
        tracing::info!(
            before_tokens = total,
            after_tokens = estimate_tokens(&state.messages),
            latest_round_cut = cut,
            changed,
            "transcript shortened"
        );
        Ok(changed)
    }

    /// Compresses the older rounds (the compression model summarises them) until the transcript
    /// is within `budget` estimated tokens.
    async fn compress_to(&self, state: &mut LoopState, budget: u64, deadline: Instant) -> Result<(), LoopEnd> {
        match compress(&state.messages, WORK_LEADING_MESSAGES, budget, self.sub_model.as_ref(), deadline).await {
            Ok(messages) => {
                state.messages = messages;
                Ok(())
            }
            Err(CallError::OutOfTime { .. }) => Err(LoopEnd::OutOfTime),
            Err(CallError::Failed(e)) => Err(LoopEnd::Done(SubtaskResult::failed(
                FailureKind::ModelFailed,
                format!("context compression failed: {e}"),
            ))),
        }
    }
}
