//! The store contract suites' shared fixtures: a conversation, its subtask records, a conversation started with them, a succeeded result.

use std::sync::Arc;

use anyhow::{Result, ensure};
use swarm_core::domain::{Conversation, Subtask, SubtaskRecord, SubtaskResult, ToolCallRecord, Usage, now_ms};
use swarm_core::ports::{ConversationStore, CreateOutcome, RecordOutcome};

type Store = Arc<dyn ConversationStore>;

/// The record a `record_result` wrote; an error for any other outcome.
pub fn recorded(outcome: RecordOutcome) -> Result<SubtaskRecord> {
    match outcome {
        RecordOutcome::Recorded(written) => Ok(written),
        other => anyhow::bail!("expected Recorded, got {other:?}"),
    }
}

pub fn conversation(customer: &str) -> Conversation {
    Conversation::new(customer, "where is order A1029 and is coupon SAVE20 valid?", now_ms(), 120)
}

pub fn record(conv: &Conversation, id: &str, depends_on: &[&str]) -> SubtaskRecord {
    let subtask = Subtask {
        id: id.to_owned().into(),
        instruction: format!("find out part {id}"),
        tools: vec!["shop__get_order".into()],
        depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
    };
    SubtaskRecord::new(conv, subtask, "reader".into())
}

/// A conversation created and started with subtasks `ids` (no dependencies).
pub async fn running(store: &Store, ids: &[&str]) -> Result<(Conversation, Vec<SubtaskRecord>)> {
    let conv = conversation("C104");
    ensure!(store.create_conversation(&conv).await? == CreateOutcome::Created);
    let records: Vec<SubtaskRecord> = ids.iter().map(|id| record(&conv, id, &[])).collect();
    ensure!(store.start_run(&conv.id, None, &records, &[], &Usage::default()).await?, "start_run refused");
    Ok((conv, records))
}

pub fn succeeded(text: &str) -> SubtaskResult {
    SubtaskResult::Succeeded {
        text: text.to_owned(),
        tool_calls: vec![ToolCallRecord { name: "shop__get_order".into(), ok: true, error: None, facts: vec![] }],
    }
}
