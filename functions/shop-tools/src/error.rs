//! Errors of the shop-tools crate: start-up failures and the refusals a tool answers with.

use std::net::SocketAddr;

use chrono::{DateTime, FixedOffset};
use serde::Serialize;

use crate::money::{decimal, format as money};

/// A failure to start the server (data set or socket).
#[derive(Debug, thiserror::Error)]
pub enum ShopError {
    /// The data set is malformed (permanent: fix the JSON).
    #[error("invalid shop data: {0}")]
    InvalidData(String),
    /// The listening socket could not be bound, e.g. the port is taken (transient: the
    /// port may be freed; retry or pick another `SHOP_TOOLS_ADDR`).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The configuration from the environment is invalid (permanent: fix the variable).
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl ShopError {
    /// Whether retrying the same call may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ShopError::Bind { .. })
    }
}

/// Why a tool call was answered with `is_error = true`; the message is what the caller
/// sees as `{"error": "<message>"}`. A refusal never changes any state; all but
/// [`Refusal::Unavailable`] are permanent (the same request gets the same answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An order, shipment, product or customer the caller may see does not exist
    /// (another customer's order is reported the same way).
    #[error("{0}")]
    NotFound(String),
    /// The order exists but has no parcel yet (unpaid, paid and not shipped, cancelled):
    /// answered with the code `no_shipment_yet`, the order and its status beside the reason.
    #[error("order {order_id} has no shipment yet (status {status})")]
    NoShipmentYet { order_id: String, status: String },
    /// The arguments are missing, contradictory or out of range.
    #[error("{0}")]
    InvalidArguments(String),
    /// A shop rule forbids the request (e.g. an idempotency key reused for another refund).
    #[error("{0}")]
    Refused(String),
    /// The refund policy rules the refund out: answered as the rule's English sentence with
    /// its code and figures beside it, so a reply in another language can be written from them.
    #[error("{0}")]
    Policy(RefundRule),
    /// The refund would take the order's refunds past the consent limit the gateway set: a
    /// person must approve it first. Nothing was refunded; answered with the JSON-RPC error
    /// [`crate::access::APPROVAL_REQUIRED`], never as a result the model reads as final.
    #[error("{0}")]
    NeedsApproval(String),
    /// The refund ledger could not be reached or kept changing: nothing was recorded, and the
    /// same request may succeed later.
    #[error("{0}")]
    Unavailable(String),
}

impl Refusal {
    /// The refusal's code, what a caller decides on (never the message): `not_found`,
    /// `no_shipment_yet`, `invalid_arguments`, `refused`, a refund rule's code
    /// ([`RefundRule`]: `not_delivered` …), `needs_approval`, `unavailable`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::NoShipmentYet { .. } => "no_shipment_yet",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::Refused(_) => "refused",
            Self::Policy(rule) => rule.code(),
            Self::NeedsApproval(_) => "needs_approval",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// The answer a tool gives for this refusal: `{"error": "<reason>", "code": "<code>"}`, and
    /// for a [`Refusal::Policy`] or [`Refusal::NoShipmentYet`] its figures beside them.
    pub fn to_json(&self) -> serde_json::Value {
        let mut answer = serde_json::json!({ "error": self.to_string(), "code": self.code() });
        let fields = match self {
            Self::Policy(rule) => serde_json::to_value(rule).ok(),
            Self::NoShipmentYet { order_id, status } => {
                Some(serde_json::json!({ "order_id": order_id, "status": status }))
            }
            _ => None,
        };
        if let (Some(serde_json::Value::Object(fields)), Some(object)) = (fields, answer.as_object_mut()) {
            object.extend(fields);
        }
        answer
    }

    /// Whether retrying the same call may succeed: only when the ledger was unavailable; otherwise the data decides.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// A refund the policy rules out, as a code (`"code": "not_delivered"`, …) and its figures;
/// amounts are decimals of the order's currency. [`std::fmt::Display`] gives the English sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum RefundRule {
    /// Nothing was paid (the policy refunds paid orders only).
    NotPaid { order_id: String, status: String },
    /// Everything paid has been refunded.
    NothingLeft {
        order_id: String,
        #[serde(with = "decimal")]
        paid: i64,
        #[serde(with = "decimal")]
        refunded: i64,
        currency: String,
    },
    /// Not delivered yet: the refund window starts at delivery.
    NotDelivered { order_id: String, status: String },
    /// Delivered, but with no delivery time on record: the window is unknown.
    NoDeliveryTime { order_id: String },
    /// The window of `window_days` after delivery is over.
    RefundWindowClosed {
        order_id: String,
        delivered_at: DateTime<FixedOffset>,
        window_days: i64,
        window_closed_at: DateTime<FixedOffset>,
    },
    /// More than what is refundable (paid minus refunded) was asked for.
    ExceedsRefundable {
        order_id: String,
        #[serde(with = "decimal")]
        amount: i64,
        #[serde(with = "decimal")]
        refundable: i64,
        #[serde(with = "decimal")]
        paid: i64,
        #[serde(with = "decimal")]
        refunded: i64,
        currency: String,
    },
}

impl RefundRule {
    /// The rule's code, as serialised (`not_delivered` …).
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotPaid { .. } => "not_paid",
            Self::NothingLeft { .. } => "nothing_left",
            Self::NotDelivered { .. } => "not_delivered",
            Self::NoDeliveryTime { .. } => "no_delivery_time",
            Self::RefundWindowClosed { .. } => "refund_window_closed",
            Self::ExceedsRefundable { .. } => "exceeds_refundable",
        }
    }
}

impl std::fmt::Display for RefundRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stamp = |at: &DateTime<FixedOffset>| at.format("%Y-%m-%d %H:%M").to_string();
        match self {
            Self::NotPaid { order_id, status } => {
                write!(f, "order {order_id} is {status} and nothing has been paid, so there is nothing to refund")
            }
            Self::NothingLeft { order_id, paid, refunded, currency } => write!(
                f,
                "order {order_id} has nothing left to refund: {} paid, {} already refunded",
                money(*paid, currency),
                money(*refunded, currency)
            ),
            Self::NotDelivered { order_id, status } => {
                write!(f, "order {order_id} is {status}, not delivered: the refund window starts at delivery")
            }
            Self::NoDeliveryTime { order_id } => {
                write!(f, "order {order_id} has no delivery time on record, so the refund window is unknown")
            }
            Self::RefundWindowClosed { order_id, delivered_at, window_days, window_closed_at } => write!(
                f,
                "order {order_id} was delivered on {}: the {window_days}-day refund window closed on {}",
                stamp(delivered_at),
                stamp(window_closed_at)
            ),
            Self::ExceedsRefundable { order_id, amount, refundable, paid, refunded, currency } => write!(
                f,
                "a refund of {} exceeds what is refundable on order {order_id}: {} ({} paid minus {} already refunded)",
                money(*amount, currency),
                money(*refundable, currency),
                money(*paid, currency),
                money(*refunded, currency)
            ),
        }
    }
}
