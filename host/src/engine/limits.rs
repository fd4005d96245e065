//! Flow control as the engine offers it: the operators' concurrency limits
//! (set, reset, listed with what each group holds and queues) and a run's
//! place in its group. The decisions themselves are the store's, made in
//! the transactions that admit and end runs (`keel_core::flow`).

use keel_core::RunId;
use keel_core::flow::{self, LimitRow, RunSlot};
use keel_core::ids::check_name;
use keel_store::Wake;

use super::Keel;
use crate::{Error, Result};

impl Keel {
    /// Every concurrency group (workflow and key) with its limit, the runs
    /// in progress and queued, and every operator's override.
    pub async fn limits(&self) -> Result<Vec<LimitRow>> {
        Ok(self.store().limit_rows().await?)
    }

    /// The workflows that have a concurrency group.
    pub async fn limited_workflows(&self) -> Result<Vec<String>> {
        Ok(self.store().limited_workflows().await?)
    }

    /// Overrides the declared concurrency limit of `workflow`, for every
    /// key or (with `key`) one key value; 0 pauses it (new runs queue, none
    /// starts). A higher limit starts queued runs at once; they are
    /// returned. A lower one cancels nothing: runs in progress finish.
    pub async fn set_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunId>> {
        self.change_limit(workflow, key, Some(limit)).await
    }

    /// Removes an override set by [`Keel::set_limit`]: the workflow's
    /// override (or the declared limit) holds again.
    pub async fn reset_limit(&self, workflow: &str, key: Option<&str>) -> Result<Vec<RunId>> {
        self.change_limit(workflow, key, None).await
    }

    async fn change_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Vec<RunId>> {
        check_name("workflow", workflow)?;
        if let Some(key) = key {
            flow::check_key(key).map_err(|reason| Error::InvalidInput { reason })?;
        }
        if let Some(limit) = limit {
            flow::check_limit(limit).map_err(|reason| Error::InvalidInput { reason })?;
        }
        let promoted = self
            .store()
            .set_limit(workflow, key, limit, self.now_ms())
            .await?;
        tracing::info!(
            workflow,
            key,
            limit,
            started = promoted.len(),
            "concurrency limit changed"
        );
        if !promoted.is_empty() {
            self.store().announce(&Wake::Admitted).await?;
            self.inner.progress.notify_waiters();
            self.due_changed();
        }
        Ok(promoted)
    }

    /// A run's place in its concurrency group (holding a slot, or queued
    /// and where), if its workflow declares a limit.
    pub async fn run_slot(&self, run_id: &str) -> Result<Option<RunSlot>> {
        Ok(self.store().run_slot(run_id).await?)
    }
}
