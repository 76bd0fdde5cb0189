//! Contract of the DynamoDB store with the items it wrote before its codec went through `serde_dynamo` (`shared/adapters/tests/fixtures/dynamo_items.json`): put into a table of the emulator as they are, every item reads back through the store as it did then, and the writes that find them (a retried create, a second count, a rate window) answer as they did.
//!
//! DynamoDB only (the embedded store keeps values, not items): needs `SWARM_AWS_ENDPOINT`,
//! unless `SWARM_SKIP_AWS=1`.

// DynamoDB only: the both-adapters macro and the store helper stay unused here.
#[allow(dead_code, unused_macros)]
mod common;

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_core::access::{AccessStore, Principal, RateWindow, SlotOutcome};
use swarm_core::approval::Approval;
use swarm_core::domain::{Conversation, SubtaskRecord, Usage};
use swarm_core::ports::{
    AccountingStore, ApprovalStore, ConversationRecords, CountOutcome, CreateOutcome, SubtaskStore,
};

fn fixture() -> Result<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/adapters/tests/fixtures/dynamo_items.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

fn entries<'a>(all: &'a Value, kind: &str) -> Vec<&'a Value> {
    ["encoded", "stored"].iter().filter_map(|source| all[*source][kind].as_array()).flatten().collect()
}

/// Puts every fixture item into a fresh table as it is; the store on that table.
async fn table_of_old_items(all: &Value) -> Result<Option<DynamoConversationStore>> {
    let Some((client, table)) = common::dynamo_table("items_written_before_the_codec").await? else {
        return Ok(None);
    };
    let kinds = ["conversations", "subtasks", "approvals", "idempotency", "principals", "windows"];
    for entry in kinds.iter().flat_map(|kind| entries(all, kind)) {
        let item: serde_dynamo::Item = serde_json::from_value(entry["item"].clone())?;
        client.put_item().table_name(&table).set_item(Some(item.into())).send().await?;
    }
    Ok(Some(DynamoConversationStore::new(client, table)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn items_written_before_the_serde_codec_read_back_through_the_store_as_before() -> Result<()> {
    let all = fixture()?;
    let Some(store) = table_of_old_items(&all).await? else { return Ok(()) };
    for entry in entries(&all, "conversations") {
        let expected: Conversation = serde_json::from_value(entry["value"].clone())?;
        assert_eq!(store.get_conversation(&expected.id).await?.as_ref(), Some(&expected));
    }
    for entry in entries(&all, "subtasks") {
        let expected: SubtaskRecord = serde_json::from_value(entry["value"].clone())?;
        let read = store.get_subtask(&expected.conversation_id, &expected.subtask.id).await?;
        assert_eq!(read.as_ref(), Some(&expected));
    }
    for entry in entries(&all, "approvals") {
        let expected: Approval = serde_json::from_value(entry["value"].clone())?;
        assert_eq!(store.get_approval(&expected.id).await?.as_ref(), Some(&expected));
    }
    // The stored lifecycle's conversation lists its three subtasks, in key order.
    let lifecycle: Conversation = serde_json::from_value(all["stored"]["conversations"][0]["value"].clone())?;
    let listed: Vec<String> =
        store.list_subtasks(&lifecycle.id).await?.iter().map(|r| r.subtask.id.to_string()).collect();
    assert_eq!(listed, ["w01", "w02", "w03"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_that_meet_items_written_before_the_serde_codec_answer_as_before() -> Result<()> {
    let all = fixture()?;
    let Some(store) = table_of_old_items(&all).await? else { return Ok(()) };
    // A retried create finds the idempotency key's old claim and its conversation.
    let claimed: Conversation = serde_json::from_value(all["stored"]["conversations"][0]["value"].clone())?;
    let mut retry = Conversation::new(&claimed.customer_id, &claimed.query, claimed.created_at_ms, 120);
    retry.idempotency_key = claimed.idempotency_key.clone();
    retry.request_hash = claimed.request_hash.clone();
    assert_eq!(store.create_conversation(&retry).await?, CreateOutcome::Existing(claimed.id.clone()));
    retry.request_hash = Some("0000000000000000".into());
    assert_eq!(store.create_conversation(&retry).await?, CreateOutcome::KeyReused(claimed.id.clone()));
    // A subtask already in the old `finished` set is not counted again.
    let again = store.count_finished(&claimed.id, &"w01".into(), &Usage::default()).await?;
    assert_eq!(again, CountOutcome::AlreadyCounted);
    // The old mapping names its customer; the old rate window goes on counting.
    let principal_entry = &all["stored"]["principals"][0];
    let principal =
        Principal::parse(principal_entry["principal"].as_str().context("principal")?).map_err(anyhow::Error::msg)?;
    assert_eq!(store.customer_for(&principal).await?.as_deref(), Some("C104"));
    let window_start: i64 = all["stored"]["windows"][0]["item"]["SK"]["S"]
        .as_str()
        .and_then(|sk| sk.strip_prefix("WINDOW#"))
        .context("a window's sort key")?
        .parse()?;
    let window = RateWindow { start_ms: window_start };
    let taken = store.take_conversation_slot("C104", window, 10).await?;
    ensure!(taken == SlotOutcome::Taken { used: 2 }, "the old window's count goes on: {taken:?}");
    Ok(())
}
