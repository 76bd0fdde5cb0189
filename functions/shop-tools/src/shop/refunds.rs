//! Refunds: the refund policy, and a refund of (part of) a delivered, paid order within its window — idempotent by the customer's key, checked against the ledger's totals of the order (the policy first, then the consent limit the gateway set) and recorded conditional on them.

use chrono::Duration;

use super::views::{RefundPolicyView, RefundReceipt};
use super::{Shop, idempotency_key, shown, unavailable};
use crate::args::RefundArgs;
use crate::data::{Customer, Order, OrderStatus};
use crate::error::{RefundRule, Refusal};
use crate::ledger::{LedgerWrite, OrderRefunds, RefundRecord};
use crate::money::{format as money, to_cents};

/// Rounds of [`Shop::refund`] while other refunds of the same order keep landing first.
const REFUND_ROUNDS: usize = 8;

impl Shop {
    /// The refund policy in numbers and one plain sentence.
    pub fn refund_policy(&self) -> RefundPolicyView {
        let p = &self.data.policy;
        let paid = if p.refund_requires_paid { " for paid orders" } else { "" };
        RefundPolicyView {
            refund_window_days_after_delivery: p.refund_window_days_after_delivery,
            refund_requires_paid: p.refund_requires_paid,
            refund_max: p.refund_max.clone(),
            currency: p.currency.clone(),
            text: format!(
                "Refunds are accepted within {} days after delivery{paid}, up to the amount paid minus anything \
                 already refunded ({}). An order that has not been delivered yet cannot be refunded: the refund \
                 window starts at delivery.",
                p.refund_window_days_after_delivery, p.currency
            ),
        }
    }

    /// Refunds (part of) a delivered, paid order within the refund window.
    ///
    /// Idempotent by `(customer_id, idempotency_key)`: a repeated key returns the first
    /// receipt and moves no money; the same key for another order or amount is refused. A
    /// refund a person approved (`approval_id`, from the gateway) is recorded with its approval,
    /// which pays one refund: the same approval under another key is refused.
    /// The checks are made against the ledger's totals of the order and the refund is recorded
    /// conditional on those totals and on the key being new (one conditional write on
    /// DynamoDB), so concurrent calls — on any instance — cannot refund the same money twice.
    /// A refusal records nothing.
    ///
    /// With a consent limit (`consent_limit_cents`, from the gateway), a refund that would take
    /// the order's refunds — all of them so far plus this one — past the limit is not made: it
    /// needs a person's approval. That check comes after every policy check (only a refund that
    /// could run is put before a person) and is made against the same totals the refund is
    /// recorded conditional on, so refunds sent at once cannot split their way past it.
    ///
    /// Errors: [`Refusal::NotFound`] (order), [`Refusal::InvalidArguments`] (key, amount),
    /// [`Refusal::Policy`] with the policy's rule, e.g. [`RefundRule::NotDelivered`] ("order A1032
    /// is SHIPPED, not delivered: the refund window starts at delivery"); [`Refusal::Refused`] for
    /// an idempotency key or approval used for another refund; [`Refusal::NeedsApproval`] past the
    /// consent limit; [`Refusal::Unavailable`] when the ledger cannot be reached (nothing recorded).
    pub async fn refund(&self, request: &RefundArgs) -> Result<RefundReceipt, Refusal> {
        let customer = self.customer(&request.customer_id)?;
        let key = idempotency_key(&request.idempotency_key)?;
        // The amount arrives as a decimal (the MCP edge); the rules work in cents.
        let wanted = match request.amount {
            Some(a) if !a.is_finite() || to_cents(a) <= 0 => {
                return Err(Refusal::InvalidArguments(format!("the refund amount must be greater than 0 (got {a})")));
            }
            Some(a) => Some(to_cents(a)),
            None => None,
        };
        let order = self.order_of(customer, &request.order_id)?;
        for _ in 0..REFUND_ROUNDS {
            if let Some(first) = self.ledger.by_key(&customer.customer_id, key).await.map_err(unavailable)? {
                return Self::replay(&first, order, key, wanted);
            }
            let before = self.ledger_orders(&[order]).await?.get(&order.order_id).copied().unwrap_or_default();
            let record = self.new_refund(customer, order, request, key, wanted, before)?;
            match self.ledger.record(&record, before).await.map_err(unavailable)? {
                LedgerWrite::Recorded => {
                    tracing::info!(refund_id = %record.refund_id, order_id = %record.order_id, amount_cents = record.amount_cents, "refund recorded");
                    return Ok(record.receipt());
                }
                LedgerWrite::KeyTaken(first) => return Self::replay(&first, order, key, wanted),
                LedgerWrite::ApprovalUsed => {
                    tracing::warn!(order_id = %order.order_id, "an approval already paid under another key was presented again");
                    return Err(Refusal::Refused(format!(
                        "this approval already paid a refund of order {} under another idempotency key; an approval \
                         pays one refund, nothing was refunded",
                        order.order_id
                    )));
                }
                // Another refund of this order landed first: check again against the new totals.
                LedgerWrite::OrderChanged => continue,
            }
        }
        Err(Refusal::Unavailable(format!(
            "order {} is being refunded by other requests right now; nothing was changed, try again",
            order.order_id
        )))
    }

