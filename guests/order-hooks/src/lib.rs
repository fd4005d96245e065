//! Example guest for run idempotency: an order that takes follow-up notes
//! through its start hook, and one workflow per strategy for a duplicate
//! run (reject it, adopt the owner's result, inspect the owner, signal the
//! owner, supersede the owner).
#![cfg(target_arch = "wasm32")]

mod steps;
mod strategies;

use std::time::Duration;

use keel_sdk::future::Either;
use keel_sdk::{Error, HookOptions, StartOptions, create_hook, workflow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// An order and its first note.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct OrderNote {
    pub order_id: String,
    pub note: String,
}

/// A follow-up delivered to an order's hook.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
pub struct OrderUpdate {
    pub note: String,
    #[serde(default)]
    pub done: bool,
}

/// The token of an order.
pub fn order_token(order_id: &str) -> String {
    format!("order:{order_id}")
}

/// Records the first note, then every note resumed into the hook
/// `order:{order_id}` (the run's start token, when it was started with one)
/// until one is `done`; returns the notes in order. The hook is kept until
/// the run ends, so a start retention holds the token after it.
#[workflow]
async fn order_updates(order: OrderNote) -> Result<Vec<String>, Error> {
    let mut notes = vec![steps::record_note(order.order_id.clone(), order.note).await?];
    let mut updates = create_hook::<OrderUpdate>(order_token(&order.order_id))?.keep();
    loop {
        let update = updates.next().await?;
        notes.push(steps::record_note(order.order_id.clone(), update.note).await?);
        if update.done {
            return Ok(notes);
        }
    }
}

/// As `order_updates`, but the hook lives in an inner scope: once a `done`
/// note arrives the token is released (retention or not) while the run goes
/// on to wait for the hook `ship:{order_id}` and ship the order.
#[workflow]
async fn order_updates_scoped(order: OrderNote) -> Result<Vec<String>, Error> {
    let mut notes = vec![steps::record_note(order.order_id.clone(), order.note).await?];
    {
        let mut updates = create_hook::<OrderUpdate>(order_token(&order.order_id))?;
        loop {
            let update = updates.next().await?;
            notes.push(steps::record_note(order.order_id.clone(), update.note).await?);
            if update.done {
                break;
            }
        }
    }
    let mut ship = create_hook::<Value>(format!("ship:{}", order.order_id))?;
    ship.next().await?;
    notes.push(steps::record_note(order.order_id, "shipped".into()).await?);
    Ok(notes)
}

/// Waits for one note on the order's hook, or 30 seconds: a short timer
/// keeps the activation in memory, so a payload reaches it live.
#[workflow]
async fn note_or_timeout(order: OrderNote) -> Result<String, Error> {
    let mut hook = create_hook::<OrderUpdate>(order_token(&order.order_id))?;
    let next = std::pin::pin!(hook.next());
    let timeout = std::pin::pin!(keel_sdk::sleep(Duration::from_secs(30)));
    match keel_sdk::future::select(next, timeout).await {
        Either::Left((update, _)) => Ok(update?.note),
        Either::Right(((), _)) => Ok("timeout".into()),
    }
}

/// Starts `order_updates` for the order with its token, as a child run
/// that goes on after this one ends; returns the child's run ID, or the
/// run that holds the token.
#[workflow]
async fn start_order(order: OrderNote) -> Result<Value, Error> {
    let token = order_token(&order.order_id);
    let options = StartOptions::token(token).close(keel_sdk::ClosePolicy::Abandon);
    match keel_sdk::start("order_updates", &order, options).await {
        Ok(child) => Ok(json!({"started": child.run_id})),
        Err(Error::HookConflict {
            conflicting_run_id, ..
        }) => Ok(json!({"owner": conflicting_run_id})),
        Err(e) => Err(e),
    }
}

/// Opens the run's start hook with an option that belongs to `start()`;
/// returns the refusal.
#[workflow]
async fn start_hook_with_options(order: OrderNote) -> Result<Value, Error> {
    let options = HookOptions::new()
        .token(order_token(&order.order_id))
        .metadata(&json!({"from": "the workflow"}));
    match create_hook::<OrderUpdate>(options) {
        Ok(_) => Ok(json!({"refused": null})),
        Err(e) => Ok(json!({"refused": e.to_string()})),
    }
}

/// Opens the order's hook twice; the second registers nothing, since a
/// token is held by one active hook at a time. Returns who holds it.
#[workflow]
async fn open_twice(order: OrderNote) -> Result<Value, Error> {
    let first = create_hook::<OrderUpdate>(order_token(&order.order_id))?;
    let second = create_hook::<OrderUpdate>(order_token(&order.order_id))?;
    let holder = second.conflict().await.map(|run| run.run_id);
    first.dispose();
    Ok(json!({"second_held_by": holder}))
}

/// Disposes of the order's hook, waits for the hook `gate:{order_id}`, then
/// opens the order's hook again: a run that took the token meanwhile holds it.
#[workflow]
async fn reopen_after_dispose(order: OrderNote) -> Result<Value, Error> {
    create_hook::<OrderUpdate>(order_token(&order.order_id))?.dispose();
    create_hook::<Value>(format!("gate:{}", order.order_id))?
        .next()
        .await?;
    let again = create_hook::<OrderUpdate>(order_token(&order.order_id))?;
    let holder = again.conflict().await.map(|run| run.run_id);
    Ok(json!({"reopened_held_by": holder}))
}

/// Where `book_elsewhere` books: a workflow of another deployment.
#[derive(Debug, Deserialize)]
struct Elsewhere {
    deployment: String,
    booking: Value,
}

/// Starts `refundable` of the deployment named in its input and ends at
/// once: the child is live when it ends, so it is asked to cancel.
#[workflow]
async fn book_elsewhere(to: Elsewhere) -> Result<String, Error> {
    let options = StartOptions::default().deployment(to.deployment);
    let child = keel_sdk::start("refundable", &to.booking, options).await?;
    Ok(child.run_id)
}

keel_sdk::component!(
    workflows = [
        book_elsewhere,
        order_updates,
        order_updates_scoped,
        note_or_timeout,
        open_twice,
        reopen_after_dispose,
        start_order,
        start_hook_with_options,
        strategies::reject_duplicate,
        strategies::adopt_result,
        strategies::inspect_owner,
        strategies::signal_owner,
        strategies::supersede,
    ],
    steps = [
        steps::record_note,
        steps::process_owned_order,
        steps::forward_to_owner
    ]
);
