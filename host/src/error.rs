//! Typed errors of the keel engine. Each names what went wrong and what to
//! change, in the library's terms (its `Config` fields, its calls), and
//! carries the IDs a caller branches on. Front ends (the CLI, the HTTP API)
//! add their own advice by [`Error::kind`].

use std::path::PathBuf;

use keel_core::{ErrorKind, ErrorReport, HookToken, RunId};
use keel_store::StoreError;

/// A run's or a call's failure, as callers see it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "`{path}` is not a valid WebAssembly component: {reason}. Build the guest with `cargo build --release --target wasm32-wasip2` and use the `.wasm` it produces"
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

    /// An input, payload or argument that is not what it must be; the
    /// reason names it.
    #[error("{reason}")]
    InvalidInput { reason: String },

    /// A request that asks for what cannot be done as asked (a page over
    /// its bound, a bulk action without a filter).
    #[error("{reason}")]
    InvalidRequest { reason: String },

    /// The input is JSON of another shape than the workflow's input type.
    #[error("the input does not fit workflow `{workflow}`'s input type: {}", problems.join("; "))]
    InputMismatch {
        workflow: String,
        /// Each place it departs from the schema: `at /path: what`.
        problems: Vec<String>,
    },

    /// A resumed payload is JSON of another shape than the hook's payload
    /// type: nothing was delivered.
    #[error("the payload does not fit the payload type of hook `{token}` (held by run {run_id}): {}; nothing was delivered", problems.join("; "))]
    PayloadMismatch {
        token: String,
        run_id: RunId,
        /// Each place it departs from the schema: `at /path: what`.
        problems: Vec<String>,
    },

    #[error("no run `{run_id}` in this store")]
    RunNotFound { run_id: RunId },

    #[error(
        "run {run_id} is not deterministic: at journal position {position} the journal holds {recorded}, but the workflow now asks for {requested}. The workflow's code changed or reads something outside the journal; nothing after this position was executed"
    )]
    NonDeterminism {
        run_id: RunId,
        position: u32,
        recorded: String,
        requested: String,
    },

    #[error("run {run_id}: the workflow {reason}")]
    SandboxViolation { run_id: RunId, reason: String },

    #[error(
        "run {run_id}: the workflow used all its fuel ({fuel} units) on new work in one activation (replaying its history costs none), so it is probably stuck in a loop. If it really needs more CPU, raise the `workflow_fuel` bound"
    )]
    FuelExhausted { run_id: RunId, fuel: u64 },

    #[error(
        "run {run_id}: the workflow ran its own code for {ran_ms} ms without calling keel, over the `activation_timeout` bound of {bound_ms} ms, so it is probably stuck; a workflow only orchestrates, so move long computations into a #[step]. If it really needs longer, raise the bound"
    )]
    ActivationTimeout {
        run_id: RunId,
        ran_ms: u64,
        bound_ms: u64,
    },

    #[error(
        "run {run_id}: the guest went over its memory bound of {limit_bytes} bytes. If it really needs more, raise the `max_memory` bound"
    )]
    MemoryExhausted { run_id: RunId, limit_bytes: usize },

    #[error("run {run_id}: the workflow trapped: {message}")]
    GuestTrap { run_id: RunId, message: String },

    #[error("run {run_id}: the workflow failed: {message}")]
    WorkflowFailed { run_id: RunId, message: String },

    #[error(
        "the store has no component with hash {hash}; the run was started from a component that is no longer stored"
    )]
    ComponentNotFound { hash: String },

    #[error("`{path}` cannot be read as a journal: {reason}")]
    JournalFile { path: PathBuf, reason: String },

    #[error("run {run_id} is already in this store; journals are imported once")]
    RunExists { run_id: RunId },

    #[error("workflow `{workflow}`'s idempotency key `{expression}`: {reason}. No run was created")]
    KeyExpression {
        workflow: String,
        expression: String,
        reason: String,
    },

    #[error(
        "a run of `{workflow}` with idempotency key `{key}` was already admitted: run {existing_run_id}. Read that run's result instead of starting another"
    )]
    IdempotencyCollision {
        workflow: String,
        key: String,
        existing_run_id: RunId,
    },

    #[error(
        "run {conflicting_run_id} holds the token `{token}`, so no run was started. Resume that run's hook, or read its result"
    )]
    HookConflict {
        token: HookToken,
        conflicting_run_id: RunId,
    },

    #[error(
        "no active hook holds the token `{token}`: no run registered it, or its run ended or disposed of it"
    )]
    HookNotFound { token: HookToken },

    #[error(
        "hook `{token}` was delivered no payload with ID `{payload_id}` (its run may have ended and released the token)"
    )]
    PayloadNotFound {
        token: HookToken,
        payload_id: String,
    },

    #[error(
        "the payload with ID `{payload_id}` was delivered to hook `{token}` before, to run {run_id}, which is no longer stored (it was deleted); nothing was delivered now"
    )]
    DeliveredToDeletedRun {
        token: HookToken,
        payload_id: String,
        run_id: RunId,
    },

    #[error(
        "run {run_id} has no query `{name}`: its workflow set {}",
        if set.is_empty() { "none (a workflow sets one with set_query)".to_string() } else { set.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ") }
    )]
    QueryNotFound {
        run_id: RunId,
        name: String,
        /// The queries it set, by name.
        set: Vec<String>,
    },

    #[error(
        "run {run_id}'s journal does not replay on its build ({verdict}), so no query of it can be answered"
    )]
    QueryReplay { run_id: RunId, verdict: String },

    #[error("no schedule `{name}`")]
    ScheduleNotFound { name: String },

    #[error("no webhook `{id}`")]
    WebhookNotFound { id: String },

    #[error("a webhook with ID `{id}` exists already")]
    WebhookExists { id: String },

    #[error("webhook `{id}` refused the delivery: {reason}; nothing was delivered")]
    SignatureRefused { id: String, reason: String },

    #[error("a schedule named `{name}` exists already")]
    ScheduleExists { name: String },

    #[error("schedule `{name}` was changed by another writer meanwhile; nothing was changed")]
    ScheduleConflict { name: String },

    #[error("schedule `{name}`: {reason}")]
    InvalidSchedule { name: String, reason: String },

    #[error("no job `{job_id}`")]
    JobNotFound { job_id: String },

    #[error("job `{job_id}` was changed by another writer meanwhile; nothing was changed")]
    JobConflict { job_id: String },

    #[error(
        "the start of run {run_id} could not be confirmed ({reason}); it may or may not have been admitted. Retrying with the same token or key is safe: it becomes the run or is refused naming the run that holds it"
    )]
    StartOutcomeUnknown { run_id: RunId, reason: String },

    #[error(
        "run {run_id}: what was asked of it (its start, a payload, a retry) was recorded, but driving it here stopped when the store failed ({reason}); what it recorded is kept and a worker resumes it, so look the run up for its outcome instead of asking again"
    )]
    DriveInterrupted { run_id: RunId, reason: String },

    #[error(
        "the payload for hook `{token}` could not be confirmed ({reason}); it may or may not have been delivered. Its run's journal shows whether it arrived; resuming again without looking may deliver it twice"
    )]
    ResumeOutcomeUnknown { token: HookToken, reason: String },

    #[error(
        "the {operation} of run {run_id} could not be confirmed ({reason}); it may or may not have happened. Asking again is safe; the run's record shows where it stands"
    )]
    OutcomeUnknown {
        run_id: RunId,
        /// `cancel` or `retry`.
        operation: &'static str,
        reason: String,
    },

    #[error(
        "the event `{key}` started {} but its record could not be stored ({reason}); those runs are admitted. Pushing it again starts its subscribers again, unless their workflows declare an idempotency key",
        if started.is_empty() { "no run".to_string() } else { format!("runs {}", started.iter().map(RunId::as_str).collect::<Vec<_>>().join(", ")) }
    )]
    EventUnrecorded {
        key: String,
        /// The runs it started, admitted.
        started: Vec<RunId>,
        reason: String,
    },

    /// A run ID or name outside the safe set.
    #[error(transparent)]
    InvalidName(#[from] keel_core::InvalidName),

    /// A deployment's limit out of its range.
    #[error("the deployment's limit {0}")]
    InvalidLimit(#[from] keel_core::deployment::LimitOutOfRange),

    #[error(
        "this store does not support {capability}, so the start was refused before anything was written. Use a store that does, or start without that option"
    )]
    StoreCapability { capability: String },

    #[error("run {run_id} was cancelled")]
    Cancelled { run_id: RunId },

    /// A cancelled run's code went on past its cleanup's grace.
    #[error("run {run_id} was cancelled and {why}")]
    CancelGrace { run_id: RunId, why: String },

    #[error(
        "run {run_id}: writing its journal failed ({reason}); the run is left as it was for a worker to resume"
    )]
    JournalWrite { run_id: RunId, reason: String },

    /// No deployment answers a start: the workflow, name or hash is unknown.
    #[error(transparent)]
    Deployment(#[from] keel_core::deployment::ResolveError),

    /// A grant given to a deployment is malformed.
    #[error("invalid grant: {reason}")]
    InvalidGrant { reason: String },

    /// A deploy of a build its name had before another, which would make
    /// starts by the name run the older build.
    #[error(
        "build {hash} was deployed as `{name}` before build {latest}, the name's latest; deploying it again would move `{name}` back to older code"
    )]
    OlderBuild {
        name: String,
        hash: String,
        latest: String,
    },

    /// Something a run asked for is over one of its bounds.
    #[error("{what} is over the `{bound}` bound of {limit} (it needs {size}){}", run_id.as_ref().map(|r| format!("; run {r}")).unwrap_or_default())]
    BoundExceeded {
        run_id: Option<RunId>,
        /// The `RunLimits` field.
        bound: &'static str,
        limit: usize,
        size: usize,
        what: String,
    },

    /// A run that cannot be retried: it did not fail, or it failed in a
    /// way a retry would repeat.
    #[error("run {run_id} cannot be retried: {reason}")]
    NotRetryable { run_id: RunId, reason: String },

    /// A run that cannot be restarted or forked from the point asked.
    #[error("run {run_id} cannot be {action} there: {reason}")]
    NotRestartable {
        run_id: RunId,
        /// `restarted` or `forked`.
        action: &'static str,
        reason: String,
    },

    /// A run did not end within the time a caller waited for it.
    #[error(
        "run {run_id} did not end within {waited_ms} ms; it goes on, ask for its result again later"
    )]
    StillRunning { run_id: RunId, waited_ms: u64 },

    #[error(
        "run {run_id} is {status}: only runs that have ended are deleted, and nothing was deleted"
    )]
    RunLive { run_id: RunId, status: String },

    #[error("run {run_id} had already ended ({status}); nothing was {action}")]
    RunEnded {
        run_id: RunId,
        status: String,
        /// What was refused, as a past participle: `cancelled`, `paused`.
        action: &'static str,
    },

    #[error(transparent)]
    Store(StoreError),

    #[error("{0}")]
    Wasm(String),

    #[error("run {run_id} cannot be crash-tested: {reason}")]
    NotCrashTestable { run_id: RunId, reason: String },

    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "the component cache `{path}` is not safe to load native code from: {reason}. Point the cache at a directory only this user can write"
    )]
    UnsafeCache { path: PathBuf, reason: String },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

