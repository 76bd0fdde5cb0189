//! The worker's logic: one LLM ↔ tool loop per subtask, exactly-once accounting, dependent release, hand-back, dead letters and the deadline path.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::Instrument;

use swarm_core::approval::{Approval, ApprovalStatus, PendingApproval, ProposedAction, approval_id};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, MAX_CHECKPOINT_BYTES, MAX_REPLY_BYTES,
    MAX_RESULT_CHARS, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage, ToolCallRecord, Usage,
    now_ms, truncate_bytes, truncate_chars,
};
use swarm_core::effects::{
    AttemptLease, Effect, EffectChange, EffectOutcome, EffectState, MAX_EFFECT_ARGUMENT_BYTES, MAX_EFFECTS_PER_SUBTASK,
    journal_result,
};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::jsonfix::parse_tool_arguments;
use swarm_core::llm::retry::{CallError, LlmRetryPolicy, complete_with_retry};
use swarm_core::llm::transcript::{
    check_pairing, compress, estimate_tokens, fit_round, latest_round, shrink_latest_round, unique_tool_call_ids,
};
use swarm_core::obs;
use swarm_core::obs::metrics::{DeadlineAction, LeaseKind, SweepOutcome};
use swarm_core::ports::{
    AttemptStart, ChatMessage, ChatModel, ChatRequest, CloseOutcome, ConversationStore, CountOutcome, FinishReason,
    IntentOutcome, LeaseOutcome, LeasePhase, LlmError, MAX_DELAY_SECONDS, Purpose, QueueError, RecordOutcome,
    StoreError, ToolCall, ToolChoice, ToolContext, ToolError, ToolGateway, ToolOutput, ToolSpec,
};
use swarm_core::prompts::{DependencyResult, WORK_LEADING_MESSAGES, work_messages};
use swarm_core::reply::{compose_reply, reply_input};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::{Timings, seconds_rounded_up};
use swarm_core::untrusted::{clean_text, is_safe_id, safe_id};

/// Tokens a worker's answer (its text or its tool calls) needs; the client adds a thinking
/// model's reasoning budget to it.
pub const WORK_ANSWER_TOKENS: u32 = 2_048;
/// Times one subtask may shorten its transcript (each halves it) after a context-length error
/// or an answer cut off by `length`; past that the request cannot fit and the subtask fails.
const MAX_SHRINKS: u32 = 3;
/// Dispatches of one side-effecting call (the first and replays with the same key) within one
/// attempt while its outcome is unknown (a timeout, the gateway unreachable).
const EFFECT_DISPATCHES: u32 = 3;
/// Top-level arguments the worker hands the gateway adapter (never the model's to write).
const IDEMPOTENCY_ARGUMENT: &str = "_idempotency_key";
const APPROVAL_ARGUMENT: &str = "_approval";
/// Approvals the sweep reads for the waiting gauges (one `Query` page of the approvals partition).
const SWEEP_APPROVALS_READ: usize = 1_000;

/// Worker settings, read once at cold start.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Most LLM rounds per subtask; the last one forbids tool calls (`tool_choice: "none"`), forcing an answer.
    pub max_rounds: u32,
    /// Longest wait for one tool call.
    pub tool_timeout: Duration,
    /// Time that must remain before starting an LLM round; less hands the work back.
    pub min_round_time: Duration,
    /// `DelaySeconds` of a handed-back message.
    pub handback_delay_secs: u32,
    /// Hand-backs allowed before a partial result is recorded.
    pub max_handbacks: u32,
    pub retry: LlmRetryPolicy,
    /// Conversation-wide token budget; past it remaining subtasks stop with that reason.
    pub token_budget: Option<u64>,
    /// Transcript size (estimated tokens) above which older rounds are compressed.
    pub compress_above_tokens: u64,
    /// Characters of one tool output kept in the transcript.
    pub max_tool_output_chars: usize,
    /// Estimated tokens the tool results of one round may take together; a larger round is cut
    /// fairly (`transcript::fit_round`), each cut result saying so.
    pub round_budget_tokens: u64,
    /// Kept back from the Lambda deadline for writing results and returning.
    pub safety_margin: Duration,
    /// How long an approval asked for can be decided (`money.approval_expiry_secs`).
    pub approval_expiry: Duration,
    /// `DelaySeconds` of a subtask with its own queue handed back while its dependencies are open.
    pub dependency_wait_secs: u32,
    /// `DelaySeconds` before a side effect whose outcome is not known is replayed to confirm it.
    pub confirm_delay_secs: u32,
    /// Replays of such a side effect before it is left as submitted.
    pub confirm_attempts: u32,
    /// Kept back from the conversation's deadline: a subtask stops by the earlier of the two deadlines.
    pub conversation_margin: Duration,
    /// Tool calls of one round running at once, at most (the rest wait, answers stay in call order).
    pub max_parallel_tool_calls: usize,
    /// Seconds until a message reported in `batchItemFailures` comes back (`ChangeMessageVisibility`).
    pub retry_visibility_secs: u32,
    /// `DelaySeconds` of the deadline path's next run while the conversation is not terminal.
    pub rearm_secs: u32,
    /// The aggregation lease the deadline path takes when it answers the conversation itself.
    pub aggregation_lease: Duration,
    /// The sweep's shards, and how much one sweep takes on.
    pub sweep: SweepSettings,
}

/// How the sweep walks the sparse index (the table's `[sweep]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepSettings {
    /// Shards of the index: `sweep_shard` 0..shards.
    pub shards: u32,
    /// Conversations whose deadline path runs at once.
    pub max_parallel: usize,
    /// Conversations taken from each shard by one sweep.
    pub per_shard: usize,
}

impl Default for WorkerSettings {
    /// The standard timing table's values ([`WorkerSettings::from_timings`]).
    fn default() -> Self {
        Self::from_timings(Timings::standard())
    }
}

impl WorkerSettings {
    /// Rounds, tool timeout, minimum round time, hand-back delay (rounded up to whole
    /// seconds: `DelaySeconds`), hand-backs, margins, parallel calls, the retry visibility timeout
    /// and LLM retries from the table's `[worker]` and `[llm]`; the deadline path's re-arm
    /// (`conversation.rearm_secs`), the aggregation lease (`aggregator.lease_secs`) and `[sweep]`;
    /// no token budget.
    pub fn from_timings(timings: &Timings) -> Self {
        let w = &timings.worker;
        let whole_secs = |d: Duration| u32::try_from(seconds_rounded_up(d)).unwrap_or(u32::MAX);
        Self {
            max_rounds: w.max_rounds,
            tool_timeout: w.tool_timeout,
            min_round_time: w.min_round,
            handback_delay_secs: u32::try_from(seconds_rounded_up(w.handback_delay)).unwrap_or(MAX_DELAY_SECONDS),
            max_handbacks: w.max_handbacks,
            retry: LlmRetryPolicy::from_timings(timings),
            token_budget: None,
            compress_above_tokens: 24_000,
            max_tool_output_chars: 8_000,
            round_budget_tokens: 12_000,
            safety_margin: w.safety_margin,
            approval_expiry: timings.money.approval_expiry,
            dependency_wait_secs: delay_secs(timings.money.dependency_wait),
            confirm_delay_secs: delay_secs(timings.money.confirm_delay),
            confirm_attempts: timings.money.confirm_attempts,
            conversation_margin: w.conversation_margin,
            max_parallel_tool_calls: w.max_parallel_tool_calls.max(1),
            retry_visibility_secs: whole_secs(w.retry_visibility).max(1),
            rearm_secs: whole_secs(timings.conversation.rearm).clamp(1, MAX_DELAY_SECONDS),
            aggregation_lease: timings.aggregator.lease,
            sweep: SweepSettings {
                shards: timings.sweep.shards.max(1),
                max_parallel: timings.sweep.max_parallel.max(1),
                per_shard: timings.sweep.per_shard.max(1),
            },
        }
    }
}

/// `d` as SQS `DelaySeconds`: whole seconds rounded up, at least 1, at most 900.
fn delay_secs(d: Duration) -> u32 {
    u32::try_from(seconds_rounded_up(d)).unwrap_or(MAX_DELAY_SECONDS).clamp(1, MAX_DELAY_SECONDS)
}

/// What became of one message; the handler turns it into the batch response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The subtask reached a terminal status now.
    Finished(SubtaskStatus),
    /// A duplicate delivery: the result was already recorded (its bookkeeping is completed if a crash interrupted it).
    AlreadyFinished,
    /// Too little time left: progress saved and a delayed copy of the message sent.
    HandedBack,
    /// Not this delivery's turn (another attempt holds the lease, dependencies are open, a side
    /// effect is being confirmed): a delayed copy was sent to the same queue and this one is
    /// acknowledged, so its receive count does not grow toward the DLQ.
    Requeued(String),
    /// Nothing to do (deadline not yet due, conversation already over…).
    Ignored(String),
    /// Unusable message (unknown conversation or subtask): acknowledged, not retried.
    Poison(String),
    /// A transient failure: report the message in `batchItemFailures` so SQS redelivers it.
    Retry(String),
}

impl Outcome {
    pub fn should_retry(&self) -> bool {
        matches!(self, Self::Retry(_))
    }
}

impl From<StoreError> for Outcome {
    fn from(e: StoreError) -> Self {
        Self::Retry(e.to_string())
    }
}

/// What one sweep did (the sweep function's answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Conversations past their deadline and not terminal, as the index had them.
    pub found: usize,
    /// Of those, answered (or failed, when planning never finished) by this sweep.
    pub answered: usize,
    /// Moved on otherwise: subtasks closed for the aggregator, a live lease left alone, already over.
    pub moved: usize,
    /// Cut off by the sweep's own deadline (the next sweep takes them).
    pub unfinished: usize,
    /// Store errors (a shard not read, a deadline path that failed).
    pub errors: usize,
}

/// When a subtask of `conversation` must stop: `margin` before the conversation's deadline, on tokio's clock.
fn conversation_deadline(conversation: &Conversation, margin: Duration) -> Instant {
    let margin_ms = i64::try_from(margin.as_millis()).unwrap_or(i64::MAX);
    let left_ms = conversation.deadline_ms.saturating_sub(margin_ms).saturating_sub(now_ms());
    Instant::now() + Duration::from_millis(u64::try_from(left_ms).unwrap_or(0))
}

/// Saved progress of an interrupted attempt (stored as JSON on the subtask item).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    messages: Vec<ChatMessage>,
    tool_calls: Vec<ToolCallRecord>,
    usage: Usage,
    /// Journal entries the transcript accounts for: a resumed attempt continues only from a
    /// checkpoint that knows every side effect (otherwise it finishes from the journal).
    #[serde(default)]
    effects: usize,
}

/// Result of running the loop.
enum LoopEnd {
    Done(SubtaskResult),
    OutOfTime,
    /// The subtask was closed by someone else, or another attempt took it over, before a side
    /// effect could be recorded: nothing was dispatched, nothing more to do here.
    Abandoned(String),
}

struct LoopState {
    messages: Vec<ChatMessage>,
    tool_calls: Vec<ToolCallRecord>,
    usage: Usage,
    /// Entries of the subtask's journal (side-effecting calls recorded so far).
    effects: usize,
}

