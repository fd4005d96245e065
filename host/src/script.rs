//! A run moved on by a script, as tests drive one: each time it waits, the
//! script's next payload is resumed into its hook once the run waits on
//! that token (after a delay on the engine's manual clock, if the payload
//! says so), or the run is cancelled, paused or resumed; timers and retry backoffs pass at
//! once, by moving the clock to when they are due. `keel test` scenarios
//! and the crash harness drive runs this way, so time a workflow sleeps
//! costs a test nothing.
//!
//! The engine driving a scripted run must read the manual clock and park
//! every wait (`park_limit` zero), so that each wait comes back here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use keel_core::clock::ManualClock;
use keel_core::timeline::WaitingOn;
use keel_core::{Clock, RunRecord};

use crate::{Keel, Result};

/// Most passes in a row that find a run due at once and leave it waiting.
const MAX_DUE_AT_ONCE: u32 = 1000;

/// One step of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scripted {
    /// Resume the hook holding `token` with `payload` (JSON), `after` the
    /// run started waiting on it (at once when `None`); a timer due sooner
    /// fires first.
    Resume {
        token: String,
        payload: String,
        after: Option<Duration>,
    },
    /// Cancel the run, with `reason`, once it waits on nothing that comes
    /// by itself.
    Cancel { reason: String },
    /// Pause the run as soon as it waits.
    Pause,
    /// Resume the paused run.
    Unpause,
    /// As soon as the run waits, deploy the component at `to` as the
    /// next build of [`UPGRADED_NAME`] (the run's own deployment) and
    /// upgrade that deployment's live runs to it, carrying the job out.
    Upgrade { to: std::path::PathBuf },
}

/// The deployment name a scripted upgrade moves runs within.
pub const UPGRADED_NAME: &str = "scripted";

/// Deploys the component at `path` as the next build of
/// [`UPGRADED_NAME`], granting its steps what the engine grants (the test's
/// `--allow-*`): a build the test moves a run to reaches what the run's
/// first build reached, or the run would fail for want of a grant the
/// test gave.
pub(crate) async fn deploy_upgraded(
    keel: &Keel,
    path: &std::path::Path,
) -> Result<std::sync::Arc<crate::component::Loaded>> {
    let bytes = std::fs::read(path).map_err(|source| crate::Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let spec = crate::DeploySpec {
        name: Some(UPGRADED_NAME.into()),
        grants: Some(keel.default_grants().spec()),
        ..crate::DeploySpec::default()
    };
    Ok(keel.deploy(path, &bytes, spec).await?.1)
}

/// How a scripted drive ended.
#[derive(Debug)]
pub enum Driven {
    /// The run ended.
    Ended(RunRecord),
    /// The run waits on `waits` and nothing due or left in the script
    /// moves it on.
    Stuck {
        run: RunRecord,
        waits: Vec<WaitingOn>,
    },
}

/// Drives `run_id` until it ends or nothing moves it on, taking the steps
/// of `script` from `taken` on (and counting those it takes there, so a
/// run recovered after a crash goes on with the script where it was).
pub async fn drive_scripted(
    keel: &Keel,
    clock: &ManualClock,
    run_id: &str,
    script: &[Scripted],
    taken: &AtomicUsize,
) -> Result<Driven> {
    // Passes that found the run due at once, in a row: a run that stays
    // due without moving on is stuck, not looped on forever.
    let mut due_at_once = 0;
    loop {
        let run = keel.drive(run_id).await?;
        if run.status.is_final() {
            return Ok(Driven::Ended(run));
        }
        let since = clock.now_ms();
        let waits = keel.waiting_on(&run).await?;
        let due = run.wake_at_ms;
        let next = script.get(taken.load(Ordering::SeqCst));
        let comes_at = next.and_then(|step| match step {
            Scripted::Resume { token, after, .. } => {
                let awaited = waits
                    .iter()
                    .any(|w| matches!(w, WaitingOn::Hook { token: t } if t == token));
                // A token the run does not wait on itself (a child's, or
                // a start hook not yet bound) gets its payload once
                // nothing else comes.
                let at = since + after.map_or(0, |a| a.as_millis() as u64);
                (awaited || due.is_none()).then_some(at)
            }
            Scripted::Cancel { .. } => due.is_none().then_some(since),
            Scripted::Pause | Scripted::Unpause | Scripted::Upgrade { .. } => Some(since),
        });
        match (comes_at, due) {
            (Some(at), due) if due.is_none_or(|d| at < d) => {
                clock.advance_to(at);
                take(keel, run_id, next.expect("a step comes")).await?;
                taken.fetch_add(1, Ordering::SeqCst);
                due_at_once = 0;
            }
            (_, Some(due)) if due > since || due_at_once < MAX_DUE_AT_ONCE => {
                due_at_once = if due > since { 0 } else { due_at_once + 1 };
                clock.advance_to(due);
                continue;
            }
            _ => return Ok(Driven::Stuck { run, waits }),
        }
    }
}

/// Drives `run_id` as [`drive_scripted`] does and, while the run it drove
/// continued as new, the run that continues it (`RunId::continued`), each
/// with the rest of the script, until a link of the chain ends otherwise
/// or is stuck. Returns how the last link ended and every link that
/// ended, the first first.
pub async fn drive_chain(
    keel: &Keel,
    clock: &ManualClock,
    run_id: &str,
    script: &[Scripted],
    taken: &AtomicUsize,
) -> Result<(Driven, Vec<RunRecord>)> {
    let mut links = Vec::new();
    let mut next = keel_core::RunId::from(run_id);
    loop {
        match drive_scripted(keel, clock, next.as_str(), script, taken).await? {
            Driven::Ended(run) if run.status == keel_core::RunStatus::Continued => {
                next = run.run_id.continued();
                links.push(run);
            }
            Driven::Ended(run) => {
                links.push(run.clone());
                return Ok((Driven::Ended(run), links));
            }
            stuck => return Ok((stuck, links)),
        }
    }
}

/// Takes one step of a script.
async fn take(keel: &Keel, run_id: &str, step: &Scripted) -> Result<()> {
    match step {
        Scripted::Resume { token, payload, .. } => {
            keel.resume_hook(token, payload).await?;
        }
        Scripted::Cancel { reason } => {
            keel.cancel(run_id, reason, "script").await?;
        }
        Scripted::Pause => {
            keel.pause_run(run_id, "script").await?;
        }
        Scripted::Unpause => {
            keel.resume_run(run_id, "script").await?;
        }
        Scripted::Upgrade { to } => {
            deploy_upgraded(keel, to).await?;
            let job = keel
                .submit_upgrade(UPGRADED_NAME, UPGRADED_NAME, false, None)
                .await?;
            keel.run_job(&job.job_id).await?;
        }
    }
    Ok(())
}

/// What a stuck run waits on, in words.
pub fn describe_waits(waits: &[WaitingOn]) -> String {
    if waits.is_empty() {
        return "something outside it".into();
    }
    waits
        .iter()
        .map(|w| match w {
            WaitingOn::Hook { token } => format!("hook `{token}`"),
            WaitingOn::Timer { due_at_ms } => {
                format!("a timer due {}", keel_core::clock::timestamp(*due_at_ms))
            }
            WaitingOn::Run { run_id } => format!("run {run_id}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
