//! Hooks and the replies to payloads delivered to them.

use keel_core::HookRecord;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

/// A reply to a payload delivered with an ID.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplyView {
    pub run_id: String,
    pub token: String,
    pub payload_id: String,
    /// The payload's place among the hook's payloads.
    pub index: u64,
    /// The workflow's reply, once it sent one.
    pub reply: Option<Value>,
}

impl From<&keel_host::Reply> for ReplyView {
    fn from(r: &keel_host::Reply) -> Self {
        ReplyView {
            run_id: r.run_id.to_string(),
            token: r.token.to_string(),
            payload_id: r.payload_id.clone(),
            index: r.index,
            reply: r.reply.as_deref().map(value_of),
        }
    }
}

/// A hook holding a token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HookView {
    pub token: String,
    /// The run that owns it.
    pub run_id: String,
    /// The workflow command that created it; absent for a start hook.
    pub command: Option<u32>,
    pub metadata: Option<Value>,
    pub created_at_ms: u64,
    /// The token stays held until then, even after the run ends.
    pub retain_until_ms: Option<u64>,
    /// The run has not ended: the hook accepts payloads.
    pub active: bool,
    /// Payloads resumed into it so far.
    pub payloads: u64,
    /// The JSON Schema its payloads must fit, when the workflow gave its
    /// payload type one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<Value>,
}

impl From<&HookRecord> for HookView {
    fn from(h: &HookRecord) -> Self {
        HookView {
            token: h.token.to_string(),
            run_id: h.run_id.to_string(),
            command: h.command,
            metadata: h.metadata.as_deref().map(value_of),
            created_at_ms: h.created_at_ms,
            retain_until_ms: h.retain_until_ms,
            active: h.active,
            payloads: h.next_payload,
            payload_schema: h.payload_schema.as_deref().map(value_of),
        }
    }
}

impl From<HookView> for HookRecord {
    fn from(v: HookView) -> Self {
        HookRecord {
            token: v.token.into(),
            run_id: v.run_id.into(),
            command: v.command,
            metadata: v.metadata.map(|m| m.to_string()),
            created_at_ms: v.created_at_ms,
            retain_until_ms: v.retain_until_ms,
            active: v.active,
            next_payload: v.payloads,
            payload_schema: v.payload_schema.map(|s| s.to_string()),
        }
    }
}

/// Hooks holding tokens now.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HookList {
    pub hooks: Vec<HookView>,
}
