//! One scripted customer of a chaos run: posts its message (again, with the same `Idempotency-Key`, after a failure when the chaos draws a re-post, and after a `409 request_in_progress` once the planning lease has passed) to the stack as it is now, then waits for its conversation to end in the audit of the table's stream.

use std::time::Duration;

use crate::chaos::audit::Audit;
use crate::chaos::report::ClientOutcome;
use crate::chaos::restart::Stacks;
use crate::chaos::scenario::Scenario;
use crate::platform::chaos::{Chaos, FaultKind};

/// Re-posts one client makes at most after failed `POST`s.
pub const MAX_REPOSTS: u32 = 3;

/// How long a client waits: for its conversation to end, before posting again, and after a
/// `409 request_in_progress` (the planning lease).
#[derive(Clone, Copy)]
pub struct Patience {
    pub wait: Duration,
    pub backoff: Duration,
    pub lease: Duration,
}

/// One scripted customer: posts (again, with the same key, after a failure when the chaos
/// draws a re-post), then waits for its conversation to end.
pub async fn customer(
    stacks: &Stacks,
    chaos: &Chaos,
    audit: &Audit,
    scenario: &Scenario,
    key: &str,
    patience: Patience,
) -> ClientOutcome {
    let Patience { wait, backoff, lease } = patience;
    let mut out = ClientOutcome::default();
    let message = scenario.message();
    loop {
        out.posts += 1;
        let (message, customer) = (&message, &scenario.customer_id);
        match stacks.call(|s| async move { s.post_conversation(message, customer, Some(key)).await }).await {
            Ok((202, body)) => {
                out.conversation_id = body["conversation_id"].as_str().map(str::to_owned);
                if let Some(id) = &out.conversation_id {
                    stacks.accepted(id);
                }
                break;
            }
            Ok((status, _)) if status >= 500 => {}
            // The key's first request is still being planned, or its planner died inside its lease:
            // come back once the lease has ended (as Retry-After says), then this post plans it.
            Ok((409, body)) if body["error"]["code"] == "request_in_progress" => {
                if out.posts > MAX_REPOSTS {
                    out.gave_up = true;
                    break;
                }
                tokio::time::sleep(lease).await;
                continue;
            }
            Ok((status, body)) => {
                tracing::warn!(status, %body, "the API refused a scripted request");
                out.refused = Some(status);
                break;
            }
            Err(e) => tracing::info!(error = %e, "no answer from the API"),
        }
        if out.posts > MAX_REPOSTS || !chaos.decide(FaultKind::ClientRepost) {
            out.gave_up = true;
            break;
        }
        tokio::time::sleep(backoff).await;
    }
    if let Some(id) = &out.conversation_id {
        audit.wait_terminal(id, wait).await;
    }
    out
}
