//! The backstop of approved side effects that never ran: a crash after the decision, a failed enqueue, a dead-lettered execute message or a re-post past the token's window leave an approved call its token can no longer run. The sweep counts them and, holding the approval key, gives each a fresh token and sends it to its role's queue again — it re-issues what a person approved, never decides.

use std::time::Duration;

use swarm_core::approval::{Approval, ApprovalKey, ApprovalStatus};
use swarm_core::domain::TaskMessage;
use swarm_core::effects::effect_key;
use swarm_core::obs;
use swarm_core::ports::ApprovalStore;
use swarm_core::roles::TaskQueues;

use swarm_core::time::after_ms as ms_after;

/// What the backstop found and did in one sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backstopped {
    /// Approved calls not run past their token's window.
    pub not_run: usize,
    /// Of those, re-enqueued with a fresh token.
    pub reissued: usize,
    /// Of those, not re-issued for a store or queue error (the next sweep tries again).
    pub errors: usize,
}

/// Re-issues approved calls not run: the approval key and a sender for each role's queue.
pub struct Reissue {
    key: ApprovalKey,
    queues: TaskQueues,
}

impl Reissue {
    pub fn new(key: ApprovalKey, queues: TaskQueues) -> Self {
        Self { key, queues }
    }
}

/// Whether `approval` is approved and not run `window` after its token was issued, at `now_ms`.
pub fn is_stale(approval: &Approval, window: Duration, now_ms: i64) -> bool {
    approval.status == ApprovalStatus::Approved
        && approval.token_issued_at_ms().is_some_and(|issued| now_ms >= ms_after(issued, window))
}

/// The backstop over `approvals` (newest first, as one read found them): counts the approved calls
/// not run past `window` (the `swarm_approved_not_run` gauge) and, with `reissue`, gives each a
/// token valid for `window` from `now_ms` and sends its execute message to its role's queue. The
/// token is stored before the message is sent, so the message always finds it.
pub async fn run(
    store: &dyn ApprovalStore,
    approvals: &[Approval],
    reissue: Option<&Reissue>,
    window: Duration,
    now_ms: i64,
) -> Backstopped {
    let stale: Vec<&Approval> = approvals.iter().filter(|a| is_stale(a, window, now_ms)).collect();
    obs::metrics::approved_not_run(stale.len());
    let mut done = Backstopped { not_run: stale.len(), ..Backstopped::default() };
    let Some(reissue) = reissue else {
        if !stale.is_empty() {
            tracing::error!(
                count = stale.len(),
                "approved side effects not run past their token's window; this sweeper holds no approval key to re-issue them"
            );
        }
        return done;
    };
    for approval in stale {
        match reissue_one(store, reissue, approval, window, now_ms).await {
            Ok(true) => {
                done.reissued += 1;
                obs::metrics::approval_reissued();
            }
            Ok(false) => {}
            Err(why) => {
                tracing::warn!(approval_id = %approval.id, error = %why, "sweep: an approved side effect not run could not be re-issued; the next sweep tries again");
                done.errors += 1;
            }
        }
    }
    done
}

/// One approved call re-issued: answers whether it was (not when it ran or closed meanwhile).
async fn reissue_one(
    store: &dyn ApprovalStore,
    reissue: &Reissue,
    approval: &Approval,
    window: Duration,
    now_ms: i64,
) -> Result<bool, String> {
    // Checked before the write: a role without a sender here is never given a token it cannot send.
    let queue = reissue.queues.queue_for(&approval.role).map_err(|e| e.to_string())?;
    let key = effect_key(&approval.conversation_id, &approval.subtask_id, approval.ordinal);
    let token = reissue.key.sign(&approval.claim(&key, ms_after(now_ms, window)));
    let Some(after) = store.reissue_token(&approval.id, &token, now_ms).await.map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let message =
        TaskMessage::Execute { conversation_id: after.conversation_id.clone(), approval_id: after.id.clone() };
    queue.send(&[message], 0).await.map_err(|e| e.to_string())?;
    tracing::warn!(approval_id = %after.id, role = %after.role, "sweep: an approved side effect not run was re-enqueued with a fresh token");
    Ok(true)
}
