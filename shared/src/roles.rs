//! Worker roles: decided by code from the tool → role table, never by the model.
