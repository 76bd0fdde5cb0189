//! The table and queue pieces (`TABLE_NAME`, `TASKS_QUEUE_URL`, `REFUND_QUEUE_URL`) and, with feature `aws`, the clients and port adapters built from them.

use super::{ConfigError, Vars};

/// `TABLE_NAME`: the single DynamoDB table (required).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableConfig {
    pub table_name: String,
}

impl TableConfig {
    pub const VARS: &'static [&'static str] = &["TABLE_NAME"];

    /// Error: [`ConfigError::Missing`] when `TABLE_NAME` is unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        Ok(Self { table_name: vars.required("TABLE_NAME", "the DynamoDB table's name (the stack sets it)")? })
    }
}

/// The SQS queues a function sends to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueUrls {
    /// `TASKS_QUEUE_URL` (required): ordinary subtasks and deadline messages.
    pub tasks: String,
    /// `REFUND_QUEUE_URL`: subtasks of the refund role; unset → they go to the tasks queue.
    pub refund: Option<String>,
}

impl QueueUrls {
    pub const VARS: &'static [&'static str] = &["TASKS_QUEUE_URL", "REFUND_QUEUE_URL"];

    /// Errors: `TASKS_QUEUE_URL` unset, or either value not an http(s) URL.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        const EXAMPLE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/tasks";
        let tasks = vars.url("TASKS_QUEUE_URL", EXAMPLE)?.ok_or_else(|| ConfigError::Missing {
            var: "TASKS_QUEUE_URL",
            hint: format!("the tasks queue's URL, e.g. {EXAMPLE}"),
        })?;
        Ok(Self { tasks, refund: vars.url("REFUND_QUEUE_URL", EXAMPLE)? })
    }
}

#[cfg(feature = "aws")]
pub use aws::AwsClients;

#[cfg(feature = "aws")]
mod aws {
    use std::sync::Arc;

    use swarm_core::ports::{ConversationStore, TaskQueue};
    use swarm_core::roles::{REFUND_ROLE, TaskQueues};

    use super::{QueueUrls, TableConfig};
    use crate::aws::dynamo::DynamoConversationStore;
    use crate::aws::sqs::SqsTaskQueue;

    /// The AWS clients, built once. Region, credentials and endpoint
    /// (`AWS_ENDPOINT_URL`, e.g. an emulator) are the SDK's own settings.
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

        /// The conversation store on `table`.
        pub fn store(&self, table: &TableConfig) -> Arc<dyn ConversationStore> {
            Arc::new(DynamoConversationStore::new(self.dynamodb.clone(), table.table_name.clone()))
        }

        /// Identity mappings and per-customer counters on `table` (the same table as the conversations).
        pub fn access(&self, table: &TableConfig) -> Arc<dyn swarm_core::access::AccessStore> {
            Arc::new(DynamoConversationStore::new(self.dynamodb.clone(), table.table_name.clone()))
        }

        /// The tasks queue, and the refund role's queue when configured.
        pub fn queues(&self, urls: &QueueUrls) -> TaskQueues {
            let tasks: Arc<dyn TaskQueue> = Arc::new(SqsTaskQueue::new(self.sqs.clone(), urls.tasks.clone()));
            let mut queues = TaskQueues::new(tasks);
            if let Some(refund) = &urls.refund {
                let refund: Arc<dyn TaskQueue> = Arc::new(SqsTaskQueue::new(self.sqs.clone(), refund.clone()));
                queues = queues.with_role(REFUND_ROLE, refund);
            }
            queues
        }
    }
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
    fn the_table_is_required() {
        assert_eq!(TableConfig::from_lookup(lookup(&[("TABLE_NAME", "swarm")])).unwrap().table_name, "swarm");
        let e = TableConfig::from_lookup(lookup(&[])).unwrap_err();
        assert!(e.to_string().starts_with("TABLE_NAME is required"), "{e}");
    }

    #[test]
    fn the_tasks_queue_is_required_and_urls_are_checked() {
        let q =
            QueueUrls::from_lookup(lookup(&[("TASKS_QUEUE_URL", "http://127.0.0.1:5000/000000000000/tasks")])).unwrap();
        assert_eq!(q.refund, None);
        let e = QueueUrls::from_lookup(lookup(&[])).unwrap_err();
        assert!(e.to_string().starts_with("TASKS_QUEUE_URL is required"), "{e}");
        let e =
            QueueUrls::from_lookup(lookup(&[("TASKS_QUEUE_URL", "https://q/1/t"), ("REFUND_QUEUE_URL", "refunds")]))
                .unwrap_err();
        assert!(e.to_string().starts_with("REFUND_QUEUE_URL must be an http(s) URL"), "{e}");
    }
}
