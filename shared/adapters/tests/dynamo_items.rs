//! The DynamoDB codec against the items the store wrote before its codec went through `serde_dynamo` (`fixtures/dynamo_items.json`): every item reads back as the value it was read as then, and every item the encoders wrote is written attribute for attribute the same.

use anyhow::{Context, Result, ensure};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;
use swarm_adapters::aws::dynamo::codec::{
    IdempotencyClaim, Item, ItemKey, approval_from_item, approval_item, conversation_from_item, conversation_item,
    idempotency_claim, idempotency_item, principal_customer, subtask_from_item, subtask_item,
};
use swarm_core::approval::{Approval, ApprovalStatus};
use swarm_core::domain::{Conversation, ConversationId, SubtaskRecord};

fn fixture() -> Result<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dynamo_items.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// A fixture item (DynamoDB JSON, as the stream and the CLI show it) as the SDK's item.
fn item(entry: &Value) -> Result<Item> {
    let item: serde_dynamo::Item = serde_json::from_value(entry["item"].clone())?;
    Ok(item.into())
}

fn entries<'a>(all: &'a Value, source: &str, kind: &str) -> Result<&'a Vec<Value>> {
    let list = all[source][kind].as_array().with_context(|| format!("{source}.{kind} in the fixture"))?;
    ensure!(!list.is_empty(), "{source}.{kind} holds no items");
    Ok(list)
}

#[test]
fn conversation_items_read_as_before_and_are_written_as_before() -> Result<()> {
    let all = fixture()?;
    for source in ["encoded", "stored"] {
        for entry in entries(&all, source, "conversations")? {
            let expected: Conversation = serde_json::from_value(entry["value"].clone())?;
            let item = item(entry)?;
            assert_eq!(conversation_from_item(&item)?, expected, "{source}");
            assert_eq!(ItemKey::of(item.clone()), Some(ItemKey::conversation(&expected.id)));
            if source == "encoded" {
                assert_eq!(conversation_item(&expected)?, item, "the item written for {}", expected.id);
            }
        }
    }
    Ok(())
}

#[test]
fn subtask_items_read_as_before_and_are_written_as_before() -> Result<()> {
    let all = fixture()?;
    for source in ["encoded", "stored"] {
        for entry in entries(&all, source, "subtasks")? {
            let expected: SubtaskRecord = serde_json::from_value(entry["value"].clone())?;
            let item = item(entry)?;
            assert_eq!(subtask_from_item(&item)?, expected, "{source} {}", expected.subtask.id);
            let key = ItemKey::subtask(&expected.conversation_id, &expected.subtask.id);
            assert_eq!(ItemKey::of(item.clone()), Some(key));
            if source == "encoded" {
                assert_eq!(subtask_item(&expected)?, item, "the item written for {}", expected.subtask.id);
            }
        }
    }
    Ok(())
}

#[test]
fn approval_items_read_as_before_and_are_written_as_before() -> Result<()> {
    let all = fixture()?;
    for source in ["encoded", "stored"] {
        for entry in entries(&all, source, "approvals")? {
            let expected: Approval = serde_json::from_value(entry["value"].clone())?;
            let item = item(entry)?;
            assert_eq!(approval_from_item(&item)?, expected, "{source} {}", expected.id);
            assert_eq!(ItemKey::of(item.clone()), Some(ItemKey::approval(&expected.id)));
            if source == "encoded" {
                // Since the pending approvals' index, a pending approval is written with its keys
                // too (`pending_pk`, `pending_sk`); every other attribute as before.
                let mut written = item.clone();
                if expected.status == ApprovalStatus::Pending {
                    written.insert("pending_pk".into(), AttributeValue::S("APPROVALS".into()));
                    written.insert("pending_sk".into(), AttributeValue::S(expected.id.clone()));
                }
                assert_eq!(approval_item(&expected)?, written, "the item written for {}", expected.id);
            }
        }
    }
    Ok(())
}

#[test]
fn idempotency_principal_and_window_items_read_as_before() -> Result<()> {
    let all = fixture()?;
    for source in ["encoded", "stored"] {
        for entry in entries(&all, source, "idempotency")? {
            let item = item(entry)?;
            let expected = IdempotencyClaim {
                conversation_id: serde_json::from_value::<ConversationId>(entry["conversation_id"].clone())?,
                request_hash: serde_json::from_value(entry["request_hash"].clone())?,
            };
            assert_eq!(idempotency_claim(&item)?, expected, "{source}");
            let Some(ItemKey::Idempotency { customer_id, key }) = ItemKey::of(item.clone()) else {
                anyhow::bail!("{source}: not an idempotency key's claim: {item:?}");
            };
            // The claim is written whole by the store's transaction: the encoder writes it so again.
            let ttl = item["ttl"].as_n().ok().context("ttl")?.parse()?;
            let written =
                idempotency_item(&customer_id, &key, &expected.conversation_id, expected.request_hash.as_deref(), ttl)?;
            assert_eq!(written, item, "{source}");
        }
    }
    for entry in entries(&all, "stored", "principals")? {
        let item = item(entry)?;
        assert_eq!(Some(principal_customer(&item)?), serde_json::from_value(entry["customer_id"].clone())?);
        let Some(ItemKey::Principal(p)) = ItemKey::of(item) else { anyhow::bail!("not a principal's mapping") };
        assert_eq!(p.to_string(), entry["principal"].as_str().context("principal")?);
    }
    for entry in entries(&all, "stored", "windows")? {
        let key = ItemKey::of(item(entry)?);
        assert!(matches!(key, Some(ItemKey::RateWindow { ref customer_id, .. }) if customer_id == "C104"), "{key:?}");
    }
    Ok(())
}
