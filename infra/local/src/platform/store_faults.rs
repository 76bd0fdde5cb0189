//! Faults of the table and the queues as a function sees them: a store write refused by throttling, a store write applied with its answer lost, a send of several messages that goes out in part — one decorator over each port, driven by a chaos run or armed by a test.
//!
//! What a function gets back is what the AWS adapters hand it after their own retries in place
//! ([`swarm_adapters`]'s `AwsRetryPolicy`): a [`StoreError::Transient`] naming
//! `ProvisionedThroughputExceededException` for a throttled write (nothing written), a
//! [`StoreError::Transient`] for a write DynamoDB applied but whose answer never came (a 5xx or an
//! attempt timeout after the write), and a [`QueueError::Transient`] for a `SendMessageBatch`
//! whose `Failed` entries kept failing (the entries before them sent). Every caller must take
//! the transient error as "maybe applied": a retried conditional write recognises its own write,
//! a re-send duplicates messages the worker's idempotency absorbs.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use swarm_core::domain::TaskMessage;
use swarm_core::ports::{Call, ConversationStore, QueueError, StoreDecorator, StoreError, StoreOp, TaskQueue};

use super::chaos::{Chaos, FaultKind};

/// Whether `op` writes (every operation but the reads and queries): the calls a throttle or a
/// lost answer can hit.
pub fn is_write(op: StoreOp) -> bool {
    !matches!(
        op,
        StoreOp::GetConversation
            | StoreOp::OverdueConversations
            | StoreOp::ListCustomerConversations
            | StoreOp::GetSubtask
            | StoreOp::ListSubtasks
            | StoreOp::GetApproval
            | StoreOp::ListApprovals
            | StoreOp::ListApprovalsAfter
            | StoreOp::ListPendingApprovalsAfter
    )
}

