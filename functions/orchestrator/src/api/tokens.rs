//! Bearer tokens of the local API, each naming its holder: a customer (`swarm-local serve --auth tokens`) or an operator of the approvals API (`--operator-token`, a table of its own: a customer's token is never an operator's). One table type for both; `Debug` shows how many tokens, never one.

use std::collections::HashMap;

use swarm_core::access::canonical_customer_id;

/// Tokens, each naming one holder: a customer id (canonical) or an operator's name (recorded as
/// `decided_by`). `Debug` shows how many, never a token.
#[derive(Clone, Default)]
pub struct TokenTable {
    holders: HashMap<String, String>,
}

impl std::fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenTable({} tokens)", self.holders.len())
    }
}

impl TokenTable {
    /// A customers' table from `(token, customer_id)` pairs; customer ids are kept canonical.
    /// Errors: an empty token or customer, a token with whitespace, a customer id with no
    /// canonical form, or a token listed twice.
    pub fn from_pairs<T: Into<String>, C: Into<String>>(
        pairs: impl IntoIterator<Item = (T, C)>,
    ) -> Result<Self, String> {
        let mut holders = HashMap::new();
        for (n, (token, customer)) in pairs.into_iter().enumerate() {
            let (token, customer): (String, String) = (token.into(), customer.into());
            if token.is_empty() || token.contains(char::is_whitespace) || customer.trim().is_empty() {
                return Err(format!("token entry {} must be <token>=<customer_id> with no blanks", n + 1));
            }
            let customer = canonical_customer_id(&customer).map_err(|e| format!("token entry {}: {e}", n + 1))?;
            if holders.insert(token, customer).is_some() {
                return Err(format!("token entry {} repeats an earlier token", n + 1));
            }
        }
        Ok(Self { holders })
    }

    /// An operators' table from `(token, name)` pairs.
    /// Errors: an empty token or name, blanks in either, a token shorter than 16 characters, or a
    /// token listed twice (the message never shows a token).
    pub fn operators<T: Into<String>, N: Into<String>>(
        pairs: impl IntoIterator<Item = (T, N)>,
    ) -> Result<Self, String> {
        let mut holders = HashMap::new();
        for (n, (token, name)) in pairs.into_iter().enumerate() {
            let (token, name): (String, String) = (token.into(), name.into());
            let name = name.trim().to_owned();
            if token.len() < 16
                || token.contains(char::is_whitespace)
                || name.is_empty()
                || name.contains(char::is_whitespace)
            {
                return Err(format!(
                    "operator token entry {} must be <token>=<name>: a token of at least 16 characters and a name, no blanks",
                    n + 1
                ));
            }
            if holders.insert(token, name).is_some() {
                return Err(format!("operator token entry {} repeats an earlier token", n + 1));
            }
        }
        Ok(Self { holders })
    }

    /// Parses a customers' table: one `<token>=<customer_id>` per line; blank lines and lines
    /// starting with `#` are skipped. Errors name the line, never the token.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            pairs.push(Self::entry(line).map_err(|e| format!("line {}: {e}", n + 1))?);
        }
        Self::from_pairs(pairs)
    }

    /// One `<token>=<holder>` entry as `(token, holder)`; the error never shows the token.
    pub fn entry(text: &str) -> Result<(String, String), String> {
        let (token, holder) = text.split_once('=').ok_or_else(|| "not <token>=<customer_id>".to_owned())?;
        Ok((token.trim().to_owned(), holder.trim().to_owned()))
    }

    /// The holder `token` names: a customer id, or an operator's name.
    pub fn holder(&self, token: &str) -> Option<&str> {
        self.holders.get(token).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.holders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[test]
    fn token_files_parse_with_comments_and_errors_never_show_a_token() {
        let t = TokenTable::parse("# local callers\ntok-c104-0123456789 = C104\n\ntok-c106-0123456789=C106\n").unwrap();
        assert_eq!((t.holder("tok-c104-0123456789"), t.holder("tok-c106-0123456789")), (Some("C104"), Some("C106")));
        assert_eq!(t.holder("nope"), None);
        assert_eq!(format!("{t:?}"), "TokenTable(2 tokens)");
        let e = TokenTable::parse("tok-secret-value C104").unwrap_err();
        assert_eq!(e, "line 1: not <token>=<customer_id>");
        assert!(TokenTable::parse("a=C1\na=C2").unwrap_err().contains("repeats"));
        assert!(TokenTable::parse("=C1").is_err());
        assert_eq!(
            TokenTable::parse("tok-lower-0123456789=c104").unwrap().holder("tok-lower-0123456789"),
            Some("C104")
        );
        assert!(TokenTable::parse("tok-bad-0123456789=C1#META").unwrap_err().contains("customer id"));
    }
}