/// The attempt a loop runs as: its lease holder (journal writes are conditional on it) and the
/// subtask item's TTL (for the approvals it records).
struct Attempt {
    holder: String,
    ttl: i64,
}

/// One tool call after its checks, before it runs.
enum Prepared {
    /// Refused before dispatch: the tool message and its record.
    Refused(String, ToolCallRecord),
    /// Runs; `effect` is its position among the subtask's side-effecting calls, when it has side effects.
    Ready { args: serde_json::Value, effect: Option<u32> },
}

/// How one call ended.
struct CallEnd {
    content: String,
    record: ToolCallRecord,
    /// A side effect now waiting for a person.
    approval: Option<PendingApproval>,
    /// A side effect whose outcome is not known after its dispatches.
    unknown: bool,
    /// The journal refused the intent: the loop must stop.
    abandoned: Option<String>,
}

impl CallEnd {
    fn answered(content: String, record: ToolCallRecord) -> Self {
        Self { content, record, approval: None, unknown: false, abandoned: None }
    }
}

/// How a dispatched side effect ended.
enum EffectEnd {
    /// Its outcome is recorded (done, or refused before dispatch).
    Recorded(EffectOutcome),
    /// It waits for a person's approval.
    Awaiting(PendingApproval),
    /// Its outcome is not known: it stays an intent, to be confirmed by a replay.
    Unknown,
}

/// The worker: runs subtasks from the tasks queue (and records dead letters).
pub struct Worker {
    store: Arc<dyn ConversationStore>,
    queues: TaskQueues,
    model: Arc<dyn ChatModel>,
    sub_model: Arc<dyn ChatModel>,
    tools: Arc<dyn ToolGateway>,
    settings: WorkerSettings,
    /// Compiled argument schemas by tool name; `Err` keeps why a schema did not compile.
    validators: Mutex<HashMap<String, Result<Arc<jsonschema::Validator>, String>>>,
}

impl Worker {
    pub fn new(
        store: Arc<dyn ConversationStore>,
        queues: TaskQueues,
        model: Arc<dyn ChatModel>,
        sub_model: Arc<dyn ChatModel>,
        tools: Arc<dyn ToolGateway>,
        settings: WorkerSettings,
    ) -> Self {
        Self { store, queues, model, sub_model, tools, settings, validators: Mutex::new(HashMap::new()) }
    }

    /// Time kept back from the Lambda deadline (the handler's invocation deadline).
    pub fn safety_margin(&self) -> Duration {
        self.settings.safety_margin
    }

    /// Handles one tasks-queue message; `deadline` is when the invocation must
    /// have returned (the Lambda's deadline minus a safety margin).
    pub async fn handle(&self, message: TaskMessage, deadline: Instant) -> Outcome {
        match message {
            TaskMessage::Run { conversation_id, subtask_id, handbacks } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.run(&conversation_id, &subtask_id, handbacks, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
            TaskMessage::Deadline { conversation_id } => self.deadline_instrumented(&conversation_id).await,
            TaskMessage::Execute { conversation_id, approval_id } => {
                let span =
                    tracing::info_span!("execute", conversation_id = %conversation_id, approval_id = %approval_id);
                self.execute(&conversation_id, &approval_id, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
            TaskMessage::Confirm { conversation_id, subtask_id, attempt } => {
                let span = subtask_span(&conversation_id, &subtask_id);
                self.confirm(&conversation_id, &subtask_id, attempt, deadline)
                    .instrument(span)
                    .await
                    .unwrap_or_else(Outcome::from)
            }
        }
    }

    /// Handles a message that reached the DLQ: the subtask is recorded as
    /// failed and counted, so the conversation still completes — or, when its journal
    /// holds side effects, as what the journal says (never "failed" for something done).
    pub async fn handle_dead_letter(&self, message: TaskMessage) -> Outcome {
        match message {
            TaskMessage::Run { conversation_id, subtask_id, .. } => {
                let fallback = SubtaskResult::failed(
                    FailureKind::DeadLetter,
                    "gave up after repeated failures (the message reached the dead-letter queue)",
                );
                async {
                    tracing::warn!("dead letter: recording the subtask as failed");
                    obs::metrics::dead_letter();
                    self.close_open(&conversation_id, &subtask_id, fallback, now_ms()).await?;
                    match self.store.get_subtask(&conversation_id, &subtask_id).await? {
                        Some(rec) if rec.status.is_terminal() => {
                            self.count_and_release(&conversation_id, &rec).await?;
                            Ok::<Outcome, StoreError>(Outcome::Finished(rec.status))
                        }
                        Some(_) => Ok(Outcome::Retry("the dead letter's subtask is still open".into())),
                        None => Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
                    }
                }
                .instrument(subtask_span(&conversation_id, &subtask_id))
                .await
                .unwrap_or_else(Outcome::from)
            }
            TaskMessage::Deadline { conversation_id } => self.deadline_instrumented(&conversation_id).await,
            TaskMessage::Execute { approval_id, .. } => {
                // The approval stays approved: an operator posting it again enqueues it again.
                tracing::error!(%approval_id, "an approved side effect reached the dead-letter queue; it did not run");
                Outcome::Ignored("approved side effect dead-lettered".into())
            }
            TaskMessage::Confirm { subtask_id, .. } => {
                tracing::warn!(%subtask_id, "a confirmation reached the dead-letter queue; the side effect stays submitted");
                Outcome::Ignored("confirmation dead-lettered".into())
            }
        }
    }

    /// The deadline path in its own span (the conversation's status is recorded once read).
    async fn deadline_instrumented(&self, id: &ConversationId) -> Outcome {
        let span = tracing::info_span!("deadline", conversation_id = %id, status = tracing::field::Empty);
        self.deadline(id, true).instrument(span).await.map_or_else(Outcome::from, |(outcome, _)| outcome)
    }

    /// The lease of an attempt that must be over by `deadline` (the invocation's deadline minus
    /// the safety margin): Lambda ends the invocation at `deadline + safety margin` at the latest.
    fn lease_for(&self, deadline: Instant) -> AttemptLease {
        let left = deadline.saturating_duration_since(Instant::now()) + self.settings.safety_margin;
        AttemptLease::new(now_ms() + i64::try_from(left.as_millis()).unwrap_or(i64::MAX / 2))
    }

    /// Sends `message` again to `role`'s queue after `delay_secs` and acknowledges this one.
    async fn requeue(&self, role: &str, message: TaskMessage, delay_secs: u32, why: String) -> Outcome {
        let delay = delay_secs.clamp(1, MAX_DELAY_SECONDS);
        match self.queues.for_role(role).send(&[message], delay).await {
            Ok(()) => {
                tracing::info!(delay_secs = delay, reason = %why, "message handed back to its queue");
                Outcome::Requeued(why)
            }
            Err(e) => Outcome::Retry(format!("could not hand the message back ({why}): {e}")),
        }
    }

    async fn run(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        handbacks: u32,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let Some(conversation) = self.store.get_conversation(id).await? else {
            return Ok(Outcome::Poison(format!("unknown conversation {id}")));
        };
        if conversation.status.is_terminal() {
            return Ok(Outcome::Ignored(format!("conversation is {}", conversation.status.as_str())));
        }
        // The attempt's lease covers the whole invocation (its deadline plus the safety margin), whatever
        // deadline the loop keeps below.
        let lease = self.lease_for(deadline);
        // The subtask stops by the earlier of its invocation's deadline and the conversation's (less a
        // margin to record what it has): past the conversation's, a hand-back would only lose to the deadline path.
        let for_conversation = conversation_deadline(&conversation, self.settings.conversation_margin);
        let (deadline, conversation_bound) =
            if for_conversation < deadline { (for_conversation, true) } else { (deadline, false) };
        let record = match self.store.begin_attempt(id, subtask_id, &lease, now_ms()).await? {
            AttemptStart::Missing => return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
            AttemptStart::AlreadyFinished(rec) => {
                // A duplicate, or a retry after a crash between the result
                // write and the count: finish the bookkeeping, never the LLM work —
                // and learn the outcome of a side effect still being confirmed.
                if rec.effects.iter().any(|e| e.state == EffectState::Intent) {
                    self.confirm_effects(&rec, &conversation.customer_id, 0, deadline).await?;
                }
                self.count_and_release(id, &rec).await?;
                return Ok(Outcome::AlreadyFinished);
            }
            AttemptStart::Leased(rec) => {
                // Another delivery runs it now: look again once its lease has ended.
                let until = rec.lease.as_ref().map_or(0, |l| l.until_ms);
                let wait = u32::try_from((until - now_ms()).max(0) / 1000 + 1).unwrap_or(MAX_DELAY_SECONDS);
                let again = TaskMessage::Run { conversation_id: id.clone(), subtask_id: subtask_id.clone(), handbacks };
                return Ok(self.requeue(&rec.role, again, wait, "another attempt holds the lease".into()).await);
            }
            AttemptStart::Started(rec) => rec,
        };
        faults::at(CrashPoint::WorkerAfterBeginAttempt).await;
        tracing::info!(attempt = record.attempts, role = %record.role, "subtask started");

        if let Some(budget) = self.settings.token_budget
            && conversation.usage.total_tokens() >= budget
        {
            let result = SubtaskResult::failed(
                FailureKind::TokenBudgetExhausted,
                format!("the conversation's token budget ({budget} tokens) was used up"),
            );
            return self.finish(id, subtask_id, result, Usage::default(), &[], Some(&record)).await;
        }

        let dependencies = if record.subtask.depends_on.is_empty() {
            Vec::new()
        } else {
            let all = self.store.list_subtasks(id).await?;
            match dependency_results(&record, &all) {
                DependencyState::Ready(d) => d,
                DependencyState::Failed(dep) => {
                    return self
                        .finish(
                            id,
                            subtask_id,
                            SubtaskResult::Skipped { dependency: dep },
                            Usage::default(),
                            &[],
                            Some(&record),
                        )
                        .await;
                }
                DependencyState::Waiting(dep) if self.queues.has_own_queue(&record.role) => {
                    // Enqueued at planning, it waits on its own queue: no other function may send there.
                    self.store.release_attempt(id, subtask_id, &lease.holder).await?;
                    if now_ms() >= conversation.deadline_ms {
                        return Ok(Outcome::Ignored(format!(
                            "dependency {dep} still open at the deadline; the deadline path closes the subtask"
                        )));
                    }
                    let again =
                        TaskMessage::Run { conversation_id: id.clone(), subtask_id: subtask_id.clone(), handbacks };
                    let why = format!("dependency {dep} not finished yet");
                    return Ok(self.requeue(&record.role, again, self.settings.dependency_wait_secs, why).await);
                }
                DependencyState::Waiting(dep) => {
                    // Should not happen (released only when all are done): give it back for later.
                    return Ok(Outcome::Retry(format!("dependency {dep} not finished yet")));
                }
            }
        };

        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: conversation.customer_id.clone(),
            conversation_id: id.clone(),
            subtask_id: subtask_id.clone(),
        };
        let checkpoint = record.checkpoint.as_deref().and_then(|c| serde_json::from_str::<Checkpoint>(c).ok());
        if !record.effects.is_empty() {
            let resumable = checkpoint.as_ref().is_some_and(|cp| {
                cp.effects == record.effects.len() && record.effects.iter().all(|e| e.state == EffectState::Done)
            });
            if !resumable {
                // A re-run after side effects: the journal says what was done; the model is not asked again.
                tracing::info!(effects = record.effects.len(), "re-run with a journal: finishing from it");
                return self.finish_from_journal(&ctx, &record, deadline).await;
            }
        }
        let mut state = match checkpoint {
            Some(cp) => {
                tracing::info!(messages = cp.messages.len(), "resuming from checkpoint");
                LoopState { messages: cp.messages, tool_calls: cp.tool_calls, usage: cp.usage, effects: cp.effects }
            }
            None => LoopState {
                messages: work_messages(&conversation.query, subtask_id, &record.subtask.instruction, &dependencies),
                tool_calls: Vec::new(),
                usage: Usage::default(),
                effects: 0,
            },
        };

        let attempt = Attempt { holder: lease.holder.clone(), ttl: record.ttl };
        match self.tool_loop(&ctx, &record, &attempt, &mut state, deadline).await {
            LoopEnd::Done(result) => {
                let tools_used: Vec<String> = state.tool_calls.iter().map(|c| c.name.clone()).collect();
                let side_effects_open =
                    matches!(result, SubtaskResult::Submitted { .. } | SubtaskResult::AwaitingApproval { .. });
                let outcome = self.finish(id, subtask_id, result, state.usage, &tools_used, Some(&record)).await?;
                if side_effects_open
                    && let Some(now) = self.store.get_subtask(id, subtask_id).await?
                    && now.effects.iter().any(|e| e.state == EffectState::Intent)
                {
                    self.schedule_confirm(&now, 0).await;
                }
                Ok(outcome)
            }
            LoopEnd::Abandoned(why) => {
                tracing::warn!(reason = %why, "attempt abandoned before a side effect; nothing was dispatched");
                Ok(Outcome::Ignored(why))
            }
            LoopEnd::OutOfTime if conversation_bound => {
                tracing::warn!("the conversation's deadline is near: recording what the subtask has");
                let result =
                    match self.store.get_subtask(id, subtask_id).await?.and_then(|r| journal_result(&r.effects)) {
                        // Side effects were made: say what they did (done, being confirmed), never failed over them.
                        Some(from_journal) => from_journal,
                        None => partial_result(&state, FailureKind::DeadlinePassed, "the conversation's deadline came"),
                    };
                let tools_used: Vec<String> = state.tool_calls.iter().map(|c| c.name.clone()).collect();
                self.finish(id, subtask_id, result, state.usage, &tools_used, Some(&record)).await
            }
            LoopEnd::OutOfTime if handbacks < self.settings.max_handbacks => {
                let cp = Checkpoint {
                    messages: state.messages,
                    tool_calls: state.tool_calls,
                    usage: state.usage,
                    effects: state.effects,
                };
                let json = serde_json::to_string(&cp).unwrap_or_default();
                // A larger transcript restarts the subtask instead of saving a cut, unparseable checkpoint
                // (with side effects in its journal it then finishes from the journal).
                if json.len() <= MAX_CHECKPOINT_BYTES {
                    self.store.save_checkpoint(id, subtask_id, &json).await?;
                }
                self.store.release_attempt(id, subtask_id, &lease.holder).await?;
                let again = TaskMessage::Run {
                    conversation_id: id.clone(),
                    subtask_id: subtask_id.clone(),
                    handbacks: handbacks + 1,
                };
                let delay = self.settings.handback_delay_secs.min(MAX_DELAY_SECONDS);
                if let Err(e) = self.queues.for_role(&record.role).send(&[again], delay).await {
                    return Ok(Outcome::Retry(format!("could not hand the subtask back: {e}")));
                }
                tracing::info!(delay_secs = delay, "out of time: progress saved, subtask handed back");
                obs::metrics::handed_back();
                Ok(Outcome::HandedBack)
            }
            LoopEnd::OutOfTime => {
                let result =
                    match self.store.get_subtask(id, subtask_id).await?.and_then(|r| journal_result(&r.effects)) {
                        // Side effects were made: say what they did, never "out of time" over them.
                        Some(from_journal) => from_journal,
                        None => partial_result(&state, FailureKind::OutOfTime, "ran out of time"),
                    };
                let tools_used: Vec<String> = state.tool_calls.iter().map(|c| c.name.clone()).collect();
                self.finish(id, subtask_id, result, state.usage, &tools_used, Some(&record)).await
            }
        }
    }

    /// A re-run of a subtask whose journal holds side effects: entries without an outcome are
    /// replayed as recorded (same tool, arguments and key) to learn it, and the result is the
    /// journal's ([`journal_result`]) — the model is never asked again.
    async fn finish_from_journal(
        &self,
        ctx: &ToolContext,
        record: &SubtaskRecord,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let mut effects = record.effects.clone();
        for effect in effects.iter_mut().filter(|e| e.state == EffectState::Intent) {
            let ended = self.dispatch_recorded(ctx, effect, None, record.ttl, deadline).await?;
            if let Some(after) = self.record_end(ctx, effect, &ended).await? {
                *effect = after;
            }
        }
        let result = journal_result(&effects).unwrap_or_else(|| {
            SubtaskResult::failed(FailureKind::Internal, "the journal emptied while the subtask was re-run")
        });
        let tools_used: Vec<String> = effects.iter().map(|e| e.tool.clone()).collect();
        let submitted = matches!(result, SubtaskResult::Submitted { .. });
        let outcome = self
            .finish(&ctx.conversation_id, &ctx.subtask_id, result, Usage::default(), &tools_used, Some(record))
            .await?;
        if submitted {
            self.schedule_confirm(record, 0).await;
        }
        Ok(outcome)
    }

    /// Replays the journal's entries of a terminal subtask whose outcome is not known, recording
    /// what they answer; one still unknown is confirmed again later (`attempt` replays so far).
    async fn confirm_effects(
        &self,
        record: &SubtaskRecord,
        customer_id: &str,
        attempt: u32,
        deadline: Instant,
    ) -> Result<bool, StoreError> {
        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: customer_id.to_owned(),
            conversation_id: record.conversation_id.clone(),
            subtask_id: record.subtask.id.clone(),
        };
        let mut still_unknown = false;
        for effect in record.effects.iter().filter(|e| e.state == EffectState::Intent) {
            let ended = self.dispatch_recorded(&ctx, effect, None, record.ttl, deadline).await?;
            if matches!(ended, EffectEnd::Unknown) {
                still_unknown = true;
            }
            self.record_end(&ctx, effect, &ended).await?;
        }
        if still_unknown {
            self.schedule_confirm(record, attempt + 1).await;
        }
        Ok(!still_unknown)
    }

    /// Sends a [`TaskMessage::Confirm`] for `record` after the confirm delay, while replays remain.
    async fn schedule_confirm(&self, record: &SubtaskRecord, attempt: u32) {
        if attempt >= self.settings.confirm_attempts {
            tracing::error!(attempt, "a side effect's outcome is still not known; it stays submitted");
            return;
        }
        let message = TaskMessage::Confirm {
            conversation_id: record.conversation_id.clone(),
            subtask_id: record.subtask.id.clone(),
            attempt,
        };
        if let Err(e) = self.queues.for_role(&record.role).send(&[message], self.settings.confirm_delay_secs).await {
            // The message that brought this subtask comes back after its visibility timeout and confirms instead.
            tracing::warn!(error = %e, "could not schedule the confirmation of a side effect");
        }
    }

    /// A [`TaskMessage::Confirm`]: learn the outcome of side effects still being confirmed.
    async fn confirm(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        attempt: u32,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let Some(conversation) = self.store.get_conversation(id).await? else {
            return Ok(Outcome::Poison(format!("unknown conversation {id}")));
        };
        let Some(record) = self.store.get_subtask(id, subtask_id).await? else {
            return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}")));
        };
        if !record.status.is_terminal() || !record.effects.iter().any(|e| e.state == EffectState::Intent) {
            return Ok(Outcome::Ignored("nothing to confirm".into()));
        }
        if self.confirm_effects(&record, &conversation.customer_id, attempt, deadline).await? {
            tracing::info!("side effects confirmed");
            Ok(Outcome::Finished(record.status))
        } else {
            Ok(Outcome::Requeued("a side effect is still being confirmed".into()))
        }
    }

