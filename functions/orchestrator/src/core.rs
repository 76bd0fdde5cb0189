//! The orchestrator's logic: validate the request, write the conversation, plan, persist and enqueue the subtasks; a retry with the same `Idempotency-Key` takes over a conversation whose creator died.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::access::{AccessStore, CustomerLimits, RateWindow, SlotOutcome, canonical_customer_id};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, HandoffReason, Lease, MAX_MESSAGE_CHARS, Plan,
    SubtaskRecord, TaskMessage, Usage, request_hash, sweep_shard,
};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::language::Language;
use swarm_core::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use swarm_core::obs;
use swarm_core::plan::{fallback_plan, parse_plan, plan_requests_handoff, validate_plan_within};
use swarm_core::ports::{
    ChatMessage, ChatModel, ChatRequest, ConversationPosition, ConversationStore, CreateOutcome, LeaseOutcome,
    LeasePhase, Purpose, StoreError, ToolContext, ToolGateway,
};
use swarm_core::prompts::{plan_messages_in, plan_retry_message};
use swarm_core::roles::{PLANNER_ROLE, RoleTable, TaskQueues};
use swarm_core::time::{self, now_ms};
use swarm_core::timings::{Timings, seconds_rounded_up};
use swarm_core::turns::RETENTION_AFTER_EXPIRY_SECS;
use swarm_core::view::{ConversationSummary, ConversationView};

use crate::budget::Budget;
use tracing::Instrument;

mod sending;
mod told;
pub use told::OperatorAnswered;
mod turns;

/// Orchestrator settings, read once at cold start.
#[derive(Clone, Debug)]
pub struct OrchestratorSettings {
    /// Longest message accepted, in characters (default 8,000).
    pub max_message_chars: usize,
    /// Seconds from creation to the deadline (default 120).
    pub deadline_secs: u64,
    /// The whole `POST /conversations`, from the call to its answer; every store write and queue
    /// send is cut at it (below the function's timeout, itself below API Gateway's 30 s).
    pub request_budget: Duration,
    /// Whole planning budget, model retries included; planning also ends `post_plan` before the
    /// request budget does.
    pub plan_timeout: Duration,
    /// Kept back from the request budget for start_run, the sends and the `queued` marker.
    pub post_plan: Duration,
    /// The per-call deadline of a store write or queue send after planning (the SDK's retries inside it).
    pub aws_call: Duration,
    /// The planning lease: how long the planner of a `PLANNING` conversation holds it (longer than
    /// the orchestrator's timeout, so a live planner is never taken over).
    pub planning_lease: Duration,
    /// Shards of the sweep index; a new conversation is written into one of them.
    pub sweep_shards: u32,
    /// A conversation takes follow-ups for this long after its latest turn started (then 410);
    /// the timing table's `conversation.idle_expiry_secs`.
    pub idle_expiry: Duration,
}

impl Default for OrchestratorSettings {
    /// The standard timing table's values ([`OrchestratorSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl OrchestratorSettings {
    /// The deadline (`conversation.deadline_secs`, rounded up to whole seconds), the request,
    /// planning and post-plan budgets, the per-call deadline and the planning lease
    /// (`orchestrator.*`) and the sweep's shards (`sweep.shards`) of `timings`; the default message limit.
    pub fn from_timings(timings: &Timings) -> Self {
        let o = &timings.orchestrator;
        Self {
            max_message_chars: MAX_MESSAGE_CHARS,
            deadline_secs: seconds_rounded_up(timings.conversation.deadline),
            request_budget: o.request_budget,
            plan_timeout: o.plan_budget,
            post_plan: o.post_plan,
            aws_call: o.aws_call,
            planning_lease: timings.orchestrator.lease,
            sweep_shards: timings.sweep.shards.max(1),
            idle_expiry: timings.conversation.idle_expiry,
        }
    }
}

/// A validated `POST /conversations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRequest {
    pub message: String,
    pub customer_id: String,
    pub idempotency_key: Option<String>,
}

impl From<crate::cursor::BadCursor> for ApiError {
    fn from(e: crate::cursor::BadCursor) -> Self {
        ApiError::BadRequest { code: "bad_cursor", message: e.to_string() }
    }
}

