//! The language and script a customer is answered in: detected once from the customer's message, stored on the conversation, and read by every writer of the reply.
//!
//! Detection ([`Language::detect`]) counts what the message is written in:
//! - Chinese words: each run of Han characters counts as half its length, at least one (a
//!   Chinese word is one to three characters: `吗` 1, `这张券吗` 2, `黑色羽绒服` 2).
//! - Latin words: runs of Latin letters without a digit, so order ids, SKUs and coupon codes such
//!   as `A1029`, `SKU-1016`, `DOUBLE11` count for nothing; and a name — capitalised words one
//!   after the other, split only by spaces (`Grey Running Shoes`, `JD Logistics`) — counts once,
//!   so the shop's English product names do not outvote the Chinese sentence around them.
//! - Kana and Hangul characters; words of any other alphabet.
//! - Chinese when there is at least one Han character, no kana or Hangul (Japanese and Korean
//!   write Han characters too), and at least as many Chinese words as Latin words and more than
//!   words of other alphabets. `能用 DOUBLE11 这张券吗？` and `Grey Running Shoes 43 有货吗？` are
//!   Chinese; `Is the 黑色羽绒服 in stock?` is English.
//! - The script of Chinese text: the characters written only in Simplified Chinese against those
//!   written only in Traditional Chinese ([`is_simplified_only`], [`is_traditional_only`]: tables
//!   derived from OpenCC's character dictionaries, `data/*.txt`); the larger count wins. Text
//!   that reads the same in both scripts (`你好`, or a tie) takes `previous` when that is Chinese,
//!   else Simplified.
//! - A message with no word at all (`A1029?`) takes `previous`, else English.
//! - Anything else — English and every language the swarm does not write (Japanese, Korean,
//!   French …) — is answered in English, the shop's working language.
//!
//! The conversation item keeps the result ([`Conversation::language`]); an item written before
//! the field existed has none and reads as "detect from the query" ([`Conversation::reply_language`]).

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

/// A language and script the swarm writes replies in. Serialised as its BCP 47 tag
/// (`en`, `zh-Hans`, `zh-Hant`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Language {
    /// English: also the answer to every language the swarm does not write.
    #[default]
    #[serde(rename = "en")]
    English,
    /// Chinese in Simplified characters (the mainland's and Singapore's script).
    #[serde(rename = "zh-Hans")]
    SimplifiedChinese,
    /// Chinese in Traditional characters (Taiwan's, Hong Kong's and Macau's script).
    #[serde(rename = "zh-Hant")]
    TraditionalChinese,
}

impl Language {
    pub const ALL: [Language; 3] = [Self::English, Self::SimplifiedChinese, Self::TraditionalChinese];

