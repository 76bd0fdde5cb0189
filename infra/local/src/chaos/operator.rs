//! The chaos run's operator: polls `GET /approvals?status=pending` as the stack's operator, decides every approval it finds (approve; reject at the run's rate), posts a share of its decisions twice at once, posts again after a 5xx or no answer, and keeps its own log of what it decided — the verdict judges the shop's ledger against this log, never against the approvals' own records.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use crate::chaos::restart::Stacks;
use crate::platform::chaos::{Chaos, FaultKind};

/// POSTs of one decision at most (the first, a twice-posted one's second, and every re-post).
pub const MAX_DECISION_POSTS: u32 = 6;

/// What the operator decided on one approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    /// The body's `decision` word.
    pub fn word(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }
}

/// One approval the operator decided, as it was listed to it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub conversation_id: String,
    pub subtask_id: String,
    pub order_id: String,
    /// The listed amount, in cents (`None`: the listing's amount did not read as a decimal).
    pub amount_cents: Option<i64>,
    pub decision: Decision,
    /// Its first POST went out twice at once.
    pub twice: bool,
    /// Approved, listed still `approved` once the run had settled (its refund did not run: its
    /// message dead-lettered), and approved again.
    pub approved_again: bool,
    /// POSTs sent.
    pub posts: u32,
    /// The status that ended the posting (a 2xx or 4xx); `None`: every POST failed (5xx or no answer).
    pub answered: Option<u16>,
}

/// Everything the operator did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperatorLog {
    /// By approval id.
    pub decided: BTreeMap<String, Decided>,
    /// Answers to its POSTs by status (`"no answer"`: the invocation died or timed out).
    pub answers: BTreeMap<String, u64>,
    /// `GET /approvals` calls, and those that failed.
    pub polls: u64,
    pub failed_polls: u64,
}

/// `"1.00"` → 100 cents; `None` for anything but an optionally signed decimal with at most two places.
pub fn parse_cents(amount: &str) -> Option<i64> {
    let (sign, digits) = match amount.trim().strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, amount.trim()),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || frac.len() > 2 || !(whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())) {
        return None;
    }
    let frac: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<2}").parse().ok()? };
    Some(sign * (whole.parse::<i64>().ok()?.checked_mul(100)? + frac))
}

/// The operator of a chaos run.
#[derive(Default)]
pub struct Operator {
    log: Mutex<OperatorLog>,
    /// Decisions being posted now.
    busy: AtomicUsize,
}

impl Operator {
    /// A copy of the log so far.
    pub fn log(&self) -> OperatorLog {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether no decision is being posted.
    pub fn idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }

