//! Unit tests of the shop's rules against the embedded demo data set.

use crate::args::{CheckCouponArgs, RefundArgs};
use crate::error::Refusal;
use crate::shop::Shop;
use crate::shop::views::RefundReceipt;

fn shop() -> anyhow::Result<Shop> {
    Ok(Shop::demo()?)
}

fn refund_args(customer: &str, order: &str, key: &str) -> RefundArgs {
    RefundArgs {
        customer_id: customer.into(),
        order_id: order.into(),
        idempotency_key: key.into(),
        ..RefundArgs::default()
    }
}

fn coupon_args(customer: &str, code: &str) -> CheckCouponArgs {
    CheckCouponArgs { customer_id: customer.into(), code: code.into(), ..CheckCouponArgs::default() }
}

fn skus(matches: &crate::shop::ProductMatches) -> Vec<&str> {
    matches.matches.iter().map(|m| m.sku.as_str()).collect()
}

// ---- orders ----

#[tokio::test]
async fn a_paid_order_is_shown_to_its_customer_with_items_and_money() -> anyhow::Result<()> {
    let order = shop()?.get_order("C104", "A1029").await?;
    assert_eq!(order.order_id, "A1029");
    assert_eq!(order.status, "PAID");
    assert_eq!(order.items.len(), 3);
    assert_eq!(order.items[2].name, "Black Mechanical Keyboard");
    assert_eq!((order.total, order.paid, order.refunded, order.refundable), (3105.0, 3105.0, 0.0, 3105.0));
    assert_eq!(order.currency, "CNY");
    assert_eq!(order.shipment, None);
    assert_eq!(order.tracking_no, None);
    Ok(())
}

#[tokio::test]
async fn order_ids_match_case_insensitively() -> anyhow::Result<()> {
    assert_eq!(shop()?.get_order("C104", " a1029 ").await?.order_id, "A1029");
    Ok(())
}

#[tokio::test]
async fn an_order_id_wrapped_in_words_is_still_found() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(shop.get_order("C104", "order #a1029").await?.order_id, "A1029");
    assert_eq!(shop.get_order("C104", "订单 A1029").await?.order_id, "A1029");
    Ok(())
}

#[tokio::test]
async fn another_customers_order_is_answered_like_an_unknown_one() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(shop.get_order("C100", "A1005").await, Err(Refusal::NotFound("order A1005 not found".into())));
    assert_eq!(shop.get_order("C100", "A9999").await, Err(Refusal::NotFound("order A9999 not found".into())));
    assert_eq!(
        shop.track_shipment("C100", Some("A1005"), None).await,
        Err(Refusal::NotFound("order A1005 not found".into()))
    );
    assert_eq!(
        shop.track_shipment("C100", None, Some("YT572534678335")).await,
        Err(Refusal::NotFound("shipment YT572534678335 not found".into()))
    );
    Ok(())
}

#[tokio::test]
async fn a_customs_hold_is_visible_from_get_order_alone() -> anyhow::Result<()> {
    let order = shop()?.get_order("C100", "A1013").await?;
    let shipment = order.shipment.ok_or_else(|| anyhow::anyhow!("A1013 has a shipment"))?;
    assert_eq!(shipment.carrier, "YTO Express");
    assert_eq!(shipment.status, "HELD_AT_CUSTOMS");
    let latest = shipment.latest_event.ok_or_else(|| anyhow::anyhow!("A1013 has events"))?;
    assert_eq!(latest.event, "held at customs");
    assert_eq!(latest.location, "Hangzhou");
    assert_eq!(shipment.eta.map(|d| d.to_string()).as_deref(), Some("2026-11-23"));
    assert!(shipment.eta_passed);
    Ok(())
}

#[tokio::test]
async fn a_delivered_order_shows_when_its_refund_window_ends() -> anyhow::Result<()> {
    let order = shop()?.get_order("C103", "A1016").await?;
    assert_eq!(order.delivered_at.map(|d| d.to_rfc3339()).as_deref(), Some("2026-11-27T13:00:00+08:00"));
    assert_eq!(order.refund_window_ends.map(|d| d.to_rfc3339()).as_deref(), Some("2026-12-04T13:00:00+08:00"));
    Ok(())
}

#[tokio::test]
async fn customer_orders_are_listed_newest_first() -> anyhow::Result<()> {
    let list = shop()?.list_customer_orders("C104").await?;
    let ids: Vec<&str> = list.orders.iter().map(|o| o.order_id.as_str()).collect();
    assert_eq!(ids, vec!["A1017", "A1005", "A1029"]);
    assert_eq!(list.orders[0].status, "CANCELLED");
    assert_eq!(list.customer_id, "C104");
    Ok(())
}

