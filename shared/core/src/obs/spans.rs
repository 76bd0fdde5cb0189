//! Span helpers with OpenTelemetry's names: one `chat {model}` span per LLM round (GenAI semantic conventions, retries and their class), one `execute_tool {tool}` span per tool call (tool, role, outcome — never arguments).
//!
//! Fields named `otel.name`, `otel.kind` and `otel.status_code` are read by the
//! tracing → OpenTelemetry bridge as the span's name, kind and status; every other
//! field becomes an attribute. Only ids, names of ours, counts and classes are
//! recorded: never a prompt, a reply, a tool argument or a tool result.

use tracing::Span;
use tracing::field::Empty;

use crate::ports::{ChatRequest, ChatResponse, FinishReason};

/// `gen_ai.response.finish_reasons` value of one answer (one choice, so one reason).
pub fn finish_reason_label(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(_) => "other",
    }
}

/// The span of one LLM round to `model` (the configured model name): `chat {model}`, kind
/// client, with the request's purpose and output limit. Answer and attempts are recorded by
/// [`record_llm_answer`] or [`record_llm_failure`].
pub fn llm_round(model: &str, request: &ChatRequest) -> Span {
    let span = tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.request.model = %model,
        gen_ai.request.max_tokens = Empty,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        swarm.llm.purpose = crate::obs::metrics::purpose_label(request.purpose),
        swarm.llm.tools = request.tools.len(),
        swarm.llm.attempts = Empty,
        swarm.llm.retries = Empty,
        swarm.llm.retry_class = Empty,
        error.type = Empty,
    );
    if let Some(max) = request.max_tokens {
        span.record("gen_ai.request.max_tokens", max);
    }
    span
}

/// Records an answer after `attempts` requests (the ones before it failed with `retry_class`).
pub fn record_llm_answer(span: &Span, response: &ChatResponse, attempts: u32, retry_class: Option<&'static str>) {
    span.record("gen_ai.response.model", response.model.as_str());
    span.record("gen_ai.response.finish_reasons", finish_reason_label(&response.finish_reason));
    if let Some(n) = response.usage.prompt_tokens {
        span.record("gen_ai.usage.input_tokens", n);
    }
    if let Some(n) = response.usage.completion_tokens {
        span.record("gen_ai.usage.output_tokens", n);
    }
    if let Some(n) = response.usage.cached_tokens {
        span.record("gen_ai.usage.cache_read.input_tokens", n);
    }
    record_attempts(span, attempts, retry_class);
}

/// Records a round that gave up after `attempts` requests: `error.type` is the class of the
/// last failure (`timeout` when the deadline came first); the status is an error.
pub fn record_llm_failure(span: &Span, class: &'static str, attempts: u32, retry_class: Option<&'static str>) {
    span.record("error.type", class);
    span.record("otel.status_code", "ERROR");
    record_attempts(span, attempts, retry_class);
}

fn record_attempts(span: &Span, attempts: u32, retry_class: Option<&'static str>) {
    span.record("swarm.llm.attempts", attempts);
    span.record("swarm.llm.retries", attempts.saturating_sub(1));
    if let Some(class) = retry_class {
        span.record("swarm.llm.retry_class", class);
    }
}

/// The span of one tool call by a worker of `role`: `execute_tool {tool}`, kind client. `tool`
/// must be a name the subtask may call (a model-written name that is not one is never recorded).
pub fn tool_call(tool: &str, role: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        gen_ai.tool.type = "function",
        swarm.role = %role,
        swarm.tool.outcome = Empty,
    )
}

/// Records how a tool call ended: `ok`, `tool_error` (the tool or gateway answered an error),
/// `refused` (not run: not permitted, bad arguments, no time); for a side effect also
/// `awaiting_approval` (held for a person) and `outcome_unknown` (dispatched, its answer not known yet).
pub fn record_tool_outcome(span: &Span, outcome: &'static str) {
    span.record("swarm.tool.outcome", outcome);
    if outcome != "ok" {
        span.record("otel.status_code", "ERROR");
    }
}
