//! A run's streams and their chunks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

/// A stream a run wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamView {
    pub name: String,
    /// How many chunks it holds (the next chunk's index).
    pub chunks: u64,
    /// No chunk comes after its last.
    pub closed: bool,
    /// Bytes of data it holds.
    pub bytes: u64,
}

impl From<&keel_core::stream::StreamInfo> for StreamView {
    fn from(s: &keel_core::stream::StreamInfo) -> Self {
        StreamView {
            name: s.name.clone(),
            chunks: s.chunks,
            closed: s.closed,
            bytes: s.bytes,
        }
    }
}

/// A run's streams.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamList {
    pub streams: Vec<StreamView>,
}

/// One chunk of a stream, as the `data` of its server-sent event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChunkView {
    /// Its place in the stream (also the event's `id`).
    pub index: u64,
    pub at_ms: u64,
    /// `data`, `restart` or `closed` (also the event's name).
    pub kind: String,
    /// A data chunk's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The step that wrote it (or restarts), if a step did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<String>,
    /// That step's attempt: a `restart` drops the step's chunks of
    /// earlier attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}

impl From<&keel_core::stream::Chunk> for ChunkView {
    fn from(c: &keel_core::stream::Chunk) -> Self {
        use keel_core::stream::{ChunkBody, Origin};
        let (mut step_id, mut attempt) = match &c.origin {
            Origin::Step { step_id, attempt } => (Some(step_id.clone()), Some(*attempt)),
            Origin::Workflow { .. } => (None, None),
        };
        let (kind, value) = match &c.body {
            ChunkBody::Data(json) => ("data", Some(value_of(json))),
            ChunkBody::Restart {
                step_id: s,
                attempt: a,
            } => {
                (step_id, attempt) = (Some(s.clone()), Some(*a));
                ("restart", None)
            }
            ChunkBody::Closed => ("closed", None),
        };
        ChunkView {
            index: c.index,
            at_ms: c.at_ms,
            kind: kind.into(),
            value,
            step_id,
            attempt,
        }
    }
}
