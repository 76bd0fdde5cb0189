//! The tool gateway port: the MCP gateway as a worker sees it (`tools/list`, `tools/call`), who is calling, and its errors.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::model::ToolSpec;
use crate::approval::ProposedAction;
use crate::domain::{ConversationId, SubtaskId};

/// Who is calling: decides which tools are visible and whose data they act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolContext {
    /// Worker role; the gateway credential is chosen from it.
    pub role: String,
    /// Sent to the gateway as a header the model cannot write; overrides any
    /// customer id in the arguments of customer-scoped tools.
    pub customer_id: String,
    pub conversation_id: ConversationId,
    pub subtask_id: SubtaskId,
}

/// What a tool returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Text content (JSON text for structured results).
    pub text: String,
    /// The tool (or the gateway, for refusals and fallbacks) reported an error.
    pub is_error: bool,
    /// The gateway refused the call before dispatch (not permitted, rate limit, open breaker, an
    /// upstream session lost): the tool never saw this call, so the answer says nothing about an
    /// earlier dispatch of the same side effect. Always with `is_error`.
    #[serde(default)]
    pub refused: bool,
}

/// Refusal codes (`{"error": …, "code": "<code>"}`) that say the tool did not act *and* could not
/// have checked its ledger: the same call may be answered otherwise later.
const UNSETTLED_CODES: [&str; 1] = ["unavailable"];

impl ToolOutput {
    /// Whether this answer settles a call that may have run before (a replay with the same key):
    /// a success, or a tool error carrying a permanent refusal code — an object
    /// `{"error": "<reason>", "code": "<code>"}` whose code is not `unavailable` (the shop tools'
    /// refusals: `not_found`, `refused`, a refund rule …). An error without a code (a tool server
    /// failing before it reached its ledger, a proxy's error result) says nothing about the earlier
    /// run: a tool that ran the key would have answered its first result.
    pub fn settles_a_replay(&self) -> bool {
        if self.refused {
            return false;
        }
        if !self.is_error {
            return true;
        }
        serde_json::from_str::<serde_json::Value>(&self.text)
            .ok()
            .and_then(|v| v.get("code").and_then(serde_json::Value::as_str).map(str::to_owned))
            .is_some_and(|code| !code.is_empty() && !UNSETTLED_CODES.contains(&code.as_str()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("tool call timed out after {0:?}")]
    Timeout(Duration),
    /// Gateway or upstream unreachable, 5xx, session lost: retry may help.
    #[error("tool gateway unavailable: {0}")]
    Unavailable(String),
    /// Bad credential, protocol error, unknown tool: retry will not help.
    #[error("tool gateway error: {0}")]
    Permanent(String),
    /// This client could not send the call at all (it holds no credential for the role): nothing
    /// reached the gateway. Never a side effect's outcome. Not transient: the wiring decides it.
    #[error("tool call not sent: {0}")]
    Local(String),
    /// The gateway refused a consent-gated call before dispatch: a person must approve exactly
    /// this action first (typed, from the gateway's error code; never read from text).
    #[error("approval required: {} {} on order {}", .0.tool, .0.amount(), .0.order_id)]
    ApprovalRequired(ProposedAction),
    /// The gateway refused the approval the call carried (expired, or not for this call).
    #[error("approval refused: {0}")]
    ApprovalRefused(String),
}

impl ToolError {
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Timeout(_) | Self::Unavailable(_))
    }

    /// What a log line may say of this error: its class (and the timeout, or the proposed action's
    /// tool), never the gateway's or the tool's message — those quote the call's
    /// arguments, which the model wrote from the customer's words.
    pub fn log_safe(&self) -> LogSafeToolError<'_> {
        LogSafeToolError(self)
    }
}

/// [`ToolError::log_safe`]: displays the class only.
#[derive(Debug, Clone, Copy)]
pub struct LogSafeToolError<'a>(&'a ToolError);

impl std::fmt::Display for LogSafeToolError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ToolError::Timeout(after) => write!(f, "tool call timed out after {after:?}"),
            ToolError::Unavailable(_) => f.write_str("tool gateway unavailable"),
            ToolError::Permanent(_) => f.write_str("tool gateway error"),
            ToolError::Local(_) => f.write_str("tool call not sent"),
            ToolError::ApprovalRequired(action) => write!(f, "approval required for {}", action.tool),
            ToolError::ApprovalRefused(_) => f.write_str("approval refused"),
        }
    }
}

/// The MCP tool gateway as a worker sees it (`tools/list`, `tools/call`).
#[async_trait]
pub trait ToolGateway: Send + Sync {
    /// Tools visible to `ctx.role`, in a stable order.
    async fn list_tools(&self, ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError>;
    /// Calls one tool with JSON-object `arguments`, giving up after `timeout`.
    async fn call_tool(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
        timeout: Duration,
    ) -> Result<ToolOutput, ToolError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_safe_tool_error_says_its_class_never_the_message() {
        let quoted = "order A1033: reason 'my parrot Zephyrine chewed it' is too long";
        let errors = [
            (ToolError::Unavailable(quoted.into()), "tool gateway unavailable"),
            (ToolError::Permanent(quoted.into()), "tool gateway error"),
            (ToolError::Local(quoted.into()), "tool call not sent"),
            (ToolError::ApprovalRefused(quoted.into()), "approval refused"),
            (ToolError::Timeout(Duration::from_secs(10)), "tool call timed out after 10s"),
        ];
        for (error, shown) in errors {
            assert!(error.to_string().contains("Zephyrine") || matches!(error, ToolError::Timeout(_)));
            assert_eq!(error.log_safe().to_string(), shown);
        }
    }

    #[test]
    fn only_a_success_or_a_permanent_refusal_code_settles_a_replay() {
        let out = |text: &str, is_error: bool, refused: bool| ToolOutput { text: text.into(), is_error, refused };
        let cases = [
            (out(r#"{"refund_id":"RF-1"}"#, false, false), true),
            (out("plain text result", false, false), true),
            (out(r#"{"error":"outside the refund window","code":"refund_window_closed"}"#, true, false), true),
            (out(r#"{"error":"no such order","code":"not_found"}"#, true, false), true),
            (out(r#"{"error":"ledger down","code":"unavailable"}"#, true, false), false),
            (out(r#"{"error":"no code"}"#, true, false), false),
            (out(r#"{"error":"empty code","code":""}"#, true, false), false),
            (out("the tool failed: upstream error", true, false), false),
            (out(r#"{"error":"circuit open","code":"refused"}"#, true, true), false),
            (out(r#"{"refund_id":"RF-1"}"#, false, true), false),
        ];
        for (output, settles) in cases {
            assert_eq!(output.settles_a_replay(), settles, "{output:?}");
        }
    }
}
