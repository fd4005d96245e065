//! Webhooks and their deliveries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::EventView;

/// `POST /v1/webhooks`: a webhook, where its deliveries go (`hook` or
/// `event`) and how they are signed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// The webhook's ID: deliveries are sent to `POST /v1/webhooks/{id}`.
    #[schemars(regex(pattern = keel_core::ids::NAME_PATTERN))]
    pub id: String,
    /// The hook a delivery resumes; each `{/json/pointer}` is replaced by
    /// the string or number at that place in the body
    /// (`order:{/data/object/metadata/order_id}`).
    #[serde(default)]
    pub hook: Option<String>,
    /// The event key a delivery is pushed as.
    #[serde(default)]
    pub event: Option<String>,
    /// With `hook`: the event key a delivery is pushed as when no run holds
    /// its hook (and it was not delivered before), instead of the answer
    /// 404 `hook_not_found`, which a sender retries.
    #[serde(default)]
    pub unheld_event: Option<String>,
    /// The signature scheme: `stripe`, `github` or `hmac`.
    pub scheme: WebhookScheme,
    /// The header of an `hmac` signature (hex HMAC-SHA256 of the body).
    #[serde(default)]
    pub header: Option<String>,
    /// Stripe's timestamp tolerance in seconds (300 if left out).
    #[serde(default)]
    pub tolerance_s: Option<u64>,
    /// The secret shared with the sender (never shown again).
    pub secret: String,
}

impl WebhookRequest {
    /// Where its deliveries go and how they are signed, or why the request
    /// cannot say.
    pub fn spec(
        &self,
    ) -> Result<(keel_core::webhook::Target, keel_core::webhook::Scheme), keel_host::Error> {
        use keel_core::webhook::{STRIPE_TOLERANCE_S, Scheme, Target};
        let invalid = |reason: &str| keel_host::Error::InvalidInput {
            reason: format!("webhook `{}`: {reason}", self.id),
        };
        let target = match (&self.hook, &self.event, &self.unheld_event) {
            (Some(token), None, None) => Target::Hook {
                token: token.clone(),
            },
            (Some(token), None, Some(key)) => Target::HookOrEvent {
                token: token.clone(),
                unheld_event: key.clone(),
            },
            (None, Some(key), None) => Target::Event { key: key.clone() },
            (None, Some(_), Some(_)) => {
                return Err(invalid(
                    "`unheld_event` goes with `hook`: it is where a delivery for a hook no run holds goes",
                ));
            }
            _ => {
                return Err(invalid(
                    "give `hook` (a hook token, with `{/json/pointer}` parts) or `event` (an event key), one of them",
                ));
            }
        };
        let scheme = match (self.scheme, &self.header, self.tolerance_s) {
            (WebhookScheme::Stripe, None, tolerance) => Scheme::Stripe {
                tolerance_s: tolerance.unwrap_or(STRIPE_TOLERANCE_S),
            },
            (WebhookScheme::Github, None, None) => Scheme::Github,
            (WebhookScheme::Hmac, Some(header), None) => Scheme::Hmac {
                header: header.clone(),
            },
            (WebhookScheme::Hmac, None, _) => {
                return Err(invalid(
                    "an `hmac` webhook names the `header` its signature comes in",
                ));
            }
            _ => {
                return Err(invalid(
                    "`header` is for `hmac` webhooks and `tolerance_s` for `stripe` ones",
                ));
            }
        };
        Ok((target, scheme))
    }
}

/// A webhook's signature scheme.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookScheme {
    /// `Stripe-Signature: t=...,v1=...`.
    #[default]
    Stripe,
    /// `X-Hub-Signature-256: sha256=...`.
    Github,
    /// A hex HMAC-SHA256 of the body in `header`.
    Hmac,
}

/// A webhook as the API shows it (without its secret).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WebhookView {
    pub id: String,
    /// Where deliveries are sent.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Where a delivery for a hook no run holds goes, if not refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unheld_event: Option<String>,
    pub scheme: WebhookScheme,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_s: Option<u64>,
    pub created_at_ms: u64,
}

impl WebhookView {
    /// The view of `record`.
    pub fn of(record: &keel_core::webhook::WebhookRecord) -> Self {
        use keel_core::webhook::{Scheme, Target};
        let (hook, event, unheld_event) = match &record.target {
            Target::Hook { token } => (Some(token.clone()), None, None),
            Target::Event { key } => (None, Some(key.clone()), None),
            Target::HookOrEvent {
                token,
                unheld_event,
            } => (Some(token.clone()), None, Some(unheld_event.clone())),
        };
        let (scheme, header, tolerance_s) = match &record.scheme {
            Scheme::Stripe { tolerance_s } => (WebhookScheme::Stripe, None, Some(*tolerance_s)),
            Scheme::Github => (WebhookScheme::Github, None, None),
            Scheme::Hmac { header } => (WebhookScheme::Hmac, Some(header.clone()), None),
        };
        WebhookView {
            id: record.id.clone(),
            path: format!("/v1/webhooks/{}", record.id),
            hook,
            event,
            unheld_event,
            scheme,
            header,
            tolerance_s,
            created_at_ms: record.created_at_ms,
        }
    }
}

/// The webhooks, by ID.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

/// Where a verified delivery went.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryView {
    /// The hook it resumed, if it went to a hook; with `event` and no
    /// `run_id`, the hook no run held, whose delivery was pushed as the
    /// webhook's `unheld_event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The run that holds the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The delivery was delivered before (by its delivery ID) and not again.
    #[serde(default)]
    pub duplicate: bool,
    /// The event it was pushed as, if it went to an event key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventView>,
}
