//! Whole items <-> domain values: one typed shape per kind of item, attribute for attribute, turned into a table item and back by `serde_dynamo`.
//!
//! A shape names each attribute once, with its DynamoDB type (a `BTreeSet` with
//! `string_set` is `SS`, a `Vec` is `L`, a [`JsonText`] is `S` holding JSON, an `Option` is
//! absent when `None`); the conversions between a shape and its domain value hold what the
//! attributes alone cannot say (a lease present only with all its parts, the status beside an
//! approval's JSON winning over it).

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use swarm_core::access::Principal;
use swarm_core::approval::{Approval, ApprovalStatus};
use swarm_core::decisions::Notice;
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, HandoffReason, Lease, Subtask, SubtaskId, SubtaskRecord,
    SubtaskResult, SubtaskStatus, TurnAuthor, TurnRecord, Usage,
};
use swarm_core::effects::{AttemptLease, Effect};
use swarm_core::language::Language;
use swarm_core::ports::StoreError;

use super::keys::ItemKey;
use super::values::{Item, JsonText, fit_checkpoint, fitted_result};

/// A corrupt item as a permanent error naming its keys (never its attributes: they hold customer text).
fn corrupt(item: &Item, what: &str) -> StoreError {
    let key = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    StoreError::Permanent(format!("corrupt item {}/{}: {what}", key("PK"), key("SK")))
}

fn encode<T: Serialize>(shape: &T) -> Result<Item, StoreError> {
    serde_dynamo::to_item(shape).map_err(|e| StoreError::Permanent(format!("cannot encode an item: {e}")))
}

fn decode<T: DeserializeOwned>(item: &Item) -> Result<T, StoreError> {
    serde_dynamo::from_item(item.clone()).map_err(|e| corrupt(item, &e.to_string()))
}

/// The conversation item (`CONV#<id>` / `META`).
#[derive(Serialize, Deserialize)]
struct ConversationItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    status: ConversationStatus,
    remaining: u32,
    total: u32,
    customer_id: String,
    query: String,
    created_at_ms: i64,
    deadline_ms: i64,
    /// The exactly-once guard: absent while empty (DynamoDB has no empty set).
    #[serde(default, with = "serde_dynamo::string_set", skip_serializing_if = "BTreeSet::is_empty")]
    finished: BTreeSet<String>,
    /// The plan's subtask ids (written by `start_run`'s flip); absent while empty and on items written before.
    #[serde(default, with = "serde_dynamo::string_set", skip_serializing_if = "BTreeSet::is_empty")]
    plan: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    handoff_reason: Option<HandoffReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    handoff_at_ms: Option<i64>,
    /// Written with a hand-off: the hand-off event's detail names the conversation (the pipe
    /// cannot strip the key's prefix). Never read: the key says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conversation_id: Option<ConversationId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_hash: Option<String>,
    #[serde(default)]
    turn: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    turn_started_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<i64>,
    /// The reply's language as its BCP 47 tag; absent on items written before languages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_turn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sweep_shard: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued_at_ms: Option<i64>,
    /// Who wrote the turn's message; absent: the customer (and every item written before authors).
    #[serde(default, skip_serializing_if = "TurnAuthor::is_customer")]
    author: TurnAuthor,
    /// Usage as flat `N` attributes, each present only when known (the update expressions `ADD` to them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage_prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage_cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage_cost_usd: Option<f64>,
    ttl: i64,
}