impl From<StoreError> for Error {
    /// The store's domain refusals become the engine's errors of the same
    /// name; failures of the storage itself stay [`Error::Store`].
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::RunNotFound { run_id } => Error::RunNotFound { run_id },
            StoreError::RunExists { run_id } => Error::RunExists { run_id },
            StoreError::ComponentNotFound { hash } => Error::ComponentNotFound { hash },
            StoreError::HookNotFound { token } => Error::HookNotFound { token },
            StoreError::ScheduleNotFound { name } => Error::ScheduleNotFound { name },
            StoreError::ScheduleExists { name } => Error::ScheduleExists { name },
            StoreError::WebhookExists { id } => Error::WebhookExists { id },
            StoreError::ScheduleConflict { name } => Error::ScheduleConflict { name },
            StoreError::JobNotFound { job_id } => Error::JobNotFound { job_id },
            StoreError::JobConflict { job_id } => Error::JobConflict { job_id },
            StoreError::HookConflict {
                token,
                conflicting_run_id,
            } => Error::HookConflict {
                token,
                conflicting_run_id,
            },
            StoreError::IdempotencyCollision {
                workflow,
                key,
                existing_run_id,
            } => Error::IdempotencyCollision {
                workflow,
                key,
                existing_run_id,
            },
            other => Error::Store(other),
        }
    }
}

