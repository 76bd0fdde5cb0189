//! The deadline path: a conversation past its deadline is answered with what it has — planning that never finished fails it (once its planning lease ended, closing the items of a plan never flipped), open subtasks are closed and counted, and one with nothing left open is answered with the model-free reply (through the aggregation lease, as the aggregator would); re-armed until the conversation is terminal. Its first run, when the planning lease ends (on the side effects' queue, whose worker may send to every queue), sends the subtasks of a stored plan its planner never marked sent.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::answer::{AnswerOutcome, Answerer, ModelFreeReply, answer_conversation};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, FailureKind, SubtaskResult, TaskMessage, now_ms,
};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::obs;
use swarm_core::obs::metrics::DeadlineAction;
use swarm_core::ports::{
    AccountingStore, AnswerStore, ConversationRecords, MAX_DELAY_SECONDS, QueueError, StoreError, SubtaskStore,
    TaskQueue,
};
use swarm_core::roles::{REFUND_ROLE, TaskQueues};

use super::closing::{Closed, Closing};
use crate::clock::ms_between;
use crate::dependencies::{DependencyState, dependency_results};
use crate::outcome::Outcome;
use crate::settings::WorkerSettings;

/// What one run of the deadline path did: the message's outcome and, when it moved the
/// conversation on, how (counted in `swarm_deadline_expired`; the sweep counts it by action too).
pub type DeadlineRun = (Outcome, Option<DeadlineAction>);

/// The deadline path's stores, queue and timings.
pub struct DeadlinePath {
    conversations: Arc<dyn ConversationRecords>,
    answers: Arc<dyn AnswerStore>,
    subtasks: Arc<dyn SubtaskStore>,
    accounts: Arc<dyn AccountingStore>,
    closing: Closing,
    /// Where the conversation's next deadline message goes (the default queue), and the never-sent
    /// subtasks of a role whose queue this function holds.
    queues: TaskQueues,
    /// `DelaySeconds` of the next run while the conversation is not terminal.
    rearm_secs: u32,
    /// The aggregation lease this path takes when it answers the conversation itself.
    aggregation_lease: Duration,
    /// The conversation's idle expiry a decision told after the answer refreshes.
    idle_expiry: Duration,
}

impl DeadlinePath {
    /// The path over the four store roles it uses, closing through `closing`, its deadline
    /// messages to the default queue of `queues` (never-sent subtasks to their role's queue, when
    /// held), the re-arm delay and aggregation lease of `settings`.
    pub fn new(
        conversations: Arc<dyn ConversationRecords>,
        answers: Arc<dyn AnswerStore>,
        subtasks: Arc<dyn SubtaskStore>,
        accounts: Arc<dyn AccountingStore>,
        closing: Closing,
        queues: TaskQueues,
        settings: &WorkerSettings,
    ) -> Self {
        Self {
            conversations,
            answers,
            subtasks,
            accounts,
            closing,
            queues,
            rearm_secs: settings.rearm_secs,
            aggregation_lease: settings.aggregation_lease,
            idle_expiry: settings.idle_expiry,
        }
    }

    /// The deadline path: a conversation past its deadline is aggregated with what it has.
    ///
    /// - `PLANNING` (its creator died): failed cleanly once its planning lease ended ([`Self::fail_unplanned`]).
    /// - `RUNNING`: open subtasks are closed (failed, or skipped after a failed dependency) and every
    ///   finished subtask counted. When that brought `remaining` to 0 the stream triggers the
    ///   aggregator; when `remaining` was already 0 (the stream record was lost, or an earlier run of
    ///   this path closed the subtasks and nothing answered since) this path aggregates itself.
    /// - `AGGREGATING`: an aggregation whose lease expired (its holder died) is taken over.
    ///
    /// Aggregating here answers the conversation as the aggregator does ([`answer_conversation`])
    /// with the model-free reply. With `rearm`, a conversation this run leaves non-terminal gets
    /// its next deadline message (`rearm_secs`): the path ends only when the conversation does.
    /// The sweep runs it without `rearm` (the sweep itself comes back) and without a `turn` (the
    /// conversation's current one); a deadline message runs it for its own `turn`: a message of
    /// another turn than the conversation's changes nothing and is not re-armed (each turn arms its own).
    pub async fn run(&self, id: &ConversationId, turn: Option<u32>, rearm: bool) -> Result<DeadlineRun, StoreError> {
        let Some(conversation) = self.conversations.get_conversation(id).await? else {
            return Ok((Outcome::Poison(format!("unknown conversation {id}")), None));
        };
        if let Some(turn) = turn.filter(|t| *t != conversation.turn) {
            let why = format!("a deadline of turn {turn}; the conversation is on turn {}", conversation.turn);
            return Ok((Outcome::Ignored(why), None));
        }
        if conversation.status.is_terminal() {
            return Ok((Outcome::Ignored("conversation already over".into()), None));
        }
        if !rearm {
            // The sweep runs outside the conversation's trace: its span points at it.
            obs::context::link_current(conversation.trace_parent.as_deref());
        }
        let now = now_ms();
        if now < conversation.deadline_ms {
            return Ok((self.not_due(&conversation, now, rearm).await, None));
        }
        tracing::Span::current().record("status", conversation.status.as_str());
        let (outcome, action) = self.when_due(&conversation, now).await?;
        if action.is_some() {
            obs::metrics::deadline_expired();
        }
        let over = matches!(outcome, Outcome::Concluded(_) | Outcome::Poison(_));
        if rearm && !over {
            if let Err(e) = self.arm(id, conversation.turn, self.rearm_secs).await {
                return Ok((Outcome::Retry(format!("could not re-arm the deadline: {e}")), action));
            }
            tracing::info!(delay_secs = self.rearm_secs, "conversation not over yet: deadline path re-armed");
        }
        Ok((outcome, action))
    }