/// The conversation item (`PK = CONV#<id>`, `SK = META`) as the store writes it (also the local
/// platform's stream images).
///
/// Errors: [`StoreError::Permanent`] when it does not encode.
pub fn conversation_item(c: &Conversation) -> Result<Item, StoreError> {
    let key = ItemKey::conversation(&c.id);
    encode(&ConversationItem {
        pk: key.pk(),
        sk: key.sk(),
        status: c.status,
        remaining: c.remaining,
        total: c.total,
        customer_id: c.customer_id.clone(),
        query: c.query.clone(),
        created_at_ms: c.created_at_ms,
        deadline_ms: c.deadline_ms,
        finished: c.finished.clone(),
        plan: c.plan.clone(),
        reply: c.reply.clone(),
        notes: c.notes.clone(),
        error: c.error.clone(),
        idempotency_key: c.idempotency_key.clone(),
        trace_parent: c.trace_parent.clone(),
        handoff_reason: c.handoff.map(|h| h.reason),
        handoff_at_ms: c.handoff.map(|h| h.at_ms),
        conversation_id: c.handoff.map(|_| c.id.clone()),
        request_hash: c.request_hash.clone(),
        turn: c.turn,
        turn_started_at_ms: c.turn_started_at_ms,
        expires_at_ms: c.expires_at_ms,
        language: c.language.map(|l| l.tag().to_owned()),
        lease_holder: c.lease.as_ref().map(|l| l.holder.clone()),
        lease_until_ms: c.lease.as_ref().map(|l| l.until_ms),
        lease_turn: c.lease.as_ref().map(|l| l.turn),
        sweep_shard: c.sweep_shard,
        queued_at_ms: c.queued_at_ms,
        author: c.author,
        usage_prompt_tokens: c.usage.prompt_tokens,
        usage_completion_tokens: c.usage.completion_tokens,
        usage_cached_tokens: c.usage.cached_tokens,
        // NaN and infinities have no DynamoDB number form; an unknowable cost stays unknown.
        usage_cost_usd: c.usage.cost_usd.filter(|v| v.is_finite()),
        ttl: c.ttl,
    })
}

/// The conversation a conversation item holds.
///
/// Errors: [`StoreError::Permanent`] when the item is not a conversation item or is corrupt.
pub fn conversation_from_item(item: &Item) -> Result<Conversation, StoreError> {
    let c: ConversationItem = decode(item)?;
    let Some(ItemKey::Conversation(id)) = ItemKey::parse(&c.pk, &c.sk) else {
        return Err(corrupt(item, "not a conversation item's keys"));
    };
    let lease = match (c.lease_holder, c.lease_until_ms, c.lease_turn) {
        (Some(holder), Some(until_ms), Some(turn)) => Some(Lease { holder, until_ms, turn }),
        _ => None,
    };
    let language = match c.language.as_deref() {
        None => None,
        Some(tag) => Some(Language::parse(tag).ok_or_else(|| corrupt(item, &format!("unknown language {tag}")))?),
    };
    Ok(Conversation {
        id,
        customer_id: c.customer_id,
        status: c.status,
        query: c.query,
        created_at_ms: c.created_at_ms,
        deadline_ms: c.deadline_ms,
        total: c.total,
        remaining: c.remaining,
        finished: c.finished,
        plan: c.plan,
        reply: c.reply,
        usage: Usage {
            prompt_tokens: c.usage_prompt_tokens,
            completion_tokens: c.usage_completion_tokens,
            cached_tokens: c.usage_cached_tokens,
            cost_usd: c.usage_cost_usd,
        },
        notes: c.notes,
        error: c.error,
        idempotency_key: c.idempotency_key,
        trace_parent: c.trace_parent,
        handoff: c.handoff_reason.map(|reason| Handoff { reason, at_ms: c.handoff_at_ms.unwrap_or(0) }),
        request_hash: c.request_hash,
        turn: c.turn,
        turn_started_at_ms: c.turn_started_at_ms,
        expires_at_ms: c.expires_at_ms,
        language,
        lease,
        sweep_shard: c.sweep_shard,
        queued_at_ms: c.queued_at_ms,
        author: c.author,
        ttl: c.ttl,
    })
}

