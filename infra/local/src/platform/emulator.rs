//! The emulator backend: DynamoDB (with its stream) and SQS on an AWS emulator (moto), through the same AWS adapters the Lambdas use; tables and queues get names unique to the run, or the names of a stack that outlives the process (reused on the next start, so a restart loses nothing); with IAM enforced, each function signs with its own IAM user's key ([`super::iam`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use aws_sdk_dynamodb::config::Credentials;
use serde_json::Value;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_adapters::aws::dynamo::store::to_store_error;
use swarm_adapters::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};
use swarm_adapters::aws::sqs::SqsTaskQueue;
use swarm_core::ports::{ConversationStore, StoreError, TaskQueue};
use swarm_core::timings::{Timings, seconds_rounded_up};

use super::dynamo_stream::{DynamoStreamReader, StartPosition};
use super::dynamo_table::create_table;
use super::iam::FunctionUsers;
use super::sqs::{QueueSpec, SqsConsumer, create_queue_with_dlq};
use super::{Backend, ChangeFeed, FunctionClients, Queue, QueueConsumer, QueueHandles, QueueSet, StreamError};

/// Shortest wait between two empty stream polls: moto serves every call in Python, and polling
/// it faster (a small time scale) only takes the CPU the functions need.
const MIN_STREAM_POLL: Duration = Duration::from_millis(50);
/// Longest wait for one clean-up call at teardown.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the emulator is and how a run uses it.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// The emulator's endpoint, e.g. `http://127.0.0.1:5000`.
    pub endpoint: String,
    /// `AWS_REGION`, else `us-east-1`.
    pub region: String,
    /// Prefix of the table and queue names; a unique suffix is added per run (without [`Self::stack`]).
    pub name_prefix: String,
    /// Leave the table and queues on the emulator at teardown (to inspect them).
    pub keep_resources: bool,
    /// A stack name: the table is `<stack>`, the queues `<stack>-tasks`, `<stack>-refund` and their
    /// `-dlq`s, created if missing and reused if present, and kept at teardown — as a deployed stack's
    /// table and queues outlive its functions, a restart finds what was in flight. `None`: names
    /// unique to the run, deleted at teardown.
    pub stack: Option<String>,
    /// With [`Self::stack`]: delete the stack's table and queues first, and start clean.
    pub fresh: bool,
    /// IAM is enforced on this emulator (`infra/aws/moto_server.py --iam`, its own port): the
    /// platform signs as the emulator's administrator, each function as its own IAM user with its
    /// role's policies from `template.yaml`.
    pub iam: bool,
}

impl EmulatorOptions {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            region: std::env::var("AWS_REGION")
                .ok()
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| "us-east-1".into()),
            name_prefix: "swarm-local".into(),
            keep_resources: false,
            stack: None,
            fresh: false,
            iam: false,
        }
    }

    /// The same, on the stack named `name` ([`EmulatorOptions::stack`]); `fresh` deletes what it holds first.
    ///
    /// Errors: a name DynamoDB and SQS do not both accept (1-60 characters of `A-Z a-z 0-9 - _`,
    /// so that `<name>-refund-dlq` stays within SQS's 80).
    pub fn on_stack(mut self, name: &str, fresh: bool) -> anyhow::Result<Self> {
        let valid = (1..=60).contains(&name.len())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && name.len() >= 3;
        anyhow::ensure!(valid, "stack name {name:?}: 3-60 characters of A-Z a-z 0-9 - _");
        self.stack = Some(name.to_owned());
        self.fresh = fresh;
        Ok(self)
    }

    /// The same, with IAM enforced or not ([`EmulatorOptions::iam`]).
    pub fn with_iam(mut self, iam: bool) -> Self {
        self.iam = iam;
        self
    }

    /// Deletes the table and queues of [`Self::stack`] (nothing without one): a run that made a stack
    /// only for itself (`swarm-chaos --restart-at`) leaves nothing behind. Failures are logged.
    pub async fn delete_stack(&self) {
        let Some(stack) = &self.stack else { return };
        let (dynamodb, _, sqs) = emulator_clients_as(&self.endpoint, &self.region, self.credentials());
        delete_stack(&dynamodb, &sqs, stack).await;
    }

    /// Who the platform signs as: the administrator with IAM on, else `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY`, else the emulator's `test` / `test`.
    fn credentials(&self) -> Credentials {
        if self.iam {
            return super::iam::admin_credentials();
        }
        let var = |k: &str, default: &str| {
            std::env::var(k).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
        };
        Credentials::new(
            var("AWS_ACCESS_KEY_ID", "test"),
            var("AWS_SECRET_ACCESS_KEY", "test"),
            None,
            None,
            "swarm-local",
        )
    }
}

