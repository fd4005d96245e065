//! The catalog beside the runs: workers, events and subscriptions,
//! components by hash, deployments.

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use super::*;

#[async_trait]
impl WorkerStore for SledStore {
    async fn heartbeat(&self, worker: &WorkerRecord) -> Result<()> {
        self.inner
            .workers
            .insert(worker.worker_id.as_bytes(), codec::encode(worker))
            .map_err(backend)?;
        Ok(())
    }

    async fn list_workers(&self, now_ms: u64) -> Result<Vec<(WorkerRecord, usize)>> {
        let mut held: std::collections::HashMap<String, usize> = Default::default();
        for lease in crate::LeaseStore::held_leases(self, now_ms).await? {
            *held.entry(lease.owner).or_default() += 1;
        }
        self.inner
            .workers
            .iter()
            .map(|kv| {
                let worker: WorkerRecord = codec::decode(&kv.map_err(backend)?.1, "worker")?;
                let runs = held.get(&worker.worker_id).copied().unwrap_or(0);
                Ok((worker, runs))
            })
            .collect()
    }

    async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        self.inner
            .workers
            .remove(worker_id.as_bytes())
            .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl EventStore for SledStore {
    async fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()> {
        self.room()?;
        self.inner
            .subscriptions
            .insert(key_of(event_key, workflow), hash.as_bytes())
            .map_err(backend)?;
        self.sync().await
    }

    async fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>> {
        let prefix = key_of(event_key, "");
        self.inner
            .subscriptions
            .scan_prefix(&prefix)
            .map(|kv| {
                let (k, v) = kv.map_err(backend)?;
                Ok((
                    String::from_utf8_lossy(&k[prefix.len()..]).into(),
                    String::from_utf8_lossy(&v).into(),
                ))
            })
            .collect()
    }

    async fn put_event(&self, event: &EventRecord) -> Result<()> {
        self.room()?;
        self.inner
            .events
            .insert(event.event_id.as_bytes(), codec::encode(event))
            .map_err(backend)?;
        self.sync().await
    }

    async fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.inner
            .events
            .iter()
            .map(|kv| Ok(codec::decode(&kv.map_err(backend)?.1, "event")?))
            .collect()
    }
}

#[async_trait]
impl ComponentStore for SledStore {
    async fn put_component(&self, hash: &str, bytes: &[u8], now_ms: u64) -> Result<()> {
        self.room()?;
        let (components, times) = (&self.inner.components, &self.inner.component_times);
        (components, times).transaction(|(components, times)| {
            if components.get(hash)?.is_none() {
                components.insert(hash, bytes)?;
            }
            let stored = times.get(hash)?.map_or(0, |t| be_u64(&t));
            times.insert(hash, &stored.max(now_ms).to_be_bytes())?;
            Ok::<_, ConflictableTransactionError<StoreError>>(())
        })?;
        self.sync().await
    }

    async fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.inner
            .components
            .get(hash)
            .map_err(backend)?
            .map(|b| b.to_vec())
            .ok_or_else(|| StoreError::ComponentNotFound { hash: hash.into() })
    }

    async fn components(&self) -> Result<Vec<crate::StoredComponent>> {
        let mut listed = Vec::new();
        for kv in self.inner.components.iter() {
            let (hash, bytes) = kv.map_err(backend)?;
            let stored = self.inner.component_times.get(&hash).map_err(backend)?;
            listed.push(crate::StoredComponent {
                hash: String::from_utf8_lossy(&hash).into_owned(),
                size_bytes: bytes.len() as u64,
                stored_at_ms: stored.map_or(0, |t| be_u64(&t)),
            });
        }
        Ok(listed)
    }

    async fn delete_components(
        &self,
        hashes: &[String],
        stored_before_ms: u64,
    ) -> Result<Vec<crate::StoredComponent>> {
        let (components, times) = (&self.inner.components, &self.inner.component_times);
        let mut deleted = Vec::new();
        for hash in hashes {
            let gone = (components, times).transaction(|(components, times)| {
                let stored = times.get(hash)?.map_or(0, |t| be_u64(&t));
                if stored > stored_before_ms {
                    return Ok::<_, ConflictableTransactionError<StoreError>>(None);
                }
                let Some(bytes) = components.remove(hash.as_bytes())? else {
                    return Ok(None);
                };
                times.remove(hash.as_bytes())?;
                Ok(Some(crate::StoredComponent {
                    hash: hash.clone(),
                    size_bytes: bytes.len() as u64,
                    stored_at_ms: stored,
                }))
            })?;
            deleted.extend(gone);
        }
        self.sync().await?;
        Ok(deleted)
    }
}

/// A big-endian `u64` stored by this module.
fn be_u64(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

#[async_trait]
impl DeploymentStore for SledStore {
    async fn put_deployment(&self, deployment: &Deployment) -> Result<()> {
        self.room()?;
        self.inner
            .deployments
            .insert(deployment.hash.as_bytes(), codec::encode(deployment))
            .map_err(backend)?;
        self.sync().await
    }

    async fn deployments(&self) -> Result<Vec<Deployment>> {
        self.inner
            .deployments
            .iter()
            .map(|kv| Ok(codec::decode(&kv.map_err(backend)?.1, "deployment")?))
            .collect()
    }

    async fn deployment(&self, hash: &str) -> Result<Option<Deployment>> {
        match self.inner.deployments.get(hash).map_err(backend)? {
            Some(bytes) => Ok(Some(codec::decode(&bytes, "deployment")?)),
            None => Ok(None),
        }
    }

    async fn delete_deployment(&self, hash: &str, deployed_at_ms: u64) -> Result<bool> {
        let Some(bytes) = self.inner.deployments.get(hash).map_err(backend)? else {
            return Ok(false);
        };
        let read: Deployment = codec::decode(&bytes, "deployment")?;
        if read.deployed_at_ms != deployed_at_ms {
            return Ok(false);
        }
        // Deleted only if unchanged since read: a redeploy rewrites it.
        let swapped = self
            .inner
            .deployments
            .compare_and_swap(hash, Some(bytes), None::<&[u8]>)
            .map_err(backend)?;
        self.sync().await?;
        Ok(swapped.is_ok())
    }
}
