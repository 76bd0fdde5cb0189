//! The ports the DLQ consumer never calls: it records dead letters as failed and runs the deadline path, with no model and no tool, so it is given neither the LLM key nor a gateway credential (least privilege) — these stand-ins refuse, permanently, if anything ever asks.

use std::time::Duration;

use async_trait::async_trait;
use swarm_core::ports::{
    ChatModel, ChatRequest, ChatResponse, LlmError, ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec,
};

/// A model that is not there.
pub struct NoModel;

#[async_trait]
impl ChatModel for NoModel {
    async fn complete(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Permanent { status: 0, message: "the DLQ consumer has no language model".into() })
    }

    fn label(&self) -> String {
        "none (DLQ consumer)".into()
    }
}

/// A tool gateway that is not there.
pub struct NoTools;

#[async_trait]
impl ToolGateway for NoTools {
    async fn list_tools(&self, _ctx: &ToolContext) -> Result<Vec<ToolSpec>, ToolError> {
        Err(ToolError::Permanent("the DLQ consumer holds no gateway credential".into()))
    }

    async fn call_tool(
        &self,
        _ctx: &ToolContext,
        _name: &str,
        _arguments: serde_json::Value,
        _timeout: Duration,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Permanent("the DLQ consumer holds no gateway credential".into()))
    }
}
