//! Loading components: validation against the contract, the on-disk cache
//! of compiled artifacts, and the manifest of workflows and steps.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::idempotency::KeyExpr;
use crate::sandbox::{self, HostState, WorkflowComponentPre};
use crate::{Error, Result};

/// The exported interface every keel component must have.
pub const GUEST_EXPORT: &str = "keel:workflow/guest@0.1.0";

/// How a step is retried.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RetryPolicy {
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
#[derive(Clone, Debug, Serialize)]
pub struct StepInfo {
    pub name: String,
    pub retry: RetryPolicy,
}

/// A workflow's TTL idempotency key, as declared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Idempotency {
    /// A CEL expression over `input` and `additional_metadata`.
    pub key: String,
    pub ttl_ms: u64,
}

/// A workflow as the manifest declares it.
#[derive(Clone, Debug, Serialize)]
pub struct WorkflowInfo {
    pub name: String,
    pub idempotency: Option<Idempotency>,
    /// Event keys that start a run of it.
    pub on_events: Vec<String>,
}

/// What a component exports.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub sdk_version: String,
    pub workflows: Vec<WorkflowInfo>,
    pub steps: Vec<StepInfo>,
}

/// A validated, compiled component, ready to instantiate in either sandbox.
pub struct Loaded {
    /// SHA-256 of the component's bytes.
    pub hash: String,
    pub manifest: Manifest,
    /// Non-deterministic imports, stubbed out for workflows.
    pub stubbed_imports: Vec<String>,
    /// Compiled idempotency key expressions, by workflow.
    pub(crate) keys: HashMap<String, KeyExpr>,
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
    pub fn step(&self, name: &str) -> Option<&StepInfo> {
        self.manifest.steps.iter().find(|s| s.name == name)
    }

    pub fn step_names(&self) -> Vec<String> {
        self.manifest.steps.iter().map(|s| s.name.clone()).collect()
    }

    /// Fails with `UnknownWorkflow` (listing the ones that exist) unless
    /// the component exports `name`.
    pub fn check_workflow(&self, name: &str) -> Result<&WorkflowInfo> {
        self.manifest
            .workflows
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| Error::UnknownWorkflow {
                name: name.to_string(),
                available: self
                    .manifest
                    .workflows
                    .iter()
                    .map(|w| w.name.clone())
                    .collect(),
            })
    }

    /// The idempotency key expression of `workflow`, if it declares one.
    pub fn key(&self, workflow: &str) -> Option<&KeyExpr> {
        self.keys.get(workflow)
    }
}

/// The content hash of a component's bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
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
    let component = compile_cached(engine, cache_dir, origin, &hash, bytes)?;
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
    Ok(Loaded {
        hash,
        manifest,
        keys,
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
    if artifact.exists() {
        // SAFETY: the artifact was written by `precompile_component` of an
        // engine with the same compatibility hash, into the store's own cache.
        if let Ok(component) = unsafe { Component::deserialize_file(engine, &artifact) } {
            return Ok(component);
        }
    }
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
    let compiled = engine.precompile_component(bytes).map_err(invalid)?;
    if let Err(e) = write_artifact(cache_dir, &artifact, &compiled) {
        tracing::warn!(path = %artifact.display(), error = %e, "could not cache the compiled component; it will be compiled again next time");
    }
    // SAFETY: produced just above by this engine.
    unsafe { Component::deserialize(engine, &compiled) }.map_err(invalid)
}

/// Writes a compiled artifact under a name unique to this process and call,
/// then renames it into place, so concurrent loaders (threads or processes
/// sharing the cache) never see or clobber a half-written file.
fn write_artifact(cache_dir: &Path, artifact: &Path, compiled: &[u8]) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::fs::create_dir_all(cache_dir)?;
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = artifact.with_extension(format!("{}.{n}.tmp", std::process::id()));
    std::fs::write(&tmp, compiled)?;
    std::fs::rename(&tmp, artifact).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

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
    Ok(Manifest {
        sdk_version: m.sdk_version,
        workflows: m
            .workflows
            .into_iter()
            .map(|w| WorkflowInfo {
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
