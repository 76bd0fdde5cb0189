//! The LLM configuration's models at cold start: its key fetched through the secrets extension when it is stored (`LLM_API_KEY_SECRET_ARN`), then the models built.

use swarm_core::llm::Models;

use super::{ConfigError, SecretsExtension};
use crate::llm::{LlmConfig, build_models};

impl LlmConfig {
    /// The models of this config, with the key fetched through `extension`
    /// first when it is stored (`LLM_API_KEY_SECRET_ARN`).
    pub async fn models(&self, extension: &SecretsExtension) -> Result<Models, ConfigError> {
        let config = match &self.key_secret {
            None => self.clone(),
            Some(name) => {
                let key = extension.fetch("LLM_API_KEY_SECRET_ARN", name).await?;
                self.clone().with_key(key)?
            }
        };
        Ok(build_models(&config)?)
    }
}
