//! Table provisioning for the emulator, tests and `swarm-local`: the single table as `template.yaml` declares it.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus, TimeToLiveSpecification,
};
use swarm_adapters::aws::dynamo::codec::{CUSTOMER_INDEX, PENDING_INDEX, SWEEP_INDEX};
use swarm_adapters::aws::dynamo::store::to_store_error;
use swarm_adapters::aws::retry::{AwsRetryPolicy, sdk_error_is_transient};
use swarm_core::ports::StoreError;

/// Creates the single table as `template.yaml` declares it (for the emulator,
/// tests and `swarm-local`): `PK`/`SK` strings, on-demand billing, stream
/// `NEW_IMAGE`, TTL on `ttl`, the sweep's sparse index ([`SWEEP_INDEX`]:
/// `sweep_shard` N, `deadline_ms` N, keys only) and the customers' ([`CUSTOMER_INDEX`]:
/// `customer_id` S, `created_at_ms` N, all attributes) and the pending approvals' ([`PENDING_INDEX`]:
/// `pending_pk` S, `pending_sk` S, all attributes). Waits (at most 60 s) until the table is `ACTIVE`.
/// An existing table of that name is reused.
///
/// Errors: [`StoreError::Permanent`] for a rejected request or a table that
/// never becomes active; [`StoreError::Transient`] for throttling.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let attr_of = |name: &str, kind: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))
    };
    let attr = |name: &str| attr_of(name, ScalarAttributeType::S);
    let key_el = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))
    };
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewImage)
        .build()
        .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))?;
    let sweep = GlobalSecondaryIndex::builder()
        .index_name(SWEEP_INDEX)
        .key_schema(key_el("sweep_shard", KeyType::Hash)?)
        .key_schema(key_el("deadline_ms", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
        .build()
        .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))?;
    let customers = GlobalSecondaryIndex::builder()
        .index_name(CUSTOMER_INDEX)
        .key_schema(key_el("customer_id", KeyType::Hash)?)
        .key_schema(key_el("created_at_ms", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))?;
    let pending = GlobalSecondaryIndex::builder()
        .index_name(PENDING_INDEX)
        .key_schema(key_el("pending_pk", KeyType::Hash)?)
        .key_schema(key_el("pending_sk", KeyType::Range)?)
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .map_err(|e| StoreError::Permanent(format!("CreateTable request: {e}")))?;
    let req = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("PK")?)
        .attribute_definitions(attr("SK")?)
        .attribute_definitions(attr_of("sweep_shard", ScalarAttributeType::N)?)
        .attribute_definitions(attr_of("deadline_ms", ScalarAttributeType::N)?)
        .attribute_definitions(attr("customer_id")?)
        .attribute_definitions(attr_of("created_at_ms", ScalarAttributeType::N)?)
        .attribute_definitions(attr("pending_pk")?)
        .attribute_definitions(attr("pending_sk")?)
        .key_schema(key_el("PK", KeyType::Hash)?)
        .key_schema(key_el("SK", KeyType::Range)?)
        .global_secondary_indexes(sweep)
        .global_secondary_indexes(customers)
        .global_secondary_indexes(pending)
        .billing_mode(BillingMode::PayPerRequest)
        .stream_specification(stream);
    let retry = AwsRetryPolicy::default();
    match retry.run("dynamodb", "CreateTable", sdk_error_is_transient, || req.clone().send()).await {
        Ok(_) => {}
        Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("ResourceInUseException") => {}
        Err(e) => return Err(to_store_error("CreateTable", e)),
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let req = client.describe_table().table_name(table);
        let out = retry
            .run("dynamodb", "DescribeTable", sdk_error_is_transient, || req.clone().send())
            .await
            .map_err(|e| to_store_error("DescribeTable", e))?;
        if out.table.and_then(|t| t.table_status) == Some(TableStatus::Active) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Permanent(format!("table {table} not ACTIVE after 60 s")));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ttl = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name("ttl")
        .build()
        .map_err(|e| StoreError::Permanent(format!("UpdateTimeToLive request: {e}")))?;
    let req = client.update_time_to_live().table_name(table).time_to_live_specification(ttl);
    match retry.run("dynamodb", "UpdateTimeToLive", sdk_error_is_transient, || req.clone().send()).await {
        Ok(_) => Ok(()),
        // Re-running on an existing table: "TimeToLive is already enabled".
        Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("ValidationException") => Ok(()),
        Err(e) => Err(to_store_error("UpdateTimeToLive", e)),
    }
}
