//! Shipments: where the customer's parcel is, by order or tracking number, its status read from the carrier's latest event, and a plain note for the customer.

use super::views::TrackView;
use super::{Shop, shown, stamp};
use crate::data::{Order, OrderStatus, Shipment, ShipmentEvent};
use crate::error::Refusal;

/// A parcel's status, read from its carrier's latest event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ShipmentStatus {
    /// No event yet.
    AwaitingPickup,
    PickedUp,
    InTransit,
    OutForDelivery,
    Delayed,
    HeldAtCustoms,
    Delivered,
}

impl ShipmentStatus {
    /// The status the latest event (free text such as "held at customs") says.
    pub(super) fn of(latest: Option<&ShipmentEvent>) -> Self {
        let Some(event) = latest else { return Self::AwaitingPickup };
        let e = event.event.to_ascii_lowercase();
        if e.starts_with("delivered") {
            Self::Delivered
        } else if e.contains("customs") {
            Self::HeldAtCustoms
        } else if e.starts_with("delayed") {
            Self::Delayed
        } else if e.contains("out for delivery") {
            Self::OutForDelivery
        } else if e.contains("picked up") {
            Self::PickedUp
        } else {
            Self::InTransit
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::AwaitingPickup => "AWAITING_PICKUP",
            Self::PickedUp => "PICKED_UP",
            Self::InTransit => "IN_TRANSIT",
            Self::OutForDelivery => "OUT_FOR_DELIVERY",
            Self::Delayed => "DELAYED",
            Self::HeldAtCustoms => "HELD_AT_CUSTOMS",
            Self::Delivered => "DELIVERED",
        }
    }
}

impl Shop {
    /// The ETA day is over and the parcel is not delivered.
    pub(super) fn eta_passed(&self, order: &Order, shipment: &Shipment) -> bool {
        let delivered = order.status == OrderStatus::Delivered
            || ShipmentStatus::of(shipment.events.last()) == ShipmentStatus::Delivered
            || order.delivered_at.is_some();
        !delivered && shipment.eta.is_some_and(|eta| eta < self.today())
    }

    /// Where the customer's parcel is, by order id or tracking number (one of the two).
    ///
    /// Errors: [`Refusal::NotFound`] for an unknown (or another customer's) order or tracking
    /// number; [`Refusal::NoShipmentYet`] "order A1029 has no shipment yet (status PAID)";
    /// [`Refusal::InvalidArguments`] when neither is given or the two disagree.
    pub async fn track_shipment(
        &self,
        customer_id: &str,
        order_id: Option<&str>,
        tracking_no: Option<&str>,
    ) -> Result<TrackView, Refusal> {
        let customer = self.customer(customer_id)?;
        let order_id = order_id.map(str::trim).filter(|s| !s.is_empty());
        let tracking_no = tracking_no.map(str::trim).filter(|s| !s.is_empty());
        let (order, shipment) = match (order_id, tracking_no) {
            (None, None) => {
                return Err(Refusal::InvalidArguments("give an order_id or a tracking_no".into()));
            }
            (Some(order_id), tracking) => {
                let order = self.order_of(customer, order_id)?;
                (order, self.shipment_of_order(order, tracking).await?)
            }
            (None, Some(tracking)) => {
                let not_found = || Refusal::NotFound(format!("shipment {} not found", shown(tracking)));
                let shipment = self
                    .data
                    .shipments
                    .iter()
                    .find(|s| s.tracking_no.eq_ignore_ascii_case(tracking))
                    .ok_or_else(not_found)?;
                let order = self.order_of(customer, &shipment.order_id).map_err(|_| not_found())?;
                (order, shipment)
            }
        };
        let latest = shipment.events.last();
        let status = ShipmentStatus::of(latest);
        let eta_passed = self.eta_passed(order, shipment);
        Ok(TrackView {
            order_id: order.order_id.clone(),
            tracking_no: shipment.tracking_no.clone(),
            carrier: shipment.carrier.clone(),
            status: status.as_str().to_string(),
            latest_event: latest.cloned(),
            events: shipment.events.clone(),
            eta: shipment.eta,
            eta_passed,
            note: Self::tracking_note(shipment, status, eta_passed),
        })
    }

    /// The order's shipment; with `tracking`, it must be that shipment.
    async fn shipment_of_order(&self, order: &Order, tracking: Option<&str>) -> Result<&Shipment, Refusal> {
        let Some(shipment) = self.shipment_of(order) else {
            let refunded = Self::refunded_cents(&self.ledger_orders(&[order]).await?, order);
            return Err(Refusal::NoShipmentYet {
                order_id: order.order_id.clone(),
                status: Self::effective_status(order, refunded).to_string(),
            });
        };
        if let Some(tracking) = tracking
            && !shipment.tracking_no.eq_ignore_ascii_case(tracking)
        {
            return Err(Refusal::InvalidArguments(format!(
                "tracking number {} does not belong to order {}",
                shown(tracking),
                order.order_id
            )));
        }
        Ok(shipment)
    }

    fn tracking_note(shipment: &Shipment, status: ShipmentStatus, eta_passed: bool) -> String {
        let Some(latest) = shipment.events.last() else {
            return format!("{} has not picked the parcel up yet.", shipment.carrier);
        };
        if status == ShipmentStatus::Delivered {
            return format!("Delivered on {} in {}.", stamp(&latest.at), latest.location);
        }
        let mut note = match status {
            ShipmentStatus::HeldAtCustoms => {
                format!("The parcel is held at customs in {} since {}.", latest.location, stamp(&latest.at))
            }
            ShipmentStatus::Delayed => format!(
                "{} reports a delay ({}) in {} on {}.",
                shipment.carrier,
                latest.event.trim_start_matches("delayed").trim_start_matches(':').trim(),
                latest.location,
                stamp(&latest.at)
            ),
            _ => format!("Latest event: {} in {} on {}.", latest.event, latest.location, stamp(&latest.at)),
        };
        match shipment.eta {
            Some(eta) if eta_passed => note.push_str(&format!(
                " The parcel is late: the estimated delivery date {eta} has passed and the carrier has not given a new date."
            )),
            Some(eta) => note.push_str(&format!(" Estimated delivery: {eta}.")),
            None => note.push_str(" The carrier has not given an estimated delivery date."),
        }
        note
    }
}
