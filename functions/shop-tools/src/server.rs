//! The MCP face of the shop: the rmcp tool router, the stateless Streamable HTTP app behind the access guard, and a
//! background server for local runs and tests.
//!
//! The customer a call acts for and a refund's idempotency key come only from the headers the
//! tool gateway writes ([`CUSTOMER_HEADER`], [`IDEMPOTENCY_HEADER`]), never from the arguments.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::handler::server::common::{schema_for_empty_input, schema_for_input};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, JsonObject};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::access::{
    APPROVAL_ID_HEADER, APPROVAL_REQUIRED, CONSENT_LIMIT_HEADER, CUSTOMER_HEADER, IDEMPOTENCY_HEADER, ShopAccess,
    header_text,
};
use crate::args::{
    CheckCouponArgs, GetOrderArgs, GetProductArgs, ListOrdersArgs, OpenTicketArgs, RefundArgs, TrackShipmentArgs,
};
use crate::error::{Refusal, ShopError};
use crate::shop::Shop;

/// Path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The rmcp server handler: eight tools over one [`Shop`].
#[derive(Debug, Clone)]
pub struct ShopTools {
    shop: Arc<Shop>,
    tool_router: ToolRouter<ShopTools>,
}

/// A tool answer: one text content holding a JSON object; a refusal is
/// `{"error": "<reason>", "code": "<code>"}` with `is_error = true`, and a refund the policy
/// rules out has its rule's figures beside them ([`Refusal::to_json`]).
fn answer<T: Serialize>(tool: &'static str, customer_id: Option<&str>, result: Result<T, Refusal>) -> CallToolResult {
    let customer_id = customer_id.unwrap_or("-");
    match result {
        Ok(value) => match serde_json::to_string(&value) {
            Ok(json) => {
                tracing::info!(tool, customer_id, outcome = "ok", "tool call answered");
                CallToolResult::success(vec![ContentBlock::text(json)])
            }
            Err(e) => {
                tracing::error!(tool, error = %e, "tool result did not serialize");
                // A defect, not a refusal of the shop's: no code to decide on.
                let reason = format!("internal error: the {tool} result could not be encoded");
                CallToolResult::error(vec![ContentBlock::text(serde_json::json!({ "error": reason }).to_string())])
            }
        },
        Err(refusal) => {
            tracing::info!(tool, customer_id, outcome = "refused", "tool call refused");
            tracing::debug!(tool, reason = %refusal, "refusal reason");
            refusal_result(&refusal)
        }
    }
}

/// The input schema of a tool taking `T` (from its doc comments).
fn input_schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|error| {
        tracing::error!(%error, "tool input schema is not an object schema; advertising an empty one");
        schema_for_empty_input()
    })
}

/// Tool arguments are parsed here rather than by rmcp's `Parameters`, so that missing or
/// mistyped arguments get the same `{"error": ...}` answer as every other refusal.
fn parse<T: DeserializeOwned>(tool: &'static str, arguments: JsonObject) -> Result<T, CallToolResult> {
    serde_json::from_value(serde_json::Value::Object(arguments)).map_err(|e| {
        tracing::info!(tool, outcome = "bad_arguments", "tool call refused");
        refusal_result(&Refusal::InvalidArguments(format!("invalid arguments for {tool}: {e}")))
    })
}

/// The customer the gateway says the call acts for ([`CUSTOMER_HEADER`]); a refusal without one.
fn customer_of(tool: &'static str, parts: &Parts) -> Result<String, CallToolResult> {
    header_text(&parts.headers, CUSTOMER_HEADER).map(str::to_owned).ok_or_else(|| {
        tracing::warn!(tool, outcome = "no_customer", "tool call refused");
        refusal_result(&Refusal::InvalidArguments(format!(
            "{tool} acts for a customer: the tool gateway sets {CUSTOMER_HEADER}"
        )))
    })
}

/// `{"error": "<reason>", "code": "<code>", …}` with `is_error = true` ([`Refusal::to_json`]).
fn refusal_result(refusal: &Refusal) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(refusal.to_json().to_string())])
}

#[tool_router]
impl ShopTools {
    /// A handler over `shop` (the tool table is built here, once per handler).
    pub fn new(shop: Arc<Shop>) -> Self {
        Self { shop, tool_router: Self::tool_router() }
    }

    /// The shop behind the tools.
    pub fn shop(&self) -> &Arc<Shop> {
        &self.shop
    }