    /// A conversation whose deadline is still ahead: re-armed for the rest (SQS delays are at most
    /// 15 minutes), or left alone by the sweep. A `RUNNING` one without the `queued` marker first
    /// has its never-sent subtasks sent once its planner's lease ended ([`Self::redrive`]); while
    /// that lease is live (the planner may still be sending) the next run is when it ends. Until the
    /// marker is written the next run stays on the queue this one came from when it is the side
    /// effects' ([`Self::unmarked_queue`]), so the run that sends is one that may send everywhere.
    async fn not_due(&self, conversation: &Conversation, now: i64, rearm: bool) -> Outcome {
        if !rearm {
            return Outcome::Ignored("deadline not reached yet".into());
        }
        let mut left = ms_between(now, conversation.deadline_ms).as_secs().saturating_add(1);
        let mut marked = conversation.queued_at_ms.is_some();
        if conversation.status == ConversationStatus::Planning {
            // A plan's write cut at its deadline may still land: look again after the re-arm delay, so
            // a plan stored late is sent before the deadline, not failed at it.
            left = left.min(u64::from(self.rearm_secs));
        }
        if conversation.status == ConversationStatus::Running && !marked {
            match conversation.lease.as_ref().filter(|l| l.until_ms >= now) {
                Some(lease) => left = left.min(ms_between(now, lease.until_ms).as_secs().saturating_add(1)),
                None => match self.redrive(conversation).await {
                    Ok(now_marked) => marked = now_marked,
                    Err(e) => return Outcome::Retry(format!("could not send the never-sent subtasks: {e}")),
                },
            }
        }
        let left = u32::try_from(left).unwrap_or(MAX_DELAY_SECONDS).clamp(1, MAX_DELAY_SECONDS);
        let queue = if marked { self.queues.default_queue() } else { self.unmarked_queue() };
        let message = TaskMessage::Deadline { conversation_id: conversation.id.clone(), turn: conversation.turn };
        match queue.send(&[message], left).await {
            Ok(()) => Outcome::Ignored("deadline not reached yet; re-armed".into()),
            Err(e) => Outcome::Retry(format!("could not re-arm the deadline: {e}")),
        }
    }

    /// What the path does with a conversation past its deadline, by its status.
    async fn when_due(&self, conversation: &Conversation, now: i64) -> Result<DeadlineRun, StoreError> {
        let id = &conversation.id;
        Ok(match conversation.status {
            ConversationStatus::Planning => self.fail_unplanned(conversation, now).await?,
            ConversationStatus::Running => {
                let closed = self.close_open_subtasks(conversation, now).await?;
                faults::at(CrashPoint::DeadlineAfterClose).await;
                let remaining = self.conversations.get_conversation(id).await?.map_or(0, |c| c.remaining);
                if closed > 0 {
                    tracing::warn!(closed, remaining, "deadline passed: open subtasks closed as failed");
                    (
                        Outcome::Ignored(format!("{closed} open subtasks closed; the aggregator answers")),
                        Some(DeadlineAction::Closed),
                    )
                } else if remaining == 0 {
                    tracing::warn!("nothing open and nothing answered: aggregating with what it has");
                    self.answer(conversation).await?
                } else {
                    (Outcome::Ignored(format!("{remaining} subtasks still uncounted")), None)
                }
            }
            ConversationStatus::Aggregating => self.answer(conversation).await?,
            ConversationStatus::Done | ConversationStatus::Failed | ConversationStatus::Handoff => {
                (Outcome::Ignored("conversation already over".into()), None)
            }
        })
    }

