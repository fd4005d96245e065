//! Loading components: validation against the contract, compilation (on
//! tokio's blocking pool, cached on disk by [`crate::compiled`]), and the
//! manifest of workflows and steps.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use keel_core::ComponentHash;
use keel_core::flow::{Concurrency, RateLimit, StepConcurrency};
use keel_core::manifest::{Idempotency, Manifest, RetryPolicy, StepInfo, WorkflowInfo};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::compiled;
use crate::keys::KeyExpr;
use crate::sandbox::{self, HostState, WorkflowComponentPre};
use crate::{Error, Result};

/// The exported interface every keel component must have.
pub const GUEST_EXPORT: &str = "keel:workflow/guest@0.1.0";

/// A validated, compiled component, ready to instantiate in either sandbox.
pub struct Loaded {
    /// SHA-256 of the component's bytes.
    pub hash: ComponentHash,
    pub manifest: Manifest,
    /// Non-deterministic imports, stubbed out for workflows.
    pub stubbed_imports: Vec<String>,
    /// Compiled idempotency key expressions, by workflow.
    pub(crate) keys: HashMap<String, KeyExpr>,
    /// Compiled concurrency key expressions and their limits, by workflow.
    pub(crate) concurrency: HashMap<String, (KeyExpr, Concurrency)>,
    /// Compiled rate-limit key expressions and their limits, by step.
    pub(crate) rates: HashMap<String, (KeyExpr, RateLimit)>,
    /// Compiled step concurrency key expressions and their limits, by step.
    pub(crate) step_limits: HashMap<String, (KeyExpr, StepConcurrency)>,
    /// Validators of the workflows' inputs, for those with a schema.
    inputs: HashMap<String, jsonschema::Validator>,
    pub(crate) workflow_pre: WorkflowComponentPre<HostState>,
    pub(crate) step_pre: WorkflowComponentPre<HostState>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("hash", &self.hash)
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

impl Loaded {
    /// Fails with `UnknownWorkflow` (listing the ones that exist) unless
    /// the component exports `name`.
    pub fn check_workflow(&self, name: &str) -> Result<&WorkflowInfo> {
        self.manifest
            .workflow(name)
            .ok_or_else(|| Error::UnknownWorkflow {
                name: name.to_string(),
                available: self.manifest.workflow_names(),
            })
    }

    /// The concurrency key expression and limit of `workflow`, if it
    /// declares one.
    pub fn concurrency(&self, workflow: &str) -> Option<&(KeyExpr, Concurrency)> {
        self.concurrency.get(workflow)
    }

    /// The rate-limit key expression and limit of step `step`, if it
    /// declares one.
    pub fn rate_limit(&self, step: &str) -> Option<&(KeyExpr, RateLimit)> {
        self.rates.get(step)
    }

    /// The concurrency key expression and limit of step `step`, if it
    /// declares one.
    pub fn step_concurrency(&self, step: &str) -> Option<&(KeyExpr, StepConcurrency)> {
        self.step_limits.get(step)
    }

    /// The idempotency key expression of `workflow`, if it declares one.
    pub fn key(&self, workflow: &str) -> Option<&KeyExpr> {
        self.keys.get(workflow)
    }

    /// Fails with `InvalidInput` naming each place `input` departs from
    /// `workflow`'s input schema (a workflow without one takes any JSON).
    pub fn check_input(&self, workflow: &str, input: &serde_json::Value) -> Result<()> {
        let Some(validator) = self.inputs.get(workflow) else {
            return Ok(());
        };
        let problems = schema_problems(validator, input);
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::InputMismatch {
            workflow: workflow.into(),
            problems,
        })
    }
}

/// The first places `value` departs from `validator`'s schema, each as
/// `at /path: what`; empty when it fits.
pub(crate) fn schema_problems(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(5)
        .map(|e| {
            let at = e.instance_path.to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("at {at}: {e}")
        })
        .collect()
}

/// Compiled payload schemas of hooks, by schema text: the few payload
/// types a deployment's hooks have are compiled once, not per resume.
#[derive(Default)]
pub(crate) struct PayloadSchemas {
    compiled: std::sync::Mutex<HashMap<String, Option<Arc<jsonschema::Validator>>>>,
}

/// Most schemas kept compiled; past it the cache starts over.
const MAX_COMPILED_SCHEMAS: usize = 256;

