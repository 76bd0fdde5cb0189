//! How a turn's progress reaches an OpenAI stream: the narrow [`ProgressSource`] trait (typed progress lines, then the turn's end), what a line says, and how often and how long a turn is followed; the source itself reads the conversation's event log ([`super::from_log`]).

use std::future::Future;
use std::time::Duration;

use swarm_core::domain::{ConversationStatus, SubtaskStatus, Usage};
use swarm_core::view::TurnView;

use crate::core::ApiError;

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
    /// failure or a skip, why in our words (the view's `error`).
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

/// The turn's end, when `turn` is terminal.
pub fn ended(turn: &TurnView) -> Option<TurnEnd> {
    turn.status.is_terminal().then(|| TurnEnd { status: turn.status, reply: turn.reply.clone(), usage: turn.usage })
}

/// How often and how long a turn is followed.
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
