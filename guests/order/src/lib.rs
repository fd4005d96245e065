//! Example guest: `process_order` reserves the order's items, then charges
//! the user through a payment API, passing the step ID as the
//! `Idempotency-Key`, so a retried charge is recognised by the API and never
//! taken twice.
#![cfg(target_arch = "wasm32")]

mod steps;

use keel_sdk::{Error, workflow};
use steps::{Order, Receipt, charge_user, reserve_inventory};

/// Reserves the items, charges the user and returns the receipt.
#[workflow]
async fn process_order(order: Order) -> Result<Receipt, Error> {
    let reservation_id = reserve_inventory(order.clone()).await?;
    let charge_id = charge_user(order.clone()).await?;
    Ok(Receipt {
        order_id: order.order_id,
        reservation_id,
        charge_id,
    })
}

keel_sdk::component!(
    workflows = [process_order],
    steps = [steps::reserve_inventory, steps::charge_user]
);
