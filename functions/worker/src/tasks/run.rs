//! One subtask's attempt (a `Run` message): begun under its short lease, renewed by a heartbeat beside the work (a duplicate finishes the bookkeeping, a live lease elsewhere requeues), its dependencies and token budget checked, then the agent loop from the checkpoint or the start — or, after side effects, the journal's result; the loop's end goes to [`Ending`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{
    Conversation, ConversationId, FailureKind, SubtaskId, SubtaskRecord, SubtaskResult, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::{AttemptLease, EffectState, journal_result};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::ports::{AttemptStart, ConversationRecords, MAX_DELAY_SECONDS, StoreError, SubtaskStore, ToolContext};
use swarm_core::prompts::{DependencyResult, work_messages_in};
use swarm_core::roles::TaskQueues;
use tokio::time::Instant;

use super::ending::Ending;
use super::started::Started;
use crate::agent::{Agent, Checkpoint, LoopState};
use crate::bookkeeping::Bookkeeping;
use crate::clock::{ms_after, ms_between};
use crate::dependencies::{DependencyState, dependency_results};
use crate::effects::{Attempt, SideEffects};
use crate::heartbeat::beside;
use crate::outcome::Outcome;
use crate::settings::WorkerSettings;

/// Runs subtasks' attempts.
pub struct Runner {
    conversations: Arc<dyn ConversationRecords>,
    subtasks: Arc<dyn SubtaskStore>,
    bookkeeping: Bookkeeping,
    effects: Arc<SideEffects>,
    agent: Agent,
    ending: Ending,
    /// Where work waiting for its turn is requeued (the subtask's role's queue).
    queues: TaskQueues,
    settings: WorkerSettings,
}

impl Runner {
    /// The runner over the store roles it uses, booking through `bookkeeping`, its side effects
    /// through `effects`, its rounds by `agent`, handing work back to `queues`.
    pub fn new(
        conversations: Arc<dyn ConversationRecords>,
        subtasks: Arc<dyn SubtaskStore>,
        bookkeeping: Bookkeeping,
        effects: Arc<SideEffects>,
        agent: Agent,
        queues: TaskQueues,
        settings: WorkerSettings,
    ) -> Self {
        let ending = Ending::new(
            subtasks.clone(),
            bookkeeping.clone(),
            queues.clone(),
            settings.max_handbacks,
            settings.handback_delay_secs,
        );
        Self { conversations, subtasks, bookkeeping, effects, agent, ending, queues, settings }
    }

    /// Until when an attempt's lease holds from now: the attempt lease, renewed every beat, but
    /// never past the invocation's end (`deadline`, the invocation's deadline minus the safety
    /// margin: Lambda ends the invocation at `deadline + safety margin` at the latest).
    fn lease_until(&self, deadline: Instant) -> i64 {
        let left = deadline.saturating_duration_since(Instant::now()) + self.settings.safety_margin;
        ms_after(now_ms(), left.min(self.settings.heartbeat.attempt_lease))
    }

