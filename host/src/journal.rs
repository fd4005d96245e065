//! The journal: the ordered, append-only record of a run.
//!
//! Commands (what the workflow asked for) and completions (what it was
//! given) share one sequence. Commands are matched on replay by their
//! command ID, the order in which the workflow issued them; completions are
//! delivered in journal order. Every record carries [`FORMAT_VERSION`].

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The version of the journal's record format.
pub const FORMAT_VERSION: u16 = 1;

/// One journal entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the run's journal, from 0.
    pub seq: u64,
    /// When the entry was appended, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub event: Event,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// The run was admitted.
    RunStarted {
        workflow: String,
        input: String,
    },
    /// The workflow scheduled a step.
    StepScheduled {
        command: u32,
        name: String,
        input: String,
        step_id: String,
        /// Digest of the step's name and input, to detect divergence.
        digest: String,
    },
    /// An attempt is about to run; durable before it runs.
    StepAttemptStarted {
        command: u32,
        attempt: u32,
    },
    /// An attempt failed and will be retried no sooner than `retry_at_ms`.
    StepAttemptFailed {
        command: u32,
        attempt: u32,
        error: String,
        retry_at_ms: u64,
    },
    StepCompleted {
        command: u32,
        output: String,
    },
    StepFailed {
        command: u32,
        error: String,
        fatal: bool,
        attempts: u32,
    },
    TimerScheduled {
        command: u32,
        fire_at_ms: u64,
    },
    /// The workflow passed `patched(change_id)` with the new code.
    PatchMarker {
        command: u32,
        change_id: String,
    },
    TimerFired {
        command: u32,
    },
    RunCompleted {
        output: String,
    },
    RunFailed {
        kind: String,
        error: String,
    },
    /// The workflow created a hook; the store's answer is recorded with it.
    HookCreated {
        command: u32,
        token: String,
        force: bool,
        registration: HookRegistration,
    },
    /// The workflow awaits the `index`-th payload of the hook created by
    /// command `hook`.
    HookNext {
        command: u32,
        hook: u32,
        token: String,
        index: u64,
    },
    HookReceived {
        command: u32,
        payload: String,
    },
    /// Another run took the token over; the awaited payload never comes.
    HookForceClaimed {
        command: u32,
        claimed_by_run_id: String,
    },
    /// The workflow disposed of the hook created by command `hook`.
    HookDisposed {
        command: u32,
        hook: u32,
    },
    /// The workflow read another run's status.
    RunStatusRead {
        command: u32,
        run_id: String,
        status: String,
    },
    /// The workflow waits for another run to end.
    RunAwaited {
        command: u32,
        run_id: String,
    },
    /// An awaited run ended.
    AwaitedRunEnded {
        command: u32,
        status: String,
        output: Option<String>,
        error: Option<String>,
    },
    /// The workflow started a run; `outcome` is its run ID, or the run that
    /// held the token.
    WorkflowStarted {
        command: u32,
        workflow: String,
        input: String,
        token: Option<String>,
        outcome: StartOutcome,
    },
    /// The run was cancelled.
    RunCancelled,
}

/// How the store answered a workflow's `create_hook`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HookRegistration {
    Registered,
    BoundToStart,
    Conflict { owner_run_id: String },
}

/// How a start from a workflow ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartOutcome {
    Started { run_id: String },
    HookConflict { conflicting_run_id: String },
    Refused { reason: String },
}

impl Event {
    /// The command this event schedules, if it is a command.
    pub fn command(&self) -> Option<u32> {
        match self {
            Event::StepScheduled { command, .. }
            | Event::TimerScheduled { command, .. }
            | Event::PatchMarker { command, .. }
            | Event::HookCreated { command, .. }
            | Event::HookNext { command, .. }
            | Event::HookDisposed { command, .. }
            | Event::RunStatusRead { command, .. }
            | Event::RunAwaited { command, .. }
            | Event::WorkflowStarted { command, .. } => Some(*command),
            _ => None,
        }
    }

    /// The command this event completes, if it is a completion.
    pub fn completes(&self) -> Option<u32> {
        match self {
            Event::StepCompleted { command, .. }
            | Event::StepFailed { command, .. }
            | Event::TimerFired { command }
            | Event::HookReceived { command, .. }
            | Event::HookForceClaimed { command, .. }
            | Event::AwaitedRunEnded { command, .. } => Some(*command),
            _ => None,
        }
    }