#[tokio::test]
async fn an_unknown_or_empty_customer_is_refused() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(shop.list_customer_orders("C999").await, Err(Refusal::NotFound("customer C999 not found".into())));
    assert_eq!(shop.get_order(" ", "A1029").await, Err(Refusal::InvalidArguments("customer_id is required".into())));
    Ok(())
}

// ---- shipments ----

#[tokio::test]
async fn a_parcel_past_its_eta_is_reported_late_without_a_new_date() -> anyhow::Result<()> {
    let track = shop()?.track_shipment("C106", Some("A1031"), None).await?;
    assert_eq!(track.tracking_no, "SF250638245935");
    assert_eq!(track.carrier, "SF Express");
    assert_eq!(track.status, "IN_TRANSIT");
    assert_eq!(track.events.len(), 3);
    assert!(track.eta_passed);
    assert_eq!(track.eta.map(|d| d.to_string()).as_deref(), Some("2026-11-09"));
    assert!(track.note.contains("late"), "note: {}", track.note);
    assert!(track.note.contains("2026-11-09"), "note: {}", track.note);
    assert!(track.note.contains("not given a new date"), "note: {}", track.note);
    Ok(())
}

#[tokio::test]
async fn a_parcel_before_its_eta_is_not_late() -> anyhow::Result<()> {
    let track = shop()?.track_shipment("C102", None, Some("zt321422132079")).await?;
    assert_eq!(track.order_id, "A1003");
    assert_eq!(track.status, "DELAYED");
    assert!(!track.eta_passed);
    assert!(track.note.contains("weather"), "note: {}", track.note);
    assert!(track.note.contains("Estimated delivery: 2026-12-01"), "note: {}", track.note);
    Ok(())
}

#[tokio::test]
async fn a_delivered_parcel_is_never_late() -> anyhow::Result<()> {
    let track = shop()?.track_shipment("C103", Some("A1016"), None).await?;
    assert_eq!(track.status, "DELIVERED");
    assert!(!track.eta_passed);
    assert_eq!(track.note, "Delivered on 2026-11-27 13:00 in Shenzhen.");
    Ok(())
}

#[tokio::test]
async fn an_order_without_shipment_says_so_with_its_status() -> anyhow::Result<()> {
    assert_eq!(
        shop()?.track_shipment("C104", Some("A1029"), None).await,
        Err(Refusal::NoShipmentYet { order_id: "A1029".into(), status: "PAID".into() })
    );
    let refusal = Refusal::NoShipmentYet { order_id: "A1029".into(), status: "PAID".into() };
    assert_eq!(
        refusal.to_json(),
        serde_json::json!({"error": "order A1029 has no shipment yet (status PAID)", "code": "no_shipment_yet",
                           "order_id": "A1029", "status": "PAID"})
    );
    Ok(())
}

#[tokio::test]
async fn tracking_needs_an_order_or_a_tracking_number() -> anyhow::Result<()> {
    assert_eq!(
        shop()?.track_shipment("C104", Some(""), None).await,
        Err(Refusal::InvalidArguments("give an order_id or a tracking_no".into()))
    );
    Ok(())
}

// ---- products ----

#[tokio::test]
async fn an_out_of_stock_product_shows_its_restock_date() -> anyhow::Result<()> {
    let found = shop()?.get_product(Some("sku-1016"), &[], None)?;
    assert_eq!(found.matches.len(), 1);
    let p = &found.matches[0];
    assert_eq!(
        (p.sku.as_str(), p.name.as_str(), p.price, p.stock, p.in_stock),
        ("SKU-1016", "Grey Running Shoes 43", 549.0, 0, false)
    );
    assert_eq!(p.restock_date.map(|d| d.to_string()).as_deref(), Some("2026-12-05"));
    Ok(())
}

#[tokio::test]
async fn an_in_stock_product_has_no_restock_date() -> anyhow::Result<()> {
    let found = shop()?.get_product(Some("1022"), &[], None)?;
    assert_eq!(found.matches[0].sku, "SKU-1022");
    assert!(found.matches[0].in_stock);
    assert_eq!(found.matches[0].restock_date, None);
    Ok(())
}

