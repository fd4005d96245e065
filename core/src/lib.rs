//! keel-core: the domain of keel, with no I/O.
//!
//! Everything here is plain data and pure functions: typed IDs and their
//! derivations, the journal model and its index, the records a store keeps,
//! component manifests with their retry policies, divergence reports and
//! verdicts, and the portable journal file format. It depends on no async
//! runtime, no storage engine and no wasm runtime, so every layer above can
//! use it and its logic is unit-tested here.

pub mod access;
pub mod bulk;
pub mod clock;
pub mod codec;
pub mod deployment;
pub mod divergence;
pub mod due;
pub mod error_kind;
pub mod file;
pub mod flow;
pub mod ids;
pub mod index;
pub mod journal;
pub mod json_diff;
pub mod lifecycle;
pub mod manifest;
pub mod patch;
pub mod query;
pub mod records;
pub mod restart;
pub mod retention;
pub mod run_query;
pub mod schedule;
pub mod stream;
pub mod testing;
pub mod timeline;
pub mod webhook;

pub use clock::Clock;
pub use deployment::{Deployment, GrantSpec, StepLimits};
pub use error_kind::{ErrorKind, ErrorReport};
pub use ids::{ComponentHash, HookToken, InvalidName, RunId, StepId};
pub use journal::{Entry, Fact, HookRegistration, StartOutcome};
pub use query::{RunCursor, RunFilter, RunPage};
pub use records::{
    Attributes, Capabilities, EventOutcome, EventRecord, HookRecord, KeyHold, Registration,
    RunError, RunRecord, RunStatus,
};
