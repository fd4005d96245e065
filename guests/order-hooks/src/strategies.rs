//! The seed's strategies for a duplicate run, each a workflow taking
//! `{"order_id", "confirmed"}`. The run that owns the token waits for a
//! `{"confirmed": bool}` request on it, then processes the order (or not).

use keel_sdk::{Error, Hook, HookOptions, create_hook, workflow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{order_token, steps};

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct OrderRequest {
    pub order_id: String,
    #[serde(default)]
    pub confirmed: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Confirmation {
    pub confirmed: bool,
}

/// What the owner does: wait for the request, then process it.
async fn own(order_id: &str, request: &mut Hook<Confirmation>) -> Result<Value, Error> {
    let Confirmation { confirmed } = request.next().await?;
    if !confirmed {
        return Ok(json!({"status": "cancelled"}));
    }
    steps::process_owned_order(order_id.to_string()).await
}

/// Reject the duplicate: return the owner's run ID.
#[workflow]
pub async fn reject_duplicate(order: OrderRequest) -> Result<Value, Error> {
    let mut request = create_hook::<Confirmation>(order_token(&order.order_id))?;
    if let Some(owner) = request.conflict().await {
        return Ok(json!({"status": "duplicate", "run_id": owner.run_id}));
    }
    own(&order.order_id, &mut request).await
}

/// Adopt the owner's result: callers cannot tell which run did the work.
#[workflow]
pub async fn adopt_result(order: OrderRequest) -> Result<Value, Error> {
    let mut request = create_hook::<Confirmation>(order_token(&order.order_id))?;
    if let Some(owner) = request.conflict().await {
        return owner.return_value().await;
    }
    own(&order.order_id, &mut request).await
}

/// Inspect the owner: reuse a completed owner's result, reject the others.
#[workflow]
pub async fn inspect_owner(order: OrderRequest) -> Result<Value, Error> {
    let mut request = create_hook::<Confirmation>(order_token(&order.order_id))?;
    if let Some(owner) = request.conflict().await {
        if owner.status().await == keel_sdk::RunStatus::Completed {
            return owner.return_value().await;
        }
        return Ok(json!({"status": "duplicate", "run_id": owner.run_id}));
    }
    own(&order.order_id, &mut request).await
}

/// Signal the owner: forward this request to a running owner's hook.
#[workflow]
pub async fn signal_owner(order: OrderRequest) -> Result<Value, Error> {
    let token = order_token(&order.order_id);
    let mut request = create_hook::<Confirmation>(token.clone())?;
    if let Some(owner) = request.conflict().await {
        if !owner.status().await.is_final() {
            let payload = json!({"confirmed": order.confirmed});
            steps::forward_to_owner(token, payload).await?;
            return Ok(json!({"status": "forwarded", "run_id": owner.run_id}));
        }
        return Ok(json!({"status": "duplicate", "run_id": owner.run_id}));
    }
    own(&order.order_id, &mut request).await
}

/// Supersede the owner: the newest run takes the token over; a superseded
/// run stops cleanly, naming the run that took over.
#[workflow]
pub async fn supersede(order: OrderRequest) -> Result<Value, Error> {
    let options = HookOptions::new()
        .token(order_token(&order.order_id))
        .force(true);
    let mut request = create_hook::<Confirmation>(options)?;
    match own(&order.order_id, &mut request).await {
        Err(Error::HookForceClaimed {
            claimed_by_run_id, ..
        }) => Ok(json!({"status": "superseded", "run_id": claimed_by_run_id})),
        other => other,
    }
}
