//! keel-host: runs durable workflows compiled to WebAssembly components.
//!
//! [`Keel`] owns a [`Store`] and a wasmtime engine. It loads components,
//! admits runs, drives them through activations of the deterministic
//! workflow sandbox, executes their steps in the step sandbox and journals
//! every call, so that a crash or a restart replays to the same state.

mod activation;
pub mod component;
mod engine;
mod error;
pub mod hooks;
pub mod idempotency;
pub mod journal;
pub mod payments;
pub mod replay;
mod sandbox;
mod steps;
pub mod store;

pub use component::{Idempotency, Loaded, Manifest, RetryPolicy, StepInfo, WorkflowInfo};
pub use engine::{Config, Keel, StartHook, StartOptions};
pub use error::{Error, Result};
pub use hooks::HookRecord;
pub use replay::{JournalFile, ReplayReport, Replayer, Verdict};
pub use sandbox::Grants;
pub use store::{
    Capabilities, EventOutcome, EventRecord, KeyHold, RunError, RunRecord, RunStatus, Store,
};
