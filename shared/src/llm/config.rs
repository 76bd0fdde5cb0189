//! LLM settings from the environment (`LLM_BASE_URL`, `LLM_API_KEY`, `LLM_MODEL`, `LLM_SUB_MODEL`…) and the cold-start preflight.
