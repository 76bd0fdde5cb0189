//! What the faults cost the customers, and where the store faults hit: a 202 whose conversation ended with no subtask ever begun (fails the run), and the subtasks that failed although every fault the injector knows they met was recoverable (shown).

use std::collections::BTreeSet;

use swarm_core::domain::SubtaskStatus;

use super::facts::RunFacts;
use super::sheet::{Sheet, shorten};
use crate::chaos::operator::Decision;

/// A conversation a client was given (202) that ended (terminal) with no subtask ever begun: every
/// subtask closed without an attempt, or none planned. Accepted work must at least start; the
/// faults injected are ones the platform must ride out (issue: an enqueue cut by a crash or a
/// budget) — except a poisoned message, which fails on every receive before its attempt begins:
/// a conversation whose every subtask met one (a plan of one subtask, poisoned) is excused. Fails
/// the run.
pub(super) fn accepted_never_begun(f: &RunFacts, t: &mut Sheet) {
    let mut never = Vec::new();
    for (i, id) in f.clients.iter().filter_map(|(i, c)| c.conversation_id.as_ref().map(|id| (i, id))) {
        let Some((c, subtasks)) = f.store.get(id.as_str()).and_then(Option::as_ref) else { continue };
        let poisoned = |s: &&swarm_core::domain::SubtaskRecord| {
            f.unrecoverable.contains(&(id.clone(), s.subtask.id.as_str().to_owned()))
        };
        let all_poisoned = !subtasks.is_empty() && subtasks.iter().all(|s| poisoned(&s));
        if c.status.is_terminal() && subtasks.iter().all(|s| s.attempts == 0) && !all_poisoned {
            // How each ended, so a failed run says whether nothing was sent or the backlog never reached it.
            let ends: Vec<String> = subtasks
                .iter()
                .map(|s| {
                    let kind = s.result.as_ref().and_then(|r| r.failure_kind()).map_or("-", |k| k.code());
                    format!("{} {} {kind}", s.subtask.id, s.status.as_str())
                })
                .collect();
            never.push(format!("c{i} {id} ({}, {} subtasks: {})", c.status, subtasks.len(), ends.join(", ")));
        }
    }
    t.row("accepted (202), ended with no subtask ever begun", never.len());
    if !never.is_empty() {
        t.broken(format!(
            "{} accepted conversations ended with no subtask ever begun: {}",
            never.len(),
            shorten(&never)
        ));
    }
}

/// The subtasks that ended `FAILED` although no fault the injector tagged them with was an
/// unrecoverable one — a poisoned message ([`crate::platform::chaos::FaultKind::is_recoverable`])
/// or an approval the operator rejected. Every other fault (a crash, a lost answer, a throttle, a
/// partial send, a tool or model error …) must cost a retry, not the subtask; the deadline
/// passing after such faults is counted here. Shown, not failed on (issue 18 point 1's target).
pub(super) fn failed_though_recoverable(f: &RunFacts, t: &mut Sheet) {
    let rejected: BTreeSet<(String, String)> = f
        .operator
        .decided
        .values()
        .filter(|d| d.decision == Decision::Reject)
        .map(|d| (d.conversation_id.clone(), d.subtask_id.clone()))
        .collect();
    let mut failed = 0usize;
    let mut excused = 0usize;
    for (id, (_, subtasks)) in f.store.iter().filter_map(|(id, e)| e.as_ref().map(|e| (id, e))) {
        for s in subtasks.iter().filter(|s| s.status == SubtaskStatus::Failed) {
            failed += 1;
            let key = (id.clone(), s.subtask.id.as_str().to_owned());
            excused += usize::from(f.unrecoverable.contains(&key) || rejected.contains(&key));
        }
    }
    t.row(
        "subtasks failed though every fault they met was recoverable",
        format!("{} of {failed} failed ({excused} met a poisoned message or a rejected approval)", failed - excused),
    );
}

/// Which store operations the store faults hit: `op lost/throttled` (shown). A lost answer of an
/// operation listed here was survived when the run passed.
pub(super) fn store_faults_by_op(f: &RunFacts, t: &mut Sheet) {
    let ops: Vec<String> =
        f.store_faults.iter().map(|(op, (lost, throttled))| format!("{op} {lost}/{throttled}")).collect();
    t.row(
        "store faults by operation (answer lost / throttled)",
        if ops.is_empty() { "none".into() } else { ops.join(", ") },
    );
}
