//! Products: details with price and stock by SKU, several SKUs, or a fuzzy name in English or Chinese.

use super::views::{ProductMatches, ProductView};
use super::{MAX_NAME_MATCHES, MAX_SKUS_PER_CALL, Shop, shown};
use crate::data::Product;
use crate::error::Refusal;
use crate::matching;
use crate::money::to_decimal;

/// SKUs written inside free text ("is there stock for SKU-1013, sku 1014?"), in order.
fn skus_in_text(text: &str) -> Vec<String> {
    let upper = text.to_ascii_uppercase();
    let mut found = Vec::new();
    let mut rest = upper.as_str();
    while let Some(at) = rest.find("SKU") {
        let after = rest[at + 3..].trim_start_matches(['-', '_', ' ']);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            let sku = format!("SKU-{digits}");
            if !found.contains(&sku) {
                found.push(sku);
            }
        }
        rest = &rest[at + 3..];
    }
    found
}

impl Shop {
    pub(super) fn product_view(&self, product: &Product) -> ProductView {
        ProductView {
            sku: product.sku.clone(),
            name: product.name.clone(),
            name_zh: product.name_zh.clone(),
            category: product.category.clone(),
            price: to_decimal(product.price_cents),
            currency: self.currency().to_string(),
            stock: product.stock,
            in_stock: product.stock > 0,
            restock_date: if product.stock > 0 { None } else { product.restock_date },
        }
    }

    /// The product with this SKU ("SKU-1016", "sku-1016" or just "1016").
    pub fn product_by_sku(&self, sku: &str) -> Option<&Product> {
        let wanted = sku.trim().to_ascii_uppercase();
        let find = |s: &str| self.data.products.iter().find(|p| p.sku.eq_ignore_ascii_case(s));
        find(&wanted).or_else(|| {
            let digits = wanted.trim_start_matches("SKU").trim_start_matches(['-', ' ', '_']);
            (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
                .then(|| find(&format!("SKU-{digits}")))
                .flatten()
        })
    }

    /// Products whose English or Chinese name shares words with `name`, best first, at most
    /// [`MAX_NAME_MATCHES`]; candidates scoring under half of the best are dropped.
    pub fn search_products(&self, name: &str) -> Vec<&Product> {
        let mut scored: Vec<(matching::Score, &Product)> = self
            .data
            .products
            .iter()
            .filter_map(|p| matching::score(name, &[&p.name, &p.name_zh]).map(|s| (s, p)))
            .collect();
        let best = scored.iter().map(|(s, _)| s.matched).max().unwrap_or(0);
        scored.retain(|(s, _)| s.matched * 2 >= best);
        scored.sort_by(|(a, pa), (b, pb)| {
            b.matched.cmp(&a.matched).then(a.unmatched_own.cmp(&b.unmatched_own)).then_with(|| pa.sku.cmp(&pb.sku))
        });
        scored.into_iter().take(MAX_NAME_MATCHES).map(|(_, p)| p).collect()
    }

    /// Product details with price and stock, by `sku`, `skus` or fuzzy `name` (first given wins
    /// in that order).
    ///
    /// Errors: [`Refusal::NotFound`] "no product matches '...'" / "no product with SKU '...'";
    /// [`Refusal::InvalidArguments`] when nothing is given or more than [`MAX_SKUS_PER_CALL`] SKUs.
    pub fn get_product(
        &self,
        sku: Option<&str>,
        skus: &[String],
        name: Option<&str>,
    ) -> Result<ProductMatches, Refusal> {
        let sku = sku.map(str::trim).filter(|s| !s.is_empty());
        let name = name.map(str::trim).filter(|s| !s.is_empty());
        if let Some(sku) = sku {
            let product = self
                .product_by_sku(sku)
                .ok_or_else(|| Refusal::NotFound(format!("no product with SKU '{}'", shown(sku))))?;
            return Ok(ProductMatches { matches: vec![self.product_view(product)], not_found: vec![] });
        }
        let skus: Vec<&str> = skus.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        if !skus.is_empty() {
            return self.products_by_skus(&skus);
        }
        let Some(name) = name else {
            return Err(Refusal::InvalidArguments("give a sku, skus or a product name".into()));
        };
        // A "name" that spells out SKUs is a SKU lookup.
        let named_skus = skus_in_text(name);
        if !named_skus.is_empty() {
            return self.get_product(None, &named_skus, None);
        }
        let found = self.search_products(name);
        if found.is_empty() {
            return Err(Refusal::NotFound(format!("no product matches '{}'", shown(name))));
        }
        Ok(ProductMatches { matches: found.into_iter().map(|p| self.product_view(p)).collect(), not_found: vec![] })
    }

    /// Several SKUs at once; those that do not exist are listed, unless none does.
    fn products_by_skus(&self, skus: &[&str]) -> Result<ProductMatches, Refusal> {
        if skus.len() > MAX_SKUS_PER_CALL {
            return Err(Refusal::InvalidArguments(format!(
                "at most {MAX_SKUS_PER_CALL} SKUs per call (got {})",
                skus.len()
            )));
        }
        let mut matches = Vec::new();
        let mut not_found = Vec::new();
        for sku in skus {
            match self.product_by_sku(sku) {
                Some(p) => matches.push(self.product_view(p)),
                None => not_found.push(shown(sku)),
            }
        }
        if matches.is_empty() {
            return Err(Refusal::NotFound(format!("no product with SKU {}", not_found.join(", "))));
        }
        Ok(ProductMatches { matches, not_found })
    }
}
