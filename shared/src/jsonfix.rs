//! Lenient JSON recovery for model output: prose, code fences, trailing commas.
