//! The catalog beside the runs: workers, events and subscriptions,
//! components by hash, deployments.

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
        for id in self.inner.live.iter().keys() {
            let id = String::from_utf8_lossy(&id.map_err(backend)?).into_owned();
            let lease = self.lease_of(&id)?;
            if !lease.owner.is_empty() && lease.expires_at_ms > now_ms {
                *held.entry(lease.owner).or_default() += 1;
            }
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
    async fn put_component(&self, hash: &str, bytes: &[u8]) -> Result<()> {
        self.room()?;
        let components = &self.inner.components;
        if !components.contains_key(hash).map_err(backend)? {
            components.insert(hash, bytes).map_err(backend)?;
            self.sync().await?;
        }
        Ok(())
    }

    async fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.inner
            .components
            .get(hash)
            .map_err(backend)?
            .map(|b| b.to_vec())
            .ok_or_else(|| StoreError::ComponentNotFound { hash: hash.into() })
    }
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
}
