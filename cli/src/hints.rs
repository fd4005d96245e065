//! What the CLI adds to an error: the command or flag that fixes it, one
//! decision per [`ErrorKind`] in an exhaustive match, so a new kind needs
//! one here. The library's messages say what is wrong; this says what to
//! type. It serves a refused command and a run's own failure alike.

use keel_host::core::{ErrorKind, ErrorReport, RunError, RunId};

/// The hint for `error`, if the CLI has one.
pub fn hint(error: &ErrorReport) -> Option<String> {
    let id = |field: &str| error.id(field).unwrap_or("ID").to_string();
    use ErrorKind as K;
    Some(match error.kind {
        K::InvalidInput if error.id("workflow").is_some() => format!(
            "`keel inspect DEPLOYMENT` (or its .wasm) shows the input schema of `{}`",
            id("workflow")
        ),
        K::InvalidInput if error.id("token").is_some() => format!(
            "`keel hooks get {}` shows the payload schema the hook's workflow declared",
            id("token")
        ),
        K::InvalidInput => "pass a JSON value, for example --input '{\"id\": 1}'".into(),
        K::RunNotFound => "`keel runs list` shows the runs this store holds".into(),
        K::FuelExhausted => {
            "raise the bound with --workflow-fuel, and `keel runs retry` the run".into()
        }
        K::ActivationTimeout => {
            "raise the bound with --activation-timeout (seconds), and `keel runs retry` the run"
                .into()
        }
        K::MemoryExhausted => {
            "raise the bound with --max-memory (MiB), or a deployment's --step-memory, and `keel runs retry` the run".into()
        }
        K::WorkflowFailed if error.message.contains("timed out after") => {
            "a step ran out of time: raise --step-timeout, or the deployment's --attempt-timeout, and `keel runs retry` the run".into()
        }
        K::SandboxViolation => {
            "steps get capabilities from their deployment: `keel deployments grant NAME --allow-http HOST --allow-dir DIR --allow-env NAME` grants them where it stands, and `keel runs retry RUN_ID` retries a run that failed for want of one".into()
        }
        K::UnknownWorkflow | K::DeploymentNotFound => {
            "`keel deployments list` shows what is deployed; deploy with `keel deploy COMPONENT.wasm`, or start from a .wasm path".into()
        }
        K::OlderBuild => {
            "deploy it anyway with --force (starts by the name then run this older build), or change its grants where it stands with `keel deployments grant NAME|HASH --allow-http HOST`".into()
        }
        K::InvalidGrant => "write --allow-http as HOST or HOST:PORT, for example --allow-http api.example.com".into(),
        K::InvalidLimit => {
            "--step-memory takes MiB (1 to 4096), --attempt-timeout a duration of at most 30 days"
                .into()
        }
        K::InvalidName => {
            "use 1 to 128 letters, digits, `-`, `_`, `.` or `:` (not `.` or `..` alone)".into()
        }
        K::NeedsWorker => format!(
            "resume its hook with `keel hooks resume TOKEN`, or start `keel worker` and ask again: `keel runs result {} --wait`",
            id("run_id")
        ),
        K::BoundExceeded => {
            let flag = match bound_of(error).as_deref() {
                Some("max_payload_bytes") => "--max-payload-kib",
                Some("max_steps_in_flight") => "--max-steps-in-flight",
                _ => "--max-journal-entries",
            };
            format!(
                "raise the bound with {flag} if the run really needs it, and `keel runs retry` a run it failed"
            )
        }
        K::RunLive => format!(
            "pass --cancel to cancel {} and delete it once it has ended",
            id("run_id")
        ),
        K::NotRetryable if error.message.contains("no longer matches its journal") => format!(
            "deploy a build that matches, then `keel runs retry {} --on DEPLOYMENT`",
            id("run_id")
        ),
        K::NotRetryable | K::RunEnded => {
            format!("`keel runs show {}` shows how it ended", id("run_id"))
        }
        K::Unauthorized => "pass the server's token with --api-token or KEEL_API_TOKEN".into(),
        K::WebhookNotFound => "`keel webhooks list` lists the webhooks".into(),
        K::WebhookExists => format!(
            "delete it first with `keel webhooks delete {}` to create it anew",
            id("id")
        ),
        K::SignatureRefused => "the sender must sign with the webhook's secret; compare the secret given to `keel webhooks create` with the sender's".into(),
        K::Forbidden => "a scoped token grants one thing only; use the server's token, or mint one for this with `keel tokens create`".into(),
        K::StoreLocked => {
            "stop the other keel process, or pass another directory with --db".into()
        }
        K::StoreUnavailable if error.message.contains("(3D000)") => {
            "create the database first (`createdb NAME`, or scripts/postgres.sh for a local one)"
                .into()
        }
        K::StoreUnavailable if error.message.contains("no database connection") => {
            "check that PostgreSQL is running and the URL's host, port and credentials are right"
                .into()
        }
        K::StoreUnavailable => {
            "check that the store is reachable (for PostgreSQL, that it runs and the URL's host, port and credentials are right), then try again"
                .into()
        }
        K::StoreUnconfirmed => match error.id("run_id") {
            Some(run_id) => format!(
                "the write may or may not have landed: `keel runs get {run_id}` tells where the run stands"
            ),
            None => "the write may or may not have landed: read what it changed before trying again".into(),
        },
        K::CorruptRecord => {
            "if the store is corrupted, restore it from a backup or move it aside and start afresh"
                .into()
        }
        K::StorageFull => {
            "free space on the disk holding the store (--min-free-mib sets the reserve); a running `keel worker` carries on by itself, or start one to resume the runs".into()
        }
        K::StoreSchemaTooNew => "use the keel that wrote this store, or a newer one".into(),
        K::UnsafeCache => {
            "make the store's `compiled` directory yours alone (chmod 700), or pass another --db"
                .into()
        }
        K::IdempotencyCollision => format!(
            "read its result with `keel runs result {}`",
            id("existing_run_id")
        ),
        K::HookConflict => format!(
            "resume its hook with `keel hooks resume {}`, or read its result with `keel runs result {}`",
            id("token"),
            id("conflicting_run_id")
        ),
        K::HookNotFound => format!(
            "`keel hooks get {}` shows a hook kept for its retention",
            id("token")
        ),
        K::StartOutcomeUnknown => format!(
            "`keel runs get {}` tells whether it was admitted; a start with a --token can simply be run again: it is admitted once",
            id("run_id")
        ),
        K::DriveInterrupted => format!(
            "the run was recorded: `keel runs get {}` shows how it goes on, and a `keel worker` resumes it",
            id("run_id")
        ),
        K::ResumeOutcomeUnknown => format!(
            "`keel hooks get {}` names the hook's run, and `keel runs show RUN_ID` lists the payloads it received",
            id("token")
        ),
        K::OutcomeUnknown => format!(
            "`keel runs get {}` shows where it stands; asking again is safe",
            id("run_id")
        ),
        K::EventUnrecorded => {
            "`keel runs list` shows the runs it started; push it again only if they should start again".into()
        }
        K::StoreNotFound => "pass the store's directory with --db (or KEEL_DB)".into(),
        K::ScheduleNotFound => "`keel schedules list` lists the schedules".into(),
        K::ScheduleExists => format!(
            "`keel schedules show {}` shows it; delete it first to create it anew",
            id("name")
        ),
        K::ScheduleConflict => "read the schedule again and repeat the change".into(),
        K::JobNotFound => "`keel jobs list` lists the jobs".into(),
        K::StreamRefused if error.message.contains("max_stream_bytes") => {
            "raise the bound with --max-stream-mib, and `keel runs retry` the run".into()
        }
        K::StreamRefused => "`keel runs streams RUN_ID` lists the run's streams and which are closed".into(),
        K::QueryNotFound => format!(
            "`keel runs query {}` lists the queries its workflow set",
            id("run_id")
        ),
        K::PayloadNotFound => format!(
            "resume the hook with --payload-id {} to deliver it; `keel hooks get {}` shows the hook",
            id("payload_id"),
            id("token")
        ),
        K::JobConflict => format!(
            "a worker is carrying the job out; `keel jobs show {}` shows where it is",
            id("job_id")
        ),
        K::InvalidSchedule => {
            "write a cron expression of 5 fields (6 with seconds) and an IANA zone (--tz Europe/Paris), or an interval such as --every 5m".into()
        }
        K::Usage => "`keel --help` lists the commands and flags".into(),
        K::NonDeterminism => format!(
            "`keel replay` the run against the component it is pinned to; guard changed code with `keel_sdk::patched`, or start a new run (run {})",
            id("run_id")
        ),
        // The message says all there is; nothing to type.
        K::InvalidComponent
        | K::MissingExports
        | K::UnsupportedImport
        | K::ComponentNotFound
        | K::KeyExpression
        | K::RunExists
        | K::StoreCapability
        | K::StillRunning
        | K::Cancelled
        | K::DeadlineExceeded
        | K::JournalWrite
        | K::JournalFile
        | K::NotCrashTestable
        | K::GuestTrap
        | K::WorkflowFailed
        | K::Wasm
        | K::LeaseLost
        | K::JournalConflict
        | K::Storage
        | K::Io
        | K::InvalidRequest
        | K::CrossOrigin
        | K::HostNotAllowed
        | K::UnsupportedMediaType
        | K::PayloadTooLarge
        | K::NotFound
        | K::MethodNotAllowed
        | K::Internal
        | K::Other => return None,
    })
}

