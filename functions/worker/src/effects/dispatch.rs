//! A journal entry dispatched exactly as recorded (its tool, arguments and positional key, plus an approval token when given), replayed while its outcome is unknown, and what it ended in written back on the entry — the one way every side effect reaches the gateway, first run, re-run, confirmation or approved execution.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::approval::{Approval, ApprovalStatus, PendingApproval, ProposedAction, approval_id};
use swarm_core::domain::now_ms;
use swarm_core::effects::{Effect, EffectChange, EffectOutcome, EffectState};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::obs;
use swarm_core::ports::{ApprovalStore, JournalStore, StoreError, ToolContext, ToolError, ToolGateway, ToolOutput};
use swarm_core::untrusted::is_safe_id;
use tokio::time::Instant;

use crate::clock::ms_after;

/// Dispatches of one side-effecting call (the first and replays with the same key) within one
/// attempt while its outcome is unknown (a timeout, the gateway unreachable).
const EFFECT_DISPATCHES: u32 = 3;
/// Top-level arguments the worker hands the gateway adapter (never the model's to write).
const IDEMPOTENCY_ARGUMENT: &str = "_idempotency_key";
const APPROVAL_ARGUMENT: &str = "_approval";

/// Whether a journal entry may have been dispatched before this dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Its intent was just written by this attempt: nothing dispatched it before.
    Never,
    /// A re-run, a confirmation or an approved execution: an earlier dispatch may have run it.
    Maybe,
}

/// How a dispatched side effect ended.
pub enum EffectEnd {
    /// Its outcome is recorded (done, or refused before dispatch).
    Recorded(EffectOutcome),
    /// It waits for a person's approval.
    Awaiting(PendingApproval),
    /// Its outcome is not known: it stays an intent, to be confirmed by a replay.
    Unknown,
}

/// Dispatches journal entries and records their ends.
pub struct Dispatcher {
    journal: Arc<dyn JournalStore>,
    /// Where an approval a consent-gated call needs is recorded.
    approvals: Arc<dyn ApprovalStore>,
    tools: Arc<dyn ToolGateway>,
    /// Longest wait for one tool call.
    tool_timeout: Duration,
    /// How long an approval asked for can be decided (`money.approval_expiry_secs`).
    approval_expiry: Duration,
}

impl Dispatcher {
    pub fn new(
        journal: Arc<dyn JournalStore>,
        approvals: Arc<dyn ApprovalStore>,
        tools: Arc<dyn ToolGateway>,
        tool_timeout: Duration,
        approval_expiry: Duration,
    ) -> Self {
        Self { journal, approvals, tools, tool_timeout, approval_expiry }
    }

    /// Dispatches a journal entry exactly as recorded (its tool, arguments and key, plus an
    /// approval token when given), replaying it while its outcome is unknown and time is left.
    /// A gateway asking for approval creates the approval (idempotently, by the entry's position).
    ///
    /// Only the tool's own answer is an outcome. Once the entry may have run (`sent`, or an
    /// earlier dispatch here that got no answer), an answer from anything else — the gateway's
    /// refusal before dispatch (an open breaker, a rate limit, a refused approval token), a proxy's
    /// or the gateway's permanent error, an error result without a permanent refusal code — says
    /// nothing about that run: the outcome stays unknown (confirmed later). A call this client could not send at all is never an outcome.
    pub async fn dispatch_recorded(
        &self,
        ctx: &ToolContext,
        effect: &Effect,
        token: Option<&str>,
        sent: Sent,
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
        let mut maybe_ran = sent == Sent::Maybe;
        for dispatch in 0..EFFECT_DISPATCHES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || (dispatch > 0 && left < self.tool_timeout / 2) {
                break;
            }
            answer = self.tools.call_tool(ctx, &effect.tool, args.clone(), self.tool_timeout.min(left)).await;
            match &answer {
                Err(e) if e.is_transient() => {
                    // Dispatched, perhaps: a timeout or a lost connection may have reached the tool.
                    maybe_ran = true;
                    tracing::warn!(tool = %effect.tool, ordinal = effect.ordinal, error = %e.log_safe(), "side effect's outcome unknown; replaying with its key");
                }
                _ => break,
            }
        }
        faults::at(CrashPoint::WorkerAfterDispatch).await;
        if maybe_ran && !answered_by_the_tool(&answer) {
            tracing::warn!(tool = %effect.tool, ordinal = effect.ordinal, "a replay was answered by something other than the tool; its outcome stays unknown");
            return Ok(EffectEnd::Unknown);
        }
        Ok(match answer {
            Ok(ToolOutput { text, is_error, .. }) => EffectEnd::Recorded(EffectOutcome::new(&text, is_error)),
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
            Err(ToolError::Local(e)) => {
                tracing::error!(tool = %effect.tool, role = %ctx.role, error = %e, "a side effect could not be sent by this function; its outcome stays unknown");
                EffectEnd::Unknown
            }
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
            expires_at_ms: ms_after(now, self.approval_expiry),
            decided_by: None,
            decided_at_ms: None,
            token: None,
            reissued_at_ms: None,
            outcome: None,
            finished_at_ms: None,
            ttl,
        };
        let stored = self.approvals.create_approval(&approval).await?;
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
    pub async fn record_end(
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
            self.journal.record_effect_outcome(&ctx.conversation_id, &ctx.subtask_id, effect.ordinal, &change).await?;
        faults::at(CrashPoint::WorkerAfterOutcome).await;
        Ok(after)
    }
}

/// Whether `answer` settles a call that may have run: the tool's own success or definite refusal
/// ([`ToolOutput::settles_a_replay`]), or a request for consent (the gateway asks before any run of
/// the call): what a replay may record. An error result without a refusal code (a tool server that
/// failed before its ledger, a proxy's error result) does not: the earlier run may have refunded.
fn answered_by_the_tool(answer: &Result<ToolOutput, ToolError>) -> bool {
    match answer {
        Ok(out) => out.settles_a_replay(),
        Err(ToolError::ApprovalRequired(_)) => true,
        Err(_) => false,
    }
}
