//! The operator's queue (`GET /approvals?status=pending`, [`Approvals::list`]): a pending approval behind more decided ones than a page reads is listed on the first page, and the pending ones page with the list's cursor, each once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use orchestrator::Approvals;
use orchestrator::approvals::MAX_SCANNED;
use swarm_adapters::embedded::{InMemoryConversationStore, InMemoryQueue, QueueSettings};
use swarm_core::approval::{Approval, ApprovalKey, ApprovalStatus, ProposedAction, approval_id};
use swarm_core::domain::{ConversationId, now_ms};
use swarm_core::ports::{ApprovalStore, TaskQueue};
use swarm_core::roles::TaskQueues;
use swarm_core::timings::Timings;

/// Conversation ids in time order (UUIDv7-shaped: the list is newest first by id).
const OLDER: &str = "0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07";
const NEWER: &str = "0190f5a3-0000-7d3a-9b42-5e8f3c2a1d07";

fn approval(conversation: &str, ordinal: u32, status: ApprovalStatus) -> Approval {
    let now = now_ms();
    let conversation_id = ConversationId::from_trusted(conversation);
    Approval {
        id: approval_id(&conversation_id, &"w01".into(), ordinal),
        conversation_id,
        subtask_id: "w01".into(),
        ordinal,
        customer_id: "C104".into(),
        role: "refund".into(),
        action: ProposedAction {
            tool: "shop__refund".into(),
            order_id: "A1033".into(),
            amount_cents: 4_900,
            reason: None,
        },
        status,
        created_at_ms: now,
        expires_at_ms: now + 3_600_000,
        decided_by: (status != ApprovalStatus::Pending).then(|| "ops@example.com".into()),
        decided_at_ms: (status != ApprovalStatus::Pending).then_some(now),
        token: None,
        reissued_at_ms: None,
        outcome: None,
        finished_at_ms: None,
        ttl: now / 1000 + 86_400,
    }
}

async fn approvals_with(store: &Arc<InMemoryConversationStore>) -> Approvals {
    let queue = Arc::new(InMemoryQueue::new(QueueSettings::default()));
    let queues = TaskQueues::new(queue as Arc<dyn TaskQueue>);
    let key = ApprovalKey::new("approval-key-for-the-pending-test-0123456789").unwrap();
    Approvals::new(store.clone(), queues, key, Timings::standard())
}

#[tokio::test]
async fn an_old_pending_approval_behind_more_decided_ones_than_a_page_reads_is_listed_first() {
    let store = Arc::new(InMemoryConversationStore::new());
    let waiting = approval(OLDER, 1, ApprovalStatus::Pending);
    store.create_approval(&waiting).await.unwrap();
    let decided = u32::try_from(MAX_SCANNED).unwrap() + 1;
    for ordinal in 1..=decided {
        store.create_approval(&approval(NEWER, ordinal, ApprovalStatus::Rejected)).await.unwrap();
    }
    let approvals = approvals_with(&store).await;

    let page = approvals.list(Some(ApprovalStatus::Pending), 50, None).await.unwrap();
    let listed: Vec<&str> = page.approvals.iter().map(|a| a.approval_id.as_str()).collect();
    assert_eq!(listed, [waiting.id.as_str()]);
    assert_eq!(page.next_cursor, None, "the only pending approval: no further page");
    // Unfiltered, the newest page holds decided ones only: the old one is far behind.
    let all = approvals.list(None, 100, None).await.unwrap();
    assert!(all.approvals.iter().all(|a| a.status == ApprovalStatus::Rejected));
}

#[tokio::test]
async fn pending_approvals_page_with_the_cursor_each_once() {
    let store = Arc::new(InMemoryConversationStore::new());
    let mut pending = Vec::new();
    for ordinal in 1..=3 {
        let a = approval(OLDER, ordinal, ApprovalStatus::Pending);
        store.create_approval(&a).await.unwrap();
        pending.push(a.id);
    }
    for ordinal in 1..=200 {
        store.create_approval(&approval(NEWER, ordinal, ApprovalStatus::Approved)).await.unwrap();
    }
    pending.sort();
    pending.reverse();
    let approvals = approvals_with(&store).await;

    let first = approvals.list(Some(ApprovalStatus::Pending), 2, None).await.unwrap();
    let cursor = first.next_cursor.clone().expect("a second page");
    let second = approvals.list(Some(ApprovalStatus::Pending), 2, Some(&cursor)).await.unwrap();
    assert_eq!(second.next_cursor, None);
    let walked: Vec<String> = first.approvals.iter().chain(&second.approvals).map(|a| a.approval_id.clone()).collect();
    assert_eq!(walked, pending);
}
