//! DynamoDB adapter of the conversation store: one table keyed by conversation, conditional writes, exactly-once counting, throttling retried in place.
//!
//! Layout (DESIGN.md "Data"):
//!
//! | PK | SK | attributes |
//! | --- | --- | --- |
//! | `CONV#<id>` | `META` | `status` S, `remaining` N, `total` N, `customer_id`, `query`, `created_at_ms`, `deadline_ms`, `finished` SS (absent while empty), `reply`, `notes` L, `error`, `idempotency_key`, `usage_prompt_tokens` / `usage_completion_tokens` / `usage_cached_tokens` / `usage_cost_usd` N (only when known), `ttl` |
//! | `CONV#<id>` | `TASK#<subtask id>` | `status` S, `subtask` S (JSON), `role`, `attempts` N, `result` S (JSON), `usage` S (JSON), `tools_used` L, `checkpoint` S, `started_at_ms`, `finished_at_ms`, `ttl` |
//! | `IDEM#<customer>#<key>` | `IDEM` | `conversation_id`, `customer_id`, `ttl` |
//!
//! The aggregator's stream filter matches `Keys.SK.S = META`, `NewImage.remaining.N = 0`
//! and `NewImage.status.S = RUNNING`; keep those names.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put, PutRequest, ReturnValue,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus, TimeToLiveSpecification, TransactWriteItem,
    WriteRequest,
};

use crate::domain::{
    Conversation, ConversationId, ConversationStatus, MAX_CHECKPOINT_BYTES, SubtaskRecord, SubtaskResult,
    SubtaskStatus, Usage, truncate_chars,
};
use crate::ports::{AttemptStart, ConversationStore, CountOutcome, CreateOutcome, RecordOutcome, StoreError};

/// Most items in one `BatchWriteItem` call (DynamoDB limit).
pub const BATCH_WRITE_LIMIT: usize = 25;
/// Largest serialized result kept inline, in bytes (after [`SubtaskResult::bounded`]).
pub const MAX_RESULT_BYTES: usize = 96 * 1024;
/// Longest failure reason kept on a conversation, in characters.
const MAX_ERROR_CHARS: usize = 2_000;

const META: &str = "META";
const TASK_PREFIX: &str = "TASK#";
const NON_TERMINAL: [SubtaskStatus; 3] = [SubtaskStatus::Pending, SubtaskStatus::Queued, SubtaskStatus::Running];

/// Error codes worth retrying in place: throttling, contention, server faults.
const TRANSIENT_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeoutException",
    "PriorRequestNotComplete",
    // SQS names for the same conditions (the policy is shared with the SQS adapter).
    "RequestThrottled",
    "InternalError",
    "KmsThrottled",
    "OverLimit",
];

/// Cancellation reasons of a transaction that make retrying worthwhile.
const TRANSIENT_REASONS: &[&str] =
    &["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"];