    /// The live attempt's heartbeat on its lease, until dropped with the attempt's work: renewed
    /// every beat to [`Self::lease_until`], each renewal cut after the heartbeat's cut (tried again a
    /// beat later). Once another attempt holds the lease (this one's expired) or the subtask is
    /// closed, it stops renewing: the work's own writes are conditional and find out.
    async fn renew_lease(&self, s: &Started<'_>, invocation_deadline: Instant) -> Infallible {
        let heartbeat = self.settings.heartbeat;
        let mut lease = AttemptLease { holder: s.holder.clone(), until_ms: 0 };
        loop {
            tokio::time::sleep(heartbeat.every).await;
            lease.until_ms = self.lease_until(invocation_deadline);
            match tokio::time::timeout(heartbeat.cut, self.subtasks.renew_attempt(s.id(), s.subtask_id(), &lease)).await
            {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => {
                    tracing::warn!("the attempt's lease is no longer its own: renewals stop");
                    std::future::pending::<()>().await;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed; tried again on the next beat"),
                Err(_) => tracing::warn!("lease renewal cut at its deadline; tried again on the next beat"),
            }
        }
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

    /// A `Run` message: the subtask's attempt begins under its lease (a duplicate finishes the
    /// bookkeeping, a live lease elsewhere requeues), then [`Self::work`].
    pub async fn run(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        handbacks: u32,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let Some(conversation) = self.conversations.get_conversation(id).await? else {
            return Ok(Outcome::Poison(format!("unknown conversation {id}")));
        };
        if subtask_id.turn() != conversation.turn {
            // A late message of an earlier turn: that turn is over (its subtasks were closed before
            // it ended) and this turn's counts are not its to touch.
            return Ok(Outcome::Ignored(format!(
                "a subtask of turn {}; the conversation is on turn {}",
                subtask_id.turn(),
                conversation.turn
            )));
        }
        if conversation.status.is_terminal() {
            return Ok(Outcome::Ignored(format!("conversation is {}", conversation.status.as_str())));
        }
        // The attempt's lease is short and renewed by the live attempt (never past the invocation's end):
        // a crashed attempt's redelivery takes the subtask over soon after its last renewal.
        let invocation_deadline = deadline;
        let lease = AttemptLease::new(self.lease_until(invocation_deadline));
        // The subtask stops by the earlier of its invocation's deadline and the conversation's (less a
        // margin to record what it has): past the conversation's, a hand-back would only lose to the deadline path.
        let for_conversation = conversation_deadline(&conversation, self.settings.conversation_margin);
        let (deadline, conversation_bound) =
            if for_conversation < deadline { (for_conversation, true) } else { (deadline, false) };
        let record = match self.subtasks.begin_attempt(id, subtask_id, &lease, now_ms()).await? {
            AttemptStart::Missing => return Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
            AttemptStart::AlreadyFinished(rec) => {
                // A duplicate, or a retry after a crash between the result
                // write and the count: finish the bookkeeping, never the LLM work —
                // and learn the outcome of a side effect still being confirmed now (its armed
                // confirmation comes back anyway).
                let mut rec = rec;
                if rec.effects.iter().any(|e| e.state == EffectState::Intent)
                    && self.effects.confirm_effects(&rec, &conversation.customer_id, deadline).await?
                    && let Some(now) = self.subtasks.get_subtask(id, subtask_id).await?
                {
                    rec = now;
                }
                // Every outcome known: a SUBMITTED one is settled, so its dependents are released below.
                let rec = self.bookkeeping.settle(id, rec).await?;
                self.bookkeeping.count_and_release(id, &rec).await?;
                return Ok(Outcome::AlreadyFinished);
            }
            AttemptStart::Leased(rec) => {
                // Another delivery runs it now: look again once its lease has ended.
                let until = rec.lease.as_ref().map_or(0, |l| l.until_ms);
                let wait = u32::try_from(ms_between(now_ms(), until).as_secs() + 1).unwrap_or(MAX_DELAY_SECONDS);
                let again = TaskMessage::Run { conversation_id: id.clone(), subtask_id: subtask_id.clone(), handbacks };
                return Ok(self.requeue(&rec.role, again, wait, "another attempt holds the lease".into()).await);
            }
            AttemptStart::Started(rec) => rec,
        };
        faults::at(CrashPoint::WorkerAfterBeginAttempt).await;
        tracing::info!(attempt = record.attempts, role = %record.role, "subtask started");
        let started = Started {
            conversation: &conversation,
            record,
            holder: lease.holder,
            handbacks,
            deadline,
            conversation_bound,
        };
        // The lease's heartbeat lives in the attempt's future: a crash or the function's timeout stops both.
        beside(self.work(&started), self.renew_lease(&started, invocation_deadline)).await
    }

    /// The started attempt's work: the token budget and dependencies checked, then the agent loop
    /// from the checkpoint or the start — or, after side effects, the journal's result.
    async fn work(&self, s: &Started<'_>) -> Result<Outcome, StoreError> {
        let (id, subtask_id, record) = (s.id(), s.subtask_id(), &s.record);
        if let Some(budget) = self.settings.token_budget
            && s.conversation.usage.total_tokens() >= budget
        {
            let result = SubtaskResult::failed(
                FailureKind::TokenBudgetExhausted,
                format!("the conversation's token budget ({budget} tokens) was used up"),
            );
            return self.bookkeeping.finish(id, subtask_id, result, Usage::default(), &[]).await;
        }
        let dependencies = match self.dependencies(s).await? {
            Ok(dependencies) => dependencies,
            Err(outcome) => return Ok(outcome),
        };
        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: s.conversation.customer_id.clone(),
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
                return self.finish_from_journal(&ctx, record, s.deadline).await;
            }
        }
        let mut state = match checkpoint {
            Some(cp) => {
                tracing::info!(messages = cp.messages.len(), "resuming from checkpoint");
                LoopState::resumed(cp)
            }
            None => LoopState::fresh(work_messages_in(
                &s.conversation.query,
                subtask_id,
                &record.subtask.instruction,
                &dependencies,
                s.conversation.reply_language(),
            )),
        };
        let attempt = Attempt { holder: s.holder.clone(), ttl: record.ttl };
        let end = self.agent.run(&ctx, record, &attempt, &mut state, s.deadline).await;
        self.ending.after_loop(s, end, state).await
    }

