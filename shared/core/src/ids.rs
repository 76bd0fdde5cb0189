//! Identifiers of the swarm's items: `ConversationId` (a UUIDv7) and `SubtaskId` (short, unique within its conversation).
//!
//! Both serialise as bare strings (`#[serde(transparent)]`), so stored items, queue message bodies
//! and the API's JSON carry the same text as before the types existed.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Conversation id: a UUIDv7 string (time-ordered, so ids sort by creation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConversationId(String);

impl ConversationId {
    /// A fresh UUIDv7.
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// Parses a client-supplied id; only canonical UUIDs are accepted, so an
    /// id can never smuggle key separators (`#`) into a DynamoDB key.
    pub fn parse(s: &str) -> Option<Self> {
        uuid::Uuid::parse_str(s).ok().map(|u| Self(u.hyphenated().to_string()))
    }

    /// Wraps an id read back from our own storage without re-validation.
    pub fn from_trusted(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ConversationId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Subtask id: short and unique within its conversation (`w01`, `w02`, …).
///
/// Not validated here: a plan's ids are checked (and unsafe ones renamed) where the plan is
/// validated ([`crate::plan`]); ids read back from storage or from our own queue messages are trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SubtaskId(String);

impl SubtaskId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// Separator between a turn's prefix and the planned id (`t1~w01`): never in a planned id (those
/// keep to [`crate::untrusted::is_id_char`]), so [`SubtaskId::turn`] reads every id unambiguously.
const TURN_SEPARATOR: char = '~';

impl SubtaskId {
    /// The id a subtask planned as `planned` has in `turn`: `planned` itself in turn 0 (today's
    /// `TASK#w01` keys read as turn 0), `t<turn>~<planned>` after it, so each turn's items, queue
    /// messages and side-effect keys are its own.
    pub fn in_turn(turn: u32, planned: &str) -> Self {
        if turn == 0 { Self(planned.to_owned()) } else { Self(format!("t{turn}{TURN_SEPARATOR}{planned}")) }
    }

    /// The turn this id was planned in ([`SubtaskId::in_turn`]); 0 for an id without a turn prefix.
    pub fn turn(&self) -> u32 {
        self.0
            .split_once(TURN_SEPARATOR)
            .and_then(|(prefix, _)| prefix.strip_prefix('t'))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl fmt::Display for SubtaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl From<String> for SubtaskId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for SubtaskId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

impl From<SubtaskId> for String {
    fn from(id: SubtaskId) -> Self {
        id.0
    }
}

impl From<&SubtaskId> for String {
    fn from(id: &SubtaskId) -> Self {
        id.0.clone()
    }
}

impl AsRef<str> for SubtaskId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// Hash and Eq agree with `str`'s, so maps keyed by `SubtaskId` can be looked up by `&str`.
impl Borrow<str> for SubtaskId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for SubtaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SubtaskId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for SubtaskId {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<SubtaskId> for String {
    fn eq(&self, other: &SubtaskId) -> bool {
        *self == other.0
    }
}

impl PartialEq<SubtaskId> for str {
    fn eq(&self, other: &SubtaskId) -> bool {
        self == other.0
    }
}

impl PartialEq<SubtaskId> for &str {
    fn eq(&self, other: &SubtaskId) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtask_id_serialises_as_its_bare_text() {
        let id = SubtaskId::from("w01");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""w01""#);
        assert_eq!(serde_json::from_str::<SubtaskId>(r#""w02""#).unwrap(), "w02");
        assert_eq!(format!("[{id:>4}]"), "[ w01]", "Display pads like a str");
    }

    #[test]
    fn a_subtask_id_carries_its_turn_and_turn_zero_ids_are_todays() {
        assert_eq!(SubtaskId::in_turn(0, "w01"), "w01");
        assert_eq!(SubtaskId::in_turn(3, "w01"), "t3~w01");
        assert_eq!(SubtaskId::in_turn(3, "w01").turn(), 3);
        assert_eq!(SubtaskId::from("w01").turn(), 0);
        assert_eq!(SubtaskId::from("t2.w01").turn(), 0, "a planned id never reads as another turn's");
        assert_eq!(SubtaskId::from("tx~w01").turn(), 0);
    }
}