/// How an AWS adapter retries a transient failure in place: bounded attempts,
/// exponential backoff with full jitter, and a deadline on every attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first (at least 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time, up to `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Deadline of one attempt (one HTTP exchange); a timeout counts as transient.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, 50 ms base, 1 s cap, 10 s per attempt: at most ~43 s in all.
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Full-jitter delay before attempt `attempt + 1` (0-based `attempt` that failed):
    /// uniform in `0..=min(max_delay, base_delay * 2^attempt)`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(2u32.saturating_pow(attempt.min(16))).min(self.max_delay);
        let ms = u64::try_from(exp.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::random_range(0..=ms))
    }

    /// Runs `call` until it succeeds, fails with an error `is_transient` rejects,
    /// or `max_attempts` are used up; each attempt is cut off after `attempt_timeout`.
    pub(crate) async fn run<T, E, R, F, Fut>(
        &self,
        service: &'static str,
        op: &'static str,
        is_transient: impl Fn(&SdkError<E, R>) -> bool,
        call: F,
    ) -> Result<T, SdkError<E, R>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let mut attempt = 0u32;
        loop {
            let outcome = match tokio::time::timeout(self.attempt_timeout, call()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(SdkError::timeout_error(format!(
                    "{service} {op} gave no answer within {:?}",
                    self.attempt_timeout
                ))),
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) if attempt + 1 < self.max_attempts.max(1) && is_transient(&e) => {
                    let delay = self.backoff(attempt);
                    tracing::warn!(
                        service,
                        op,
                        attempt = attempt + 1,
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        error = %DisplayErrorContext(&e),
                        "transient AWS failure, retrying in place"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether an SDK failure may go away on retry: timeouts, connection failures,
/// unparseable responses, throttling/contention codes and HTTP 5xx.
pub(crate) fn sdk_error_is_transient<E>(e: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    match e {
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => true,
        SdkError::DispatchFailure(d) => !d.is_user(),
        SdkError::ServiceError(ctx) => {
            let code_transient = ctx.err().code().is_some_and(|c| TRANSIENT_CODES.contains(&c));
            code_transient || http_status(e).is_some_and(|s| s >= 500)
        }
        _ => false,
    }
}

fn http_status<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

fn is_conditional_failure<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(e, SdkError::ServiceError(ctx) if ctx.err().code() == Some("ConditionalCheckFailedException"))
}

fn to_store_error<E>(op: &'static str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("DynamoDB {op}: {}", DisplayErrorContext(&e));
    if sdk_error_is_transient(&e) { StoreError::Transient(message) } else { StoreError::Permanent(message) }
}

/// Reason codes of a cancelled transaction, in item order (`"None"` for items that passed).
fn cancellation_codes(e: &SdkError<TransactWriteItemsError, HttpResponse>) -> Vec<String> {
    match e {
        SdkError::ServiceError(ctx) => match ctx.err() {
            TransactWriteItemsError::TransactionCanceledException(t) => {
                t.cancellation_reasons().iter().map(|r| r.code().unwrap_or("None").to_owned()).collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn transaction_is_transient(e: &SdkError<TransactWriteItemsError, HttpResponse>) -> bool {
    let codes = cancellation_codes(e);
    if codes.is_empty() {
        return sdk_error_is_transient(e);
    }
    !codes.iter().any(|c| c == "ConditionalCheckFailed")
        && codes.iter().any(|c| TRANSIENT_REASONS.contains(&c.as_str()))
}

// ------------------------------------------------------------------ keys and attributes

fn conv_pk(id: &ConversationId) -> String {
    format!("CONV#{id}")
}

fn task_sk(subtask_id: &str) -> String {
    format!("{TASK_PREFIX}{subtask_id}")
}

/// `IDEM#<customer>#<key>`, with `%` and `#` in the customer id escaped so
/// two (customer, key) pairs can never share a key.
fn idem_pk(customer_id: &str, key: &str) -> String {
    let customer = customer_id.replace('%', "%25").replace('#', "%23");
    format!("IDEM#{customer}#{key}")
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn key(pk: String, sk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))])
}

/// Flat usage attributes, present only for known fields (DynamoDB `N`).
fn usage_attributes(usage: &Usage) -> Vec<(&'static str, AttributeValue)> {
    let mut out = Vec::new();
    if let Some(v) = usage.prompt_tokens {
        out.push(("usage_prompt_tokens", n(v)));
    }
    if let Some(v) = usage.completion_tokens {
        out.push(("usage_completion_tokens", n(v)));
    }
    if let Some(v) = usage.cached_tokens {
        out.push(("usage_cached_tokens", n(v)));
    }
    // NaN and infinities have no DynamoDB number form; an unknowable cost stays unknown.
    if let Some(v) = usage.cost_usd.filter(|v| v.is_finite()) {
        out.push(("usage_cost_usd", n(v)));
    }
    out
}

type Item = HashMap<String, AttributeValue>;

fn corrupt(what: &str, item: &Item) -> StoreError {
    let pk = item.get("PK").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    let sk = item.get("SK").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    StoreError::Permanent(format!("corrupt item {pk}/{sk}: {what}"))
}

fn get_s(item: &Item, name: &str) -> Result<String, StoreError> {
    opt_s(item, name).ok_or_else(|| corrupt(&format!("missing string attribute `{name}`"), item))
}

fn opt_s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn opt_n<T: std::str::FromStr>(item: &Item, name: &str) -> Result<Option<T>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(v) => {
            let text = v.as_n().map_err(|_| corrupt(&format!("attribute `{name}` is not a number"), item))?;
            text.parse::<T>()
                .map(Some)
                .map_err(|_| corrupt(&format!("attribute `{name}` = {text} is out of range"), item))
        }
    }
}

fn get_n<T: std::str::FromStr>(item: &Item, name: &str) -> Result<T, StoreError> {
    opt_n(item, name)?.ok_or_else(|| corrupt(&format!("missing number attribute `{name}`"), item))
}

fn string_list(item: &Item, name: &str) -> Vec<String> {
    item.get(name)
        .and_then(|v| v.as_l().ok())
        .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
        .unwrap_or_default()
}

fn json_attr<T: serde::de::DeserializeOwned>(item: &Item, name: &str) -> Result<Option<T>, StoreError> {
    match opt_s(item, name) {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| corrupt(&format!("attribute `{name}` is not valid JSON: {e}"), item)),
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Permanent(format!("cannot serialize: {e}")))
}

fn conversation_item(c: &Conversation) -> Item {
    let mut item = key(conv_pk(&c.id), META.to_owned());
    item.insert("status".into(), s(c.status.as_str()));
    item.insert("remaining".into(), n(c.remaining));
    item.insert("total".into(), n(c.total));
    item.insert("customer_id".into(), s(&c.customer_id));
    item.insert("query".into(), s(&c.query));
    item.insert("created_at_ms".into(), n(c.created_at_ms));
    item.insert("deadline_ms".into(), n(c.deadline_ms));
    if !c.finished.is_empty() {
        item.insert("finished".into(), AttributeValue::Ss(c.finished.iter().cloned().collect()));
    }
    if let Some(reply) = &c.reply {
        item.insert("reply".into(), s(reply));
    }
    if !c.notes.is_empty() {
        item.insert("notes".into(), AttributeValue::L(c.notes.iter().map(s).collect()));
    }
    if let Some(error) = &c.error {
        item.insert("error".into(), s(error));
    }
    if let Some(k) = &c.idempotency_key {
        item.insert("idempotency_key".into(), s(k));
    }
    for (name, v) in usage_attributes(&c.usage) {
        item.insert(name.into(), v);
    }
    item.insert("ttl".into(), n(c.ttl));
    item
}