    /// A conversation still `PLANNING` past its deadline: failed, once no planner may still be
    /// writing its plan (while its planning lease is live the path comes back: re-armed, or the
    /// next sweep), and only after closing the subtask items a plan's write left without its flip
    /// (DynamoDB writes a plan's items before the conditional flip to `RUNNING`: a planner killed,
    /// or cut by its budget, between the two leaves them, and with no plan on the conversation they
    /// are listed as its subtasks — work shown as still queued that never runs). Each is closed
    /// failed, `deadline_passed`, as never sent. Crash windows: killed between two closes, or
    /// between the closes and the flip, the conversation is still `PLANNING` and overdue: the
    /// deadline message comes back (or the sweep finds it) and the next run closes the rest (the
    /// closed ones are found closed) and fails it.
    async fn fail_unplanned(&self, conversation: &Conversation, now: i64) -> Result<DeadlineRun, StoreError> {
        let id = &conversation.id;
        if let Some(lease) = conversation.lease.as_ref().filter(|l| l.until_ms >= now) {
            let left = ms_between(now, lease.until_ms).as_millis();
            return Ok((Outcome::Ignored(format!("still being planned (its lease ends in {left} ms)")), None));
        }
        let never_sent = SubtaskResult::failed(
            FailureKind::DeadlinePassed,
            "planning did not finish before the deadline: it was never sent",
        );
        let mut closed = 0usize;
        let listed = self.subtasks.list_subtasks(id).await?;
        // Only this turn's: an earlier turn's subtask still open (awaiting an operator) is not this plan's.
        for r in listed.iter().filter(|r| r.subtask.id.turn() == conversation.turn && !r.status.is_terminal()) {
            if let Closed::Now(_) = self.closing.close_open(id, &r.subtask.id, never_sent.clone(), now).await? {
                closed += 1;
            }
        }
        tracing::warn!(
            closed,
            "planning never finished: failing the conversation (items of an unfinished plan closed)"
        );
        Ok(
            if self
                .conversations
                .fail_conversation(id, conversation.turn, "planning did not finish before the deadline")
                .await?
            {
                obs::metrics::conversation_finished(ConversationStatus::Failed, conversation.created_at_ms, now_ms());
                (Outcome::Concluded(ConversationStatus::Failed), Some(DeadlineAction::Failed))
            } else {
                (Outcome::Ignored("planning moved on meanwhile".into()), None)
            },
        )
    }

    /// The queue of a run before the `queued` marker: the side effects' (refund role's) own queue
    /// when this function holds it — the refund worker, which may send to every queue, as the
    /// orchestrator's first run there — else the default (the tasks worker, which may not send to
    /// the side effects' queue, leaves their never-sent subtasks to a retry or the deadline).
    fn unmarked_queue(&self) -> &Arc<dyn TaskQueue> {
        self.queues.queue_for(REFUND_ROLE).unwrap_or_else(|_| self.queues.default_queue())
    }

    /// Sends the next deadline message of the conversation's `turn`, `delay` seconds from now.
    async fn arm(&self, id: &ConversationId, turn: u32, delay: u32) -> Result<(), QueueError> {
        let message = TaskMessage::Deadline { conversation_id: id.clone(), turn };
        self.queues.default_queue().send(&[message], delay.min(MAX_DELAY_SECONDS)).await
    }

    /// A `RUNNING` conversation with no `queued` marker whose planner's lease ended: its planner
    /// died (or answered 503) between its plan's write and the marker. The subtasks the
    /// orchestrator sends at planning that never began are sent (a duplicate of one that was sent
    /// is absorbed like any duplicate delivery) and the marker written, so no later run sends them
    /// again. The run the orchestrator arms is on the side effects' queue, whose worker holds every
    /// queue; a role whose queue this function does not hold (the refund role, in the tasks
    /// worker: a run re-armed there) is left unsent and unmarked: a retry with the same
    /// Idempotency-Key sends it, else the deadline fails it. Answers whether the marker is written.
    async fn redrive(&self, conversation: &Conversation) -> Result<bool, RedriveError> {
        let id = &conversation.id;
        let records = self.subtasks.list_subtasks(id).await?;
        let mut by_role: std::collections::BTreeMap<&str, Vec<TaskMessage>> = Default::default();
        for r in records.iter().filter(|r| r.subtask.id.turn() == conversation.turn) {
            let own_queue = self.queues.has_own_queue(&r.role);
            if r.sent_at_planning_never_begun(own_queue) && (r.subtask.depends_on.is_empty() || own_queue) {
                by_role.entry(r.role.as_str()).or_default().push(TaskMessage::run(id, &r.subtask.id));
            }
        }
        let mut left = 0;
        for (role, messages) in by_role {
            match self.queues.queue_for(role) {
                Ok(queue) => {
                    queue.send(&messages, 0).await?;
                    tracing::warn!(role, subtasks = messages.len(), "subtasks the planner never marked sent: sent");
                }
                Err(not_held) => {
                    tracing::warn!(error = %not_held, subtasks = messages.len(), "never-sent subtasks left to a retry or the deadline");
                    left += messages.len();
                }
            }
        }
        faults::at(CrashPoint::DeadlineAfterRedrive).await;
        if left == 0 {
            self.conversations.mark_queued(id, conversation.turn, now_ms()).await?;
        }
        Ok(left == 0)
    }

