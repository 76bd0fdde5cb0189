//! The deterministic offline model: a keyword planner, tool picker and reply writer behind the `ChatModel` port (never presented as an LLM).

use async_trait::async_trait;

use crate::ports::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// Deterministic stand-in for an LLM when none is configured.
#[derive(Clone, Debug, Default)]
pub struct OfflineModel;

impl OfflineModel {
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl ChatModel for OfflineModel {
    async fn complete(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Permanent { status: 501, message: "offline model not written yet".into() })
    }

    fn label(&self) -> String {
        "offline model".into()
    }

    fn is_offline(&self) -> bool {
        true
    }
}
