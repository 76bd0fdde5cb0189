//! The item codec of the DynamoDB store: keys, attribute values and item <-> domain conversions, with the size budgets of results and checkpoints.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use swarm_core::approval::{Approval, ApprovalStatus};
use swarm_core::domain::{
    Conversation, ConversationId, ConversationStatus, Handoff, HandoffReason, Lease, MAX_CHECKPOINT_BYTES, SubtaskId,
    SubtaskRecord, SubtaskResult, SubtaskStatus, Usage, truncate_chars,
};
use swarm_core::effects::{AttemptLease, Effect};
use swarm_core::ports::StoreError;

/// Largest serialized result kept inline, in bytes (after [`SubtaskResult::bounded`]).
pub const MAX_RESULT_BYTES: usize = 96 * 1024;

pub(super) const META: &str = "META";
/// The sparse, sharded global secondary index the sweep queries: partition key `sweep_shard` (N),
/// sort key `deadline_ms` (N), keys only. Only non-terminal conversations carry `sweep_shard`.
pub const SWEEP_INDEX: &str = "sweep";
/// The customers' index: `customer_id` S (hash) and `created_at_ms` N (range), all attributes,
/// sparse (only conversation items carry both): `GET /conversations`, newest first.
pub const CUSTOMER_INDEX: &str = "customer";
pub(super) const TASK_PREFIX: &str = "TASK#";
/// The partition of every approval (`SK = <approval id>`): an operator's queue is small (a few
/// writes per approval, far below a partition's 1,000 writes/s), and one `Query` lists it.
pub(super) const APPROVALS_PK: &str = "APPROVALS";

pub(super) fn conv_pk(id: &ConversationId) -> String {
    format!("CONV#{id}")
}

pub(super) fn task_sk(subtask_id: &SubtaskId) -> String {
    format!("{TASK_PREFIX}{subtask_id}")
}

/// `IDEM#<customer>#<key>`, with `%` and `#` in the customer id escaped so
/// two (customer, key) pairs can never share a key.
pub(super) fn idem_pk(customer_id: &str, key: &str) -> String {
    let customer = customer_id.replace('%', "%25").replace('#', "%23");
    format!("IDEM#{customer}#{key}")
}

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn key(pk: String, sk: String) -> HashMap<String, AttributeValue> {
    HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))])
}

/// Flat usage attributes, present only for known fields (DynamoDB `N`).
pub(super) fn usage_attributes(usage: &Usage) -> Vec<(&'static str, AttributeValue)> {
    let mut out = Vec::new();
    if let Some(v) = usage.prompt_tokens {
        out.push(("usage_prompt_tokens", n(v)));
    }
    if let Some(v) = usage.completion_tokens {
        out.push(("usage_completion_tokens", n(v)));
    }
    if let Some(v) = usage.cached_tokens {
        out.push(("usage_cached_tokens", n(v)));
    }
    // NaN and infinities have no DynamoDB number form; an unknowable cost stays unknown.
    if let Some(v) = usage.cost_usd.filter(|v| v.is_finite()) {
        out.push(("usage_cost_usd", n(v)));
    }
    out
}

/// One item of the table, attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

pub(super) fn corrupt(what: &str, item: &Item) -> StoreError {
    let pk = item.get("PK").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    let sk = item.get("SK").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    StoreError::Permanent(format!("corrupt item {pk}/{sk}: {what}"))
}

pub(super) fn get_s(item: &Item, name: &str) -> Result<String, StoreError> {
    opt_s(item, name).ok_or_else(|| corrupt(&format!("missing string attribute `{name}`"), item))
}

pub(super) fn opt_s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

pub(super) fn opt_n<T: std::str::FromStr>(item: &Item, name: &str) -> Result<Option<T>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(v) => {
            let text = v.as_n().map_err(|_| corrupt(&format!("attribute `{name}` is not a number"), item))?;
            text.parse::<T>()
                .map(Some)
                .map_err(|_| corrupt(&format!("attribute `{name}` = {text} is out of range"), item))
        }
    }
}

pub(super) fn get_n<T: std::str::FromStr>(item: &Item, name: &str) -> Result<T, StoreError> {
    opt_n(item, name)?.ok_or_else(|| corrupt(&format!("missing number attribute `{name}`"), item))
}

pub(super) fn string_list(item: &Item, name: &str) -> Vec<String> {
    item.get(name)
        .and_then(|v| v.as_l().ok())
        .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
        .unwrap_or_default()
}

pub(super) fn json_attr<T: serde::de::DeserializeOwned>(item: &Item, name: &str) -> Result<Option<T>, StoreError> {
    match opt_s(item, name) {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| corrupt(&format!("attribute `{name}` is not valid JSON: {e}"), item)),
    }
}

