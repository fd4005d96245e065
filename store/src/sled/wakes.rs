//! Wakes: runs that something outside them moved on, and the watchers of
//! runs' ends. One process opens a sled store, so wakes stay in it.

use super::*;

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
