//! Wakes: runs that something outside them moved on, the watchers of
//! runs' ends, and cancel requests. One process opens a sled store, so
//! wakes stay in it.

use keel_core::lifecycle::CancelRequest;

use super::*;

#[async_trait]
impl CancelStore for SledStore {
    async fn request_cancel(
        &self,
        run_id: &str,
        request: &CancelRequest,
    ) -> Result<Option<CancelRequest>> {
        let i = &self.inner;
        let asked = self.with_runs(&[&i.cancels], |run_tx, t| {
            let [cancels] = t else {
                unreachable!("the trees asked for")
            };
            let runs = run_tx.runs;
            let Some(record) = runs.get(run_id.as_bytes())? else {
                return abort(StoreError::RunNotFound {
                    run_id: run_id.into(),
                });
            };
            let run: RunRecord = match codec::decode(&record, "run record") {
                Ok(run) => run,
                Err(e) => return abort(e.into()),
            };
            if run.status.is_final() {
                return Ok(None);
            }
            if let Some(first) = cancels.get(run_id.as_bytes())? {
                return match codec::decode(&first, "cancel request") {
                    Ok(first) => Ok(Some(first)),
                    Err(e) => abort(e.into()),
                };
            }
            cancels.insert(run_id.as_bytes(), codec::encode(request))?;
            run_tx.wake(run_id)?;
            Ok(Some(request.clone()))
        })?;
        self.sync().await?;
        Ok(asked)
    }

    async fn cancel_request(&self, run_id: &str) -> Result<Option<CancelRequest>> {
        match self.inner.cancels.get(run_id.as_bytes()).map_err(backend)? {
            Some(bytes) => Ok(Some(codec::decode(&bytes, "cancel request")?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl WakeStore for SledStore {
    async fn watch(&self, run_id: &str, watcher: &str) -> Result<()> {
        // The other side first: a crash between the two leaves a key that
        // a purge of the watcher removes, never a watch it cannot find.
        self.inner
            .watching
            .insert(key_of(watcher, run_id), &[])
            .map_err(backend)?;
        self.inner
            .watchers
            .insert(key_of(run_id, watcher), &[])
            .map_err(backend)?;
        self.sync().await
    }

    async fn is_woken(&self, run_id: &str) -> Result<bool> {
        Ok(self.driving_of(run_id)?.woken)
    }
}