pub(super) fn to_json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Permanent(format!("cannot serialize: {e}")))
}

/// The conversation item (`PK = CONV#<id>`, `SK = META`) as the store writes it
/// (also the local platform's stream images).
pub fn conversation_item(c: &Conversation) -> Item {
    let mut item = key(conv_pk(&c.id), META.to_owned());
    item.insert("status".into(), s(c.status.as_str()));
    item.insert("remaining".into(), n(c.remaining));
    item.insert("total".into(), n(c.total));
    item.insert("customer_id".into(), s(&c.customer_id));
    item.insert("query".into(), s(&c.query));
    item.insert("created_at_ms".into(), n(c.created_at_ms));
    item.insert("deadline_ms".into(), n(c.deadline_ms));
    if !c.finished.is_empty() {
        item.insert("finished".into(), AttributeValue::Ss(c.finished.iter().cloned().collect()));
    }
    if let Some(reply) = &c.reply {
        item.insert("reply".into(), s(reply));
    }
    if !c.notes.is_empty() {
        item.insert("notes".into(), AttributeValue::L(c.notes.iter().map(s).collect()));
    }
    if let Some(error) = &c.error {
        item.insert("error".into(), s(error));
    }
    if let Some(k) = &c.idempotency_key {
        item.insert("idempotency_key".into(), s(k));
    }
    if let Some(t) = &c.trace_parent {
        item.insert("trace_parent".into(), s(t));
    }
    if let Some(h) = &c.handoff {
        item.insert("handoff_reason".into(), s(h.reason.code()));
        item.insert("handoff_at_ms".into(), n(h.at_ms));
        // The hand-off event's detail names the conversation (the pipe cannot strip `CONV#`).
        item.insert("conversation_id".into(), s(c.id.as_str()));
    }
    if let Some(h) = &c.request_hash {
        item.insert("request_hash".into(), s(h));
    }
    item.insert("turn".into(), n(c.turn));
    if let Some(lease) = &c.lease {
        item.insert("lease_holder".into(), s(&lease.holder));
        item.insert("lease_until_ms".into(), n(lease.until_ms));
        item.insert("lease_turn".into(), n(lease.turn));
    }
    if let Some(shard) = c.sweep_shard {
        item.insert("sweep_shard".into(), n(shard));
    }
    for (name, v) in usage_attributes(&c.usage) {
        item.insert(name.into(), v);
    }
    item.insert("ttl".into(), n(c.ttl));
    item
}

/// The idempotency-key item (`PK = IDEM#<customer>#<key>`, `SK = IDEM`) written with its conversation:
/// the conversation it created and the hash of the request that claimed it.
pub fn idempotency_item(
    customer_id: &str,
    idempotency_key: &str,
    conversation_id: &ConversationId,
    request_hash: Option<&str>,
    ttl: i64,
) -> Item {
    let mut item = key(idem_pk(customer_id, idempotency_key), "IDEM".to_owned());
    item.insert("conversation_id".into(), s(conversation_id.as_str()));
    item.insert("customer_id".into(), s(customer_id));
    if let Some(h) = request_hash {
        item.insert("request_hash".into(), s(h));
    }
    item.insert("ttl".into(), n(ttl));
    item
}

/// The lease of a conversation item, when all three of its attributes are there.
pub(super) fn lease_from_item(item: &Item) -> Result<Option<Lease>, StoreError> {
    let holder = opt_s(item, "lease_holder");
    let until_ms = opt_n(item, "lease_until_ms")?;
    let turn = opt_n(item, "lease_turn")?;
    Ok(match (holder, until_ms, turn) {
        (Some(holder), Some(until_ms), Some(turn)) => Some(Lease { holder, until_ms, turn }),
        _ => None,
    })
}

