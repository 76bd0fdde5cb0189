//! `FlakyStore`: any conversation store with transient failures injected per operation, optionally for one subtask only, and a record of the leases and replies it passed on (a [`StoreDecorator`]).

use std::any::Any;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use swarm_core::domain::SubtaskId;
pub use swarm_core::ports::StoreOp;
use swarm_core::ports::{Call, ConversationStore, LeaseOutcome, StoreDecorator, StoreError};

/// One injected failure: which operation (`None`: every one), which subtask (`None`: any call),
/// the message, and how many more calls it fails (`None`: every call).
struct Failure {
    op: Option<StoreOp>,
    subtask: Option<String>,
    message: String,
    times: Option<AtomicU32>,
    /// Matching calls let through before the failures start.
    after: AtomicU32,
}

/// One call a [`FlakyStore`] passed on, as the store answered it.
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    /// `acquire_lease(holder, now_ms, until_ms)` and its outcome.
    Lease { holder: String, now_ms: i64, until_ms: i64, outcome: LeaseOutcome },
    /// `finish_conversation` and whether it wrote the reply (`AGGREGATING → DONE`).
    Finish { written: bool },
}

/// A log several [`FlakyStore`]s can share (the worker's and the aggregator's views of one table).
pub type RecordLog = Arc<Mutex<Vec<Recorded>>>;

/// Wraps a store; calls matching an injected failure answer
/// [`StoreError::Transient`] (as throttling would) without reaching it, the others pass through.
/// With [`FlakyStore::recording`], every lease taken or refused and every reply written goes to a log.
pub struct FlakyStore {
    inner: Arc<dyn ConversationStore>,
    failures: Vec<Failure>,
    log: Option<RecordLog>,
}

impl FlakyStore {
    pub fn new(inner: Arc<dyn ConversationStore>) -> Self {
        Self { inner, failures: Vec::new(), log: None }
    }

    /// Records every `acquire_lease` and `finish_conversation` that reached the store into `log`.
    pub fn recording(mut self, log: RecordLog) -> Self {
        self.log = Some(log);
        self
    }

    fn record(&self, entry: Recorded) {
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        }
    }

    /// Every call of `op` fails transiently with `message`.
    pub fn fail(mut self, op: StoreOp, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: None,
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    /// The next `times` calls of `op` fail transiently with `message`; later ones pass through.
    pub fn fail_times(self, op: StoreOp, times: u32, message: &str) -> Self {
        self.fail_times_after(op, 0, times, message)
    }

    /// The first `after` calls of `op` pass through, the `times` after them fail transiently with
    /// `message`, later ones pass through again.
    pub fn fail_times_after(mut self, op: StoreOp, after: u32, times: u32, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: None,
            message: message.to_owned(),
            times: Some(AtomicU32::new(times)),
            after: AtomicU32::new(after),
        });
        self
    }

    /// Calls of `op` for subtask `subtask_id` fail transiently with `message` (so its message is redelivered until dead-lettered).
    pub fn fail_for_subtask(mut self, op: StoreOp, subtask_id: &str, message: &str) -> Self {
        self.failures.push(Failure {
            op: Some(op),
            subtask: Some(subtask_id.to_owned()),
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    /// Every call fails transiently with `message` (a store throttled on everything).
    pub fn fail_everything(mut self, message: &str) -> Self {
        self.failures.push(Failure {
            op: None,
            subtask: None,
            message: message.to_owned(),
            times: None,
            after: AtomicU32::new(0),
        });
        self
    }

    fn check(&self, op: StoreOp, subtask_id: Option<&SubtaskId>) -> Result<(), StoreError> {
        let take = |n: &AtomicU32| n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let hit = self.failures.iter().find(|f| {
            f.op.is_none_or(|o| o == op)
                && f.subtask.as_deref().is_none_or(|s| subtask_id.is_some_and(|id| id == s))
                && !take(&f.after)
                && f.times.as_ref().is_none_or(take)
        });
        match hit {
            Some(f) => Err(StoreError::Transient(f.message.clone())),
            None => Ok(()),
        }
    }
}

impl StoreDecorator for FlakyStore {
    fn inner(&self) -> &dyn ConversationStore {
        &*self.inner
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        self.check(call.op, call.subtask)?;
        let answer = run.await?;
        let answered: &dyn Any = &answer;
        match (call.lease, answered.downcast_ref::<LeaseOutcome>(), answered.downcast_ref::<bool>()) {
            (Some(ask), Some(outcome), _) => self.record(Recorded::Lease {
                holder: ask.holder.to_owned(),
                now_ms: ask.now_ms,
                until_ms: ask.until_ms,
                outcome: outcome.clone(),
            }),
            (_, _, Some(&written)) if call.op == StoreOp::FinishConversation => {
                self.record(Recorded::Finish { written })
            }
            _ => {}
        }
        Ok(answer)
    }
}