    /// The BCP 47 tag: `en`, `zh-Hans`, `zh-Hant`.
    pub fn tag(self) -> &'static str {
        match self {
            Self::English => "en",
            Self::SimplifiedChinese => "zh-Hans",
            Self::TraditionalChinese => "zh-Hant",
        }
    }

    /// A tag back to its language, case-insensitively; regional tags map to their script
    /// (`zh-CN`, `zh-SG`, `zh` → Simplified; `zh-TW`, `zh-HK`, `zh-MO` → Traditional; `en-*` → English).
    /// `None` for any other tag.
    pub fn parse(tag: &str) -> Option<Self> {
        let tag = tag.trim().to_ascii_lowercase().replace('_', "-");
        match tag.as_str() {
            "en" => Some(Self::English),
            t if t.starts_with("en-") => Some(Self::English),
            "zh" | "zh-hans" | "zh-cn" | "zh-sg" | "zh-my" | "zh-hans-cn" | "zh-hans-sg" => {
                Some(Self::SimplifiedChinese)
            }
            "zh-hant" | "zh-tw" | "zh-hk" | "zh-mo" | "zh-hant-tw" | "zh-hant-hk" | "zh-hant-mo" => {
                Some(Self::TraditionalChinese)
            }
            _ => None,
        }
    }

    pub fn is_chinese(self) -> bool {
        matches!(self, Self::SimplifiedChinese | Self::TraditionalChinese)
    }

    /// The name a prompt uses: `English`, `Simplified Chinese (简体中文)`, `Traditional Chinese (繁體中文)`.
    pub fn name(self) -> &'static str {
        match self {
            Self::English => "English",
            Self::SimplifiedChinese => "Simplified Chinese (简体中文)",
            Self::TraditionalChinese => "Traditional Chinese (繁體中文)",
        }
    }

    /// The language of `text` (rules in the module docs); `previous` is what the conversation
    /// was answered in before (the previous turn's language), used when `text` does not tell.
    pub fn detect(text: &str, previous: Option<Language>) -> Language {
        let c = Counts::of(text);
        if c.kana_hangul > 0 {
            return Self::English;
        }
        if c.han > 0 && c.han_words >= c.latin_words && c.han_words > c.other_words {
            return match c.simplified.cmp(&c.traditional) {
                std::cmp::Ordering::Greater => Self::SimplifiedChinese,
                std::cmp::Ordering::Less => Self::TraditionalChinese,
                std::cmp::Ordering::Equal => previous.filter(|p| p.is_chinese()).unwrap_or(Self::SimplifiedChinese),
            };
        }
        if c.han == 0 && c.latin_words == 0 && c.other_words == 0 {
            return previous.unwrap_or(Self::English);
        }
        Self::English
    }

    /// Whether `c` belongs to the other Chinese script than this language's (always false for
    /// English): a Traditional-only character in Simplified text, or the reverse.
    pub fn foreign_character(self, c: char) -> bool {
        match self {
            Self::English => false,
            Self::SimplifiedChinese => is_traditional_only(c),
            Self::TraditionalChinese => is_simplified_only(c),
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.tag())
    }
}

/// What a text is written in, counted.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    /// Han characters.
    han: usize,
    /// Chinese words: each run of Han characters, half its length, at least one.
    han_words: usize,
    simplified: usize,
    traditional: usize,
    kana_hangul: usize,
    /// Latin words, a name (capitalised words split by spaces only) counting once.
    latin_words: usize,
    other_words: usize,
}

/// The word being read.
#[derive(Clone, Copy, Default)]
struct Word {
    latin: bool,
    other: bool,
    digit: bool,
    capitalised: bool,
}

/// The state of [`Counts::of`] between characters.
#[derive(Default)]
struct Reader {
    counts: Counts,
    word: Option<Word>,
    han_run: usize,
    /// The last word was a capitalised Latin word and only spaces came after it.
    in_name: bool,
}

impl Reader {
    fn end_han_run(&mut self) {
        if self.han_run > 0 {
            self.counts.han_words += (self.han_run / 2).max(1);
            self.han_run = 0;
        }
    }

    fn end_word(&mut self) {
        match self.word.take() {
            Some(Word { digit: true, .. }) | None => {}
            Some(Word { latin: true, capitalised, .. }) => {
                if !(capitalised && self.in_name) {
                    self.counts.latin_words += 1;
                }
                self.in_name = capitalised;
            }
            Some(Word { other: true, .. }) => {
                self.counts.other_words += 1;
                self.in_name = false;
            }
            Some(_) => {}
        }
    }

    fn read(&mut self, ch: char) {
        if is_han(ch) {
            self.end_word();
            self.in_name = false;
            self.han_run += 1;
            self.counts.han += 1;
            self.counts.simplified += usize::from(is_simplified_only(ch));
            self.counts.traditional += usize::from(is_traditional_only(ch));
            return;
        }
        self.end_han_run();
        if is_kana_or_hangul(ch) {
            self.end_word();
            self.in_name = false;
            self.counts.kana_hangul += 1;
        } else if ch.is_alphanumeric() || (self.word.is_some() && matches!(ch, '\'' | '’')) {
            let first = self.word.is_none();
            let w = self.word.get_or_insert_with(Word::default);
            if ch.is_numeric() {
                w.digit = true;
            } else if is_latin_letter(ch) {
                w.latin = true;
                w.capitalised |= first && ch.is_uppercase();
            } else if ch.is_alphabetic() {
                w.other = true;
            }
        } else {
            self.end_word();
            if !ch.is_whitespace() {
                self.in_name = false;
            }
        }
    }
}