pub(super) fn conversation_from_item(item: &Item) -> Result<Conversation, StoreError> {
    let pk = get_s(item, "PK")?;
    let id = pk.strip_prefix("CONV#").ok_or_else(|| corrupt("PK does not start with CONV#", item))?;
    let status_text = get_s(item, "status")?;
    let status = ConversationStatus::parse(&status_text)
        .ok_or_else(|| corrupt(&format!("unknown status {status_text}"), item))?;
    let finished =
        item.get("finished").and_then(|v| v.as_ss().ok()).map(|ss| ss.iter().cloned().collect()).unwrap_or_default();
    Ok(Conversation {
        id: ConversationId::from_trusted(id),
        customer_id: get_s(item, "customer_id")?,
        status,
        query: get_s(item, "query")?,
        created_at_ms: get_n(item, "created_at_ms")?,
        deadline_ms: get_n(item, "deadline_ms")?,
        total: get_n(item, "total")?,
        remaining: get_n(item, "remaining")?,
        finished,
        reply: opt_s(item, "reply"),
        usage: Usage {
            prompt_tokens: opt_n(item, "usage_prompt_tokens")?,
            completion_tokens: opt_n(item, "usage_completion_tokens")?,
            cached_tokens: opt_n(item, "usage_cached_tokens")?,
            cost_usd: opt_n(item, "usage_cost_usd")?,
        },
        notes: string_list(item, "notes"),
        error: opt_s(item, "error"),
        idempotency_key: opt_s(item, "idempotency_key"),
        trace_parent: opt_s(item, "trace_parent"),
        handoff: handoff_from_item(item)?,
        request_hash: opt_s(item, "request_hash"),
        turn: opt_n(item, "turn")?.unwrap_or(0),
        lease: lease_from_item(item)?,
        sweep_shard: opt_n(item, "sweep_shard")?,
        ttl: get_n(item, "ttl")?,
    })
}

fn handoff_from_item(item: &Item) -> Result<Option<Handoff>, StoreError> {
    let Some(code) = opt_s(item, "handoff_reason") else { return Ok(None) };
    let reason = HandoffReason::parse(&code).ok_or_else(|| corrupt(&format!("unknown handoff reason {code}"), item))?;
    Ok(Some(Handoff { reason, at_ms: opt_n(item, "handoff_at_ms")?.unwrap_or(0) }))
}

/// The journal as stored: one JSON text per entry, in call order (entry `n - 1` is call `n`),
/// so an outcome replaces exactly its entry (`SET effects[i] = :new` on `effects[i] = :old`).
pub(super) fn effect_value(e: &Effect) -> Result<AttributeValue, StoreError> {
    Ok(s(to_json(e)?))
}

fn effects_from_item(item: &Item) -> Result<Vec<Effect>, StoreError> {
    let Some(list) = item.get("effects") else { return Ok(Vec::new()) };
    let list = list.as_l().map_err(|_| corrupt("attribute `effects` is not a list", item))?;
    list.iter()
        .map(|v| {
            let text = v.as_s().map_err(|_| corrupt("a journal entry is not a string", item))?;
            serde_json::from_str(text).map_err(|e| corrupt(&format!("a journal entry is not valid JSON: {e}"), item))
        })
        .collect()
}

/// The attempt lease of a subtask item (same attribute names as a conversation's lease, on another item).
fn attempt_lease_from_item(item: &Item) -> Result<Option<AttemptLease>, StoreError> {
    match (opt_s(item, "lease_holder"), opt_n::<i64>(item, "lease_until_ms")?) {
        (Some(holder), Some(until_ms)) => Ok(Some(AttemptLease { holder, until_ms })),
        _ => Ok(None),
    }
}

/// An approval item (`PK = APPROVALS`, `SK = <approval id>`): the approval as JSON, with
/// `status` and `expires_at_ms` beside it for the conditions of its writes.
///
/// Errors: [`StoreError::Permanent`] when the approval does not serialise.
pub fn approval_item(a: &Approval) -> Result<Item, StoreError> {
    let mut item = key(APPROVALS_PK.to_owned(), a.id.clone());
    item.insert("approval".into(), s(to_json(a)?));
    item.insert("status".into(), s(a.status.code()));
    item.insert("expires_at_ms".into(), n(a.expires_at_ms));
    item.insert("conversation_id".into(), s(a.conversation_id.as_str()));
    item.insert("ttl".into(), n(a.ttl));
    Ok(item)
}

pub(super) fn approval_from_item(item: &Item) -> Result<Approval, StoreError> {
    let approval: Approval = json_attr(item, "approval")?.ok_or_else(|| corrupt("missing `approval`", item))?;
    // The top-level status is the one conditions guard; it wins over the JSON copy.
    let status_text = get_s(item, "status")?;
    let status = ApprovalStatus::parse(&status_text)
        .ok_or_else(|| corrupt(&format!("unknown approval status {status_text}"), item))?;
    Ok(Approval { status, ..approval })
}

