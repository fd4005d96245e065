//! Events: a push and what it did.

use keel_core::{EventOutcome, EventRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

/// An ingested event and what it did for each subscribed workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventView {
    pub event_id: String,
    pub key: String,
    pub payload: Value,
    pub metadata: Value,
    pub at_ms: u64,
    pub outcomes: Vec<EventOutcome>,
}

impl From<&EventRecord> for EventView {
    fn from(e: &EventRecord) -> Self {
        EventView {
            event_id: e.event_id.clone(),
            key: e.key.clone(),
            payload: value_of(&e.payload),
            metadata: value_of(&e.metadata),
            at_ms: e.at_ms,
            outcomes: e.outcomes.clone(),
        }
    }
}

impl From<EventView> for EventRecord {
    fn from(v: EventView) -> Self {
        EventRecord {
            event_id: v.event_id,
            key: v.key,
            payload: v.payload.to_string(),
            metadata: v.metadata.to_string(),
            at_ms: v.at_ms,
            outcomes: v.outcomes,
        }
    }
}

/// `POST /v1/events/{key}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushEventRequest {
    #[serde(default)]
    pub payload: Value,
    /// `additional_metadata` of the runs it starts (a JSON object).
    pub metadata: Option<Value>,
}

/// Ingested events.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EventList {
    /// Newest first.
    pub events: Vec<EventView>,
}