impl Error {
    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidComponent { .. } => ErrorKind::InvalidComponent,
            Error::MissingExports { .. } => ErrorKind::MissingExports,
            Error::UnsupportedImport { .. } => ErrorKind::UnsupportedImport,
            Error::UnknownWorkflow { .. } => ErrorKind::UnknownWorkflow,
            Error::InvalidInput { .. }
            | Error::InputMismatch { .. }
            | Error::PayloadMismatch { .. } => ErrorKind::InvalidInput,
            Error::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            Error::RunNotFound { .. } => ErrorKind::RunNotFound,
            Error::NonDeterminism { .. } => ErrorKind::NonDeterminism,
            Error::SandboxViolation { .. } => ErrorKind::SandboxViolation,
            Error::FuelExhausted { .. } => ErrorKind::FuelExhausted,
            Error::ActivationTimeout { .. } => ErrorKind::ActivationTimeout,
            Error::MemoryExhausted { .. } => ErrorKind::MemoryExhausted,
            Error::GuestTrap { .. } => ErrorKind::GuestTrap,
            Error::WorkflowFailed { .. } => ErrorKind::WorkflowFailed,
            Error::ComponentNotFound { .. } => ErrorKind::ComponentNotFound,
            Error::JournalFile { .. } => ErrorKind::JournalFile,
            Error::RunExists { .. } => ErrorKind::RunExists,
            Error::KeyExpression { .. } => ErrorKind::KeyExpression,
            Error::IdempotencyCollision { .. } => ErrorKind::IdempotencyCollision,
            Error::JournalWrite { .. } => ErrorKind::JournalWrite,
            Error::HookConflict { .. } => ErrorKind::HookConflict,
            Error::HookNotFound { .. } => ErrorKind::HookNotFound,
            Error::PayloadNotFound { .. } => ErrorKind::PayloadNotFound,
            Error::DeliveredToDeletedRun { .. } => ErrorKind::RunNotFound,
            Error::QueryNotFound { .. } => ErrorKind::QueryNotFound,
            Error::QueryReplay { .. } => ErrorKind::NonDeterminism,
            Error::ScheduleNotFound { .. } => ErrorKind::ScheduleNotFound,
            Error::ScheduleExists { .. } => ErrorKind::ScheduleExists,
            Error::WebhookNotFound { .. } => ErrorKind::WebhookNotFound,
            Error::WebhookExists { .. } => ErrorKind::WebhookExists,
            Error::SignatureRefused { .. } => ErrorKind::SignatureRefused,
            Error::ScheduleConflict { .. } => ErrorKind::ScheduleConflict,
            Error::InvalidSchedule { .. } => ErrorKind::InvalidSchedule,
            Error::JobNotFound { .. } => ErrorKind::JobNotFound,
            Error::JobConflict { .. } => ErrorKind::JobConflict,
            Error::StartOutcomeUnknown { .. } => ErrorKind::StartOutcomeUnknown,
            Error::DriveInterrupted { .. } => ErrorKind::DriveInterrupted,
            Error::ResumeOutcomeUnknown { .. } => ErrorKind::ResumeOutcomeUnknown,
            Error::OutcomeUnknown { .. } => ErrorKind::OutcomeUnknown,
            Error::EventUnrecorded { .. } => ErrorKind::EventUnrecorded,
            Error::InvalidName(_) => ErrorKind::InvalidName,
            Error::InvalidLimit(_) => ErrorKind::InvalidLimit,
            Error::StoreCapability { .. } => ErrorKind::StoreCapability,
            Error::Cancelled { .. } | Error::CancelGrace { .. } => ErrorKind::Cancelled,
            Error::Deployment(keel_core::deployment::ResolveError::UnknownDeployment {
                ..
            }) => ErrorKind::DeploymentNotFound,
            Error::Deployment(_) => ErrorKind::UnknownWorkflow,
            Error::InvalidGrant { .. } => ErrorKind::InvalidGrant,
            Error::OlderBuild { .. } => ErrorKind::OlderBuild,
            Error::StillRunning { .. } => ErrorKind::StillRunning,
            Error::RunLive { .. } => ErrorKind::RunLive,
            Error::RunEnded { .. } => ErrorKind::RunEnded,
            Error::NotRetryable { .. } | Error::NotRestartable { .. } => ErrorKind::NotRetryable,
            Error::BoundExceeded { .. } => ErrorKind::BoundExceeded,
            Error::Store(e) => e.kind(),
            Error::NotCrashTestable { .. } => ErrorKind::NotCrashTestable,
            Error::Wasm(_) => ErrorKind::Wasm,
            Error::Io { .. } => ErrorKind::Io,
            Error::UnsafeCache { .. } => ErrorKind::UnsafeCache,
        }
    }

    /// The IDs this error carries, as `(field, value)` pairs.
    pub fn ids(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::ScheduleNotFound { name }
            | Error::ScheduleExists { name }
            | Error::ScheduleConflict { name }
            | Error::InvalidSchedule { name, .. } => vec![("name", name.clone())],
            Error::WebhookNotFound { id }
            | Error::WebhookExists { id }
            | Error::SignatureRefused { id, .. } => vec![("id", id.clone())],
            Error::JobNotFound { job_id } | Error::JobConflict { job_id } => {
                vec![("job_id", job_id.clone())]
            }
            Error::RunNotFound { run_id }
            | Error::RunExists { run_id }
            | Error::SandboxViolation { run_id, .. }
            | Error::FuelExhausted { run_id, .. }
            | Error::NotCrashTestable { run_id, .. }
            | Error::ActivationTimeout { run_id, .. }
            | Error::MemoryExhausted { run_id, .. }
            | Error::GuestTrap { run_id, .. }
            | Error::JournalWrite { run_id, .. }
            | Error::StartOutcomeUnknown { run_id, .. }
            | Error::DriveInterrupted { run_id, .. }
            | Error::OutcomeUnknown { run_id, .. }
            | Error::Cancelled { run_id }
            | Error::CancelGrace { run_id, .. }
            | Error::StillRunning { run_id, .. }
            | Error::RunLive { run_id, .. }
            | Error::RunEnded { run_id, .. }
            | Error::NotRetryable { run_id, .. }
            | Error::NotRestartable { run_id, .. }
            | Error::QueryReplay { run_id, .. }
            | Error::WorkflowFailed { run_id, .. } => vec![("run_id", run_id.to_string())],
            Error::NonDeterminism {
                run_id, position, ..
            } => vec![
                ("run_id", run_id.to_string()),
                ("position", position.to_string()),
            ],
            Error::IdempotencyCollision {
                existing_run_id,
                key,
                ..
            } => vec![
                ("existing_run_id", existing_run_id.to_string()),
                ("key", key.clone()),
            ],
            Error::HookConflict {
                token,
                conflicting_run_id,
            } => vec![
                ("conflicting_run_id", conflicting_run_id.to_string()),
                ("token", token.to_string()),
            ],
            Error::HookNotFound { token } | Error::ResumeOutcomeUnknown { token, .. } => {
                vec![("token", token.to_string())]
            }
            Error::PayloadNotFound { token, payload_id } => vec![
                ("payload_id", payload_id.clone()),
                ("token", token.to_string()),
            ],
            Error::QueryNotFound { run_id, name, .. } => {
                vec![("query", name.clone()), ("run_id", run_id.to_string())]
            }
            Error::DeliveredToDeletedRun {
                token,
                payload_id,
                run_id,
            } => vec![
                ("payload_id", payload_id.clone()),
                ("run_id", run_id.to_string()),
                ("token", token.to_string()),
            ],
            Error::InvalidName(e) => vec![("field", e.what.to_string())],
            Error::EventUnrecorded { key, started, .. } => vec![
                ("key", key.clone()),
                (
                    "started_run_ids",
                    started
                        .iter()
                        .map(RunId::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            ],
            Error::InvalidLimit(e) => vec![("field", e.field.to_string())],
            Error::InputMismatch { workflow, .. } => vec![("workflow", workflow.clone())],
            Error::PayloadMismatch { token, run_id, .. } => {
                vec![("token", token.clone()), ("run_id", run_id.to_string())]
            }
            Error::BoundExceeded { run_id, bound, .. } => {
                let mut ids = vec![("bound", bound.to_string())];
                if let Some(run_id) = run_id {
                    ids.push(("run_id", run_id.to_string()));
                }
                ids
            }
            Error::UnknownWorkflow { available, .. } => {
                vec![("available", available.join(","))]
            }
            Error::Deployment(e) => {
                use keel_core::deployment::ResolveError as R;
                match e {
                    R::UnknownWorkflow { workflow, .. } => vec![("workflow", workflow.clone())],
                    R::UnknownDeployment { deployment } => {
                        vec![("deployment", deployment.clone())]
                    }
                    R::NotExported {
                        deployment,
                        workflow,
                        ..
                    } => vec![
                        ("deployment", deployment.clone()),
                        ("workflow", workflow.clone()),
                    ],
                }
            }
            _ => Vec::new(),
        }
    }

    /// The error as it travels to a caller: kind, message and IDs.
    pub fn report(&self) -> ErrorReport {
        ErrorReport {
            kind: self.kind(),
            message: self.to_string(),
            ids: self
                .ids()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    /// Where an input or a payload departs from its schema, each as
    /// `(path, what)` (`("/note", "5 is not of type \"string\"")`); empty
    /// for other errors.
    pub fn problems(&self) -> Vec<(String, String)> {
        match self {
            Error::InputMismatch { problems, .. } | Error::PayloadMismatch { problems, .. } => {
                problems
                    .iter()
                    .map(|p| {
                        let p = p.strip_prefix("at ").unwrap_or(p);
                        match p.split_once(": ") {
                            Some((path, what)) => (path.to_string(), what.to_string()),
                            None => (String::new(), p.to_string()),
                        }
                    })
                    .collect()
            }
            _ => Vec::new(),
        }
    }

    /// The error is the storage's, not the run's: what is durable stays,
    /// and a worker resumes the run.
    pub fn is_storage(&self) -> bool {
        matches!(
            self,
            Error::Store(_) | Error::JournalWrite { .. } | Error::DriveInterrupted { .. }
        )
    }

    /// The error is a failure of the storage whose write may have landed
    /// (not a refusal the store decided): after a write, its outcome is
    /// unknown.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Store(
                StoreError::Backend { .. }
                    | StoreError::Unconfirmed { .. }
                    | StoreError::Unavailable { .. }
            )
        )
    }
}

/// keel's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_refusals_become_engine_errors_with_their_ids() {
        let e: Error = StoreError::HookConflict {
            token: "t".into(),
            conflicting_run_id: "r".into(),
        }
        .into();
        assert_eq!(e.kind(), ErrorKind::HookConflict);
        assert!(e.ids().contains(&("conflicting_run_id", "r".into())));
        let e: Error = StoreError::Locked {
            location: "/x".into(),
        }
        .into();
        assert_eq!(e.kind(), ErrorKind::StoreLocked);
        assert!(e.is_storage());
    }

    #[test]
    fn messages_give_no_command_line_advice() {
        let e = Error::FuelExhausted {
            run_id: "r".into(),
            fuel: 1,
        };
        assert!(!e.to_string().contains("--"), "{e}");
    }
}
