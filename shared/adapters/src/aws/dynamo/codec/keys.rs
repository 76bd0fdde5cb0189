//! The table's key schema: what each item's `PK` and `SK` are made of, written and read here only.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;
use swarm_core::access::{Principal, RateWindow};
use swarm_core::domain::{ConversationId, SubtaskId};
use swarm_core::ports::ConversationPosition;

use super::values::{Item, n, s};

/// `PK` of a conversation's items: this prefix, then the conversation id.
const CONVERSATION_PREFIX: &str = "CONV#";
/// `SK` of the conversation item itself.
const CONVERSATION_SK: &str = "META";
/// `SK` of a subtask item: this prefix, then the subtask id.
const SUBTASK_PREFIX: &str = "TASK#";
/// `SK` of a finished turn's archive: this prefix, then the turn's number in 10 digits (so they sort).
const TURN_PREFIX: &str = "TURN#";
const NOTICE_PREFIX: &str = "NOTICE#";
const IDEMPOTENCY_PREFIX: &str = "IDEM#";
const IDEMPOTENCY_SK: &str = "IDEM";
/// The partition of every approval (`SK = <approval id>`): an operator's queue is small (a few
/// writes per approval, far below a partition's 1,000 writes/s), and one `Query` lists it.
const APPROVALS_PK: &str = "APPROVALS";
const PRINCIPAL_PREFIX: &str = "PRINCIPAL#";
const PRINCIPAL_SK: &str = "CUSTOMER";
const LIMIT_PREFIX: &str = "LIMIT#";
const WINDOW_PREFIX: &str = "WINDOW#";

/// What an item is, as its keys say. Every key of the table is made ([`ItemKey::pk`],
/// [`ItemKey::sk`]) and read ([`ItemKey::parse`], [`ItemKey::of`]) here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemKey {
    /// The conversation item: `CONV#<id>` / `META`.
    Conversation(ConversationId),
    /// A subtask item: `CONV#<id>` / `TASK#<subtask id>`.
    Subtask(ConversationId, SubtaskId),
    /// A finished turn's archive: `CONV#<id>` / `TURN#<turn, 10 digits>`.
    Turn(ConversationId, u32),
    /// A told turn's notice: its key (an approval id, or `op:<key>`).
    Notice(ConversationId, String),
    /// An idempotency key's claim: `IDEM#<customer>#<key>` / `IDEM`, with `%` and `#` in the
    /// customer id escaped (`%25`, `%23`) so two (customer, key) pairs never share a key.
    Idempotency { customer_id: String, key: String },
    /// An approval: `APPROVALS` / `<approval id>`.
    Approval(String),
    /// A principal's customer mapping: `PRINCIPAL#<kind>:<value>` / `CUSTOMER` (a principal is
    /// printable and blank-free, so it cannot spill into another key).
    Principal(Principal),
    /// A customer's rate counter of one window: `LIMIT#<customer>` / `WINDOW#<start ms>`.
    RateWindow { customer_id: String, window: RateWindow },
}

impl ItemKey {
    pub fn conversation(id: &ConversationId) -> Self {
        Self::Conversation(id.clone())
    }

    pub fn subtask(id: &ConversationId, subtask_id: &SubtaskId) -> Self {
        Self::Subtask(id.clone(), subtask_id.clone())
    }

    pub fn approval(approval_id: &str) -> Self {
        Self::Approval(approval_id.to_owned())
    }

    /// The partition key (`PK`).
    pub fn pk(&self) -> String {
        match self {
            Self::Conversation(id) | Self::Subtask(id, _) | Self::Turn(id, _) | Self::Notice(id, _) => {
                conversation_pk(id)
            }
            Self::Idempotency { customer_id, key } => {
                let customer = customer_id.replace('%', "%25").replace('#', "%23");
                format!("{IDEMPOTENCY_PREFIX}{customer}#{key}")
            }
            Self::Approval(_) => APPROVALS_PK.to_owned(),
            Self::Principal(p) => format!("{PRINCIPAL_PREFIX}{p}"),
            Self::RateWindow { customer_id, .. } => format!("{LIMIT_PREFIX}{customer_id}"),
        }
    }

    /// The sort key (`SK`).
    pub fn sk(&self) -> String {
        match self {
            Self::Conversation(_) => CONVERSATION_SK.to_owned(),
            Self::Subtask(_, subtask_id) => format!("{SUBTASK_PREFIX}{subtask_id}"),
            Self::Turn(_, turn) => format!("{TURN_PREFIX}{turn:010}"),
            Self::Notice(_, key) => format!("{NOTICE_PREFIX}{key}"),
            Self::Idempotency { .. } => IDEMPOTENCY_SK.to_owned(),
            Self::Approval(id) => id.clone(),
            Self::Principal(_) => PRINCIPAL_SK.to_owned(),
            Self::RateWindow { window, .. } => format!("{WINDOW_PREFIX}{}", window.start_ms),
        }
    }

