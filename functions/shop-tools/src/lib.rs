//! shop-tools: the demo e-commerce MCP tool server (orders, shipments, products, coupons, refunds, support tickets).
//!
//! [`Shop`] holds the rules as plain Rust over the embedded data set; [`ShopTools`] exposes
//! them as eight MCP tools; [`router`] / [`serve`] put them on stateless Streamable HTTP
//! behind [`ShopAccess`]: only the tool gateway gets through, and the customer and the
//! idempotency key come from the headers it writes.

pub mod access;
pub mod args;
pub mod config;
pub mod data;
pub mod error;
pub mod ledger;
mod matching;
pub mod money;
pub mod server;
pub mod shop;
#[cfg(test)]
mod shop_tests;

pub use access::{CUSTOMER_HEADER, IDEMPOTENCY_HEADER, LOOPBACK_HOSTS, ShopAccess, generate_token};
pub use config::Config;
pub use error::{Refusal, ShopError};
pub use ledger::{DynamoLedger, InMemoryLedger, RefundLedger};
pub use server::{MCP_PATH, ShopTools, router, serve};
pub use shop::{RefundRecord, Shop, TicketRecord};

/// The eight tool names, in the order `tools/list` is expected to contain them (any order is valid MCP).
pub const TOOL_NAMES: [&str; 8] = [
    "get_order",
    "list_customer_orders",
    "track_shipment",
    "get_product",
    "check_coupon",
    "get_refund_policy",
    "refund",
    "open_ticket",
];