    /// Polls until `stop` is set: one [`Self::poll_once`], then a pause of `every`.
    pub async fn run(&self, stack: &Stacks, chaos: &Chaos, every: Duration, backoff: Duration, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let _ = self.poll_once(stack, chaos, backoff).await;
            tokio::time::sleep(every).await;
        }
    }

    /// Lists the pending approvals and decides, all at once, each one not decided yet (or whose
    /// every POST failed); answers how many were listed (`None`: the listing failed).
    pub async fn poll_once(&self, stack: &Stacks, chaos: &Chaos, backoff: Duration) -> Option<usize> {
        let listed = stack.call(|s| async move { s.approvals("pending").await }).await;
        let pending = {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.polls += 1;
            match listed {
                Ok(pending) => pending,
                Err(e) => {
                    log.failed_polls += 1;
                    tracing::info!(error = %e, "the operator could not list the pending approvals");
                    return None;
                }
            }
        };
        let count = pending.len();
        let todo: Vec<(String, Decided)> = pending.iter().filter_map(|view| self.take(view, chaos)).collect();
        if !todo.is_empty() {
            self.busy.fetch_add(todo.len(), Ordering::SeqCst);
            let _busy = Busy(&self.busy, todo.len());
            futures::future::join_all(todo.into_iter().map(|(id, d)| self.post(stack, id, d, backoff))).await;
        }
        Some(count)
    }

    /// Approves again, once each, the approvals it approved that are still `approved` (not run:
    /// the approved call's message dead-lettered — posting it again enqueues it again); answers
    /// how many it approved again (`None`: the listing failed).
    pub async fn approve_stuck_again(&self, stack: &Stacks, backoff: Duration) -> Option<usize> {
        let listed = stack.call(|s| async move { s.approvals("approved").await }).await;
        let todo: Vec<(String, Decided)> = {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.polls += 1;
            let Ok(approved) = listed else {
                log.failed_polls += 1;
                return None;
            };
            approved
                .iter()
                .filter_map(|view| view["approval_id"].as_str())
                .filter_map(|id| {
                    let d = log.decided.get(id)?;
                    (d.decision == Decision::Approve && !d.approved_again)
                        .then(|| (id.to_owned(), Decided { twice: false, approved_again: true, ..d.clone() }))
                })
                .collect()
        };
        let count = todo.len();
        if count > 0 {
            self.busy.fetch_add(count, Ordering::SeqCst);
            let _busy = Busy(&self.busy, count);
            futures::future::join_all(todo.into_iter().map(|(id, d)| self.post(stack, id, d, backoff))).await;
        }
        Some(count)
    }

    /// The decision on a listed approval the operator has not settled yet (drawn once per approval).
    fn take(&self, view: &Value, chaos: &Chaos) -> Option<(String, Decided)> {
        let id = view["approval_id"].as_str()?.to_owned();
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(earlier) = log.decided.get(&id) {
            // Listed pending again after every POST failed: the same decision once more, posted once.
            return earlier.answered.is_none().then(|| (id, Decided { twice: false, ..earlier.clone() }));
        }
        drop(log);
        let text = |k: &str| view[k].as_str().unwrap_or_default().to_owned();
        let decision = if chaos.decide(FaultKind::ApprovalRejected) { Decision::Reject } else { Decision::Approve };
        let decided = Decided {
            conversation_id: text("conversation_id"),
            subtask_id: text("subtask_id"),
            order_id: text("order_id"),
            amount_cents: view["amount"].as_str().and_then(parse_cents),
            decision,
            twice: chaos.decide(FaultKind::ApprovalPostedTwice),
            approved_again: false,
            posts: 0,
            answered: None,
        };
        Some((id, decided))
    }

    /// Posts `d` on approval `id` until a 2xx or 4xx answers or [`MAX_DECISION_POSTS`] went out.
    async fn post(&self, stack: &Stacks, id: String, mut d: Decided, backoff: Duration) {
        let posts_before = d.posts;
        self.record(&id, &d, &[]);
        loop {
            let answers = if d.twice && d.posts == posts_before {
                let (a, b) = tokio::join!(decide(stack, &id, d.decision), decide(stack, &id, d.decision));
                vec![a, b]
            } else {
                vec![decide(stack, &id, d.decision).await]
            };
            d.posts += answers.len() as u32;
            let codes: Vec<Option<u16>> = answers.iter().map(|a| a.as_ref().ok().map(|(code, _)| *code)).collect();
            d.answered = codes.iter().flatten().copied().filter(|c| *c < 500).min();
            self.record(&id, &d, &codes);
            if d.answered.is_some() || d.posts - posts_before >= MAX_DECISION_POSTS {
                break;
            }
            tokio::time::sleep(backoff).await;
        }
        if d.answered.is_none() {
            tracing::warn!(approval_id = %id, posts = d.posts, "the operator gave up posting its decision");
        }
    }

    fn record(&self, id: &str, d: &Decided, codes: &[Option<u16>]) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.decided.insert(id.to_owned(), d.clone());
        for code in codes {
            let key = code.map_or_else(|| "no answer".to_owned(), |c| c.to_string());
            *log.answers.entry(key).or_default() += 1;
        }
    }
}

/// One `POST /approvals/{id}` on the stack as it is now.
async fn decide(stack: &Stacks, id: &str, decision: Decision) -> anyhow::Result<(u16, Value)> {
    stack.call(|s| async move { s.decide(id, decision.word()).await }).await
}

/// Decisions being posted, released however their future ends.
struct Busy<'a>(&'a AtomicUsize, usize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_amount_reads_as_cents_and_anything_else_as_none() {
        assert_eq!(parse_cents("1.00"), Some(100));
        assert_eq!(parse_cents("1874.5"), Some(187_450));
        assert_eq!(parse_cents("12"), Some(1_200));
        assert_eq!(parse_cents("-0.07"), Some(-7));
        for bad in ["", ".50", "1.005", "1,00", "one", "1.-5"] {
            assert_eq!(parse_cents(bad), None, "{bad:?}");
        }
    }
}
