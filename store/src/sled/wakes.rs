//! Wakes: runs that something outside them moved on, the watchers of
//! runs' ends, and cancel requests. One process opens a sled store, so
//! wakes stay in it.

use keel_core::lifecycle::CancelRequest;
use sled::Transactional;

use super::*;

#[async_trait]
impl CancelStore for SledStore {
    async fn request_cancel(
        &self,
        run_id: &str,
        request: &CancelRequest,
    ) -> Result<Option<CancelRequest>> {
        let i = &self.inner;
        let asked = (&i.runs, &i.cancels, &i.wakeups).transaction(|(runs, cancels, wakeups)| {
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
            wakeups.insert(run_id.as_bytes(), &[])?;
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
        self.inner
            .watchers
            .insert(key_of(run_id, watcher), &[])
            .map_err(backend)?;
        self.sync().await
    }

    async fn is_woken(&self, run_id: &str) -> Result<bool> {
        self.inner
            .wakeups
            .contains_key(run_id.as_bytes())
            .map_err(backend)
    }

    async fn take_wakeup(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .inner
            .wakeups
            .remove(run_id.as_bytes())
            .map_err(backend)?
            .is_some())
    }

    async fn wakeups(&self) -> Result<Vec<RunId>> {
        self.inner
            .wakeups
            .iter()
            .keys()
            .map(|k| {
                Ok(String::from_utf8_lossy(&k.map_err(backend)?)
                    .into_owned()
                    .into())
            })
            .collect()
    }
}
