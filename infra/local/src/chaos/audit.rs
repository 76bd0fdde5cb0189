//! The chaos run's audit of the table: a reader of the table's stream of its own (beside the aggregator's trigger, and never faulted) that follows every write of every conversation and subtask item and counts, from the writes themselves, what the functions cannot be trusted to report — counts applied, reply writes, results recorded — and when each conversation became terminal.
//!
//! What the stream shows per write of a conversation item (its new image; the keys are read by the table's codec):
//! - a **count** is a write that lowers `remaining`; a subtask id entering the `finished` set is
//!   a subtask counted. A write that lowers `remaining` by more than the ids it adds applied a
//!   count twice; one that adds more ids than it lowers `remaining` (or drops an id) lost a
//!   count — the conversation can then never reach 0.
//! - an **aggregation** is a write that leaves the item answered (`DONE`, or `HANDOFF`: answered and
//!   handed to a person) with a reply: the first one, or any later write that changes the reply or
//!   the usage, or rewrites the item unchanged (a second conditional `AGGREGATING → DONE` that
//!   should have failed).
//! - a **flip** is a write from `RUNNING` to `AGGREGATING`.
//!
//! Per subtask item: a **result** is a write that leaves it terminal with a
//! result it did not have before.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use swarm_adapters::aws::dynamo::codec::ItemKey;
use swarm_core::domain::{ConversationStatus, SubtaskStatus};
use swarm_core::time::{between, now_ms};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::platform::ChangeFeed;

/// Longest wait in one read of the feed.
const READ_WAIT: Duration = Duration::from_millis(200);
/// Wait after a failed read.
const READ_ERROR_BACKOFF: Duration = Duration::from_millis(500);

/// What the stream showed of one conversation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConversationAudit {
    /// `created_at_ms` of its first image (epoch ms, the orchestrator's clock).
    pub created_at_ms: i64,
    pub customer_id: String,
    /// Status of the latest image; `None` before the first, or when it did not read as one.
    pub status: Option<ConversationStatus>,
    pub total: u64,
    pub remaining: u64,
    pub finished: BTreeSet<String>,
    /// Writes of the item seen.
    pub writes: u64,
    /// Sum of every lowering of `remaining` (counts applied).
    pub decrements: u64,
    /// Every subtask id that ever entered the `finished` set.
    pub counted: BTreeSet<String>,
    /// Ids a later write dropped from the `finished` set (lost counts).
    pub dropped_ids: u64,
    /// Writes that lowered `remaining` by more than the ids they added: counts applied twice.
    pub double_counts: u64,
    /// Writes that added more ids than they lowered `remaining` by: counts lost.
    pub lost_counts: u64,
    /// `RUNNING → AGGREGATING` writes.
    pub flips: u32,
    /// Writes that left a reply on a `DONE` item (see the module doc).
    pub reply_writes: u32,
    /// When the audit first saw it `DONE`, `FAILED` or `HANDOFF` (epoch ms, this process's clock).
    pub terminal_at_ms: Option<i64>,
    reply: Option<String>,
    usage: Vec<Option<String>>,
    image: Value,
}

impl ConversationAudit {
    /// `DONE`, `FAILED` or `HANDOFF`: nothing moves it on any more.
    pub fn is_terminal(&self) -> bool {
        self.status.is_some_and(ConversationStatus::is_terminal)
    }

    /// Time from creation to the terminal write, when there was one.
    pub fn completion(&self) -> Option<Duration> {
        self.terminal_at_ms.map(|t| between(self.created_at_ms, t))
    }
}

/// What the stream showed of one subtask.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubtaskAudit {
    /// Status of the latest image; `None` before the first, or when it did not read as one.
    pub status: Option<SubtaskStatus>,
    /// Writes that left it terminal with a result it did not have before (exactly 1 expected).
    pub results_recorded: u32,
    result: Option<String>,
}

/// Everything the audit saw.
#[derive(Clone, Debug, Default)]
pub struct AuditLog {
    /// By conversation id.
    pub conversations: BTreeMap<String, ConversationAudit>,
    /// By `(conversation id, subtask id)`.
    pub subtasks: BTreeMap<(String, String), SubtaskAudit>,
    /// Stream records read.
    pub records: u64,
}

fn attr<'a>(image: &'a Value, name: &str, kind: &str) -> Option<&'a Value> {
    image.get(name).and_then(|v| v.get(kind))
}

fn s_attr(image: &Value, name: &str) -> Option<String> {
    attr(image, name, "S").and_then(Value::as_str).map(str::to_owned)
}

