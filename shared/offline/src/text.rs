//! Text analysis for the offline model: splitting a message into questions and extracting order ids, SKUs, coupon codes, products and quantities.
//!
//! Everything here is pure and deterministic; regexes are compiled once. A
//! pattern that fails to compile (a bug caught by the tests) matches nothing
//! instead of panicking, so the offline model degrades rather than crashes.

use std::ops::Range;
use std::sync::LazyLock;

use regex::{Captures, Match, Regex};

/// A regex compiled once. `\b` in the source means an ASCII word boundary, so
/// `订单A1029` still has a boundary between `单` and `A`.
pub(crate) struct Pat(Option<Regex>);

impl Pat {
    pub(crate) fn new(pattern: &str) -> Self {
        let pattern = pattern.replace(r"\b", r"(?-u:\b)");
        match Regex::new(&pattern) {
            Ok(re) => Self(Some(re)),
            Err(error) => {
                tracing::error!(%error, "offline model: pattern does not compile");
                Self(None)
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn compiles(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn is_match(&self, text: &str) -> bool {
        self.0.as_ref().is_some_and(|re| re.is_match(text))
    }

    pub(crate) fn find<'t>(&self, text: &'t str) -> Option<Match<'t>> {
        self.0.as_ref().and_then(|re| re.find(text))
    }

    pub(crate) fn find_iter<'s, 't>(&'s self, text: &'t str) -> impl Iterator<Item = Match<'t>> + use<'s, 't> {
        self.0.iter().flat_map(move |re| re.find_iter(text))
    }

    pub(crate) fn captures<'t>(&self, text: &'t str) -> Option<Captures<'t>> {
        self.0.as_ref().and_then(|re| re.captures(text))
    }

    pub(crate) fn captures_iter<'s, 't>(&'s self, text: &'t str) -> impl Iterator<Item = Captures<'t>> + use<'s, 't> {
        self.0.iter().flat_map(move |re| re.captures_iter(text))
    }
}

macro_rules! pat {
    ($(#[$doc:meta])* $name:ident, $re:expr) => {
        $(#[$doc])*
        pub(crate) static $name: LazyLock<Pat> = LazyLock::new(|| Pat::new($re));
    };
}

pat!(ORDER_ID, r"\b[Aa]\d{4}\b");
pat!(SKU, r"(?i)\bsku[-_ ]?(\d{1,8})\b");
pat!(CODE_TOKEN, r"\b[A-Za-z]{2,}\d+[A-Za-z0-9]*\b");
pat!(
    CODE_AFTER_WORD,
    r"(?i)(?:coupon|code|voucher|promo|优惠券|优惠码|券码|券)\s*(?:code\s*)?[:：]?\s*[\x22“'「]?([A-Za-z][A-Za-z0-9]{2,19})\b"
);
pat!(
    COUPON_CONTEXT,
    r"(?i)\b(?:coupons?|codes?|vouchers?|promo|discounts?|use|apply|redeem|valid|works?)\b|优惠|券|折扣|用"
);
pat!(CJK, r"\p{Han}");
pat!(
    /// Enumeration markers: "(1)", "（2）", "①", "1." / "2)" / "3、" at a word start, bullets at a line start.
    ENUMERATION,
    r"\(\s*\d{1,2}\s*\)|（\s*\d{1,2}\s*）|[①②③④⑤⑥⑦⑧⑨⑩⑪⑫⑬⑭⑮⑯⑰⑱⑲⑳]|(?:^|\s)\d{1,2}[.)、](?:\s|$)|(?m:^\s*[-*•]\s)"
);
pat!(
    /// Sentence ends and clause connectors ("also", "另外", "还有" — the last one filtered, see [`split_message`]).
    SENTENCE_END,
    r"(?i)[?？。!！；;\n]+|\.(?:\s+|$)|\b(?:and\s+)?also\b[,，]?|另外[,，]?|此外[,，]?|顺便(?:问一?下)?[,，]?|还有(?:就是)?[,，]?"
);
pat!(
    /// Clause separators inside a sentence.
    CLAUSE_SEP,
    r"(?i)[,，、]|\band\b|&|以及|并且|而且"
);

/// What separates a piece from the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// Start of the message or of an enumerated item ("(2)", "3."): never merged.
    Item,
    /// A sentence end or a connector such as "also" / "另外".
    Sentence,
    /// A comma or "and" inside a sentence.
    Clause,
}

/// A piece of the message: a byte range of the original text and its boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub range: Range<usize>,
    pub boundary: Boundary,
}