#[tokio::test]
async fn name_search_puts_the_exact_variant_first() -> anyhow::Result<()> {
    let shop = shop()?;
    let first =
        |q: &str| -> anyhow::Result<String> { Ok(shop.get_product(None, &[], Some(q))?.matches[0].sku.clone()) };
    assert_eq!(first("Navy Down Jacket L")?, "SKU-1011");
    assert_eq!(first("is the air purifier back in stock?")?, "SKU-1021");
    assert_eq!(first("mechanical keyboard")?, "SKU-1018");
    assert_eq!(first("Grey Running Shoes 43")?, "SKU-1016");
    assert_eq!(first("gray running shoe 43")?, "SKU-1016");
    assert_eq!(first("Green Tea 250g")?, "SKU-1022");
    Ok(())
}

#[tokio::test]
async fn name_search_returns_at_most_five_and_drops_weak_matches() -> anyhow::Result<()> {
    let shop = shop()?;
    let jackets = shop.get_product(None, &[], Some("羽绒服"))?;
    assert_eq!(jackets.matches.len(), 5);
    assert!(jackets.matches.iter().all(|m| m.name.contains("Down Jacket")));
    let tea = shop.get_product(None, &[], Some("Green Tea 250g"))?;
    assert_eq!(skus(&tea), vec!["SKU-1022"]);
    let navy = shop.get_product(None, &[], Some("Navy Down Jacket L"))?;
    assert_eq!(&skus(&navy)[..3], &["SKU-1011", "SKU-1008", "SKU-1010"]);
    Ok(())
}

#[tokio::test]
async fn a_name_nothing_matches_is_a_clear_error() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(
        shop.get_product(None, &[], Some("flux capacitor")),
        Err(Refusal::NotFound("no product matches 'flux capacitor'".into()))
    );
    assert_eq!(
        shop.get_product(None, &[], Some("is it back in stock?")),
        Err(Refusal::NotFound("no product matches 'is it back in stock?'".into()))
    );
    assert_eq!(
        shop.get_product(None, &[], None),
        Err(Refusal::InvalidArguments("give a sku, skus or a product name".into()))
    );
    Ok(())
}

#[tokio::test]
async fn skus_written_in_a_name_query_are_looked_up_as_skus() -> anyhow::Result<()> {
    let found = shop()?.get_product(None, &[], Some("Is there stock for SKU-1013, sku 1016 and SKU-1021?"))?;
    assert_eq!(skus(&found), vec!["SKU-1013", "SKU-1016", "SKU-1021"]);
    assert_eq!(found.matches.iter().filter(|m| !m.in_stock).count(), 2);
    Ok(())
}

#[tokio::test]
async fn several_skus_are_looked_up_at_once_and_unknown_ones_listed() -> anyhow::Result<()> {
    let found = shop()?.get_product(None, &["SKU-1011".into(), "sku-1017".into(), "SKU-9999".into()], None)?;
    assert_eq!(skus(&found), vec!["SKU-1011", "SKU-1017"]);
    assert_eq!(found.not_found, vec!["SKU-9999".to_string()]);
    Ok(())
}

// ---- coupons ----

#[tokio::test]
async fn tea5_for_two_teas_is_usable_with_a_five_yuan_discount() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&CheckCouponArgs {
        product_name: Some("Green Tea 250g".into()),
        quantity: Some(2),
        ..coupon_args("C107", "tea5")
    })?;
    assert_eq!(check.code, "TEA5");
    assert!(check.exists);
    assert!(check.usable, "reasons: {:?}", check.reasons);
    assert_eq!(check.order_total, Some(176.0));
    assert_eq!(check.discount, Some(5.0));
    assert!(check.reasons.is_empty());
    Ok(())
}

#[tokio::test]
async fn tea5_is_not_usable_twice_by_the_same_customer() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&CheckCouponArgs { order_total: Some(176.0), ..coupon_args("C103", "TEA5") })?;
    assert!(!check.usable);
    assert_eq!(check.discount, None);
    assert_eq!(check.reasons, vec!["TEA5 can be used 1 time(s) per customer and this customer has already used it"]);
    Ok(())
}

#[tokio::test]
async fn tech100_on_a_keyboard_names_the_999_minimum() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&CheckCouponArgs {
        product_name: Some("mechanical keyboard".into()),
        ..coupon_args("C104", "TECH100")
    })?;
    assert!(!check.usable);
    assert_eq!(check.order_total, Some(629.0));
    assert_eq!(check.reasons.len(), 1);
    assert!(check.reasons[0].contains("999.00 CNY"), "reasons: {:?}", check.reasons);
    assert!(check.reasons[0].contains("370.00 CNY short"), "reasons: {:?}", check.reasons);
    Ok(())
}