/// Decides, per store call, whether it is throttled or loses its answer.
pub trait StoreFaultPlan: Send + Sync {
    /// Before the call: refuse it as throttled (nothing is written).
    fn throttle(&self, call: &Call<'_>) -> bool;
    /// After the call was applied and answered `Ok`: lose that answer.
    fn lose_answer(&self, call: &Call<'_>) -> bool;
}

/// A store whose calls meet the faults of `plan`.
pub struct FaultyStore<P> {
    pub inner: Arc<dyn ConversationStore>,
    pub plan: P,
}

impl<P: StoreFaultPlan> StoreDecorator for FaultyStore<P> {
    fn inner(&self) -> &dyn ConversationStore {
        self.inner.as_ref()
    }

    async fn around<'a, T, F>(&'a self, call: Call<'a>, run: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'a,
    {
        if self.plan.throttle(&call) {
            return Err(StoreError::Transient(format!(
                "DynamoDB {}: ProvisionedThroughputExceededException: the request rate exceeds the table's throughput (injected)",
                call.op.name()
            )));
        }
        let answer = run.await?;
        if self.plan.lose_answer(&call) {
            return Err(StoreError::Transient(format!(
                "DynamoDB {}: the answer was lost after the write was applied (injected)",
                call.op.name()
            )));
        }
        Ok(answer)
    }
}

/// The chaos run's plan: each write is an opportunity of [`FaultKind::StoreThrottled`] and, once
/// applied, of [`FaultKind::StoreAnswerLost`]; reads meet neither.
impl StoreFaultPlan for Chaos {
    fn throttle(&self, call: &Call<'_>) -> bool {
        let throttled = is_write(call.op) && self.decide(FaultKind::StoreThrottled);
        if throttled {
            self.note_store_fault(call.op.name(), false);
        }
        throttled
    }

    fn lose_answer(&self, call: &Call<'_>) -> bool {
        let lost = is_write(call.op) && self.decide(FaultKind::StoreAnswerLost);
        if lost {
            self.note_store_fault(call.op.name(), true);
        }
        lost
    }
}

/// A plan shared: the chaos run's one [`Chaos`] serves every function's store.
impl<P: StoreFaultPlan + ?Sized> StoreFaultPlan for Arc<P> {
    fn throttle(&self, call: &Call<'_>) -> bool {
        self.as_ref().throttle(call)
    }

    fn lose_answer(&self, call: &Call<'_>) -> bool {
        self.as_ref().lose_answer(call)
    }
}

/// `store` under the chaos run's store faults.
pub fn chaotic_store(store: Arc<dyn ConversationStore>, chaos: Arc<Chaos>) -> Arc<dyn ConversationStore> {
    Arc::new(FaultyStore { inner: store, plan: chaos })
}

/// A test's plan: the answer of the next call of each armed operation is lost; nothing is throttled.
#[derive(Default)]
pub struct FirstAnswers {
    armed: Mutex<HashSet<StoreOp>>,
}

impl StoreFaultPlan for FirstAnswers {
    fn throttle(&self, _call: &Call<'_>) -> bool {
        false
    }

    fn lose_answer(&self, call: &Call<'_>) -> bool {
        self.armed.lock().unwrap_or_else(PoisonError::into_inner).remove(&call.op)
    }
}

/// The store with the answer of each armed operation's next call lost (the contract suites').
pub type LosesFirstAnswer = FaultyStore<FirstAnswers>;

impl LosesFirstAnswer {
    /// Arms `op`: its next call is applied and its answer lost.
    pub fn lose(&self, op: StoreOp) -> Result<(), StoreError> {
        self.plan.armed.lock().unwrap_or_else(PoisonError::into_inner).insert(op);
        Ok(())
    }
}

/// [`LosesFirstAnswer`] over `store`, and the same as a store.
pub fn losing(store: &Arc<dyn ConversationStore>) -> (Arc<LosesFirstAnswer>, Arc<dyn ConversationStore>) {
    let decorator = Arc::new(FaultyStore { inner: store.clone(), plan: FirstAnswers::default() });
    let lossy: Arc<dyn ConversationStore> = decorator.clone();
    (decorator, lossy)
}

/// A queue whose sends of two or more messages are, at the chaos run's [`FaultKind::SqsSendPartial`]
/// rate, sent in part: the first half (at least one) goes out, the call answers the transient
/// error the SQS adapter gives for entries still failing after its rounds.
pub struct PartialSends {
    pub inner: Arc<dyn TaskQueue>,
    pub chaos: Arc<Chaos>,
}

#[async_trait]
impl TaskQueue for PartialSends {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn send(&self, messages: &[TaskMessage], delay_seconds: u32) -> Result<(), QueueError> {
        if messages.len() < 2 || !self.chaos.decide(FaultKind::SqsSendPartial) {
            return self.inner.send(messages, delay_seconds).await;
        }
        let sent = messages.len() / 2;
        self.inner.send(&messages[..sent], delay_seconds).await?;
        for m in &messages[sent..] {
            if let TaskMessage::Run { conversation_id, subtask_id, .. } = m {
                self.chaos.tag(FaultKind::SqsSendPartial, conversation_id.as_str(), subtask_id.as_str());
            }
        }
        Err(QueueError::Transient(format!(
            "SendMessageBatch: {} of {} entries still failing (last: ServiceUnavailable; injected)",
            messages.len() - sent,
            messages.len()
        )))
    }

    async fn change_visibility(&self, receipt_handle: &str, seconds: u32) -> Result<(), QueueError> {
        self.inner.change_visibility(receipt_handle, seconds).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;
    use crate::platform::chaos::ChaosSettings;
    use swarm_adapters::embedded::QueueSettings;
    use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue};
    use swarm_core::domain::{Conversation, ConversationId, SubtaskId};

    #[test]
    fn reads_are_not_writes_and_every_write_is() {
        let writes: Vec<&str> = StoreOp::ALL.iter().filter(|op| is_write(**op)).map(|op| op.name()).collect();
        assert_eq!(writes.len(), StoreOp::ALL.len() - 9);
        for name in ["record_intent", "record_effect_outcome", "close_subtask", "finish_conversation", "count_finished"]
        {
            assert!(writes.contains(&name), "{name} is a write");
        }
        assert!(!is_write(StoreOp::ListSubtasks));
    }

    #[tokio::test]
    async fn a_throttled_write_writes_nothing_and_a_lost_answer_was_written() {
        let mut s = ChaosSettings::quiet(1);
        s.store_throttle = 1.0;
        let chaos = Arc::new(Chaos::new(s).unwrap());
        let memory: Arc<dyn ConversationStore> = Arc::new(InMemoryConversationStore::new());
        let throttled = chaotic_store(memory.clone(), chaos.clone());
        let id = ConversationId::from_trusted("c-1".to_owned());
        let mut conversation = Conversation::new("C1", "where is order A1029?", 0, 120);
        conversation.id = id.clone();
        let e = throttled.create_conversation(&conversation).await.unwrap_err();
        assert!(e.is_transient() && e.to_string().contains("ProvisionedThroughputExceededException"), "{e}");
        assert!(memory.get_conversation(&id).await.unwrap().is_none(), "nothing written");
        assert!(throttled.get_conversation(&id).await.is_ok(), "a read is never throttled");
        assert_eq!(chaos.store_faults_by_op(), [("create_conversation", (0, 1))].into());

        let mut s = ChaosSettings::quiet(1);
        s.store_answer_lost = 1.0;
        let lossy = chaotic_store(memory.clone(), Arc::new(Chaos::new(s).unwrap()));
        assert!(lossy.create_conversation(&conversation).await.unwrap_err().is_transient());
        assert!(memory.get_conversation(&id).await.unwrap().is_some(), "written, its answer lost");
    }

    #[tokio::test]
    async fn a_partial_send_sends_the_first_half_and_answers_transient() {
        let mut s = ChaosSettings::quiet(1);
        s.sqs_send_partial = 1.0;
        let chaos = Arc::new(Chaos::new(s).unwrap());
        let queue = Arc::new(InMemoryQueue::new(QueueSettings::default()));
        let partial = PartialSends { inner: queue.clone(), chaos: chaos.clone() };
        let id = ConversationId::from_trusted("c-1".to_owned());
        let messages: Vec<TaskMessage> =
            (1..=5).map(|i| TaskMessage::run(&id, &SubtaskId::from(format!("w{i:02}").as_str()))).collect();
        let e = partial.send(&messages, 0).await.unwrap_err();
        assert!(e.is_transient(), "{e}");
        assert_eq!(queue.approximate_depth().visible, 2, "the first half went out");
        partial.send(&messages[..1], 0).await.unwrap();
        assert_eq!(queue.approximate_depth().visible, 3, "a single message is never sent in part");
        let met = chaos.met();
        assert_eq!(met.len(), 3, "the three unsent subtasks are tagged: {met:?}");
    }
}