/// A subtask item (`PK = CONV#<id>`, `SK = TASK#<subtask id>`) as the store writes it.
///
/// Errors: [`StoreError::Permanent`] when the subtask or its usage does not serialise.
pub fn subtask_item(r: &SubtaskRecord) -> Result<Item, StoreError> {
    let mut item = key(conv_pk(&r.conversation_id), task_sk(&r.subtask.id));
    item.insert("status".into(), s(r.status.as_str()));
    item.insert("subtask".into(), s(to_json(&r.subtask)?));
    item.insert("role".into(), s(&r.role));
    if !r.dependents.is_empty() {
        item.insert("dependents".into(), AttributeValue::L(r.dependents.iter().map(s).collect()));
    }
    item.insert("attempts".into(), n(r.attempts));
    if let Some(result) = &r.result {
        item.insert("result".into(), s(fit_result(result)?));
    }
    if !r.usage.is_empty() {
        item.insert("usage".into(), s(to_json(&r.usage)?));
    }
    if !r.tools_used.is_empty() {
        item.insert("tools_used".into(), AttributeValue::L(r.tools_used.iter().map(s).collect()));
    }
    if let Some(c) = &r.checkpoint {
        item.insert("checkpoint".into(), s(fit_checkpoint(c)));
    }
    if let Some(v) = r.started_at_ms {
        item.insert("started_at_ms".into(), n(v));
    }
    if let Some(v) = r.finished_at_ms {
        item.insert("finished_at_ms".into(), n(v));
    }
    if !r.effects.is_empty() {
        item.insert("effects".into(), AttributeValue::L(r.effects.iter().map(effect_value).collect::<Result<_, _>>()?));
    }
    if let Some(lease) = &r.lease {
        item.insert("lease_holder".into(), s(&lease.holder));
        item.insert("lease_until_ms".into(), n(lease.until_ms));
    }
    item.insert("ttl".into(), n(r.ttl));
    Ok(item)
}

pub(super) fn subtask_from_item(item: &Item) -> Result<SubtaskRecord, StoreError> {
    let pk = get_s(item, "PK")?;
    let id = pk.strip_prefix("CONV#").ok_or_else(|| corrupt("PK does not start with CONV#", item))?;
    let status_text = get_s(item, "status")?;
    let status =
        SubtaskStatus::parse(&status_text).ok_or_else(|| corrupt(&format!("unknown status {status_text}"), item))?;
    Ok(SubtaskRecord {
        conversation_id: ConversationId::from_trusted(id),
        subtask: json_attr(item, "subtask")?.ok_or_else(|| corrupt("missing `subtask`", item))?,
        role: get_s(item, "role")?,
        dependents: string_list(item, "dependents").into_iter().map(SubtaskId::from).collect(),
        status,
        attempts: opt_n(item, "attempts")?.unwrap_or(0),
        result: json_attr(item, "result")?,
        usage: json_attr(item, "usage")?.unwrap_or_default(),
        tools_used: string_list(item, "tools_used"),
        checkpoint: opt_s(item, "checkpoint"),
        started_at_ms: opt_n(item, "started_at_ms")?,
        finished_at_ms: opt_n(item, "finished_at_ms")?,
        effects: effects_from_item(item)?,
        lease: attempt_lease_from_item(item)?,
        ttl: get_n(item, "ttl")?,
    })
}

/// The result as stored: [`SubtaskResult::bounded`], then, if its JSON is still over
/// [`MAX_RESULT_BYTES`] (many tool-call records with long errors), tool-call errors
/// cut to 200 characters and the record list shortened until it fits.
pub(super) fn fit_result(result: &SubtaskResult) -> Result<String, StoreError> {
    let bounded = result.clone().bounded();
    let json = to_json(&bounded)?;
    if json.len() <= MAX_RESULT_BYTES {
        return Ok(json);
    }
    let SubtaskResult::Succeeded { text, mut tool_calls } = bounded else {
        return Ok(json);
    };
    for call in &mut tool_calls {
        call.error = call.error.take().map(|e| truncate_chars(&e, 200));
    }
    loop {
        let candidate = SubtaskResult::Succeeded { text: text.clone(), tool_calls: tool_calls.clone() };
        let json = to_json(&candidate)?;
        if json.len() <= MAX_RESULT_BYTES || tool_calls.is_empty() {
            tracing::warn!(
                bytes = json.len(),
                kept_tool_calls = tool_calls.len(),
                "subtask result shrunk to fit the item size budget"
            );
            return Ok(json);
        }
        let keep = tool_calls.len() / 2;
        tool_calls.truncate(keep);
    }
}