fn conversation_from_item(item: &Item) -> Result<Conversation, StoreError> {
    let pk = get_s(item, "PK")?;
    let id = pk.strip_prefix("CONV#").ok_or_else(|| corrupt("PK does not start with CONV#", item))?;
    let status_text = get_s(item, "status")?;
    let status = ConversationStatus::parse(&status_text)
        .ok_or_else(|| corrupt(&format!("unknown status {status_text}"), item))?;
    let finished =
        item.get("finished").and_then(|v| v.as_ss().ok()).map(|ss| ss.iter().cloned().collect()).unwrap_or_default();
    Ok(Conversation {
        id: ConversationId::from_trusted(id),
        customer_id: get_s(item, "customer_id")?,
        status,
        query: get_s(item, "query")?,
        created_at_ms: get_n(item, "created_at_ms")?,
        deadline_ms: get_n(item, "deadline_ms")?,
        total: get_n(item, "total")?,
        remaining: get_n(item, "remaining")?,
        finished,
        reply: opt_s(item, "reply"),
        usage: Usage {
            prompt_tokens: opt_n(item, "usage_prompt_tokens")?,
            completion_tokens: opt_n(item, "usage_completion_tokens")?,
            cached_tokens: opt_n(item, "usage_cached_tokens")?,
            cost_usd: opt_n(item, "usage_cost_usd")?,
        },
        notes: string_list(item, "notes"),
        error: opt_s(item, "error"),
        idempotency_key: opt_s(item, "idempotency_key"),
        ttl: get_n(item, "ttl")?,
    })
}

fn subtask_item(r: &SubtaskRecord) -> Result<Item, StoreError> {
    let mut item = key(conv_pk(&r.conversation_id), task_sk(&r.subtask.id));
    item.insert("status".into(), s(r.status.as_str()));
    item.insert("subtask".into(), s(to_json(&r.subtask)?));
    item.insert("role".into(), s(&r.role));
    if !r.dependents.is_empty() {
        item.insert("dependents".into(), AttributeValue::L(r.dependents.iter().map(s).collect()));
    }
    item.insert("attempts".into(), n(r.attempts));
    if let Some(result) = &r.result {
        item.insert("result".into(), s(fit_result(result)?));
    }
    if !r.usage.is_empty() {
        item.insert("usage".into(), s(to_json(&r.usage)?));
    }
    if !r.tools_used.is_empty() {
        item.insert("tools_used".into(), AttributeValue::L(r.tools_used.iter().map(s).collect()));
    }
    if let Some(c) = &r.checkpoint {
        item.insert("checkpoint".into(), s(fit_checkpoint(c)));
    }
    if let Some(v) = r.started_at_ms {
        item.insert("started_at_ms".into(), n(v));
    }
    if let Some(v) = r.finished_at_ms {
        item.insert("finished_at_ms".into(), n(v));
    }
    item.insert("ttl".into(), n(r.ttl));
    Ok(item)
}

fn subtask_from_item(item: &Item) -> Result<SubtaskRecord, StoreError> {
    let pk = get_s(item, "PK")?;
    let id = pk.strip_prefix("CONV#").ok_or_else(|| corrupt("PK does not start with CONV#", item))?;
    let status_text = get_s(item, "status")?;
    let status =
        SubtaskStatus::parse(&status_text).ok_or_else(|| corrupt(&format!("unknown status {status_text}"), item))?;
    Ok(SubtaskRecord {
        conversation_id: ConversationId::from_trusted(id),
        subtask: json_attr(item, "subtask")?.ok_or_else(|| corrupt("missing `subtask`", item))?,
        role: get_s(item, "role")?,
        dependents: string_list(item, "dependents"),
        status,
        attempts: opt_n(item, "attempts")?.unwrap_or(0),
        result: json_attr(item, "result")?,
        usage: json_attr(item, "usage")?.unwrap_or_default(),
        tools_used: string_list(item, "tools_used"),
        checkpoint: opt_s(item, "checkpoint"),
        started_at_ms: opt_n(item, "started_at_ms")?,
        finished_at_ms: opt_n(item, "finished_at_ms")?,
        ttl: get_n(item, "ttl")?,
    })
}

/// The result as stored: [`SubtaskResult::bounded`], then, if its JSON is still over
/// [`MAX_RESULT_BYTES`] (many tool-call records with long errors), tool-call errors
/// cut to 200 characters and the record list shortened until it fits.
fn fit_result(result: &SubtaskResult) -> Result<String, StoreError> {
    let bounded = result.clone().bounded();
    let json = to_json(&bounded)?;
    if json.len() <= MAX_RESULT_BYTES {
        return Ok(json);
    }
    let SubtaskResult::Succeeded { text, mut tool_calls } = bounded else {
        return Ok(json);
    };
    for call in &mut tool_calls {
        call.error = call.error.take().map(|e| truncate_chars(&e, 200));
    }
    loop {
        let candidate = SubtaskResult::Succeeded { text: text.clone(), tool_calls: tool_calls.clone() };
        let json = to_json(&candidate)?;
        if json.len() <= MAX_RESULT_BYTES || tool_calls.is_empty() {
            tracing::warn!(
                bytes = json.len(),
                kept_tool_calls = tool_calls.len(),
                "subtask result shrunk to fit the item size budget"
            );
            return Ok(json);
        }
        let keep = tool_calls.len() / 2;
        tool_calls.truncate(keep);
    }
}

