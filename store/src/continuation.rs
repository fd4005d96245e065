//! Chains of runs that continue as new: each run that continued
//! (`RunStatus::Continued`) is followed by the run whose ID derives from
//! its own ([`RunId::continued`](keel_core::RunId::continued)).

use keel_core::RunRecord;

use crate::{Result, RunStore, StoreError};

/// The run `run_id` stands for now: itself, or the last of the runs that
/// continue it (each run that continued as new, `RunStatus::Continued`,
/// is followed by the run its ID derives, [`RunId::continued`](keel_core::RunId::continued)). A
/// continuation the store no longer holds ends the chain where it is.
pub async fn latest_run<S: RunStore + ?Sized>(store: &S, run_id: &str) -> Result<RunRecord> {
    let mut run = store.get_run(run_id).await?;
    while run.status == keel_core::RunStatus::Continued {
        match store.get_run(&run.run_id.continued()).await {
            Ok(next) => run = next,
            Err(StoreError::RunNotFound { .. }) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(run)
}
