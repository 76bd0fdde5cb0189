//! A subtask's end, booked: its terminal result recorded (conditionally), counted on the conversation exactly once, and its dependents released (enqueued) or skipped.

use std::sync::Arc;

use swarm_core::domain::{
    ConversationId, SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus, TaskMessage, Usage, now_ms,
};
use swarm_core::effects::journal_result;
use swarm_core::faults::{self, CrashPoint};
use swarm_core::obs;
use swarm_core::ports::{AccountingStore, CountOutcome, RecordOutcome, StoreError, SubtaskStore};
use swarm_core::roles::TaskQueues;

use crate::dependencies::{Release, release_decisions};
use crate::outcome::Outcome;

/// Records results, counts them and releases dependents.
#[derive(Clone)]
pub struct Bookkeeping {
    subtasks: Arc<dyn SubtaskStore>,
    accounts: Arc<dyn AccountingStore>,
    /// Where released dependents are enqueued (their role's queue).
    queues: TaskQueues,
}

impl Bookkeeping {
    pub fn new(subtasks: Arc<dyn SubtaskStore>, accounts: Arc<dyn AccountingStore>, queues: TaskQueues) -> Self {
        Self { subtasks, accounts, queues }
    }

    /// Records a terminal result (conditionally), counts it exactly once and releases dependents
    /// (with the record as written, or as found when another delivery recorded first: its
    /// bookkeeping is completed here too). Answers the message's outcome: [`Outcome::Finished`] when
    /// this call recorded the result, [`Outcome::AlreadyFinished`] when another did first,
    /// [`Outcome::Poison`] for an unknown subtask.
    pub async fn finish(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        result: SubtaskResult,
        usage: Usage,
        tools_used: &[String],
    ) -> Result<Outcome, StoreError> {
        let status = result.status();
        let result = result.bounded();
        match self.subtasks.record_result(id, subtask_id, &result, &usage, tools_used, now_ms()).await? {
            RecordOutcome::Missing => Ok(Outcome::Poison(format!("unknown subtask {subtask_id}"))),
            RecordOutcome::AlreadyFinished(rec) => {
                self.count_and_release(id, &rec).await?;
                Ok(Outcome::AlreadyFinished)
            }
            RecordOutcome::Recorded(written) => {
                obs::metrics::subtask_finished(&result);
                faults::at(CrashPoint::WorkerAfterRecordResult).await;
                if let SubtaskResult::Failed { kind, .. } = &result {
                    // The reason is stored, never logged: it can hold a provider's or a tool's words,
                    // which quote the customer.
                    tracing::warn!(kind = kind.code(), "subtask failed");
                }
                tracing::info!(
                    status = status.as_str(),
                    tool_calls = tools_used.len(),
                    tokens = usage.total_tokens(),
                    "subtask finished"
                );
                // The record as written knows the dependents and the usage to count.
                self.count_and_release(id, &written).await?;
                Ok(Outcome::Finished(status))
            }
        }
    }

    /// A `SUBMITTED` subtask whose journal holds every outcome now (its confirmation, or a
    /// duplicate `Run`, learnt them) takes the journal's result: `SUCCEEDED` (or
    /// `AWAITING_APPROVAL` when a replay asked for consent). Answers the record as it stands after
    /// (unchanged when it is not `SUBMITTED`, or its journal still holds an unknown outcome); the
    /// caller then releases its dependents with [`Self::count_and_release`]. Safe to repeat: a retry
    /// after a lost answer, or a redelivered confirmation after a crash between this write and the
    /// release, finds the write made and releases then.
    pub async fn settle(&self, id: &ConversationId, record: SubtaskRecord) -> Result<SubtaskRecord, StoreError> {
        if record.status != SubtaskStatus::Submitted {
            return Ok(record);
        }
        let Some(result) = journal_result(&record.effects).filter(|r| r.status() != SubtaskStatus::Submitted) else {
            return Ok(record);
        };
        let result = result.bounded();
        Ok(match self.subtasks.settle_submitted(id, &record.subtask.id, &result).await? {
            RecordOutcome::Recorded(settled) => {
                tracing::info!(status = settled.status.as_str(), "side effects confirmed: subtask settled");
                settled
            }
            RecordOutcome::AlreadyFinished(rec) => rec,
            RecordOutcome::Missing => record,
        })
    }

    /// Exactly-once count of a finished subtask, then the release of its dependents (and of
    /// theirs, when a skip finishes them too).
    /// Safe to repeat: counting is guarded by the finished set, release by conditional flips.
    pub async fn count_and_release(&self, id: &ConversationId, rec: &SubtaskRecord) -> Result<(), StoreError> {
        let mut stack = vec![rec.clone()];
        while let Some(done) = stack.pop() {
            match self.accounts.count_finished(id, &done.subtask.id, &done.usage).await? {
                CountOutcome::Counted { remaining } => {
                    tracing::info!(subtask_id = %done.subtask.id, remaining, "subtask counted");
                }
                CountOutcome::AlreadyCounted => {
                    tracing::debug!(subtask_id = %done.subtask.id, "already counted");
                }
                CountOutcome::Missing => return Ok(()),
            }
            faults::at(CrashPoint::WorkerAfterCount).await;
            if !done.dependents.is_empty() {
                stack.extend(self.release_dependents(id, &done.subtask.id).await?);
            }
        }
        Ok(())
    }

    /// Decides the dependents of `finished` that can now be decided: enqueues those whose
    /// dependencies all succeeded, records the others skipped. Answers the skipped ones' records
    /// (they are finished too: their own dependents are decided next).
    async fn release_dependents(
        &self,
        id: &ConversationId,
        finished: &SubtaskId,
    ) -> Result<Vec<SubtaskRecord>, StoreError> {
        // Consistent read of the siblings after our own result is written.
        let all = self.subtasks.list_subtasks(id).await?;
        let mut skipped = Vec::new();
        for decision in release_decisions(&all, finished) {
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
                        .subtasks
                        .transition_subtask(id, &sid, &[SubtaskStatus::Pending], SubtaskStatus::Queued)
                        .await?;
                    tracing::info!(dependent = %sid, flipped, "dependent released");
                }
                Release::Skip(sid, dependency) => {
                    let result = SubtaskResult::Skipped { dependency };
                    match self.subtasks.record_result(id, &sid, &result, &Usage::default(), &[], now_ms()).await? {
                        RecordOutcome::Recorded(r) => {
                            obs::metrics::subtask_finished(&result);
                            skipped.push(r);
                        }
                        RecordOutcome::AlreadyFinished(r) => skipped.push(r),
                        RecordOutcome::Missing => {}
                    }
                }
            }
        }
        Ok(skipped)
    }
}
