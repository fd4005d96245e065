//! The `order` guests' types and steps, shared by `order` and its v2 builds.

use keel_sdk::http::{Body, Client, Request};
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

/// Charges the order's amount; the step ID makes the charge idempotent.
#[step(max_retries = 3, initial_backoff = "100ms")]
pub async fn charge_user(order: Order) -> Result<String, StepError> {
    let meta = keel_sdk::step_metadata();
    let body = serde_json::json!({
        "user_id": order.user_id,
        "amount": order.amount,
        "order_id": order.order_id,
    });
    let request = Request::post(&order.payment_url)
        .header("Idempotency-Key", &meta.step_id)
        .header("Keel-Attempt", meta.attempt.to_string())
        .header("Content-Type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(StepError::fatal)?;
    let response = Client::new()
        .send(request)
        .await
        .map_err(StepError::retryable)?;
    let status = response.status();
    let mut body = response.into_body();
    let text = body
        .str_contents()
        .await
        .map_err(StepError::retryable)?
        .to_string();
    if status.is_server_error() {
        return Err(StepError::retryable(format!(
            "payment API answered {status}: {text}"
        )));
    }
    if !status.is_success() {
        return Err(StepError::fatal(format!(
            "payment API refused the charge ({status}): {text}"
        )));
    }
    let charge: serde_json::Value = serde_json::from_str(&text)?;
    charge["charge_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| {
            StepError::fatal(format!("payment API answered without a charge_id: {text}"))
        })
}

/// Reserves the order's items; returns a reservation ID.
#[step(max_retries = 3, initial_backoff = "100ms")]
pub async fn reserve_inventory(order: Order) -> Result<String, StepError> {
    Ok(format!("res-{}", order.order_id))
}