/// An item holding one record as JSON (`record` S) and the TTL: a finished turn's archive
/// (`CONV#<id>` / `TURN#<n>`, at most the message's 32 KB and the reply's 200 KB) or a told turn's
/// notice (`CONV#<id>` / `NOTICE#<key>`).
#[derive(Serialize, Deserialize)]
struct RecordItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    record: String,
    ttl: i64,
}

/// The item of `record` (`what` names it in errors) under `key`.
fn record_item<T: Serialize>(key: &ItemKey, record: &T, ttl: i64, what: &str) -> Result<Item, StoreError> {
    let record = serde_json::to_string(record).map_err(|e| StoreError::Permanent(format!("{what} record: {e}")))?;
    encode(&RecordItem { pk: key.pk(), sk: key.sk(), record, ttl })
}

/// The record a [`RecordItem`] holds, when its keys are `kind`'s (`what` names it in errors).
fn record_from_item<T: DeserializeOwned>(item: &Item, kind: fn(&ItemKey) -> bool, what: &str) -> Result<T, StoreError> {
    let t: RecordItem = decode(item)?;
    if !ItemKey::parse(&t.pk, &t.sk).as_ref().is_some_and(kind) {
        return Err(corrupt(item, &format!("not a {what} item's keys")));
    }
    serde_json::from_str(&t.record).map_err(|_| corrupt(item, &format!("{what} record is not JSON")))
}

/// The archive item of `turn`, a turn of conversation `id`.
///
/// Errors: [`StoreError::Permanent`] when it does not encode.
pub fn turn_item(id: &ConversationId, turn: &TurnRecord) -> Result<Item, StoreError> {
    record_item(&ItemKey::Turn(id.clone(), turn.turn), turn, turn.ttl, "turn")
}

/// The turn an archive item holds.
///
/// Errors: [`StoreError::Permanent`] when the item is not a turn's archive or is corrupt.
pub fn turn_from_item(item: &Item) -> Result<TurnRecord, StoreError> {
    record_from_item(item, |k| matches!(k, ItemKey::Turn(..)), "turn")
}

/// The notice item of `notice`, on conversation `id`.
///
/// Errors: [`StoreError::Permanent`] when it does not encode.
pub fn notice_item(id: &ConversationId, notice: &Notice) -> Result<Item, StoreError> {
    record_item(&ItemKey::Notice(id.clone(), notice.key.clone()), notice, notice.ttl, "notice")
}

/// The notice a notice item holds.
///
/// Errors: [`StoreError::Permanent`] when the item is not a notice or is corrupt.
pub fn notice_from_item(item: &Item) -> Result<Notice, StoreError> {
    record_from_item(item, |k| matches!(k, ItemKey::Notice(..)), "notice")
}

/// `remaining` of the attributes an `UpdateItem` answered (`UPDATED_NEW` of a count).
///
/// Errors: [`StoreError::Permanent`] when it is missing or not a count.
pub(crate) fn remaining_of(item: &Item) -> Result<u32, StoreError> {
    #[derive(Deserialize)]
    struct Remaining {
        remaining: u32,
    }
    Ok(decode::<Remaining>(item)?.remaining)
}

/// A subtask item (`CONV#<id>` / `TASK#<subtask id>`).
#[derive(Serialize, Deserialize)]
struct SubtaskItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    status: SubtaskStatus,
    subtask: JsonText<Subtask>,
    role: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dependents: Vec<SubtaskId>,
    #[serde(default)]
    attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<JsonText<SubtaskResult>>,
    /// Absent while nothing is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<JsonText<Usage>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tools_used: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished_at_ms: Option<i64>,
    /// The side-effect journal: one JSON text per entry, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    effects: Vec<JsonText<Effect>>,
    /// The attempt lease (same attribute names as a conversation's lease, on another item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<i64>,
    ttl: i64,
}