    /// The key as the `Key` of a `GetItem`, `UpdateItem` or `DeleteItem`.
    pub fn item(&self) -> Item {
        Item::from([("PK".to_owned(), s(self.pk())), ("SK".to_owned(), s(self.sk()))])
    }

    /// What the keys `pk` and `sk` name; `None` for keys this table never holds.
    pub fn parse(pk: &str, sk: &str) -> Option<Self> {
        if let Some(id) = pk.strip_prefix(CONVERSATION_PREFIX) {
            let id = ConversationId::from_trusted(id);
            if sk == CONVERSATION_SK {
                return Some(Self::Conversation(id));
            }
            if let Some(turn) = sk.strip_prefix(TURN_PREFIX) {
                return turn.parse().ok().map(|turn| Self::Turn(id, turn));
            }
            if let Some(key) = sk.strip_prefix(NOTICE_PREFIX) {
                return Some(Self::Notice(id, key.to_owned()));
            }
            return sk.strip_prefix(SUBTASK_PREFIX).map(|sub| Self::Subtask(id, SubtaskId::from(sub)));
        }
        if pk == APPROVALS_PK {
            return Some(Self::Approval(sk.to_owned()));
        }
        if let Some(rest) = pk.strip_prefix(IDEMPOTENCY_PREFIX) {
            let (customer, key) = rest.split_once('#').filter(|_| sk == IDEMPOTENCY_SK)?;
            return Some(Self::Idempotency { customer_id: unescape(customer), key: key.to_owned() });
        }
        if let Some(principal) = pk.strip_prefix(PRINCIPAL_PREFIX) {
            return Principal::parse(principal).ok().filter(|_| sk == PRINCIPAL_SK).map(Self::Principal);
        }
        let customer_id = pk.strip_prefix(LIMIT_PREFIX)?;
        let start_ms = sk.strip_prefix(WINDOW_PREFIX)?.parse().ok()?;
        Some(Self::RateWindow { customer_id: customer_id.to_owned(), window: RateWindow { start_ms } })
    }

    /// What an item's keys name: `keys` holds at least `PK` and `SK` (a whole item, a stream
    /// record's `Keys`, an index's projection). `None` when they are missing or unknown.
    pub fn of(keys: impl Into<serde_dynamo::Item>) -> Option<Self> {
        #[derive(Deserialize)]
        struct Keys {
            #[serde(rename = "PK")]
            pk: String,
            #[serde(rename = "SK")]
            sk: String,
        }
        let keys: Keys = serde_dynamo::from_item(keys).ok()?;
        Self::parse(&keys.pk, &keys.sk)
    }

    /// As [`ItemKey::of`], from keys in DynamoDB JSON (a stream record's `Keys` as Lambda gets it:
    /// `{"PK": {"S": "…"}, "SK": {"S": "…"}}`).
    pub fn of_json(keys: &serde_json::Value) -> Option<Self> {
        Self::of(serde_json::from_value::<serde_dynamo::Item>(keys.clone()).ok()?)
    }
}

/// The conversation a stream record's (or an index entry's) `keys` belong to, when they are a
/// conversation item's keys (not a subtask's, nor any other item's).
pub fn conversation_id_of_keys(keys: impl Into<serde_dynamo::Item>) -> Option<ConversationId> {
    match ItemKey::of(keys)? {
        ItemKey::Conversation(id) => Some(id),
        _ => None,
    }
}

/// A stream-record filter pattern (Lambda event filtering, an EventBridge pipe's filter) that
/// passes the records of a conversation item whose new image matches `new_image`, a pattern over
/// its attributes: `{"dynamodb": {"Keys": {"SK": {"S": ["META"]}}, "NewImage": new_image}}`.
pub fn conversation_record_pattern(new_image: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "dynamodb": { "Keys": { "SK": { "S": [CONVERSATION_SK] } }, "NewImage": new_image } })
}

/// The sort key every conversation item has (a `Scan`'s `SK = :sk` that counts conversations).
pub fn conversation_sort_key() -> AttributeValue {
    s(CONVERSATION_SK)
}

/// The partition holding a conversation's item and its subtask items (`PK = :pk` of a `Query`).
pub(crate) fn conversation_partition(id: &ConversationId) -> AttributeValue {
    s(conversation_pk(id))
}

