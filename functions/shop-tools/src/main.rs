//! Entry point of the shop-tools binary: the demo shop's MCP server, on Lambda (behind its `AWS_IAM` function URL) or locally (behind the gateway's upstream token).

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
    let access = config.access()?;
    if config.on_lambda {
        lambda_http::run(shop_tools::router(shop, access)).await.map_err(|e| anyhow::anyhow!(e))
    } else {
        let (_addr, server) = shop_tools::serve(config.addr, shop, access).await?;
        server.await.context("shop-tools server task failed")
    }
}
