//! Bounded text: a text cut to a number of characters or of UTF-8 bytes, at a character boundary, the cut marked.

/// Cuts `s` to at most `max` characters (not bytes), marking the cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(14)).collect();
    out.push_str(" …[truncated]");
    out
}

/// The marker a cut text ends with.
pub const TRUNCATION_MARK: &str = " …[truncated]";

/// Cuts `s` to at most `max_bytes` bytes of UTF-8, at a character boundary, marking the cut
/// (the mark counts against `max_bytes`; below its length the text is cut without it).
pub fn truncate_bytes(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_owned();
    }
    let (room, mark) = if max_bytes >= TRUNCATION_MARK.len() {
        (max_bytes - TRUNCATION_MARK.len(), TRUNCATION_MARK)
    } else {
        (max_bytes, "")
    };
    let mut end = room;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + mark.len());
    out.push_str(&s[..end]);
    out.push_str(mark);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_truncation_keeps_whole_characters_and_the_mark_inside_the_bound() {
        let s = "订单".repeat(100);
        for max in [0, 5, 14, 15, 16, 17, 100, 599] {
            let t = truncate_bytes(&s, max);
            assert!(t.len() <= max, "{max}: {} bytes", t.len());
        }
        assert!(truncate_bytes(&s, 100).ends_with(TRUNCATION_MARK));
        assert_eq!(truncate_bytes(&s, 600), s, "a text within the bound is kept whole");
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let s = "订".repeat(50);
        let t = truncate_chars(&s, 20);
        assert!(t.chars().count() <= 20);
        assert!(t.ends_with("[truncated]"));
    }
}
