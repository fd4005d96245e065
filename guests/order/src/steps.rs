//! The `order` guests' types and steps, shared by `order` and its v2 builds.

use keel_sdk::{StepError, step};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Order {
    pub order_id: String,
    pub user_id: String,
    pub amount: u64,
    pub payment_url: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Receipt {
    pub order_id: String,
    pub reservation_id: String,
    pub charge_id: String,
}

/// Charges the order's amount; the step ID, sent as the `Idempotency-Key`,
/// makes the charge idempotent. A 5xx is retried; another refusal fails
/// the step.
#[step(max_retries = 3, initial_backoff = "100ms")]
pub async fn charge_user(order: Order) -> Result<String, StepError> {
    let body = serde_json::json!({
        "user_id": order.user_id,
        "amount": order.amount,
        "order_id": order.order_id,
    });
    let charge: serde_json::Value = keel_sdk::http::post(&order.payment_url)
        .header("Keel-Attempt", keel_sdk::step_metadata().attempt)
        .send(&body)
        .await?
        .ok()?
        .json()?;
    charge["charge_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| {
            StepError::fatal(format!(
                "payment API answered without a charge_id: {charge}"
            ))
        })
}

/// Reserves the order's items; returns a reservation ID.
#[step(max_retries = 3, initial_backoff = "100ms")]
pub async fn reserve_inventory(order: Order) -> Result<String, StepError> {
    Ok(format!("res-{}", order.order_id))
}
