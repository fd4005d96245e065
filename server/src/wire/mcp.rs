//! What the MCP endpoint (`/mcp`) takes and gives beyond the API's own
//! shapes: the arguments of its own tools, a tool call's answer and a
//! progress notification's message.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ChunkView, HookView, RunView};

/// The arguments of tool `keel-resume-hook`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeHookArgs {
    /// The token of the hook the run waits on (a tool call's answer names
    /// it, with the payload schema).
    pub token: String,
    /// The payload: JSON of the hook's payload schema.
    #[serde(default)]
    pub payload: Value,
    /// A resume retried with the same payload ID delivers nothing twice;
    /// one is chosen when none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_id: Option<String>,
    /// How long to wait for the workflow's reply, in ms (default 30,000);
    /// 0 answers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_reply_ms: Option<u64>,
}

/// The arguments of tool `keel-await-run`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AwaitRunArgs {
    pub run_id: String,
    /// How long to wait for the run to end or to wait on something, in ms
    /// (default 30,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// A tool call's answer (its structured content): the run as the call
/// left it, and the hooks it waits on, each with its payload schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolAnswer {
    pub run: RunView,
    /// The hooks the run waits on: answer one with `keel-resume-hook`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookView>,
}

/// The message of a progress notification: a chunk one of the run's
/// streams got while the call waited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamProgress {
    pub run_id: String,
    pub stream: String,
    #[serde(flatten)]
    pub chunk: ChunkView,
}
