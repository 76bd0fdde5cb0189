//! The sweep (EventBridge Scheduler, every minute): the deadline path of every conversation past its deadline that is not terminal, from the sparse, sharded index — the net under a lost deadline message — the approvals-waiting gauges, and the backstop of approved side effects not run.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use swarm_core::approval::{Approval, ApprovalStatus};
use swarm_core::domain::now_ms;
use swarm_core::obs;
use swarm_core::obs::metrics::SweepOutcome;
use swarm_core::ports::{ApprovalStore, ConversationRecords};
use tokio::time::Instant;
use tracing::Instrument;

use super::backstop::{self, Reissue};
use super::deadline::DeadlinePath;
use crate::clock::ms_between;
use crate::outcome::Outcome;
use crate::settings::SweepSettings;

/// Approvals the sweep reads for the waiting gauges (from the pending approvals' index) and for the
/// backstop and the index's backfill (the newest of the approvals partition, one `Query` page).
const SWEEP_APPROVALS_READ: usize = 1_000;

/// What one sweep did (the sweep function's answer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Conversations past their deadline and not terminal, as the index had them.
    pub found: usize,
    /// Of those, answered (or failed, when planning never finished) by this sweep.
    pub answered: usize,
    /// Moved on otherwise: subtasks closed for the aggregator, a live lease left alone, already over.
    pub moved: usize,
    /// Cut off by the sweep's own deadline (the next sweep takes them).
    pub unfinished: usize,
    /// Store errors (a shard not read, a deadline path that failed).
    pub errors: usize,
    /// Approved side effects not run past their token's window.
    #[serde(default)]
    pub approved_not_run: usize,
    /// Of those, re-enqueued to their role's queue with a fresh token.
    #[serde(default)]
    pub reissued: usize,
}

/// The sweep: the index, the deadline path it runs, the approvals it gauges.
pub struct Sweep {
    conversations: Arc<dyn ConversationRecords>,
    approvals: Arc<dyn ApprovalStore>,
    deadline_path: Arc<DeadlinePath>,
    settings: SweepSettings,
    /// Re-issues approved side effects not run (a sweeper given the approval key); `None`: counts them only.
    reissue: Option<Reissue>,
}

impl Sweep {
    pub fn new(
        conversations: Arc<dyn ConversationRecords>,
        approvals: Arc<dyn ApprovalStore>,
        deadline_path: Arc<DeadlinePath>,
        settings: SweepSettings,
    ) -> Self {
        Self { conversations, approvals, deadline_path, settings, reissue: None }
    }

    /// This sweep re-issuing approved side effects not run past their token's window ([`backstop`]).
    pub fn with_reissue(mut self, reissue: Reissue) -> Self {
        self.reissue = Some(reissue);
        self
    }

    /// One sweep: every conversation past its deadline that is not terminal (the sparse, sharded
    /// index), its deadline path run (without re-arming), `max_parallel` at a time, until `deadline`.
    pub async fn run(&self, deadline: Instant) -> SweepReport {
        obs::metrics::sweep_ran();
        let now = now_ms();
        let mut report = SweepReport::default();
        let mut due = Vec::new();
        for shard in 0..self.settings.shards {
            match self.conversations.overdue_conversations(shard, now, self.settings.per_shard).await {
                Ok(ids) => due.extend(ids),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "sweep: reading a shard of the index failed");
                    report.errors += 1;
                }
            }
        }
        report.found = due.len();
        let runs = futures::stream::iter(due.into_iter().map(|id| async move {
            let span = tracing::info_span!(
                "sweep",
                otel.name = "sweep conversation",
                conversation_id = %id,
                status = tracing::field::Empty
            );
            tokio::time::timeout_at(deadline, self.deadline_path.run(&id, None, false).instrument(span)).await
        }))
        .buffer_unordered(self.settings.max_parallel);
        let outcomes: Vec<_> = runs.collect().await;
        for outcome in outcomes {
            let counted = match outcome {
                Err(_) => {
                    report.unfinished += 1;
                    SweepOutcome::CutOff
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "sweep: a deadline path failed");
                    report.errors += 1;
                    SweepOutcome::Error
                }
                Ok(Ok((Outcome::Concluded(_), action))) => {
                    report.answered += 1;
                    action.map_or(SweepOutcome::Untouched, SweepOutcome::Moved)
                }
                Ok(Ok((_, action))) => {
                    report.moved += 1;
                    action.map_or(SweepOutcome::Untouched, SweepOutcome::Moved)
                }
            };
            obs::metrics::sweep_conversation(counted);
        }
        self.approvals(now, &mut report).await;
        tracing::info!(?report, "sweep done");
        report
    }

    /// Sets the approvals-waiting gauges (how many, the oldest's age) from the pending approvals'
    /// index (at most [`SWEEP_APPROVALS_READ`], however many decided approvals are newer): the sweep
    /// runs every minute, so the alarm on the oldest one's age never depends on an operator looking.
    /// The newest [`SWEEP_APPROVALS_READ`] approvals feed the backstop of approved side effects not
    /// run ([`backstop::run`]) and the index's backfill: a pending one the index lacks (written
    /// before the index existed) is put into it, and counted now. A failed read leaves the gauges as
    /// they were.
    async fn approvals(&self, now: i64, report: &mut SweepReport) {
        let newest = match self.approvals.list_approvals(SWEEP_APPROVALS_READ).await {
            Ok(newest) => newest,
            Err(e) => {
                tracing::warn!(error = %e, "sweep: reading the approvals failed; their gauges are not updated");
                report.errors += 1;
                return;
            }
        };
        match self.approvals.list_pending_approvals_after(None, SWEEP_APPROVALS_READ).await {
            Ok(indexed) => {
                let known: HashSet<&str> = indexed.iter().map(|a| a.id.as_str()).collect();
                let unindexed: Vec<&Approval> = newest
                    .iter()
                    .filter(|a| a.status == ApprovalStatus::Pending && !known.contains(a.id.as_str()))
                    .collect();
                let mut backfilled = 0;
                for a in &unindexed {
                    match self.approvals.index_pending_approval(&a.id).await {
                        Ok(added) => backfilled += usize::from(added),
                        Err(e) => {
                            tracing::warn!(error = %e, approval_id = %a.id, "sweep: indexing a pending approval failed");
                            report.errors += 1;
                        }
                    }
                }
                if backfilled > 0 {
                    tracing::info!(backfilled, "sweep: pending approvals put into the pending approvals' index");
                }
                let pending: Vec<&Approval> =
                    indexed.iter().chain(unindexed).filter(|a| a.status_at(now) == ApprovalStatus::Pending).collect();
                let oldest = pending.iter().map(|a| a.created_at_ms).min().unwrap_or(now);
                obs::metrics::approvals_waiting(pending.len(), ms_between(oldest, now));
            }
            Err(e) => {
                tracing::warn!(error = %e, "sweep: reading the pending approvals failed; their gauges are not updated");
                report.errors += 1;
            }
        }
        let window = self.settings.reissue_after;
        let done = backstop::run(self.approvals.as_ref(), &newest, self.reissue.as_ref(), window, now).await;
        report.approved_not_run = done.not_run;
        report.reissued = done.reissued;
        report.errors += done.errors;
    }
}
