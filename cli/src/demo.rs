//! `keel demo`: charge an order against a local payment API that loses the
//! first confirmation, and show that the retry reuses the step ID so the
//! API charges once.

use std::path::{Path, PathBuf};

use anyhow::Context;
use keel_host::core::journal::Fact;
use keel_host::{Config, Grants, Keel};
use keel_payment_api::PaymentApi;
use serde_json::json;

/// `order.wasm` as `cargo build --release --target wasm32-wasip2 -p order`
/// leaves it.
pub fn default_component() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    target.join("wasm32-wasip2/release/order.wasm")
}

pub async fn run(db: &Path, component: &Path, json: bool) -> anyhow::Result<()> {
    let api = PaymentApi::start(true)
        .await
        .context("starting the payment API")?;
    let mut config = Config::caching_in(db.join("compiled"));
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    let keel = Keel::open_sled(config, &keel_host::store::sled::SledOptions::new(db))?;
    let loaded = keel.load(component).await.with_context(|| {
        format!(
            "loading {}; build it first with `cargo build --release --target wasm32-wasip2 -p order`",
            component.display()
        )
    })?;
    let input = json!({
        "order_id": "order-42",
        "user_id": "user-7",
        "amount": 1999,
        "payment_url": api.url("/charge"),
    });
    let run = keel
        .run(&loaded, "process_order", &input.to_string())
        .await?;
    let journal = keel.journal(&run.run_id).await?;
    let requests = api.requests();
    let charges = api.charges();
    if json {
        let attempts: Vec<_> = requests
            .iter()
            .map(|r| json!({"idempotency_key": r.idempotency_key, "attempt": r.attempt}))
            .collect();
        println!(
            "{}",
            json!({
                "run_id": run.run_id,
                "status": run.status.as_str(),
                "output": run.output.as_deref().map(|o| serde_json::from_str::<serde_json::Value>(o).unwrap_or_default()),
                "requests": attempts,
                "charges": charges.len(),
            })
        );
        return Ok(());
    }
    println!(
        "payment API on {} (it loses the first confirmation of every charge)",
        api.addr
    );
    println!(
        "run {} of process_order: {}",
        run.run_id,
        run.status.as_str()
    );
    for entry in &journal {
        match &entry.fact {
            Fact::StepScheduled { name, step_id, .. } => {
                println!("  scheduled step {name}, step ID {step_id}")
            }
            Fact::StepAttemptStarted { attempt, .. } => println!("  attempt {attempt} started"),
            Fact::StepAttemptFailed { attempt, error, .. } => {
                println!("  attempt {attempt} failed: {error}")
            }
            Fact::StepCompleted { output, .. } => println!("  step completed: {output}"),
            _ => {}
        }
    }
    for r in &requests {
        println!(
            "  API received attempt {} with Idempotency-Key {}",
            r.attempt.as_deref().unwrap_or("?"),
            r.idempotency_key.as_deref().unwrap_or("-")
        );
    }
    println!("charges taken by the API: {}", charges.len());
    if let Some(output) = &run.output {
        println!("output: {output}");
    }
    if let Some(error) = &run.error {
        println!("error: {}", error.message);
    }
    println!(
        "next: `keel --db {} runs show {}` for its timeline, then `keel new my-flow` for a workflow of your own (docs/guide.md)",
        db.display(),
        run.run_id
    );
    Ok(())
}
