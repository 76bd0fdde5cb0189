//! Coupons: whether a code exists, is valid now and fits the basket (given as a total, or as a product and a quantity) — one check per rule — and the discount it gives.

use super::views::{CouponCheck, CouponFinding};
use super::{Shop, non_empty, shown};
use crate::args::CheckCouponArgs;
use crate::data::{Coupon, Customer, OrderStatus, Product};
use crate::error::Refusal;
use crate::money::{format as money, to_cents, to_decimal};

/// The basket a coupon check is about.
struct Basket<'a> {
    /// Cents: the given total, or price × quantity of the product.
    total: Option<i64>,
    product: Option<&'a Product>,
    /// Lower case: given, or the product's.
    category: Option<String>,
}

/// What the rules found: reasons the coupon cannot be used, and conditions still to meet, each
/// as an English sentence and its code.
#[derive(Default)]
struct Findings {
    failures: Vec<(String, CouponFinding)>,
    pending: Vec<(String, CouponFinding)>,
}

/// The sentences of `found`, and their codes.
fn split(found: Vec<(String, CouponFinding)>) -> (Vec<String>, Vec<CouponFinding>) {
    found.into_iter().unzip()
}

impl Shop {
    fn coupon(&self, code: &str) -> Option<&Coupon> {
        self.data.coupons.iter().find(|c| c.code.eq_ignore_ascii_case(code))
    }

    /// Whether a coupon exists, is valid now, and fits the basket (if one is described).
    ///
    /// Errors: [`Refusal::InvalidArguments`] for an empty code, quantity 0 or a negative
    /// total; [`Refusal::NotFound`] when a named product does not exist. An unknown code is
    /// not an error: it answers `exists: false`.
    pub fn check_coupon(&self, query: &CheckCouponArgs) -> Result<CouponCheck, Refusal> {
        let customer = self.customer(&query.customer_id)?;
        let code = query.code.trim().to_ascii_uppercase();
        if code.is_empty() {
            return Err(Refusal::InvalidArguments("code is required".into()));
        }
        let basket = self.basket(query)?;
        let currency = self.currency().to_string();
        let Some(coupon) = self.coupon(&code) else {
            return Ok(CouponCheck {
                reasons: vec![format!("no coupon with code {} exists", shown(&code))],
                findings: vec![CouponFinding::UnknownCode],
                note: format!("{} is not a valid coupon code.", shown(&code)),
                code,
                exists: false,
                usable: false,
                kind: None,
                value: None,
                min_spend: None,
                valid_until: None,
                categories: None,
                first_order_only: None,
                discount: None,
                order_total: basket.total.map(to_decimal),
                product: basket.product.map(|p| self.product_view(p)),
                currency: Some(currency),
            });
        };
        let findings = self.coupon_rules(coupon, &code, customer, &basket, &currency);
        let usable = findings.failures.is_empty();
        let discount = basket.total.filter(|_| usable).map(|total| coupon.discount_cents(total));
        let note = coupon_note(coupon, &code, &findings, discount, basket.total, &currency);
        let (reasons, found) = split(if usable { findings.pending } else { findings.failures });
        Ok(CouponCheck {
            code,
            exists: true,
            usable,
            reasons,
            findings: found,
            note,
            kind: Some(coupon.kind.as_str().to_owned()),
            value: Some(coupon.value),
            min_spend: Some(to_decimal(coupon.min_spend_cents)),
            valid_until: Some(coupon.valid_until),
            categories: Some(coupon.categories.clone()),
            first_order_only: Some(coupon.first_order_only),
            discount: discount.map(to_decimal),
            order_total: basket.total.map(to_decimal),
            product: basket.product.map(|p| self.product_view(p)),
            currency: Some(currency),
        })
    }

