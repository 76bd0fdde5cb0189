//! Orders: one order of the customer with its items, money and shipment summary, and the customer's order list.

use chrono::Duration;

use super::views::{OrderLine, OrderList, OrderView, ShipmentSummary};
use super::{Shop, shipping::ShipmentStatus};
use crate::data::{Order, OrderStatus};
use crate::error::Refusal;
use crate::money::to_decimal;

impl Shop {
    /// The order's status with the ledger's refunds counted: a delivered order refunded in full is `REFUNDED`.
    pub(super) fn effective_status(order: &Order, refunded_cents: i64) -> OrderStatus {
        let paid = order.paid_cents;
        if order.status == OrderStatus::Delivered && paid > 0 && refunded_cents >= paid {
            OrderStatus::Refunded
        } else {
            order.status
        }
    }

    /// One order of the customer with its items, money and shipment summary.
    ///
    /// Errors: [`Refusal::NotFound`] "order A1005 not found" for an unknown order or one of
    /// another customer; [`Refusal::InvalidArguments`] for an empty id.
    pub async fn get_order(&self, customer_id: &str, order_id: &str) -> Result<OrderView, Refusal> {
        let customer = self.customer(customer_id)?;
        let order = self.order_of(customer, order_id)?;
        let refunded = Self::refunded_cents(&self.ledger_orders(&[order]).await?, order);
        let shipment = self.shipment_of(order).map(|s| ShipmentSummary {
            carrier: s.carrier.clone(),
            status: ShipmentStatus::of(s.events.last()).as_str().to_string(),
            latest_event: s.events.last().cloned(),
            eta: s.eta,
            eta_passed: self.eta_passed(order, s),
        });
        let window = Duration::days(self.data.policy.refund_window_days_after_delivery);
        Ok(OrderView {
            order_id: order.order_id.clone(),
            status: Self::effective_status(order, refunded).as_str().to_string(),
            placed_at: order.placed_at,
            items: order.items.clone(),
            total: to_decimal(order.total_cents),
            paid: to_decimal(order.paid_cents),
            refunded: to_decimal(refunded),
            refundable: to_decimal((order.paid_cents - refunded).max(0)),
            currency: order.currency.clone(),
            delivered_at: order.delivered_at,
            refund_window_ends: order.delivered_at.map(|d| d + window),
            tracking_no: order.tracking_no.clone(),
            shipment,
        })
    }

    /// The customer's orders, newest first.
    ///
    /// Errors: [`Refusal::NotFound`] for an unknown customer id.
    pub async fn list_customer_orders(&self, customer_id: &str) -> Result<OrderList, Refusal> {
        let customer = self.customer(customer_id)?;
        let own: Vec<&Order> = self.data.orders.iter().filter(|o| o.customer_id == customer.customer_id).collect();
        let ledger = self.ledger_orders(&own).await?;
        let mut orders: Vec<OrderLine> = own
            .iter()
            .map(|o| OrderLine {
                order_id: o.order_id.clone(),
                placed_at: o.placed_at,
                status: Self::effective_status(o, Self::refunded_cents(&ledger, o)).as_str().to_string(),
                total: to_decimal(o.total_cents),
                currency: o.currency.clone(),
            })
            .collect();
        orders.sort_by(|a, b| b.placed_at.cmp(&a.placed_at).then_with(|| b.order_id.cmp(&a.order_id)));
        Ok(OrderList { customer_id: customer.customer_id.clone(), orders })
    }
}