    #[tool(
        input_schema = input_schema::<GetOrderArgs>(),
        description = "Look up one of the customer's orders by order id: order status (paid, shipped, delivered, cancelled, refunded), items, total, amount paid and refunded, delivery date, tracking number and a shipment summary (carrier, latest parcel event, ETA).",
        annotations(read_only_hint = true)
    )]
    async fn get_order(&self, arguments: JsonObject, Extension(parts): Extension<Parts>) -> CallToolResult {
        let (args, customer) = match parse::<GetOrderArgs>("get_order", arguments)
            .and_then(|a| Ok((a, customer_of("get_order", &parts)?)))
        {
            Ok(pair) => pair,
            Err(refused) => return refused,
        };
        answer("get_order", Some(&customer), self.shop.get_order(&customer, &args.order_id).await)
    }

    #[tool(
        input_schema = input_schema::<ListOrdersArgs>(),
        description = "List the customer's orders (my orders, order history, recent purchases), newest first, with order id, date, status and total.",
        annotations(read_only_hint = true)
    )]
    async fn list_customer_orders(&self, arguments: JsonObject, Extension(parts): Extension<Parts>) -> CallToolResult {
        let customer = match parse::<ListOrdersArgs>("list_customer_orders", arguments)
            .and_then(|_| customer_of("list_customer_orders", &parts))
        {
            Ok(customer) => customer,
            Err(refused) => return refused,
        };
        answer("list_customer_orders", Some(&customer), self.shop.list_customer_orders(&customer).await)
    }

    #[tool(
        input_schema = input_schema::<TrackShipmentArgs>(),
        description = "Track a parcel / shipment / delivery by order id or tracking number: where is my package, carrier, logistics events, customs hold or delay, estimated delivery date (ETA) and whether it is late.",
        annotations(read_only_hint = true)
    )]
    async fn track_shipment(&self, arguments: JsonObject, Extension(parts): Extension<Parts>) -> CallToolResult {
        let (args, customer) = match parse::<TrackShipmentArgs>("track_shipment", arguments)
            .and_then(|a| Ok((a, customer_of("track_shipment", &parts)?)))
        {
            Ok(pair) => pair,
            Err(refused) => return refused,
        };
        answer(
            "track_shipment",
            Some(&customer),
            self.shop.track_shipment(&customer, args.order_id.as_deref(), args.tracking_no.as_deref()).await,
        )
    }

    #[tool(
        input_schema = input_schema::<GetProductArgs>(),
        description = "Find a product by SKU or by name (English or Chinese, fuzzy): price, stock / inventory, whether it is in stock or sold out, and the restock date when it is back in stock.",
        annotations(read_only_hint = true)
    )]
    fn get_product(&self, arguments: JsonObject) -> CallToolResult {
        let args: GetProductArgs = match parse("get_product", arguments) {
            Ok(args) => args,
            Err(refused) => return refused,
        };
        answer(
            "get_product",
            None,
            self.shop.get_product(args.sku.as_deref(), args.skus.as_deref().unwrap_or_default(), args.name.as_deref()),
        )
    }

    #[tool(
        input_schema = input_schema::<CheckCouponArgs>(),
        description = "Check a coupon / discount / promo / voucher code: whether it exists, has expired, its minimum spend, eligible categories, first-order-only and one-use rules, and the discount for a basket (order total, or a product and quantity).",
        annotations(read_only_hint = true)
    )]
    fn check_coupon(&self, arguments: JsonObject, Extension(parts): Extension<Parts>) -> CallToolResult {
        let mut args = match parse::<CheckCouponArgs>("check_coupon", arguments) {
            Ok(args) => args,
            Err(refused) => return refused,
        };
        args.customer_id = match customer_of("check_coupon", &parts) {
            Ok(customer) => customer,
            Err(refused) => return refused,
        };
        answer("check_coupon", Some(&args.customer_id), self.shop.check_coupon(&args))
    }

    #[tool(
        description = "The refund policy / return policy: how many days after delivery a refund is accepted, which orders qualify, and the maximum refundable amount.",
        annotations(read_only_hint = true)
    )]
    fn get_refund_policy(&self) -> CallToolResult {
        answer("get_refund_policy", None, Ok::<_, Refusal>(self.shop.refund_policy()))
    }

    #[tool(
        input_schema = input_schema::<RefundArgs>(),
        description = "Refund an order (money back) for the customer: the whole refundable amount or a given amount, if the order is delivered, paid and within the refund window. Needs a unique idempotency_key; repeating a key never refunds twice.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true)
    )]
    async fn refund(
        &self,
        arguments: JsonObject,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut args = match parse::<RefundArgs>("refund", arguments) {
            Ok(args) => args,
            Err(refused) => return Ok(refused),
        };
        args.customer_id = match customer_of("refund", &parts) {
            Ok(customer) => customer,
            Err(refused) => return Ok(refused),
        };
        args.idempotency_key = match header_text(&parts.headers, IDEMPOTENCY_HEADER) {
            Some(key) => key.to_owned(),
            None => {
                tracing::warn!(tool = "refund", outcome = "no_idempotency_key", "tool call refused");
                return Ok(refusal_result(&Refusal::InvalidArguments(format!(
                    "refund moves money: the tool gateway sets {IDEMPOTENCY_HEADER}"
                ))));
            }
        };
        // The gateway's word only: whatever the arguments held is replaced.
        args.consent_limit_cents = match header_text(&parts.headers, CONSENT_LIMIT_HEADER).map(str::parse::<i64>) {
            None => None,
            Some(Ok(limit)) if limit >= 0 => Some(limit),
            Some(_) => {
                tracing::warn!(tool = "refund", outcome = "bad_consent_limit", "tool call refused");
                return Ok(refusal_result(&Refusal::InvalidArguments(format!(
                    "{CONSENT_LIMIT_HEADER} must be a whole number of cents"
                ))));
            }
        };
        args.approval_id = header_text(&parts.headers, APPROVAL_ID_HEADER).map(str::to_owned);
        match self.shop.refund(&args).await {
            Err(Refusal::NeedsApproval(message)) => {
                tracing::info!(tool = "refund", customer_id = %args.customer_id, outcome = "needs_approval", "tool call refused");
                Err(ErrorData::new(ErrorCode(APPROVAL_REQUIRED), message, None))
            }
            answered => Ok(answer("refund", Some(&args.customer_id), answered)),
        }
    }

    #[tool(
        input_schema = input_schema::<OpenTicketArgs>(),
        description = "Open a support ticket about one of the customer's orders, for a person to follow up (a complaint, a damaged item, a question the tools cannot answer). Needs a unique idempotency_key; repeating a key never opens a second ticket.",
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true)
    )]
    async fn open_ticket(&self, arguments: JsonObject, Extension(parts): Extension<Parts>) -> CallToolResult {
        let mut args = match parse::<OpenTicketArgs>("open_ticket", arguments) {
            Ok(args) => args,
            Err(refused) => return refused,
        };
        args.customer_id = match customer_of("open_ticket", &parts) {
            Ok(customer) => customer,
            Err(refused) => return refused,
        };
        args.idempotency_key = match header_text(&parts.headers, IDEMPOTENCY_HEADER) {
            Some(key) => key.to_owned(),
            None => {
                tracing::warn!(tool = "open_ticket", outcome = "no_idempotency_key", "tool call refused");
                return refusal_result(&Refusal::InvalidArguments(format!(
                    "open_ticket is a side effect: the tool gateway sets {IDEMPOTENCY_HEADER}"
                )));
            }
        };
        answer("open_ticket", Some(&args.customer_id), self.shop.open_ticket(&args).await)
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "shop-tools",
    instructions = "Demo e-commerce shop: orders, shipments, products and stock, coupons, refund policy and refunds, support tickets. Customer-scoped tools act only on the given customer's data."
)]
impl ServerHandler for ShopTools {}

