//! Contract tests of the shop's ledger: each test is written once and runs against the in-memory ledger and the DynamoDB ledger on a local emulator — a key refunds once, racing refunds never spend the same money twice, a key opens one support ticket, and a new shop instance (a cold start) knows every refund, ticket and key.
//!
//! The DynamoDB instantiations need `SWARM_AWS_ENDPOINT` (e.g. `http://127.0.0.1:5000` after
//! `infra/aws/moto.sh start`); without it they fail, unless `SWARM_SKIP_AWS=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is the test failing

use std::sync::Arc;

use anyhow::Result;
use shop_tools::args::{OpenTicketArgs, RefundArgs};
use shop_tools::ledger::{LedgerWrite, OrderRefunds, RefundRecord};
use shop_tools::{RefundLedger, Shop};

type Ledger = Arc<dyn RefundLedger>;

macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod in_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(std::sync::Arc::new(shop_tools::InMemoryLedger::new())).await
                }
            )*
        }

        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() -> anyhow::Result<()> {
                    match super::aws::ledger(stringify!($name)).await? {
                        Some(ledger) => super::$name(ledger).await,
                        None => Ok(()),
                    }
                }
            )*
        }
    };
}

contract_tests!(
    a_key_refunds_once_and_its_receipt_is_replayed,
    refunds_racing_with_different_keys_never_exceed_what_was_paid,
    a_new_shop_instance_on_the_same_ledger_knows_every_refund_and_key,
    the_same_key_from_two_customers_is_two_refunds,
    a_record_is_conditional_on_its_key_and_on_the_order_totals_it_was_checked_against,
    refunds_racing_under_a_consent_limit_never_take_the_order_past_it,
    an_approval_pays_one_refund_whatever_key_it_comes_with,
    a_ticket_key_opens_one_ticket_however_often_and_however_concurrently_it_is_sent,
);

fn refund(customer: &str, order: &str, key: &str, amount: Option<f64>) -> RefundArgs {
    RefundArgs {
        customer_id: customer.into(),
        order_id: order.into(),
        amount,
        reason: Some("contract".into()),
        idempotency_key: key.into(),
        ..RefundArgs::default()
    }
}

async fn a_key_refunds_once_and_its_receipt_is_replayed(ledger: Ledger) -> Result<()> {
    let shop = Shop::demo_with(ledger.clone())?;
    let first = shop.refund(&refund("C103", "A1016", "swarm:c:w01:1", Some(100.0))).await?;
    let again = shop.refund(&refund("C103", "A1016", "swarm:c:w01:1", Some(100.0))).await?;
    assert_eq!(first, again);
    assert_eq!(first.refund_id, "RF-A1016-1");
    assert_eq!(ledger.all().await?.len(), 1);
    assert_eq!(ledger.orders(&["A1016", "A9999"]).await?.get("A1016"), Some(&OrderRefunds { cents: 10_000, count: 1 }));
    let order = shop.get_order("C103", "A1016").await?;
    assert_eq!((order.refunded, order.refundable), (100.0, 697.0));
    Ok(())
}

async fn refunds_racing_with_different_keys_never_exceed_what_was_paid(ledger: Ledger) -> Result<()> {
    let shop = Arc::new(Shop::demo_with(ledger.clone())?);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let shop = shop.clone();
            tokio::spawn(async move { shop.refund(&refund("C103", "A1016", &format!("race-{i}"), Some(300.0))).await })
        })
        .collect();
    let mut done = 0;
    for t in tasks {
        if t.await?.is_ok() {
            done += 1;
        }
    }
    let all = ledger.all().await?;
    assert_eq!(done, 2, "797 paid: two refunds of 300 fit, a third does not");
    assert_eq!(all.iter().map(|r| r.amount_cents).sum::<i64>(), 60_000);
    let mut ids: Vec<String> = all.iter().map(|r| r.refund_id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["RF-A1016-1", "RF-A1016-2"]);
    Ok(())
}