    /// The basket the query describes. Errors: quantity 0, a negative or non-finite total, a
    /// product that does not exist.
    fn basket(&self, query: &CheckCouponArgs) -> Result<Basket<'_>, Refusal> {
        let quantity = query.quantity.unwrap_or(1);
        if quantity == 0 {
            return Err(Refusal::InvalidArguments("quantity must be at least 1".into()));
        }
        if let Some(total) = query.order_total
            && (!total.is_finite() || total < 0.0)
        {
            return Err(Refusal::InvalidArguments("order_total must be a non-negative amount".into()));
        }
        let product = if let Some(sku) = non_empty(query.sku.as_ref()) {
            Some(
                self.product_by_sku(sku)
                    .ok_or_else(|| Refusal::NotFound(format!("no product with SKU '{}'", shown(sku))))?,
            )
        } else if let Some(name) = non_empty(query.product_name.as_ref()) {
            Some(
                self.search_products(name)
                    .first()
                    .copied()
                    .ok_or_else(|| Refusal::NotFound(format!("no product matches '{}'", shown(name))))?,
            )
        } else {
            None
        };
        let total = query.order_total.map(to_cents).or(product.map(|p| p.price_cents * i64::from(quantity)));
        let category = non_empty(query.category.as_ref())
            .map(str::to_lowercase)
            .or_else(|| product.map(|p| p.category.to_lowercase()));
        Ok(Basket { total, product, category })
    }

    /// Every rule of the coupon against the basket and the customer, in the order they are reported.
    fn coupon_rules(
        &self,
        coupon: &Coupon,
        code: &str,
        customer: &Customer,
        basket: &Basket<'_>,
        currency: &str,
    ) -> Findings {
        let mut found = Findings::default();
        if coupon.valid_until < self.today() {
            found.failures.push((
                format!("{code} expired on {}", coupon.valid_until),
                CouponFinding::Expired { valid_until: coupon.valid_until },
            ));
        }
        min_spend_rule(coupon, code, basket.total, currency, &mut found);
        category_rule(coupon, code, basket.category.as_deref(), &mut found);
        if coupon.first_order_only {
            let previous = self
                .data
                .orders
                .iter()
                .filter(|o| o.customer_id == customer.customer_id && o.status != OrderStatus::Cancelled)
                .count();
            if previous > 0 {
                found.failures.push((
                    format!(
                        "{code} is for a customer's first order only, and this customer already has {previous} order(s)"
                    ),
                    CouponFinding::FirstOrderOnly { orders: previous },
                ));
            }
        }
        if let Some(max) = coupon.max_uses_per_customer {
            let used = coupon.used_by.iter().filter(|c| c.eq_ignore_ascii_case(&customer.customer_id)).count();
            if used >= max as usize {
                found.failures.push((
                    format!("{code} can be used {max} time(s) per customer and this customer has already used it"),
                    CouponFinding::UsedUp { max_uses: max },
                ));
            }
        }
        found
    }
}

/// The minimum spend: short of it is a failure; without a basket, a condition to meet.
fn min_spend_rule(coupon: &Coupon, code: &str, total: Option<i64>, currency: &str, found: &mut Findings) {
    let min_spend = coupon.min_spend_cents;
    match total {
        Some(total) if total < min_spend => found.failures.push((
            format!(
                "the minimum spend for {code} is {}; this basket is {} ({} short)",
                money(min_spend, currency),
                money(total, currency),
                money(min_spend - total, currency)
            ),
            CouponFinding::BelowMinSpend {
                min_spend: to_decimal(min_spend),
                order_total: to_decimal(total),
                short: to_decimal(min_spend - total),
            },
        )),
        None if min_spend > 0 => found.pending.push((
            format!("needs a basket of at least {}", money(min_spend, currency)),
            CouponFinding::NeedsMinSpend { min_spend: to_decimal(min_spend) },
        )),
        _ => {}
    }
}

/// The coupon's categories: another category is a failure; without one, a condition to meet.
fn category_rule(coupon: &Coupon, code: &str, category: Option<&str>, found: &mut Findings) {
    if coupon.categories.is_empty() {
        return;
    }
    let list = coupon.categories.join(", ");
    match category {
        Some(c) if !coupon.categories.iter().any(|k| k.eq_ignore_ascii_case(c)) => found.failures.push((
            format!("{code} applies only to {list} products, not {c}"),
            CouponFinding::WrongCategory { categories: coupon.categories.clone(), category: c.to_owned() },
        )),
        None => found.pending.push((
            format!("applies only to {list} products"),
            CouponFinding::NeedsCategory { categories: coupon.categories.clone() },
        )),
        _ => {}
    }
}

/// One or two plain sentences: why not, what it takes off, or what it still depends on.
fn coupon_note(
    coupon: &Coupon,
    code: &str,
    found: &Findings,
    discount: Option<i64>,
    total: Option<i64>,
    currency: &str,
) -> String {
    if !found.failures.is_empty() {
        let why: Vec<&str> = found.failures.iter().map(|(s, _)| s.as_str()).collect();
        format!("{code} cannot be used: {}.", why.join("; "))
    } else if let (Some(d), Some(total)) = (discount, total) {
        format!(
            "{code} can be used: it takes {} off {} (valid until {}).",
            money(d, currency),
            money(total, currency),
            coupon.valid_until
        )
    } else if found.pending.is_empty() {
        format!("{code} is valid until {} and has no further conditions.", coupon.valid_until)
    } else {
        format!(
            "{code} is valid until {}; whether it applies depends on the basket: it {}.",
            coupon.valid_until,
            found.pending.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(" and ")
        )
    }
}
