//! `order`, v2: logs, and sends a receipt behind a patch marker, so journals
//! recorded by v1 still replay.
#![cfg(target_arch = "wasm32")]

#[path = "../../order/src/steps.rs"]
mod steps;

use keel_sdk::{Error, LogLevel, StepError, step, workflow};
use steps::{Order, Receipt, charge_user, reserve_inventory};

/// Sends the receipt to the user.
#[step]
async fn send_receipt(receipt: Receipt) -> Result<(), StepError> {
    println!("receipt for {} sent", receipt.order_id);
    Ok(())
}

#[workflow]
async fn process_order(order: Order) -> Result<Receipt, Error> {
    keel_sdk::log(LogLevel::Info, format!("processing {}", order.order_id));
    let reservation_id = reserve_inventory(order.clone()).await?;
    let charge_id = charge_user(order.clone()).await?;
    let receipt = Receipt {
        order_id: order.order_id,
        reservation_id,
        charge_id,
    };
    if keel_sdk::patched("send-receipt") {
        send_receipt(receipt.clone()).await?;
    }
    Ok(receipt)
}

keel_sdk::component!(
    workflows = [process_order],
    steps = [steps::reserve_inventory, steps::charge_user, send_receipt]
);