    /// The event's kind, as `keel runs show` prints it.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run_started",
            Event::StepScheduled { .. } => "step_scheduled",
            Event::StepAttemptStarted { .. } => "step_attempt_started",
            Event::StepAttemptFailed { .. } => "step_attempt_failed",
            Event::StepCompleted { .. } => "step_completed",
            Event::StepFailed { .. } => "step_failed",
            Event::TimerScheduled { .. } => "timer_scheduled",
            Event::PatchMarker { .. } => "patch_marker",
            Event::TimerFired { .. } => "timer_fired",
            Event::RunCompleted { .. } => "run_completed",
            Event::RunFailed { .. } => "run_failed",
            Event::HookCreated { .. } => "hook_created",
            Event::HookNext { .. } => "hook_next",
            Event::HookReceived { .. } => "hook_received",
            Event::HookForceClaimed { .. } => "hook_force_claimed",
            Event::HookDisposed { .. } => "hook_disposed",
            Event::RunStatusRead { .. } => "run_status_read",
            Event::RunAwaited { .. } => "run_awaited",
            Event::AwaitedRunEnded { .. } => "awaited_run_ended",
            Event::WorkflowStarted { .. } => "workflow_started",
            Event::RunCancelled => "run_cancelled",
        }
    }

    /// A one-line description of a command, for divergence reports.
    pub fn describe(&self) -> String {
        match self {
            Event::StepScheduled { name, input, .. } => {
                format!("step `{name}` with input {}", excerpt(input, 80))
            }
            Event::TimerScheduled { fire_at_ms, .. } => format!("a timer due at {fire_at_ms} ms"),
            Event::PatchMarker { change_id, .. } => format!("patch marker `{change_id}`"),
            Event::HookCreated { token, force, .. } => {
                let force = if *force { " with force" } else { "" };
                format!("hook `{token}`{force}")
            }
            Event::HookNext { token, index, .. } => format!("payload {index} of hook `{token}`"),
            Event::HookDisposed { hook, .. } => format!("disposal of the hook of command {hook}"),
            Event::RunStatusRead { run_id, .. } => format!("the status of run {run_id}"),
            Event::RunAwaited { run_id, .. } => format!("the end of run {run_id}"),
            Event::WorkflowStarted {
                workflow, input, ..
            } => format!("a run of `{workflow}` with input {}", excerpt(input, 80)),
            other => other.kind().to_string(),
        }
    }
}

/// A record as stored: the format version beside the entry.
#[derive(Serialize, Deserialize)]
struct Record {
    version: u16,
    entry: Entry,
}

/// Encodes an entry with the current format version.
pub fn encode(entry: &Entry) -> Vec<u8> {
    postcard::to_stdvec(&Record {
        version: FORMAT_VERSION,
        entry: entry.clone(),
    })
    .expect("journal entries always encode")
}

/// Decodes a stored entry, refusing other format versions.
pub fn decode(bytes: &[u8]) -> crate::Result<Entry> {
    let (version, _) = postcard::take_from_bytes::<u16>(bytes)?;
    if version != FORMAT_VERSION {
        return Err(crate::Error::CorruptRecord {
            what: "journal entry".into(),
            reason: format!(
                "format version {version}, but this keel reads version {FORMAT_VERSION}"
            ),
        });
    }
    Ok(postcard::from_bytes::<Record>(bytes)?.entry)
}

/// The divergence digest of a step call.
pub fn step_digest(name: &str, input: &str) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(input.as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// A step's ID: the run ID and the step's command position. Stable across
/// attempts and replays, unique across runs.
pub fn step_id(run_id: &str, command: u32) -> String {
    format!("{run_id}-{command}")
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_other_versions_are_refused() {
        let entry = Entry {
            seq: 3,
            at_ms: 42,
            event: Event::StepCompleted {
                command: 1,
                output: "\"ok\"".into(),
            },
        };
        let bytes = encode(&entry);
        assert_eq!(decode(&bytes).unwrap(), entry);

        let mut other = bytes.clone();
        other[0] = 9;
        let err = decode(&other).unwrap_err();
        assert!(err.to_string().contains("format version 9"), "{err}");
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let bytes = encode(&Entry {
            seq: 0,
            at_ms: 1,
            event: Event::RunStarted {
                workflow: "w".into(),
                input: "{}".into(),
            },
        });
        assert!(decode(&bytes[..bytes.len() / 2]).is_err());
    }
}