/// A DynamoDB, DynamoDB Streams and SQS client for `endpoint`: credentials from
/// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, else the emulator's `test` / `test`.
pub fn emulator_clients(
    endpoint: &str,
    region: &str,
) -> (aws_sdk_dynamodb::Client, aws_sdk_dynamodbstreams::Client, aws_sdk_sqs::Client) {
    emulator_clients_as(endpoint, region, EmulatorOptions::new(endpoint).credentials())
}

/// As [`emulator_clients`], signed with `credentials`.
pub fn emulator_clients_as(
    endpoint: &str,
    region: &str,
    credentials: Credentials,
) -> (aws_sdk_dynamodb::Client, aws_sdk_dynamodbstreams::Client, aws_sdk_sqs::Client) {
    let region = aws_sdk_dynamodb::config::Region::new(region.to_owned());
    let dynamodb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region.clone())
        .credentials_provider(credentials.clone())
        .build();
    let streams = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region.clone())
        .credentials_provider(credentials.clone())
        .build();
    let sqs = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(region)
        .credentials_provider(credentials)
        .build();
    (
        aws_sdk_dynamodb::Client::from_conf(dynamodb),
        aws_sdk_dynamodbstreams::Client::from_conf(streams),
        aws_sdk_sqs::Client::from_conf(sqs),
    )
}

/// The swarm's data on an emulator.
pub struct EmulatorBackend {
    options: EmulatorOptions,
    dynamodb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    sqs: aws_sdk_sqs::Client,
    table: String,
    store: Arc<DynamoConversationStore>,
    queues: QueueSet,
    queue_urls: Vec<String>,
    stream_poll: Duration,
    /// With IAM on: each function's clients, signed with its own key, and the users to delete.
    signed: Option<(HashMap<String, FunctionClients>, FunctionUsers)>,
    /// The stack's table was there already (a restart): what it holds is carried on.
    reused: bool,
}