/// The MCP app: stateless Streamable HTTP at [`MCP_PATH`] with JSON responses (no session,
/// so any instance, e.g. any Lambda, can answer any request) behind [`crate::access::guard`]
/// (the `Host` and the gateway's credential of `access`), plus `GET /health`.
pub fn router(shop: Arc<Shop>, access: ShopAccess) -> axum::Router {
    // The guard checks the host (with `*.` patterns rmcp's own check lacks) before rmcp runs.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts();
    let tools = ShopTools::new(shop);
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(NeverSessionManager::default()), config);
    let mcp = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(Arc::new(access), crate::access::guard));
    axum::Router::new().route("/health", axum::routing::get(|| async { "ok" })).merge(mcp)
}

/// Binds `addr` (port 0 picks a free port) and serves [`router`] in the background. Returns
/// the bound address and the server task (abort it to stop).
///
/// Errors: [`ShopError::Bind`] when the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    shop: Arc<Shop>,
    access: ShopAccess,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ShopError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ShopError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(|source| ShopError::Bind { addr, source })?;
    let app = router(shop, access);
    let handle = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "shop-tools server stopped");
        }
    });
    tracing::info!(addr = %bound, path = MCP_PATH, "shop-tools MCP server listening");
    Ok((bound, handle))
}
