//! Tolerant OpenAI-compatible chat-completions client over reqwest.