impl EmulatorBackend {
    /// Creates the table (stream `NEW_IMAGE`, TTL) and the tasks and refund queues with their
    /// DLQs: visibility timeouts from `queues.*` rounded up to whole seconds (SQS holds
    /// integers), a redrive after `queues.max_receive_count` receives. The change feed polls
    /// the stream every `local.stream_poll` (at least every 50 ms).
    ///
    /// Errors: the emulator does not answer or refuses a request.
    pub async fn provision(options: &EmulatorOptions, timings: &Timings) -> anyhow::Result<Self> {
        let (dynamodb, streams, sqs) = emulator_clients_as(&options.endpoint, &options.region, options.credentials());
        let base = match &options.stack {
            Some(stack) => stack.clone(),
            None => {
                // Names unique to this run: several runs (and tests) share one emulator.
                let run = uuid::Uuid::now_v7().simple().to_string();
                format!("{}-{}", options.name_prefix, &run[run.len() - 12..])
            }
        };
        if options.stack.is_some() && options.fresh {
            delete_stack(&dynamodb, &sqs, &base).await;
        }
        let reused = table_exists(&dynamodb, &base).await.with_context(|| {
            format!(
                "looking for table {base} on {} (is the emulator running? infra/aws/moto.sh start)",
                options.endpoint
            )
        })?;
        create_table(&dynamodb, &base).await.with_context(|| {
            format!("creating table {base} on {} (is the emulator running? infra/aws/moto.sh start)", options.endpoint)
        })?;
        let secs = |d: Duration| u32::try_from(seconds_rounded_up(d)).unwrap_or(u32::MAX);
        let q = &timings.queues;
        let mut queue_urls = Vec::new();
        let pair = |name: String, visibility: Duration| {
            let sqs = sqs.clone();
            async move {
                let spec = QueueSpec {
                    name: &name,
                    visibility_timeout_secs: secs(visibility),
                    dlq_visibility_timeout_secs: secs(q.dead_letters.visibility_timeout),
                    max_receive_count: q.max_receive_count,
                };
                // A reused stack's queues keep their attributes: another time scale is refused (QueueAlreadyExists).
                let (url, dlq_url) = create_queue_with_dlq(&sqs, spec).await.with_context(|| {
                    format!("creating queue {name} (a stack's queues hold the time scale they were made with: same --time-scale, or --fresh)")
                })?;
                anyhow::Ok((handles(&sqs, &url), handles(&sqs, &dlq_url), [url, dlq_url]))
            }
        };
        let (tasks, tasks_dead_letters, urls) = pair(format!("{base}-tasks"), q.tasks.visibility_timeout).await?;
        queue_urls.extend(urls);
        let (refund, refund_dead_letters, urls) = pair(format!("{base}-refund"), q.refund.visibility_timeout).await?;
        queue_urls.extend(urls);
        let store = Arc::new(DynamoConversationStore::new(dynamodb.clone(), base.clone()));
        tracing::info!(table = %base, queues = ?queue_urls, endpoint = %options.endpoint, "emulator resources ready");
        let mut this = Self {
            options: options.clone(),
            dynamodb,
            streams,
            sqs,
            table: base,
            store,
            queues: QueueSet { tasks, tasks_dead_letters, refund, refund_dead_letters },
            queue_urls,
            stream_poll: timings.local.stream_poll.max(MIN_STREAM_POLL),
            signed: None,
            reused,
        };
        if options.iam {
            match this.sign_functions().await {
                Ok(signed) => this.signed = Some(signed),
                Err(e) => {
                    this.teardown().await;
                    return Err(
                        e.context("creating the functions' IAM users (is the emulator started with MOTO_IAM=1?)")
                    );
                }
            }
        }
        Ok(this)
    }

    /// One IAM user per function with its role's policies over this run's table, stream and queues,
    /// and each function's clients signed with its key.
    async fn sign_functions(&self) -> anyhow::Result<(HashMap<String, FunctionClients>, FunctionUsers)> {
        let arns = self.arns().await?;
        let functions = super::iam::functions()?;
        if self.options.stack.is_some() {
            // A killed run of the stack left its users behind; each start makes its own keys.
            FunctionUsers::delete_named(&self.options.endpoint, &self.options.region, &self.table, &functions).await?;
        }
        let (users, keys) =
            FunctionUsers::create(&self.options.endpoint, &self.options.region, &self.table, &functions, &arns).await?;
        let clients = keys
            .into_iter()
            .map(|(function, key)| {
                let (dynamodb, _, sqs) = emulator_clients_as(&self.options.endpoint, &self.options.region, key);
                let store = Arc::new(DynamoConversationStore::new(dynamodb, self.table.clone()));
                let senders = Queue::ALL
                    .iter()
                    .map(|q| &self.queues.get(*q).url)
                    .map(|url| {
                        (url.clone(), Arc::new(SqsTaskQueue::new(sqs.clone(), url.clone())) as Arc<dyn TaskQueue>)
                    })
                    .collect();
                (function, FunctionClients { store: store.clone(), access: store, senders })
            })
            .collect();
        Ok((clients, users))
    }