    /// A [`TaskMessage::Execute`]: runs an approved side effect exactly as recorded, with its
    /// approval attached; no model is involved. Runs at most once: the call carries its journal
    /// key (the tool server returns the first answer for a repeated key) and an entry with an
    /// outcome is never dispatched again.
    async fn execute(&self, id: &ConversationId, approval_id: &str, deadline: Instant) -> Result<Outcome, StoreError> {
        let Some(approval) = self.store.get_approval(approval_id).await? else {
            return Ok(Outcome::Poison(format!("unknown approval {approval_id}")));
        };
        if &approval.conversation_id != id {
            return Ok(Outcome::Poison(format!("approval {approval_id} belongs to another conversation")));
        }
        if approval.status != ApprovalStatus::Approved {
            return Ok(Outcome::Ignored(format!("approval is {}", approval.status.code())));
        }
        let Some(record) = self.store.get_subtask(id, &approval.subtask_id).await? else {
            return Ok(Outcome::Poison(format!("unknown subtask {}", approval.subtask_id)));
        };
        let Some(effect) = record.effects.get((approval.ordinal as usize).saturating_sub(1)).cloned() else {
            return Ok(Outcome::Poison(format!("approval {approval_id} names no journal entry")));
        };
        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: approval.customer_id.clone(),
            conversation_id: id.clone(),
            subtask_id: approval.subtask_id.clone(),
        };
        if effect.state.is_final() {
            // It ran before (a duplicate message, or a crash after its outcome): close the approval the same way.
            let outcome = effect
                .outcome
                .clone()
                .unwrap_or_else(|| EffectOutcome::new(&format!("not run: {}", effect.state.code()), true));
            let status =
                if effect.state == EffectState::Done { ApprovalStatus::Executed } else { ApprovalStatus::Expired };
            self.store.finish_approval(approval_id, status, &outcome, now_ms()).await?;
            return Ok(Outcome::AlreadyFinished);
        }
        let Some(token) = approval.token.clone() else {
            return Ok(Outcome::Poison(format!("approval {approval_id} carries no token")));
        };
        tracing::info!(approval_id, order_id = %approval.action.order_id, amount_cents = approval.action.amount_cents, "running an approved side effect");
        let ended = self.dispatch_recorded(&ctx, &effect, Some(&token), record.ttl, deadline).await?;
        let (status, outcome) = match &ended {
            EffectEnd::Unknown => {
                return Ok(Outcome::Retry("the approved side effect's outcome is not known yet".into()));
            }
            EffectEnd::Recorded(outcome) => (ApprovalStatus::Executed, outcome.clone()),
            EffectEnd::Awaiting(_) => {
                (ApprovalStatus::Expired, EffectOutcome::new("the gateway asked for an approval again", true))
            }
        };
        let change = match &ended {
            EffectEnd::Recorded(outcome) => EffectChange::done(outcome.clone(), now_ms()),
            _ => EffectChange {
                state: EffectState::Expired,
                outcome: Some(outcome.clone()),
                approval_id: None,
                proposed: None,
                at_ms: now_ms(),
            },
        };
        self.store.record_effect_outcome(id, &approval.subtask_id, effect.ordinal, &change).await?;
        faults::at(CrashPoint::WorkerAfterOutcome).await;
        self.store.finish_approval(approval_id, status, &outcome, now_ms()).await?;
        tracing::info!(approval_id, ok = !outcome.is_error, "approved side effect ran");
        Ok(Outcome::Finished(record.status))
    }

    /// Dispatches a journal entry exactly as recorded (its tool, arguments and key, plus an
    /// approval token when given), replaying it while its outcome is unknown and time is left.
    /// A gateway asking for approval creates the approval (idempotently, by the entry's position).
    async fn dispatch_recorded(
        &self,
        ctx: &ToolContext,
        effect: &Effect,
        token: Option<&str>,
        ttl: i64,
        deadline: Instant,
    ) -> Result<EffectEnd, StoreError> {
        let mut args = effect.arguments.clone();
        args.insert(IDEMPOTENCY_ARGUMENT.into(), serde_json::Value::String(effect.key.clone()));
        if let Some(token) = token {
            args.insert(APPROVAL_ARGUMENT.into(), serde_json::Value::String(token.to_owned()));
        }
        let args = serde_json::Value::Object(args);
        let mut answer = Err(ToolError::Unavailable("not dispatched: no time left".into()));
        for dispatch in 0..EFFECT_DISPATCHES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || (dispatch > 0 && left < self.settings.tool_timeout / 2) {
                break;
            }
            answer = self.tools.call_tool(ctx, &effect.tool, args.clone(), self.settings.tool_timeout.min(left)).await;
            match &answer {
                Err(e) if e.is_transient() => {
                    tracing::warn!(tool = %effect.tool, ordinal = effect.ordinal, error = %e, "side effect's outcome unknown; replaying with its key");
                }
                _ => break,
            }
        }
        faults::at(CrashPoint::WorkerAfterDispatch).await;
        Ok(match answer {
            Ok(ToolOutput { text, is_error }) => EffectEnd::Recorded(EffectOutcome::new(&text, is_error)),
            Err(ToolError::ApprovalRequired(action)) => match self.ask_approval(ctx, effect, action, ttl).await? {
                Some(pending) => EffectEnd::Awaiting(pending),
                None => EffectEnd::Recorded(EffectOutcome::new(
                    "the gateway asked for an approval of an action it did not describe validly; nothing was done",
                    true,
                )),
            },
            Err(ToolError::ApprovalRefused(why)) => {
                EffectEnd::Recorded(EffectOutcome::new(&format!("the approval was refused: {why}"), true))
            }
            Err(e) if e.is_transient() => EffectEnd::Unknown,
            Err(e) => EffectEnd::Recorded(EffectOutcome::new(&format!("refused before dispatch: {e}"), true)),
        })
    }

    /// Records the approval a consent-gated side effect needs. `None` when the gateway's action
    /// is not one we can put before a person (another tool, an unsafe order id, no positive amount).
    async fn ask_approval(
        &self,
        ctx: &ToolContext,
        effect: &Effect,
        action: ProposedAction,
        ttl: i64,
    ) -> Result<Option<PendingApproval>, StoreError> {
        if action.tool != effect.tool || !is_safe_id(&action.order_id) || action.amount_cents <= 0 {
            tracing::error!(tool = %effect.tool, "the gateway's approval request does not describe this call");
            return Ok(None);
        }
        let action = ProposedAction { reason: ProposedAction::clean_reason(action.reason.as_deref()), ..action };
        let now = now_ms();
        let approval = Approval {
            id: approval_id(&ctx.conversation_id, &ctx.subtask_id, effect.ordinal),
            conversation_id: ctx.conversation_id.clone(),
            subtask_id: ctx.subtask_id.clone(),
            ordinal: effect.ordinal,
            customer_id: ctx.customer_id.clone(),
            role: ctx.role.clone(),
            action,
            status: ApprovalStatus::Pending,
            created_at_ms: now,
            expires_at_ms: now + i64::try_from(self.settings.approval_expiry.as_millis()).unwrap_or(i64::MAX / 2),
            decided_by: None,
            decided_at_ms: None,
            token: None,
            outcome: None,
            finished_at_ms: None,
            ttl,
        };
        let stored = self.store.create_approval(&approval).await?;
        if stored.created_at_ms == approval.created_at_ms {
            obs::metrics::approval_requested();
        }
        tracing::info!(
            approval_id = %stored.id,
            order_id = %stored.action.order_id,
            amount_cents = stored.action.amount_cents,
            "side effect waits for a person's approval"
        );
        Ok(Some(PendingApproval { approval_id: stored.id, action: stored.action }))
    }

    /// Writes what a dispatch ended in on its journal entry (nothing while it is unknown);
    /// answers the entry after the write.
    async fn record_end(
        &self,
        ctx: &ToolContext,
        effect: &Effect,
        ended: &EffectEnd,
    ) -> Result<Option<Effect>, StoreError> {
        let change = match ended {
            EffectEnd::Unknown => return Ok(None),
            EffectEnd::Recorded(outcome) => EffectChange::done(outcome.clone(), now_ms()),
            EffectEnd::Awaiting(pending) => EffectChange {
                state: EffectState::AwaitingApproval,
                outcome: None,
                approval_id: Some(pending.approval_id.clone()),
                proposed: Some(pending.action.clone()),
                at_ms: now_ms(),
            },
        };
        let after =
            self.store.record_effect_outcome(&ctx.conversation_id, &ctx.subtask_id, effect.ordinal, &change).await?;
        faults::at(CrashPoint::WorkerAfterOutcome).await;
        Ok(after)
    }

    /// Closes a subtask someone else was running (the deadline path, a dead letter): with what its
    /// journal says when it has side effects (done, being confirmed, waiting for approval), else
    /// with `fallback`. An intent recorded meanwhile makes it read again and decide again. Closed as
    /// being confirmed, its intents are confirmed later ([`TaskMessage::Confirm`]): the worker that
    /// recorded them may be dead, and its message, back after the visibility timeout, finds the
    /// conversation answered and does nothing.
    async fn close_open(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        fallback: SubtaskResult,
        now: i64,
    ) -> Result<bool, StoreError> {
        for _ in 0..3 {
            let Some(rec) = self.store.get_subtask(id, subtask_id).await? else { return Ok(false) };
            if rec.status.is_terminal() {
                return Ok(false);
            }
            let result = journal_result(&rec.effects).unwrap_or_else(|| fallback.clone()).bounded();
            match self.store.close_subtask(id, subtask_id, &result, rec.effects.len(), now).await? {
                CloseOutcome::Recorded(_) => {
                    obs::metrics::subtask_finished(&result);
                    if rec.effects.iter().any(|e| e.state == EffectState::Intent) {
                        self.schedule_confirm(&rec, 0).await;
                    }
                    return Ok(true);
                }
                CloseOutcome::AlreadyFinished(_) | CloseOutcome::Missing => return Ok(false),
                CloseOutcome::JournalChanged => continue,
            }
        }
        Err(StoreError::Transient(format!("the journal of {subtask_id} kept changing while it was closed")))
    }
    /// Records a terminal result (conditionally), counts it exactly once and releases dependents.
    async fn finish(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: SubtaskResult,
        usage: Usage,
        tools_used: &[String],
        known: Option<&SubtaskRecord>,
    ) -> Result<Outcome, StoreError> {
        let status = result.status();
        let result = result.bounded();
        match self.store.record_result(id, subtask_id, &result, &usage, tools_used, now_ms()).await? {
            RecordOutcome::Missing => Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
            RecordOutcome::AlreadyFinished(rec) => {
                self.count_and_release(id, &rec).await?;
                Ok(Outcome::AlreadyFinished)
            }
            RecordOutcome::Recorded(written) => {
                obs::metrics::subtask_finished(&result);
                faults::at(CrashPoint::WorkerAfterRecordResult).await;
                if let SubtaskResult::Failed { kind, reason } = &result {
                    tracing::warn!(kind = kind.code(), reason = %reason, "subtask failed");
                }
                tracing::info!(
                    status = status.as_str(),
                    tool_calls = tools_used.len(),
                    tokens = usage.total_tokens(),
                    "subtask finished"
                );
                // The record this attempt started from knows the dependents; a dead letter
                // (no attempt) counts the record as written.
                let rec = match known {
                    Some(r) => SubtaskRecord { usage, ..r.clone() },
                    None => written,
                };
                self.count_and_release(id, &rec).await?;
                Ok(Outcome::Finished(status))
            }
        }
    }

    /// Exactly-once count of a finished subtask, then the release of its dependents.
    /// Safe to repeat: counting is guarded by the finished set, release by conditional flips.
    async fn count_and_release(&self, id: &ConversationId, rec: &SubtaskRecord) -> Result<(), StoreError> {
        let mut stack = vec![rec.clone()];
        while let Some(done) = stack.pop() {
            match self.store.count_finished(id, &done.subtask.id, &done.usage).await? {
                CountOutcome::Counted { remaining } => {
                    tracing::info!(subtask_id = %done.subtask.id, remaining, "subtask counted");
                }
                CountOutcome::AlreadyCounted => {
                    tracing::debug!(subtask_id = %done.subtask.id, "already counted");
                }
                CountOutcome::Missing => return Ok(()),
            }
            faults::at(CrashPoint::WorkerAfterCount).await;
            if done.dependents.is_empty() {
                continue;
            }
            // Consistent read of the siblings after our own result is written.
            let all = self.store.list_subtasks(id).await?;
            for decision in release_decisions(&all, &done.subtask.id) {
                match decision {
                    Release::Enqueue(sid) => {
                        let role = all.iter().find(|r| r.subtask.id == sid).map(|r| r.role.clone()).unwrap_or_default();
                        if self.queues.has_own_queue(&role) {
                            // Enqueued at planning; it waits for its dependencies on its own queue.
                            continue;
                        }
                        // The message goes first, the flip after it: a dependent is never QUEUED without a
                        // message. A failed send leaves it PENDING, and this message's retry releases it; a
                        // crash between the two leaves a PENDING dependent with its message, which runs it
                        // (a worker starts PENDING subtasks too). Two parents finishing at the same instant
                        // may both send: the second message is a duplicate delivery, absorbed like any other.
                        if let Err(e) = self.queues.for_role(&role).send(&[TaskMessage::run(id, &sid)], 0).await {
                            return Err(StoreError::Transient(format!("could not enqueue dependent {sid}: {e}")));
                        }
                        faults::at(CrashPoint::WorkerAfterReleaseSend).await;
                        let flipped = self
                            .store
                            .transition_subtask(id, &sid, &[SubtaskStatus::Pending], SubtaskStatus::Queued)
                            .await?;
                        tracing::info!(dependent = %sid, flipped, "dependent released");
                    }
                    Release::Skip(sid, dependency) => {
                        let result = SubtaskResult::Skipped { dependency };
                        match self.store.record_result(id, &sid, &result, &Usage::default(), &[], now_ms()).await? {
                            RecordOutcome::Recorded(r) => {
                                obs::metrics::subtask_finished(&result);
                                stack.push(r);
                            }
                            RecordOutcome::AlreadyFinished(r) => stack.push(r),
                            RecordOutcome::Missing => {}
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The deadline path: a conversation past its deadline is aggregated with what it has.
    ///
    /// - `PLANNING` (its creator died): failed cleanly.
    /// - `RUNNING`: open subtasks are closed (failed, or skipped after a failed dependency) and every
    ///   finished subtask counted. When that brought `remaining` to 0 the stream triggers the
    ///   aggregator; when `remaining` was already 0 (the stream record was lost, or an earlier run of
    ///   this path closed the subtasks and nothing answered since) this path aggregates itself.
    /// - `AGGREGATING`: an aggregation whose lease expired (its holder died) is taken over.
    ///
    /// Aggregating here takes the aggregation lease like the aggregator and writes the model-free
    /// reply. With `rearm`, a conversation this run leaves non-terminal gets its next deadline
    /// message ([`WorkerSettings::rearm_secs`]): the path ends only when the conversation does. The
    /// sweep runs it without `rearm` (the sweep itself comes back).
    ///
    /// Answers the outcome and, when this run moved the conversation on, what it did (counted in
    /// `swarm_deadline_expired`; the sweep counts it by action too).
    async fn deadline(
        &self,
        id: &ConversationId,
        rearm: bool,
    ) -> Result<(Outcome, Option<DeadlineAction>), StoreError> {
        let Some(conversation) = self.store.get_conversation(id).await? else {
            return Ok((Outcome::Poison(format!("unknown conversation {id}")), None));
        };
        if conversation.status.is_terminal() {
            return Ok((Outcome::Ignored("conversation already over".into()), None));
        }
        if !rearm {
            // The sweep runs outside the conversation's trace: its span points at it.
            obs::context::link_current(conversation.trace_parent.as_deref());
        }
        let now = now_ms();
        if now < conversation.deadline_ms {
            if !rearm {
                return Ok((Outcome::Ignored("deadline not reached yet".into()), None));
            }
            // SQS delays are at most 15 minutes: re-arm for the rest.
            let left = ((conversation.deadline_ms - now) / 1000 + 1).clamp(1, i64::from(MAX_DELAY_SECONDS)) as u32;
            let outcome = match self.arm(id, left).await {
                Ok(()) => Outcome::Ignored("deadline not reached yet; re-armed".into()),
                Err(e) => Outcome::Retry(format!("could not re-arm the deadline: {e}")),
            };
            return Ok((outcome, None));
        }
        tracing::Span::current().record("status", conversation.status.as_str());
        let (outcome, action) = match conversation.status {
            ConversationStatus::Planning => {
                tracing::warn!("planning never finished: failing the conversation");
                if self.store.fail_conversation(id, "planning did not finish before the deadline").await? {
                    obs::metrics::conversation_finished(
                        ConversationStatus::Failed,
                        conversation.created_at_ms,
                        now_ms(),
                    );
                    (Outcome::Finished(SubtaskStatus::Failed), Some(DeadlineAction::Failed))
                } else {
                    (Outcome::Ignored("planning moved on meanwhile".into()), None)
                }
            }
            ConversationStatus::Running => {
                let closed = self.close_open_subtasks(id, now).await?;
                faults::at(CrashPoint::DeadlineAfterClose).await;
                let remaining = self.store.get_conversation(id).await?.map_or(0, |c| c.remaining);
                if closed > 0 {
                    tracing::warn!(closed, remaining, "deadline passed: open subtasks closed as failed");
                    (
                        Outcome::Ignored(format!("{closed} open subtasks closed; the aggregator answers")),
                        Some(DeadlineAction::Closed),
                    )
                } else if remaining == 0 {
                    tracing::warn!("nothing open and nothing answered: aggregating with what it has");
                    self.aggregate_without_model(&conversation).await?
                } else {
                    (Outcome::Ignored(format!("{remaining} subtasks still uncounted")), None)
                }
            }
            ConversationStatus::Aggregating => self.aggregate_without_model(&conversation).await?,
            ConversationStatus::Done | ConversationStatus::Failed | ConversationStatus::Handoff => {
                (Outcome::Ignored("conversation already over".into()), None)
            }
        };
        if action.is_some() {
            obs::metrics::deadline_expired();
        }
        let over = matches!(outcome, Outcome::Finished(_) | Outcome::Poison(_));
        if rearm && !over {
            if let Err(e) = self.arm(id, self.settings.rearm_secs).await {
                return Ok((Outcome::Retry(format!("could not re-arm the deadline: {e}")), action));
            }
            tracing::info!(delay_secs = self.settings.rearm_secs, "conversation not over yet: deadline path re-armed");
        }
        Ok((outcome, action))
    }

    /// Sends the conversation's next deadline message, `delay` seconds from now.
    async fn arm(&self, id: &ConversationId, delay: u32) -> Result<(), QueueError> {
        let message = TaskMessage::Deadline { conversation_id: id.clone() };
        self.queues.default_queue().send(&[message], delay.min(MAX_DELAY_SECONDS)).await
    }

    /// Closes every open subtask (skipped after a failed dependency, else failed for the deadline)
    /// and counts every finished one (a crash may have left some uncounted). Answers how many
    /// subtasks this call closed.
    async fn close_open_subtasks(&self, id: &ConversationId, now: i64) -> Result<usize, StoreError> {
        let all = self.store.list_subtasks(id).await?;
        let mut closed = 0;
        // Everything still open fails — unless its journal holds side effects: those are reported as they
        // stand (done, being confirmed, waiting for approval), never as not done.
        for rec in all.iter().filter(|r| !r.status.is_terminal()) {
            let result = match dependency_results(rec, &all) {
                DependencyState::Failed(dependency) => SubtaskResult::Skipped { dependency },
                _ => SubtaskResult::failed(
                    FailureKind::DeadlinePassed,
                    "the conversation's deadline passed before it finished",
                ),
            };
            if self.close_open(id, &rec.subtask.id, result, now).await? {
                closed += 1;
            }
        }
        for rec in self.store.list_subtasks(id).await? {
            self.store.count_finished(id, &rec.subtask.id, &Usage::default()).await?;
        }
        Ok(closed)
    }

    /// Answers the conversation with the model-free reply, through the aggregation lease: from
    /// `RUNNING` with nothing remaining, or taking over an aggregation whose lease expired; never
    /// while another holder's lease is live.
    /// Answers what it did when it answered ([`DeadlineAction::Aggregated`], or `TakenOver` from an
    /// expired holder).
    async fn aggregate_without_model(
        &self,
        conversation: &Conversation,
    ) -> Result<(Outcome, Option<DeadlineAction>), StoreError> {
        let id = &conversation.id;
        let holder = format!("deadline:{}", uuid::Uuid::now_v7());
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(self.settings.aggregation_lease.as_millis()).unwrap_or(i64::MAX));
        let phase = LeasePhase::Aggregating { turn: conversation.turn };
        let action = match self.store.acquire_lease(id, phase, &holder, now, until).await? {
            LeaseOutcome::Acquired { taken_over: None } => DeadlineAction::Aggregated,
            LeaseOutcome::Acquired { taken_over: Some(lease) } => {
                tracing::warn!(expired_holder = %lease.holder, "aggregation lease expired: taking over");
                obs::metrics::lease_taken_over(LeaseKind::Aggregating);
                DeadlineAction::TakenOver
            }
            LeaseOutcome::Held(lease) => {
                let why = format!(
                    "aggregation lease held by {} for {} ms more",
                    lease.holder,
                    lease.until_ms.saturating_sub(now)
                );
                return Ok((Outcome::Ignored(why), None));
            }
            LeaseOutcome::NotInPhase { status, remaining } => {
                return Ok((Outcome::Ignored(format!("conversation is {status} with {remaining} remaining")), None));
            }
            LeaseOutcome::Missing => return Ok((Outcome::Poison(format!("unknown conversation {id}")), None)),
        };
        faults::at(CrashPoint::AggregatorAfterFlip).await;
        let all = self.store.list_subtasks(id).await?;
        let handoff = swarm_core::handoff::handoff_reason(conversation, &all)
            .map(|reason| swarm_core::domain::Handoff { reason, at_ms: now_ms() });
        let mut notes = conversation.notes.clone();
        if handoff.is_some() {
            notes.push(swarm_core::reply::HANDOFF_NOTE.to_owned());
        }
        let reply = truncate_bytes(&compose_reply(&reply_input(&all, &notes)), MAX_REPLY_BYTES);
        let finished = match &handoff {
            Some(h) => self.store.hand_off(id, &reply, &Usage::default(), h).await?,
            None => self.store.finish_conversation(id, &reply, &Usage::default()).await?,
        };
        tracing::warn!(
            finished,
            handoff = handoff.is_some(),
            "conversation answered by the deadline path (model-free reply)"
        );
        if !finished {
            return Ok((Outcome::Ignored("another aggregation answered first".into()), None));
        }
        obs::metrics::reply_written(false);
        let status = if handoff.is_some() { ConversationStatus::Handoff } else { ConversationStatus::Done };
        obs::metrics::conversation_finished(status, conversation.created_at_ms, now_ms());
        obs::metrics::conversation_cost(&conversation.usage);
        if let Some(h) = &handoff {
            obs::metrics::handoff(h.reason);
        }
        Ok((Outcome::Finished(SubtaskStatus::Succeeded), Some(action)))
    }

    /// One sweep: every conversation past its deadline that is not terminal (the sparse, sharded
    /// index), its deadline path run (without re-arming), `max_parallel` at a time, until `deadline`.
    pub async fn sweep(&self, deadline: Instant) -> SweepReport {
        obs::metrics::sweep_ran();
        let now = now_ms();
        let mut report = SweepReport::default();
        let mut due = Vec::new();
        for shard in 0..self.settings.sweep.shards {
            match self.store.overdue_conversations(shard, now, self.settings.sweep.per_shard).await {
                Ok(ids) => due.extend(ids),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "sweep: reading a shard of the index failed");
                    report.errors += 1;
                }
            }
        }
        report.found = due.len();
        let runs = futures::stream::iter(due.into_iter().map(|id| async move {
            let span = tracing::info_span!(
                "sweep",
                otel.name = "sweep conversation",
                conversation_id = %id,
                status = tracing::field::Empty
            );
            tokio::time::timeout_at(deadline, self.deadline(&id, false).instrument(span)).await
        }))
        .buffer_unordered(self.settings.sweep.max_parallel);
        let outcomes: Vec<_> = runs.collect().await;
        for outcome in outcomes {
            let counted = match outcome {
                Err(_) => {
                    report.unfinished += 1;
                    SweepOutcome::CutOff
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "sweep: a deadline path failed");
                    report.errors += 1;
                    SweepOutcome::Error
                }
                Ok(Ok((Outcome::Finished(_), action))) => {
                    report.answered += 1;
                    action.map_or(SweepOutcome::Untouched, SweepOutcome::Moved)
                }
                Ok(Ok((_, action))) => {
                    report.moved += 1;
                    action.map_or(SweepOutcome::Untouched, SweepOutcome::Moved)
                }
            };
            obs::metrics::sweep_conversation(counted);
        }
        self.gauge_approvals(now).await;
        tracing::info!(?report, "sweep done");
        report
    }

    /// Sets the approvals-waiting gauges (how many, the oldest's age) from the newest
    /// [`SWEEP_APPROVALS_READ`] approvals: the sweep runs every minute, so the alarm on the oldest
    /// one's age never depends on an operator looking. A failed read leaves the gauges as they were.
    async fn gauge_approvals(&self, now: i64) {
        match self.store.list_approvals(SWEEP_APPROVALS_READ).await {
            Ok(all) => {
                let pending: Vec<_> =
                    all.iter().filter(|a| a.status_at(now) == swarm_core::approval::ApprovalStatus::Pending).collect();
                let oldest = pending.iter().map(|a| a.created_at_ms).min().map_or(0, |t| (now - t).max(0));
                obs::metrics::approvals_waiting(
                    pending.len(),
                    Duration::from_millis(u64::try_from(oldest).unwrap_or(0)),
                );
            }
            Err(e) => tracing::warn!(error = %e, "sweep: reading the approvals failed; their gauges are not updated"),
        }
    }

    /// Makes a message reported in `batchItemFailures` visible again after
    /// [`WorkerSettings::retry_visibility_secs`] rather than the queue's visibility timeout.
    /// `queue` is the message's queue name (the end of its `eventSourceARN`); a queue this worker does
    /// not send to (a DLQ) keeps its own timeout. A failure is logged: the message then comes back
    /// after the queue's visibility timeout, and the sweep covers its conversation.
    pub async fn retry_later(&self, queue: &str, receipt_handle: &str) {
        let Some(q) = self.queues.by_name(queue) else {
            tracing::debug!(queue, "not a tasks queue: the message keeps the queue's visibility timeout");
            return;
        };
        if let Err(e) = q.change_visibility(receipt_handle, self.settings.retry_visibility_secs).await {
            tracing::warn!(queue, error = %e, "ChangeMessageVisibility failed: the message returns after the queue's visibility timeout");
        }
    }

    /// The LLM ↔ tool loop. Every assistant tool call gets exactly one tool
    /// message, in call order, whatever happens to the call.
    async fn tool_loop(
        &self,
        ctx: &ToolContext,
        record: &SubtaskRecord,
        attempt: &Attempt,
        state: &mut LoopState,
        deadline: Instant,
    ) -> LoopEnd {
        let tools: Vec<ToolSpec> = if record.subtask.tools.is_empty() {
            Vec::new()
        } else {
            let listed = match tokio::time::timeout_at(deadline, self.tools.list_tools(ctx)).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) if e.is_transient() => {
                    tracing::warn!(error = %e, "tool list unavailable");
                    return LoopEnd::Done(SubtaskResult::failed(
                        FailureKind::ToolsUnavailable,
                        format!("the tool gateway is unavailable: {e}"),
                    ));
                }
                Ok(Err(e)) => {
                    return LoopEnd::Done(SubtaskResult::failed(
                        FailureKind::ToolsRefused,
                        format!("the tool gateway refused: {e}"),
                    ));
                }
                Err(_) => return LoopEnd::OutOfTime,
            };
            // The plan's allowlist narrows the role's tools; the gateway's allowlist is the hard limit.
            let wanted: HashSet<&str> = record.subtask.tools.iter().map(String::as_str).collect();
            listed.into_iter().filter(|t| wanted.contains(t.name.as_str())).collect()
        };
        let allowed: HashMap<&str, &ToolSpec> = tools.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut shrinks_left = MAX_SHRINKS;
        let mut shrunk_for_length = false;
        let mut round = 0;
        while round < self.settings.max_rounds {
            if deadline.saturating_duration_since(Instant::now()) < self.settings.min_round_time {
                return LoopEnd::OutOfTime;
            }
            let last_round = round + 1 == self.settings.max_rounds;
            if estimate_tokens(&state.messages) > self.settings.compress_above_tokens
                && let Err(end) = self.compress(state, deadline).await
            {
                return end;
            }
            if let Err(e) = check_pairing(&state.messages) {
                return LoopEnd::Done(SubtaskResult::failed(
                    FailureKind::Internal,
                    format!("internal transcript error: {e}"),
                ));
            }
            // The tools travel on every round, the last one included: providers refuse tool history
            // without tool definitions, so the last round forbids calls instead of removing tools.
            let request = ChatRequest {
                purpose: Purpose::Work,
                messages: state.messages.clone(),
                tools: tools.clone(),
                max_tokens: Some(WORK_ANSWER_TOKENS),
                tool_choice: if last_round { ToolChoice::None } else { ToolChoice::Auto },
            };
            let response = match complete_with_retry(self.model.as_ref(), &request, &self.settings.retry, deadline)
                .await
            {
                Ok(r) => r,
                Err(CallError::OutOfTime { .. }) => return LoopEnd::OutOfTime,
                Err(CallError::Failed(e @ LlmError::ContextLength { .. })) => {
                    // Never the same request again: shorter, or not at all.
                    match self.shrink(state, &mut shrinks_left, deadline).await {
                        Ok(true) => continue,
                        Ok(false) => {
                            return LoopEnd::Done(SubtaskResult::failed(
                                FailureKind::ModelFailed,
                                format!(
                                    "the request is larger than the model's context and cannot be shortened further: {e}"
                                ),
                            ));
                        }
                        Err(end) => return end,
                    }
                }
                Err(CallError::Failed(e)) => {
                    tracing::warn!(error = %e, "language model failed");
                    return LoopEnd::Done(SubtaskResult::failed(
                        FailureKind::ModelFailed,
                        format!("the language model failed: {e}"),
                    ));
                }
            };
            state.usage = state.usage.add(&response.usage);
            round += 1;
            let cut_off = response.finish_reason == FinishReason::Length;
            if response.tool_calls.is_empty() {
                if cut_off {
                    // Still cut after the client's retry with a larger limit: never a final answer.
                    // Shorter history leaves more room once; after that, the facts found so far.
                    if !shrunk_for_length {
                        shrunk_for_length = true;
                        match self.shrink(state, &mut shrinks_left, deadline).await {
                            Ok(true) => continue,
                            Ok(false) => {}
                            Err(end) => return end,
                        }
                    }
                    tracing::warn!("the model's answer was cut off by its output limit (finish_reason length)");
                    return LoopEnd::Done(partial_result(
                        state,
                        FailureKind::NoAnswer,
                        "the model's answer was cut off by its output limit",
                    ));
                }
                let text = response.content.as_deref().map(|t| clean_text(t, MAX_RESULT_CHARS)).unwrap_or_default();
                if text.trim().is_empty() {
                    return LoopEnd::Done(SubtaskResult::failed(
                        FailureKind::NoAnswer,
                        format!("the model returned no answer (finish_reason {:?})", response.finish_reason),
                    ));
                }
                return LoopEnd::Done(SubtaskResult::Succeeded { text, tool_calls: state.tool_calls.clone() });
            }
            // Missing, empty or repeated ids are made unique before anything runs: every call gets one answer.
            let mut tool_calls = response.tool_calls.clone();
            let repaired = unique_tool_call_ids(&mut tool_calls, round);
            if repaired > 0 {
                tracing::warn!(repaired, "the model's tool calls had missing or repeated ids; made unique");
            }
            state.messages.push(ChatMessage::Assistant {
                content: response.content.clone(),
                tool_calls: tool_calls.clone(),
                reasoning_content: response.reasoning_content.clone(),
            });
            // Checked in call order first, so the side-effecting calls' positions (their keys) never depend on timing.
            let prepared = self.prepare_calls(&allowed, &tool_calls, cut_off, &mut state.effects);
            let calls: Vec<_> = tool_calls
                .iter()
                .zip(prepared)
                .map(|(call, prepared)| {
                    let allowed = &allowed;
                    async move {
                        // The model wrote the name: a span names only a tool this subtask may call. The
                        // span starts when the call does, not while it waits for a free slot.
                        let tool =
                            if allowed.contains_key(call.name.as_str()) { call.name.as_str() } else { "not_allowed" };
                        let span = obs::spans::tool_call(tool, &ctx.role);
                        self.run_prepared(ctx, attempt, call, prepared, deadline).instrument(span).await
                    }
                })
                .collect();
            // Concurrent, at most `max_parallel_tool_calls` at once, answered in call order.
            let ends: Vec<CallEnd> =
                futures::stream::iter(calls).buffered(self.settings.max_parallel_tool_calls).collect().await;
            let abandoned = ends.iter().find_map(|e| e.abandoned.clone());
            let approvals: Vec<PendingApproval> = ends.iter().filter_map(|e| e.approval.clone()).collect();
            let unknown: Vec<String> = ends.iter().filter(|e| e.unknown).map(|e| e.record.name.clone()).collect();
            let (mut contents, records): (Vec<String>, Vec<ToolCallRecord>) =
                ends.into_iter().map(|e| (e.content, e.record)).unzip();
            let cut = fit_round(&mut contents, self.settings.round_budget_tokens);
            if cut > 0 {
                tracing::info!(
                    cut,
                    budget_tokens = self.settings.round_budget_tokens,
                    "tool results cut to fit the round's budget"
                );
            }
            for ((call, content), rec) in tool_calls.iter().zip(contents).zip(records) {
                state.messages.push(ChatMessage::Tool { tool_call_id: call.id.clone(), content });
                state.tool_calls.push(rec);
            }
            if let Some(why) = abandoned {
                return LoopEnd::Abandoned(why);
            }
            // A side effect waiting for a person or being confirmed ends the step: the model is not
            // given another round in which to try it differently.
            if !approvals.is_empty() {
                return LoopEnd::Done(SubtaskResult::AwaitingApproval { approvals });
            }
            if !unknown.is_empty() {
                return LoopEnd::Done(SubtaskResult::Submitted { tools: unknown });
            }
        }
        LoopEnd::Done(SubtaskResult::failed(
            FailureKind::NoAnswer,
            format!("no answer after {} rounds", self.settings.max_rounds),
        ))
    }

    /// Shortens the transcript to about half: the latest round's tool results are cut to half
    /// their size (fairly, each saying so) and older rounds summarised as needed. `Ok(false)` when
    /// nothing could be shortened or the shrinks are used up; the transcript is then unchanged.
    async fn shrink(&self, state: &mut LoopState, shrinks_left: &mut u32, deadline: Instant) -> Result<bool, LoopEnd> {
        if *shrinks_left == 0 {
            return Ok(false);
        }
        *shrinks_left -= 1;
        let before = state.messages.clone();
        let total = estimate_tokens(&state.messages);
        let (round_tokens, _) = latest_round(&state.messages);
        let cut = shrink_latest_round(&mut state.messages, round_tokens / 2);
        self.compress_to(state, (total / 2).max(1), deadline).await?;
        let changed = state.messages != before;
        tracing::info!(
            before_tokens = total,
            after_tokens = estimate_tokens(&state.messages),
            latest_round_cut = cut,
            changed,
            "transcript shortened"
        );
        Ok(changed)
    }

    async fn compress(&self, state: &mut LoopState, deadline: Instant) -> Result<(), LoopEnd> {
        self.compress_to(state, self.settings.compress_above_tokens, deadline).await
    }

    async fn compress_to(&self, state: &mut LoopState, budget: u64, deadline: Instant) -> Result<(), LoopEnd> {
        match compress(&state.messages, WORK_LEADING_MESSAGES, budget, self.sub_model.as_ref(), deadline).await {
            Ok(messages) => {
                state.messages = messages;
                Ok(())
            }
            Err(CallError::OutOfTime { .. }) => Err(LoopEnd::OutOfTime),
            Err(CallError::Failed(e)) => Err(LoopEnd::Done(SubtaskResult::failed(
                FailureKind::ModelFailed,
                format!("context compression failed: {e}"),
            ))),
        }
    }

    /// Checks each call of one answer, in call order: refused calls get their tool message now;
    /// the side-effecting ones that will run get their positions in the journal (`effects` counts
    /// the journal's entries), so the same answer always gives the same keys.
    fn prepare_calls(
        &self,
        allowed: &HashMap<&str, &ToolSpec>,
        calls: &[ToolCall],
        truncated: bool,
        effects: &mut usize,
    ) -> Vec<Prepared> {
        calls
            .iter()
            .map(|call| {
                // The name is model output: kept verbatim only when it is a tool this subtask may call.
                let name =
                    if allowed.contains_key(call.name.as_str()) { call.name.clone() } else { safe_id(&call.name) };
                let refuse = |why: String| {
                    let content = serde_json::json!({ "error": why }).to_string();
                    Prepared::Refused(content, ToolCallRecord { name: name.clone(), ok: false, error: Some(why) })
                };
                if truncated {
                    return refuse("the model's answer was cut off (finish_reason length) before this call was complete; it was not executed".into());
                }
                let Some(spec) = allowed.get(call.name.as_str()) else {
                    return refuse(format!("tool {name} is not available to this subtask"));
                };
                let args = match parse_tool_arguments(&call.arguments) {
                    Ok(a) => serde_json::Value::Object(a),
                    Err(e) => return refuse(format!("the arguments are not valid JSON ({e}); the call was not executed")),
                };
                match self.schema_error(spec, &args) {
                    Ok(None) => {}
                    Ok(Some(err)) => {
                        return refuse(format!(
                            "the arguments do not match the tool's schema ({err}); the call was not executed"
                        ));
                    }
                    Err(err) => {
                        return refuse(format!(
                            "the tool's argument schema does not compile ({err}), so the arguments cannot be checked; the call was not executed"
                        ));
                    }
                }
                if !spec.side_effecting {
                    return Prepared::Ready { args, effect: None };
                }
                if args.to_string().len() > MAX_EFFECT_ARGUMENT_BYTES {
                    return refuse(format!(
                        "the arguments of {name} are larger than {MAX_EFFECT_ARGUMENT_BYTES} bytes; the call was not executed"
                    ));
                }
                if *effects >= MAX_EFFECTS_PER_SUBTASK {
                    return refuse(format!(
                        "this step may make at most {MAX_EFFECTS_PER_SUBTASK} calls with side effects; this one was not executed"
                    ));
                }
                *effects += 1;
                Prepared::Ready { args, effect: Some(u32::try_from(*effects).unwrap_or(u32::MAX)) }
            })
            .collect()
    }

    /// Runs one prepared call; always ends with the tool message content and its record.
    async fn run_prepared(
        &self,
        ctx: &ToolContext,
        attempt: &Attempt,
        call: &ToolCall,
        prepared: Prepared,
        deadline: Instant,
    ) -> CallEnd {
        let (args, effect) = match prepared {
            Prepared::Refused(content, record) => return CallEnd::answered(content, record),
            Prepared::Ready { args, effect } => (args, effect),
        };
        let refuse = |why: String| {
            obs::spans::record_tool_outcome(&tracing::Span::current(), "refused");
            let content = serde_json::json!({ "error": why }).to_string();
            CallEnd::answered(content, ToolCallRecord { name: call.name.clone(), ok: false, error: Some(why) })
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return refuse("no time left to call the tool".into());
        }
        if let Some(ordinal) = effect {
            return self.run_effect(ctx, attempt, call, args, ordinal, deadline).await;
        }
        match self.tools.call_tool(ctx, &call.name, args, self.settings.tool_timeout.min(left)).await {
            Ok(out) => {
                let outcome = if out.is_error { "tool_error" } else { "ok" };
                obs::spans::record_tool_outcome(&tracing::Span::current(), outcome);
                let text = truncate_chars(&out.text, self.settings.max_tool_output_chars);
                let rec = ToolCallRecord {
                    name: call.name.clone(),
                    ok: !out.is_error,
                    error: out.is_error.then(|| truncate_chars(&out.text, 200)),
                };
                CallEnd::answered(text, rec)
            }
            Err(e) => {
                tracing::warn!(tool = %call.name, error = %e, "tool call failed");
                obs::spans::record_tool_outcome(&tracing::Span::current(), "unavailable");
                let why = format!("the tool call failed: {e}");
                let content = serde_json::json!({ "error": why }).to_string();
                CallEnd::answered(content, ToolCallRecord { name: call.name.clone(), ok: false, error: Some(why) })
            }
        }
    }

    /// One side-effecting call: its intent into the journal (conditional on the subtask being open
    /// and this attempt holding its lease), the dispatch with its positional key, its outcome into
    /// the journal. A refused intent means someone else closed or took over the subtask: nothing
    /// is dispatched and the loop stops.
    async fn run_effect(
        &self,
        ctx: &ToolContext,
        attempt: &Attempt,
        call: &ToolCall,
        args: serde_json::Value,
        ordinal: u32,
        deadline: Instant,
    ) -> CallEnd {
        let serde_json::Value::Object(arguments) = args else {
            return CallEnd::answered(
                serde_json::json!({ "error": "the arguments are not a JSON object" }).to_string(),
                ToolCallRecord { name: call.name.clone(), ok: false, error: Some("arguments not an object".into()) },
            );
        };
        let fresh = Effect::intent(&ctx.conversation_id, &ctx.subtask_id, ordinal, &call.name, arguments, now_ms());
        let stop = |why: String| CallEnd {
            content: serde_json::json!({ "error": "not executed: this step was closed" }).to_string(),
            record: ToolCallRecord { name: call.name.clone(), ok: false, error: Some("not executed".into()) },
            approval: None,
            unknown: false,
            abandoned: Some(why),
        };
        let effect =
            match self.store.record_intent(&ctx.conversation_id, &ctx.subtask_id, &attempt.holder, &fresh).await {
                Ok(IntentOutcome::Recorded) => fresh,
                Ok(IntentOutcome::Existing(existing)) => existing,
                Ok(IntentOutcome::Closed(_)) => return stop("the subtask was closed before its side effect".into()),
                Ok(IntentOutcome::LeaseLost) => return stop("another attempt took the subtask over".into()),
                Ok(IntentOutcome::Missing) => return stop("the subtask vanished".into()),
                Err(e) => return stop(format!("the side effect's intent could not be recorded: {e}")),
            };
        faults::at(CrashPoint::WorkerAfterIntent).await;
        tracing::info!(tool = %effect.tool, ordinal, "side effect dispatched");
        let ended = match self.dispatch_recorded(ctx, &effect, None, attempt.ttl, deadline).await {
            Ok(ended) => ended,
            Err(e) => return stop(format!("the side effect's approval could not be recorded: {e}")),
        };
        if let Err(e) = self.record_end(ctx, &effect, &ended).await {
            // Left as an intent: a redelivery replays it with the same key and learns its outcome.
            return stop(format!("the side effect's outcome could not be recorded: {e}"));
        }
        let name = call.name.clone();
        let span_outcome = match &ended {
            EffectEnd::Recorded(outcome) if !outcome.is_error => "ok",
            EffectEnd::Recorded(_) => "tool_error",
            EffectEnd::Awaiting(_) => "awaiting_approval",
            EffectEnd::Unknown => "outcome_unknown",
        };
        obs::spans::record_tool_outcome(&tracing::Span::current(), span_outcome);
        match ended {
            EffectEnd::Recorded(outcome) => {
                let text = truncate_chars(&outcome.text, self.settings.max_tool_output_chars);
                let record = ToolCallRecord {
                    name,
                    ok: !outcome.is_error,
                    error: outcome.is_error.then(|| truncate_chars(&outcome.text, 200)),
                };
                CallEnd::answered(text, record)
            }
            EffectEnd::Awaiting(pending) => CallEnd {
                content: serde_json::json!({
                    "status": "awaiting_approval",
                    "message": "This needs a person's approval first and was not done. Tell the customer it is waiting for review; do not call it again."
                })
                .to_string(),
                record: ToolCallRecord { name, ok: false, error: Some("awaiting approval".into()) },
                approval: Some(pending),
                unknown: false,
                abandoned: None,
            },
            EffectEnd::Unknown => CallEnd {
                content: serde_json::json!({
                    "status": "submitted",
                    "message": "Submitted; its result is being confirmed. Do not call it again."
                })
                .to_string(),
                record: ToolCallRecord { name, ok: false, error: Some("outcome not known yet".into()) },
                approval: None,
                unknown: true,
                abandoned: None,
            },
        }
    }

    /// The first way `args` break the tool's argument schema (`Ok(None)`: they match). `Err` when
    /// the schema does not compile: reported (a warning, once per tool and instance) and the call
    /// refused, never run unchecked.
    fn schema_error(&self, spec: &ToolSpec, args: &serde_json::Value) -> Result<Option<String>, String> {
        let validator = {
            let mut cache = self.validators.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .entry(spec.name.clone())
                .or_insert_with(|| {
                    jsonschema::validator_for(&spec.input_schema).map(Arc::new).map_err(|e| {
                        let e = e.to_string();
                        tracing::warn!(tool = %spec.name, error = %e, "the tool's input schema does not compile; its calls are refused");
                        e
                    })
                })
                .clone()?
        };
        Ok(validator.iter_errors(args).next().map(|e| e.to_string()))
    }
}

