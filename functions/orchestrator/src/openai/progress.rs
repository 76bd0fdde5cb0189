//! How a turn's progress reaches an OpenAI stream: the narrow [`ProgressSource`] trait (typed progress lines, then the turn's end) and its first implementation, [`ViewPolling`], which derives progress from successive reads of the conversation view at a bounded interval until a deadline.
//!
//! `ViewPolling` is a stand-in: progress is what changed between two reads (a subtask seen
//! running, then finished), so a change that comes and goes between reads is not told. The
//! conversation's event log (`GET /conversations/{id}/events`, another branch) is to replace it
//! behind the same trait.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::domain::{ConversationStatus, SubtaskStatus, Usage};
use swarm_core::view::{SubtaskView, TurnView};
use tokio::time::Instant;

use crate::core::{ApiError, Orchestrator};

/// One line of a turn's progress, as a client is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressLine {
    /// The turn is planned: its subtasks' ids and instructions, in plan order.
    Planned { subtasks: Vec<(String, String)> },
    /// A subtask was seen running.
    Started { subtask: String },
    /// A subtask waits for a person's approval of a side effect.
    AwaitingApproval { subtask: String },
    /// A subtask ended: `SUCCEEDED`, `FAILED` or `SKIPPED`, with the tools it called and, for a
    /// failure or a skip, why in our words ([`SubtaskView::error`]).
    Finished { subtask: String, status: SubtaskStatus, tools: Vec<String>, why: Option<String> },
    /// Every subtask ended: the reply is being written.
    Answering,
}

impl ProgressLine {
    /// The line as text (English, ours; instructions and reasons as the view has them).
    pub fn text(&self) -> String {
        match self {
            Self::Planned { subtasks } => {
                let mut text =
                    format!("Planned {} subtask{}:", subtasks.len(), if subtasks.len() == 1 { "" } else { "s" });
                for (id, instruction) in subtasks {
                    text.push_str(&format!("\n- {id}: {instruction}"));
                }
                text
            }
            Self::Started { subtask } => format!("{subtask} started"),
            Self::AwaitingApproval { subtask } => format!("{subtask} waits for a person's approval"),
            Self::Finished { subtask, status, tools, why } => {
                let mut text = format!("{subtask} {}", status.as_str().to_ascii_lowercase());
                if !tools.is_empty() {
                    text.push_str(&format!(" (tools: {})", tools.join(", ")));
                }
                if let Some(why) = why {
                    text.push_str(&format!(": {why}"));
                }
                text
            }
            Self::Answering => "Writing the reply".to_owned(),
        }
    }
}

/// How a turn ended: its status, reply and recorded usage.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEnd {
    /// `DONE`, `FAILED` or `HANDOFF`.
    pub status: ConversationStatus,
    pub reply: Option<String>,
    pub usage: Option<Usage>,
}

/// What a [`ProgressSource`] yields next.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEvent {
    /// Something changed (at least one line).
    Progress(Vec<ProgressLine>),
    /// The turn is terminal; nothing follows.
    Ended(TurnEnd),
}

/// Why a turn could not be followed to its end.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The deadline passed before the turn ended (transient: the turn still ends; read it with
    /// `GET /conversations/{id}`).
    #[error("the turn was not answered within {0:?}; read it later with GET /conversations/{{id}}")]
    TimedOut(Duration),
    /// The conversation or turn cannot be read (permanent: not found).
    #[error("{0}")]
    Read(#[from] ApiError),
}

/// A turn's progress, then its end. Each call waits for the next change; after
/// [`TurnEvent::Ended`] or an error the source is spent.
pub trait ProgressSource: Send {
    /// The next change of the turn. Cancel-safe: a call dropped while waiting loses no progress.
    /// Errors: [`WatchError::TimedOut`] past the source's deadline, [`WatchError::Read`] when
    /// the conversation cannot be read (a store outage is retried until the deadline).
    fn next(&mut self) -> impl Future<Output = Result<TurnEvent, WatchError>> + Send;
}

/// What a reader has already told of a turn.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    planned: bool,
    statuses: HashMap<String, SubtaskStatus>,
    answering: bool,
}

