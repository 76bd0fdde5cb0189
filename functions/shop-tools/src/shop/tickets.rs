//! Support tickets: a ticket about one of the customer's orders, opened once per idempotency key — a side effect that moves no money, so it needs no person's approval, and is recorded in the ledger conditional on its key being new.

use serde::Serialize;

use super::{Shop, idempotency_key, shown, unavailable};
use crate::args::OpenTicketArgs;
use crate::error::Refusal;
use crate::ledger::TicketRecord;

/// Longest accepted ticket subject, in characters.
pub const MAX_SUBJECT_CHARS: usize = 300;

/// The answer of `open_ticket`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TicketReceipt {
    /// Always true (a refusal is a [`Refusal`], not a receipt).
    pub opened: bool,
    pub ticket_id: String,
    pub order_id: String,
    pub subject: String,
}

impl TicketRecord {
    fn receipt(&self) -> TicketReceipt {
        TicketReceipt {
            opened: true,
            ticket_id: self.ticket_id.clone(),
            order_id: self.order_id.clone(),
            subject: self.subject.clone(),
        }
    }
}

impl Shop {
    /// Opens a support ticket about one of the customer's orders.
    ///
    /// Idempotent by `(customer_id, idempotency_key)`: a repeated key answers the first ticket
    /// and opens none; the same key for another order is refused. A refusal records nothing.
    ///
    /// Errors: [`Refusal::NotFound`] (customer, order), [`Refusal::InvalidArguments`] (key,
    /// subject), [`Refusal::Refused`] (a key used for another order), [`Refusal::Unavailable`]
    /// when the ledger cannot be reached (nothing recorded).
    pub async fn open_ticket(&self, request: &OpenTicketArgs) -> Result<TicketReceipt, Refusal> {
        let customer = self.customer(&request.customer_id)?;
        let key = idempotency_key(&request.idempotency_key)?;
        let subject = request.subject.trim();
        if subject.is_empty() || subject.chars().count() > MAX_SUBJECT_CHARS {
            return Err(Refusal::InvalidArguments(format!("subject must be 1 to {MAX_SUBJECT_CHARS} characters")));
        }
        let order = self.order_of(customer, &request.order_id)?;
        let ticket = TicketRecord {
            ticket_id: format!("TK-{:032x}", rand::random::<u128>()),
            customer_id: customer.customer_id.clone(),
            order_id: order.order_id.clone(),
            subject: subject.to_owned(),
            idempotency_key: key.to_owned(),
        };
        let stored = self.ledger.open_ticket(&ticket).await.map_err(unavailable)?;
        if stored.order_id != order.order_id {
            return Err(Refusal::Refused(format!(
                "idempotency_key '{}' was already used for a ticket about order {}; use a new key for a new ticket",
                shown(key),
                stored.order_id
            )));
        }
        if stored.ticket_id == ticket.ticket_id {
            tracing::info!(ticket_id = %stored.ticket_id, order_id = %stored.order_id, "ticket opened");
        } else {
            tracing::info!(ticket_id = %stored.ticket_id, "ticket replayed for a repeated idempotency key");
        }
        Ok(stored.receipt())
    }

    /// Every ticket in the ledger (the in-memory ledger: oldest first).
    ///
    /// Errors: the ledger cannot be read.
    pub async fn tickets(&self) -> Result<Vec<TicketRecord>, crate::ledger::LedgerError> {
        self.ledger.tickets().await
    }
}
