//! The catalog beside the runs: workers, events and subscriptions,
//! components by hash, deployments.

use super::*;

#[async_trait]
impl WorkerStore for PgStore {
    async fn heartbeat(&self, w: &WorkerRecord) -> Result<()> {
        self.exec(
            "INSERT INTO workers (worker_id, host, pid, started_at_ms, heartbeat_at_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms",
            &[
                &w.worker_id,
                &w.host,
                &i64::from(w.pid),
                &i(w.started_at_ms),
                &i(w.heartbeat_at_ms),
            ],
        )
        .await?;
        Ok(())
    }

    async fn list_workers(&self, now_ms: u64) -> Result<Vec<(WorkerRecord, usize)>> {
        Ok(self
            .select(
                "SELECT w.worker_id, w.host, w.pid, w.started_at_ms, w.heartbeat_at_ms,
                     (SELECT count(*) FROM run_due r WHERE r.lease_owner <> ''
                        AND r.lease_owner = w.worker_id AND r.live
                        AND r.lease_expires_ms > $1)
                 FROM workers w ORDER BY w.worker_id",
                &[&i(now_ms)],
            )
            .await?
            .iter()
            .map(|r| {
                let worker = WorkerRecord {
                    worker_id: r.get(0),
                    host: r.get(1),
                    pid: r.get::<_, i64>(2) as u32,
                    started_at_ms: u(r.get(3)),
                    heartbeat_at_ms: u(r.get(4)),
                };
                (worker, u(r.get(5)) as usize)
            })
            .collect())
    }

    async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        self.exec("DELETE FROM workers WHERE worker_id = $1", &[&worker_id])
            .await?;
        Ok(())
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()> {
        self.exec(
            "INSERT INTO subscriptions (event_key, workflow, hash) VALUES ($1, $2, $3)
                 ON CONFLICT (event_key, workflow) DO UPDATE SET hash = excluded.hash",
            &[&event_key, &workflow, &hash],
        )
        .await?;
        Ok(())
    }

    async fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>> {
        Ok(self
            .select(
                "SELECT workflow, hash FROM subscriptions WHERE event_key = $1 ORDER BY workflow",
                &[&event_key],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    async fn put_event(&self, event: &EventRecord) -> Result<()> {
        self.exec(
            "INSERT INTO events (event_id, record) VALUES ($1, $2)",
            &[&event.event_id, &codec::encode(event)],
        )
        .await?;
        Ok(())
    }

    async fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.records("SELECT record FROM events ORDER BY event_id", &[], "event")
            .await
    }
}

#[async_trait]
impl ComponentStore for PgStore {
    async fn put_component(&self, hash: &str, bytes: &[u8], now_ms: u64) -> Result<()> {
        // A known component is only touched: its bytes are not sent again.
        let touched = self
            .exec(
                "UPDATE components SET stored_at_ms = GREATEST(stored_at_ms, $2) WHERE hash = $1",
                &[&hash, &i(now_ms)],
            )
            .await?;
        if touched == 0 {
            self.exec(
                "INSERT INTO components (hash, bytes, stored_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (hash) DO UPDATE
                 SET stored_at_ms = GREATEST(components.stored_at_ms, EXCLUDED.stored_at_ms)",
                &[&hash, &bytes, &i(now_ms)],
            )
            .await?;
        }
        Ok(())
    }

    async fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.select_one("SELECT bytes FROM components WHERE hash = $1", &[&hash])
            .await?
            .map(|r| r.get(0))
            .ok_or_else(|| StoreError::ComponentNotFound { hash: hash.into() })
    }

    async fn components(&self) -> Result<Vec<crate::StoredComponent>> {
        let rows = self
            .select(
                "SELECT hash, octet_length(bytes), stored_at_ms FROM components ORDER BY hash",
                &[],
            )
            .await?;
        Ok(rows.iter().map(stored_component).collect())
    }

    async fn delete_components(
        &self,
        hashes: &[String],
        stored_before_ms: u64,
    ) -> Result<Vec<crate::StoredComponent>> {
        let rows = self
            .select(
                "DELETE FROM components WHERE hash = ANY($1) AND stored_at_ms <= $2
                 RETURNING hash, octet_length(bytes), stored_at_ms",
                &[&hashes, &i(stored_before_ms)],
            )
            .await?;
        Ok(rows.iter().map(stored_component).collect())
    }
}

/// A row of `hash, octet_length(bytes), stored_at_ms`.
fn stored_component(row: &tokio_postgres::Row) -> crate::StoredComponent {
    crate::StoredComponent {
        hash: row.get(0),
        size_bytes: row.get::<_, i32>(1).max(0) as u64,
        stored_at_ms: row.get::<_, i64>(2).max(0) as u64,
    }
}

#[async_trait]
impl DeploymentStore for PgStore {
    async fn put_deployment(&self, deployment: &Deployment) -> Result<()> {
        let record = codec::encode(deployment);
        let hash = deployment.hash.as_str();
        transact!(self, |tx| {
            tx.run(
                "INSERT INTO deployments (hash, record) VALUES ($1, $2)
                 ON CONFLICT (hash) DO UPDATE SET record = excluded.record",
                &[&hash, &record],
            )
            .await
            .map_err(pg)?;
            self.notify(tx, &Wake::Deployed).await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn deployments(&self) -> Result<Vec<Deployment>> {
        self.records("SELECT record FROM deployments", &[], "deployment")
            .await
    }

    async fn deployment(&self, hash: &str) -> Result<Option<Deployment>> {
        Ok(self
            .records(
                "SELECT record FROM deployments WHERE hash = $1",
                &[&hash],
                "deployment",
            )
            .await?
            .pop())
    }

    async fn delete_deployment(&self, hash: &str, deployed_at_ms: u64) -> Result<bool> {
        let Some(row) = self
            .select_one("SELECT record FROM deployments WHERE hash = $1", &[&hash])
            .await?
        else {
            return Ok(false);
        };
        let bytes: Vec<u8> = row.get(0);
        let read: Deployment = codec::decode(&bytes, "deployment")?;
        if read.deployed_at_ms != deployed_at_ms {
            return Ok(false);
        }
        // Deleted only if unchanged since read: a redeploy rewrites it.
        let deleted = self
            .exec(
                "DELETE FROM deployments WHERE hash = $1 AND record = $2",
                &[&hash, &bytes],
            )
            .await?;
        Ok(deleted == 1)
    }
}