/// The span of one subtask's work: every event logged while running it carries its ids.
fn subtask_span(conversation_id: &ConversationId, subtask_id: &SubtaskId) -> tracing::Span {
    tracing::info_span!("subtask", conversation_id = %conversation_id, subtask_id = %subtask_id)
}

/// What the loop had when it had to stop (`why`: time ran out for good, the answer was cut off):
/// the outputs of the calls whose records say they succeeded, marked partial, or a failure of
/// `kind` saying why when there are none.
fn partial_result(state: &LoopState, kind: FailureKind, why: &str) -> SubtaskResult {
    let facts: Vec<&str> = tool_outcomes(&state.messages, &state.tool_calls)
        .into_iter()
        .filter(|(_, record)| record.is_some_and(|r| r.ok))
        .map(|(content, _)| content)
        .collect();
    if facts.is_empty() {
        SubtaskResult::failed(kind, format!("{why} before any result"))
    } else {
        SubtaskResult::Succeeded {
            text: format!("(partial: {why}) Facts found so far: {}", facts.join("; ")),
            tool_calls: state.tool_calls.clone(),
        }
    }
}

/// Each `tool` message of `messages` with the record of the call it answers.
///
/// The loop appends one record per answered call, in call order, together
/// with its `tool` message, and compression only replaces the oldest rounds:
/// the transcript's `tool` messages are the last ones recorded, so they pair
/// with the records from the end, by position. The call a message answers (its
/// `tool_call_id` in the assistant message before it) must name the record's
/// tool, or the message gets no record (an outcome never guessed).
fn tool_outcomes<'a>(
    messages: &'a [ChatMessage],
    records: &'a [ToolCallRecord],
) -> Vec<(&'a str, Option<&'a ToolCallRecord>)> {
    let mut calls: &[ToolCall] = &[];
    let mut answered: Vec<(&str, Option<&str>)> = Vec::new();
    for m in messages {
        match m {
            ChatMessage::Assistant { tool_calls, .. } => calls = tool_calls,
            ChatMessage::Tool { tool_call_id, content } => {
                let name = calls.iter().find(|c| &c.id == tool_call_id).map(|c| c.name.as_str());
                answered.push((content.as_str(), name));
            }
            ChatMessage::System { .. } | ChatMessage::User { .. } => calls = &[],
        }
    }
    // From the end: the last message with the last record, and so on; a message
    // older than every record (never written so) gets none.
    let mut paired: Vec<(&str, Option<&ToolCallRecord>)> = answered
        .into_iter()
        .rev()
        .zip(records.iter().rev().map(Some).chain(std::iter::repeat(None)))
        .map(|((content, name), record)| (content, record.filter(|r| name == Some(r.name.as_str()))))
        .collect();
    paired.reverse();
    paired
}