    /// The answer to a repeated key: the first receipt, unless it names another order or amount.
    fn replay(first: &RefundRecord, order: &Order, key: &str, wanted: Option<i64>) -> Result<RefundReceipt, Refusal> {
        if first.order_id != order.order_id {
            return Err(Refusal::Refused(format!(
                "idempotency_key '{}' was already used for a refund of order {}; use a new key for a new refund",
                shown(key),
                first.order_id
            )));
        }
        if wanted.is_some_and(|w| w != first.amount_cents) {
            return Err(Refusal::Refused(format!(
                "idempotency_key '{}' was already used for a refund of {} on order {}; use a new key for a different amount",
                shown(key),
                money(first.amount_cents, &first.currency),
                first.order_id
            )));
        }
        tracing::info!(refund_id = %first.refund_id, order_id = %first.order_id, "refund replayed for a repeated idempotency key");
        Ok(first.receipt())
    }

    /// The policy checks against `before` (the ledger's totals of the order), and the refund they allow.
    fn new_refund(
        &self,
        customer: &Customer,
        order: &Order,
        request: &RefundArgs,
        key: &str,
        wanted: Option<i64>,
        before: OrderRefunds,
    ) -> Result<RefundRecord, Refusal> {
        let (id, currency) = (&order.order_id, order.currency.as_str());
        let paid = order.paid_cents;
        let refunded = order.refunded_cents + before.cents;
        let remaining = paid - refunded;
        self.refundable(order, paid, refunded)?;
        let amount = wanted.unwrap_or(remaining);
        if amount > remaining {
            return Err(Refusal::Policy(RefundRule::ExceedsRefundable {
                order_id: id.clone(),
                amount,
                refundable: remaining,
                paid,
                refunded,
                currency: currency.to_owned(),
            }));
        }
        if let Some(limit) = request.consent_limit_cents
            && refunded + amount > limit
        {
            return Err(Refusal::NeedsApproval(format!(
                "a refund of {} on order {id} needs a person's approval: the order's refunds would total {}, \
                 above the {} allowed without one; nothing was refunded",
                money(amount, currency),
                money(refunded + amount, currency),
                money(limit, currency)
            )));
        }
        Ok(RefundRecord {
            refund_id: format!("RF-{id}-{}", before.count + 1),
            customer_id: customer.customer_id.clone(),
            order_id: id.clone(),
            amount_cents: amount,
            currency: currency.to_string(),
            refunded_total_cents: refunded + amount,
            reason: request.reason.as_ref().map(|r| r.trim().to_string()).filter(|r| !r.is_empty()),
            idempotency_key: key.to_string(),
            approval_id: request.approval_id.clone(),
        })
    }

    /// The policy's rules before any amount: paid, something left, delivered, within the window.
    fn refundable(&self, order: &Order, paid: i64, refunded: i64) -> Result<(), Refusal> {
        let order_id = order.order_id.clone();
        if self.data.policy.refund_requires_paid && paid <= 0 {
            return Err(Refusal::Policy(RefundRule::NotPaid { order_id, status: order.status.to_string() }));
        }
        if paid - refunded <= 0 {
            let currency = order.currency.clone();
            return Err(Refusal::Policy(RefundRule::NothingLeft { order_id, paid, refunded, currency }));
        }
        if order.status != OrderStatus::Delivered {
            return Err(Refusal::Policy(RefundRule::NotDelivered { order_id, status: order.status.to_string() }));
        }
        let Some(delivered_at) = order.delivered_at else {
            return Err(Refusal::Policy(RefundRule::NoDeliveryTime { order_id }));
        };
        let window_days = self.data.policy.refund_window_days_after_delivery;
        let window_closed_at = delivered_at + Duration::days(window_days);
        if self.now() > window_closed_at {
            return Err(Refusal::Policy(RefundRule::RefundWindowClosed {
                order_id,
                delivered_at,
                window_days,
                window_closed_at,
            }));
        }
        Ok(())
    }
}