#[tokio::test]
async fn welcome50_is_refused_to_a_customer_with_earlier_orders() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&coupon_args("C111", "WELCOME50"))?;
    assert!(check.exists);
    assert!(!check.usable);
    assert!(check.reasons.iter().any(|r| r.contains("first order only")), "reasons: {:?}", check.reasons);
    Ok(())
}

#[tokio::test]
async fn an_expired_coupon_is_not_usable() -> anyhow::Result<()> {
    let check =
        shop()?.check_coupon(&CheckCouponArgs { order_total: Some(1000.0), ..coupon_args("C104", "DOUBLE11") })?;
    assert!(!check.usable);
    assert_eq!(check.reasons, vec!["DOUBLE11 expired on 2026-11-12"]);
    Ok(())
}

#[tokio::test]
async fn a_coupon_for_the_wrong_category_is_not_usable() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&CheckCouponArgs {
        sku: Some("SKU-1022".into()),
        quantity: Some(5),
        ..coupon_args("C104", "SAVE20")
    })?;
    assert!(!check.usable);
    assert_eq!(check.reasons, vec!["SAVE20 applies only to apparel, shoes products, not grocery"]);
    Ok(())
}

#[tokio::test]
async fn a_percent_coupon_computes_its_discount() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&CheckCouponArgs {
        product_name: Some("Navy Down Jacket L".into()),
        ..coupon_args("C104", "save20")
    })?;
    assert!(check.usable);
    assert_eq!(check.order_total, Some(899.0));
    assert_eq!(check.discount, Some(179.8));
    Ok(())
}

#[tokio::test]
async fn without_a_basket_a_valid_coupon_lists_the_conditions_still_to_meet() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&coupon_args("C104", "SAVE20"))?;
    assert!(check.usable);
    assert_eq!(check.discount, None);
    assert_eq!(check.valid_until.map(|d| d.to_string()).as_deref(), Some("2026-12-31"));
    assert_eq!(check.reasons, vec!["needs a basket of at least 300.00 CNY", "applies only to apparel, shoes products"]);
    assert!(check.note.contains("depends on the basket"), "note: {}", check.note);
    Ok(())
}

#[tokio::test]
async fn an_unknown_coupon_does_not_exist_and_is_not_an_error() -> anyhow::Result<()> {
    let check = shop()?.check_coupon(&coupon_args("C104", "FREEMONEY"))?;
    assert!(!check.exists);
    assert!(!check.usable);
    assert_eq!(check.reasons, vec!["no coupon with code FREEMONEY exists"]);
    Ok(())
}

#[tokio::test]
async fn a_coupon_check_with_zero_quantity_is_refused() -> anyhow::Result<()> {
    assert_eq!(
        shop()?.check_coupon(&CheckCouponArgs {
            sku: Some("SKU-1022".into()),
            quantity: Some(0),
            ..coupon_args("C107", "TEA5")
        }),
        Err(Refusal::InvalidArguments("quantity must be at least 1".into()))
    );
    Ok(())
}

// ---- refunds ----

#[tokio::test]
async fn the_refund_policy_is_seven_days_after_delivery() -> anyhow::Result<()> {
    let policy = shop()?.refund_policy();
    assert_eq!(policy.refund_window_days_after_delivery, 7);
    assert!(policy.refund_requires_paid);
    assert_eq!(policy.currency, "CNY");
    assert!(policy.text.starts_with("Refunds are accepted within 7 days after delivery"), "text: {}", policy.text);
    Ok(())
}

#[tokio::test]
async fn a_repeated_refund_key_refunds_once_and_returns_the_first_result() -> anyhow::Result<()> {
    let shop = shop()?;
    let first = shop
        .refund(&RefundArgs { reason: Some("earbuds broken".into()), ..refund_args("C103", "A1016", "key-1") })
        .await?;
    let again = shop.refund(&refund_args("C103", "a1016", "key-1")).await?;
    assert_eq!(first, again);
    assert!(first.refunded);
    assert_eq!(first.refund_id, "RF-A1016-1");
    assert_eq!((first.amount, first.refunded_total), (797.0, 797.0));
    let records = shop.refunds().await?;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].amount_cents, 79_700);
    assert_eq!(records[0].reason.as_deref(), Some("earbuds broken"));

    let second_key = shop.refund(&refund_args("C103", "A1016", "key-2")).await;
    assert_eq!(
        ruled_out(&second_key),
        Some((
            "nothing_left",
            "order A1016 has nothing left to refund: 797.00 CNY paid, 797.00 CNY already refunded".to_owned()
        ))
    );
    assert_eq!(shop.refunds().await?.len(), 1);
    let order = shop.get_order("C103", "A1016").await?;
    assert_eq!((order.status.as_str(), order.refunded, order.refundable), ("REFUNDED", 797.0, 0.0));
    Ok(())
}

