//! What third parties and applications reach keel through besides the
//! server's token: the store's signing secret for scoped tokens, and signed
//! webhooks. A delivery to a webhook is verified, its signature claimed
//! once, and only then delivered to its hook or pushed as its event: a
//! refused delivery leaves nothing in any run's journal.

use keel_core::EventRecord;
use keel_core::ids::check_name;
use keel_core::webhook::{self, Scheme, Target, WebhookRecord};
use keel_store::Resumed;

use super::Keel;
use crate::{Error, Result};

/// Where a verified delivery went.
#[derive(Clone, Debug)]
pub enum Received {
    /// Delivered to the hook holding `token` (or found delivered before,
    /// by its delivery ID).
    Hook { token: String, resumed: Resumed },
    /// Pushed as an event: the webhook's event key, or (with `token`, the
    /// hook no run held) its key for deliveries to unheld hooks.
    Event {
        token: Option<String>,
        event: EventRecord,
    },
}

impl Keel {
    /// The store's signing secret for scoped tokens: the one stored, or a
    /// new random one stored now.
    pub async fn signing_secret(&self) -> Result<Vec<u8>> {
        let candidate: [u8; keel_core::access::SECRET_LEN] = rand::random();
        Ok(self.store().signing_secret(&candidate).await?)
    }

    /// Creates the webhook `id` (a name): deliveries signed by `scheme`
    /// under `secret` go to `target`.
    pub async fn create_webhook(
        &self,
        id: &str,
        target: Target,
        scheme: Scheme,
        secret: &str,
    ) -> Result<WebhookRecord> {
        check_name("webhook ID", id)?;
        let invalid = |reason: String| Error::InvalidInput {
            reason: format!("webhook `{id}`: {reason}"),
        };
        match &target {
            Target::Hook { token } => webhook::check_template(token).map_err(invalid)?,
            Target::Event { key } => check_name("event key", key)?,
            Target::HookOrEvent {
                token,
                unheld_event,
            } => {
                webhook::check_template(token).map_err(invalid)?;
                check_name("event key", unheld_event)?
            }
        }
        if let Scheme::Hmac { header } = &scheme
            && http::HeaderName::from_bytes(header.as_bytes()).is_err()
        {
            return Err(invalid(format!("`{header}` is not a header name")));
        }
        if secret.len() < 8 {
            return Err(invalid(
                "the secret is shorter than 8 bytes; use the secret the sender gives (Stripe's `whsec_...`)".into(),
            ));
        }
        let record = WebhookRecord {
            id: id.into(),
            target,
            scheme,
            secret: secret.into(),
            created_at_ms: self.now_ms(),
        };
        self.store().create_webhook(&record).await?;
        tracing::info!(id, "webhook created");
        Ok(record)
    }

    /// The webhook `id`.
    pub async fn webhook(&self, id: &str) -> Result<WebhookRecord> {
        self.store()
            .webhook(id)
            .await?
            .ok_or_else(|| Error::WebhookNotFound { id: id.into() })
    }

    /// Every webhook, by ID.
    pub async fn webhooks(&self) -> Result<Vec<WebhookRecord>> {
        Ok(self.store().list_webhooks().await?)
    }

    /// Deletes the webhook `id`; the record as it was.
    pub async fn delete_webhook(&self, id: &str) -> Result<WebhookRecord> {
        let record = self.webhook(id).await?;
        if !self.store().delete_webhook(id).await? {
            return Err(Error::WebhookNotFound { id: id.into() });
        }
        tracing::info!(id, "webhook deleted");
        Ok(record)
    }

    /// A delivery of `body` to webhook `id`, with headers `header` (by
    /// lower-case name): verified, its signature claimed once, then
    /// delivered. Refused with [`Error::SignatureRefused`] before anything
    /// is written when the signature is missing, wrong, stale or replayed.
    pub async fn receive_webhook(
        &self,
        id: &str,
        header: impl Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Result<Received> {
        let record = self.webhook(id).await?;
        let now = self.now_ms();
        let refused = |reason: String| Error::SignatureRefused {
            id: id.into(),
            reason,
        };
        let verified =
            webhook::verify(&record, header, body, now).map_err(|e| refused(e.to_string()))?;
        let payload = webhook::payload(body).ok_or_else(|| Error::InvalidInput {
            reason: format!("webhook `{id}`: the delivery's body is neither JSON nor UTF-8 text"),
        })?;
        let hook_token = |template: &str| {
            webhook::hook_token(template, &payload).map_err(|reason| Error::InvalidInput {
                reason: format!("webhook `{id}`: the delivery names no hook: {reason}"),
            })
        };
        let route = match &record.target {
            Target::Hook { token } => Route::Hook {
                token: hook_token(token)?,
                unheld: None,
            },
            Target::HookOrEvent {
                token,
                unheld_event,
            } => Route::Hook {
                token: hook_token(token)?,
                unheld: Some(unheld_event),
            },
            Target::Event { key } => Route::Event(key),
        };
        if let Some((signature, until_ms)) = &verified.once
            && !self
                .store()
                .claim_signature(id, signature, *until_ms, now)
                .await?
        {
            return Err(refused(
                "its signature was presented before (a replayed delivery)".into(),
            ));
        }
        let delivery_id = verified
            .delivery_id
            .filter(|d| super::streams::check_payload_id(d).is_ok());
        let event = |key: &str, token: Option<&str>| {
            let mut metadata = serde_json::json!({"webhook": id, "delivery_id": delivery_id});
            if let Some(token) = token {
                // The hook no run held, for a delivery routed here.
                metadata["token"] = token.into();
            }
            let (key, payload) = (key.to_string(), payload.to_string());
            let token = token.map(str::to_string);
            async move {
                let event = self
                    .push_event(&key, &payload, &metadata.to_string())
                    .await?;
                tracing::info!(id, key, "webhook pushed an event");
                Ok(Received::Event { token, event })
            }
        };
        let (token, unheld) = match route {
            Route::Event(key) => return event(key, None).await,
            Route::Hook { token, unheld } => (token, unheld),
        };
        let delivered = self
            .deliver(&token, &payload.to_string(), delivery_id.as_deref())
            .await;
        match (delivered, unheld) {
            (Ok(resumed), _) => {
                tracing::info!(id, token, run_id = %resumed.run_id, duplicate = resumed.duplicate, "webhook delivered");
                Ok(Received::Hook { token, resumed })
            }
            (Err(Error::HookNotFound { .. }), Some(key)) => {
                tracing::info!(
                    id,
                    token,
                    key,
                    "no run holds the webhook's hook: pushed as an event"
                );
                event(key, Some(&token)).await
            }
            (Err(e), _) => Err(e),
        }
    }
}

/// Where a verified delivery goes.
enum Route<'a> {
    /// Resume the hook `token`; if no run holds it, push an event with
    /// key `unheld` instead, when there is one.
    Hook {
        token: String,
        unheld: Option<&'a str>,
    },
    /// Push an event with this key.
    Event(&'a str),
}