impl PayloadSchemas {
    /// The places `payload` departs from `schema` (empty when it fits, or
    /// when the schema does not compile, which is logged once).
    pub(crate) fn problems(&self, schema: &str, payload: &serde_json::Value) -> Vec<String> {
        let validator = {
            let mut compiled = self.compiled.lock().expect("schema cache");
            if compiled.len() >= MAX_COMPILED_SCHEMAS && !compiled.contains_key(schema) {
                compiled.clear();
            }
            compiled
                .entry(schema.to_string())
                .or_insert_with(|| {
                    let parsed = serde_json::from_str(schema).map_err(|e| e.to_string());
                    match parsed
                        .and_then(|s| jsonschema::validator_for(&s).map_err(|e| e.to_string()))
                    {
                        Ok(v) => Some(Arc::new(v)),
                        Err(e) => {
                            tracing::warn!("ignoring a hook's payload schema: {e}");
                            None
                        }
                    }
                })
                .clone()
        };
        validator.map_or_else(Vec::new, |v| schema_problems(&v, payload))
    }
}

/// Validators of the inputs of the workflows that declare a schema; a
/// schema that does not compile is ignored, with a warning.
fn input_validators(manifest: &Manifest) -> HashMap<String, jsonschema::Validator> {
    manifest
        .workflows
        .iter()
        .filter_map(|w| {
            let schema = w.input_schema.as_ref()?;
            match jsonschema::validator_for(schema) {
                Ok(v) => Some((w.name.clone(), v)),
                Err(e) => {
                    tracing::warn!(workflow = %w.name, "ignoring the input schema: {e}");
                    None
                }
            }
        })
        .collect()
}

/// The content hash of a component's bytes.
pub fn content_hash(bytes: &[u8]) -> ComponentHash {
    hex::encode(Sha256::digest(bytes)).into()
}

/// Compiles `bytes` (or loads the cached artifact from `cache_dir`),
/// validates it and reads its manifest.
pub async fn load(
    engine: &Engine,
    base: &Linker<HostState>,
    cache_dir: &Path,
    origin: &Path,
    bytes: &[u8],
    max_memory: usize,
) -> Result<Loaded> {
    let hash = content_hash(bytes);
    let component = {
        let (engine, cache_dir, origin) = (
            engine.clone(),
            cache_dir.to_path_buf(),
            origin.to_path_buf(),
        );
        let (hash, bytes) = (hash.clone(), bytes.to_vec());
        tokio::task::spawn_blocking(move || {
            compile_cached(&engine, &cache_dir, &origin, &hash, &bytes)
        })
        .await
        .map_err(|e| Error::Wasm(format!("compiling the component failed: {e}")))??
    };
    let step_pre = instantiate_pre(base, &component, origin)?;
    let workflow_linker = sandbox::workflow_linker(base, engine, &component).map_err(wasm)?;
    let workflow_pre = instantiate_pre(&workflow_linker, &component, origin)?;
    let stubbed_imports = sandbox::non_deterministic_imports(engine, &component)
        .into_iter()
        .map(|(i, f)| format!("{i}#{f}"))
        .collect();
    let manifest = read_manifest(engine, &step_pre, origin, max_memory).await?;
    let keys = manifest
        .workflows
        .iter()
        .filter_map(|w| w.idempotency.as_ref().map(|i| (w, i)))
        .map(|(w, i)| Ok((w.name.clone(), KeyExpr::compile(&w.name, &i.key, i.ttl_ms)?)))
        .collect::<Result<_>>()?;
    let concurrency = manifest
        .workflows
        .iter()
        .filter_map(|w| w.concurrency.as_ref().map(|c| (w, c)))
        .map(|(w, c)| {
            let key = KeyExpr::compile(&w.name, &c.key, 0)?;
            Ok((w.name.clone(), (key, c.clone())))
        })
        .collect::<Result<_>>()?;
    let rates = manifest
        .steps
        .iter()
        .filter_map(|s| s.rate_limit.as_ref().map(|r| (s, r)))
        .map(|(s, r)| {
            let key = KeyExpr::compile(&s.name, &r.key, 0)?;
            Ok((s.name.clone(), (key, r.clone())))
        })
        .collect::<Result<_>>()?;
    let step_limits = manifest
        .steps
        .iter()
        .filter_map(|s| s.concurrency.as_ref().map(|c| (s, c)))
        .map(|(s, c)| {
            let key = KeyExpr::compile(&s.name, &c.key, 0)?;
            Ok((s.name.clone(), (key, c.clone())))
        })
        .collect::<Result<_>>()?;
    Ok(Loaded {
        hash,
        inputs: input_validators(&manifest),
        manifest,
        keys,
        concurrency,
        rates,
        step_limits,
        stubbed_imports,
        workflow_pre,
        step_pre,
    })
}

