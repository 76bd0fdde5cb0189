//! Transcript care: the tool-call/result pairing check and context compression at turn boundaries.
