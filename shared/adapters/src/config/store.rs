//! The table and queue pieces (`TABLE_NAME`, `TASKS_QUEUE_URL`, `REFUND_QUEUE_URL`) and, with feature `aws`, the clients and port adapters built from them.

use std::sync::Arc;

use swarm_core::ports::TaskQueue;
use swarm_core::roles::{REFUND_ROLE, TaskQueues};

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

/// The SQS queues a function sends to: one sender per URL given, and none for a queue whose URL
/// the function is not given (its role may not send there; [`QueueUrls::task_queues`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueUrls {
    /// `TASKS_QUEUE_URL`: ordinary subtasks and deadline messages. Required by the orchestrator and
    /// the worker in `tasks` and `dlq` mode; the sweeper sends nothing and is given none.
    pub tasks: Option<String>,
    /// `REFUND_QUEUE_URL`: subtasks of the refund role (orchestrator, refund worker). Unset: the
    /// refund role's queue is not this function's to send to.
    pub refund: Option<String>,
}

const QUEUE_EXAMPLE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/tasks";

impl QueueUrls {
    pub const VARS: &'static [&'static str] = &["TASKS_QUEUE_URL", "REFUND_QUEUE_URL"];

    /// Errors: `TASKS_QUEUE_URL` unset, or either value not an http(s) URL.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let urls = Self::optional_from_lookup(&lookup)?;
        if urls.tasks.is_none() {
            return Err(ConfigError::Missing {
                var: "TASKS_QUEUE_URL",
                hint: format!("the tasks queue's URL, e.g. {QUEUE_EXAMPLE}"),
            });
        }
        Ok(urls)
    }

    /// As [`QueueUrls::from_lookup`], `TASKS_QUEUE_URL` optional (a function that may send to no
    /// queue). Error: a value that is not an http(s) URL.
    pub fn optional_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars::new(&lookup);
        Ok(Self {
            tasks: vars.url("TASKS_QUEUE_URL", QUEUE_EXAMPLE)?,
            refund: vars.url("REFUND_QUEUE_URL", QUEUE_EXAMPLE)?,
        })
    }

    /// The deployed routing — every role on the tasks queue but the refund role, on its own — with
    /// a sender from `sender(url, label)` (label `tasks` or `refund`) for each URL given, and a
    /// route not held ([`TaskQueues::with_role_not_held`]) for each queue whose URL is not.
    pub fn task_queues(&self, sender: impl Fn(&str, &'static str) -> Arc<dyn TaskQueue>) -> TaskQueues {
        let queues = match &self.tasks {
            Some(url) => TaskQueues::new(sender(url, "tasks")),
            None => TaskQueues::not_held("tasks"),
        };
        match &self.refund {
            Some(url) => queues.with_role(REFUND_ROLE, sender(url, "refund")),
            None => queues.with_role_not_held(REFUND_ROLE, "refund"),
        }
    }
}

#[cfg(feature = "aws")]
pub use aws::AwsClients;

#[cfg(feature = "aws")]
mod aws {
    use std::sync::Arc;

    use swarm_core::obs::{TracedQueue, TracedStore};
    use swarm_core::ports::{ConversationStore, TaskQueue};
    use swarm_core::roles::TaskQueues;

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

        /// The conversation store on `table`, every operation in its own span.
        pub fn store(&self, table: &TableConfig) -> Arc<dyn ConversationStore> {
            let store = Arc::new(DynamoConversationStore::new(self.dynamodb.clone(), table.table_name.clone()));
            TracedStore::wrap(store, "aws.dynamodb")
        }

        /// Identity mappings and per-customer counters on `table` (the same table as the conversations).
        pub fn access(&self, table: &TableConfig) -> Arc<dyn swarm_core::access::AccessStore> {
            Arc::new(DynamoConversationStore::new(self.dynamodb.clone(), table.table_name.clone()))
        }

        /// A sender for each queue URL configured ([`QueueUrls::task_queues`]): every send in its own
        /// producer span, the messages carrying its trace context.
        pub fn queues(&self, urls: &QueueUrls) -> TaskQueues {
            urls.task_queues(|url, label| {
                let queue: Arc<dyn TaskQueue> = Arc::new(SqsTaskQueue::new(self.sqs.clone(), url.to_owned()));
                TracedQueue::wrap(queue, "aws_sqs", label)
            })
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

    #[test]
    fn a_sender_for_each_url_given_and_the_refund_role_on_its_own_queue_either_way() {
        struct Named(String);
        #[async_trait::async_trait]
        impl TaskQueue for Named {
            fn name(&self) -> &str {
                &self.0
            }
            async fn send(
                &self,
                _: &[swarm_core::domain::TaskMessage],
                _: u32,
            ) -> Result<(), swarm_core::ports::QueueError> {
                Ok(())
            }
            async fn change_visibility(&self, _: &str, _: u32) -> Result<(), swarm_core::ports::QueueError> {
                Ok(())
            }
        }
        let sender = |url: &str, _label: &'static str| -> Arc<dyn TaskQueue> {
            Arc::new(Named(url.rsplit('/').next().unwrap_or(url).to_owned()))
        };
        let held = |q: &TaskQueues| q.held().map(|q| q.name().to_owned()).collect::<Vec<_>>();
        let both = QueueUrls::from_lookup(lookup(&[
            ("TASKS_QUEUE_URL", "http://127.0.0.1:5000/000000000000/tasks"),
            ("REFUND_QUEUE_URL", "http://127.0.0.1:5000/000000000000/refund"),
        ]))
        .unwrap()
        .task_queues(sender);
        let mut names = held(&both);
        names.sort();
        assert_eq!(names, ["refund", "tasks"]);
        assert_eq!(both.queue_for("refund").map(|q| q.name().to_owned()), Ok("refund".to_owned()));
        let tasks_only =
            QueueUrls::from_lookup(lookup(&[("TASKS_QUEUE_URL", "http://127.0.0.1:5000/000000000000/tasks")]))
                .unwrap()
                .task_queues(sender);
        assert_eq!(held(&tasks_only), ["tasks"]);
        assert!(tasks_only.has_own_queue("refund"), "refund subtasks wait on their own queue");
        assert_eq!(tasks_only.queue_for("refund").map(|q| q.name().to_owned()).unwrap_err().queue, "refund");
        let none = QueueUrls::optional_from_lookup(lookup(&[])).unwrap().task_queues(sender);
        assert!(held(&none).is_empty());
        assert_eq!(none.queue_for("support").map(|q| q.name().to_owned()).unwrap_err().queue, "tasks");
    }
}
