//! Fuzzy product-name matching: token overlap against English and Chinese names.

/// Words that say nothing about which product is meant ("is the ... back in stock?").
const FILLER: &[&str] = &[
    "a",
    "an",
    "the",
    "of",
    "in",
    "on",
    "for",
    "to",
    "is",
    "are",
    "it",
    "its",
    "my",
    "me",
    "i",
    "you",
    "your",
    "do",
    "does",
    "have",
    "has",
    "any",
    "and",
    "or",
    "with",
    "back",
    "stock",
    "available",
    "availability",
    "still",
    "size",
    "color",
    "colour",
    "price",
    "pair",
    "one",
    "some",
    "please",
    "want",
    "buy",
    "what",
    "how",
    "much",
    "when",
    "will",
    "be",
    "there",
    "this",
    "that",
    "product",
    "item",
    "sku",
];

/// Chinese filler (matched as whole runs or as bigrams): "有货吗", "还有", "的", "码" (size).
const FILLER_ZH: &[&str] = &["有货", "货吗", "还有", "有吗", "的", "吗", "呢", "码", "请问"];

/// Chinese words a customer writes for what the catalogue's Chinese names say otherwise: colours
/// (the names hold them in English, "跑步鞋（grey）") and short forms ("跑鞋" for "跑步鞋").
/// Longest first, so "藏青色" is read before "青色".
const SYNONYMS_ZH: &[(&str, &str)] = &[
    ("海军蓝", " navy "),
    ("藏青色", " navy "),
    ("藏青", " navy "),
    ("深蓝色", " navy "),
    ("灰色", " grey "),
    ("蓝色", " blue "),
    ("黑色", " black "),
    ("白色", " white "),
    ("红色", " red "),
    ("绿色", " green "),
    ("跑鞋", "跑步鞋"),
    ("运动鞋", "跑步鞋"),
    ("杯子", "马克杯"),
];

/// Search terms of a text: lower-case ASCII words (plural `s` dropped, `gray` → `grey`) and
/// Chinese character bigrams (a lone character stays a unigram), Chinese synonyms read first.
fn terms(text: &str) -> Vec<String> {
    let mut lower = text.to_lowercase();
    for (zh, canonical) in SYNONYMS_ZH {
        if lower.contains(zh) {
            lower = lower.replace(zh, canonical);
        }
    }
    let mut out = Vec::new();
    let mut word = String::new();
    let mut run: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            let w = normalize_word(word);
            if !FILLER.contains(&w.as_str()) && !FILLER.contains(&word.as_str()) {
                out.push(w);
            }
            word.clear();
        }
    };
    let flush_run = |run: &mut Vec<char>, out: &mut Vec<String>| {
        let grams: Vec<String> = if run.len() == 1 {
            vec![run.iter().collect()]
        } else {
            run.windows(2).map(|w| w.iter().collect()).collect()
        };
        for gram in grams {
            if !gram.is_empty() && !FILLER_ZH.contains(&gram.as_str()) && !out.contains(&gram) {
                out.push(gram);
            }
        }
        run.clear();
    };
    for c in lower.chars() {
        if c.is_ascii_alphanumeric() {
            flush_run(&mut run, &mut out);
            word.push(c);
        } else if c.is_alphanumeric() {
            flush_word(&mut word, &mut out);
            run.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_run(&mut run, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_run(&mut run, &mut out);
    out.dedup();
    out
}

fn normalize_word(word: &str) -> String {
    let w = match word {
        "gray" => "grey",
        "tshirt" | "tee" => "shirt",
        "headphones" | "earphones" => "earbuds",
        "sneakers" | "trainers" => "shoes",
        "coat" => "jacket",
        other => other,
    };
    // "shoes"/"shoe", "jackets"/"jacket"; short words ("xs", "l") stay as they are.
    match w.strip_suffix('s') {
        Some(stem) if stem.len() >= 3 && !stem.ends_with('s') => stem.to_string(),
        _ => w.to_string(),
    }
}

/// One candidate's score: how many query terms it contains, and how many of its own
/// terms the query did not mention (fewer is a closer match).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Score {
    pub matched: usize,
    pub unmatched_own: usize,
}

/// Scores `names` (the English and Chinese names of one product) against `query`;
/// `None` when no query term matches (or the query holds only filler words).
pub fn score(query: &str, names: &[&str]) -> Option<Score> {
    let query_terms = terms(query);
    if query_terms.is_empty() {
        return None;
    }
    let own: Vec<String> = names.iter().flat_map(|n| terms(n)).collect();
    let matched = query_terms.iter().filter(|t| own.contains(t)).count();
    if matched == 0 {
        return None;
    }
    // Only the English name counts towards "unmatched", so a Chinese query is not
    // penalised for the English words it could not contain, and vice versa.
    let primary: Vec<String> = names.first().map(|n| terms(n)).unwrap_or_default();
    let unmatched_own = primary.iter().filter(|t| !query_terms.contains(t)).count();
    Some(Score { matched, unmatched_own })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_words_and_plurals_are_normalised() {
        assert_eq!(terms("Is the Grey running shoes back in stock?"), vec!["grey", "running", "shoe"]);
        assert_eq!(terms("gray Running Shoe"), vec!["grey", "running", "shoe"]);
    }

    #[test]
    fn chinese_names_become_bigrams() {
        assert_eq!(terms("羽绒服（navy） M码"), vec!["羽绒", "绒服", "navy", "m"]);
        assert_eq!(terms("羽绒服有货吗"), vec!["羽绒", "绒服", "服有"]);
    }

    #[test]
    fn chinese_colours_and_short_forms_read_as_the_catalogue_names_them() {
        assert_eq!(terms("灰色跑鞋 43 码"), vec!["grey", "跑步", "步鞋", "43"]);
        let shoes = |size: &str| [format!("Grey Running Shoes {size}"), format!("跑步鞋（grey） {size}码")];
        let score_of = |query: &str, size: &str| {
            let names = shoes(size);
            score(query, &[names[0].as_str(), names[1].as_str()])
        };
        assert_eq!(score_of("灰色跑鞋 43 码", "43"), Some(Score { matched: 4, unmatched_own: 2 }));
        assert_eq!(score_of("灰色跑鞋 43 码", "42"), Some(Score { matched: 3, unmatched_own: 3 }));
        assert!(score_of("灰色跑鞋", "40").is_some(), "no size: still the shoes");
    }

    #[test]
    fn a_query_of_only_filler_has_no_terms() {
        assert!(terms("is it back in stock?").is_empty());
        assert_eq!(score("the", &["The Thing"]), None);
    }

    #[test]
    fn exact_size_scores_higher_than_a_neighbour() {
        let exact = score("Navy Down Jacket L", &["Navy Down Jacket L", "羽绒服（navy） L码"]);
        let other = score("Navy Down Jacket L", &["Navy Down Jacket M", "羽绒服（navy） M码"]);
        assert_eq!(exact, Some(Score { matched: 4, unmatched_own: 0 }));
        assert_eq!(other, Some(Score { matched: 3, unmatched_own: 1 }));
    }
}
