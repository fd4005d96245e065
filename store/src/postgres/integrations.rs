//! Integrations: the signing secret (inserted once, the first writer's
//! kept), webhooks by ID, and the signatures each accepted, with when they
//! may be forgotten; a claim is one upsert that succeeds only over nothing
//! or an expired claim.

use keel_core::webhook::WebhookRecord;

use super::*;

#[async_trait]
impl crate::IntegrationStore for PgStore {
    async fn signing_secret(&self, candidate: &[u8]) -> Result<Vec<u8>> {
        self.exec(
            "INSERT INTO secrets (name, value) VALUES ('signing_secret', $1)
             ON CONFLICT (name) DO NOTHING",
            &[&candidate],
        )
        .await?;
        let row = self
            .select_one(
                "SELECT value FROM secrets WHERE name = 'signing_secret'",
                &[],
            )
            .await?
            .ok_or_else(|| StoreError::Backend {
                reason: "the signing secret was written but cannot be read back".into(),
            })?;
        Ok(row.get(0))
    }

    async fn create_webhook(&self, webhook: &WebhookRecord) -> Result<()> {
        let created = self
            .exec(
                "INSERT INTO webhooks (id, record) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                &[&webhook.id, &codec::encode(webhook)],
            )
            .await?;
        if created == 0 {
            return Err(StoreError::WebhookExists {
                id: webhook.id.clone(),
            });
        }
        Ok(())
    }

    async fn webhook(&self, id: &str) -> Result<Option<WebhookRecord>> {
        Ok(self
            .records(
                "SELECT record FROM webhooks WHERE id = $1",
                &[&id],
                "webhook",
            )
            .await?
            .pop())
    }

    async fn list_webhooks(&self) -> Result<Vec<WebhookRecord>> {
        self.records("SELECT record FROM webhooks ORDER BY id", &[], "webhook")
            .await
    }

    async fn delete_webhook(&self, id: &str) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        tx.run(
            "DELETE FROM webhook_signatures WHERE webhook_id = $1",
            &[&id],
        )
        .await
        .map_err(pg)?;
        let removed = tx
            .run("DELETE FROM webhooks WHERE id = $1", &[&id])
            .await
            .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(removed == 1)
    }

    async fn claim_signature(
        &self,
        id: &str,
        signature: &str,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<bool> {
        let claimed = self
            .exec(
                "INSERT INTO webhook_signatures (webhook_id, signature, until_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (webhook_id, signature) DO UPDATE SET until_ms = excluded.until_ms
                 WHERE webhook_signatures.until_ms < $4",
                &[&id, &signature, &i(until_ms), &i(now_ms)],
            )
            .await?;
        Ok(claimed == 1)
    }

    async fn purge_expired_signatures(&self, now_ms: u64) -> Result<u64> {
        self.exec(
            "DELETE FROM webhook_signatures WHERE until_ms < $1",
            &[&i(now_ms)],
        )
        .await
    }
}