    /// The run's ARNs by the template's names: the table, its stream, its sweep index's table, the queues.
    async fn arns(&self) -> anyhow::Result<HashMap<String, String>> {
        let table = self.dynamodb.describe_table().table_name(&self.table).send().await.context("DescribeTable")?;
        let table = table.table.context("DescribeTable answered no table")?;
        let mut arns: HashMap<String, String> = HashMap::new();
        arns.insert("Table.Arn".into(), table.table_arn.context("the table has no ARN")?);
        arns.insert("Table.StreamArn".into(), table.latest_stream_arn.context("the table has no stream")?);
        for (queue, name) in [
            (Queue::Tasks, "TasksQueue"),
            (Queue::TasksDeadLetters, "TasksDeadLetterQueue"),
            (Queue::Refund, "RefundQueue"),
            (Queue::RefundDeadLetters, "RefundDeadLetterQueue"),
        ] {
            let url = &self.queues.get(queue).url;
            let answer = self
                .sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
                .with_context(|| format!("GetQueueAttributes of {url}"))?;
            let arn = answer.attributes.and_then(|mut a| a.remove(&aws_sdk_sqs::types::QueueAttributeName::QueueArn));
            arns.insert(format!("{name}.Arn"), arn.with_context(|| format!("{url} has no ARN"))?);
        }
        Ok(arns)
    }
}

fn handles(sqs: &aws_sdk_sqs::Client, url: &str) -> QueueHandles {
    QueueHandles {
        name: url.rsplit('/').next().unwrap_or(url).to_owned(),
        url: url.to_owned(),
        sender: Arc::new(SqsTaskQueue::new(sqs.clone(), url.to_owned())) as Arc<dyn TaskQueue>,
        consumer: Arc::new(SqsConsumer::new(sqs.clone(), url.to_owned())) as Arc<dyn QueueConsumer>,
    }
}

#[async_trait]
impl Backend for EmulatorBackend {
    fn describe(&self) -> String {
        let iam = if self.signed.is_some() { " · IAM enforced, each function its own user" } else { "" };
        let kept = match (&self.options.stack, self.reused) {
            (Some(stack), true) => format!(
                " · stack {stack} reused: its conversations and queued messages carry on; they outlive this process (--fresh starts clean)"
            ),
            (Some(stack), false) => {
                format!(
                    " · stack {stack} created: it outlives this process and the next start reuses it (--fresh starts clean)"
                )
            }
            (None, _) => {
                " · table and queues of this run only, deleted when it stops (--stack <name> keeps them)".to_owned()
            }
        };
        format!(
            "emulator {} · table {} · queues {}, {} (+ DLQs){iam}{kept}",
            self.options.endpoint, self.table, self.queues.tasks.name, self.queues.refund.name
        )
    }

    fn table(&self) -> &str {
        &self.table
    }

    fn store(&self) -> Arc<dyn ConversationStore> {
        self.store.clone()
    }

    fn access(&self) -> Arc<dyn swarm_core::access::AccessStore> {
        self.store.clone()
    }

    /// With IAM on, the function's own clients (`None` for a function without policies); else the platform's.
    fn clients(&self, function: &str) -> Option<FunctionClients> {
        match &self.signed {
            Some((signed, _)) => signed.get(function).cloned(),
            None => Some(FunctionClients::shared(self)),
        }
    }

    fn queue(&self, queue: Queue) -> &QueueHandles {
        self.queues.get(queue)
    }

    /// Reads the stream from its start: on a new table nothing before this run is replayed; on a
    /// reused stack's table every record still in the stream is delivered again (at least once, as
    /// an event source mapping created on an existing stream with `TRIM_HORIZON`): a record the
    /// killed run's trigger had read but not acted on is acted on now, and the rest are no-ops.
    async fn change_feed(&self) -> Result<Box<dyn ChangeFeed>, StreamError> {
        let reader = DynamoStreamReader::open(
            &self.dynamodb,
            self.streams.clone(),
            &self.table,
            &self.options.region,
            StartPosition::TrimHorizon,
        )
        .await?
        .with_poll_interval(self.stream_poll);
        Ok(Box::new(reader))
    }