async fn refunds_racing_under_a_consent_limit_never_take_the_order_past_it(ledger: Ledger) -> Result<()> {
    use shop_tools::error::Refusal;
    let shop = Arc::new(Shop::demo_with(ledger.clone())?);
    let limited = |i: usize| RefundArgs {
        consent_limit_cents: Some(25_000),
        ..refund("C103", "A1016", &format!("limit-{i}"), Some(99.0))
    };
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (shop, args) = (shop.clone(), limited(i));
            tokio::spawn(async move { shop.refund(&args).await })
        })
        .collect();
    let (mut done, mut asked) = (0, 0);
    for t in tasks {
        match t.await? {
            Ok(_) => done += 1,
            Err(Refusal::NeedsApproval(_)) => asked += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    let moved: i64 = ledger.all().await?.iter().map(|r| r.amount_cents).sum();
    assert_eq!((done, asked, moved), (2, 6, 19_800), "two refunds of 99 fit under 250, a third does not");
    // A key that already refunded answers its receipt, whatever the limit says now.
    let replay = shop
        .refund(&RefundArgs { consent_limit_cents: Some(0), ..refund("C103", "A1016", "limit-0", Some(99.0)) })
        .await;
    let first = ledger.all().await?.into_iter().any(|r| r.idempotency_key == "limit-0");
    assert_eq!(replay.is_ok(), first, "{replay:?}");
    Ok(())
}

async fn a_new_shop_instance_on_the_same_ledger_knows_every_refund_and_key(ledger: Ledger) -> Result<()> {
    let before = Shop::demo_with(ledger.clone())?;
    let receipt = before.refund(&refund("C103", "A1016", "swarm:c:w02:1", None)).await?;
    assert_eq!(receipt.amount, 797.0);
    drop(before);
    // A cold start: a new instance, the same ledger.
    let after = Shop::demo_with(ledger.clone())?;
    assert_eq!(after.refund(&refund("C103", "A1016", "swarm:c:w02:1", None)).await?, receipt, "the key is known");
    let order = after.get_order("C103", "A1016").await?;
    assert_eq!((order.status.as_str(), order.refundable), ("REFUNDED", 0.0));
    let more = after.refund(&refund("C103", "A1016", "swarm:c:w03:1", Some(1.0))).await;
    assert!(more.is_err_and(|e| e.to_string().contains("nothing left to refund")));
    assert_eq!(ledger.all().await?.len(), 1);
    Ok(())
}

async fn the_same_key_from_two_customers_is_two_refunds(ledger: Ledger) -> Result<()> {
    let shop = Shop::demo_with(ledger.clone())?;
    let a = shop.refund(&refund("C103", "A1016", "same", Some(10.0))).await?;
    let b = shop.refund(&refund("C109", "A1034", "same", Some(10.0))).await?;
    assert_ne!(a.refund_id, b.refund_id);
    assert_eq!(ledger.all().await?.len(), 2);
    Ok(())
}

async fn a_record_is_conditional_on_its_key_and_on_the_order_totals_it_was_checked_against(
    ledger: Ledger,
) -> Result<()> {
    let record = |key: &str, amount: f64| RefundRecord {
        refund_id: "RF-A1016-1".into(),
        customer_id: "C103".into(),
        order_id: "A1016".into(),
        amount_cents: shop_tools::money::to_cents(amount),
        currency: "CNY".into(),
        refunded_total_cents: shop_tools::money::to_cents(amount),
        reason: None,
        idempotency_key: key.into(),
        approval_id: None,
    };
    let none = OrderRefunds::default();
    assert_eq!(ledger.record(&record("k1", 5.0), none).await?, LedgerWrite::Recorded);
    // The same key again: the stored refund, nothing new.
    assert_eq!(ledger.record(&record("k1", 7.0), none).await?, LedgerWrite::KeyTaken(record("k1", 5.0)));
    // Another key checked against totals that have changed since: refused, nothing written.
    assert_eq!(ledger.record(&record("k2", 5.0), none).await?, LedgerWrite::OrderChanged);
    let now = OrderRefunds { cents: 500, count: 1 };
    assert_eq!(ledger.orders(&["A1016"]).await?.get("A1016"), Some(&now));
    assert_eq!(ledger.record(&record("k2", 5.0), now).await?, LedgerWrite::Recorded);
    assert_eq!(ledger.orders(&["A1016"]).await?.get("A1016"), Some(&OrderRefunds { cents: 1_000, count: 2 }));
    assert_eq!(ledger.by_key("C103", "k2").await?, Some(record("k2", 5.0)));
    assert_eq!(ledger.by_key("C104", "k2").await?, None);
    Ok(())
}

async fn an_approval_pays_one_refund_whatever_key_it_comes_with(ledger: Ledger) -> Result<()> {
    use shop_tools::error::Refusal;
    let shop = Arc::new(Shop::demo_with(ledger.clone())?);
    let approved =
        |key: &str| RefundArgs { approval_id: Some("conv-1.w01.1".into()), ..refund("C103", "A1016", key, Some(10.0)) };
    // Four keys at once under one approval: one refund.
    let tasks: Vec<_> = (1..=4)
        .map(|i| {
            let (shop, args) = (shop.clone(), approved(&format!("approved-{i}")));
            tokio::spawn(async move { shop.refund(&args).await })
        })
        .collect();
    let mut paid = Vec::new();
    for t in tasks {
        match t.await? {
            Ok(receipt) => paid.push(receipt),
            Err(Refusal::Refused(why)) => assert!(why.contains("already paid a refund"), "{why}"),
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(paid.len(), 1, "one approval, one refund");
    let all = ledger.all().await?;
    assert_eq!((all.len(), all[0].approval_id.as_deref()), (1, Some("conv-1.w01.1")));
    // The key that was paid replays its receipt; another approval is another refund.
    let key = all[0].idempotency_key.clone();
    assert_eq!(shop.refund(&approved(&key)).await?, paid[0]);
    let other = RefundArgs { approval_id: Some("conv-1.w01.2".into()), ..refund("C103", "A1016", "next", Some(10.0)) };
    shop.refund(&other).await?;
    assert_eq!(ledger.all().await?.len(), 2);
    Ok(())
}

mod aws {
    use std::sync::Arc;

    use anyhow::Result;
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    use shop_tools::DynamoLedger;

    use super::Ledger;

    /// A DynamoDB ledger on a fresh table of the emulator, or `None` (with a loud line) when `SWARM_SKIP_AWS=1`.
    pub async fn ledger(test: &str) -> Result<Option<Ledger>> {
        let endpoint = match std::env::var("SWARM_AWS_ENDPOINT") {
            Ok(e) if !e.trim().is_empty() => e.trim().to_owned(),
            _ if std::env::var("SWARM_SKIP_AWS").as_deref() == Ok("1") => {
                eprintln!("!!!!!!!! SKIPPED dynamodb::{test}: SWARM_SKIP_AWS=1; the DynamoDB ledger was NOT tested");
                return Ok(None);
            }
            _ => anyhow::bail!(
                "dynamodb::{test} needs a local AWS emulator: run `infra/aws/moto.sh start`, then \
                 `SWARM_AWS_ENDPOINT=http://127.0.0.1:5000 cargo test -p shop-tools --test ledger_contract` \
                 (or set SWARM_SKIP_AWS=1 to skip the AWS side)"
            ),
        };
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "ledger-contract"))
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let table = format!(
            "ledger-{}-{}",
            test.replace('_', "-").chars().take(60).collect::<String>(),
            uuid::Uuid::now_v7().simple()
        );
        DynamoLedger::create_table(&client, &table).await?;
        Ok(Some(Arc::new(DynamoLedger::new(client, table))))
    }
}

/// A support ticket's key opens one ticket: sent eight times at once and again from a new shop
/// instance on the same ledger, every answer is the first ticket; the same key about another
/// order is refused; another customer's same key is its own ticket.
async fn a_ticket_key_opens_one_ticket_however_often_and_however_concurrently_it_is_sent(ledger: Ledger) -> Result<()> {
    let shop = Arc::new(Shop::demo_with(ledger.clone())?);
    let ticket = |customer: &str, order: &str, key: &str| OpenTicketArgs {
        customer_id: customer.into(),
        order_id: order.into(),
        subject: "The parcel arrived damaged".into(),
        idempotency_key: key.into(),
    };
    let racing: Vec<_> = (0..8)
        .map(|_| {
            let (shop, args) = (shop.clone(), ticket("C106", "A1007", "swarm:c:w01:1"));
            tokio::spawn(async move { shop.open_ticket(&args).await })
        })
        .collect();
    let mut ids = Vec::new();
    for r in racing {
        ids.push(r.await?.unwrap().ticket_id);
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one ticket for one key: {ids:?}");
    assert!(ids[0].starts_with("TK-") && ids[0].len() == 35, "{}", ids[0]);
    let cold = Shop::demo_with(ledger.clone())?;
    assert_eq!(cold.open_ticket(&ticket("C106", "A1007", "swarm:c:w01:1")).await.unwrap().ticket_id, ids[0]);
    let other_order = cold.open_ticket(&ticket("C106", "A1019", "swarm:c:w01:1")).await;
    assert!(matches!(other_order, Err(shop_tools::Refusal::Refused(_))), "{other_order:?}");
    let other_customer = cold.open_ticket(&ticket("C103", "A1016", "swarm:c:w01:1")).await.unwrap();
    assert_ne!(other_customer.ticket_id, ids[0]);
    let mut held: Vec<(String, String)> =
        ledger.tickets().await?.into_iter().map(|t| (t.customer_id, t.order_id)).collect();
    held.sort();
    assert_eq!(held, [("C103".to_owned(), "A1016".to_owned()), ("C106".to_owned(), "A1007".to_owned())]);
    Ok(())
}