impl Seen {
    /// The lines `turn` adds to what was seen, in plan order; records them as seen. Pure.
    pub fn observe(&mut self, turn: &TurnView) -> Vec<ProgressLine> {
        let mut lines = Vec::new();
        if !self.planned && !turn.subtasks.is_empty() {
            self.planned = true;
            let subtasks = turn.subtasks.iter().map(|s| (s.id.clone(), s.instruction.clone())).collect();
            lines.push(ProgressLine::Planned { subtasks });
        }
        for subtask in &turn.subtasks {
            let before = self.statuses.insert(subtask.id.clone(), subtask.status);
            if before != Some(subtask.status) {
                lines.extend(changed(subtask));
            }
        }
        if !self.answering && turn.status == ConversationStatus::Aggregating {
            self.answering = true;
            lines.push(ProgressLine::Answering);
        }
        lines
    }
}

/// The line of a subtask now in its status (none for one waiting to run).
fn changed(subtask: &SubtaskView) -> Option<ProgressLine> {
    let id = subtask.id.clone();
    match subtask.status {
        SubtaskStatus::Pending | SubtaskStatus::Queued => None,
        SubtaskStatus::Running | SubtaskStatus::Submitted => Some(ProgressLine::Started { subtask: id }),
        SubtaskStatus::AwaitingApproval => Some(ProgressLine::AwaitingApproval { subtask: id }),
        status @ (SubtaskStatus::Succeeded | SubtaskStatus::Failed | SubtaskStatus::Skipped) => {
            Some(ProgressLine::Finished {
                subtask: id,
                status,
                tools: subtask.tools_used.clone(),
                why: subtask.error.clone(),
            })
        }
    }
}

/// The turn's end, when `turn` is terminal.
pub fn ended(turn: &TurnView) -> Option<TurnEnd> {
    turn.status.is_terminal().then(|| TurnEnd { status: turn.status, reply: turn.reply.clone(), usage: turn.usage })
}

/// How often and how long [`ViewPolling`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollPlan {
    /// Between two reads when nothing changed.
    pub interval: Duration,
    /// How long the whole turn is followed, from the request.
    pub patience: Duration,
}

impl PollPlan {
    /// For a swarm whose conversations' deadline is `deadline`: a read every `deadline / 120`
    /// (100 ms to 1 s: 120 reads of a turn at most, each a few store reads), for the deadline
    /// plus a minute (the deadline path answers every turn by its deadline; the minute is for
    /// the reply's write and a late sweep).
    pub fn for_deadline(deadline: Duration) -> Self {
        Self {
            interval: (deadline / 120).clamp(Duration::from_millis(100), Duration::from_secs(1)),
            patience: deadline + Duration::from_secs(60),
        }
    }
}

/// [`ProgressSource`] over successive reads of the conversation view (`GET /conversations/{id}`'s).
pub struct ViewPolling {
    core: Arc<Orchestrator>,
    conversation_id: String,
    customer_id: String,
    turn: u32,
    plan: PollPlan,
    deadline: Instant,
    seen: Seen,
    /// Set once the end was read and told: the lines before it go first.
    end: Option<TurnEnd>,
}

impl ViewPolling {
    /// Follows `turn` of `customer_id`'s conversation `conversation_id` from now, for `plan.patience`.
    pub fn new(
        core: Arc<Orchestrator>,
        conversation_id: String,
        customer_id: String,
        turn: u32,
        plan: PollPlan,
    ) -> Self {
        let deadline = Instant::now() + plan.patience;
        Self { core, conversation_id, customer_id, turn, plan, deadline, seen: Seen::default(), end: None }
    }
}

impl ProgressSource for ViewPolling {
    async fn next(&mut self) -> Result<TurnEvent, WatchError> {
        if let Some(end) = self.end.take() {
            return Ok(TurnEvent::Ended(end));
        }
        loop {
            if Instant::now() >= self.deadline {
                return Err(WatchError::TimedOut(self.plan.patience));
            }
            match self.core.status(&self.conversation_id, Some(&self.customer_id)).await {
                Ok(view) => {
                    let turn = view.turns.iter().find(|t| t.turn == self.turn).ok_or(ApiError::NotFound)?;
                    let lines = self.seen.observe(turn);
                    let end = ended(turn);
                    match (lines.is_empty(), end) {
                        (true, Some(end)) => return Ok(TurnEvent::Ended(end)),
                        (false, end) => {
                            self.end = end;
                            return Ok(TurnEvent::Progress(lines));
                        }
                        (true, None) => {}
                    }
                }
                // A store outage is read again at the next interval, until the deadline.
                Err(ApiError::Unavailable(reason)) => {
                    tracing::warn!(error = %reason, "conversation view unavailable while following a turn");
                }
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep_until((Instant::now() + self.plan.interval).min(self.deadline)).await;
        }
    }
}
