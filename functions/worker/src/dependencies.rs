//! Pure decisions on a subtask's dependencies: whether it may run (and with which answers), and which dependents a finished parent releases or skips.

use std::collections::HashMap;

use swarm_core::domain::{SubtaskId, SubtaskRecord, SubtaskResult, SubtaskStatus};
use swarm_core::prompts::DependencyResult;

/// Where a subtask's dependencies stand.
#[derive(Debug, PartialEq, Eq)]
pub enum DependencyState {
    Ready(Vec<DependencyResult>),
    /// This dependency ended failed or skipped.
    Failed(SubtaskId),
    /// This dependency is not finished.
    Waiting(SubtaskId),
}

/// Pure: the results of `record`'s dependencies among `all`.
pub fn dependency_results(record: &SubtaskRecord, all: &[SubtaskRecord]) -> DependencyState {
    let mut out = Vec::new();
    for dep in &record.subtask.depends_on {
        let Some(r) = all.iter().find(|r| &r.subtask.id == dep) else {
            return DependencyState::Failed(dep.clone());
        };
        match &r.result {
            Some(SubtaskResult::Succeeded { text, .. }) => out.push(DependencyResult {
                id: dep.clone(),
                instruction: r.subtask.instruction.clone(),
                answer: text.clone(),
            }),
            // Its side effect is being confirmed: the confirmation settles it, and decides then.
            Some(SubtaskResult::Submitted { .. }) => return DependencyState::Waiting(dep.clone()),
            Some(_) => return DependencyState::Failed(dep.clone()),
            None => return DependencyState::Waiting(dep.clone()),
        }
    }
    DependencyState::Ready(out)
}

/// What to do with a `PENDING` dependent once a parent finished.
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// All its dependencies succeeded: flip `PENDING → QUEUED` and enqueue.
    Enqueue(SubtaskId),
    /// A dependency failed or was skipped: record it skipped, naming that dependency.
    Skip(SubtaskId, SubtaskId),
}