    /// Closes every open subtask (skipped after a failed dependency, else failed for the deadline)
    /// and counts every subtask (a crash may have left some uncounted). Answers how many
    /// subtasks this call closed. Only subtasks of `conversation`'s turn (as read): a turn started
    /// since is not this run's to close — its deadline has not passed.
    async fn close_open_subtasks(&self, conversation: &Conversation, now: i64) -> Result<usize, StoreError> {
        let id = &conversation.id;
        let mut all = self.subtasks.list_subtasks(id).await?;
        all.retain(|r| r.subtask.id.turn() == conversation.turn);
        let mut closed = 0;
        // Everything still open fails — unless its journal holds side effects: those are reported as they
        // stand (done, being confirmed, waiting for approval), never as not done.
        for i in 0..all.len() {
            if all[i].status.is_terminal() {
                continue;
            }
            let result = match dependency_results(&all[i], &all) {
                DependencyState::Failed(dependency) => SubtaskResult::Skipped { dependency },
                _ => SubtaskResult::failed(
                    FailureKind::DeadlinePassed,
                    "the conversation's deadline passed before it finished",
                ),
            };
            match self.closing.close_open(id, &all[i].subtask.id, result, now).await? {
                Closed::Now(rec) => {
                    closed += 1;
                    all[i] = rec;
                }
                // A result recorded meanwhile (with the tokens its worker used).
                Closed::Before(rec) => all[i] = rec,
                Closed::Missing => {}
            }
        }
        // The plan's subtasks never change once it runs: the ids read above are all of them. Each is
        // counted with the usage its record holds (a worker that died between recording its result and
        // counting it spent those tokens: the cost metric and the token budget see them).
        for rec in &all {
            self.accounts.count_finished(id, &rec.subtask.id, &rec.usage).await?;
        }
        Ok(closed)
    }

    /// Answers the conversation with the model-free reply, through the aggregation lease: from
    /// `RUNNING` with nothing remaining, or taking over an aggregation whose lease expired; never
    /// while another holder's lease is live. Answers what it did when it answered
    /// ([`DeadlineAction::Aggregated`], or `TakenOver` from an expired holder).
    async fn answer(&self, conversation: &Conversation) -> Result<DeadlineRun, StoreError> {
        let answerer = Answerer { kind: "deadline", lease: self.aggregation_lease, idle_expiry: self.idle_expiry };
        let answered = answer_conversation(
            self.conversations.as_ref(),
            self.answers.as_ref(),
            self.subtasks.as_ref(),
            conversation,
            answerer,
            &ModelFreeReply,
        )
        .await?;
        Ok(match answered {
            AnswerOutcome::Answered { status, taken_over, .. } => {
                tracing::warn!(
                    handoff = status == ConversationStatus::Handoff,
                    "conversation answered by the deadline path (model-free reply)"
                );
                let action = if taken_over.is_some() { DeadlineAction::TakenOver } else { DeadlineAction::Aggregated };
                (Outcome::Concluded(status), Some(action))
            }
            AnswerOutcome::NeverStarted { taken_over } => {
                tracing::warn!("none of its subtasks ever began: the conversation failed, not answered");
                let action = if taken_over.is_some() { DeadlineAction::TakenOver } else { DeadlineAction::Failed };
                (Outcome::Concluded(ConversationStatus::Failed), Some(action))
            }
            AnswerOutcome::Held(lease) => {
                let left = ms_between(now_ms(), lease.until_ms).as_millis();
                (Outcome::Ignored(format!("aggregation lease held by {} for {left} ms more", lease.holder)), None)
            }
            AnswerOutcome::NotInPhase { status, remaining } => {
                (Outcome::Ignored(format!("conversation is {status} with {remaining} remaining")), None)
            }
            AnswerOutcome::Overtaken => (Outcome::Ignored("another aggregation answered first".into()), None),
            AnswerOutcome::Missing => (Outcome::Poison(format!("unknown conversation {}", conversation.id)), None),
        })
    }
}

/// Why [`DeadlinePath::redrive`] did not finish: the message is retried.
#[derive(Debug, thiserror::Error)]
enum RedriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}