fn n_attr(image: &Value, name: &str) -> Option<u64> {
    attr(image, name, "N").and_then(Value::as_str).and_then(|n| n.parse().ok())
}

impl AuditLog {
    /// Applies one stream record (Lambda JSON, `NEW_IMAGE`); `now_ms` is when it was read.
    pub fn apply(&mut self, record: &Value, now_ms: i64) {
        self.records += 1;
        let image = &record["dynamodb"]["NewImage"];
        match ItemKey::of_json(&record["dynamodb"]["Keys"]) {
            Some(ItemKey::Conversation(id)) => {
                let c = self.conversations.entry(id.as_str().to_owned()).or_default();
                apply_conversation(c, image, now_ms);
            }
            Some(ItemKey::Subtask(id, subtask)) => {
                let t = self.subtasks.entry((id.as_str().to_owned(), subtask.into_string())).or_default();
                apply_subtask(t, image);
            }
            _ => {}
        }
    }
}

/// A status whose item carries the reply: `DONE`, or `HANDOFF` (answered, and handed to a person).
fn answered(status: Option<ConversationStatus>) -> bool {
    matches!(status, Some(ConversationStatus::Done | ConversationStatus::Handoff))
}

fn apply_conversation(c: &mut ConversationAudit, image: &Value, now_ms: i64) {
    let status = s_attr(image, "status").as_deref().and_then(ConversationStatus::parse);
    let total = n_attr(image, "total").unwrap_or(0);
    let remaining = n_attr(image, "remaining").unwrap_or(0);
    let finished: BTreeSet<String> = attr(image, "finished", "SS")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let reply = s_attr(image, "reply");
    let usage: Vec<Option<String>> =
        ["usage_prompt_tokens", "usage_completion_tokens", "usage_cached_tokens", "usage_cost_usd"]
            .iter()
            .map(|n| attr(image, n, "N").and_then(Value::as_str).map(str::to_owned))
            .collect();
    if c.writes == 0 {
        c.created_at_ms = n_attr(image, "created_at_ms").and_then(|v| i64::try_from(v).ok()).unwrap_or(now_ms);
        c.customer_id = s_attr(image, "customer_id").unwrap_or_default();
    } else {
        // Counting happens on a planned conversation whose total does not change.
        if c.total > 0 && total == c.total {
            let lowered = c.remaining.saturating_sub(remaining);
            let added = finished.difference(&c.finished).count() as u64;
            let dropped = c.finished.difference(&finished).count() as u64;
            c.decrements += lowered;
            c.double_counts += lowered.saturating_sub(added);
            c.lost_counts += added.saturating_sub(lowered) + dropped;
            c.dropped_ids += dropped;
        }
        if c.status == Some(ConversationStatus::Running) && status == Some(ConversationStatus::Aggregating) {
            c.flips += 1;
        }
    }
    c.counted.extend(finished.iter().cloned());
    // A turn the swarm or a person told (an approval's decision, an operator's answer) writes a reply
    // without an aggregation: only a customer's turn is aggregated.
    let told = s_attr(image, "author").is_some_and(|a| a != "customer");
    if answered(status) && reply.is_some() && !told {
        let first = !answered(c.status);
        let changed = reply != c.reply || usage != c.usage;
        let rewritten = c.image == *image;
        if first || changed || rewritten {
            c.reply_writes += 1;
        }
    }
    if status.is_some_and(ConversationStatus::is_terminal) && c.terminal_at_ms.is_none() {
        c.terminal_at_ms = Some(now_ms);
    }
    c.writes += 1;
    c.status = status;
    c.total = total;
    c.remaining = remaining;
    c.finished = finished;
    c.reply = reply;
    c.usage = usage;
    c.image = image.clone();
}

fn apply_subtask(t: &mut SubtaskAudit, image: &Value) {
    let status = s_attr(image, "status").as_deref().and_then(SubtaskStatus::parse);
    let result = s_attr(image, "result");
    let terminal = matches!(status, Some(SubtaskStatus::Succeeded | SubtaskStatus::Failed | SubtaskStatus::Skipped));
    if terminal && result.is_some() && result != t.result {
        t.results_recorded += 1;
    }
    t.status = status;
    t.result = result;
}

/// The audit running beside the stack.
pub struct Audit {
    log: Arc<Mutex<AuditLog>>,
    /// Bumped after every batch of records (waiters re-check the log).
    changed: watch::Receiver<u64>,
    /// When the feed last returned records.
    last_records: Arc<Mutex<Instant>>,
    task: JoinHandle<()>,
}

