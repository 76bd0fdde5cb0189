//! The aggregator's one typed config: every variable it reads, parsed once at cold start from the shared pieces.

use swarm_adapters::config::{ConfigError, SecretsExtension, TableConfig, var_list};
use swarm_adapters::llm::LlmConfig;

/// Everything the aggregator Lambda reads from its environment: the table and the reply model.
#[derive(Clone, Debug)]
pub struct AggregatorConfig {
    pub table: TableConfig,
    pub llm: LlmConfig,
    pub secrets: SecretsExtension,
}

impl AggregatorConfig {
    /// Every variable this config reads.
    pub fn vars() -> Vec<&'static str> {
        var_list(&[TableConfig::VARS, LlmConfig::VARS, SecretsExtension::VARS])
    }

    /// Parses every variable; no I/O (the LLM key is fetched when the models
    /// are built). The error names the variable and its accepted values.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(Self {
            table: TableConfig::from_lookup(&lookup)?,
            llm: LlmConfig::from_lookup(&lookup)?,
            secrets: SecretsExtension::from_lookup(&lookup)?,
        })
    }

    /// [`AggregatorConfig::from_lookup`] over the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_table_and_an_llm_endpoint_are_all_it_needs() {
        let env: HashMap<&str, &str> =
            [("TABLE_NAME", "swarm"), ("LLM_BASE_URL", "http://127.0.0.1:8089/v1"), ("LLM_MODEL", "m")].into();
        let c = AggregatorConfig::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(c.table.table_name, "swarm");
        assert_eq!(c.llm.main.model, "m");
        let e = AggregatorConfig::from_lookup(|k| env.get(k).filter(|_| k != "LLM_BASE_URL").map(|v| v.to_string()))
            .unwrap_err();
        assert!(e.to_string().starts_with("LLM_BASE_URL: missing"), "{e}");
    }
}