/// Where a subtask's dependencies stand.
#[derive(Debug, PartialEq, Eq)]
pub enum DependencyState {
    Ready(Vec<DependencyResult>),
    /// This dependency ended failed or skipped.
    Failed(SubtaskId),
    /// This dependency is not finished.
    Waiting(SubtaskId),
}

/// Pure: the results of `record`'s dependencies among `all`.
pub fn dependency_results(record: &SubtaskRecord, all: &[SubtaskRecord]) -> DependencyState {
    let mut out = Vec::new();
    for dep in &record.subtask.depends_on {
        let Some(r) = all.iter().find(|r| &r.subtask.id == dep) else {
            return DependencyState::Failed(dep.clone());
        };
        match &r.result {
            Some(SubtaskResult::Succeeded { text, .. }) => out.push(DependencyResult {
                id: dep.clone(),
                instruction: r.subtask.instruction.clone(),
                answer: text.clone(),
            }),
            Some(_) => return DependencyState::Failed(dep.clone()),
            None => return DependencyState::Waiting(dep.clone()),
        }
    }
    DependencyState::Ready(out)
}

/// What to do with a `PENDING` dependent once a parent finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// All its dependencies succeeded: flip `PENDING → QUEUED` and enqueue.
    Enqueue(SubtaskId),
    /// A dependency failed or was skipped: record it skipped, naming that dependency.
    Skip(SubtaskId, SubtaskId),
}