/// Splits `text` into pieces at enumerations, sentence ends, connectors and commas.
/// Ranges index `text`, are trimmed, and are never empty.
pub(crate) fn split_message(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    for item in split_range(text, 0..text.len(), &ENUMERATION, |_, _| true) {
        let mut boundary = Boundary::Item;
        let sentences = split_range(text, item, &SENTENCE_END, |m, after| {
            // "还有货" / "还有库存" mean "still in stock", not "and also".
            !(m.starts_with("还有")
                && (after.starts_with('货') || after.starts_with("库存") || after.starts_with("现货")))
        });
        for sentence in sentences {
            for clause in split_range(text, sentence, &CLAUSE_SEP, |_, _| true) {
                out.push(Piece { range: clause, boundary });
                boundary = Boundary::Clause;
            }
            boundary = Boundary::Sentence;
        }
    }
    out
}

/// Splits `range` of `text` at the separator matches accepted by `keep(match, text after it)`.
fn split_range(text: &str, range: Range<usize>, sep: &Pat, keep: impl Fn(&str, &str) -> bool) -> Vec<Range<usize>> {
    let slice = &text[range.clone()];
    let mut parts = Vec::new();
    let mut start = 0;
    for m in sep.find_iter(slice) {
        if !keep(m.as_str(), &slice[m.end()..]) {
            continue;
        }
        parts.push(start..m.start());
        start = m.end();
    }
    parts.push(start..slice.len());
    parts.into_iter().filter_map(|r| trim_range(slice, r)).map(|r| r.start + range.start..r.end + range.start).collect()
}

/// Trims whitespace and stray punctuation; `None` when nothing is left.
fn trim_range(text: &str, range: Range<usize>) -> Option<Range<usize>> {
    let slice = &text[range.clone()];
    let junk = |c: char| c.is_whitespace() || ",，、:：;；.。-–—\"'“”".contains(c);
    let trimmed_start = slice.trim_start_matches(junk);
    let start = range.start + (slice.len() - trimmed_start.len());
    let trimmed = trimmed_start.trim_end_matches(junk);
    let end = start + trimmed.len();
    (end > start).then_some(start..end)
}

/// Whether the text contains Chinese characters.
pub(crate) fn has_cjk(text: &str) -> bool {
    CJK.is_match(text)
}

/// A product the customer named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Product {
    /// The name to look up, without article or quantity, e.g. "Green Tea 250g", "羽绒服".
    pub name: String,
    /// How many units, when the customer said ("two bags of" → 2).
    pub quantity: Option<u32>,
}

/// Entities of one piece of text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entities {
    /// Order ids, upper-cased, in order of appearance, without duplicates ("a1029" → "A1029").
    pub order_ids: Vec<String>,
    /// SKUs as `SKU-<digits>` ("sku 1016" → "SKU-1016").
    pub skus: Vec<String>,
    /// Coupon codes, upper-cased.
    pub codes: Vec<String>,
    /// At most one product phrase.
    pub product: Option<Product>,
}

impl Entities {
    pub(crate) fn is_empty(&self) -> bool {
        self.order_ids.is_empty() && self.skus.is_empty() && self.codes.is_empty() && self.product.is_none()
    }
}

fn push_unique(list: &mut Vec<String>, value: String) {
    if !list.contains(&value) {
        list.push(value);
    }
}

/// Order ids (`A` + 4 digits, any case), upper-cased, without duplicates.
pub(crate) fn order_ids(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for m in ORDER_ID.find_iter(text) {
        push_unique(&mut out, m.as_str().to_ascii_uppercase());
    }
    out
}

/// SKUs (`SKU-1016`, `sku1016`, `SKU 1016`), normalised to `SKU-<digits>`.
pub(crate) fn skus(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for c in SKU.captures_iter(text) {
        if let Some(d) = c.get(1) {
            push_unique(&mut out, format!("SKU-{}", d.as_str()));
        }
    }
    out
}

const CODE_STOPWORDS: &[&str] =
    &["CODE", "COUPON", "VOUCHER", "PROMO", "SKU", "ORDER", "THE", "THIS", "THAT", "FOR", "MY"];