/// The checkpoint cut to at most [`MAX_CHECKPOINT_BYTES`] at a character boundary.
/// A cut checkpoint is no longer valid JSON: the worker bounds its own checkpoint
/// and treats an unparseable one as absent.
fn fit_checkpoint(checkpoint: &str) -> String {
    if checkpoint.len() <= MAX_CHECKPOINT_BYTES {
        return checkpoint.to_owned();
    }
    let mut end = MAX_CHECKPOINT_BYTES;
    while !checkpoint.is_char_boundary(end) {
        end -= 1;
    }
    tracing::warn!(bytes = checkpoint.len(), kept = end, "checkpoint truncated to the item size budget");
    checkpoint[..end].to_owned()
}

// ------------------------------------------------------------------ update expressions

/// Builds an `UpdateExpression` whose attribute names are all aliased
/// (`status`, `query`, `ttl`… are DynamoDB reserved words).
#[derive(Default)]
struct Update {
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Update {
    fn name(&mut self, attr: &str) -> String {
        let alias = format!("#{attr}");
        self.names.insert(alias.clone(), attr.to_owned());
        alias
    }

    fn value(&mut self, placeholder: &str, v: AttributeValue) -> String {
        let p = format!(":{placeholder}");
        self.values.insert(p.clone(), v);
        p
    }

    fn set(&mut self, attr: &str, v: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(attr, v);
        self.set.push(format!("{name} = {value}"));
        self
    }

    fn set_expr(&mut self, expr: String) -> &mut Self {
        self.set.push(expr);
        self
    }

    fn add(&mut self, attr: &str, v: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(attr, v);
        self.add.push(format!("{name} {value}"));
        self
    }

    fn remove(&mut self, attr: &str) -> &mut Self {
        let name = self.name(attr);
        self.remove.push(name);
        self
    }

    fn add_usage(&mut self, usage: &Usage) -> &mut Self {
        for (attr, v) in usage_attributes(usage) {
            self.add(attr, v);
        }
        self
    }

    /// `status IN (...)` condition on the aliased `status` attribute.
    fn status_in(&mut self, statuses: &[&str]) -> String {
        let name = self.name("status");
        let values: Vec<String> =
            statuses.iter().enumerate().map(|(i, st)| self.value(&format!("from{i}"), s(*st))).collect();
        format!("attribute_exists(#PK) AND {name} IN ({})", values.join(", "))
    }

    fn expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        parts.join(" ")
    }
}

// ------------------------------------------------------------------ the store

/// [`ConversationStore`] on one DynamoDB table (see the module docs for the layout).
///
/// Every mutation is a single conditional `UpdateItem` / `PutItem` or one
/// `TransactWriteItems`; throttling and contention are retried in place with
/// jittered exponential backoff ([`RetryPolicy`]) and then reported as
/// [`StoreError::Transient`]; validation errors and a missing table are
/// [`StoreError::Permanent`]. Reads are strongly consistent.
#[derive(Clone, Debug)]
pub struct DynamoConversationStore {
    client: Client,
    table: String,
    retry: RetryPolicy,
}

