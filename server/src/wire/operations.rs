//! The server's own bodies: errors, health, workers and purges.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An error: its kind, message and the IDs it carries.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable, snake case: `run_not_found`, `hook_conflict`, ...
    pub kind: String,
    pub message: String,
    /// The IDs the error names (`run_id`, `conflicting_run_id`, `token`, ...).
    #[serde(default)]
    pub ids: std::collections::BTreeMap<String, String>,
    /// For `invalid_input`: each place the input or payload departs from
    /// its schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

/// A place where a value departs from its schema.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// A JSON pointer into the value (`/items/0/amount`; `/` is the whole).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// `GET /healthz`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok` when the store answers.
    pub status: String,
    /// Where the store is (no secrets); only to a caller with the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// keel's version; only to a caller with the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A worker sharing the store.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerView {
    pub worker_id: String,
    pub host: String,
    pub pid: u32,
    pub started_at_ms: u64,
    /// When it last said it was alive.
    pub heartbeat_at_ms: u64,
    /// Runs whose leases it holds.
    pub runs: usize,
    /// It has not heartbeaten for three lease times (killed, or cut off
    /// from the store); it is forgotten an hour later.
    pub gone: bool,
}

impl From<keel_host::WorkerState> for WorkerView {
    fn from(w: keel_host::WorkerState) -> Self {
        WorkerView {
            worker_id: w.record.worker_id,
            host: w.record.host,
            pid: w.record.pid,
            started_at_ms: w.record.started_at_ms,
            heartbeat_at_ms: w.record.heartbeat_at_ms,
            runs: w.runs,
            gone: w.gone,
        }
    }
}

/// The workers sharing the store.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerList {
    pub workers: Vec<WorkerView>,
}

/// What a purge of ended runs past their retention did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PurgeView {
    /// The runs deleted and what they freed.
    pub deleted: keel_core::retention::Deleted,
    /// The ended runs read and decided on.
    pub examined: u64,
    /// The runs whose journal file was archived first.
    pub archived: u64,
    /// Whether every ended run was decided on (false: the pass stopped
    /// at its budget and the next goes on).
    pub complete: bool,
}

impl From<keel_host::Purge> for PurgeView {
    fn from(p: keel_host::Purge) -> Self {
        PurgeView {
            deleted: p.deleted,
            examined: p.examined,
            archived: p.archived,
            complete: p.complete,
        }
    }
}