/// The bound a `bound_exceeded` error names: its `bound` ID, or for a run's
/// stored failure the `` `name` bound `` its message quotes.
fn bound_of(error: &ErrorReport) -> Option<String> {
    if let Some(bound) = error.id("bound") {
        return Some(bound.to_string());
    }
    let (_, rest) = error.message.split_once("over the `")?;
    rest.split_once("` bound").map(|(b, _)| b.to_string())
}

/// A run's own failure as a report the hints read: its kind (if keel knows
/// it), message and run ID.
pub fn run_failure(run_id: &RunId, error: &RunError) -> ErrorReport {
    ErrorReport {
        kind: ErrorKind::parse(&error.kind).unwrap_or(ErrorKind::Other),
        message: error.message.clone(),
        ids: vec![("run_id".into(), run_id.to_string())],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kind: ErrorKind, message: &str, ids: &[(&str, &str)]) -> ErrorReport {
        ErrorReport {
            kind,
            message: message.into(),
            ids: ids
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn hints_name_the_ids_of_the_error() {
        let h = hint(&report(
            ErrorKind::HookConflict,
            "",
            &[("conflicting_run_id", "r-1"), ("token", "order:42")],
        ))
        .unwrap();
        assert!(
            h.contains("keel hooks resume order:42") && h.contains("runs result r-1"),
            "{h}"
        );
        assert!(hint(&report(ErrorKind::Wasm, "", &[])).is_none());
    }

    #[test]
    fn a_runs_failure_over_a_bound_names_the_flag() {
        for (kind, message, flag) in [
            (ErrorKind::FuelExhausted, "", "--workflow-fuel"),
            (ErrorKind::MemoryExhausted, "", "--max-memory"),
            (
                ErrorKind::BoundExceeded,
                "the step's output is over the `max_payload_bytes` bound of 10",
                "--max-payload-kib",
            ),
            (
                ErrorKind::WorkflowFailed,
                "step `slow` failed: the attempt timed out after 1s; raise the step timeout",
                "--step-timeout",
            ),
        ] {
            let failure = RunError {
                kind: kind.as_str().into(),
                message: message.into(),
            };
            let h = hint(&run_failure(&RunId::from("r"), &failure)).unwrap();
            assert!(h.contains(flag), "{kind}: {h}");
        }
    }
}
