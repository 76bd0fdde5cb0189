//! What the store contract suites share: the macro that runs each contract test on both adapters, and a DynamoDB store (or client) on a fresh table of the emulator.

use std::sync::Arc;

#[allow(dead_code)] // each suite uses the part it needs
pub mod lossy;
#[allow(dead_code)] // each suite uses the part it needs
pub mod store_fixtures;

use anyhow::Result;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use swarm_adapters::aws::dynamo::DynamoConversationStore;
use swarm_local::platform::dynamo_table::create_table;

/// Instantiates every listed contract test for each adapter: `embedded::name` on the in-memory
/// store, `dynamodb::name` on a fresh table of the emulator ([`dynamo_store`]).
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(std::sync::Arc::new(swarm_adapters::embedded::InMemoryConversationStore::new())).await
                }
            )*
        }

        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() -> anyhow::Result<()> {
                    match crate::common::dynamo_store(stringify!($name)).await? {
                        Some(store) => super::$name(store).await,
                        None => Ok(()),
                    }
                }
            )*
        }
    };
}

/// A DynamoDB store on a fresh table of the emulator named by `SWARM_AWS_ENDPOINT`, or `None`
/// (with a loud line) when `SWARM_SKIP_AWS=1` names none. Errors: no emulator named, or the table
/// could not be created.
pub async fn dynamo_store(test: &str) -> Result<Option<Arc<DynamoConversationStore>>> {
    Ok(dynamo_table(test).await?.map(|(client, table)| Arc::new(DynamoConversationStore::new(client, table))))
}

/// A client of the emulator named by `SWARM_AWS_ENDPOINT` and a fresh table on it, or `None` as
/// [`dynamo_store`] says.
pub async fn dynamo_table(test: &str) -> Result<Option<(aws_sdk_dynamodb::Client, String)>> {
    let suite = env!("CARGO_CRATE_NAME");
    let endpoint = match std::env::var("SWARM_AWS_ENDPOINT") {
        Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
        _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
            eprintln!(
                "!!!!!!!! SKIPPED {suite} dynamodb::{test}: SWARM_SKIP_AWS=1 and no SWARM_AWS_ENDPOINT; the AWS adapter was NOT tested"
            );
            return Ok(None);
        }
        _ => anyhow::bail!(
            "dynamodb::{test} needs a local AWS emulator: run `infra/aws/moto.sh start`, then \
             `SWARM_AWS_ENDPOINT=http://127.0.0.1:5000 cargo test -p swarm-local --test {suite}` \
             (or set SWARM_SKIP_AWS=1 to skip the AWS side)"
        ),
    };
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "contract-tests"))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let table = format!(
        "{}-{}-{}",
        suite.replace('_', "-"),
        test.replace('_', "-").chars().take(60).collect::<String>(),
        uuid::Uuid::now_v7().simple()
    );
    create_table(&client, &table).await?;
    Ok(Some((client, table)))
}