/// Errors as the API shows them: `{"error": {"code", "message"}}` with an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or out of limits; nothing was written.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// 404: no such conversation for this customer (or no such approval).
    #[error("not found")]
    NotFound,
    /// 409 with `Retry-After`: the conversation's latest turn is still being answered; a follow-up
    /// starts a new turn only once it is over (about when its deadline passes at the latest).
    #[error(
        "conversation {conversation} is still answering turn {turn} ({status}); send the next message once it is answered, in {retry_after_secs} s at most"
    )]
    TurnInProgress { conversation: ConversationId, turn: u32, status: &'static str, retry_after_secs: u64 },
    /// 410: the conversation expired (no message for its idle time); start a new one.
    #[error("conversation {0} expired: it takes no more messages; start a new conversation")]
    Expired(ConversationId),
    /// 409: the request contradicts what was recorded before (an approval decided the other way, or expired).
    #[error("{0}")]
    Conflict(String),
    /// 409: an operator's answer to a conversation whose latest turn is not a hand-off to a person.
    #[error("conversation {0} is not handed to a person: its latest turn is not HANDOFF")]
    NotHandedOff(ConversationId),
    /// 409 with `Retry-After`: a request with this `Idempotency-Key` is still being planned (its
    /// planner holds a live planning lease); retry after the lease ends — then this key's request
    /// either answers with the planned conversation or takes over a planner that died.
    #[error(
        "a request with this Idempotency-Key is still being planned (conversation {conversation}); retry in {retry_after_secs} s"
    )]
    InProgress { conversation: ConversationId, retry_after_secs: u64 },
    /// 422: the `Idempotency-Key` was used before with another request (another message); nothing was written.
    #[error("this Idempotency-Key was already used with another request (conversation {0}); use a new key")]
    KeyReused(ConversationId),
    /// 429: the customer started their conversations-per-minute already; nothing was written.
    #[error("too many conversations: at most {limit} a minute; try again in {retry_after_secs} s")]
    RateLimited { limit: u32, retry_after_secs: u64 },
    /// 503: storage or queue unavailable before any conversation was recorded: nothing runs; the
    /// client may retry (with the same Idempotency-Key).
    #[error("service temporarily unavailable: {0}")]
    Unavailable(String),
    /// 503 once the conversation was recorded but not all of it sent: `started` says whether it
    /// runs without the client; a retry with the same Idempotency-Key resumes it either way.
    #[error("service temporarily unavailable: {reason}; conversation {conversation} {}", started.meaning())]
    NotSent { conversation: ConversationId, started: Started, reason: String },
}

/// Whether the conversation of a 503 runs without the client (the body's `conversation.started`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Started {
    /// No plan was stored: nothing of it runs unless a retry with the same Idempotency-Key resumes
    /// it; otherwise it ends `FAILED` at its deadline.
    No,
    /// Its plan is stored: the deadline path's first run (when the planning lease ends) sends what
    /// was not sent, and it is answered. That run is the side effects' worker's (its message is on
    /// their queue), which may send to every queue: refund and ticket subtasks included.
    Yes,
    /// The plan's write was cut or failed and may have been applied: one of the two.
    Unknown,
}

impl Started {
    /// What this means for the client, in words (the 503's message).
    pub fn meaning(self) -> &'static str {
        match self {
            Self::No => {
                "was not started: nothing of it runs unless a retry with the same Idempotency-Key resumes it; otherwise it ends FAILED at its deadline"
            }
            Self::Yes => {
                "is planned and stored: it runs and is answered without a retry (what was not sent is sent when its planning lease ends); a retry with the same Idempotency-Key resumes it at once"
            }
            Self::Unknown => {
                "may have been started (its plan's write was cut): it either runs and is answered, or ends FAILED at its deadline; a retry with the same Idempotency-Key resumes it either way"
            }
        }
    }
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            Self::BadRequest { .. } => 400,
            Self::NotFound => 404,
            Self::Conflict(_) | Self::NotHandedOff(_) | Self::InProgress { .. } | Self::TurnInProgress { .. } => 409,
            Self::Expired(_) => 410,
            Self::KeyReused(_) => 422,
            Self::RateLimited { .. } => 429,
            Self::Unavailable(_) | Self::NotSent { .. } => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. } => code,
            Self::NotFound => "not_found",
            Self::Conflict(_) => "approval_conflict",
            Self::NotHandedOff(_) => "not_handed_off",
            Self::InProgress { .. } => "request_in_progress",
            Self::TurnInProgress { .. } => "turn_in_progress",
            Self::Expired(_) => "conversation_expired",
            Self::KeyReused(_) => "idempotency_key_reused",
            Self::RateLimited { .. } => "rate_limited",
            Self::Unavailable(_) | Self::NotSent { .. } => "unavailable",
        }
    }

    /// The conversation a 503 recorded and whether it runs without the client.
    pub fn recorded(&self) -> Option<(&ConversationId, Started)> {
        match self {
            Self::NotSent { conversation, started, .. } => Some((conversation, *started)),
            _ => None,
        }
    }

    /// Seconds a client should wait before retrying (`Retry-After` of a 429 or of a 409 in progress).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after_secs, .. }
            | Self::InProgress { retry_after_secs, .. }
            | Self::TurnInProgress { retry_after_secs, .. } => Some(*retry_after_secs),
            _ => None,
        }
    }

    fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest { code, message: message.into() }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict(message.into())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

