//! Integrations: the signing secret in the `secrets` tree (written once, by
//! compare-and-swap), webhooks by ID in `webhooks`, and the signatures a
//! webhook accepted in `signatures` until they can no longer be replayed.

use keel_core::webhook::WebhookRecord;

use super::*;

const SIGNING_SECRET: &str = "signing_secret";

fn signature_key(id: &str, signature: &str) -> Vec<u8> {
    [id.as_bytes(), b"\0", signature.as_bytes()].concat()
}

fn decode(bytes: &[u8]) -> Result<WebhookRecord> {
    Ok(codec::decode(bytes, "webhook")?)
}

fn until_of(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

#[async_trait]
impl crate::IntegrationStore for SledStore {
    async fn signing_secret(&self, candidate: &[u8]) -> Result<Vec<u8>> {
        let stored = self
            .inner
            .secrets
            .compare_and_swap(SIGNING_SECRET, None::<&[u8]>, Some(candidate))
            .map_err(backend)?;
        match stored {
            Ok(()) => {
                self.sync().await?;
                Ok(candidate.to_vec())
            }
            Err(current) => Ok(current.current.map(|v| v.to_vec()).unwrap_or_default()),
        }
    }

    async fn create_webhook(&self, webhook: &WebhookRecord) -> Result<()> {
        self.room()?;
        let created = self
            .inner
            .webhooks
            .compare_and_swap(
                webhook.id.as_bytes(),
                None::<&[u8]>,
                Some(codec::encode(webhook)),
            )
            .map_err(backend)?;
        if created.is_err() {
            return Err(StoreError::WebhookExists {
                id: webhook.id.clone(),
            });
        }
        self.sync().await
    }

    async fn webhook(&self, id: &str) -> Result<Option<WebhookRecord>> {
        match self.inner.webhooks.get(id).map_err(backend)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn list_webhooks(&self) -> Result<Vec<WebhookRecord>> {
        self.inner
            .webhooks
            .iter()
            .map(|kv| decode(&kv.map_err(backend)?.1))
            .collect()
    }

    async fn delete_webhook(&self, id: &str) -> Result<bool> {
        let removed = self.inner.webhooks.remove(id).map_err(backend)?;
        let prefix = [id.as_bytes(), b"\0"].concat();
        for key in self.inner.signatures.scan_prefix(prefix).keys() {
            self.inner
                .signatures
                .remove(key.map_err(backend)?)
                .map_err(backend)?;
        }
        self.sync().await?;
        Ok(removed.is_some())
    }

    async fn claim_signature(
        &self,
        id: &str,
        signature: &str,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<bool> {
        self.room()?;
        let key = signature_key(id, signature);
        let tree = &self.inner.signatures;
        let mut current = tree.get(&key).map_err(backend)?;
        loop {
            if current.as_deref().is_some_and(|v| until_of(v) >= now_ms) {
                return Ok(false);
            }
            match tree
                .compare_and_swap(&key, current, Some(&until_ms.to_be_bytes()[..]))
                .map_err(backend)?
            {
                Ok(()) => break,
                Err(e) => current = e.current,
            }
        }
        self.sync().await?;
        Ok(true)
    }

    async fn purge_expired_signatures(&self, now_ms: u64) -> Result<u64> {
        // Removed only if unchanged: a claim made meanwhile stays.
        let purged = self.purge(&self.inner.signatures, |_, v| Ok(until_of(v) < now_ms))? as u64;
        if purged > 0 {
            self.sync().await?;
        }
        Ok(purged)
    }
}
