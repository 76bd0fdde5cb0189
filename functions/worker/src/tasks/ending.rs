//! What the agent loop's end makes of a subtask's attempt: its result booked (a side effect still unknown is confirmed by the confirmation armed before its intent), nothing (abandoned), a retry (a journal write failed), what it has (out of time for good), or its progress saved and the message handed back.

use std::sync::Arc;

use swarm_core::domain::{FailureKind, MAX_CHECKPOINT_BYTES};
use swarm_core::effects::journal_result;
use swarm_core::obs;
use swarm_core::ports::{MAX_DELAY_SECONDS, StoreError, SubtaskStore};
use swarm_core::roles::TaskQueues;

use super::started::Started;
use crate::agent::{LoopEnd, LoopState, partial_result};
use crate::bookkeeping::Bookkeeping;
use crate::outcome::Outcome;

/// Ends attempts after their loop.
pub struct Ending {
    subtasks: Arc<dyn SubtaskStore>,
    bookkeeping: Bookkeeping,
    /// Where work is handed back (the subtask's role's queue).
    queues: TaskQueues,
    /// Hand-backs allowed before a partial result is recorded.
    max_handbacks: u32,
    /// `DelaySeconds` of a handed-back message.
    handback_delay_secs: u32,
}

impl Ending {
    pub fn new(
        subtasks: Arc<dyn SubtaskStore>,
        bookkeeping: Bookkeeping,
        queues: TaskQueues,
        max_handbacks: u32,
        handback_delay_secs: u32,
    ) -> Self {
        Self { subtasks, bookkeeping, queues, max_handbacks, handback_delay_secs }
    }

    /// What the loop's end makes of the subtask: its result recorded (a side effect still unknown is
    /// confirmed by the confirmation armed before its intent), nothing (abandoned), a retry, what it
    /// has (out of time for good), or its progress saved and the message handed back.
    pub async fn after_loop(&self, s: &Started<'_>, end: LoopEnd, state: LoopState) -> Result<Outcome, StoreError> {
        let (id, subtask_id) = (s.id(), s.subtask_id());
        match end {
            LoopEnd::Done(result) => {
                self.bookkeeping.finish(id, subtask_id, result, state.usage, &state.tools_used()).await
            }
            LoopEnd::Abandoned(why) => {
                tracing::warn!(reason = %why, "attempt abandoned before a side effect; nothing was dispatched");
                Ok(Outcome::Ignored(why))
            }
            LoopEnd::Retry(why) => {
                // The redelivery need not wait for this attempt's lease; a failed release only delays it.
                if let Err(e) = self.subtasks.release_attempt(id, subtask_id, &s.holder).await {
                    tracing::warn!(error = %e, "could not release the attempt; the redelivery waits for its lease");
                }
                Ok(Outcome::Retry(why))
            }
            LoopEnd::OutOfTime if s.conversation_bound => {
                tracing::warn!("the conversation's deadline is near: recording what the subtask has");
                self.record_partial(s, state, FailureKind::DeadlinePassed, "the conversation's deadline came").await
            }
            LoopEnd::OutOfTime if s.handbacks < self.max_handbacks => self.hand_back(s, state).await,
            LoopEnd::OutOfTime => self.record_partial(s, state, FailureKind::OutOfTime, "ran out of time").await,
        }
    }

    /// Records what a subtask out of time for good has: what its journal says when it made side
    /// effects (done, being confirmed — never failed over them), else its partial result.
    async fn record_partial(
        &self,
        s: &Started<'_>,
        state: LoopState,
        kind: FailureKind,
        why: &str,
    ) -> Result<Outcome, StoreError> {
        let (id, subtask_id) = (s.id(), s.subtask_id());
        let result = match self.subtasks.get_subtask(id, subtask_id).await?.and_then(|r| journal_result(&r.effects)) {
            Some(from_journal) => from_journal,
            None => partial_result(&state, kind, why),
        };
        self.bookkeeping.finish(id, subtask_id, result, state.usage, &state.tools_used()).await
    }

    /// Out of time with hand-backs left: the progress saved as a checkpoint, the lease released
    /// and a delayed copy of the message sent.
    async fn hand_back(&self, s: &Started<'_>, state: LoopState) -> Result<Outcome, StoreError> {
        let (id, subtask_id) = (s.id(), s.subtask_id());
        let json = serde_json::to_string(&state.into_checkpoint()).unwrap_or_default();
        // A larger transcript restarts the subtask instead of saving a cut, unparseable checkpoint
        // (with side effects in its journal it then finishes from the journal).
        if json.len() <= MAX_CHECKPOINT_BYTES {
            self.subtasks.save_checkpoint(id, subtask_id, &json).await?;
        }
        self.subtasks.release_attempt(id, subtask_id, &s.holder).await?;
        let delay = self.handback_delay_secs.min(MAX_DELAY_SECONDS);
        if let Err(e) = self.queues.for_role(&s.record.role).send(&[s.again(s.handbacks + 1)], delay).await {
            return Ok(Outcome::Retry(format!("could not hand the subtask back: {e}")));
        }
        tracing::info!(delay_secs = delay, "out of time: progress saved, subtask handed back");
        obs::metrics::handed_back();
        Ok(Outcome::HandedBack)
    }
}