/// What `POST /conversations` and `POST /conversations/{id}/messages` answer (202).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    pub conversation_id: ConversationId,
    /// `false` when an `Idempotency-Key` returned an earlier conversation (or turn).
    pub new: bool,
    /// The turn the message is answered in (0: the first message).
    pub turn: u32,
}

/// The 503 of a request whose conversation `id` was recorded: `started` says whether it runs.
fn not_sent(id: &ConversationId, started: Started, e: impl std::fmt::Display) -> ApiError {
    ApiError::NotSent { conversation: id.clone(), started, reason: e.to_string() }
}

/// A planner's lease holder name (one per create or takeover).
fn planner_id() -> String {
    format!("orchestrator:{}", uuid::Uuid::now_v7())
}

/// Checks a create request against the limits; the customer id comes out canonical. Pure: nothing is written.
pub fn validate_request(
    message: &str,
    customer_id: &str,
    idempotency_key: Option<&str>,
    max_chars: usize,
) -> Result<CreateRequest, ApiError> {
    let message = message.trim();
    if message.is_empty() {
        return Err(ApiError::bad("empty_message", "message must not be empty"));
    }
    let chars = message.chars().count();
    if chars > max_chars {
        return Err(ApiError::bad(
            "message_too_long",
            format!("message has {chars} characters; the limit is {max_chars}"),
        ));
    }
    let customer_id =
        canonical_customer_id(customer_id).map_err(|e| ApiError::bad("bad_customer_id", e.to_string()))?;
    let idempotency_key = match idempotency_key.map(str::trim) {
        None | Some("") => None,
        Some(k) if k.len() > 128 || !k.chars().all(|c| c.is_ascii_graphic()) => {
            return Err(ApiError::bad(
                "bad_idempotency_key",
                "Idempotency-Key must be 1-128 printable ASCII characters",
            ));
        }
        Some(k) => Some(k.to_owned()),
    };
    Ok(CreateRequest { message: message.to_owned(), customer_id, idempotency_key })
}

/// The orchestrator: everything behind `POST` and `GET /conversations`.
pub struct Orchestrator {
    store: Arc<dyn ConversationStore>,
    queues: TaskQueues,
    model: Arc<dyn ChatModel>,
    tools: Arc<dyn ToolGateway>,
    roles: RoleTable,
    settings: OrchestratorSettings,
    /// Per-customer limits and where their counters live; `None`: no conversation rate limit.
    limits: Option<(Arc<dyn AccessStore>, CustomerLimits)>,
}

impl Orchestrator {
    pub fn new(
        store: Arc<dyn ConversationStore>,
        queues: TaskQueues,
        model: Arc<dyn ChatModel>,
        tools: Arc<dyn ToolGateway>,
        roles: RoleTable,
        settings: OrchestratorSettings,
    ) -> Self {
        Self { store, queues, model, tools, roles, settings, limits: None }
    }

    /// Holds every customer to `limits`, counting conversations in `counters` (shared by every
    /// instance, so the limit holds across Lambdas and processes).
    pub fn with_limits(mut self, counters: Arc<dyn AccessStore>, limits: CustomerLimits) -> Self {
        self.limits = Some((counters, limits));
        self
    }

    /// The per-customer limits in force (the defaults' fan-out when none were set).
    pub fn limits(&self) -> CustomerLimits {
        self.limits
            .as_ref()
            .map_or(CustomerLimits { conversations_per_minute: u32::MAX, ..CustomerLimits::DEFAULT }, |(_, l)| *l)
    }

