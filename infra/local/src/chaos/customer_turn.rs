//! The customer's turn a chaos run judges: a conversation whose latest turn the swarm told (an approval's decision, issue 19) is judged on the customer turn before it.

use swarm_core::domain::{Conversation, SubtaskRecord};
use swarm_core::ports::ConversationHistory;
use swarm_core::turns::TurnRecord;

/// `latest` as the run judges it, with that turn's subtask items: `latest` itself when a customer
/// wrote it (its subtasks are `current`, the store's `list_subtasks`), else the last customer turn of
/// `history` laid over it (status, message, plan, counts, reply, hand-off, error) with that turn's
/// items. A chaos conversation is one customer message; the turns after it only tell decisions, and
/// their replies are not aggregations.
pub fn judged_turn(
    latest: Conversation,
    current: Vec<SubtaskRecord>,
    history: Option<ConversationHistory>,
) -> (Conversation, Vec<SubtaskRecord>) {
    let Some(history) = history.filter(|_| !latest.author.is_customer()) else { return (latest, current) };
    let Some(record) = history.turns.iter().rev().find(|t| t.author.is_customer()) else { return (latest, current) };
    let subtasks = history.subtasks.into_iter().filter(|s| s.subtask.id.turn() == record.turn).collect();
    (laid_over(latest, record), subtasks)
}

fn laid_over(mut c: Conversation, t: &TurnRecord) -> Conversation {
    c.turn = t.turn;
    c.author = t.author;
    c.query = t.query.clone();
    c.status = t.status;
    c.reply = t.reply.clone();
    c.error = t.error.clone();
    c.notes = t.notes.clone();
    c.usage = t.usage;
    c.plan = t.plan.clone();
    c.total = t.total;
    // An archived turn is terminal: every subtask of its plan was counted.
    c.remaining = 0;
    c.finished = t.plan.clone();
    c.handoff = t.handoff;
    c.language = t.language;
    c
}