impl Audit {
    /// Starts reading `feed` (open it before the first write of the run). `poll_every`: `None`
    /// waits on the feed (the embedded store pushes its changes); `Some(d)` reads it once and,
    /// when nothing came, sleeps `d` — an emulator's stream is polled, and every poll is three
    /// requests its one serialised table handler serves beside the swarm's own.
    pub fn start(mut feed: Box<dyn ChangeFeed>, poll_every: Option<Duration>) -> Self {
        let log = Arc::new(Mutex::new(AuditLog::default()));
        let (tx, changed) = watch::channel(0u64);
        let last_records = Arc::new(Mutex::new(Instant::now()));
        let (l, last) = (log.clone(), last_records.clone());
        let task = tokio::spawn(async move {
            let mut batches = 0u64;
            loop {
                match feed.next_records(if poll_every.is_some() { Duration::ZERO } else { READ_WAIT }).await {
                    Ok(records) if records.is_empty() => {
                        if let Some(pause) = poll_every {
                            tokio::time::sleep(pause).await;
                        }
                    }
                    Ok(records) => {
                        let now = now_ms();
                        {
                            let mut log = l.lock().unwrap_or_else(PoisonError::into_inner);
                            for r in &records {
                                log.apply(r, now);
                            }
                        }
                        *last.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
                        batches += 1;
                        let _ = tx.send(batches);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the audit could not read the table's stream");
                        tokio::time::sleep(READ_ERROR_BACKOFF).await;
                    }
                }
            }
        });
        Self { log, changed, last_records, task }
    }

    /// A copy of everything seen so far.
    pub fn log(&self) -> AuditLog {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn terminal(&self, id: &str) -> bool {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.conversations.get(id).is_some_and(ConversationAudit::is_terminal)
    }

    /// Waits until the audit saw conversation `id` terminal, or `timeout` passed; answers whether it did.
    pub async fn wait_terminal(&self, id: &str, timeout: Duration) -> bool {
        let mut changed = self.changed.clone();
        let deadline = Instant::now() + timeout;
        loop {
            if self.terminal(id) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return self.terminal(id),
            }
        }
    }