/// The partition holding every approval (`PK = :pk` of a `Query`).
pub(crate) fn approvals_partition() -> AttributeValue {
    s(APPROVALS_PK)
}

/// Where a query of the `customer` index resumes after `position` (its `ExclusiveStartKey`): the
/// index's keys (`customer_id`, `created_at_ms`) and the conversation item's own.
pub(crate) fn customer_index_start(customer_id: &str, position: &ConversationPosition) -> Item {
    let mut start = ItemKey::conversation(&position.id).item();
    start.insert("customer_id".to_owned(), s(customer_id));
    start.insert("created_at_ms".to_owned(), n(position.created_at_ms));
    start
}

fn conversation_pk(id: &ConversationId) -> String {
    format!("{CONVERSATION_PREFIX}{id}")
}

/// The customer id of an idempotency key, `%25` and `%23` read back as `%` and `#`.
fn unescape(customer: &str) -> String {
    let mut out = String::with_capacity(customer.len());
    let mut rest = customer;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escaped = &rest[at..];
        let (ch, len) = if escaped.starts_with("%25") {
            ('%', 3)
        } else if escaped.starts_with("%23") {
            ('#', 3)
        } else {
            ('%', 1)
        };
        out.push(ch);
        rest = &escaped[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    fn idem(customer_id: &str, key: &str) -> ItemKey {
        ItemKey::Idempotency { customer_id: customer_id.into(), key: key.into() }
    }

    #[test]
    fn idempotency_keys_of_different_customers_never_collide() {
        assert_ne!(idem("a#b", "c").pk(), idem("a", "b#c").pk());
        assert_eq!(idem("C104", "k1").pk(), "IDEM#C104#k1");
    }

    #[test]
    fn keys_never_share_a_partition_with_conversations() {
        let Ok(p) = Principal::parse("iam:AROAEXAMPLE:alice") else { panic!("a principal") };
        assert_eq!(ItemKey::Principal(p).pk(), "PRINCIPAL#iam:AROAEXAMPLE:alice");
        let window =
            ItemKey::RateWindow { customer_id: "C104".into(), window: RateWindow::containing(1_767_225_659_500) };
        assert_eq!((window.pk(), window.sk()), ("LIMIT#C104".to_owned(), "WINDOW#1767225600000".to_owned()));
    }

    #[test]
    fn every_key_reads_back_as_what_it_was_written_for() {
        let id = ConversationId::from_trusted("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07");
        let keys = [
            ItemKey::conversation(&id),
            ItemKey::subtask(&id, &"w01".into()),
            idem("C%1#x", "key#%23"),
            ItemKey::approval("0190f5a2-7c1e-7d3a-9b42-5e8f3c2a1d07.w01.1"),
            ItemKey::Principal(Principal::parse("sub:0f1e2d3c").unwrap()),
            ItemKey::RateWindow { customer_id: "C104".into(), window: RateWindow { start_ms: 1_767_225_600_000 } },
        ];
        for key in keys {
            assert_eq!(ItemKey::parse(&key.pk(), &key.sk()), Some(key.clone()), "{key:?}");
            assert_eq!(ItemKey::of(key.item()), Some(key));
        }
        assert_eq!(ItemKey::parse("CONV#x", "OTHER"), None);
        assert_eq!(ItemKey::parse("ELSE#x", "META"), None);
        assert_eq!(unescape("100%"), "100%", "a lone % is kept");
    }

    #[test]
    fn only_a_conversation_items_keys_name_its_conversation() {
        let id = ConversationId::from_trusted("c1");
        assert_eq!(conversation_id_of_keys(ItemKey::conversation(&id).item()), Some(id.clone()));
        assert_eq!(conversation_id_of_keys(ItemKey::subtask(&id, &"w01".into()).item()), None);
        let keys: serde_dynamo::Item =
            serde_json::from_str(r#"{"PK": {"S": "CONV#c1"}, "SK": {"S": "META"}}"#).unwrap();
        assert_eq!(conversation_id_of_keys(keys), Some(id.clone()));
        let no_sort_key: serde_dynamo::Item = serde_json::from_str(r#"{"PK": {"S": "CONV#c1"}}"#).unwrap();
        assert_eq!(conversation_id_of_keys(no_sort_key), None);
        let json = serde_json::json!({"PK": {"S": "CONV#c1"}, "SK": {"S": "TASK#w01"}});
        assert_eq!(ItemKey::of_json(&json), Some(ItemKey::subtask(&id, &"w01".into())));
        assert_eq!(ItemKey::of_json(&serde_json::json!({"PK": "CONV#c1"})), None, "not DynamoDB JSON");
    }
}