impl Counts {
    fn of(text: &str) -> Self {
        let mut reader = Reader::default();
        for ch in text.chars() {
            reader.read(ch);
        }
        reader.end_word();
        reader.end_han_run();
        reader.counts
    }
}

/// A Han character (CJK unified ideographs with extensions A to F, compatibility ideographs).
pub fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

fn is_kana_or_hangul(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F | 0x1100..=0x11FF | 0x3130..=0x318F | 0xAC00..=0xD7AF)
}

fn is_latin_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || (c.is_alphabetic() && matches!(c as u32, 0x00C0..=0x024F | 0x1E00..=0x1EFF))
}

/// Characters of a table file: every character of its non-comment lines, sorted.
fn table(text: &str) -> Vec<char> {
    let mut chars: Vec<char> =
        text.lines().filter(|l| !l.starts_with('#')).flat_map(str::chars).filter(|c| !c.is_whitespace()).collect();
    chars.sort_unstable();
    chars.dedup();
    chars
}

static SIMPLIFIED_ONLY: LazyLock<Vec<char>> = LazyLock::new(|| table(include_str!("../data/simplified_only.txt")));
static TRADITIONAL_ONLY: LazyLock<Vec<char>> = LazyLock::new(|| table(include_str!("../data/traditional_only.txt")));

/// Whether `c` is written only in Simplified Chinese (`这`, `么`, `优`); false for characters
/// both scripts write (`你`, `好`, `券`).
pub fn is_simplified_only(c: char) -> bool {
    SIMPLIFIED_ONLY.binary_search(&c).is_ok()
}

