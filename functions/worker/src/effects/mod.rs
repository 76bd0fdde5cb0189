//! Side effects, at most once and told truthfully: the journal (intent before dispatch, outcome after), replays with the entry's key while its outcome is unknown ([`Dispatcher`]), approvals a person must give (asked for by the dispatch, executed as recorded: [`ApprovedEffects`]), and the confirmation of outcomes still unknown.

mod approved;
mod dispatch;

use std::sync::Arc;

use swarm_core::domain::SubtaskRecord;
use swarm_core::effects::{Effect, EffectState};
use swarm_core::faults::{self, CrashPoint};
use swarm_core::obs;
use swarm_core::ports::{IntentOutcome, JournalStore, StoreError, ToolContext};
use tokio::time::Instant;

pub use self::approved::ApprovedEffects;
pub use self::dispatch::{Dispatcher, EffectEnd, Sent};
use crate::confirmations::{Confirmations, Scheduled};
use crate::outcome::Outcome;

/// The attempt a loop runs as: its lease holder (journal writes are conditional on it) and the
/// subtask item's TTL (for the approvals it records).
pub struct Attempt {
    pub holder: String,
    pub ttl: i64,
}

/// A side-effecting call of a round with its intent in the journal: the entry as the journal
/// holds it, and whether this attempt wrote it now (`fresh`: nothing can have dispatched it before).
pub struct Journaled {
    pub effect: Effect,
    pub fresh: bool,
}

/// Why a round's side effects stop before any of them is dispatched.
pub enum JournalStop {
    /// The journal refused an intent: the subtask was closed or taken over, or vanished (why).
    Refused(String),
    /// An intent, or the confirmation armed before them, could not be written (why): the message
    /// must come back.
    Retry(String),
    /// This function cannot confirm side effects of the subtask's role (it holds no sender for that
    /// role's queue): it makes none (why).
    Unconfirmable(String),
}

/// How one journaled side-effecting call of the agent loop went.
pub enum EffectRun {
    /// A journal write after the dispatch failed (the approval, the outcome): the message must come
    /// back, and its redelivery replays the journal with its keys to learn what happened. Never
    /// acknowledged: that would leave the subtask running with nothing to move it on.
    StoreFailed(String),
    /// Dispatched (or replayed as recorded) and ended so.
    Ended(EffectEnd),
}

/// The side effects of a subtask's attempts: journaled calls, re-runs and confirmations.
pub struct SideEffects {
    /// Where intents are recorded (conditional on the attempt's lease).
    journal: Arc<dyn JournalStore>,
    dispatcher: Arc<Dispatcher>,
    confirmations: Confirmations,
}

impl SideEffects {
    pub fn new(journal: Arc<dyn JournalStore>, dispatcher: Arc<Dispatcher>, confirmations: Confirmations) -> Self {
        Self { journal, dispatcher, confirmations }
    }

    /// The intents of one round's side-effecting calls into the journal, one write after the other
    /// in call order (each is conditional on the journal holding exactly the entries before it, so
    /// written at once a later one could reach the table first and be refused), each conditional
    /// on the subtask being open and this attempt holding its lease. Answers each entry as the
    /// journal holds it, in the order given; nothing is dispatched here.
    pub async fn journal_round(
        &self,
        ctx: &ToolContext,
        attempt: &Attempt,
        intents: Vec<Effect>,
    ) -> Result<Vec<Journaled>, JournalStop> {
        // Armed before the first intent: whatever becomes of this attempt (a crash, a lost answer, the
        // deadline path or a dead letter closing the subtask), the role's own worker comes back to it.
        if let Err(e) = self.confirmations.arm(&ctx.role, &ctx.conversation_id, &ctx.subtask_id).await {
            let why = format!("the confirmation of the side effects could not be armed: {e}");
            return Err(if e.is_transient() { JournalStop::Retry(why) } else { JournalStop::Unconfirmable(why) });
        }
        // A round after one whose side effect ended: its outcome is in the journal, this one's intent is not.
        if intents.first().is_some_and(|e| e.ordinal > 1) {
            faults::at(CrashPoint::WorkerBetweenEffects).await;
        }
        let mut journaled = Vec::with_capacity(intents.len());
        for fresh in intents {
            let (id, subtask_id) = (&ctx.conversation_id, &ctx.subtask_id);
            let entry = match self.journal.record_intent(id, subtask_id, &attempt.holder, &fresh).await {
                Ok(IntentOutcome::Recorded) => Journaled { effect: fresh, fresh: true },
                Ok(IntentOutcome::Existing(existing)) => Journaled { effect: existing, fresh: false },
                Ok(IntentOutcome::Closed(_)) => {
                    return Err(JournalStop::Refused("the subtask was closed before its side effect".into()));
                }
                Ok(IntentOutcome::LeaseLost) => {
                    return Err(JournalStop::Refused("another attempt took the subtask over".into()));
                }
                Ok(IntentOutcome::Missing) => return Err(JournalStop::Refused("the subtask vanished".into())),
                Err(e) => {
                    return Err(JournalStop::Retry(format!("the side effect's intent could not be recorded: {e}")));
                }
            };
            faults::at(CrashPoint::WorkerAfterIntent).await;
            journaled.push(entry);
        }
        Ok(journaled)
    }