fn wasm(e: wasmtime::Error) -> Error {
    Error::Wasm(format!("{e:#}"))
}

fn instantiate_pre(
    linker: &Linker<HostState>,
    component: &Component,
    origin: &Path,
) -> Result<WorkflowComponentPre<HostState>> {
    let pre = linker.instantiate_pre(component).map_err(|e| {
        let text = format!("{e:#}");
        match text.split('`').nth(1) {
            Some(import) if text.contains("matching implementation was not found") => {
                Error::UnsupportedImport {
                    path: origin.into(),
                    import: import.to_string(),
                }
            }
            _ => Error::InvalidComponent {
                path: origin.into(),
                reason: text,
            },
        }
    })?;
    if component.get_export_index(None, GUEST_EXPORT).is_none() {
        return Err(Error::MissingExports {
            path: origin.into(),
            missing: GUEST_EXPORT.into(),
        });
    }
    WorkflowComponentPre::new(pre).map_err(|e| Error::MissingExports {
        path: origin.into(),
        missing: format!("{GUEST_EXPORT} with the functions of this keel version ({e:#})"),
    })
}

fn compile_cached(
    engine: &Engine,
    cache_dir: &Path,
    origin: &Path,
    hash: &str,
    bytes: &[u8],
) -> Result<Component> {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let artifact = cache_dir.join(format!("{hash}-{:016x}.cwasm", h.finish()));
    let invalid = |e: wasmtime::Error| {
        let text = format!("{e:#}");
        let reason = if text.contains("parse a wasm module with a component parser") {
            "it is a core WebAssembly module, not a component (wasm32-wasip2 builds components)"
                .into()
        } else {
            text
        };
        Error::InvalidComponent {
            path: origin.into(),
            reason,
        }
    };
    compiled::load_or_compile(
        &artifact,
        // SAFETY: these bytes are the ones `precompile_component` of an
        // engine with the same compatibility hash wrote, as the digest
        // recorded beside them when they were compiled shows, read into
        // memory before the check (so they cannot change after it) from a
        // cache only this user can write (see `compiled`'s doc); or they
        // were compiled just now by this engine.
        |compiled| unsafe { Component::deserialize(engine, compiled) },
        || engine.precompile_component(bytes),
    )?
    .map_err(invalid)
}

/// The guest went over its memory bound (a failed `memory.grow`, which the
/// store's limiter turns into an error).
pub(crate) fn exceeded_memory(e: &wasmtime::Error) -> bool {
    format!("{e:?}").contains("growing memory")
}

/// A trap in words: the guest's last stderr (a panic message) and the trap.
pub(crate) fn describe_trap(e: &wasmtime::Error, stderr_tail: &str) -> String {
    let trap = match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::StackOverflow) => format!(
            "{} (the guest's call stack overflowed: recursion too deep or unbounded)",
            wasmtime::Trap::StackOverflow
        ),
        Some(wasmtime::Trap::MemoryOutOfBounds) => format!(
            "{} (in a Rust guest this is most often its stack overflowing linear memory: recursion too deep, or a large value on the stack)",
            wasmtime::Trap::MemoryOutOfBounds
        ),
        Some(trap) => trap.to_string(),
        // A host call's error: its own words, not the backtrace around it.
        None => e.root_cause().to_string(),
    };
    let panic = stderr_tail.rfind("panicked at").map(|i| {
        stderr_tail[i..]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    });
    match panic {
        Some(p) => format!("{p} ({trap})"),
        None if !stderr_tail.is_empty() => format!("{trap}; guest stderr: {stderr_tail}"),
        None => trap,
    }
}