    /// Waits until the feed has returned nothing for `quiet` (it has caught up with the
    /// table), or `timeout` passed; answers whether it caught up.
    pub async fn caught_up(&self, quiet: Duration, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let last = *self.last_records.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            if now.duration_since(last) >= quiet {
                return true;
            }
            if now >= deadline {
                return false;
            }
            tokio::time::sleep((last + quiet).min(deadline).saturating_duration_since(now)).await;
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_adapters::embedded::{ChangedItem, ItemChange};
    use swarm_core::domain::{Conversation, Subtask, SubtaskRecord, SubtaskResult, Usage};

    use super::*;
    use crate::platform::embedded::stream_record;

    /// Applies the images of `writes` in order, as the stream carries them.
    fn audit(writes: &[Conversation]) -> ConversationAudit {
        let mut log = AuditLog::default();
        for (i, c) in writes.iter().enumerate() {
            let change =
                ItemChange { sequence: i as u64 + 1, created: i == 0, item: ChangedItem::Conversation(c.clone()) };
            log.apply(&stream_record(&change).unwrap(), 1_000 + i as i64);
        }
        log.conversations.into_values().next().unwrap()
    }

    fn planned(total: u32) -> (Conversation, Conversation) {
        let created = Conversation::new("C106", "q", 500, 120);
        let mut running = created.clone();
        running.status = ConversationStatus::Running;
        running.total = total;
        running.remaining = total;
        (created, running)
    }

    fn counted(c: &Conversation, ids: &[&str], remaining: u32) -> Conversation {
        let mut next = c.clone();
        next.finished.extend(ids.iter().map(|i| (*i).to_owned()));
        next.remaining = remaining;
        next
    }

    fn done(c: &Conversation, reply: &str) -> (Conversation, Conversation) {
        let mut aggregating = c.clone();
        aggregating.status = ConversationStatus::Aggregating;
        let mut done = aggregating.clone();
        done.status = ConversationStatus::Done;
        done.reply = Some(reply.to_owned());
        (aggregating, done)
    }

    #[test]
    fn a_clean_run_counts_each_subtask_once_flips_once_and_writes_one_reply() {
        let (created, running) = planned(2);
        let one = counted(&running, &["w01"], 1);
        let two = counted(&one, &["w02"], 0);
        let (aggregating, finished) = done(&two, "all done");
        let a = audit(&[created, running, one, two, aggregating, finished]);
        assert_eq!((a.decrements, a.counted.len(), a.double_counts, a.lost_counts), (2, 2, 0, 0));
        assert_eq!((a.flips, a.reply_writes), (1, 1));
        assert_eq!((a.created_at_ms, a.customer_id.as_str(), a.status), (500, "C106", Some(ConversationStatus::Done)));
        assert_eq!(a.completion(), Some(Duration::from_millis(1_005 - 500)));
    }

    #[test]
    fn a_decrement_without_a_new_id_is_a_count_applied_twice_and_a_lost_update_is_a_lost_count() {
        let (created, running) = planned(3);
        let one = counted(&running, &["w01"], 2);
        let twice = counted(&one, &[], 1); // w01 again: remaining lowered, no new id
        let a = audit(&[created.clone(), running.clone(), one.clone(), twice]);
        assert_eq!((a.decrements, a.counted.len(), a.double_counts, a.lost_counts), (2, 1, 1, 0));
        // Two racing counts both read remaining 3 and both wrote 2: the second image drops w01.
        let mut raced = counted(&running, &["w02"], 2);
        raced.finished.remove("w01");
        let a = audit(&[created, running, one, raced]);
        assert_eq!((a.decrements, a.counted.len(), a.double_counts), (1, 2, 0));
        assert_eq!((a.lost_counts, a.dropped_ids), (2, 1), "w02 added without a decrement, w01 dropped");
    }

    #[test]
    fn a_second_reply_or_an_unchanged_rewrite_of_a_done_item_is_a_second_aggregation() {
        let (created, running) = planned(1);
        let one = counted(&running, &["w01"], 0);
        let (aggregating, finished) = done(&one, "first");
        let a = audit(&[created.clone(), running.clone(), one.clone(), aggregating.clone(), finished.clone()]);
        assert_eq!(a.reply_writes, 1);
        let mut second = finished.clone();
        second.reply = Some("second".into());
        let a = audit(&[created.clone(), running.clone(), one.clone(), aggregating.clone(), finished.clone(), second]);
        assert_eq!(a.reply_writes, 2);
        let mut more_usage = finished.clone();
        more_usage.usage = Usage { prompt_tokens: Some(9), ..Usage::default() };
        let a =
            audit(&[created.clone(), running.clone(), one.clone(), aggregating.clone(), finished.clone(), more_usage]);
        assert_eq!(a.reply_writes, 2, "the usage of a second reply was added");
        let a = audit(&[created, running, one, aggregating, finished.clone(), finished]);
        assert_eq!(a.reply_writes, 2, "a rewrite of the done item");
    }

    #[test]
    fn a_conversation_answered_and_handed_to_a_person_is_terminal_with_one_reply_write() {
        let (created, running) = planned(1);
        let one = counted(&running, &["w01"], 0);
        let (aggregating, mut handoff) = done(&one, "a person takes over from here");
        handoff.status = ConversationStatus::Handoff;
        let writes = [created, running, one, aggregating, handoff.clone()];
        let a = audit(&writes);
        assert!(a.is_terminal(), "HANDOFF is terminal: nothing moves it on any more");
        assert_eq!((a.status, a.flips, a.reply_writes), (Some(ConversationStatus::Handoff), 1, 1));
        assert_eq!(a.completion(), Some(Duration::from_millis(1_004 - 500)));
        let mut twice = writes.to_vec();
        twice.push(handoff);
        assert_eq!(audit(&twice).reply_writes, 2, "a rewrite of the answered item");
    }

    #[test]
    fn a_subtask_result_is_counted_once_per_new_terminal_result() {
        let c = Conversation::new("C106", "q", 0, 120);
        let s = Subtask { id: "w01".into(), instruction: "i".into(), tools: vec![], depends_on: vec![] };
        let mut r = SubtaskRecord::new(&c, s, "support".into());
        let mut log = AuditLog::default();
        let write = |log: &mut AuditLog, r: &SubtaskRecord, seq| {
            let change = ItemChange { sequence: seq, created: seq == 1, item: ChangedItem::Subtask(r.clone()) };
            log.apply(&stream_record(&change).unwrap(), 0);
        };
        write(&mut log, &r, 1);
        r.status = SubtaskStatus::Running;
        write(&mut log, &r, 2);
        r.status = SubtaskStatus::Succeeded;
        r.result = Some(SubtaskResult::Succeeded { text: "a".into(), tool_calls: vec![] });
        write(&mut log, &r, 3);
        write(&mut log, &r, 4); // the same result again: not a new one
        let key = (c.id.to_string(), "w01".to_owned());
        assert_eq!(log.subtasks[&key].results_recorded, 1);
        r.result = Some(SubtaskResult::Succeeded { text: "b".into(), tool_calls: vec![] });
        write(&mut log, &r, 5);
        assert_eq!(log.subtasks[&key].results_recorded, 2, "a terminal result overwritten");
    }
}