impl DynamoConversationStore {
    /// A store on `table`. The client's own SDK retries are switched off: this
    /// adapter owns the retry policy, so attempts do not multiply.
    pub fn new(client: Client, table: String) -> Self {
        let config =
            client.config().to_builder().retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()).build();
        Self { client: Client::from_conf(config), table, retry: RetryPolicy::default() }
    }

    /// Replaces the retry policy (tests use short ones).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    async fn get_item(&self, pk: String, sk: String) -> Result<Option<Item>, StoreError> {
        let req = self.client.get_item().table_name(&self.table).set_key(Some(key(pk, sk))).consistent_read(true);
        let out = self
            .retry
            .run("dynamodb", "GetItem", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("GetItem", e))?;
        Ok(out.item)
    }

    /// Runs one conditional `UpdateItem`. `Ok(None)` when the condition failed.
    async fn update(
        &self,
        op: &'static str,
        pk: String,
        sk: String,
        mut update: Update,
        condition: String,
        return_values: ReturnValue,
    ) -> Result<Option<Item>, StoreError> {
        update.name("PK");
        let req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .update_expression(update.expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(update.names))
            .set_expression_attribute_values(Some(update.values))
            .return_values(return_values);
        match self.retry.run("dynamodb", op, sdk_error_is_transient, || req.clone().send()).await {
            Ok(out) => Ok(Some(out.attributes.unwrap_or_default())),
            Err(e) if is_conditional_failure(&e) => Ok(None),
            Err(e) => Err(to_store_error(op, e)),
        }
    }

    /// Writes `items` with `BatchWriteItem`, 25 per call, retrying unprocessed items.
    async fn batch_put(&self, items: Vec<Item>) -> Result<(), StoreError> {
        for chunk in items.chunks(BATCH_WRITE_LIMIT) {
            let mut pending: Vec<WriteRequest> = Vec::with_capacity(chunk.len());
            for item in chunk {
                let put = PutRequest::builder()
                    .set_item(Some(item.clone()))
                    .build()
                    .map_err(|e| StoreError::Permanent(format!("BatchWriteItem request: {e}")))?;
                pending.push(WriteRequest::builder().put_request(put).build());
            }
            let mut round = 0u32;
            while !pending.is_empty() {
                let req = self.client.batch_write_item().request_items(self.table.clone(), pending.clone());
                let out = self
                    .retry
                    .run("dynamodb", "BatchWriteItem", sdk_error_is_transient, || req.clone().send())
                    .await
                    .map_err(|e| to_store_error("BatchWriteItem", e))?;
                pending = out.unprocessed_items.and_then(|mut m| m.remove(&self.table)).unwrap_or_default();
                if pending.is_empty() {
                    break;
                }
                round += 1;
                if round >= self.retry.max_attempts.max(1) {
                    return Err(StoreError::Transient(format!(
                        "BatchWriteItem left {} items unprocessed after {round} rounds (throttled)",
                        pending.len()
                    )));
                }
                let delay = self.retry.backoff(round);
                tracing::warn!(
                    unprocessed = pending.len(),
                    round,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "BatchWriteItem unprocessed items, retrying"
                );
                tokio::time::sleep(delay).await;
            }
        }
        Ok(())
    }

    /// After a failed condition on a subtask: the stored record, read consistently.
    async fn subtask_after_conflict(
        &self,
        id: &ConversationId,
        subtask_id: &str,
    ) -> Result<Option<SubtaskRecord>, StoreError> {
        self.get_subtask(id, subtask_id).await
    }
}

fn put(item: Item, table: &str) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(PK)")
        .build()
        .map_err(|e| StoreError::Permanent(format!("TransactWriteItems request: {e}")))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