/// Pure: the dependents of `finished` that can now be decided. One whose
/// other dependencies are still open is left for the last parent to finish.
pub fn release_decisions(all: &[SubtaskRecord], finished: &SubtaskId) -> Vec<Release> {
    let by_id: HashMap<&SubtaskId, &SubtaskRecord> = all.iter().map(|r| (&r.subtask.id, r)).collect();
    let mut out = Vec::new();
    for r in all {
        if r.status != SubtaskStatus::Pending || !r.subtask.depends_on.iter().any(|d| d == finished) {
            continue;
        }
        let mut open = false;
        let mut failed = None;
        for d in &r.subtask.depends_on {
            match by_id.get(d).map(|x| x.status) {
                Some(SubtaskStatus::Succeeded) => {}
                Some(s) if s.is_terminal() => {
                    failed.get_or_insert_with(|| d.clone());
                }
                None => {
                    failed.get_or_insert_with(|| d.clone());
                }
                Some(_) => open = true,
            }
        }
        match failed {
            Some(dep) => out.push(Release::Skip(r.subtask.id.clone(), dep)),
            None if !open => out.push(Release::Enqueue(r.subtask.id.clone())),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::domain::{Conversation, Subtask};

    fn rec(id: &str, deps: &[&str], status: SubtaskStatus) -> SubtaskRecord {
        let c = Conversation::new("C1", "q", 0, 120);
        let mut r = SubtaskRecord::new(
            &c,
            Subtask {
                id: id.into(),
                instruction: id.into(),
                tools: vec![],
                depends_on: deps.iter().map(|d| (*d).into()).collect(),
            },
            "support".into(),
        );
        r.status = status;
        r.result = match status {
            SubtaskStatus::Succeeded => Some(SubtaskResult::Succeeded { text: format!("{id} ok"), tool_calls: vec![] }),
            SubtaskStatus::Failed => Some(SubtaskResult::failed(FailureKind::Internal, "x")),
            SubtaskStatus::Skipped => Some(SubtaskResult::Skipped { dependency: "y".into() }),
            _ => None,
        };
        r
    }

    #[test]
    fn settings_come_from_the_timing_table_with_the_hand_back_delay_in_whole_seconds() {
        let standard = WorkerSettings::default();
        assert_eq!((standard.max_rounds, standard.max_handbacks, standard.handback_delay_secs), (8, 1, 5));
        assert_eq!((standard.tool_timeout, standard.min_round_time), (Duration::from_secs(10), Duration::from_secs(5)));
        assert_eq!(standard.safety_margin, Duration::from_secs(3));
        assert_eq!(standard.retry, LlmRetryPolicy::default());
        let fast = WorkerSettings::from_timings(&Timings::standard().scaled(0.01));
        assert_eq!(fast.tool_timeout, Duration::from_millis(100));
        assert_eq!(fast.safety_margin, Duration::from_millis(30));
        assert_eq!(fast.handback_delay_secs, 1, "50 ms of DelaySeconds is rounded up, never down to 0");
        assert_eq!(fast.retry.base_delay, Duration::from_millis(5));
        assert_eq!(fast.max_rounds, 8);
    }

    #[test]
    fn dependent_is_released_only_when_all_parents_succeeded() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &[], Running), rec("c", &["a", "b"], Pending)];
        assert!(release_decisions(&all, &"a".into()).is_empty());
        let all = vec![rec("a", &[], Succeeded), rec("b", &[], Succeeded), rec("c", &["a", "b"], Pending)];
        assert_eq!(release_decisions(&all, &"b".into()), vec![Release::Enqueue("c".into())]);
    }

    #[test]
    fn dependent_of_a_failed_parent_is_skipped_naming_it() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Failed), rec("b", &["a"], Pending), rec("c", &["b"], Pending)];
        assert_eq!(release_decisions(&all, &"a".into()), vec![Release::Skip("b".into(), "a".into())]);
        // c waits for b's decision, not a's.
        assert!(release_decisions(&all, &"x".into()).is_empty());
    }

    #[test]
    fn already_queued_dependent_is_not_released_twice() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &["a"], Queued)];
        assert!(release_decisions(&all, &"a".into()).is_empty());
    }

    #[test]
    fn dependency_results_carry_parent_answers() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &["a"], Running)];
        match dependency_results(&all[1], &all) {
            DependencyState::Ready(d) => assert_eq!(d[0].answer, "a ok"),
            other => panic!("{other:?}"),
        }
    }

    fn assistant(calls: &[(&str, &str)]) -> ChatMessage {
        ChatMessage::Assistant {
            content: None,
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall { id: (*id).into(), name: (*name).into(), arguments: "{}".into() })
                .collect(),
            reasoning_content: None,
        }
    }

    fn answer(id: &str, content: &str) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), content: content.into() }
    }

    fn record(name: &str, ok: bool) -> ToolCallRecord {
        ToolCallRecord { name: name.into(), ok, error: (!ok).then(|| "refused".to_owned()) }
    }

    fn state(messages: Vec<ChatMessage>, tool_calls: Vec<ToolCallRecord>) -> LoopState {
        let mut all = work_messages("q", &"w01".into(), "Check A1029.", &[]);
        all.extend(messages);
        LoopState { messages: all, tool_calls, usage: Usage::default(), effects: 0 }
    }

    #[test]
    fn partial_result_keeps_what_the_records_say_succeeded_whatever_the_text() {
        let s = state(
            vec![
                assistant(&[("call_a", "shop__get_order"), ("call_b", "shop__refund")]),
                // A successful output that mentions "error", and a failed one that does not.
                answer("call_a", r#"{"order_id":"A1029","status":"PAID","error":null}"#),
                answer("call_b", "refund refused: over the limit"),
            ],
            vec![record("shop__get_order", true), record("shop__refund", false)],
        );
        let SubtaskResult::Succeeded { text, tool_calls } =
            partial_result(&s, FailureKind::OutOfTime, "ran out of time")
        else {
            panic!("facts were found")
        };
        assert_eq!(
            text,
            r#"(partial: ran out of time) Facts found so far: {"order_id":"A1029","status":"PAID","error":null}"#
        );
        assert_eq!(tool_calls.len(), 2);
    }

    #[test]
    fn partial_result_pairs_a_compressed_transcript_with_its_latest_records() {
        // Two earlier calls were compressed into a summary; their records are still kept.
        let s = state(
            vec![
                ChatMessage::User { content: "Summary of earlier steps: order A1029 is paid".into() },
                assistant(&[("call_0", "shop__get_order"), ("call_1", "shop__track_shipment")]),
                answer("call_0", "timed out"),
                answer("call_1", r#"{"carrier":"SF"}"#),
            ],
            vec![
                record("shop__get_order", true),
                record("shop__track_shipment", true),
                record("shop__get_order", false),
                record("shop__track_shipment", true),
            ],
        );
        let SubtaskResult::Succeeded { text, .. } = partial_result(&s, FailureKind::OutOfTime, "ran out of time")
        else {
            panic!("one fact was found")
        };
        assert_eq!(text, r#"(partial: ran out of time) Facts found so far: {"carrier":"SF"}"#);
    }

    #[test]
    fn partial_result_without_a_successful_record_is_out_of_time() {
        // No records at all, a record for another tool than the call named, and a failed record.
        for records in [vec![], vec![record("shop__track_shipment", true)], vec![record("shop__get_order", false)]] {
            let s = state(vec![assistant(&[("c1", "shop__get_order")]), answer("c1", r#"{"status":"PAID"}"#)], records);
            let result = partial_result(&s, FailureKind::OutOfTime, "ran out of time");
            assert_eq!(result.failure_kind(), Some(FailureKind::OutOfTime), "{result:?}");
        }
    }
}