    /// Counts one conversation of `customer_id` in the current minute.
    /// Errors: [`ApiError::RateLimited`] past the limit (nothing written), 503 when the counter cannot be written.
    async fn admit(&self, customer_id: &str, budget: &Budget) -> Result<(), ApiError> {
        let Some((counters, limits)) = &self.limits else { return Ok(()) };
        let now = now_ms();
        let window = RateWindow::containing(now);
        let slot = counters.take_conversation_slot(customer_id, window, limits.conversations_per_minute);
        let taken = budget.before_plan("the rate counter", slot).await;
        match taken.map_err(|e| ApiError::Unavailable(e.to_string()))? {
            SlotOutcome::Taken { .. } => Ok(()),
            SlotOutcome::Exhausted => {
                tracing::warn!(customer_id, limit = limits.conversations_per_minute, "conversation rate limit reached");
                Err(ApiError::RateLimited {
                    limit: limits.conversations_per_minute,
                    retry_after_secs: window.retry_after_secs(now),
                })
            }
        }
    }

    pub fn settings(&self) -> &OrchestratorSettings {
        &self.settings
    }

    /// `POST /conversations`: count the customer's conversation against their per-minute limit,
    /// write the conversation (`PLANNING`, holding the planning lease, in its sweep shard) first,
    /// arm the deadline, plan within the time limit, persist the subtasks and flip to `RUNNING`,
    /// enqueue the subtasks with no pending dependencies.
    ///
    /// Whatever the point of death after the first write, the conversation moves on: the sweep
    /// finds it past its deadline (the shard is written with it), the deadline path's first run
    /// (when the planning lease ends) sends a stored plan's subtasks nobody marked sent, and a
    /// retry with the same `Idempotency-Key` resumes it ([`Self::resume`]). The same key with
    /// another request is refused ([`ApiError::KeyReused`]).
    ///
    /// Answers within the request budget ([`Budget`]): 202 once the conversation is stored and its
    /// subtasks sent; a 503 after its write says whether it runs ([`ApiError::NotSent`]).
    pub async fn create(&self, request: CreateRequest) -> Result<Created, ApiError> {
        let budget = Budget::starting_now(&self.settings);
        // Every accepted request counts, retries with an Idempotency-Key included: the limit
        // bounds what one customer can make the swarm do in a minute.
        self.admit(&request.customer_id, &budget).await?;
        let now = now_ms();
        let mut conversation =
            Conversation::new(&request.customer_id, &request.message, now, self.settings.deadline_secs);
        conversation.idempotency_key = request.idempotency_key.clone();
        // Detected once, here: every later writer (workers, aggregator, deadline path) reads this value.
        conversation.language = Some(Language::detect(&request.message, None));
        // The stream-triggered aggregator has no message to carry the trace: the item carries it.
        conversation.trace_parent = obs::context::current_traceparent();
        conversation.request_hash = Some(request_hash(&request.customer_id, &request.message));
        conversation.sweep_shard = Some(sweep_shard(&conversation.id, self.settings.sweep_shards));
        conversation.lease = Some(Lease { holder: planner_id(), until_ms: self.lease_until(now), turn: 0 });
        let expires_at = time::after_ms(now, self.settings.idle_expiry);
        conversation.expires_at_ms = Some(expires_at);
        conversation.ttl = conversation.ttl.max(expires_at / 1000 + RETENTION_AFTER_EXPIRY_SECS);
        let id = conversation.id.clone();
        let created =
            budget.before_plan("the conversation's write", self.store.create_conversation(&conversation)).await;
        // Not written, or written with its answer lost: no deadline armed, no plan; the sweep fails it.
        let created = created.map_err(|e| not_sent(&id, Started::No, e))?;
        match created {
            CreateOutcome::Existing(existing) => {
                tracing::info!(conversation_id = %existing, "idempotency key reused: returning the earlier conversation");
                return self.resume(existing, &budget).await;
            }
            CreateOutcome::KeyReused(existing) => {
                tracing::info!(conversation_id = %existing, "idempotency key reused with another request: refused");
                return Err(ApiError::KeyReused(existing));
            }
            CreateOutcome::Created => obs::metrics::conversation_started(),
        }
        faults::at(CrashPoint::OrchestratorAfterCreate).await;
        let span = tracing::info_span!("orchestrate", conversation_id = %id, customer_id = %request.customer_id);
        self.plan_and_queue(conversation, &budget).instrument(span).await
    }