/// Pure: the dependents of `finished` that can now be decided. One whose
/// other dependencies are still open is left for the last parent to finish; a `SUBMITTED`
/// parent (its side effect still being confirmed) is open too: its confirmation settles it and
/// decides its dependents then (and while it never settles, the deadline path closes them).
pub fn release_decisions(all: &[SubtaskRecord], finished: &SubtaskId) -> Vec<Release> {
    let by_id: HashMap<&SubtaskId, &SubtaskRecord> = all.iter().map(|r| (&r.subtask.id, r)).collect();
    let mut out = Vec::new();
    for r in all {
        if r.status != SubtaskStatus::Pending || !r.subtask.depends_on.iter().any(|d| d == finished) {
            continue;
        }
        let mut open = false;
        let mut failed = None;
        for d in &r.subtask.depends_on {
            match by_id.get(d).map(|x| x.status) {
                Some(SubtaskStatus::Succeeded) => {}
                Some(SubtaskStatus::Submitted) => open = true,
                Some(s) if s.is_terminal() => {
                    failed.get_or_insert_with(|| d.clone());
                }
                None => {
                    failed.get_or_insert_with(|| d.clone());
                }
                Some(_) => open = true,
            }
        }
        match failed {
            Some(dep) => out.push(Release::Skip(r.subtask.id.clone(), dep)),
            None if !open => out.push(Release::Enqueue(r.subtask.id.clone())),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_core::domain::{Conversation, FailureKind, Subtask};

    fn rec(id: &str, deps: &[&str], status: SubtaskStatus) -> SubtaskRecord {
        let c = Conversation::new("C1", "q", 0, 120);
        let mut r = SubtaskRecord::new(
            &c,
            Subtask {
                id: id.into(),
                instruction: id.into(),
                tools: vec![],
                depends_on: deps.iter().map(|d| (*d).into()).collect(),
            },
            "support".into(),
        );
        r.status = status;
        r.result = match status {
            SubtaskStatus::Succeeded => Some(SubtaskResult::Succeeded { text: format!("{id} ok"), tool_calls: vec![] }),
            SubtaskStatus::Failed => Some(SubtaskResult::failed(FailureKind::Internal, "x")),
            SubtaskStatus::Skipped => Some(SubtaskResult::Skipped { dependency: "y".into() }),
            SubtaskStatus::Submitted => Some(SubtaskResult::Submitted { tools: vec!["shop__open_ticket".into()] }),
            SubtaskStatus::AwaitingApproval => Some(SubtaskResult::AwaitingApproval { approvals: vec![] }),
            _ => None,
        };
        r
    }

    #[test]
    fn dependent_is_released_only_when_all_parents_succeeded() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &[], Running), rec("c", &["a", "b"], Pending)];
        assert!(release_decisions(&all, &"a".into()).is_empty());
        let all = vec![rec("a", &[], Succeeded), rec("b", &[], Succeeded), rec("c", &["a", "b"], Pending)];
        assert_eq!(release_decisions(&all, &"b".into()), vec![Release::Enqueue("c".into())]);
    }

    #[test]
    fn dependent_of_a_failed_parent_is_skipped_naming_it() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Failed), rec("b", &["a"], Pending), rec("c", &["b"], Pending)];
        assert_eq!(release_decisions(&all, &"a".into()), vec![Release::Skip("b".into(), "a".into())]);
        // c waits for b's decision, not a's.
        assert!(release_decisions(&all, &"x".into()).is_empty());
    }

    #[test]
    fn already_queued_dependent_is_not_released_twice() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &["a"], Queued)];
        assert!(release_decisions(&all, &"a".into()).is_empty());
    }

    #[test]
    fn dependent_of_a_submitted_parent_waits_for_its_confirmation() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Submitted), rec("b", &["a"], Pending)];
        assert!(release_decisions(&all, &"a".into()).is_empty(), "neither released nor skipped");
        assert_eq!(dependency_results(&all[1], &all), DependencyState::Waiting("a".into()));
        // With another parent failed, it is skipped at once, naming that one.
        let all = vec![rec("a", &[], Submitted), rec("x", &[], Failed), rec("b", &["a", "x"], Pending)];
        assert_eq!(release_decisions(&all, &"x".into()), vec![Release::Skip("b".into(), "x".into())]);
        assert_eq!(dependency_results(&all[2], &all), DependencyState::Waiting("a".into()), "the first open one");
    }

    #[test]
    fn dependent_of_a_confirmed_parent_is_released_then_and_skipped_when_it_needs_a_person() {
        use SubtaskStatus::*;
        // The confirmation settled the parent SUCCEEDED with the journal's result.
        let mut parent = rec("a", &[], Succeeded);
        parent.result = Some(SubtaskResult::Succeeded { text: "ticket T-1 opened".into(), tool_calls: vec![] });
        let all = vec![parent, rec("b", &["a"], Pending)];
        assert_eq!(release_decisions(&all, &"a".into()), vec![Release::Enqueue("b".into())]);
        match dependency_results(&all[1], &all) {
            DependencyState::Ready(d) => assert_eq!(d[0].answer, "ticket T-1 opened"),
            other => panic!("{other:?}"),
        }
        // A replay answered by a request for consent: settled AWAITING_APPROVAL, the dependent skipped.
        let all = vec![rec("a", &[], AwaitingApproval), rec("b", &["a"], Pending)];
        assert_eq!(release_decisions(&all, &"a".into()), vec![Release::Skip("b".into(), "a".into())]);
        assert_eq!(dependency_results(&all[1], &all), DependencyState::Failed("a".into()));
    }

    #[test]
    fn dependency_results_carry_parent_answers() {
        use SubtaskStatus::*;
        let all = vec![rec("a", &[], Succeeded), rec("b", &["a"], Running)];
        match dependency_results(&all[1], &all) {
            DependencyState::Ready(d) => assert_eq!(d[0].answer, "a ok"),
            other => panic!("{other:?}"),
        }
    }
}
