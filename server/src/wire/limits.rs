//! Concurrency limits and their overrides.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /v1/limits`: every concurrency group and operator's override.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LimitList {
    pub limits: Vec<keel_core::flow::LimitRow>,
}

/// `POST /v1/limits/{workflow}`: an operator's concurrency limit.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitRequest {
    /// One key value; absent for every key of the workflow.
    #[schemars(length(max = 256))]
    pub key: Option<String>,
    /// Runs of one key in progress at once; 0 pauses (new runs queue).
    #[schemars(range(max = 1000000))]
    pub limit: u32,
}

/// `POST /v1/limits/{workflow}/reset`: which override to remove.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitResetRequest {
    /// One key value's override; absent for the workflow's.
    #[schemars(length(max = 256))]
    pub key: Option<String>,
}

/// What a limit change did.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LimitChange {
    /// Queued runs that the change started.
    pub started: Vec<String>,
    /// The groups and overrides now.
    pub limits: Vec<keel_core::flow::LimitRow>,
}
