//! The chat models built once at start-up from the configuration: one [`HttpChatModel`] for the main model and one for the sub model (or the main one again). With a stored key, `LlmConfig::models` (in `config`) fetches it first.

use std::sync::Arc;

use swarm_core::llm::Models;
use swarm_core::ports::ChatModel;

use super::client::HttpChatModel;
use super::config::{LlmConfig, LlmConfigError};

/// Builds the models once at start-up: [`HttpChatModel`]s from `c` (`sub` its
/// own instance, with its own in-flight cap, when a sub model is configured,
/// else the `main` instance). Errors when an HTTP client cannot be built, or
/// when the key named by `LLM_API_KEY_SECRET_ARN` has not been fetched yet.
pub fn build_models(c: &LlmConfig) -> Result<Models, LlmConfigError> {
    if c.key_secret.is_some() {
        return Err(LlmConfigError::invalid(
            "LLM_API_KEY_SECRET_ARN",
            "the key has not been fetched; build the models with LlmConfig::models",
        ));
    }
    let main: Arc<dyn ChatModel> = Arc::new(HttpChatModel::new(&c.main, c.timeout, c.max_in_flight, c.prices.clone())?);
    let sub: Arc<dyn ChatModel> = match &c.sub {
        Some(s) => Arc::new(HttpChatModel::new(s, c.timeout, c.max_in_flight, c.prices.clone())?),
        None => main.clone(),
    };
    Ok(Models { main, sub })
}