/// Whether `c` is written only in Traditional Chinese (`這`, `麼`, `優`).
pub fn is_traditional_only(c: char) -> bool {
    TRADITIONAL_ONLY.binary_search(&c).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Language::{English, SimplifiedChinese as Hans, TraditionalChinese as Hant};

    #[test]
    fn the_tables_are_disjoint_and_hold_the_common_pairs() {
        assert!(SIMPLIFIED_ONLY.len() > 2_000 && TRADITIONAL_ONLY.len() > 2_000);
        assert!(SIMPLIFIED_ONLY.iter().all(|c| !is_traditional_only(*c)), "a character in both tables");
        assert!(SIMPLIFIED_ONLY.iter().chain(TRADITIONAL_ONLY.iter()).all(|c| is_han(*c)));
        for (s, t) in [('这', '這'), ('么', '麼'), ('订', '訂'), ('单', '單'), ('优', '優'), ('惠', '惠'), ('货', '貨')]
        {
            assert_eq!(is_simplified_only(s), s != t, "{s}");
            assert_eq!(is_traditional_only(t), s != t, "{t}");
            assert!(!is_traditional_only(s) && !is_simplified_only(t), "{s}/{t}");
        }
        // Written alike in both scripts, or used in both for some word.
        for c in ['你', '好', '券', '台', '干', '后', '里', '发'] {
            assert!(!is_traditional_only(c), "{c}");
        }
        for c in ['你', '好', '券', '台', '干', '后'] {
            assert!(!is_simplified_only(c), "{c}");
        }
    }

    #[test]
    fn chinese_messages_are_told_apart_by_their_script() {
        assert_eq!(Language::detect("能用 DOUBLE11 这张券吗？", None), Hans);
        assert_eq!(Language::detect("能用 DOUBLE11 這張券嗎？", None), Hant);
        assert_eq!(Language::detect("我的订单 A1029 现在什么状态？另外优惠券 SAVE20 还能用吗？", None), Hans);
        assert_eq!(Language::detect("我的訂單 A1029 現在什麼狀態？另外優惠券 SAVE20 還能用嗎？", None), Hant);
        assert_eq!(Language::detect("訂單 A1016 的耳機有雜音，我想退款。", Some(Hans)), Hant, "the message wins");
    }

    #[test]
    fn text_that_reads_the_same_in_both_scripts_takes_the_previous_script_else_simplified() {
        assert_eq!(Language::detect("你好", None), Hans);
        assert_eq!(Language::detect("你好", Some(Hant)), Hant);
        assert_eq!(Language::detect("你好", Some(Hans)), Hans);
        assert_eq!(Language::detect("你好", Some(English)), Hans, "an English turn before says nothing of the script");
        // One character of each script: a tie.
        assert_eq!(Language::detect("这 這", Some(Hant)), Hant);
    }

    #[test]
    fn codes_are_no_words_and_english_or_other_languages_get_english() {
        assert_eq!(Language::detect("Where is my parcel for order A1031?", Some(Hans)), English);
        assert_eq!(Language::detect("Is the 蓝色 jacket back in stock?", None), English);
        assert_eq!(Language::detect("A1029?", Some(Hant)), Hant, "no word at all: the conversation's language");
        assert_eq!(Language::detect("SKU-1016, DOUBLE11", None), English);
        assert_eq!(Language::detect("", None), English);
        assert_eq!(Language::detect("注文 A1029 はどこですか", None), English, "Japanese: kana");
        assert_eq!(Language::detect("주문은 어디에 있나요", None), English, "Korean");
        assert_eq!(Language::detect("Où est ma commande A1029 ?", None), English);
        assert_eq!(Language::detect("Где мой заказ 订单", None), English, "more Cyrillic words than Han characters");
        assert_eq!(Language::detect("A1029 到哪了", None), Hans);
    }

    #[test]
    fn a_product_name_in_the_other_language_does_not_decide() {
        // English with a Chinese product name, short or long.
        assert_eq!(Language::detect("Is the 黑色羽绒服 in stock?", None), English);
        assert_eq!(Language::detect("Can I use SAVE20 on the 黑色羽绒服 and the 蓝色亚麻衬衫?", Some(Hans)), English);
        // Chinese with the shop's English product name.
        assert_eq!(Language::detect("Grey Running Shoes 43 有货吗？", None), Hans);
        assert_eq!(Language::detect("Navy Down Jacket L 還有貨嗎？", None), Hant);
        assert_eq!(Language::detect("能用 TEA5 吗？买两袋 Green Tea 250g", None), Hans);
    }

    #[test]
    fn mixed_text_goes_to_the_language_with_more_words() {
        assert_eq!(Language::detect("Hi, 我的订单 A1029 到哪了？", None), Hans);
        assert_eq!(Language::detect("你好, where is my order A1029 and when will it arrive?", None), English);
        assert_eq!(Language::detect("你好 hello", Some(Hant)), Hant, "a tie: Chinese, of the previous script");
    }

    #[test]
    fn tags_round_trip_and_regional_tags_map_to_their_script() {
        for l in Language::ALL {
            assert_eq!(Language::parse(l.tag()), Some(l));
            assert_eq!(serde_json::to_string(&l).unwrap(), format!("\"{}\"", l.tag()));
            assert_eq!(serde_json::from_str::<Language>(&format!("\"{l}\"")).unwrap(), l);
        }
        assert_eq!(Language::parse("zh-TW"), Some(Hant));
        assert_eq!(Language::parse("zh_HK"), Some(Hant));
        assert_eq!(Language::parse("zh-CN"), Some(Hans));
        assert_eq!(Language::parse("en-GB"), Some(English));
        assert_eq!(Language::parse("fr"), None);
    }
}