/// Coupon codes: letter+digit tokens (SAVE20, tea5) — lower-case ones only near a
/// coupon word — and upper-case words right after a coupon word ("code FREESHIP").
/// Order ids and SKUs are never codes.
pub(crate) fn coupon_codes(text: &str) -> Vec<String> {
    let context = COUPON_CONTEXT.is_match(text);
    let mut found: Vec<(usize, String)> = Vec::new();
    for m in CODE_TOKEN.find_iter(text) {
        let token = m.as_str();
        let upper = token.to_ascii_uppercase();
        let is_caps = token.chars().all(|c| !c.is_ascii_lowercase());
        if upper.starts_with("SKU") || ORDER_ID.is_match(token) || !(is_caps || context) {
            continue;
        }
        found.push((m.start(), upper));
    }
    for c in CODE_AFTER_WORD.captures_iter(text) {
        let Some(m) = c.get(1) else { continue };
        let token = m.as_str();
        let upper = token.to_ascii_uppercase();
        let is_caps = token.chars().all(|ch| !ch.is_ascii_lowercase());
        if is_caps
            && !CODE_STOPWORDS.contains(&upper.as_str())
            && !ORDER_ID.is_match(token)
            && !upper.starts_with("SKU")
        {
            found.push((m.start(), upper));
        }
    }
    found.sort_by_key(|(at, _)| *at);
    let mut out = Vec::new();
    for (_, code) in found {
        push_unique(&mut out, code);
    }
    out
}

// ------------------------------------------------------------------ products

pat!(
    /// "two bags of", "2 x", "3 pcs of": a quantity, then the product.
    QUANTITY_LEAD,
    r"(?i)^(\d{1,3}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a couple of)\s*(?:[x×*]\s*)?(?:(?:bags?|packs?|packets?|boxes?|bottles?|pieces?|pcs|pairs?|units?|cans?|cups?|sets?|tins?|jars?)\s+(?:of\s+)?)?"
);
pat!(
    QUANTITY_ANYWHERE,
    r"(?i)\b(\d{1,3}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s*(?:[x×*]\s*)?(?:bags?|packs?|packets?|boxes?|bottles?|pieces?|pcs|pairs?|units?|cans?|jars?|tins?)\s+of\s+"
);
pat!(QUANTITY_TIMES, r"(\d{1,3})\s*[x×*]\s+");
pat!(
    ZH_QUANTITY_LEAD,
    r"^([0-9]{1,3}|[一二两三四五六七八九十])\s*(?:袋|包|件|个|双|盒|瓶|台|把|条|只|份|罐|杯|套|箱|听)"
);
/// English cues after which a product phrase starts, best first.
static PRODUCT_CUES: LazyLock<Vec<Pat>> = LazyLock::new(|| {
    [
        r"(?i)\bhow much (?:is|are|does|do|for)\b",
        r"(?i)\b(?:price|prices|cost)\s+(?:of|for)\b",
        r"(?i)\b(?:buy|buying|purchase|purchasing)\b",
        r"(?i)\b(?:used|use it|use this|use that|use them|apply it|applied)\s+(?:for|on|to)\b",
        r"(?i)\bfor\b",
        r"(?i)\bwhether\b",
        r"(?i)\b(?:is|are)\s+(?:the|your|this|that|these|those)\b",
        r"(?i)\b(?:do you have|have you got|do you sell|do you stock|got any|stock of|restock of|sell)\b",
        r"(?i)\b(?:is|are)\b",
    ]
    .into_iter()
    .map(Pat::new)
    .collect()
});
pat!(
    /// Where an English product phrase ends.
    PRODUCT_END,
    r"(?i)\s+(?:back\s+in\s+stock|in\s+stock|out\s+of\s+stock|back|available|still|in\s+store|cost|costs|now|today|currently|is|are|was|were|can|could|will|when|and|with|please|for\s+me|if|or|on|to|at|by|again|anymore|right|sold|restocked|in\s+your|any\s+more)\b|[?？,，!！;；:：()（）]|\.(?:\s|$)"
);
pat!(
    PRODUCT_LEADING_FILLER,
    r"(?i)^(?:(?:the|a|an|some|any|my|your|our|this|that|these|those|there|you|still|also|please|coupon\s+for|a\s+new|new)\s+)+"
);
pat!(PRODUCT_TRAILING_FILLER, r"(?i)(?:\s+(?:please|pls|too|also|again|anymore|now|today|item|product))+$");
pat!(
    /// Phrases that are never products.
    NOT_A_PRODUCT,
    r"(?i)^(?:it|its|they|them|this|that|there|here|one|ones|stock|in stock|back|available|order|orders|my order|next order|first order|parcel|package|delivery|coupon|coupons|code|refund|refunds|policy|price|prices|status|anything|something|possible|sale|me|us|you|use|used|delivered|shipped|paid|customer|customers|shop|store|purchase|purchases|a purchase|product|products|item|items|things|thing|few things|valid|invalid|usable|ok|okay|expired|working|applicable|good|late|delayed|lost|broken|wrong|right|true|correct|free|cheap|expensive)$"
);
pat!(
    /// Chinese stock/price words: the product is the text before them.
    ZH_PRODUCT_BEFORE,
    r"还有货|有没有货|有货|没货|缺货|有库存|库存|补货|现货|到货|卖完|多少钱|价格|价钱|怎么卖|几块钱|售价|能用|可以用|可用"
);
pat!(
    /// Chinese purchase or use cue: the product follows ("买两袋绿茶", "能用在机械键盘上吗").
    ZH_PRODUCT_AFTER,
    r"(?:买|购买|下单|订购|用在|用于|用来买)"
);
pat!(ZH_END, r"[，,。？?！!；;：:]|的话|时候|时|能|可以|用|上吗|上呢|上面|吗|呢|还有|有没有|的价格");
pat!(
    ZH_FILLER,
    r"^(?:请问|你好|您好|帮我查一下|帮我查|帮我|请帮我|查询一下|查询|查一下|查下|看看|看一下|那个|这个|这款|那款|你们的|你们|我想买的|我想买|想买|我想|我要|我|的|还|现在|目前|一下|问下|问一下)+|(?:的|还|现在|目前|都|也)+$"
);

