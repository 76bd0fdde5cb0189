//! Plan parsing and validation.
