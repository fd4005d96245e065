//! Example guest: `process_order` reserves the order's items, then charges
//! the user through a payment API, passing the step ID as the
//! `Idempotency-Key`, so a retried charge is recognised by the API and never
//! taken twice. If the run fails or is cancelled (`keel runs cancel RUN`)
//! after either took effect, a saga undoes them in reverse order: the
//! charge is refunded, then the reservation released, each an ordinary
//! step that runs once.
#![cfg(target_arch = "wasm32")]

mod steps;

use keel_sdk::{Error, Saga, StepError, step, workflow};
use steps::{Order, Receipt, charge_user, reserve_inventory};

/// Reserves the items, charges the user and returns the receipt.
#[workflow]
async fn process_order(order: Order) -> Result<Receipt, Error> {
    let saga = Saga::new();
    saga.run(async {
        let reservation_id = saga
            .step(reserve_inventory(order.clone()), |r| {
                release_inventory(r.clone())
            })
            .await?;
        let charge_id = saga
            .step(charge_user(order.clone()), |c| {
                refund_charge(order.clone(), c.clone())
            })
            .await?;
        Ok(Receipt {
            order_id: order.order_id.clone(),
            reservation_id,
            charge_id,
        })
    })
    .await
}

/// Refunds `charge_id` through the payment API's `/refund`; the step ID
/// is its `Idempotency-Key`, so a retried refund is refunded once.
#[step(max_retries = 5, initial_backoff = "100ms")]
async fn refund_charge(order: Order, charge_id: String) -> Result<(), StepError> {
    let Some((base, _)) = order.payment_url.rsplit_once('/') else {
        return Err(StepError::fatal("the payment URL has no path"));
    };
    let body = serde_json::json!({"charge_id": charge_id, "order_id": order.order_id});
    keel_sdk::http::post(&format!("{base}/refund"))
        .send(&body)
        .await?
        .ok()?;
    Ok(())
}

/// Releases a reservation.
#[step(max_retries = 3, initial_backoff = "100ms")]
async fn release_inventory(reservation_id: String) -> Result<String, StepError> {
    Ok(reservation_id)
}

keel_sdk::component!(
    workflows = [process_order],
    steps = [
        steps::reserve_inventory,
        steps::charge_user,
        refund_charge,
        release_inventory
    ]
);