/// The checkpoint cut to at most [`MAX_CHECKPOINT_BYTES`] at a character boundary.
/// A cut checkpoint is no longer valid JSON: the worker bounds its own checkpoint
/// and treats an unparseable one as absent.
pub(super) fn fit_checkpoint(checkpoint: &str) -> String {
    if checkpoint.len() <= MAX_CHECKPOINT_BYTES {
        return checkpoint.to_owned();
    }
    let mut end = MAX_CHECKPOINT_BYTES;
    while !checkpoint.is_char_boundary(end) {
        end -= 1;
    }
    tracing::warn!(bytes = checkpoint.len(), kept = end, "checkpoint truncated to the item size budget");
    checkpoint[..end].to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_of_different_customers_never_collide() {
        assert_ne!(idem_pk("a#b", "c"), idem_pk("a", "b#c"));
        assert_eq!(idem_pk("C104", "k1"), "IDEM#C104#k1");
    }

    #[test]
    fn unknown_usage_writes_no_attribute() {
        let attrs = usage_attributes(&Usage { prompt_tokens: Some(7), cost_usd: Some(f64::NAN), ..Default::default() });
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].0, "usage_prompt_tokens");
    }

    #[test]
    fn conversation_survives_the_item_round_trip() {
        let mut c = Conversation::new("C1", "where is A1029?", 1_700_000_000_000, 120);
        c.finished.insert("w01".into());
        c.usage = Usage { prompt_tokens: Some(5), cost_usd: Some(0.25), ..Default::default() };
        c.notes = vec!["dropped 2".into()];
        c.idempotency_key = Some("k".into());
        c.trace_parent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        c.request_hash = Some(swarm_core::domain::request_hash("C1", "where is A1029?"));
        c.lease = Some(Lease { holder: "aggregator:1".into(), until_ms: 1_700_000_090_000, turn: 0 });
        c.sweep_shard = Some(3);
        let back = conversation_from_item(&conversation_item(&c)).unwrap();
        assert_eq!(back, c);
        c.handoff = Some(Handoff { reason: HandoffReason::CustomerAsked, at_ms: 42 });
        assert_eq!(conversation_from_item(&conversation_item(&c)).unwrap(), c);
    }

    #[test]
    fn a_subtask_keeps_its_journal_and_lease_and_an_approval_its_status() {
        use swarm_core::approval::ProposedAction;
        use swarm_core::domain::Subtask;
        use swarm_core::effects::{EffectChange, EffectOutcome};
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
    }

    #[test]
    fn oversized_checkpoint_is_cut_on_a_character_boundary() {
        let big = "订".repeat(MAX_CHECKPOINT_BYTES);
        let cut = fit_checkpoint(&big);
        assert!(cut.len() <= MAX_CHECKPOINT_BYTES);
        assert!(cut.len() > MAX_CHECKPOINT_BYTES - 4);
    }

    #[test]
    fn result_with_thousands_of_long_tool_errors_fits_the_budget() {
        use swarm_core::domain::ToolCallRecord;
        let calls = (0..5_000)
            .map(|i| ToolCallRecord { name: format!("shop__t{i}"), ok: false, error: Some("x".repeat(1_000)) })
            .collect();
        let r = SubtaskResult::Succeeded { text: "y".repeat(100_000), tool_calls: calls };
        let json = fit_result(&r).unwrap();
        assert!(json.len() <= MAX_RESULT_BYTES, "{} bytes", json.len());
        let back: SubtaskResult = serde_json::from_str(&json).unwrap();
        assert!(matches!(back, SubtaskResult::Succeeded { ref tool_calls, .. } if !tool_calls.is_empty()));
    }

    #[test]
    fn a_failed_result_keeps_its_kind_and_an_item_written_before_kinds_reads_as_internal() {
        use swarm_core::domain::{FailureKind, Subtask};
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

    /// DynamoDB JSON (as in stream events) → SDK attribute values.
    fn from_dynamo_json(v: &serde_json::Value) -> AttributeValue {
        let (kind, inner) = v.as_object().and_then(|o| o.iter().next()).unwrap();
        match kind.as_str() {
            "S" => AttributeValue::S(inner.as_str().unwrap().to_owned()),
            "N" => AttributeValue::N(inner.as_str().unwrap().to_owned()),
            "SS" => {
                AttributeValue::Ss(inner.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            }
            "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(from_dynamo_json).collect()),
            "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
            other => panic!("unsupported DynamoDB JSON type {other}"),
        }
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
        let item: Item =
            ddb["NewImage"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), from_dynamo_json(v))).collect();
        let conv = conversation_from_item(&item).unwrap();
        assert_eq!(conv.status, ConversationStatus::Running);
        assert_eq!((conv.total, conv.remaining), (2, 0));
        assert_eq!(conv.finished.len(), 2);
        assert_eq!(conv.usage.cached_tokens, None);
        assert_eq!(ddb["Keys"]["PK"]["S"], format!("CONV#{}", conv.id));
        // The item this adapter writes for that conversation has exactly the fixture's attributes.
        assert_eq!(conversation_item(&conv), item);
    }
}