    /// A retry with the same `Idempotency-Key`: the earlier conversation, moved on if its creator died.
    /// - `PLANNING` whose planning lease expired (the creator was killed): this call takes the lease
    ///   and plans it. A live lease: the creator may still be at it, or dead with its lease not yet
    ///   expired — [`ApiError::InProgress`] (409, `Retry-After` = the lease's rest) tells the client
    ///   to come back when it can take over.
    /// - `RUNNING` with no `queued` marker, inside the creator's lease too (it may have been killed
    ///   after the plan's write, before it sent: the client sees no answer, retries at once, and a
    ///   202 must leave the subtasks sent): the subtasks sent at planning that never began are sent
    ///   (again: a duplicate of a message the creator did send is absorbed like any duplicate
    ///   delivery) and the marker written. With the marker they were sent: a backlog still in the
    ///   queue is never sent twice.
    async fn resume(&self, id: ConversationId, budget: &Budget) -> Result<Created, ApiError> {
        let read = budget.before_plan("reading the conversation", self.store.get_conversation(&id)).await;
        let Some(conversation) = read.map_err(|e| ApiError::Unavailable(e.to_string()))? else {
            return Ok(Created { conversation_id: id, new: false, turn: 0 });
        };
        let existing = Created { conversation_id: id.clone(), new: false, turn: conversation.turn };
        let now = now_ms();
        match conversation.status {
            ConversationStatus::Planning => {
                let holder = planner_id();
                let until = self.lease_until(now);
                let take = self.store.acquire_lease(&id, LeasePhase::Planning, &holder, now, until);
                let taken = budget.before_plan("the planning lease", take).await;
                match taken.map_err(|e| not_sent(&id, Started::No, e))? {
                    LeaseOutcome::Acquired { taken_over } => {
                        if taken_over.is_some() {
                            obs::metrics::lease_taken_over(obs::metrics::LeaseKind::Planning);
                        }
                        tracing::warn!(conversation_id = %id, expired_holder = ?taken_over.map(|l| l.holder), "planning lease expired: this retry plans the conversation");
                        let span = tracing::info_span!("orchestrate", conversation_id = %id, customer_id = %conversation.customer_id);
                        // This retry's trace plans it; the conversation's own trace (its first request's) is linked.
                        span.in_scope(|| obs::context::link_current(conversation.trace_parent.as_deref()));
                        let mut conversation = conversation;
                        conversation.lease = Some(Lease { holder, until_ms: until, turn: conversation.turn });
                        self.plan_and_queue(conversation, budget).instrument(span).await?;
                    }
                    LeaseOutcome::Held(lease) => {
                        // Answering 202 here would hand the client a conversation nobody may be planning
                        // (its planner could die before its lease ends): the client retries once it ended.
                        let wait_ms = u64::try_from(lease.until_ms.saturating_sub(now)).unwrap_or(0);
                        tracing::info!(conversation_id = %id, wait_ms, "planning lease live: the retry is told to come back");
                        return Err(ApiError::InProgress {
                            conversation: id,
                            retry_after_secs: wait_ms.div_ceil(1000).max(1),
                        });
                    }
                    outcome => tracing::info!(conversation_id = %id, ?outcome, "planning not taken over"),
                }
            }
            // A creator that answered 503 ended its lease: this retry is the one its 503 asked for. One
            // killed before it sent holds its lease still and nobody else sends for a while: this retry does.
            ConversationStatus::Running if conversation.queued_at_ms.is_none() => {
                let listed = budget.before_plan("listing the subtasks", self.store.list_subtasks(&id)).await;
                let unsent: Vec<SubtaskRecord> = listed
                    .map_err(|e| not_sent(&id, Started::Yes, e))?
                    .into_iter()
                    // A refund-role subtask waits for its dependencies on its own queue, PENDING: only the
                    // orchestrator and the refund worker send it, so a crash before that send is made up for here.
                    // Only the latest turn's: an earlier turn's subtasks were its own planner's to send.
                    .filter(|r| r.subtask.id.turn() == conversation.turn)
                    .filter(|r| r.sent_at_planning_never_begun(self.queues.has_own_queue(&r.role)))
                    .collect();
                if !unsent.is_empty() {
                    tracing::warn!(conversation_id = %id, subtasks = unsent.len(), "subtasks never sent: sending them");
                }
                self.enqueue_ready(&id, &unsent, budget).await.map_err(|e| not_sent(&id, Started::Yes, e))?;
                self.mark_queued(&id, conversation.turn, budget).await;
            }
            _ => {}
        }
        Ok(existing)
    }

    /// When a planning lease taken now ends.
    fn lease_until(&self, now: i64) -> i64 {
        time::after_ms(now, self.settings.planning_lease)
    }

