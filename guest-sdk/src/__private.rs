//! Items used by the code the macros generate. Not a public API.

use std::fmt::Display;
use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
pub use serde_json;

use crate::RetryPolicy;
use crate::error::StepError;
use crate::executor::StepFuture;

/// The generated bindings, where the generated code expects them.
pub use crate::bindings;

#[doc(hidden)]
pub use bindings::__export_component;

use bindings::exports::keel::workflow::guest::Guest;
use bindings::keel::workflow::types;

/// A workflow as `component!` collects it.
pub struct WorkflowDef {
    pub name: &'static str,
    /// `(key expression, TTL in ms)`.
    pub idempotency: Option<(&'static str, u64)>,
    pub on_events: &'static [&'static str],
    /// The schedule it declares, if any.
    pub schedule: Option<ScheduleDef>,
    /// Its concurrency limit per key, if any.
    pub concurrency: Option<ConcurrencyDef>,
    /// How long a run may take before it is cancelled, in ms.
    pub timeout_ms: Option<u64>,
    /// `durability = "..."`, if declared (else the worker's default,
    /// `effect_gated` unless its operator chose another).
    pub durability: Option<&'static str>,
    /// Its doc comment, if it has one.
    pub description: Option<&'static str>,
    pub run: fn(&str) -> Result<String, String>,
    /// The JSON Schemas of its input and output, for types that derive
    /// `schemars::JsonSchema`.
    pub schemas: fn() -> (Option<String>, Option<String>),
}

/// A concurrency limit as `#[workflow(concurrency(...))]` declares it.
pub struct ConcurrencyDef {
    /// A CEL expression over `input` and `additional_metadata`.
    pub key: &'static str,
    pub limit: u32,
    /// `queue`, `cancel_in_progress` or `cancel_newest`.
    pub on_limit: &'static str,
}

/// A schedule as `#[workflow(schedule(...))]` declares it.
pub struct ScheduleDef {
    pub cron: Option<&'static str>,
    pub tz: Option<&'static str>,
    pub every_ms: Option<u64>,
    pub overlap: Option<&'static str>,
    pub catchup_window_ms: Option<u64>,
    /// Every fire's input, as JSON.
    pub input: Option<&'static str>,
}

/// The workflow name under which the host reads the workflows' JSON
/// Schemas (no Rust function can have it).
pub const SCHEMAS: &str = "keel:schemas";

/// A type whose JSON Schema is asked for: `(&&Schema::<T>::new()).json_schema()`
/// is its schema if `T: JsonSchema`, else `None` (autoref specialization:
/// the impl on `&Schema<T>` is preferred when its bound holds).
pub struct Schema<T>(std::marker::PhantomData<T>);

impl<T> Schema<T> {
    pub fn new() -> Self {
        Schema(std::marker::PhantomData)
    }
}

impl<T> Default for Schema<T> {
    fn default() -> Self {
        Schema::new()
    }
}

/// The schema of a type that has one.
pub trait HasSchema {
    fn json_schema(&self) -> Option<String>;
}

impl<T: schemars::JsonSchema> HasSchema for &Schema<T> {
    fn json_schema(&self) -> Option<String> {
        serde_json::to_string(&schemars::schema_for!(T)).ok()
    }
}

/// No schema for a type without one.
pub trait NoSchema {
    fn json_schema(&self) -> Option<String>;
}

impl<T> NoSchema for Schema<T> {
    fn json_schema(&self) -> Option<String> {
        None
    }
}

/// The `T` of a workflow's `Result<T, E>`.
pub trait WorkflowOutput {
    type Ok;
}

impl<T, E> WorkflowOutput for Result<T, E> {
    type Ok = T;
}

/// `{workflow: {"input": schema, "output": schema, ...}}` for the host, and
/// under `keel:steps` what steps declare beyond their retry policy.
fn schemas(workflows: &[WorkflowDef], steps: &[StepDef]) -> String {
    let mut map: serde_json::Map<String, serde_json::Value> = workflows
        .iter()
        .map(|w| {
            let (input, output) = (w.schemas)();
            let parse = |s: Option<String>| {
                s.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                    .unwrap_or(serde_json::Value::Null)
            };
            let schedule = w.schedule.as_ref().map(|s| {
                serde_json::json!({
                    "cron": s.cron, "tz": s.tz, "every_ms": s.every_ms, "overlap": s.overlap,
                    "catchup_window_ms": s.catchup_window_ms, "input": s.input,
                })
            });
            let concurrency = w.concurrency.as_ref().map(
                |c| serde_json::json!({"key": c.key, "limit": c.limit, "on_limit": c.on_limit}),
            );
            (
                w.name.to_string(),
                serde_json::json!({
                    "input": parse(input), "output": parse(output),
                    "schedule": schedule, "concurrency": concurrency,
                    "timeout_ms": w.timeout_ms,
                    "durability": w.durability,
                    "description": w.description,
                }),
            )
        })
        .collect();
    let steps: serde_json::Map<String, serde_json::Value> = steps
        .iter()
        .filter(|s| s.rate_limit.is_some() || s.concurrency.is_some() || s.retry_budget_ms.is_some())
        .map(|s| {
            let rate = s.rate_limit.map(
                |(key, limit, per_ms)| serde_json::json!({"key": key, "limit": limit, "per_ms": per_ms}),
            );
            let concurrency = s
                .concurrency
                .map(|(key, limit)| serde_json::json!({"key": key, "limit": limit}));
            (
                s.name.to_string(),
                serde_json::json!({
                    "rate_limit": rate, "concurrency": concurrency,
                    "retry_budget_ms": s.retry_budget_ms,
                }),
            )
        })
        .collect();
    map.insert(STEPS.into(), serde_json::Value::Object(steps));
    serde_json::Value::Object(map).to_string()
}

