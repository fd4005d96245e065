//! `order`, v2 done wrong: charges before reserving, so journals recorded
//! by v1 diverge at their first command.
#![cfg(target_arch = "wasm32")]

#[path = "../../order/src/steps.rs"]
mod steps;

use keel_sdk::{Error, workflow};
use steps::{Order, Receipt, charge_user, reserve_inventory};

#[workflow]
async fn process_order(order: Order) -> Result<Receipt, Error> {
    let charge_id = charge_user(order.clone()).await?;
    let reservation_id = reserve_inventory(order.clone()).await?;
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