    /// The rest of `create` once the conversation is written (or its planning taken over): arm the
    /// deadline path's first run, plan, persist the subtasks and flip to `RUNNING`, enqueue the
    /// ready ones and mark them sent. A failure after the conversation's write answers a 503 that
    /// says whether it runs ([`Started`]) and ends this planner's lease, so the retry it asks for
    /// takes over at once.
    async fn plan_and_queue(&self, conversation: Conversation, budget: &Budget) -> Result<Created, ApiError> {
        let id = conversation.id.clone();
        // The deadline message goes out before planning: a crash after the conversation's write
        // still ends in the deadline path, never a hang. Its first run is when the planning lease
        // ends: it sends the subtasks of a stored plan this planner did not mark sent.
        let deadline_message = [TaskMessage::Deadline { conversation_id: id.clone(), turn: conversation.turn }];
        let arm = self.first_run_queue().send(&deadline_message, self.first_run_delay(&conversation));
        if let Err(e) = budget.before_plan("arming the deadline", arm).await {
            // The conversation stays PLANNING (the sweep fails it past its deadline).
            tracing::error!(error = %e, "could not arm the deadline; the planning lease is handed back");
            self.end_planning_lease(&conversation, budget).await;
            return Err(not_sent(&id, Started::No, e));
        }

        let plan_deadline = budget.plan_deadline(self.settings.plan_timeout);
        let (plan, usage, handoff) =
            self.plan(&conversation, plan_deadline).instrument(tracing::info_span!("plan")).await;
        // Each turn's subtasks are its own: their items, messages and side-effect keys carry the turn.
        let plan = turns::plan_in_turn(plan, conversation.turn);
        if handoff {
            // The customer asked for a person: the conversation ends in HANDOFF when it is answered.
            let asked = Handoff { reason: HandoffReason::CustomerAsked, at_ms: now_ms() };
            if let Err(e) = budget.after_plan("the hand-off request", 4, self.store.request_handoff(&id, &asked)).await
            {
                self.end_planning_lease(&conversation, budget).await;
                return Err(not_sent(&id, Started::No, e));
            }
            tracing::info!("the customer asked for a person: hand-off requested");
        }
        let mut records: Vec<SubtaskRecord> = plan
            .subtasks
            .iter()
            .map(|s| SubtaskRecord::new(&conversation, s.clone(), self.roles.role_for(&s.tools)))
            .collect();
        swarm_core::domain::link_dependents(&mut records);
        let planner = conversation.lease.as_ref().map(|l| l.holder.as_str());
        let start = self.store.start_run(&id, planner, &records, &plan.notes, &usage);
        match budget.after_plan("the plan's write", 3, start).await {
            // Another request took the planning over (or the deadline path moved it on): it runs its own plan.
            Ok(false) => return Ok(Created { conversation_id: id, new: true, turn: conversation.turn }),
            Ok(true) => {}
            // Cut or failed: it may have been applied. Read back, it goes on when this planner's flip is
            // found made; otherwise the deadline path's first run sends it if it lands later.
            Err(e) if !self.own_flip_made(&conversation, &records, budget).await => {
                self.end_planning_lease(&conversation, budget).await;
                return Err(not_sent(&id, Started::Unknown, e));
            }
            Err(e) => tracing::warn!(error = %e, "the plan's write answered late but was applied: sending"),
        }
        obs::metrics::conversation_planned(records.len());
        faults::at(CrashPoint::OrchestratorAfterStartRun).await;
        if let Err(e) = self.enqueue_ready(&id, &records, budget).await {
            // The retry the 503 asks for sends them: it must not wait for this lease to run out.
            self.end_planning_lease(&conversation, budget).await;
            return Err(not_sent(&id, Started::Yes, e));
        }
        faults::at(CrashPoint::OrchestratorAfterEnqueue).await;
        self.mark_queued(&id, conversation.turn, budget).await;
        tracing::info!(subtasks = records.len(), "conversation planned and queued");
        Ok(Created { conversation_id: id, new: true, turn: conversation.turn })
    }

    /// Whether the conversation reads `RUNNING` under this planner's lease with exactly `records`
    /// as its plan: its plan's write was applied though its answer was lost or cut. Read within
    /// the post-plan reserve (the sends and the marker keep theirs); a failed read answers `false`.
    async fn own_flip_made(&self, conversation: &Conversation, records: &[SubtaskRecord], budget: &Budget) -> bool {
        let read = budget.after_plan("reading the plan back", 2, self.store.get_conversation(&conversation.id)).await;
        let Ok(Some(stored)) = read else { return false };
        let holder = conversation.lease.as_ref().map(|l| l.holder.as_str());
        stored.status == ConversationStatus::Running
            && stored.lease.as_ref().map(|l| l.holder.as_str()) == holder
            && stored.plan.len() == records.len()
            && records.iter().all(|r| stored.plan.contains(r.subtask.id.as_str()))
    }

