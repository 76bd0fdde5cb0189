//! Which models the local stack uses: the LLM named by `LLM_*` when `LLM_BASE_URL` is set, else the deterministic offline model (the only place that choice is made).

use std::sync::Arc;

use swarm_adapters::llm::{LlmConfig, LlmConfigError, build_models};
use swarm_core::llm::Models;
use swarm_offline::OfflineModel;

/// [`models_from_lookup`] over the process environment.
pub fn models_from_env() -> Result<Models, LlmConfigError> {
    models_from_lookup(|k| std::env::var(k).ok())
}

/// The offline model for both purposes when `LLM_BASE_URL` is unset or blank;
/// otherwise the HTTP models of [`LlmConfig::from_lookup`] (its errors name the
/// variable: a placeholder key, a missing `LLM_MODEL`…).
pub fn models_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Models, LlmConfigError> {
    if lookup("LLM_BASE_URL").is_none_or(|v| v.trim().is_empty()) {
        return Ok(Models::single(Arc::new(OfflineModel::new())));
    }
    build_models(&LlmConfig::from_lookup(lookup)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn no_base_url_means_the_offline_model() {
        let models = models_from_lookup(lookup(&[])).unwrap();
        assert!(models.main.is_offline() && models.sub.is_offline());
        let models = models_from_lookup(lookup(&[("LLM_BASE_URL", " "), ("LLM_MODEL", "m")])).unwrap();
        assert!(models.main.is_offline());
    }

    #[test]
    fn a_base_url_means_the_configured_llm_with_its_checks() {
        let models =
            models_from_lookup(lookup(&[("LLM_BASE_URL", "http://127.0.0.1:8089/v1"), ("LLM_MODEL", "m")])).unwrap();
        assert!(!models.main.is_offline());
        assert_eq!(models.main.label(), "m @ 127.0.0.1");
        let e = models_from_lookup(lookup(&[("LLM_BASE_URL", "https://api.openai.com/v1"), ("LLM_MODEL", "m")]))
            .unwrap_err();
        assert!(e.to_string().starts_with("LLM_API_KEY: missing"), "{e}");
    }
}