#[tokio::test]
async fn partial_refunds_add_up_to_at_most_what_was_paid() -> anyhow::Result<()> {
    let shop = shop()?;
    let part = shop.refund(&RefundArgs { amount: Some(399.0), ..refund_args("C103", "A1016", "a") }).await?;
    assert_eq!((part.amount, part.refunded_total), (399.0, 399.0));
    let too_much = shop.refund(&RefundArgs { amount: Some(500.0), ..refund_args("C103", "A1016", "b") }).await;
    assert_eq!(
        ruled_out(&too_much),
        Some(("exceeds_refundable", "a refund of 500.00 CNY exceeds what is refundable on order A1016: 398.00 CNY (797.00 CNY paid minus 399.00 CNY already refunded)".to_owned()))
    );
    let rest = shop.refund(&refund_args("C103", "A1016", "c")).await?;
    assert_eq!((rest.amount, rest.refunded_total, rest.refund_id.as_str()), (398.0, 797.0, "RF-A1016-2"));
    Ok(())
}

#[tokio::test]
async fn a_shipped_order_cannot_be_refunded_yet() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(
        ruled_out(&shop.refund(&refund_args("C107", "A1032", "k")).await),
        Some((
            "not_delivered",
            "order A1032 is SHIPPED, not delivered: the refund window starts at delivery".to_owned()
        ))
    );
    assert!(shop.refunds().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_refund_after_the_window_is_refused_with_the_closing_date() -> anyhow::Result<()> {
    assert_eq!(
        ruled_out(&shop()?.refund(&refund_args("C105", "A1006", "k")).await),
        Some((
            "refund_window_closed",
            "order A1006 was delivered on 2026-11-18 06:00: the 7-day refund window closed on 2026-11-25 06:00"
                .to_owned()
        ))
    );
    Ok(())
}

#[tokio::test]
async fn unpaid_and_refunded_orders_have_nothing_to_refund() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(
        ruled_out(&shop.refund(&refund_args("C100", "A1001", "k")).await),
        Some((
            "not_paid",
            "order A1001 is PENDING_PAYMENT and nothing has been paid, so there is nothing to refund".to_owned()
        ))
    );
    assert_eq!(
        ruled_out(&shop.refund(&refund_args("C108", "A1009", "k")).await),
        Some((
            "nothing_left",
            "order A1009 has nothing left to refund: 1098.00 CNY paid, 1098.00 CNY already refunded".to_owned()
        ))
    );
    Ok(())
}