    /// Asks the model for a plan; one retry with the validation error shown,
    /// then a single-subtask fallback. Never fails: planning problems degrade. The flag is the
    /// plan's `handoff` (the customer asked for a person); such a plan may have no subtasks.
    async fn plan(&self, conversation: &Conversation, deadline: tokio::time::Instant) -> (Plan, Usage, bool) {
        let started = tokio::time::Instant::now();
        let ctx = ToolContext {
            role: PLANNER_ROLE.into(),
            customer_id: conversation.customer_id.clone(),
            conversation_id: conversation.id.clone(),
            subtask_id: "plan".into(),
        };
        let catalogue = match tokio::time::timeout_at(deadline, self.tools.list_tools(&ctx)).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                tracing::warn!(error = %e.log_safe(), "tool catalogue unavailable; planning without tools");
                Vec::new()
            }
            Err(_) => {
                tracing::warn!("tool catalogue timed out; planning without tools");
                Vec::new()
            }
        };
        let known: HashSet<String> = catalogue.iter().map(|t| t.name.clone()).collect();
        // The fallback subtask runs with the default role: only tools the role table leaves to it.
        let names: Vec<&str> = catalogue.iter().map(|t| t.name.as_str()).collect();
        let fallback_tools = self.roles.default_role_tools(&names);
        let mut messages = plan_messages_in(&conversation.query, &catalogue, conversation.reply_language());
        // A follow-up is planned knowing the conversation's earlier turns ("it" → an order id).
        self.memory(conversation, deadline).await.add_to(&mut messages);
        let mut usage = Usage::default();
        // Planning must fit API Gateway's 30 s: retries are bounded by `deadline` as well.
        let policy = LlmRetryPolicy { max_attempts: 5, ..LlmRetryPolicy::default() };
        let mut last_error;
        let mut why: &str;
        for attempt in 0..2 {
            let request = ChatRequest {
                purpose: Purpose::Plan,
                messages: messages.clone(),
                tools: catalogue.clone(),
                max_tokens: Some(4096),
                tool_choice: Default::default(),
            };
            let response = match complete_with_retry(self.model.as_ref(), &request, &policy, deadline).await {
                Ok(r) => r,
                Err(e) => {
                    last_error = match e {
                        CallError::OutOfTime { .. } => "planning ran out of time".to_owned(),
                        CallError::Failed(err) => format!("the planning model failed: {}", err.log_safe()),
                    };
                    tracing::warn!(attempt, error = %last_error, "planning call failed");
                    break;
                }
            };
            usage = usage.add(&response.usage);
            let text = response.content.clone().unwrap_or_default();
            let handoff = plan_requests_handoff(&text);
            let max = self.limits().subtasks_per_conversation;
            match parse_plan(&text).and_then(|raw| validate_plan_within(raw, &known, max)) {
                Ok(plan) if !plan.subtasks.is_empty() || handoff => {
                    obs::metrics::planning_finished(started.elapsed(), obs::metrics::PlanOutcome::Planned);
                    return (plan, usage, handoff);
                }
                // The model sees why (its retry message); the log says only the class: the error
                // quotes the model's ids and tool names, written from the customer's words.
                Ok(_) => (last_error, why) = ("the plan has no subtasks".into(), "no_subtasks"),
                Err(e) => (last_error, why) = (e.to_string(), e.kind()),
            }
            tracing::warn!(attempt, reason = why, "unusable plan");
            messages.push(ChatMessage::Assistant { content: Some(text), tool_calls: vec![], reasoning_content: None });
            messages.push(plan_retry_message(&last_error));
        }
        obs::metrics::planning_finished(started.elapsed(), obs::metrics::PlanOutcome::Fallback);
        (fallback_plan(&conversation.query, &fallback_tools, "the plan could not be made"), usage, false)
    }

    /// `GET /conversations`: a page of `customer_id`'s conversations, newest first, at most `limit`
    /// (1..=100), after `cursor` (a page's `next_cursor`, opaque).
    ///
    /// Errors: 400 `bad_cursor` for a cursor this API did not hand out; 503 when the store is unavailable.
    pub async fn list(
        &self,
        customer_id: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ConversationSummary>, Option<String>), ApiError> {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct After {
            t: i64,
            id: String,
        }
        let after = match cursor.filter(|c| !c.trim().is_empty()) {
            None => None,
            Some(text) => {
                let After { t, id } = crate::cursor::decode(text)?;
                let id = ConversationId::parse(&id).ok_or_else(crate::cursor::bad_cursor)?;
                Some(ConversationPosition { created_at_ms: t, id })
            }
        };
        let page = self.store.list_customer_conversations(customer_id, after.as_ref(), limit.clamp(1, 100)).await?;
        let next = page.next.map(|p| crate::cursor::encode(&After { t: p.created_at_ms, id: p.id.to_string() }));
        Ok((page.conversations.iter().map(ConversationSummary::build).collect(), next))
    }

    /// `GET /conversations/{id}` for `customer_id`; another customer's
    /// conversation is answered as not found.
    /// The event log of conversation `id` when `customer_id` (when given) owns it: the id and
    /// the store's log, for `GET /conversations/{id}/events`. [`ApiError::NotFound`] as [`Self::status`].
    pub async fn event_log(
        &self,
        id: &str,
        customer_id: Option<&str>,
    ) -> Result<(ConversationId, Arc<dyn swarm_core::ports::EventLog>), ApiError> {
        let id = ConversationId::parse(id).ok_or(ApiError::NotFound)?;
        let conversation = self.store.get_conversation(&id).await?.ok_or(ApiError::NotFound)?;
        if customer_id.is_some_and(|c| c != conversation.customer_id) {
            return Err(ApiError::NotFound);
        }
        Ok((id, self.store.clone()))
    }

    pub async fn status(&self, id: &str, customer_id: Option<&str>) -> Result<ConversationView, ApiError> {
        let id = ConversationId::parse(id).ok_or(ApiError::NotFound)?;
        let mut conversation = self.store.get_conversation(&id).await?.ok_or(ApiError::NotFound)?;
        if let Some(c) = customer_id
            && c != conversation.customer_id
        {
            return Err(ApiError::NotFound);
        }
        // A terminal conversation is read whole (its partition, once): untold decisions are told
        // first, and its subtasks are those of the turn read, whatever a teller wrote meanwhile.
        let mut history = None;
        if conversation.status.is_terminal() {
            if self.tell_untold(&conversation).await? {
                conversation = self.store.get_conversation(&id).await?.ok_or(ApiError::NotFound)?;
            }
            history = Some(self.store.conversation_history(&id).await?);
        }
        let subtasks = match &history {
            Some(h) => h.subtasks.iter().filter(|r| conversation.holds(r)).cloned().collect(),
            None if conversation.status == ConversationStatus::Planning => Vec::new(),
            None => self.store.list_subtasks(&id).await?,
        };
        if history.is_none() && conversation.turn > 0 {
            history = Some(self.store.conversation_history(&id).await?);
        }
        // The decisions and outcomes of its side effects' approvals (one per side effect that
        // waited), of every turn: a decision told as a later turn still shows its approval.
        let mut approvals = Vec::new();
        let all = history.as_ref().map_or(subtasks.as_slice(), |h| h.subtasks.as_slice());
        for approval_id in swarm_core::view::approval_ids(all) {
            if let Some(a) = self.store.get_approval(&approval_id).await? {
                approvals.push(a);
            }
        }
        let view = ConversationView::build(&conversation, &subtasks).with_approvals(&approvals, now_ms());
        Ok(match &history {
            Some(h) if conversation.turn > 0 => view.with_history(h),
            _ => view,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_blank_messages_are_refused() {
        for m in ["", "   \n"] {
            let e = validate_request(m, "C104", None, 8000).unwrap_err();
            assert_eq!(e.code(), "empty_message");
            assert_eq!(e.status(), 400);
        }
    }

    #[test]
    fn message_over_the_limit_is_refused_counting_characters() {
        let ok = "订".repeat(8000);
        assert!(validate_request(&ok, "C104", None, 8000).is_ok());
        let long = "订".repeat(8001);
        let e = validate_request(&long, "C104", None, 8000).unwrap_err();
        assert_eq!(e.code(), "message_too_long");
        assert!(e.to_string().contains("8001"));
    }

    #[test]
    fn customer_id_with_key_separators_is_refused() {
        assert_eq!(validate_request("hi", "C1#META", None, 8000).unwrap_err().code(), "bad_customer_id");
        assert_eq!(validate_request("hi", "", None, 8000).unwrap_err().code(), "bad_customer_id");
    }

    #[test]
    fn idempotency_key_is_trimmed_and_bounded() {
        let r = validate_request("hi", "C104", Some(" k1 "), 8000).unwrap();
        assert_eq!(r.idempotency_key.as_deref(), Some("k1"));
        assert!(validate_request("hi", "C104", Some(&"k".repeat(129)), 8000).is_err());
    }
}
