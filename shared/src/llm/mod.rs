//! Chat-model adapters: the OpenAI-compatible HTTP client and the deterministic offline model.
