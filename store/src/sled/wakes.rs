//! Wakes: runs that something outside them moved on, the watchers of
//! runs' ends, cancel requests and pauses. One process opens a sled
//! store, so wakes stay in it.

use keel_core::lifecycle::{CancelRequest, PauseRequest};
use sled::transaction::TransactionalTree;

use super::due::RunTx;

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
            if !is_live(run_tx, run_id)? {
                return Ok(None);
            }
            first_or_insert(run_tx, cancels, run_id, request, "cancel request")
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
impl PauseStore for SledStore {
    async fn request_pause(
        &self,
        run_id: &str,
        request: &PauseRequest,
    ) -> Result<Option<PauseRequest>> {
        let held = self.with_runs(&[&self.inner.pauses], |run_tx, t| {
            let [pauses] = t else {
                unreachable!("the trees asked for")
            };
            if !is_live(run_tx, run_id)? {
                return Ok(None);
            }
            first_or_insert(run_tx, pauses, run_id, request, "pause")
        })?;
        self.sync().await?;
        Ok(held)
    }

    async fn lift_pause(&self, run_id: &str) -> Result<Option<PauseRequest>> {
        let lifted = self.with_runs(&[&self.inner.pauses], |run_tx, t| {
            let [pauses] = t else {
                unreachable!("the trees asked for")
            };
            is_live(run_tx, run_id)?;
            let Some(held) = pauses.remove(run_id.as_bytes())? else {
                return Ok(None);
            };
            run_tx.wake(run_id)?;
            match codec::decode(&held, "pause") {
                Ok(held) => Ok(Some(held)),
                Err(e) => abort(e.into()),
            }
        })?;
        if lifted.is_some() {
            self.sync().await?;
        }
        Ok(lifted)
    }

    async fn pause_request(&self, run_id: &str) -> Result<Option<PauseRequest>> {
        match self.inner.pauses.get(run_id.as_bytes()).map_err(backend)? {
            Some(bytes) => Ok(Some(codec::decode(&bytes, "pause")?)),
            None => Ok(None),
        }
    }
}

/// Whether `run_id`'s record says it has not ended; aborts with
/// [`StoreError::RunNotFound`] without one.
fn is_live(run_tx: &RunTx<'_>, run_id: &str) -> TxResult<bool> {
    let Some(record) = run_tx.runs.get(run_id.as_bytes())? else {
        return abort(StoreError::RunNotFound {
            run_id: run_id.into(),
        });
    };
    match codec::decode::<RunRecord>(&record, "run record") {
        Ok(run) => Ok(!run.status.is_final()),
        Err(e) => abort(e.into()),
    }
}

/// The request `tree` holds for `run_id`, or `request` stored there (and
/// the run woken) if it holds none.
fn first_or_insert<R>(
    run_tx: &RunTx<'_>,
    tree: &TransactionalTree,
    run_id: &str,
    request: &R,
    what: &'static str,
) -> TxResult<Option<R>>
where
    R: keel_core::codec::Stored + Clone,
{
    if let Some(first) = tree.get(run_id.as_bytes())? {
        return match codec::decode(&first, what) {
            Ok(first) => Ok(Some(first)),
            Err(e) => abort(e.into()),
        };
    }
    tree.insert(run_id.as_bytes(), codec::encode(request))?;
    run_tx.wake(run_id)?;
    Ok(Some(request.clone()))
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
