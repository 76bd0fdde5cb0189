//! Traditional Chinese read through the offline model's Simplified keyword tables: one character fold, used by the intent reader and the sentence writer alike.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

/// Traditional-only character → the Simplified one it is read as (`data/traditional_to_simplified.txt`).
static TO_SIMPLIFIED: LazyLock<HashMap<char, char>> = LazyLock::new(|| {
    let chars: Vec<char> = include_str!("../data/traditional_to_simplified.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect();
    chars.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect()
});

/// `text` with its Traditional-only characters read as Simplified ones, for the keyword tables
/// (written in Simplified) only: `訂單到哪裡了` → `订单到哪里了`. Every character keeps its UTF-8 length,
/// so a byte range of the folded text is one of `text` too. Never used for what is written back.
pub(crate) fn fold_to_simplified(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| TO_SIMPLIFIED.contains_key(&c)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().map(|c| TO_SIMPLIFIED.get(&c).copied().unwrap_or(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traditional_only_characters_fold_to_simplified_ones_of_the_same_length() {
        assert_eq!(
            fold_to_simplified("我的訂單 A1029 現在什麼狀態？還能用嗎"),
            "我的订单 A1029 现在什么状态？还能用吗"
        );
        assert!(matches!(fold_to_simplified("订单 A1029"), Cow::Borrowed(_)));
        assert_eq!(TO_SIMPLIFIED.len(), 2_906);
        assert!(TO_SIMPLIFIED.iter().all(|(t, s)| swarm_core::language::is_traditional_only(*t) && t != s));
        assert!(TO_SIMPLIFIED.iter().all(|(t, s)| t.len_utf8() == s.len_utf8()), "byte offsets are kept");
    }
}
