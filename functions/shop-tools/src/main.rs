//! Entry point of the shop-tools binary: the demo shop's MCP server, on Lambda or locally.

use std::sync::Arc;

use anyhow::Context;
use shop_tools::{Config, DynamoLedger, InMemoryLedger, RefundLedger, Shop, config::init_tracing};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    init_tracing(config.json_logs);
    let ledger: Arc<dyn RefundLedger> = match &config.ledger_table {
        Some(table) => {
            let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            Arc::new(DynamoLedger::new(aws_sdk_dynamodb::Client::new(&aws), table.clone()))
        }
        None => Arc::new(InMemoryLedger::new()),
    };
    let shop = Arc::new(Shop::demo_with(ledger)?);
    if config.on_lambda {
        let hosts = config.allowed_hosts.unwrap_or_else(|| vec!["*".to_string()]);
        lambda_http::run(shop_tools::router(shop, hosts)).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let (_addr, server) = match config.allowed_hosts {
            Some(hosts) => shop_tools::serve_with_hosts(config.addr, shop, hosts).await?,
            None => shop_tools::serve(config.addr, shop).await?,
        };
        server.await.context("shop-tools server task failed")
    }
}
