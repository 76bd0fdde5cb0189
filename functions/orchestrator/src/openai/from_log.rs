//! [`ProgressSource`] over the conversation's event log (DESIGN.md "Events"): each event of the followed turn, read with a per-source cursor, becomes a progress line — none missed between reads, none told twice — and the turn's end (reply, usage) is read from the conversation view once the log says the turn is over.

use std::collections::HashSet;
use std::sync::Arc;

use swarm_core::domain::{ConversationId, SubtaskStatus};
use swarm_core::events::{Event, EventCursor};
use swarm_core::ports::EventLog;
use tokio::time::Instant;

use super::progress::{PollPlan, ProgressLine, ProgressSource, TurnEnd, TurnEvent, WatchError, ended};
use crate::core::{ApiError, Orchestrator};

/// Follows one turn through the event log: a `Query` of the conversation's partition every
/// [`PollPlan::interval`] while nothing new is logged, until [`PollPlan::patience`] has passed.
pub struct LogProgress {
    core: Arc<Orchestrator>,
    log: Arc<dyn EventLog>,
    id: ConversationId,
    customer_id: String,
    turn: u32,
    cursor: EventCursor,
    plan: PollPlan,
    deadline: Instant,
    told: Told,
    /// Set once the end was read and told: the lines before it go first.
    end: Option<TurnEnd>,
}

impl LogProgress {
    /// Follows `turn` of `customer_id`'s conversation `conversation_id` from now, for
    /// `plan.patience`. Errors: [`ApiError::NotFound`] for a conversation that is not theirs;
    /// [`ApiError::Unavailable`] when the store cannot be read.
    pub async fn open(
        core: Arc<Orchestrator>,
        conversation_id: &str,
        customer_id: String,
        turn: u32,
        plan: PollPlan,
    ) -> Result<Self, ApiError> {
        let (id, log) = core.event_log(conversation_id, Some(&customer_id)).await?;
        Ok(Self {
            core,
            log,
            id,
            customer_id,
            turn,
            cursor: EventCursor::start(turn),
            plan,
            deadline: Instant::now() + plan.patience,
            told: Told::default(),
            end: None,
        })
    }

    /// The followed turn as the view has it (its reply, usage, and why a subtask failed).
    async fn view_of_turn(&self) -> Result<Option<swarm_core::view::TurnView>, ApiError> {
        let view = self.core.status(&self.id.to_string(), Some(&self.customer_id)).await?;
        Ok(view.turns.into_iter().find(|t| t.turn == self.turn))
    }
}

/// What a reader has told of a turn's log: the pure part of [`LogProgress`].
#[derive(Clone, Debug, Default)]
pub struct Told {
    /// Subtasks the plan holds (`None` until `turn_planned` is read).
    planned: Option<usize>,
    /// Subtasks logged as finished (terminal, `SUBMITTED`, or waiting for a person).
    finished: HashSet<String>,
    answering: bool,
}

impl Told {
    /// The lines `events` tell, in order, then `Answering` once every planned subtask finished. Pure.
    pub fn lines<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) -> Vec<ProgressLine> {
        let mut lines: Vec<ProgressLine> = events.into_iter().filter_map(|e| self.line(e)).collect();
        if !self.answering && self.planned.is_some_and(|n| n > 0 && self.finished.len() >= n) {
            self.answering = true;
            lines.push(ProgressLine::Answering);
        }
        lines
    }

    /// The line `event` tells, if any; records what the `Answering` line waits for.
    fn line(&mut self, event: &Event) -> Option<ProgressLine> {
        match event {
            Event::TurnPlanned { subtasks, .. } => {
                self.planned = Some(subtasks.len());
                let subtasks = subtasks.iter().map(|s| (s.id.to_string(), s.instruction.clone())).collect();
                Some(ProgressLine::Planned { subtasks })
            }
            Event::SubtaskStarted { subtask } => Some(ProgressLine::Started { subtask: subtask.to_string() }),
            Event::SubtaskFinished { subtask, status, tools, .. } => {
                let id = subtask.to_string();
                match status {
                    SubtaskStatus::Succeeded | SubtaskStatus::Failed | SubtaskStatus::Skipped => {
                        self.finished.insert(id.clone());
                        Some(ProgressLine::Finished { subtask: id, status: *status, tools: tools.clone(), why: None })
                    }
                    SubtaskStatus::AwaitingApproval => {
                        self.finished.insert(id.clone());
                        Some(ProgressLine::AwaitingApproval { subtask: id })
                    }
                    // `SUBMITTED`: counted, its side effect still being confirmed; told when it settles.
                    _ => {
                        self.finished.insert(id);
                        None
                    }
                }
            }
            _ => None,
        }
    }
}

impl ProgressSource for LogProgress {
    async fn next(&mut self) -> Result<TurnEvent, WatchError> {
        if let Some(end) = self.end.take() {
            return Ok(TurnEvent::Ended(end));
        }
        loop {
            if Instant::now() >= self.deadline {
                return Err(WatchError::TimedOut(self.plan.patience));
            }
            match self.log.events_after(&self.id, &self.cursor).await {
                Ok(None) => return Err(ApiError::NotFound.into()),
                Ok(Some(page)) if page.turn == self.turn => {
                    for logged in &page.events {
                        self.cursor.advance(logged);
                    }
                    let mut lines = self.told.lines(page.events.iter().map(|l| &l.event));
                    let failed = |l: &ProgressLine| matches!(l, ProgressLine::Finished { status, .. } if *status != SubtaskStatus::Succeeded);
                    let terminal = page.status.is_terminal();
                    if terminal || lines.iter().any(failed) {
                        // The reasons in our words and the turn's end are the view's, read once.
                        let turn = self.view_of_turn().await?.ok_or(ApiError::NotFound)?;
                        for line in &mut lines {
                            if let ProgressLine::Finished { subtask, why, status, .. } = line
                                && *status != SubtaskStatus::Succeeded
                            {
                                *why = turn.subtasks.iter().find(|s| &s.id == subtask).and_then(|s| s.error.clone());
                            }
                        }
                        self.end = if terminal { ended(&turn) } else { None };
                    }
                    match (lines.is_empty(), self.end.take()) {
                        (true, Some(end)) => return Ok(TurnEvent::Ended(end)),
                        (false, end) => {
                            self.end = end;
                            return Ok(TurnEvent::Progress(lines));
                        }
                        (true, None) => {}
                    }
                }
                // A later turn is current (a decision told right after ours): ours is over.
                Ok(Some(page)) if page.turn > self.turn => {
                    if let Some(end) = self.view_of_turn().await?.as_ref().and_then(ended) {
                        return Ok(TurnEvent::Ended(end));
                    }
                }
                Ok(Some(_)) => {}
                // A store outage is read again at the next interval, until the deadline.
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "event log unavailable while following a turn");
                }
                Err(e) => return Err(ApiError::from(e).into()),
            }
            tokio::time::sleep_until((Instant::now() + self.plan.interval).min(self.deadline)).await;
        }
    }
}
