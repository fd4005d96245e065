//! The steps of the `order-hooks` guest.

use keel_sdk::{StepError, step};
use serde_json::{Value, json};

/// Records a note of an order (here: returns it, as a store would).
#[step]
pub async fn record_note(order_id: String, note: String) -> Result<String, StepError> {
    let _ = order_id;
    Ok(note)
}

/// Does an order's work once this run owns its token.
#[step]
pub async fn process_owned_order(order_id: String) -> Result<Value, StepError> {
    Ok(json!({"status": "processed", "order_id": order_id}))
}

/// Delivers a request to the run that owns the token.
#[step]
pub async fn forward_to_owner(token: String, payload: Value) -> Result<String, StepError> {
    let owner = keel_sdk::resume_hook(&token, &payload).await?;
    Ok(owner.run_id)
}