/// A subtask item (`PK = CONV#<id>`, `SK = TASK#<subtask id>`) as the store writes it: the
/// result fitted to its budget, the checkpoint cut to its own.
///
/// Errors: [`StoreError::Permanent`] when a part does not serialise.
pub fn subtask_item(r: &SubtaskRecord) -> Result<Item, StoreError> {
    let key = ItemKey::subtask(&r.conversation_id, &r.subtask.id);
    encode(&SubtaskItem {
        pk: key.pk(),
        sk: key.sk(),
        status: r.status,
        subtask: JsonText(r.subtask.clone()),
        role: r.role.clone(),
        dependents: r.dependents.clone(),
        attempts: r.attempts,
        result: r.result.as_ref().map(fitted_result).transpose()?.map(JsonText),
        usage: (!r.usage.is_empty()).then_some(JsonText(r.usage)),
        tools_used: r.tools_used.clone(),
        checkpoint: r.checkpoint.as_deref().map(fit_checkpoint),
        started_at_ms: r.started_at_ms,
        finished_at_ms: r.finished_at_ms,
        effects: r.effects.iter().cloned().map(JsonText).collect(),
        lease_holder: r.lease.as_ref().map(|l| l.holder.clone()),
        lease_until_ms: r.lease.as_ref().map(|l| l.until_ms),
        ttl: r.ttl,
    })
}

/// The subtask record a subtask item holds.
///
/// Errors: [`StoreError::Permanent`] when the item is not a subtask item or is corrupt.
pub fn subtask_from_item(item: &Item) -> Result<SubtaskRecord, StoreError> {
    let r: SubtaskItem = decode(item)?;
    let Some(ItemKey::Subtask(conversation_id, _)) = ItemKey::parse(&r.pk, &r.sk) else {
        return Err(corrupt(item, "not a subtask item's keys"));
    };
    let lease = match (r.lease_holder, r.lease_until_ms) {
        (Some(holder), Some(until_ms)) => Some(AttemptLease { holder, until_ms }),
        _ => None,
    };
    Ok(SubtaskRecord {
        conversation_id,
        subtask: r.subtask.0,
        role: r.role,
        dependents: r.dependents,
        status: r.status,
        attempts: r.attempts,
        result: r.result.map(|j| j.0),
        usage: r.usage.map(|j| j.0).unwrap_or_default(),
        tools_used: r.tools_used,
        checkpoint: r.checkpoint,
        started_at_ms: r.started_at_ms,
        finished_at_ms: r.finished_at_ms,
        effects: r.effects.into_iter().map(|j| j.0).collect(),
        lease,
        ttl: r.ttl,
    })
}

/// An approval item (`APPROVALS` / `<approval id>`): the approval as JSON, with `status` and
/// `expires_at_ms` beside it for the conditions of its writes.
#[derive(Serialize, Deserialize)]
struct ApprovalItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    approval: JsonText<Approval>,
    /// The status the conditions guard; it wins over the JSON copy.
    status: ApprovalStatus,
    expires_at_ms: i64,
    conversation_id: ConversationId,
    ttl: i64,
    /// The keys of the pending approvals' index (`APPROVALS` and the approval id): present only
    /// while the approval is pending, so the index holds nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_sk: Option<String>,
}

/// An approval item (`PK = APPROVALS`, `SK = <approval id>`) as the store writes it: a pending
/// one with the keys of the pending approvals' index (`pending_pk`, `pending_sk`).
///
/// Errors: [`StoreError::Permanent`] when the approval does not serialise.
pub fn approval_item(a: &Approval) -> Result<Item, StoreError> {
    let key = ItemKey::approval(&a.id);
    encode(&ApprovalItem {
        pk: key.pk(),
        sk: key.sk(),
        approval: JsonText(a.clone()),
        status: a.status,
        expires_at_ms: a.expires_at_ms,
        conversation_id: a.conversation_id.clone(),
        ttl: a.ttl,
        pending_pk: (a.status == ApprovalStatus::Pending).then(|| key.pk()),
        pending_sk: (a.status == ApprovalStatus::Pending).then(|| key.sk()),
    })
}