    /// One journaled call: dispatched with its positional key, its outcome into the journal.
    pub async fn dispatch_journaled(
        &self,
        ctx: &ToolContext,
        attempt: &Attempt,
        journaled: &Journaled,
        deadline: Instant,
    ) -> EffectRun {
        let effect = &journaled.effect;
        tracing::info!(tool = %effect.tool, ordinal = effect.ordinal, replay = !journaled.fresh, "side effect dispatched");
        let sent = if journaled.fresh { Sent::Never } else { Sent::Maybe };
        let ended = match self.dispatcher.dispatch_recorded(ctx, effect, None, sent, attempt.ttl, deadline).await {
            Ok(ended) => ended,
            Err(e) => return EffectRun::StoreFailed(format!("the side effect's approval could not be recorded: {e}")),
        };
        if let Err(e) = self.dispatcher.record_end(ctx, effect, &ended).await {
            // Left as an intent: the redelivery replays it with the same key and learns its outcome.
            return EffectRun::StoreFailed(format!("the side effect's outcome could not be recorded: {e}"));
        }
        EffectRun::Ended(ended)
    }

    /// A re-run of a subtask whose journal holds side effects: entries without an outcome are
    /// replayed as recorded (same tool, arguments and key) to learn it. Answers the journal after
    /// the replays.
    pub async fn replay_intents(
        &self,
        ctx: &ToolContext,
        record: &SubtaskRecord,
        deadline: Instant,
    ) -> Result<Vec<Effect>, StoreError> {
        let mut effects = record.effects.clone();
        for effect in effects.iter_mut().filter(|e| e.state == EffectState::Intent) {
            let ended = self.dispatcher.dispatch_recorded(ctx, effect, None, Sent::Maybe, record.ttl, deadline).await?;
            if let Some(after) = self.dispatcher.record_end(ctx, effect, &ended).await? {
                *effect = after;
            }
        }
        Ok(effects)
    }

    /// Replays the journal's entries of a subtask whose outcome is not known, recording what they
    /// answer. Answers whether every outcome is known now.
    pub async fn confirm_effects(
        &self,
        record: &SubtaskRecord,
        customer_id: &str,
        deadline: Instant,
    ) -> Result<bool, StoreError> {
        let ctx = ToolContext {
            role: record.role.clone(),
            customer_id: customer_id.to_owned(),
            conversation_id: record.conversation_id.clone(),
            subtask_id: record.subtask.id.clone(),
        };
        let mut still_unknown = false;
        for effect in record.effects.iter().filter(|e| e.state == EffectState::Intent) {
            let ended =
                self.dispatcher.dispatch_recorded(&ctx, effect, None, Sent::Maybe, record.ttl, deadline).await?;
            if matches!(ended, EffectEnd::Unknown) {
                still_unknown = true;
            }
            self.dispatcher.record_end(&ctx, effect, &ended).await?;
        }
        Ok(!still_unknown)
    }

    /// The next confirmation of `record` (after `attempt` replays), after the confirm delay: the
    /// message's outcome — requeued, given up (the outcome stays not known; counted), or a retry
    /// when the send failed (the message comes back and confirms instead).
    pub async fn confirm_later(&self, record: &SubtaskRecord, attempt: u32) -> Outcome {
        let (id, subtask_id) = (&record.conversation_id, &record.subtask.id);
        match self.confirmations.again(&record.role, id, subtask_id, attempt).await {
            Ok(Scheduled::Sent) => Outcome::Requeued("a side effect is still being confirmed".into()),
            Ok(Scheduled::GivenUp) => {
                tracing::error!(
                    attempt,
                    "a side effect's outcome is still not known after every replay; it stays submitted"
                );
                obs::metrics::effect_unconfirmed();
                Outcome::Ignored("a side effect's outcome is still not known; it stays submitted".into())
            }
            Err(e) => Outcome::Retry(format!("could not schedule the next confirmation: {e}")),
        }
    }
}
