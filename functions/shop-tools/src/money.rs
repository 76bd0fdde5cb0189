//! Money inside the shop: whole cents of the shop's currency. Decimals exist only at the edges — where the data set and a tool's arguments are read, and where tool outputs and ledger records are written — so `0.1 + 0.2` style sums never decide a refund.

/// A decimal amount (`797.5`) as whole cents (rounded; a non-finite amount saturates).
pub fn to_cents(amount: f64) -> i64 {
    (amount * 100.0).round() as i64
}

/// Whole cents as the decimal amount the edges speak (`79750` → `797.5`).
pub fn to_decimal(cents: i64) -> f64 {
    cents as f64 / 100.0
}

/// `797.50 CNY`.
pub fn format(cents: i64, currency: &str) -> String {
    format!("{:.2} {currency}", to_decimal(cents))
}

/// Serde of a cents field as the decimal number the JSON holds (the data set, ledger records).
pub mod decimal {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cents: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(super::to_decimal(*cents))
    }

    /// Errors: a number that is not finite or too large to be an amount.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let amount = f64::deserialize(d)?;
        if !amount.is_finite() || amount.abs() >= 1e15 {
            return Err(serde::de::Error::custom(format!("{amount} is not an amount")));
        }
        Ok(super::to_cents(amount))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_become_whole_cents_and_back() {
        assert_eq!((to_cents(797.0), to_cents(0.1 + 0.2), to_cents(179.8)), (79_700, 30, 17_980));
        assert_eq!((to_decimal(79_700), to_decimal(17_980)), (797.0, 179.8));
        assert_eq!(format(37_000, "CNY"), "370.00 CNY");
    }
}