/// The workflows' JSON Schemas, `{workflow: {"input", "output"}}`, read
/// through the SDK's reserved workflow name; none from a component built
/// before schemas existed (it knows no such workflow).
async fn read_schemas(
    store: &mut wasmtime::Store<HostState>,
    instance: &sandbox::WorkflowComponent,
) -> serde_json::Map<String, serde_json::Value> {
    let answer = instance
        .keel_workflow_guest()
        .call_run_workflow(&mut *store, SCHEMAS, "null")
        .await;
    match answer {
        Ok(Ok(json)) => serde_json::from_str(&json).unwrap_or_default(),
        _ => Default::default(),
    }
}

/// The workflow name the SDK answers schemas under.
const SCHEMAS: &str = "keel:schemas";
/// The entry of the schemas holding the steps' settings.
const STEPS: &str = "keel:steps";

async fn read_manifest(
    engine: &Engine,
    pre: &WorkflowComponentPre<HostState>,
    origin: &Path,
    max_memory: usize,
) -> Result<Manifest> {
    let mut store = wasmtime::Store::new(engine, HostState::manifest(max_memory));
    store.limiter(|s| &mut s.limits);
    store.set_fuel(10_000_000_000).map_err(wasm)?;
    let instance =
        pre.instantiate_async(&mut store)
            .await
            .map_err(|e| Error::InvalidComponent {
                path: origin.into(),
                reason: format!("it cannot be instantiated: {e:#}"),
            })?;
    let m = instance
        .keel_workflow_guest()
        .call_get_manifest(&mut store)
        .await
        .map_err(|e| Error::InvalidComponent {
            path: origin.into(),
            reason: format!("reading its manifest failed: {e:#}"),
        })?;
    let mut schemas = read_schemas(&mut store, &instance).await;
    let mut steps = schemas
        .remove(STEPS)
        .and_then(|s| match s {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    let mut schema = |workflow: &str, which: &str| {
        schemas
            .get_mut(workflow)
            .and_then(|s| s.get_mut(which))
            .map(serde_json::Value::take)
            .filter(|s| !s.is_null())
    };
    Ok(Manifest {
        sdk_version: m.sdk_version,
        workflows: m
            .workflows
            .into_iter()
            .map(|w| WorkflowInfo {
                input_schema: schema(&w.name, "input"),
                output_schema: schema(&w.name, "output"),
                schedule: schema(&w.name, "schedule").and_then(|s| serde_json::from_value(s).ok()),
                concurrency: schema(&w.name, "concurrency")
                    .and_then(|c| serde_json::from_value(c).ok()),
                timeout_ms: schema(&w.name, "timeout_ms").and_then(|t| t.as_u64()),
                durability: schema(&w.name, "durability")
                    .and_then(|d| serde_json::from_value(d).ok())
                    .unwrap_or_default(),
                description: schema(&w.name, "description")
                    .and_then(|d| d.as_str().map(str::to_string))
                    .filter(|d| !d.trim().is_empty()),
                name: w.name,
                idempotency: w.idempotency.map(|i| Idempotency {
                    key: i.key,
                    ttl_ms: i.ttl_ms,
                }),
                on_events: w.on_events,
            })
            .collect(),
        steps: m
            .steps
            .into_iter()
            .map(|s| StepInfo {
                rate_limit: steps
                    .get_mut(&s.name)
                    .and_then(|v| v.get_mut("rate_limit"))
                    .map(serde_json::Value::take)
                    .and_then(|r| serde_json::from_value(r).ok()),
                concurrency: steps
                    .get_mut(&s.name)
                    .and_then(|v| v.get_mut("concurrency"))
                    .map(serde_json::Value::take)
                    .and_then(|c| serde_json::from_value(c).ok()),
                retry_budget_ms: steps
                    .get(&s.name)
                    .and_then(|v| v.get("retry_budget_ms"))
                    .and_then(serde_json::Value::as_u64),
                name: s.name,
                retry: RetryPolicy {
                    max_retries: s.retry.max_retries,
                    initial_backoff_ms: s.retry.initial_backoff_ms,
                    backoff_factor: s.retry.backoff_factor,
                    max_backoff_ms: s.retry.max_backoff_ms,
                },
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_explains_a_trap() {
        let trap = wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached);
        let text = describe_trap(&trap, "noise\nthread panicked at src/lib.rs:3:\nboom");
        assert!(text.starts_with("panicked at src/lib.rs:3: boom"), "{text}");
        assert_eq!(describe_trap(&trap, ""), trap.to_string());
    }
}
