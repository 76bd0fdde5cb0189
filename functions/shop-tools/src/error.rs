//! Errors of the shop-tools crate: start-up failures and the refusals a tool answers with.

use std::net::SocketAddr;

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
    /// The arguments are missing, contradictory or out of range.
    #[error("{0}")]
    InvalidArguments(String),
    /// A shop rule forbids the request (e.g. the refund window has closed).
    #[error("{0}")]
    Refused(String),
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
    /// Whether retrying the same call may succeed: only when the ledger was unavailable; otherwise the data decides.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}
