//! Cold-start wiring for the Lambda binaries (feature `aws`): typed settings from the environment, AWS clients, secrets, the ports' AWS adapters; the LLM models with `llm`, the gateway client with `mcp`.

use std::sync::Arc;

use swarm_core::ports::{ConversationStore, TaskQueue};
use swarm_core::roles::{REFUND_ROLE, TaskQueues};

use crate::aws::dynamo::DynamoConversationStore;
use crate::aws::sqs::SqsTaskQueue;

/// A configuration problem found at cold start: the function refuses to start with this message.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
    #[error("could not read secret {name}: {reason}")]
    Secret { name: String, reason: String },
    #[error("{0}")]
    Other(String),
}

/// Settings every function reads once at cold start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSettings {
    /// `TABLE_NAME`: the single table.
    pub table_name: String,
    /// `TASKS_QUEUE_URL`: ordinary subtasks and deadline messages.
    pub tasks_queue_url: Option<String>,
    /// `REFUND_QUEUE_URL`: subtasks of the refund role.
    pub refund_queue_url: Option<String>,
    /// `GATEWAY_URL`: the MCP tool gateway.
    pub gateway_url: Option<String>,
    /// `WORKER_ROLE`: the role whose gateway credential this function holds (`support`, `refund`, `planner`).
    pub role: String,
    /// `DEADLINE_SECS` (default 120).
    pub deadline_secs: u64,
}

impl FunctionSettings {
    pub fn from_env() -> Result<Self, WiringError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, WiringError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let deadline_secs = match get("DEADLINE_SECS") {
            None => swarm_core::domain::DEFAULT_DEADLINE_SECS,
            Some(v) => v.trim().parse().map_err(|_| WiringError::Invalid {
                name: "DEADLINE_SECS",
                reason: format!("{v:?} is not a whole number of seconds"),
            })?,
        };
        Ok(Self {
            table_name: get("TABLE_NAME").ok_or(WiringError::Missing("TABLE_NAME"))?,
            tasks_queue_url: get("TASKS_QUEUE_URL"),
            refund_queue_url: get("REFUND_QUEUE_URL"),
            gateway_url: get("GATEWAY_URL"),
            role: get("WORKER_ROLE").unwrap_or_else(|| swarm_core::roles::DEFAULT_ROLE.to_owned()),
            deadline_secs,
        })
    }
}

/// The AWS clients, built once (endpoint from `AWS_ENDPOINT_URL` when set, e.g. an emulator).
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
}

impl AwsClients {
    pub async fn from_env() -> Self {
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self { dynamodb: aws_sdk_dynamodb::Client::new(&config), sqs: aws_sdk_sqs::Client::new(&config) }
    }

    pub fn store(&self, settings: &FunctionSettings) -> Arc<dyn ConversationStore> {
        Arc::new(DynamoConversationStore::new(self.dynamodb.clone(), settings.table_name.clone()))
    }

    /// The tasks queue, and the refund role's queue when configured.
    pub fn queues(&self, settings: &FunctionSettings) -> Result<TaskQueues, WiringError> {
        let tasks = settings.tasks_queue_url.clone().ok_or(WiringError::Missing("TASKS_QUEUE_URL"))?;
        let mut queues = TaskQueues::new(Arc::new(SqsTaskQueue::new(self.sqs.clone(), tasks)) as Arc<dyn TaskQueue>);
        if let Some(refund) = &settings.refund_queue_url {
            queues = queues.with_role(
                REFUND_ROLE,
                Arc::new(SqsTaskQueue::new(self.sqs.clone(), refund.clone())) as Arc<dyn TaskQueue>,
            );
        }
        Ok(queues)
    }
}

/// Reads a secret (see [`crate::secrets::secret`]), as a start-up error naming the variable.
pub async fn secret(plain_var: &str, arn_var: &str) -> Result<Option<String>, WiringError> {
    crate::secrets::secret(plain_var, arn_var)
        .await
        .map_err(|e| WiringError::Secret { name: arn_var.to_owned(), reason: e.to_string() })
}

/// The worker's MCP client: the gateway URL and this function's role credential
/// (`GATEWAY_TOKEN`, or the secret named by `GATEWAY_TOKEN_SECRET_ARN`).
#[cfg(feature = "mcp")]
pub async fn tool_gateway(settings: &FunctionSettings) -> Result<Arc<dyn swarm_core::ports::ToolGateway>, WiringError> {
    use std::collections::HashMap;
    use std::time::Duration;

    use crate::mcp::McpToolGateway;

    let url = settings.gateway_url.clone().ok_or(WiringError::Missing("GATEWAY_URL"))?;
    let token = secret("GATEWAY_TOKEN", "GATEWAY_TOKEN_SECRET_ARN")
        .await?
        .ok_or(WiringError::Missing("GATEWAY_TOKEN_SECRET_ARN"))?;
    let tokens: HashMap<String, String> = [(settings.role.clone(), token)].into_iter().collect();
    let gateway =
        McpToolGateway::new(&url, tokens, Duration::from_secs(10)).map_err(|e| WiringError::Other(e.to_string()))?;
    Ok(Arc::new(gateway))
}

/// The LLM models, after the key is resolved from `LLM_API_KEY` or `LLM_API_KEY_SECRET_ARN`.
/// Refuses to start on a missing or placeholder key (the config's preflight).
/// Without `LLM_BASE_URL` the function refuses to start, naming the variable.
#[cfg(feature = "llm")]
pub async fn models() -> Result<swarm_core::llm::Models, WiringError> {
    let key = secret("LLM_API_KEY", "LLM_API_KEY_SECRET_ARN").await?;
    let config = crate::llm::config::LlmConfig::from_lookup(|k| {
        if k == "LLM_API_KEY" { key.clone() } else { std::env::var(k).ok() }
    })
    .map_err(|e| WiringError::Other(e.to_string()))?;
    crate::llm::config::build_models(&config).map_err(|e| WiringError::Other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn settings_need_a_table_and_parse_the_deadline() {
        let env: HashMap<&str, &str> =
            [("TABLE_NAME", "t"), ("DEADLINE_SECS", "300"), ("WORKER_ROLE", "refund")].into_iter().collect();
        let s = FunctionSettings::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(s.deadline_secs, 300);
        assert_eq!(s.role, "refund");
        let err = FunctionSettings::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("TABLE_NAME"));
        let bad: HashMap<&str, &str> = [("TABLE_NAME", "t"), ("DEADLINE_SECS", "soon")].into_iter().collect();
        assert!(
            FunctionSettings::from_lookup(|k| bad.get(k).map(|v| v.to_string()))
                .unwrap_err()
                .to_string()
                .contains("DEADLINE_SECS")
        );
    }
}