/// The approval an approval item holds, with the status its conditions guard.
///
/// Errors: [`StoreError::Permanent`] when the item is corrupt.
pub fn approval_from_item(item: &Item) -> Result<Approval, StoreError> {
    let a: ApprovalItem = decode(item)?;
    Ok(Approval { status: a.status, ..a.approval.0 })
}

/// An idempotency key's claim (`IDEM#<customer>#<key>` / `IDEM`): the conversation it created and
/// the hash of the request that claimed it.
#[derive(Serialize, Deserialize)]
struct IdempotencyItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    conversation_id: ConversationId,
    customer_id: String,
    /// Absent on claims written before hashes were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_hash: Option<String>,
    ttl: i64,
}

/// What an idempotency key's claim says: the conversation it created, and the hash of the
/// request that claimed it (`None` on claims written before hashes were kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyClaim {
    pub conversation_id: ConversationId,
    pub request_hash: Option<String>,
}

/// The idempotency-key item written with its conversation.
///
/// Errors: [`StoreError::Permanent`] when it does not encode.
pub fn idempotency_item(
    customer_id: &str,
    idempotency_key: &str,
    conversation_id: &ConversationId,
    request_hash: Option<&str>,
    ttl: i64,
) -> Result<Item, StoreError> {
    let key = ItemKey::Idempotency { customer_id: customer_id.to_owned(), key: idempotency_key.to_owned() };
    encode(&IdempotencyItem {
        pk: key.pk(),
        sk: key.sk(),
        conversation_id: conversation_id.clone(),
        customer_id: customer_id.to_owned(),
        request_hash: request_hash.map(str::to_owned),
        ttl,
    })
}

/// The claim an idempotency-key item holds.
///
/// Errors: [`StoreError::Permanent`] when the item is corrupt.
pub fn idempotency_claim(item: &Item) -> Result<IdempotencyClaim, StoreError> {
    let i: IdempotencyItem = decode(item)?;
    Ok(IdempotencyClaim { conversation_id: i.conversation_id, request_hash: i.request_hash })
}

/// A principal's customer mapping (`PRINCIPAL#<kind>:<value>` / `CUSTOMER`).
#[derive(Serialize, Deserialize)]
struct PrincipalItem {
    #[serde(rename = "PK")]
    pk: String,
    #[serde(rename = "SK")]
    sk: String,
    customer_id: String,
    /// The principal as printed, for operators reading the table.
    principal: String,
    updated_at_ms: i64,
}

/// The mapping item of `principal` to `customer_id`, written at `now_ms`.
///
/// Errors: [`StoreError::Permanent`] when it does not encode.
pub fn principal_item(principal: &Principal, customer_id: &str, now_ms: i64) -> Result<Item, StoreError> {
    let key = ItemKey::Principal(principal.clone());
    encode(&PrincipalItem {
        pk: key.pk(),
        sk: key.sk(),
        customer_id: customer_id.to_owned(),
        principal: principal.to_string(),
        updated_at_ms: now_ms,
    })
}

/// The customer a principal's mapping item names.
///
/// Errors: [`StoreError::Permanent`] when the item is corrupt.
pub fn principal_customer(item: &Item) -> Result<String, StoreError> {
    Ok(decode::<PrincipalItem>(item)?.customer_id)
}