    async fn conversation_count(&self) -> Result<usize, StoreError> {
        use aws_sdk_dynamodb::types::Select;
        use swarm_adapters::aws::dynamo::codec::conversation_sort_key;
        let retry = AwsRetryPolicy::default();
        let mut count = 0usize;
        let mut start = None;
        loop {
            let req = self
                .dynamodb
                .scan()
                .table_name(&self.table)
                .filter_expression("SK = :meta")
                .expression_attribute_values(":meta", conversation_sort_key())
                .select(Select::Count)
                .set_exclusive_start_key(start);
            let out = retry
                .run("dynamodb", "Scan", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_store_error("Scan", e))?;
            count += usize::try_from(out.count).unwrap_or(0);
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(count),
            }
        }
    }

    /// Deletes the functions' IAM users, the queues and the table (unless kept, or a named stack's:
    /// those outlive the process); failures are logged.
    async fn teardown(&self) {
        if self.options.stack.is_some() {
            if let Some((_, users)) = &self.signed {
                users.delete().await;
            }
            tracing::info!(stack = %self.table, "the stack's table and queues are kept for the next start");
            return;
        }
        if self.options.keep_resources {
            tracing::info!(table = %self.table, queues = ?self.queue_urls, "emulator resources kept");
            return;
        }
        if let Some((_, users)) = &self.signed {
            users.delete().await;
        }
        for url in &self.queue_urls {
            match tokio::time::timeout(CLEANUP_TIMEOUT, self.sqs.delete_queue().queue_url(url).send()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(queue_url = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "could not delete queue")
                }
                Err(_) => tracing::warn!(queue_url = %url, "DeleteQueue gave no answer"),
            }
        }
        match tokio::time::timeout(CLEANUP_TIMEOUT, self.dynamodb.delete_table().table_name(&self.table).send()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(table = %self.table, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "could not delete table")
            }
            Err(_) => tracing::warn!(table = %self.table, "DeleteTable gave no answer"),
        }
    }
}

/// Whether `table` exists. Errors: the emulator does not answer, or refuses DescribeTable.
async fn table_exists(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<bool> {
    match dynamodb.describe_table().table_name(table).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().is_some_and(|se| se.is_resource_not_found_exception()) => Ok(false),
        Err(e) => Err(anyhow::anyhow!("DescribeTable: {}", aws_sdk_dynamodb::error::DisplayErrorContext(&e))),
    }
}

/// Deletes a stack's table and its four queues, those that exist (`--fresh`); failures are logged.
async fn delete_stack(dynamodb: &aws_sdk_dynamodb::Client, sqs: &aws_sdk_sqs::Client, stack: &str) {
    for name in [
        format!("{stack}-tasks"),
        format!("{stack}-tasks-dlq"),
        format!("{stack}-refund"),
        format!("{stack}-refund-dlq"),
    ] {
        let found = tokio::time::timeout(CLEANUP_TIMEOUT, sqs.get_queue_url().queue_name(&name).send()).await;
        let Ok(Ok(found)) = found else { continue };
        let Some(url) = found.queue_url else { continue };
        if let Ok(Err(e)) = tokio::time::timeout(CLEANUP_TIMEOUT, sqs.delete_queue().queue_url(&url).send()).await {
            tracing::warn!(queue_url = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(&e), "could not delete queue");
        }
    }
    match tokio::time::timeout(CLEANUP_TIMEOUT, dynamodb.delete_table().table_name(stack).send()).await {
        Ok(Err(e)) if !e.as_service_error().is_some_and(|se| se.is_resource_not_found_exception()) => {
            tracing::warn!(table = %stack, error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "could not delete table")
        }
        _ => tracing::info!(stack, "the stack's table and queues deleted: starting clean"),
    }
}

#[async_trait]
impl ChangeFeed for DynamoStreamReader {
    async fn next_records(&mut self, wait: Duration) -> Result<Vec<Value>, StreamError> {
        self.next_batch(wait).await
    }
}
