//! Deployments: grants, a component as inspected, listings and pruning.

use keel_core::Deployment;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/deployments/{name}/grants`: capabilities added to (or, with
/// `replace`, set on) every build of a deployment name, or the one build
/// of a hash.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// Hosts (`host` or `host:port`) steps may send HTTP requests to.
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::HTTP_GRANT_PATTERN)))]
    pub http: Vec<String>,
    /// Host directories preopened for steps (absolute paths).
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::DIR_GRANT_PATTERN)))]
    pub dirs: Vec<String>,
    /// Environment variables passed to steps (their values are the worker's).
    #[serde(default)]
    #[schemars(inner(regex(pattern = keel_core::deployment::ENV_GRANT_PATTERN)))]
    pub env: Vec<String>,
    /// Set exactly these grants instead of adding them.
    #[serde(default)]
    pub replace: bool,
}

/// A component as `keel inspect` shows it: what it exports, with the JSON
/// Schemas of its workflows' inputs and outputs.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ComponentView {
    /// The component's content hash.
    pub hash: String,
    /// The keel-sdk version it was built with.
    pub sdk_version: String,
    /// Its workflows: name, input and output JSON Schemas (when their
    /// types derive one), idempotency, concurrency, events.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub workflows: Vec<keel_core::manifest::WorkflowInfo>,
    /// Its steps: name, retry policy, limits.
    #[schemars(with = "Vec<serde_json::Map<String, Value>>")]
    pub steps: Vec<keel_core::manifest::StepInfo>,
    /// Imports a workflow may not call (stubbed out in the workflow
    /// sandbox).
    pub stubbed_in_workflows: Vec<String>,
}

impl From<&keel_host::Loaded> for ComponentView {
    fn from(loaded: &keel_host::Loaded) -> Self {
        ComponentView {
            hash: loaded.hash.to_string(),
            sdk_version: loaded.manifest.sdk_version.clone(),
            workflows: loaded.manifest.workflows.clone(),
            steps: loaded.manifest.steps.clone(),
            stubbed_in_workflows: loaded.stubbed_imports.clone(),
        }
    }
}

/// A deployment list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentList {
    /// Newest first.
    pub deployments: Vec<Deployment>,
}

/// The longest grace a prune takes: a century, in milliseconds.
pub const MAX_GRACE_MS: u64 = 3_153_600_000_000;

/// `POST /v1/components/prune`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// Keep a component stored within this many milliseconds (a start or a
    /// deploy may be about to name it); default an hour; at most a century.
    #[schemars(range(max = MAX_GRACE_MS))]
    pub grace_ms: Option<u64>,
    /// Say what would be deleted; delete nothing.
    #[serde(default)]
    pub dry_run: bool,
}