/// `count` of the attributes a rate counter's `UpdateItem` answered (`UPDATED_NEW`).
///
/// Errors: [`StoreError::Permanent`] when it is missing or not a count.
pub(crate) fn window_count(item: &Item) -> Result<u32, StoreError> {
    #[derive(Deserialize)]
    struct Counted {
        count: u32,
    }
    Ok(decode::<Counted>(item)?.count)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use swarm_core::approval::ProposedAction;
    use swarm_core::domain::{FailureKind, request_hash};
    use swarm_core::effects::{EffectChange, EffectOutcome};

    use super::*;
    use crate::aws::dynamo::codec::values::s;

    #[test]
    fn the_language_is_stored_as_its_tag_and_an_item_without_one_reads_as_none() {
        let mut c = Conversation::new("C1", "這張券能用嗎？", 1_700_000_000_000, 120);
        let item = conversation_item(&c).unwrap();
        assert!(!item.contains_key("language"), "no attribute for no value");
        assert_eq!(conversation_from_item(&item).unwrap().language, None);
        for language in Language::ALL {
            c.language = Some(language);
            let item = conversation_item(&c).unwrap();
            assert_eq!(item["language"], s(language.tag()));
            assert_eq!(conversation_from_item(&item).unwrap(), c);
        }
        let mut bad = conversation_item(&c).unwrap();
        bad.insert("language".into(), s("tlh"));
        assert!(
            matches!(conversation_from_item(&bad), Err(StoreError::Permanent(m)) if m.contains("unknown language"))
        );
    }

    #[test]
    fn conversation_survives_the_item_round_trip() {
        let mut c = Conversation::new("C1", "where is A1029?", 1_700_000_000_000, 120);
        c.finished.insert("w01".into());
        c.usage = Usage { prompt_tokens: Some(5), cost_usd: Some(0.25), ..Default::default() };
        c.notes = vec!["dropped 2".into()];
        c.idempotency_key = Some("k".into());
        c.trace_parent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        c.request_hash = Some(request_hash("C1", "where is A1029?"));
        c.lease = Some(Lease { holder: "aggregator:1".into(), until_ms: 1_700_000_090_000, turn: 0 });
        c.sweep_shard = Some(3);
        let back = conversation_from_item(&conversation_item(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        c.handoff = Some(Handoff { reason: HandoffReason::CustomerAsked, at_ms: 42 });
        assert_eq!(conversation_from_item(&conversation_item(&c).unwrap()).unwrap(), c);
    }

    #[test]
    fn a_subtask_keeps_its_journal_and_lease_and_an_approval_its_status() {
        let c = Conversation::new("C1", "q", 1_700_000_000_000, 120);
        let subtask = Subtask { id: "w01".into(), instruction: "i".into(), tools: vec![], depends_on: vec![] };
        let mut r = SubtaskRecord::new(&c, subtask, "refund".into());
        let mut args = serde_json::Map::new();
        args.insert("order_id".into(), "A1033".into());
        let intent = Effect::intent(&c.id, &"w01".into(), 1, "shop__refund", args, 5);
        r.effects = vec![EffectChange::done(EffectOutcome::new("ok", false), 6).apply(&intent), intent];
        r.lease = Some(AttemptLease { holder: "h".into(), until_ms: 99 });
        assert_eq!(subtask_from_item(&subtask_item(&r).unwrap()).unwrap(), r);
        let a = Approval {
            id: format!("{}.w01.1", c.id),
            conversation_id: c.id.clone(),
            subtask_id: "w01".into(),
            ordinal: 1,
            customer_id: "C1".into(),
            role: "refund".into(),
            action: ProposedAction {
                tool: "shop__refund".into(),
                order_id: "A1033".into(),
                amount_cents: 100,
                reason: None,
            },
            status: ApprovalStatus::Approved,
            created_at_ms: 1,
            expires_at_ms: 2,
            decided_by: Some("ops".into()),
            decided_at_ms: Some(1),
            token: Some("t".into()),
            reissued_at_ms: Some(2),
            outcome: None,
            finished_at_ms: None,
            ttl: 3,
        };
        let item = approval_item(&a).unwrap();
        assert_eq!(
            (item["PK"].as_s().unwrap().as_str(), item["status"].as_s().unwrap().as_str()),
            ("APPROVALS", "approved")
        );
        assert_eq!(approval_from_item(&item).unwrap(), a);
        assert!(
            !item.contains_key("pending_pk") && !item.contains_key("pending_sk"),
            "a decided approval is not indexed"
        );
        let pending = Approval { status: ApprovalStatus::Pending, ..a.clone() };
        let item = approval_item(&pending).unwrap();
        assert_eq!(
            (item["pending_pk"].as_s().unwrap().as_str(), item["pending_sk"].as_s().unwrap().as_str()),
            ("APPROVALS", a.id.as_str())
        );
        assert_eq!(approval_from_item(&item).unwrap(), pending);
    }

    #[test]
    fn a_failed_result_keeps_its_kind_and_an_item_written_before_kinds_reads_as_internal() {
        let c = Conversation::new("C1", "q", 1_700_000_000_000, 120);
        let subtask = Subtask { id: "w01".into(), instruction: "i".into(), tools: vec![], depends_on: vec![] };
        let mut r = SubtaskRecord::new(&c, subtask, "support".into());
        r.status = SubtaskStatus::Failed;
        r.result = Some(SubtaskResult::failed(FailureKind::DeadLetter, "gave up"));
        let mut item = subtask_item(&r).unwrap();
        assert_eq!(item["result"].as_s().unwrap(), r#"{"outcome":"failed","kind":"dead_letter","reason":"gave up"}"#);
        assert_eq!(subtask_from_item(&item).unwrap(), r);
        item.insert("result".into(), s(r#"{"outcome":"failed","reason":"the language model failed: HTTP 402"}"#));
        let old = subtask_from_item(&item).unwrap().result.unwrap();
        assert_eq!(old, SubtaskResult::failed(FailureKind::Internal, "the language model failed: HTTP 402"));
    }

    #[test]
    fn a_corrupt_item_is_a_permanent_error_naming_its_keys_only() {
        let c = Conversation::new("C1", "a secret question", 1_700_000_000_000, 120);
        let mut item = conversation_item(&c).unwrap();
        item.insert("status".into(), s("SLEEPING"));
        let StoreError::Permanent(message) = conversation_from_item(&item).unwrap_err() else { panic!("permanent") };
        assert!(message.starts_with(&format!("corrupt item CONV#{}/META: ", c.id)), "{message}");
        assert!(!message.contains("secret"), "{message}");
        item.remove("ttl");
        assert!(conversation_from_item(&item).is_err(), "a missing attribute is corrupt too");
        let subtask = Subtask { id: "w01".into(), instruction: "i".into(), tools: vec![], depends_on: vec![] };
        let task = subtask_item(&SubtaskRecord::new(&c, subtask, "support".into())).unwrap();
        assert!(conversation_from_item(&task).is_err(), "a subtask item is no conversation");
    }

    #[test]
    fn stream_fixture_is_a_conversation_item_the_aggregator_filter_matches() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/dynamodb-stream-remaining-zero.json");
        let event: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let record = &event["Records"][0];
        assert_eq!(record["eventName"], "MODIFY");
        let ddb = &record["dynamodb"];
        // The template's FilterCriteria, field by field.
        assert_eq!(ddb["Keys"]["SK"]["S"], "META");
        assert_eq!(ddb["NewImage"]["remaining"]["N"], "0");
        assert_eq!(ddb["NewImage"]["status"]["S"], "RUNNING");
        // DynamoDB JSON (as in stream events) → SDK attribute values.
        let image: serde_dynamo::Item = serde_json::from_value(ddb["NewImage"].clone()).unwrap();
        let item: Item = image.into();
        let conv = conversation_from_item(&item).unwrap();
        assert_eq!(conv.status, ConversationStatus::Running);
        assert_eq!((conv.total, conv.remaining), (2, 0));
        assert_eq!(conv.finished.len(), 2);
        assert_eq!(conv.usage.cached_tokens, None);
        assert_eq!(ddb["Keys"]["PK"]["S"], format!("CONV#{}", conv.id));
        // The item this adapter writes for that conversation has exactly the fixture's attributes.
        assert_eq!(conversation_item(&conv).unwrap(), item);
    }
}