/// The entry of [`SCHEMAS`]' answer holding the steps' settings (no
/// workflow can have the name).
pub const STEPS: &str = "keel:steps";

/// A step as `component!` collects it.
pub struct StepDef {
    pub name: &'static str,
    pub retry: RetryPolicy,
    /// `(key expression, limit, per in ms)`.
    pub rate_limit: Option<(&'static str, u32, u64)>,
    /// `(key expression, limit)`.
    pub concurrency: Option<(&'static str, u32)>,
    /// The most time from the first attempt's start to a retry's, in ms.
    pub retry_budget_ms: Option<u64>,
    pub run: fn(&str) -> Result<String, types::StepError>,
}

/// The workflows and steps of a component.
pub trait Registry {
    const WORKFLOWS: &'static [WorkflowDef];
    const STEPS: &'static [StepDef];
}

/// The `T` of a step's `Result<T, StepError>`.
pub trait StepOutput {
    type Ok;
}

impl<T> StepOutput for Result<T, StepError> {
    type Ok = T;
}

impl<R: Registry> Guest for R {
    fn get_manifest() -> types::Manifest {
        types::Manifest {
            sdk_version: env!("CARGO_PKG_VERSION").to_string(),
            workflows: R::WORKFLOWS
                .iter()
                .map(|w| types::WorkflowInfo {
                    name: w.name.to_string(),
                    idempotency: w.idempotency.map(|(key, ttl_ms)| types::Idempotency {
                        key: key.to_string(),
                        ttl_ms,
                    }),
                    on_events: w.on_events.iter().map(|e| e.to_string()).collect(),
                })
                .collect(),
            steps: R::STEPS
                .iter()
                .map(|s| types::StepInfo {
                    name: s.name.to_string(),
                    retry: types::RetryPolicy {
                        max_retries: s.retry.max_retries,
                        initial_backoff_ms: s.retry.initial_backoff_ms,
                        backoff_factor: s.retry.backoff_factor,
                        max_backoff_ms: s.retry.max_backoff_ms,
                    },
                })
                .collect(),
        }
    }

    fn run_workflow(name: String, input: String) -> Result<String, String> {
        if name == SCHEMAS {
            return Ok(schemas(R::WORKFLOWS, R::STEPS));
        }
        match R::WORKFLOWS.iter().find(|w| w.name == name) {
            Some(w) => (w.run)(&input),
            None => Err(format!("this component exports no workflow `{name}`")),
        }
    }

    fn run_step(name: String, input: String) -> Result<String, types::StepError> {
        match R::STEPS.iter().find(|s| s.name == name) {
            Some(s) => (s.run)(&input),
            None => Err(types::StepError::Fatal(format!(
                "this component exports no step `{name}`"
            ))),
        }
    }
}

/// Runs a workflow function on its JSON input.
pub fn run_workflow<I, F, Fut, T, E>(input: &str, f: F) -> Result<String, String>
where
    I: DeserializeOwned,
    F: FnOnce(I) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    T: Serialize,
    E: Display,
{
    let input: I = serde_json::from_str(input)
        .map_err(|e| format!("the run's input does not match the workflow's input type: {e}"))?;
    let output = crate::executor::block_on(f(input)).map_err(|e| e.to_string())?;
    serde_json::to_string(&output)
        .map_err(|e| format!("the workflow's output does not serialize: {e}"))
}

/// Schedules a step from a workflow (the body of a `#[step]` function's caller).
pub fn call_step<A: Serialize + ?Sized, T>(name: &'static str, args: &A) -> StepFuture<T> {
    StepFuture::new(name, serde_json::to_string(args).map_err(|e| e.to_string()))
}

/// Runs a step body on its JSON input.
pub fn run_step<A, F, Fut, T>(input: &str, f: F) -> Result<String, types::StepError>
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: Future<Output = Result<T, StepError>>,
    T: Serialize,
{
    let args: A = serde_json::from_str(input).map_err(|e| {
        types::StepError::Fatal(format!(
            "the step's input does not match its arguments: {e}"
        ))
    })?;
    match crate::stream::in_step(|| block_on_step(f(args))) {
        Ok(out) => serde_json::to_string(&out).map_err(|e| {
            types::StepError::Fatal(format!("the step's output does not serialize: {e}"))
        }),
        Err(e) if e.fatal => Err(types::StepError::Fatal(e.message)),
        Err(e) => Err(types::StepError::Retryable(types::RetryableError {
            message: e.message,
            retry_after_ms: e.retry_after.map(|d| d.as_millis() as u64),
        })),
    }
}

#[cfg(target_arch = "wasm32")]
fn block_on_step<F: Future>(f: F) -> F::Output {
    wstd::runtime::block_on(f)
}

#[cfg(not(target_arch = "wasm32"))]
fn block_on_step<F: Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
