//! The text of a decision's turn: a fixed template per outcome and language, filled with the checked facts of the journal (order, amount, receipt), never a model's paraphrase of a money outcome.

use crate::action::ProposedAction;
use crate::effects::{Effect, EffectState};
use crate::language::Language;

/// What a person decided on an approval, and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecisionKind {
    /// Approved, and the refund ran: its receipt id and amount as the shop answered them (when
    /// its answer names them).
    RefundRan { receipt: Option<String>, amount: Option<String> },
    /// Approved, run, and refused by the shop: no money moved.
    RefundFailed,
    /// A person rejected it: never run.
    Rejected,
    /// Its approval expired (before a decision, or before it could run): never run.
    Expired,
}

impl DecisionKind {
    /// The kind of a final journal entry that waited for an approval.
    pub fn of(effect: &Effect) -> Self {
        match (effect.state, &effect.outcome) {
            (EffectState::Done, Some(o)) if !o.is_error => {
                let receipt = serde_json::from_str::<serde_json::Value>(&o.text).ok();
                let field = |name: &str| {
                    receipt.as_ref().and_then(|r| r.get(name)).and_then(|v| match v {
                        serde_json::Value::String(s) => Some(s.clone()),
                        serde_json::Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
                };
                let amount = field("amount").map(|a| match field("currency") {
                    Some(c) => format!("{a} {c}"),
                    None => a,
                });
                Self::RefundRan { receipt: field("refund_id"), amount }
            }
            (EffectState::Done, _) => Self::RefundFailed,
            (EffectState::Rejected, _) => Self::Rejected,
            _ => Self::Expired,
        }
    }

    /// The stable code: `refund_ran`, `refund_failed`, `rejected`, `expired`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RefundRan { .. } => "refund_ran",
            Self::RefundFailed => "refund_failed",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
        }
    }
}

/// The customer's text of `kind` on `proposed` (the refund as validated; `None`: an entry
/// written without it), in `language` and its script.
pub fn decision_text(kind: &DecisionKind, proposed: Option<&ProposedAction>, language: Language) -> String {
    let order = proposed.map(|p| p.order_id.as_str()).unwrap_or("-");
    let asked = proposed.map(ProposedAction::amount).unwrap_or_default();
    use Language::*;
    match (kind, language) {
        (DecisionKind::RefundRan { receipt, amount }, _) => {
            let amount = amount.clone().unwrap_or(asked);
            let receipt = receipt.as_deref().unwrap_or("-");
            match language {
                English => format!(
                    "Update on your refund request: a person approved it, and the refund of {amount} for order {order} \
                     has been made (receipt {receipt})."
                ),
                SimplifiedChinese => {
                    format!(
                        "关于您的退款申请：工作人员已批准，订单 {order} 的 {amount} 退款已完成（退款凭证 {receipt}）。"
                    )
                }
                TraditionalChinese => {
                    format!(
                        "關於您的退款申請：工作人員已批准，訂單 {order} 的 {amount} 退款已完成（退款憑證 {receipt}）。"
                    )
                }
            }
        }
        (DecisionKind::RefundFailed, English) => format!(
            "Update on your refund request: a person approved the refund of {asked} for order {order}, but the shop \
             could not make it, so no money was refunded. We will look into it."
        ),
        (DecisionKind::RefundFailed, SimplifiedChinese) => {
            format!(
                "关于您的退款申请：工作人员已批准订单 {order} 的 {asked} 退款，但系统未能完成退款，因此没有退款。我们会跟进处理。"
            )
        }
        (DecisionKind::RefundFailed, TraditionalChinese) => {
            format!(
                "關於您的退款申請：工作人員已批准訂單 {order} 的 {asked} 退款，但系統未能完成退款，因此沒有退款。我們會跟進處理。"
            )
        }
        (DecisionKind::Rejected, English) => format!(
            "Update on your refund request: a person reviewed the refund of {asked} for order {order} and did not \
             approve it, so no money was refunded. Reply here if you would like to ask about it."
        ),
        (DecisionKind::Rejected, SimplifiedChinese) => {
            format!(
                "关于您的退款申请：工作人员审核了订单 {order} 的 {asked} 退款，未予批准，因此没有退款。如有疑问，请在此回复。"
            )
        }
        (DecisionKind::Rejected, TraditionalChinese) => {
            format!(
                "關於您的退款申請：工作人員審核了訂單 {order} 的 {asked} 退款，未予批准，因此沒有退款。如有疑問，請在此回覆。"
            )
        }
        (DecisionKind::Expired, English) => format!(
            "Update on your refund request: the refund of {asked} for order {order} was not reviewed in time and \
             its approval expired, so no money was refunded. Reply here to ask again."
        ),
        (DecisionKind::Expired, SimplifiedChinese) => {
            format!(
                "关于您的退款申请：订单 {order} 的 {asked} 退款未能及时审核，审批已过期，因此没有退款。如需重新申请，请在此回复。"
            )
        }
        (DecisionKind::Expired, TraditionalChinese) => {
            format!(
                "關於您的退款申請：訂單 {order} 的 {asked} 退款未能及時審核，審批已過期，因此沒有退款。如需重新申請，請在此回覆。"
            )
        }
    }
}
