//! Model output as untrusted input: text cleaned for storage and display, identifiers checked before they become keys or headers, fields made safe for logs.
//!
//! Whatever the model writes and the system puts somewhere else — a DynamoDB
//! key, an HTTP header, a log line, a terminal, the customer's reply — goes
//! through one of these first, chosen for that place.

use crate::text::{truncate_bytes, truncate_chars};

/// Characters that may stand in an identifier the model wrote (a subtask id, a tool name kept in a
/// record): letters, digits, `_`, `-`, `.`, `:` — safe in a DynamoDB sort key, an HTTP header
/// value and a log field.
pub fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

/// Longest identifier taken from model output.
pub const MAX_ID_CHARS: usize = 64;

/// `true` when `s` is 1..=[`MAX_ID_CHARS`] characters, each [`is_id_char`].
pub fn is_safe_id(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= MAX_ID_CHARS && s.chars().all(is_id_char)
}

/// An identifier made safe: every other character replaced by `_`, cut to [`MAX_ID_CHARS`];
/// `"?"` when nothing is left. For records and logs of names that were refused, never for
/// lookups (a lookup uses the name as given and fails).
pub fn safe_id(s: &str) -> String {
    let out: String = s.chars().take(MAX_ID_CHARS).map(|c| if is_id_char(c) { c } else { '_' }).collect();
    if out.is_empty() { "?".to_owned() } else { out }
}

/// Characters that change how text is shown rather than what it says: C0/C1 controls (ANSI
/// escape sequences start with one) except line feed and tab, and the bidirectional overrides
/// and isolates that reorder what a reader sees (U+202A–U+202E, U+2066–U+2069).
fn is_display_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Text for storage and display (a subtask answer, the customer's reply, an instruction): display
/// controls removed, `\r\n` kept as `\n`, cut to `max_chars` characters (with the cut marked).
pub fn clean_text(s: &str, max_chars: usize) -> String {
    let cleaned: String = s.chars().filter(|c| !is_display_control(*c)).collect();
    truncate_chars(&cleaned, max_chars)
}

/// As [`clean_text`], cut to `max_bytes` bytes of UTF-8 instead (a reply bound for a DynamoDB item).
pub fn clean_text_bytes(s: &str, max_bytes: usize) -> String {
    let cleaned: String = s.chars().filter(|c| !is_display_control(*c)).collect();
    truncate_bytes(&cleaned, max_bytes)
}

/// Longest log field taken from model output, characters.
pub const MAX_LOG_CHARS: usize = 200;

/// A log field from model output: control characters escaped (a newline cannot start a forged
/// log line in plain-text logs), cut to [`MAX_LOG_CHARS`].
pub fn log_field(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_LOG_CHARS + 8));
    for (n, c) in s.chars().enumerate() {
        if n >= MAX_LOG_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || is_display_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_with_separators_or_controls_are_not_safe_and_are_made_safe() {
        assert!(is_safe_id("w01"));
        assert!(is_safe_id("functions.get_order:0"));
        assert!(!is_safe_id("w01\r\nx-evil: 1"));
        assert!(!is_safe_id(""));
        assert!(!is_safe_id(&"a".repeat(65)));
        assert_eq!(safe_id("get order\n"), "get_order_");
        assert_eq!(safe_id(""), "?");
        assert_eq!(safe_id(&"b".repeat(100)).len(), MAX_ID_CHARS);
    }

    #[test]
    fn clean_text_drops_escapes_and_bidi_overrides_but_keeps_lines_and_cjk() {
        let dirty = "订单 A1029\u{1b}[2J已付款\r\n\u{202E}txt.exe\tok";
        assert_eq!(clean_text(dirty, 100), "订单 A1029[2J已付款\ntxt.exe\tok");
        assert!(clean_text(&"x".repeat(50), 20).ends_with("[truncated]"));
    }

    #[test]
    fn log_fields_escape_newlines_and_are_bounded() {
        assert_eq!(log_field("a\nINFO forged"), "a\\nINFO forged");
        assert_eq!(log_field(&"z".repeat(300)).chars().count(), MAX_LOG_CHARS + 1);
    }
}
