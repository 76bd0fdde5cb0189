//! Retries without storms: exponential backoff with full jitter, `Retry-After`, bounded by a deadline.
