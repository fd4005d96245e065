//! Typed errors of the keel host. Each names what went wrong and how to fix
//! it, and carries the IDs a caller branches on.

use std::path::PathBuf;

/// A run's or a call's failure, as callers see it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "`{path}` is not a valid WebAssembly component: {reason}. Build the guest with `cargo build --release --target wasm32-wasip2` and pass the `.wasm` it produces"
    )]
    InvalidComponent { path: PathBuf, reason: String },

    #[error(
        "`{path}` does not export `{missing}`, so it is not a keel component. Depend on `keel-sdk` and end the crate with `keel_sdk::component!(workflows = [...], steps = [...])`"
    )]
    MissingExports { path: PathBuf, missing: String },

    #[error(
        "`{path}` imports `{import}`, which the keel host cannot provide. Remove the dependency that needs it; keel provides WASI 0.2 (cli, clocks, random, io, filesystem, sockets) and wasi:http"
    )]
    UnsupportedImport { path: PathBuf, import: String },

    #[error(
        "no workflow `{name}` in this component; it exports: {}",
        list_or_none(available)
    )]
    UnknownWorkflow {
        name: String,
        available: Vec<String>,
    },

    #[error(
        "the input is not valid JSON: {reason}. Pass a JSON value, for example --input '{{\"id\": 1}}'"
    )]
    InvalidInput { reason: String },

    #[error("no run `{run_id}` in this store. `keel runs list` shows the runs it holds")]
    RunNotFound { run_id: String },

    #[error(
        "run {run_id} is not deterministic: at journal position {position} the journal holds {recorded}, but the workflow now asks for {requested}. The workflow's code changed or reads something outside the journal; nothing after this position was executed"
    )]
    NonDeterminism {
        run_id: String,
        position: u32,
        recorded: String,
        requested: String,
    },

    #[error("run {run_id}: the workflow {reason}")]
    SandboxViolation { run_id: String, reason: String },

    #[error(
        "run {run_id}: the workflow used all its fuel ({fuel} units) in one activation, so it is probably stuck in a loop. If it really needs more CPU, raise the bound with --workflow-fuel"
    )]
    FuelExhausted { run_id: String, fuel: u64 },

    #[error(
        "run {run_id}: the guest went over its memory bound of {limit_bytes} bytes. If it really needs more, raise the bound with --max-memory"
    )]
    MemoryExhausted { run_id: String, limit_bytes: usize },

    #[error("run {run_id}: the workflow trapped: {message}")]
    GuestTrap { run_id: String, message: String },

    #[error("run {run_id}: the workflow failed: {message}")]
    WorkflowFailed { run_id: String, message: String },

    #[error(
        "the store at `{path}` is locked by another keel process. Stop that process, or pass another directory with --db"
    )]
    StoreLocked { path: PathBuf },

    #[error(
        "the store at `{path}` cannot be opened: {reason}. If it is corrupted, restore it from a backup or move it aside and start afresh"
    )]
    StoreUnavailable { path: PathBuf, reason: String },

    #[error(
        "the store holds a record it cannot decode ({what}): {reason}. The store was written by another keel version or is corrupted"
    )]
    CorruptRecord { what: String, reason: String },

    #[error(
        "the store has no component with hash {hash}; the run was started from a component that is no longer stored"
    )]
    ComponentNotFound { hash: String },

    #[error("`{path}` cannot be read as a journal: {reason}")]
    JournalFile { path: PathBuf, reason: String },

    #[error("run {run_id} is already in this store; journals are imported once")]
    RunExists { run_id: String },

    #[error("workflow `{workflow}`'s idempotency key `{expression}`: {reason}. No run was created")]
    KeyExpression {
        workflow: String,
        expression: String,
        reason: String,
    },

    #[error(
        "a run of `{workflow}` with idempotency key `{key}` was already admitted: run {existing_run_id}. Read its result with `keel runs result {existing_run_id}`"
    )]
    IdempotencyCollision {
        workflow: String,
        key: String,
        existing_run_id: String,
    },

    #[error(
        "run {conflicting_run_id} holds the token `{token}`, so no run was started. Resume that run's hook with `keel hooks resume {token}`, or read its result with `keel runs result {conflicting_run_id}`"
    )]
    HookConflict {
        token: String,
        conflicting_run_id: String,
    },

    #[error(
        "no active hook holds the token `{token}`: no run registered it, or its run ended or disposed of it. `keel hooks get {token}` shows a hook kept for its retention"
    )]
    HookNotFound { token: String },

    #[error(
        "the start of run {run_id} could not be confirmed ({reason}); it may or may not have been admitted. Retrying with the same token or key is safe: it becomes the run or is refused naming the run that holds it"
    )]
    StartOutcomeUnknown { run_id: String, reason: String },

    #[error(
        "this store does not support {capability}, so the start was refused before anything was written. Use a store that does, or start without that option"
    )]
    StoreCapability { capability: String },

    #[error("run {run_id} was cancelled")]
    Cancelled { run_id: String },

    #[error(
        "run {run_id}: writing its journal failed ({reason}); the run is left as it was for a worker to resume"
    )]
    JournalWrite { run_id: String, reason: String },

    #[error("storage error: {0}")]
    Storage(#[from] sled::Error),

    #[error("{0}")]
    Wasm(String),

    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl Error {
    /// The error's kind in snake case, as the CLI's `--json` prints it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidComponent { .. } => "invalid_component",
            Error::MissingExports { .. } => "missing_exports",
            Error::UnsupportedImport { .. } => "unsupported_import",
            Error::UnknownWorkflow { .. } => "unknown_workflow",
            Error::InvalidInput { .. } => "invalid_input",
            Error::RunNotFound { .. } => "run_not_found",
            Error::NonDeterminism { .. } => "non_determinism",
            Error::SandboxViolation { .. } => "sandbox_violation",
            Error::FuelExhausted { .. } => "fuel_exhausted",
            Error::MemoryExhausted { .. } => "memory_exhausted",
            Error::GuestTrap { .. } => "guest_trap",
            Error::WorkflowFailed { .. } => "workflow_failed",
            Error::StoreLocked { .. } => "store_locked",
            Error::StoreUnavailable { .. } => "store_unavailable",
            Error::CorruptRecord { .. } => "corrupt_record",
            Error::ComponentNotFound { .. } => "component_not_found",
            Error::JournalFile { .. } => "journal_file",
            Error::RunExists { .. } => "run_exists",
            Error::KeyExpression { .. } => "key_expression",
            Error::IdempotencyCollision { .. } => "idempotency_collision",
            Error::JournalWrite { .. } => "journal_write",
            Error::HookConflict { .. } => "hook_conflict",
            Error::HookNotFound { .. } => "hook_not_found",
            Error::StartOutcomeUnknown { .. } => "start_outcome_unknown",
            Error::StoreCapability { .. } => "store_capability",
            Error::Cancelled { .. } => "cancelled",
            Error::Storage(_) => "storage",
            Error::Wasm(_) => "wasm",
            Error::Io { .. } => "io",
        }
    }

    /// The IDs this error carries, as `(field, value)` pairs.
    pub fn ids(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::RunNotFound { run_id }
            | Error::RunExists { run_id }
            | Error::SandboxViolation { run_id, .. }
            | Error::FuelExhausted { run_id, .. }
            | Error::MemoryExhausted { run_id, .. }
            | Error::GuestTrap { run_id, .. }
            | Error::JournalWrite { run_id, .. }
            | Error::StartOutcomeUnknown { run_id, .. }
            | Error::Cancelled { run_id }
            | Error::WorkflowFailed { run_id, .. } => vec![("run_id", run_id.clone())],
            Error::NonDeterminism {
                run_id, position, ..
            } => vec![
                ("run_id", run_id.clone()),
                ("position", position.to_string()),
            ],
            Error::IdempotencyCollision {
                existing_run_id,
                key,
                ..
            } => vec![
                ("existing_run_id", existing_run_id.clone()),
                ("key", key.clone()),
            ],
            Error::HookConflict {
                token,
                conflicting_run_id,
            } => vec![
                ("conflicting_run_id", conflicting_run_id.clone()),
                ("token", token.clone()),
            ],
            Error::HookNotFound { token } => vec![("token", token.clone())],
            Error::UnknownWorkflow { available, .. } => {
                vec![("available", available.join(","))]
            }
            _ => Vec::new(),
        }
    }
}

impl From<postcard::Error> for Error {
    fn from(e: postcard::Error) -> Self {
        Error::CorruptRecord {
            what: "postcard record".into(),
            reason: e.to_string(),
        }
    }
}

/// keel's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