fn number_word(word: &str) -> Option<u32> {
    let w = word.to_ascii_lowercase();
    Some(match w.as_str() {
        "one" | "一" => 1,
        "two" | "a couple of" | "二" | "两" => 2,
        "three" | "三" => 3,
        "four" | "四" => 4,
        "five" | "五" => 5,
        "six" | "六" => 6,
        "seven" | "七" => 7,
        "eight" | "八" => 8,
        "nine" | "九" => 9,
        "ten" | "十" => 10,
        "eleven" => 11,
        "twelve" => 12,
        _ => return w.parse().ok(),
    })
}

/// Strips a leading quantity ("two bags of", "2 ×", "两袋") off a phrase.
fn take_quantity(phrase: &str) -> (Option<u32>, &str) {
    for pat in [&*QUANTITY_LEAD, &*ZH_QUANTITY_LEAD] {
        if let Some(c) = pat.captures(phrase)
            && let (Some(all), Some(n)) = (c.get(0), c.get(1))
        {
            let rest = phrase[all.end()..].trim();
            // A bare number, or "3D printer" (nothing between number and word), is not a quantity.
            if !rest.is_empty() && all.end() > n.end() {
                return (number_word(n.as_str()), rest);
            }
        }
    }
    (None, phrase)
}

/// Cleans a raw English tail into a product, or `None` when it is not one.
fn clean_product(tail: &str, forbid_codes: &[String]) -> Option<Product> {
    let cut = PRODUCT_END.find(tail).map_or(tail, |m| &tail[..m.start()]);
    let mut phrase = cut.trim();
    if let Some(m) = PRODUCT_LEADING_FILLER.find(phrase) {
        phrase = &phrase[m.end()..];
    }
    let (quantity, rest) = take_quantity(phrase);
    let mut phrase = rest;
    if let Some(m) = PRODUCT_LEADING_FILLER.find(phrase) {
        phrase = &phrase[m.end()..];
    }
    if let Some(m) = PRODUCT_TRAILING_FILLER.find(phrase) {
        phrase = &phrase[..m.start()];
    }
    let phrase = phrase.trim();
    let words = phrase.split_whitespace().count();
    let upper = phrase.to_ascii_uppercase();
    let valid = !phrase.is_empty()
        && words <= 8
        && phrase.chars().any(char::is_alphabetic)
        && !NOT_A_PRODUCT.is_match(phrase)
        && !ORDER_ID.is_match(phrase)
        && !SKU.is_match(phrase)
        && !forbid_codes.iter().any(|c| upper.split(|ch: char| !ch.is_ascii_alphanumeric()).any(|w| w == c));
    valid.then(|| Product { name: phrase.to_owned(), quantity })
}

