//! The approvals API's logic: list what waits for a person, record an operator's decision (who and when), and on approval sign the token and enqueue the approved call for its role's worker — which runs it exactly once, by its journal key.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::approval::{Approval, ApprovalDecision, ApprovalKey, ApprovalStatus, DecideOutcome, is_approval_id};
use swarm_core::decisions::tell_decisions;
use swarm_core::domain::TaskMessage;
use swarm_core::effects::{EffectChange, EffectOutcome, EffectState, effect_key};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::obs;
use swarm_core::ports::ConversationStore;
use swarm_core::roles::TaskQueues;
use swarm_core::time::{after_ms, now_ms};
use swarm_core::timings::Timings;
use swarm_core::view::OperatorApprovalView;

use crate::core::ApiError;

/// Most approvals one `GET /approvals` page lists.
pub const MAX_LISTED: usize = 100;
/// Most approvals one page reads to fill itself when a status filter skips some: past it the page
/// ends early, with a cursor to go on from.
pub const MAX_SCANNED: usize = 1_000;

/// Where the next page of approvals starts: after this approval id (the store lists newest first).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct After {
    after: String,
}

/// One page of [`Approvals::list`].
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalsPage {
    pub approvals: Vec<OperatorApprovalView>,
    /// The cursor of the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// What an operator decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

/// Approvals: the store, the queues approved calls go to, and the key tokens are signed with.
pub struct Approvals {
    store: Arc<dyn ConversationStore>,
    queues: TaskQueues,
    key: ApprovalKey,
    /// How long a token is valid after the decision (`money.approval_execute_within_secs`).
    execute_within: Duration,
    /// A conversation's idle time after a turn (`conversation.idle_expiry_secs`), refreshed by a told decision.
    idle_expiry: Duration,
}

impl Approvals {
    pub fn new(store: Arc<dyn ConversationStore>, queues: TaskQueues, key: ApprovalKey, timings: &Timings) -> Self {
        Self {
            store,
            queues,
            key,
            execute_within: timings.money.approval_execute_within,
            idle_expiry: timings.conversation.idle_expiry,
        }
    }

    /// A page of approvals, newest first: at most `limit` (1..=[`MAX_LISTED`]), optionally only
    /// those in `status` now, starting after `cursor` (a page's `next_cursor`, opaque). With a status
    /// filter a page reads on through the store until it is full, at most [`MAX_SCANNED`] approvals,
    /// and ends with a cursor to go on from; `pending` reads the store's pending approvals only
    /// ([`swarm_core::ports::ApprovalStore::list_pending_approvals_after`]), so an old one waiting
    /// behind many decided ones is listed.
    ///
    /// Errors: 400 `bad_cursor` for a cursor this API did not hand out; 503 when the store is unavailable.
    pub async fn list(
        &self,
        status: Option<ApprovalStatus>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<ApprovalsPage, ApiError> {
        let mut after = match cursor.filter(|c| !c.trim().is_empty()) {
            None => None,
            Some(text) => {
                let After { after } = crate::cursor::decode(text)?;
                if !is_approval_id(&after) {
                    return Err(crate::cursor::bad_cursor().into());
                }
                Some(after)
            }
        };
        let limit = limit.clamp(1, MAX_LISTED);
        let now = now_ms();
        let mut approvals = Vec::new();
        let mut scanned = 0;
        let mut more = true;
        while approvals.len() < limit && scanned < MAX_SCANNED && more {
            let chunk = self.read_after(status, after.as_deref(), limit.min(MAX_SCANNED - scanned)).await?;
            more = !chunk.is_empty();
            for a in &chunk {
                scanned += 1;
                after = Some(a.id.clone());
                if status.is_none_or(|s| a.status_at(now) == s) {
                    approvals.push(OperatorApprovalView::build(a, now));
                    if approvals.len() == limit {
                        break;
                    }
                }
            }
        }
        // Another page follows when the store holds an approval after the last one looked at.
        let next_cursor = match &after {
            Some(last) if more && !self.read_after(status, Some(last), 1).await?.is_empty() => {
                Some(crate::cursor::encode(&After { after: last.clone() }))
            }
            _ => None,
        };
        Ok(ApprovalsPage { approvals, next_cursor })
    }

    /// At most `limit` approvals after `after` in the store's order: the pending approvals' index
    /// when only pending ones are asked for (however many decided ones are newer), else all.
    async fn read_after(
        &self,
        status: Option<ApprovalStatus>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Approval>, ApiError> {
        Ok(match status {
            Some(ApprovalStatus::Pending) => self.store.list_pending_approvals_after(after, limit).await?,
            _ => self.store.list_approvals_after(after, limit).await?,
        })
    }

    /// Records `decision` by `operator` on approval `id`. Approving signs a token for exactly the
    /// recorded call and enqueues it for its role's worker; posting the same approval again enqueues
    /// it again (it still runs once: the worker dispatches it with its journal key and never
    /// re-runs an entry with an outcome). Rejecting marks the side effect rejected.
    ///
    /// Errors: 404 for an unknown id; 409 (`approval_conflict`) for the opposite of an earlier
    /// decision or an expired approval; 503 when the store or queue is unavailable.
    pub async fn decide(&self, id: &str, decision: Decision, operator: &str) -> Result<OperatorApprovalView, ApiError> {
        if !is_approval_id(id) {
            return Err(ApiError::NotFound);
        }
        let Some(current) = self.store.get_approval(id).await? else { return Err(ApiError::NotFound) };
        let now = now_ms();
        let token = (decision == Decision::Approve).then(|| self.sign(&current, now));
        let record =
            ApprovalDecision { approve: decision == Decision::Approve, by: operator.to_owned(), at_ms: now, token };
        let approval = match self.store.decide_approval(id, &record).await? {
            DecideOutcome::Missing => return Err(ApiError::NotFound),
            DecideOutcome::Decided(a) => {
                tracing::info!(approval_id = %a.id, order_id = %a.action.order_id, decision = a.status.code(), "approval decided");
                let decided = match a.status {
                    ApprovalStatus::Approved => Some(obs::metrics::Decision::Approved),
                    ApprovalStatus::Rejected => Some(obs::metrics::Decision::Rejected),
                    ApprovalStatus::Expired => Some(obs::metrics::Decision::Expired),
                    ApprovalStatus::Pending | ApprovalStatus::Executed => None,
                };
                if let Some(decided) = decided {
                    let waited = u64::try_from(a.decided_at_ms.unwrap_or(now) - a.created_at_ms).unwrap_or(0);
                    obs::metrics::approval_decided(decided, Duration::from_millis(waited));
                }
                faults::at(CrashPoint::ApprovalsAfterDecide).await;
                a
            }
            DecideOutcome::Unchanged(a) => a,
        };
        match (approval.status, decision) {
            (ApprovalStatus::Approved, Decision::Approve) => self.enqueue(&approval).await?,
            (ApprovalStatus::Executed, Decision::Approve) | (ApprovalStatus::Rejected, Decision::Reject) => {}
            (ApprovalStatus::Rejected, Decision::Approve) => {
                self.close_effect(&approval, EffectState::Rejected, "a person rejected it").await?;
                self.tell(&approval).await;
                return Err(ApiError::conflict("this approval was rejected earlier"));
            }
            (ApprovalStatus::Approved | ApprovalStatus::Executed, Decision::Reject) => {
                return Err(ApiError::conflict("this approval was approved earlier"));
            }
            (ApprovalStatus::Expired, _) => {
                self.close_effect(&approval, EffectState::Expired, "the approval expired before a decision").await?;
                self.tell(&approval).await;
                return Err(ApiError::conflict("this approval has expired"));
            }
            (ApprovalStatus::Pending, _) => {
                return Err(ApiError::Unavailable("the decision was not recorded; post it again".into()));
            }
        }
        if approval.status == ApprovalStatus::Rejected {
            self.close_effect(&approval, EffectState::Rejected, "a person rejected it").await?;
            self.tell(&approval).await;
        }
        Ok(OperatorApprovalView::build(&approval, now_ms()))
    }

    /// The token of `approval`'s exact call under its journal key, valid for the execution window from `now`.
    fn sign(&self, approval: &Approval, now: i64) -> String {
        let key = effect_key(&approval.conversation_id, &approval.subtask_id, approval.ordinal);
        self.key.sign(&approval.claim(&key, after_ms(now, self.execute_within)))
    }

    /// Sends the approved call to its role's queue.
    async fn enqueue(&self, approval: &Approval) -> Result<(), ApiError> {
        let message = TaskMessage::Execute {
            conversation_id: approval.conversation_id.clone(),
            approval_id: approval.id.clone(),
        };
        self.queues.for_role(&approval.role).send(&[message], 0).await.map_err(|e| {
            tracing::error!(approval_id = %approval.id, error = %e, "could not enqueue the approved call; post the approval again");
            ApiError::Unavailable("the approval is recorded but its refund could not be queued; post it again".into())
        })?;
        tracing::info!(approval_id = %approval.id, role = %approval.role, "approved call enqueued");
        Ok(())
    }

    /// Tells the customer the outcome of a closed approval as a turn ([`tell_decisions`]) when its
    /// conversation's turn is over (else the writer that ends that turn does). A failure loses
    /// nothing (the closed journal entry is the pending notice the next teller finds), so it is
    /// logged and the decision still answered.
    async fn tell(&self, approval: &Approval) {
        let id = &approval.conversation_id;
        match tell_decisions(self.store.as_ref(), self.store.as_ref(), id, self.idle_expiry).await {
            Ok(told) if told.deferred => {
                tracing::info!(approval_id = %approval.id, "decision told when the conversation's running turn ends");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(approval_id = %approval.id, error = %e, "could not tell the decision yet; its next reader will")
            }
        }
    }

    /// Marks the side effect of a rejected or expired approval in its subtask's journal (it never runs).
    async fn close_effect(&self, approval: &Approval, state: EffectState, why: &str) -> Result<(), ApiError> {
        let change = EffectChange {
            state,
            outcome: Some(EffectOutcome::new(why, true)),
            approval_id: None,
            proposed: None,
            at_ms: now_ms(),
        };
        self.store
            .record_effect_outcome(&approval.conversation_id, &approval.subtask_id, approval.ordinal, &change)
            .await?;
        Ok(())
    }
}
