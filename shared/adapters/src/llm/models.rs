//! The models of a function, built once at start-up from its [`LlmConfig`]: an [`HttpChatModel`] per endpoint (with a stored key, `LlmConfig::models` in `config` fetches it first; with `LLM_AUTH=sigv4`, each request signed).

use std::sync::Arc;

pub use swarm_core::llm::Models;
use swarm_core::ports::ChatModel;

use super::client::HttpChatModel;
use super::config::{BEDROCK_SIGNING_SERVICE, LlmAuth, LlmConfig, LlmConfigError, LlmEndpoint, host_of};

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
    let signer = match &c.auth {
        LlmAuth::Bearer => None,
        LlmAuth::SigV4 { region } => Some(crate::sigv4::SigV4Signer::from_env(BEDROCK_SIGNING_SERVICE, region)),
    };
    let model = |endpoint: &LlmEndpoint, sign: bool| -> Result<Arc<dyn ChatModel>, LlmConfigError> {
        let model = HttpChatModel::new(endpoint, c.timeout, c.max_in_flight, c.prices.clone())?;
        Ok(match signer.clone().filter(|_| sign) {
            Some(signer) => Arc::new(model.signed(signer)),
            None => Arc::new(model),
        })
    };
    let main = model(&c.main, true)?;
    let sub: Arc<dyn ChatModel> = match &c.sub {
        // SigV4 credentials go only to the main endpoint's host, as a key would.
        Some(s) => model(s, host_of(&s.base_url) == host_of(&c.main.base_url))?,
        None => main.clone(),
    };
    Ok(Models { main, sub })
}