/// The product phrase of a piece of text, if any. Coupon codes in `codes`
/// never count as products ("coupon TEA5" is not a product).
pub(crate) fn product(text: &str, codes: &[String]) -> Option<Product> {
    if let Some(c) = QUANTITY_ANYWHERE.captures(text)
        && let (Some(all), Some(n)) = (c.get(0), c.get(1))
        && let Some(mut p) = clean_product(&text[all.end()..], codes)
    {
        p.quantity = number_word(n.as_str());
        return Some(p);
    }
    for cue in PRODUCT_CUES.iter() {
        for m in cue.find_iter(text) {
            let tail = &text[m.end()..];
            let tail = QUANTITY_TIMES.find(tail.trim_start()).map_or(tail, |_| tail.trim_start());
            if let Some(p) = clean_product(tail, codes) {
                return Some(p);
            }
        }
    }
    if has_cjk(text) {
        return zh_product(text, codes);
    }
    None
}

/// Chinese product phrase: before a stock/price word ("羽绒服还有货吗") or after a purchase word ("买两袋绿茶250克").
fn zh_product(text: &str, codes: &[String]) -> Option<Product> {
    let mut candidates: Vec<&str> = Vec::new();
    if let Some(m) = ZH_PRODUCT_AFTER.find(text) {
        let tail = &text[m.end()..];
        candidates.push(ZH_END.find(tail).map_or(tail, |e| &tail[..e.start()]));
    }
    if let Some(m) = ZH_PRODUCT_BEFORE.find(text) {
        let head = &text[..m.start()];
        // The phrase starts after the last separator before the cue: punctuation, or a space
        // before Latin text ("SKU-1016 有货吗") — not a space inside the phrase ("灰色跑鞋 43 码").
        let start = head
            .char_indices()
            .filter(|(i, c)| {
                "，,。？?！!；;：:".contains(*c)
                    || (c.is_whitespace() && !has_cjk(&head[..*i]) && !head[..*i].trim().is_empty())
            })
            .map(|(i, c)| i + c.len_utf8())
            .next_back()
            .unwrap_or(0);
        candidates.push(&head[start..]);
    }
    for raw in candidates {
        let mut phrase = raw.trim();
        for _ in 0..3 {
            if let Some(m) = ZH_FILLER.find(phrase) {
                phrase = if m.start() == 0 { &phrase[m.end()..] } else { &phrase[..m.start()] };
                phrase = phrase.trim();
            }
        }
        let (quantity, rest) = take_quantity(phrase);
        let mut name = rest.trim();
        if let Some(m) = ZH_FILLER.find(name)
            && m.start() > 0
        {
            name = name[..m.start()].trim();
        }
        let upper = name.to_ascii_uppercase();
        let valid = name.chars().count() >= 2
            && has_cjk(name)
            && !ORDER_ID.is_match(name)
            && !upper.contains("SKU")
            && !codes.iter().any(|c| upper.contains(c.as_str()))
            && !["订单", "券", "包裹", "快递", "退款", "这个", "那个", "它", "下一单", "下单", "首单"]
                .iter()
                .any(|w| name.contains(w));
        if valid {
            return Some(Product { name: name.to_owned(), quantity });
        }
    }
    None
}

