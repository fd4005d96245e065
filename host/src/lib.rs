//! keel-host: the engine that runs durable workflows compiled to
//! WebAssembly components.
//!
//! Layers, from the top: [`Keel`] (the engine: admission, driving,
//! workers; module `engine`) over any [`keel_store::Store`]; the
//! activation of a workflow (module `activation`), which matches the
//! workflow's calls against its journal and reaches the outside through
//! one narrow interface; step execution (module `steps`); the effects
//! before which a run's journal is made durable ([`effects`]); the wasm
//! [`Runtime`] and the two sandboxes (module `sandbox`), with the instance
//! slots activations and steps queue for (module `slots`); component
//! loading ([`component`]). The domain types are `keel-core`'s, storage is
//! `keel-store`'s.

mod activation;
mod clock;
mod compiled;
pub mod component;
mod config;
pub mod crashtest;
pub mod effects;
mod engine;
mod error;
pub mod keys;
pub mod observer;
pub mod replay;
mod runtime;
mod sandbox;
pub mod script;
pub mod simulate;
mod slots;
mod steps;
mod trace;

pub use clock::SystemClock;
pub use component::Loaded;
pub use config::{Config, RetentionConfig, RunLimits, defaults, user_cache_dir};
pub use engine::{
    BulkPreview, CHUNK_PAGE, ChildRun, DeploySpec, FORGET_GONE_AFTER_MS, ForkOptions,
    GONE_AFTER_LEASES, Keel, MAX_BACKFILL, MAX_PAYLOAD_ID, PURGE_BATCH, Purge, Received, Reply,
    SCAN_BUDGET, StartHook, StartOptions, Until, Watched, WorkSummary, WorkerState, archive_path,
};
pub use error::{Error, Result};
pub use observer::{AttemptOutcome, Observer};
pub use replay::{ReplayReport, Replayer};
pub use runtime::Runtime;
pub use sandbox::Grants;
pub use slots::MIN_INSTANCES;

/// The domain types, re-exported for embedders.
pub use keel_core as core;
/// The storage boundary, re-exported for embedders.
pub use keel_store as store;
