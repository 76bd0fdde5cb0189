//! Closing a subtask someone else was running (the deadline path, a dead letter): with what its journal says when it has side effects, else with a fallback; never "not done" over a side effect. Its intents are confirmed by their own role's worker (the confirmation it armed before them): the closer sends nothing for them.

use std::sync::Arc;

use swarm_core::domain::{ConversationId, SubtaskId, SubtaskRecord, SubtaskResult};
use swarm_core::effects::journal_result;
use swarm_core::obs;
use swarm_core::ports::{CloseOutcome, StoreError, SubtaskStore};

/// Reads of a subtask whose journal kept changing before it is given up for now (the error is
/// transient: the message comes back).
const CLOSE_TRIES: usize = 3;

/// What [`Closing::close_open`] found or did.
#[derive(Clone, Debug)]
pub enum Closed {
    /// This call closed the subtask: the record as written.
    Now(SubtaskRecord),
    /// It was terminal already: the record as found.
    Before(SubtaskRecord),
    /// No such subtask.
    Missing,
}

/// Closes open subtasks for the closer.
#[derive(Clone)]
pub struct Closing {
    subtasks: Arc<dyn SubtaskStore>,
}

impl Closing {
    pub fn new(subtasks: Arc<dyn SubtaskStore>) -> Self {
        Self { subtasks }
    }

    /// Closes a subtask someone else was running (the deadline path, a dead letter): with what its
    /// journal says when it has side effects (done, being confirmed, waiting for approval), else
    /// with `fallback`. An intent recorded meanwhile makes it read again and decide again. Closed as
    /// being confirmed, its intents are confirmed by the [`swarm_core::domain::TaskMessage::Confirm`]
    /// their worker armed on its own queue before writing them: the closer (the deadline path in
    /// the tasks worker, the sweeper, the DLQ consumer) holds neither that queue nor that credential.
    pub async fn close_open(
        &self,
        id: &ConversationId,
        subtask_id: &SubtaskId,
        fallback: SubtaskResult,
        now: i64,
    ) -> Result<Closed, StoreError> {
        for _ in 0..CLOSE_TRIES {
            let Some(rec) = self.subtasks.get_subtask(id, subtask_id).await? else { return Ok(Closed::Missing) };
            if rec.status.is_terminal() {
                return Ok(Closed::Before(rec));
            }
            let result = journal_result(&rec.effects).unwrap_or_else(|| fallback.clone()).bounded();
            match self.subtasks.close_subtask(id, subtask_id, &result, rec.effects.len(), now).await? {
                CloseOutcome::Recorded(written) => {
                    obs::metrics::subtask_finished(&result);
                    return Ok(Closed::Now(written));
                }
                CloseOutcome::AlreadyFinished(stored) => return Ok(Closed::Before(stored)),
                CloseOutcome::Missing => return Ok(Closed::Missing),
                CloseOutcome::JournalChanged => continue,
            }
        }
        Err(StoreError::Transient(format!("the journal of {subtask_id} kept changing while it was closed")))
    }
}