/// All entities of a piece of text.
pub(crate) fn entities(text: &str) -> Entities {
    let codes = coupon_codes(text);
    Entities { order_ids: order_ids(text), skus: skus(text), product: product(text, &codes), codes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str) -> Vec<(&str, Boundary)> {
        split_message(text).into_iter().map(|p| (&text[p.range], p.boundary)).collect()
    }

    #[test]
    fn every_pattern_compiles() {
        for p in [
            &*ORDER_ID,
            &*SKU,
            &*CODE_TOKEN,
            &*CODE_AFTER_WORD,
            &*COUPON_CONTEXT,
            &*CJK,
            &*ENUMERATION,
            &*SENTENCE_END,
            &*CLAUSE_SEP,
            &*QUANTITY_LEAD,
            &*QUANTITY_ANYWHERE,
            &*QUANTITY_TIMES,
            &*ZH_QUANTITY_LEAD,
            &*PRODUCT_END,
            &*PRODUCT_LEADING_FILLER,
            &*PRODUCT_TRAILING_FILLER,
            &*NOT_A_PRODUCT,
            &*ZH_PRODUCT_BEFORE,
            &*ZH_PRODUCT_AFTER,
            &*ZH_END,
            &*ZH_FILLER,
        ] {
            assert!(p.compiles());
        }
        assert!(PRODUCT_CUES.iter().all(Pat::compiles));
    }

    #[test]
    fn order_ids_are_found_in_any_case_and_next_to_chinese() {
        assert_eq!(order_ids("我的订单A1029现在什么状态，还有a1031"), vec!["A1029", "A1031"]);
        assert_eq!(order_ids("orders A1001, A1013 and A1025"), vec!["A1001", "A1013", "A1025"]);
        assert!(order_ids("A10290 or XA1029").is_empty());
    }

    #[test]
    fn skus_are_normalised_whatever_the_spelling() {
        assert_eq!(skus("sku-1016, SKU 1019 和 Sku1020"), vec!["SKU-1016", "SKU-1019", "SKU-1020"]);
    }

    #[test]
    fn coupon_codes_are_case_insensitive_and_never_order_ids_or_skus() {
        assert_eq!(coupon_codes("can I use save20 on A1029?"), vec!["SAVE20"]);
        assert_eq!(coupon_codes("优惠券SAVE20还能用吗"), vec!["SAVE20"]);
        assert_eq!(coupon_codes("coupon code FREESHIP please"), vec!["FREESHIP"]);
        assert_eq!(coupon_codes("Is there stock for SKU-1013 and SKU1014?"), Vec::<String>::new());
        assert_eq!(coupon_codes("WELCOME50 and TECH100"), vec!["WELCOME50", "TECH100"]);
        // Lower-case letter+digit words without any coupon word are left alone.
        assert!(coupon_codes("is the mp3 player in stock").is_empty());
    }

    #[test]
    fn product_names_come_from_the_noun_phrase_after_a_cue() {
        let p = |t: &str| product(t, &coupon_codes(t)).map(|p| (p.name, p.quantity));
        assert_eq!(p("Also, is the Navy Down Jacket L back in stock?"), Some(("Navy Down Jacket L".into(), None)));
        assert_eq!(p("are the Grey Running Shoes 43 back in stock"), Some(("Grey Running Shoes 43".into(), None)));
        assert_eq!(p("how much is the air purifier?"), Some(("air purifier".into(), None)));
        assert_eq!(p("can I use TECH100 for a mechanical keyboard"), Some(("mechanical keyboard".into(), None)));
        assert_eq!(
            p("Can I use the coupon TEA5 when I buy two bags of Green Tea 250g?"),
            Some(("Green Tea 250g".into(), Some(2)))
        );
        assert_eq!(
            p("Check whether coupon TEA5 can be used for 2 × Green Tea 250g."),
            Some(("Green Tea 250g".into(), Some(2)))
        );
        assert_eq!(p("What is the price of the White Air Purifier?"), Some(("White Air Purifier".into(), None)));
        assert_eq!(p("Where is my parcel for order A1031"), None);
        assert_eq!(p("Is there stock for SKU-1013"), None);
        assert_eq!(p("Can I use WELCOME50 on my next order?"), None);
    }

    #[test]
    fn chinese_product_words_and_quantities_are_extracted() {
        let p = |t: &str| product(t, &coupon_codes(t)).map(|p| (p.name, p.quantity));
        assert_eq!(p("羽绒服还有货吗"), Some(("羽绒服".into(), None)));
        assert_eq!(p("请问空气净化器多少钱？"), Some(("空气净化器".into(), None)));
        assert_eq!(p("我想买两袋绿茶250克，能用TEA5吗"), Some(("绿茶250克".into(), Some(2))));
        assert_eq!(p("优惠券 SAVE20 还能用吗"), None);
        // "My next order" is no product, as in English.
        assert_eq!(p("WELCOME50 能用在我下一单吗？"), None);
        assert_eq!(p("这张券能用在首单上吗"), None);
    }

    #[test]
    fn a_message_splits_at_enumerations_sentences_connectors_and_commas() {
        assert_eq!(
            pieces("我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？"),
            vec![("我的订单 A1029 现在什么状态", Boundary::Item), ("优惠券 SAVE20 还能用吗", Boundary::Sentence)]
        );
        let enumerated = pieces("Hi! A few things: (1) where's A1022, (2) did A1034 get delivered");
        assert_eq!(
            enumerated,
            vec![
                ("Hi", Boundary::Item),
                ("A few things", Boundary::Sentence),
                ("where's A1022", Boundary::Item),
                ("did A1034 get delivered", Boundary::Item),
            ]
        );
        assert_eq!(
            pieces("Check orders A1001, A1013 and A1025 please."),
            vec![
                ("Check orders A1001", Boundary::Item),
                ("A1013", Boundary::Clause),
                ("A1025 please", Boundary::Clause)
            ]
        );
        // "还有货" is "still in stock", not a connector.
        assert_eq!(pieces("羽绒服还有货吗"), vec![("羽绒服还有货吗", Boundary::Item)]);
    }
}
