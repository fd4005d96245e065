//! What a workflow or a step can learn about its own execution.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bindings::keel::workflow::{step_context, types, workflow_context};

/// Describes the running workflow; see [`workflow_metadata`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowMetadata {
    pub run_id: String,
    pub workflow_name: String,
    pub started_at: SystemTime,
    /// The schedule that fired this run, if a schedule did.
    pub schedule: Option<String>,
    /// The nominal time of that fire (not when it was decided).
    pub scheduled_at: Option<SystemTime>,
}

/// Describes the running step attempt; see [`step_metadata`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMetadata {
    /// Stable across attempts and replays: use it as an idempotency key.
    pub step_id: String,
    /// 1-based.
    pub attempt: u32,
    pub step_name: String,
    pub run_id: String,
    pub attempt_started_at: SystemTime,
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Sets the run's searchable attribute `key` to `value`: `keel runs list
/// --attr KEY=VALUE` finds the run by it. Journaled, so a replay sets the
/// same. Names are 1 to 64 characters of letters, digits, `_`, `.` and
/// `-`; values at most 256 bytes; a workflow sets at most 32 keys.
///
/// ```ignore
/// keel_sdk::set_attribute("stage", "charged")?;
/// ```
pub fn set_attribute(key: &str, value: &str) -> Result<(), crate::Error> {
    workflow_context::set_attribute(key, value)
        .map_err(|reason| crate::Error::Custom(format!("setting attribute `{key}`: {reason}")))
}

/// Sets the run's query `name` to `value`: what `keel runs query RUN
/// NAME` (or `GET /v1/runs/{id}/queries/{name}`) answers for the run as
/// its journal stands, read by replaying it. Never journaled: call it
/// whenever the state it shows changes, from workflow code only (a step's
/// own state is not the run's). Names are as attributes'; values are JSON
/// of at most 64 KiB; a workflow sets at most 32 queries.
///
/// ```ignore
/// keel_sdk::set_query("total", &total)?;
/// ```
pub fn set_query<T: serde::Serialize + ?Sized>(name: &str, value: &T) -> Result<(), crate::Error> {
    let json = serde_json::to_string(value)
        .map_err(|e| crate::Error::Custom(format!("setting query `{name}`: {e}")))?;
    workflow_context::set_query(name, &json)
        .map_err(|reason| crate::Error::Custom(format!("setting query `{name}`: {reason}")))
}

/// Ends this run and starts a run of the same workflow, on the same build,
/// with `input` in its place (Temporal's continue-as-new): the new run
/// takes over the start token, with the payloads this run did not take,
/// its attributes and its parent, whose wait for this run follows the new
/// one. A workflow that lives for months (an entity handling events)
/// continues as new every few thousand events so that no journal grows
/// past its bound. Never returns when it succeeds; the error it returns
/// (an input that is no JSON, or over the payload bound) changed nothing.
///
/// ```ignore
/// if seen % 1_000 == 0 {
///     return Err(keel_sdk::continue_as_new(&state));
/// }
/// ```
pub fn continue_as_new<T: serde::Serialize + ?Sized>(input: &T) -> crate::Error {
    let json = match serde_json::to_string(input) {
        Ok(json) => json,
        Err(e) => return crate::Error::Custom(format!("continuing as new: {e}")),
    };
    match workflow_context::continue_as_new(&json) {
        Ok(()) => crate::Error::Custom("continuing as new returned".into()),
        Err(reason) => crate::Error::Custom(format!("continuing as new: {reason}")),
    }
}

/// The running workflow's metadata. Only callable inside a workflow.
pub fn workflow_metadata() -> WorkflowMetadata {
    let m = workflow_context::metadata();
    let fire = fire_of(&m.run_id);
    WorkflowMetadata {
        schedule: fire.as_ref().map(|(name, _)| name.clone()),
        scheduled_at: fire.map(|(_, at)| at),
        run_id: m.run_id,
        workflow_name: m.workflow_name,
        started_at: from_ms(m.started_at_ms),
    }
}

/// The schedule and nominal time a fire's run ID names
/// (`NAME:20261201T090000Z`, milliseconds after a dot when not zero; the
/// host's `keel_core::schedule::fire_run_id` writes it).
fn fire_of(run_id: &str) -> Option<(String, SystemTime)> {
    let (name, stamp) = run_id.rsplit_once(':')?;
    let format = if stamp.contains('.') {
        "%Y%m%dT%H%M%S%.3fZ"
    } else {
        "%Y%m%dT%H%M%SZ"
    };
    let at = chrono::NaiveDateTime::parse_from_str(stamp, format).ok()?;
    let ms = u64::try_from(at.and_utc().timestamp_millis()).ok()?;
    Some((name.to_string(), from_ms(ms)))
}

/// The running step attempt's metadata. Only callable inside a step.
pub fn step_metadata() -> StepMetadata {
    let m = step_context::metadata();
    StepMetadata {
        step_id: m.step_id,
        attempt: m.attempt,
        step_name: m.step_name,
        run_id: m.run_id,
        attempt_started_at: from_ms(m.attempt_started_at_ms),
    }
}

pub use types::LogLevel;

/// Logs from a workflow, tagged by the host with the run ID and silent
/// while the workflow replays recorded history.
pub fn log(level: LogLevel, message: impl AsRef<str>) {
    workflow_context::log(level, message.as_ref());
}

/// Marks a change to a workflow's code, as Temporal's patching does.
///
/// Returns `true` in runs that reach this point with the new code, and
/// `false` while replaying a run recorded before the change, so both old and
/// new runs stay deterministic:
///
/// ```ignore
/// if keel_sdk::patched("send-receipt") {
///     send_receipt(order.clone()).await?;
/// }
/// ```
///
/// The decision is journaled. Once no run recorded before the change
/// remains, remove the branch and the call.
pub fn patched(change_id: &str) -> bool {
    workflow_context::patched(change_id)
}
