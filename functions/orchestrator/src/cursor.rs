//! The API's opaque page cursors: a small JSON object, versioned, as unpadded base64url — clients pass back what a page handed out and never read it, so the index under a list can change without breaking them.

use base64::Engine as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The cursor's format version; a cursor of another version is refused.
const VERSION: u8 = 1;

#[derive(Serialize, serde::Deserialize)]
struct Envelope<T> {
    v: u8,
    #[serde(flatten)]
    at: T,
}

/// `at` as a cursor.
pub fn encode<T: Serialize>(at: &T) -> String {
    let json = serde_json::to_vec(&Envelope { v: VERSION, at }).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// A cursor this API did not hand out; the API answers it 400 `bad_cursor`
/// (`From<BadCursor> for ApiError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cursor is not one this API handed out; start again without it")]
pub struct BadCursor;

/// The error of a cursor this API did not hand out.
pub fn bad_cursor() -> BadCursor {
    BadCursor
}

/// The position a cursor holds.
/// Errors: [`bad_cursor`] for anything this API did not hand out (another shape or version).
pub fn decode<T: DeserializeOwned>(text: &str) -> Result<T, BadCursor> {
    let bad = bad_cursor;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text.trim()).map_err(|_| bad())?;
    let envelope: Envelope<T> = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if envelope.v != VERSION {
        return Err(bad());
    }
    Ok(envelope.at)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct At {
        after: String,
    }

    #[test]
    fn a_cursor_reads_back_and_junk_is_a_bad_cursor() {
        let cursor = encode(&At { after: "c.w01.1".into() });
        assert!(cursor.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{cursor}");
        assert_eq!(decode::<At>(&cursor).unwrap(), At { after: "c.w01.1".into() });
        for junk in
            ["", "junk", "e30", &base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"v":2,"after":"x"}"#)]
        {
            assert_eq!(decode::<At>(junk).unwrap_err(), BadCursor, "{junk}");
        }
    }
}