    /// The answers of the subtask's dependencies; `Err` with the message's outcome when it cannot
    /// run now: a dependency failed (it is skipped) or is still open (it waits on its own queue).
    async fn dependencies(&self, s: &Started<'_>) -> Result<Result<Vec<DependencyResult>, Outcome>, StoreError> {
        let (id, subtask_id, record) = (s.id(), s.subtask_id(), &s.record);
        if record.subtask.depends_on.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let all = self.subtasks.list_subtasks(id).await?;
        Ok(match dependency_results(record, &all) {
            DependencyState::Ready(d) => Ok(d),
            DependencyState::Failed(dep) => {
                let result = SubtaskResult::Skipped { dependency: dep };
                Err(self.bookkeeping.finish(id, subtask_id, result, Usage::default(), &[]).await?)
            }
            DependencyState::Waiting(dep) if self.queues.has_own_queue(&record.role) => {
                // Enqueued at planning, it waits on its own queue: no other function may send there.
                self.subtasks.release_attempt(id, subtask_id, &s.holder).await?;
                if now_ms() >= s.conversation.deadline_ms {
                    return Ok(Err(Outcome::Ignored(format!(
                        "dependency {dep} still open at the deadline; the deadline path closes the subtask"
                    ))));
                }
                let why = format!("dependency {dep} not finished yet");
                Err(self.requeue(&record.role, s.again(s.handbacks), self.settings.dependency_wait_secs, why).await)
            }
            DependencyState::Waiting(dep) => {
                // Should not happen (released only when all are done): give it back for later.
                Err(Outcome::Retry(format!("dependency {dep} not finished yet")))
            }
        })
    }

    /// A re-run of a subtask whose journal holds side effects: entries without an outcome are
    /// replayed as recorded (same tool, arguments and key) to learn it, and the result is the
    /// journal's ([`journal_result`]) — the model is never asked again. An entry still unknown is
    /// confirmed by the confirmation armed before its intent, whatever the result says.
    async fn finish_from_journal(
        &self,
        ctx: &ToolContext,
        record: &SubtaskRecord,
        deadline: Instant,
    ) -> Result<Outcome, StoreError> {
        let effects = self.effects.replay_intents(ctx, record, deadline).await?;
        let result = journal_result(&effects).unwrap_or_else(|| {
            SubtaskResult::failed(FailureKind::Internal, "the journal emptied while the subtask was re-run")
        });
        let tools_used: Vec<String> = effects.iter().map(|e| e.tool.clone()).collect();
        self.bookkeeping.finish(&ctx.conversation_id, &ctx.subtask_id, result, Usage::default(), &tools_used).await
    }
}

/// When a subtask of `conversation` must stop: `margin` before the conversation's deadline, on tokio's clock.
fn conversation_deadline(conversation: &Conversation, margin: Duration) -> Instant {
    Instant::now() + ms_between(ms_after(now_ms(), margin), conversation.deadline_ms)
}
