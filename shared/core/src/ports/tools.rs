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