#[tokio::test]
async fn another_customers_order_cannot_be_refunded() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(
        shop.refund(&refund_args("C100", "A1016", "k")).await,
        Err(Refusal::NotFound("order A1016 not found".into()))
    );
    assert!(shop.refunds().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn bad_refund_arguments_are_refused_and_record_nothing() -> anyhow::Result<()> {
    let shop = shop()?;
    assert_eq!(
        shop.refund(&refund_args("C103", "A1016", "  ")).await,
        Err(Refusal::InvalidArguments("idempotency_key is required".into()))
    );
    assert_eq!(
        shop.refund(&RefundArgs { amount: Some(-5.0), ..refund_args("C103", "A1016", "k") }).await,
        Err(Refusal::InvalidArguments("the refund amount must be greater than 0 (got -5)".into()))
    );
    assert!(shop.refunds().await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_refused_request_does_not_burn_its_key() -> anyhow::Result<()> {
    let shop = shop()?;
    let refused = shop.refund(&RefundArgs { amount: Some(900.0), ..refund_args("C103", "A1016", "k") }).await;
    assert_eq!(ruled_out(&refused).map(|(code, _)| code), Some("exceeds_refundable"));
    let ok = shop.refund(&RefundArgs { amount: Some(100.0), ..refund_args("C103", "A1016", "k") }).await?;
    assert_eq!(ok.amount, 100.0);
    Ok(())
}

#[tokio::test]
async fn a_key_reused_for_another_order_or_amount_is_refused() -> anyhow::Result<()> {
    let shop = shop()?;
    shop.refund(&RefundArgs { amount: Some(100.0), ..refund_args("C103", "A1016", "k") }).await?;
    let other_amount = shop.refund(&RefundArgs { amount: Some(200.0), ..refund_args("C103", "A1016", "k") }).await;
    assert!(
        matches!(&other_amount, Err(Refusal::Refused(m)) if m.contains("already used for a refund of 100.00 CNY")),
        "{other_amount:?}"
    );
    assert_eq!(shop.refunds().await?.len(), 1);
    Ok(())
}

#[tokio::test]
async fn the_same_key_from_two_customers_is_two_requests() -> anyhow::Result<()> {
    let shop = shop()?;
    let a = shop.refund(&refund_args("C103", "A1016", "same")).await?;
    let b = shop.refund(&refund_args("C109", "A1034", "same")).await?;
    assert_ne!(a.refund_id, b.refund_id);
    assert_eq!((b.order_id.as_str(), b.amount), ("A1034", 1496.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refunds_with_different_keys_never_exceed_what_was_paid() -> anyhow::Result<()> {
    let shop = std::sync::Arc::new(shop()?);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let shop = shop.clone();
            tokio::spawn(async move {
                shop.refund(&RefundArgs { amount: Some(300.0), ..refund_args("C103", "A1016", &format!("k{i}")) }).await
            })
        })
        .collect();
    let mut ok = 0;
    for handle in handles {
        if handle.await?.is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 2);
    assert_eq!(shop.refunds().await?.iter().map(|r| r.amount_cents).sum::<i64>(), 60_000);
    Ok(())
}

#[tokio::test]
async fn a_malformed_data_set_is_a_clear_error() {
    let err = Shop::from_json("{\"policy\": {}}").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.starts_with("invalid shop data: demo shop JSON:"), "{err}");
}

/// A refund the policy ruled out: its rule's code (as the tool's answer names it) and its
/// English sentence; `None` for any other outcome.
fn ruled_out(result: &Result<RefundReceipt, Refusal>) -> Option<(&'static str, String)> {
    let Err(Refusal::Policy(rule)) = result else { return None };
    let code = serde_json::to_value(rule).ok()?["code"].as_str()?.to_owned();
    let known =
        ["not_paid", "nothing_left", "not_delivered", "no_delivery_time", "refund_window_closed", "exceeds_refundable"];
    Some((known.into_iter().find(|k| *k == code)?, rule.to_string()))
}

#[test]
fn every_coupon_reason_comes_with_its_code_and_figures() -> anyhow::Result<()> {
    let shop = shop()?;
    let findings = |check: &crate::shop::CouponCheck| -> serde_json::Value {
        assert_eq!(check.findings.len(), check.reasons.len(), "one code for each reason: {check:?}");
        serde_json::to_value(&check.findings).unwrap_or_default()
    };
    let expired = shop.check_coupon(&coupon_args("C105", "DOUBLE11"))?;
    assert_eq!(findings(&expired), serde_json::json!([{"code": "expired", "valid_until": "2026-11-12"}]));
    let keyboard =
        shop.check_coupon(&CheckCouponArgs { sku: Some("SKU-1018".into()), ..coupon_args("C109", "TECH100") })?;
    assert_eq!(
        findings(&keyboard),
        serde_json::json!([{"code": "below_min_spend", "min_spend": 999.0, "order_total": 629.0, "short": 370.0}])
    );
    let second = shop.check_coupon(&coupon_args("C111", "WELCOME50"))?;
    assert_eq!(findings(&second), serde_json::json!([{"code": "first_order_only", "orders": 3}]));
    let pending = shop.check_coupon(&coupon_args("C104", "SAVE20"))?;
    assert!(pending.usable);
    assert_eq!(
        findings(&pending),
        serde_json::json!([{"code": "needs_min_spend", "min_spend": 300.0},
                           {"code": "needs_category", "categories": ["apparel", "shoes"]}])
    );
    let shirt =
        shop.check_coupon(&CheckCouponArgs { sku: Some("SKU-1001".into()), ..coupon_args("C109", "TECH100") })?;
    assert_eq!(
        findings(&shirt),
        serde_json::json!([{"code": "below_min_spend", "min_spend": 999.0, "order_total": 199.0, "short": 800.0},
                           {"code": "wrong_category", "categories": ["electronics"], "category": "apparel"}])
    );
    let unknown = shop.check_coupon(&coupon_args("C104", "NOPE"))?;
    assert_eq!(findings(&unknown), serde_json::json!([{"code": "unknown_code"}]));
    Ok(())
}
