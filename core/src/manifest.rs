//! What a component declares: its workflows (with idempotency keys and the
//! events that start them) and its steps (with their retry policies).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a step is retried.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub max_retries: u32,
    pub initial_backoff_ms: u64,
    pub backoff_factor: f64,
    pub max_backoff_ms: u64,
}

impl RetryPolicy {
    /// The delay after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = self
            .backoff_factor
            .max(1.0)
            .powi(attempt.saturating_sub(1) as i32);
        let ms = (self.initial_backoff_ms as f64 * factor).min(self.max_backoff_ms as f64);
        Duration::from_millis(ms as u64)
    }
}

/// A step as the manifest declares it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepInfo {
    pub name: String,
    pub retry: RetryPolicy,
    /// Its rate limit (`#[step(rate_limit(...))]`).
    #[serde(default)]
    pub rate_limit: Option<crate::flow::RateLimit>,
    /// Its concurrency limit (`#[step(concurrency(...))]`).
    #[serde(default)]
    pub concurrency: Option<crate::flow::StepConcurrency>,
    /// The most time from its first attempt's start to a retry's
    /// (`#[step(retry_budget = "10m")]`): a retry due later fails the step.
    #[serde(default)]
    pub retry_budget_ms: Option<u64>,
}

/// A workflow's TTL idempotency key, as declared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Idempotency {
    /// A CEL expression over `input` and `additional_metadata`.
    pub key: String,
    pub ttl_ms: u64,
}

/// A workflow as the manifest declares it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkflowInfo {
    pub name: String,
    pub idempotency: Option<Idempotency>,
    /// Event keys that start a run of it.
    pub on_events: Vec<String>,
    /// The JSON Schema of its input, when the SDK could derive one (the
    /// input type derives `JsonSchema`); starts are checked against it.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
    /// The JSON Schema of its output, likewise.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// The schedule it declares (`#[workflow(schedule(...))]`), created
    /// when its component is deployed.
    #[serde(default)]
    pub schedule: Option<DeclaredSchedule>,
    /// Its concurrency limit per key (`#[workflow(concurrency(...))]`).
    #[serde(default)]
    pub concurrency: Option<crate::flow::Concurrency>,
    /// How long a run may take from its admission (`#[workflow(timeout =
    /// "2h")]`) before it is cancelled with `deadline_exceeded`; a start's
    /// own timeout overrides it.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// When its step attempts' starts and completions are made durable
    /// (`#[workflow(durability = "strict" | "effect_gated" | "relaxed")]`);
    /// `None` if it declares none: the worker's default then applies.
    #[serde(default)]
    pub durability: Option<Durability>,
    /// What it does, in the author's words: the Rust function's doc
    /// comment or the Python function's docstring. An MCP client shows it
    /// as the workflow's tool description.
    #[serde(default)]
    pub description: Option<String>,
}

/// When a workflow's step attempts and results become durable
/// (docs/durability.md has the three contracts side by side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Before each step attempt runs, the attempt's start (and every
    /// result before it) is durable: a completed step never runs again and
    /// an attempt a crash interrupted counts against its retries.
    Strict,
    /// What a step attempt's effects could depend on (its start and every
    /// result before it) is durable before the first effect leaves the
    /// sandbox: its first outbound HTTP request, stream chunk or hook
    /// resume (an attempt granted directories, before it runs), as well as
    /// before everything [`Relaxed`](Durability::Relaxed) waits for. A step
    /// whose result something outside has seen never runs again; a step
    /// that only computed may run again after a crash, under the same step
    /// ID. A run of pure steps is one durable write.
    #[default]
    EffectGated,
    /// Step starts and results are made durable with the run's next
    /// durable write that something depends on: when it waits on a timer,
    /// a hook or another run, makes an effect others can see (a hook, a
    /// child, a stream), or ends. A crash loses the steps completed since
    /// then, and the recovered run runs them again under the same step
    /// IDs, even those whose effects were seen outside; an attempt a crash
    /// interrupted does not count against its retries. One durable write
    /// for a run of sequential steps instead of one per step.
    Relaxed,
}

impl Durability {
    /// The mode's name as manifests and `#[workflow(durability = ...)]`
    /// spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Strict => "strict",
            Durability::EffectGated => "effect_gated",
            Durability::Relaxed => "relaxed",
        }
    }
}

/// A schedule a workflow declares: deploying its component creates it as
/// `DEPLOYMENT.WORKFLOW` (firing on that deployment), a redeploy under the
/// same name updates it, and a redeploy whose component no longer declares
/// it deletes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeclaredSchedule {
    /// A cron expression; or `every_ms`.
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC).
    pub tz: Option<String>,
    pub every_ms: Option<u64>,
    /// `skip` (default), `buffer-one` or `allow-all`.
    pub overlap: Option<String>,
    pub catchup_window_ms: Option<u64>,
    /// Every fire's input, as JSON (default `null`).
    pub input: Option<String>,
}

/// What a component exports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub sdk_version: String,
    pub workflows: Vec<WorkflowInfo>,
    pub steps: Vec<StepInfo>,
}

impl Manifest {
    /// The step named `name`, if the component exports it.
    pub fn step(&self, name: &str) -> Option<&StepInfo> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The workflow named `name`, if the component exports it.
    pub fn workflow(&self, name: &str) -> Option<&WorkflowInfo> {
        self.workflows.iter().find(|w| w.name == name)
    }

    /// The names of the exported steps.
    pub fn step_names(&self) -> Vec<String> {
        self.steps.iter().map(|s| s.name.clone()).collect()
    }

    /// The names of the exported workflows.
    pub fn workflow_names(&self) -> Vec<String> {
        self.workflows.iter().map(|w| w.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_by_the_factor_and_stops_at_the_bound() {
        let retry = RetryPolicy {
            max_retries: 5,
            initial_backoff_ms: 100,
            backoff_factor: 2.0,
            max_backoff_ms: 350,
        };
        let delays: Vec<u64> = (1..=4)
            .map(|a| retry.backoff(a).as_millis() as u64)
            .collect();
        assert_eq!(delays, [100, 200, 350, 350]);
    }

    #[test]
    fn a_factor_below_one_never_shrinks_the_delay() {
        let retry = RetryPolicy {
            max_retries: 3,
            initial_backoff_ms: 100,
            backoff_factor: 0.5,
            max_backoff_ms: 1000,
        };
        assert_eq!(retry.backoff(3), Duration::from_millis(100));
    }
}
