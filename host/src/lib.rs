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
pub mod journal;
pub mod payments;
pub mod replay;
mod sandbox;
mod steps;
pub mod store;

pub use component::{Loaded, Manifest, RetryPolicy, StepInfo};
pub use engine::{Config, Keel};
pub use error::{Error, Result};
pub use replay::{JournalFile, ReplayReport, Replayer, Verdict};
pub use sandbox::Grants;
pub use store::{RunError, RunRecord, RunStatus, Store};