#[async_trait]
impl ConversationStore for DynamoConversationStore {
    async fn create_conversation(&self, conversation: &Conversation) -> Result<CreateOutcome, StoreError> {
        let meta = conversation_item(conversation);
        let Some(idem_key) = &conversation.idempotency_key else {
            let req = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(meta))
                .condition_expression("attribute_not_exists(PK)");
            return match self.retry.run("dynamodb", "PutItem", sdk_error_is_transient, || req.clone().send()).await {
                Ok(_) => Ok(CreateOutcome::Created),
                Err(e) if is_conditional_failure(&e) => {
                    Err(StoreError::Permanent(format!("conversation {} already exists", conversation.id)))
                }
                Err(e) => Err(to_store_error("PutItem", e)),
            };
        };
        let idem_pk = idem_pk(&conversation.customer_id, idem_key);
        let mut idem = key(idem_pk.clone(), "IDEM".to_owned());
        idem.insert("conversation_id".into(), s(conversation.id.as_str()));
        idem.insert("customer_id".into(), s(&conversation.customer_id));
        idem.insert("ttl".into(), n(conversation.ttl));
        let req = self
            .client
            .transact_write_items()
            .transact_items(put(meta, &self.table)?)
            .transact_items(put(idem, &self.table)?);
        match self.retry.run("dynamodb", "TransactWriteItems", transaction_is_transient, || req.clone().send()).await {
            Ok(_) => Ok(CreateOutcome::Created),
            Err(e) => {
                let codes = cancellation_codes(&e);
                if codes.get(1).is_some_and(|c| c == "ConditionalCheckFailed") {
                    let existing = self.get_item(idem_pk, "IDEM".to_owned()).await?;
                    let id = existing.as_ref().and_then(|i| opt_s(i, "conversation_id")).ok_or_else(|| {
                        StoreError::Transient("idempotency key claimed but its item is gone (expired?); retry".into())
                    })?;
                    tracing::info!(conversation_id = %id, customer_id = %conversation.customer_id, "idempotency key already used");
                    return Ok(CreateOutcome::Existing(ConversationId::from_trusted(id)));
                }
                if codes.first().is_some_and(|c| c == "ConditionalCheckFailed") {
                    return Err(StoreError::Permanent(format!("conversation {} already exists", conversation.id)));
                }
                Err(to_store_error("TransactWriteItems", e))
            }
        }
    }

    async fn get_conversation(&self, id: &ConversationId) -> Result<Option<Conversation>, StoreError> {
        self.get_item(conv_pk(id), META.to_owned()).await?.map(|item| conversation_from_item(&item)).transpose()
    }

    async fn start_run(
        &self,
        id: &ConversationId,
        subtasks: &[SubtaskRecord],
        notes: &[String],
        usage: &Usage,
    ) -> Result<bool, StoreError> {
        // A plan can hold 100 subtasks and a transaction only 100 items, so the
        // subtasks are batch-written first and the conversation flipped last. The
        // status check first keeps "not PLANNING writes nothing" for every caller
        // but a concurrent second start_run of the same conversation.
        let Some(current) = self.get_item(conv_pk(id), META.to_owned()).await? else {
            return Ok(false);
        };
        if opt_s(&current, "status").as_deref() != Some(ConversationStatus::Planning.as_str()) {
            return Ok(false);
        }
        let items = subtasks.iter().map(subtask_item).collect::<Result<Vec<_>, _>>()?;
        self.batch_put(items).await?;
        let count = subtasks.len() as u32;
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Running.as_str())).set("total", n(count)).set("remaining", n(count));
        if notes.is_empty() {
            u.remove("notes");
        } else {
            u.set("notes", AttributeValue::L(notes.iter().map(s).collect()));
        }
        u.add_usage(usage);
        let condition = u.status_in(&[ConversationStatus::Planning.as_str()]);
        let flipped = self
            .update("UpdateItem(start_run)", conv_pk(id), META.to_owned(), u, condition, ReturnValue::None)
            .await?
            .is_some();
        tracing::info!(conversation_id = %id, subtasks = count, flipped, "run started");
        Ok(flipped)
    }

    async fn transition_conversation(
        &self,
        id: &ConversationId,
        from: ConversationStatus,
        to: ConversationStatus,
    ) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(to.as_str()));
        let condition = u.status_in(&[from.as_str()]);
        Ok(self
            .update(
                "UpdateItem(transition_conversation)",
                conv_pk(id),
                META.to_owned(),
                u,
                condition,
                ReturnValue::None,
            )
            .await?
            .is_some())
    }

    async fn finish_conversation(&self, id: &ConversationId, reply: &str, usage: &Usage) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Done.as_str())).set("reply", s(reply)).add_usage(usage);
        let condition = u.status_in(&[ConversationStatus::Aggregating.as_str()]);
        Ok(self
            .update("UpdateItem(finish_conversation)", conv_pk(id), META.to_owned(), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn fail_conversation(&self, id: &ConversationId, reason: &str) -> Result<bool, StoreError> {
        let mut u = Update::default();
        u.set("status", s(ConversationStatus::Failed.as_str()))
            .set("error", s(truncate_chars(reason, MAX_ERROR_CHARS)));
        let condition = u.status_in(&[
            ConversationStatus::Planning.as_str(),
            ConversationStatus::Running.as_str(),
            ConversationStatus::Aggregating.as_str(),
        ]);
        Ok(self
            .update("UpdateItem(fail_conversation)", conv_pk(id), META.to_owned(), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn get_subtask(&self, id: &ConversationId, subtask_id: &str) -> Result<Option<SubtaskRecord>, StoreError> {
        self.get_item(conv_pk(id), task_sk(subtask_id)).await?.map(|item| subtask_from_item(&item)).transpose()
    }

    async fn list_subtasks(&self, id: &ConversationId) -> Result<Vec<SubtaskRecord>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        // A conversation holds at most 100 subtasks; the page bound only guards against a runaway loop.
        for _page in 0..1_000 {
            let req = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("PK = :pk AND begins_with(SK, :task)")
                .expression_attribute_values(":pk", s(conv_pk(id)))
                .expression_attribute_values(":task", s(TASK_PREFIX))
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            let page = self
                .retry
                .run("dynamodb", "Query", sdk_error_is_transient, || req.clone().send())
                .await
                .map_err(|e| to_store_error("Query", e))?;
            for item in page.items() {
                out.push(subtask_from_item(item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
        Err(StoreError::Permanent(format!("Query of conversation {id} did not end after 1000 pages")))
    }

    async fn transition_subtask(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        from: &[SubtaskStatus],
        to: SubtaskStatus,
    ) -> Result<bool, StoreError> {
        if from.is_empty() {
            return Ok(false);
        }
        let mut u = Update::default();
        u.set("status", s(to.as_str()));
        let from: Vec<&str> = from.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        Ok(self
            .update("UpdateItem(transition_subtask)", conv_pk(id), task_sk(subtask_id), u, condition, ReturnValue::None)
            .await?
            .is_some())
    }

    async fn begin_attempt(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        now_ms: i64,
    ) -> Result<AttemptStart, StoreError> {
        let mut u = Update::default();
        u.set("status", s(SubtaskStatus::Running.as_str()));
        let attempts = u.name("attempts");
        let zero = u.value("zero", n(0));
        let one = u.value("one", n(1));
        u.set_expr(format!("{attempts} = if_not_exists({attempts}, {zero}) + {one}"));
        let started = u.name("started_at_ms");
        let now = u.value("now", n(now_ms));
        u.set_expr(format!("{started} = if_not_exists({started}, {now})"));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        match self
            .update("UpdateItem(begin_attempt)", conv_pk(id), task_sk(subtask_id), u, condition, ReturnValue::AllNew)
            .await?
        {
            Some(item) => Ok(AttemptStart::Started(subtask_from_item(&item)?)),
            None => match self.subtask_after_conflict(id, subtask_id).await? {
                None => Ok(AttemptStart::Missing),
                Some(rec) if rec.status.is_terminal() => Ok(AttemptStart::AlreadyFinished(rec)),
                Some(rec) => Err(StoreError::Transient(format!(
                    "begin_attempt condition failed but subtask {subtask_id} is {}; retry",
                    rec.status.as_str()
                ))),
            },
        }
    }

    async fn save_checkpoint(&self, id: &ConversationId, subtask_id: &str, checkpoint: &str) -> Result<(), StoreError> {
        let mut u = Update::default();
        u.set("checkpoint", s(fit_checkpoint(checkpoint)));
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        // A terminal or missing subtask keeps no checkpoint: nothing to do, as in the trait.
        self.update("UpdateItem(save_checkpoint)", conv_pk(id), task_sk(subtask_id), u, condition, ReturnValue::None)
            .await?;
        Ok(())
    }

    async fn record_result(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        result: &SubtaskResult,
        usage: &Usage,
        tools_used: &[String],
        now_ms: i64,
    ) -> Result<RecordOutcome, StoreError> {
        let mut u = Update::default();
        u.set("status", s(result.status().as_str()))
            .set("result", s(fit_result(result)?))
            .set("finished_at_ms", n(now_ms))
            .remove("checkpoint");
        if usage.is_empty() {
            u.remove("usage");
        } else {
            u.set("usage", s(to_json(usage)?));
        }
        if tools_used.is_empty() {
            u.remove("tools_used");
        } else {
            u.set("tools_used", AttributeValue::L(tools_used.iter().map(s).collect()));
        }
        let from: Vec<&str> = NON_TERMINAL.iter().map(|st| st.as_str()).collect();
        let condition = u.status_in(&from);
        match self
            .update("UpdateItem(record_result)", conv_pk(id), task_sk(subtask_id), u, condition, ReturnValue::None)
            .await?
        {
            Some(_) => Ok(RecordOutcome::Recorded),
            None => match self.subtask_after_conflict(id, subtask_id).await? {
                None => Ok(RecordOutcome::Missing),
                Some(rec) if rec.status.is_terminal() => Ok(RecordOutcome::AlreadyFinished(rec)),
                Some(rec) => Err(StoreError::Transient(format!(
                    "record_result condition failed but subtask {subtask_id} is {}; retry",
                    rec.status.as_str()
                ))),
            },
        }
    }

    async fn count_finished(
        &self,
        id: &ConversationId,
        subtask_id: &str,
        usage: &Usage,
    ) -> Result<CountOutcome, StoreError> {
        let mut u = Update::default();
        u.add("finished", AttributeValue::Ss(vec![subtask_id.to_owned()]));
        let remaining = u.name("remaining");
        let one = u.value("one", n(1));
        u.set_expr(format!("{remaining} = {remaining} - {one}"));
        u.add_usage(usage);
        let finished = u.name("finished");
        let sid = u.value("sid", s(subtask_id));
        let zero = u.value("zero", n(0));
        let condition = format!("attribute_exists(#PK) AND NOT contains({finished}, {sid}) AND {remaining} > {zero}");
        match self
            .update("UpdateItem(count_finished)", conv_pk(id), META.to_owned(), u, condition, ReturnValue::UpdatedNew)
            .await?
        {
            Some(item) => {
                let remaining: u32 = get_n(&item, "remaining")?;
                tracing::info!(conversation_id = %id, subtask_id, remaining, "subtask counted");
                Ok(CountOutcome::Counted { remaining })
            }
            None => match self.get_item(conv_pk(id), META.to_owned()).await? {
                None => Ok(CountOutcome::Missing),
                Some(_) => {
                    tracing::info!(conversation_id = %id, subtask_id, "subtask already counted");
                    Ok(CountOutcome::AlreadyCounted)
                }
            },
        }
    }
}

/// Creates the single table as `template.yaml` declares it (for the emulator,
/// tests and `swarm-local`): `PK`/`SK` strings, on-demand billing, stream
/// `NEW_IMAGE`, TTL on `ttl`. Waits (at most 60 s) until the table is `ACTIVE`.
/// An existing table of that name is reused.
///
/// Errors: [`StoreError::Permanent`] for a rejected request or a table that
/// never becomes active; [`StoreError::Transient`] for throttling.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))
    };
    let key_el = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))
    };
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewImage)
        .build()
        .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))?;
    let req = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("PK")?)
        .attribute_definitions(attr("SK")?)
        .key_schema(key_el("PK", KeyType::Hash)?)
        .key_schema(key_el("SK", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream);
    let retry = RetryPolicy::default();
    match retry.run("dynamodb", "CreateTable", sdk_error_is_transient, || req.clone().send()).await {
        Ok(_) => {}
        Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("ResourceInUseException") => {}
        Err(e) => return Err(to_store_error("CreateTable", e)),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let req = client.describe_table().table_name(table);
        let out = retry
            .run("dynamodb", "DescribeTable", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("DescribeTable", e))?;
        if out.table.and_then(|t| t.table_status) == Some(TableStatus::Active) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Permanent(format!("table {table} not ACTIVE after 60 s")));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ttl = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name("ttl")
        .build()
        .map_err(|e| StoreError::Permanent(format!("UpdateTimeToLive request: {e}")))?;
    let req = client.update_time_to_live().table_name(table).time_to_live_specification(ttl);
    match retry.run("dynamodb", "UpdateTimeToLive", sdk_error_is_transient, || req.clone().send()).await {
        Ok(_) => Ok(()),
        // Re-running on an existing table: "TimeToLive is already enabled".
        Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("ValidationException") => Ok(()),
        Err(e) => Err(to_store_error("UpdateTimeToLive", e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_of_different_customers_never_collide() {
        assert_ne!(idem_pk("a#b", "c"), idem_pk("a", "b#c"));
        assert_eq!(idem_pk("C104", "k1"), "IDEM#C104#k1");
    }

    #[test]
    fn update_expression_aliases_every_name() {
        let mut u = Update::default();
        u.set("status", s("RUNNING")).add("usage_prompt_tokens", n(3)).remove("checkpoint");
        assert_eq!(
            u.expression(),
            "SET #status = :status ADD #usage_prompt_tokens :usage_prompt_tokens REMOVE #checkpoint"
        );
        assert_eq!(u.names.get("#status").map(String::as_str), Some("status"));
    }

    #[test]
    fn unknown_usage_writes_no_attribute() {
        let attrs = usage_attributes(&Usage { prompt_tokens: Some(7), cost_usd: Some(f64::NAN), ..Default::default() });
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, "usage_prompt_tokens");
    }

    #[test]
    fn conversation_survives_the_item_round_trip() {
        let mut c = Conversation::new("C1", "where is A1029?", 1_700_000_000_000, 120);
        c.finished.insert("w01".into());
        c.usage = Usage { prompt_tokens: Some(5), cost_usd: Some(0.25), ..Default::default() };
        c.notes = vec!["dropped 2".into()];
        c.idempotency_key = Some("k".into());
        let back = conversation_from_item(&conversation_item(&c)).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn oversized_checkpoint_is_cut_on_a_character_boundary() {
        let big = "订".repeat(MAX_CHECKPOINT_BYTES);
        let cut = fit_checkpoint(&big);
        assert!(cut.len() <= MAX_CHECKPOINT_BYTES);
        assert!(cut.len() > MAX_CHECKPOINT_BYTES - 4);
    }

    #[test]
    fn result_with_thousands_of_long_tool_errors_fits_the_budget() {
        use crate::domain::ToolCallRecord;
        let calls = (0..5_000)
            .map(|i| ToolCallRecord { name: format!("shop__t{i}"), ok: false, error: Some("x".repeat(1_000)) })
            .collect();
        let r = SubtaskResult::Succeeded { text: "y".repeat(100_000), tool_calls: calls };
        let json = fit_result(&r).unwrap();
        assert!(json.len() <= MAX_RESULT_BYTES, "{} bytes", json.len());
        let back: SubtaskResult = serde_json::from_str(&json).unwrap();
        assert!(matches!(back, SubtaskResult::Succeeded { ref tool_calls, .. } if !tool_calls.is_empty()));
    }

    /// DynamoDB JSON (as in stream events) → SDK attribute values.
    fn from_dynamo_json(v: &serde_json::Value) -> AttributeValue {
        let (kind, inner) = v.as_object().and_then(|o| o.iter().next()).unwrap();
        match kind.as_str() {
            "S" => AttributeValue::S(inner.as_str().unwrap().to_owned()),
            "N" => AttributeValue::N(inner.as_str().unwrap().to_owned()),
            "SS" => {
                AttributeValue::Ss(inner.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            }
            "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(from_dynamo_json).collect()),
            "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
            other => panic!("unsupported DynamoDB JSON type {other}"),
        }
    }

    #[test]
    fn stream_fixture_is_a_conversation_item_the_aggregator_filter_matches() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../events/dynamodb-stream-remaining-zero.json");
        let event: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let record = &event["Records"][0];
        assert_eq!(record["eventName"], "MODIFY");
        let ddb = &record["dynamodb"];
        // The template's FilterCriteria, field by field.
        assert_eq!(ddb["Keys"]["SK"]["S"], "META");
        assert_eq!(ddb["NewImage"]["remaining"]["N"], "0");
        assert_eq!(ddb["NewImage"]["status"]["S"], "RUNNING");
        let item: Item =
            ddb["NewImage"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), from_dynamo_json(v))).collect();
        let conv = conversation_from_item(&item).unwrap();
        assert_eq!(conv.status, ConversationStatus::Running);
        assert_eq!((conv.total, conv.remaining), (2, 0));
        assert_eq!(conv.finished.len(), 2);
        assert_eq!(conv.usage.cached_tokens, None);
        assert_eq!(ddb["Keys"]["PK"]["S"], format!("CONV#{}", conv.id));
        // The item this adapter writes for that conversation has exactly the fixture's attributes.
        assert_eq!(conversation_item(&conv), item);
    }

    #[test]
    fn full_jitter_backoff_stays_under_the_cap() {
        let p = RetryPolicy::default();
        for attempt in 0..40 {
            assert!(p.backoff(attempt) <= p.max_delay);
        }
    }
}
