//! The crash-point harness: runs a workflow once cleanly, then once per
//! crash point (every run with the same run ID, each in a store of its
//! own), with the process "killed" at each journal write in turn
//! (the write lost, or landed unheard) through a fault-injecting store,
//! recovers each run as a restarted worker would (the store reopened, a
//! new engine), and checks what recovery must keep: the run ends as the
//! clean run did, no step's completion is recorded twice, step IDs are the
//! clean run's, and the journal replays.
//!
//! A run that waits for something outside it is moved on by the test's
//! script ([`crate::script`]): each time it waits, the next payload is
//! resumed into its hook or it is cancelled, and its timers fire at once on
//! the test's manual clock; a run can also be cancelled as soon as it
//! starts, so that its cleanup (a saga's compensations) is crash-tested
//! too.
//!
//! A step that is not idempotent (one that repeats its side effect when it
//! runs again after a crash, instead of keying it by its step ID) shows up
//! as an output that differs at the points between its effect and the
//! journaling of its completion: the run's, or the step's own (a saga's
//! compensation, whose output the run's ending does not show), named with
//! its step ID.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use keel_core::Clock;
use keel_core::clock::ManualClock;
use keel_core::index::effective_entries;
use keel_core::journal::{Entry, Fact};
use keel_core::restart::RestartPoint;
use keel_core::{RunError, RunStatus};
use keel_store::faulty::{Crash, CrashWhen, FaultyStore};
use keel_store::sled::SledStore;

pub use crate::script::Scripted;
use crate::script::{Driven, describe_waits, drive_chain};
use crate::{Config, Error, ForkOptions, Keel, Result, StartOptions};

/// What to crash-test.
#[derive(Clone)]
pub struct CrashTest {
    /// The component's `.wasm`.
    pub component: PathBuf,
    pub workflow: String,
    /// The run's input, as JSON.
    pub input: String,
    /// The engine's settings (grants, bounds); each run gets its own store,
    /// and every run the test's manual clock.
    pub config: Config,
    /// Cancel the run (with this reason) as soon as it is admitted.
    pub cancel_at_start: Option<String>,
    /// What moves the run on each time it waits for something outside it,
    /// in order.
    pub script: Vec<Scripted>,
    /// The run's clock when it starts, in ms since the epoch [default: now].
    pub start_at_ms: Option<u64>,
    /// Once the run has ended, restart it from this point and drive it to
    /// its end again, so that a restart's writes are crash-tested too.
    pub restart_from: Option<RestartPoint>,
    /// Once the run has ended (and been restarted, if asked), fork it from
    /// this point and drive the fork to its end: the fork is then the run
    /// whose ending, steps and journal the checks compare.
    pub fork_from: Option<RestartPoint>,
    /// The error kind the clean run is expected to fail with, if it is
    /// expected to fail. A clean run that fails otherwise (a grant the test
    /// did not give, a step that always fails) fails the test: every crash
    /// point would end the same way and prove nothing.
    pub expected_failure: Option<String>,
}

/// How a run ended, as the checks compare it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    pub status: RunStatus,
    /// The output, with the run's ID written as `{run_id}`.
    pub output: Option<String>,
    /// The error's kind, if it failed.
    pub error_kind: Option<String>,
    /// The build it ended on (its component's hash): an upgrade moved it
    /// or did not.
    pub build: String,
}

/// The clean run every crash point is compared with.
#[derive(Clone, Debug)]
pub struct CleanRun {
    pub ending: Ending,
    pub error: Option<RunError>,
    /// Journal writes it made: the crash points.
    pub journal_writes: u64,
    /// Its steps in order: name and step ID (with `{run_id}` for its ID).
    pub steps: Vec<(String, String)>,
    /// The outputs of its steps that completed, by step ID.
    pub outputs: std::collections::BTreeMap<String, String>,
    /// Its journal (the subject's: the fork, if the test forks).
    pub journal: Vec<Entry>,
    /// What its workflow wrote to each stream (journaled: exactly once).
    pub streams: std::collections::BTreeMap<String, Vec<String>>,
}

/// One crash point and what recovery from it did.
#[derive(Clone, Debug)]
pub struct PointReport {
    pub crash: Crash,
    /// The kind of the journal's last durable entry when it crashed.
    pub durable_last: String,
    /// The crash struck (a run that makes fewer writes this time, with
    /// steps racing, may not reach the point).
    pub reached: bool,
    /// What recovery broke that no earlier point showed; empty when it
    /// kept everything.
    pub violations: Vec<String>,
    /// What it broke that an earlier point showed first (a repeated
    /// effect leaves its trace outside the run, which later points see
    /// again): each names that point.
    pub repeated: Vec<String>,
}

/// What recovery broke at one point: `subject` names what (the run's
/// ending, a step's output, ...) so that a later point breaking the same
/// thing is reported as a repeat.
pub(crate) struct Violation {
    subject: String,
    pub(crate) message: String,
}

impl Violation {
    fn new(subject: impl Into<String>, message: String) -> Violation {
        Violation {
            subject: subject.into(),
            message,
        }
    }
}

/// The clean run and every crash point.
#[derive(Clone, Debug)]
pub struct CrashReport {
    pub clean: CleanRun,
    /// Why the clean run is not one the test asked for, if it is not (it
    /// failed, or was cancelled, where the test expected neither): the
    /// crash points then check nothing worth checking.
    pub clean_unexpected: Option<String>,
    pub points: Vec<PointReport>,
}

impl CrashReport {
    /// The clean run ended as the test asked and no crash point broke
    /// anything.
    pub fn passed(&self) -> bool {
        self.clean_unexpected.is_none() && self.points.iter().all(|p| p.violations.is_empty())
    }
}

/// Why `clean` is not the run `test` asked for, if it is not: a failure of
/// another kind than the test expects (or any, when it expects none), or
/// a cancel the test did not make.
pub(crate) fn unexpected_ending(test: &CrashTest, clean: &CleanRun) -> Option<String> {
    let error = || {
        clean
            .error
            .as_ref()
            .map_or(String::new(), |e| format!(" ({}: {})", e.kind, e.message))
    };
    let kind = clean.ending.error_kind.as_deref();
    match clean.ending.status {
        RunStatus::Failed if kind.is_some() && kind == test.expected_failure.as_deref() => None,
        RunStatus::Failed => Some(format!(
            "the clean run failed{}, which the test does not expect{}: every crash point would fail the same way, so nothing was checked; give the run what it lacks (a grant, a payload) or declare the failure the test expects",
            error(),
            test.expected_failure
                .as_deref()
                .map_or(String::new(), |k| format!(
                    " (it expects a failure of kind {k})"
                )),
        )),
        RunStatus::Cancelled
            if test.cancel_at_start.is_none()
                && !test
                    .script
                    .iter()
                    .any(|s| matches!(s, Scripted::Cancel { .. })) =>
        {
            Some(format!(
                "the clean run was cancelled{} though the test cancels nothing",
                error()
            ))
        }
        _ if test.expected_failure.is_some() => Some(format!(
            "the clean run ended {}, and the test expects a failure of kind {}",
            clean.ending.status.as_str(),
            test.expected_failure.as_deref().unwrap_or_default()
        )),
        _ => None,
    }
}

/// Runs `test`: the clean run, then each crash point (reported to
/// `progress` as it ends).
pub async fn crashtest(
    test: &CrashTest,
    mut progress: impl FnMut(&PointReport),
) -> Result<CrashReport> {
    let Prepared {
        root,
        run_id,
        clock,
        test,
    } = Prepared::of(test)?;
    let test = &test;
    let (clean, base) = clean_run(test, root.path(), &run_id, &clock).await?;
    let clean_unexpected = unexpected_ending(test, &clean);
    if clean_unexpected.is_some() {
        // Every point would end as the clean run did: none is tried.
        return Ok(CrashReport {
            clean,
            clean_unexpected,
            points: Vec::new(),
        });
    }
    let mut points = Vec::new();
    // Where each subject was first seen broken.
    let mut first_seen = std::collections::HashMap::<String, String>::new();
    for at_write in 1..=clean.journal_writes {
        for when in [CrashWhen::Before, CrashWhen::After] {
            let crash = Crash { at_write, when };
            let trial = Trial::new(test, root.path(), &crash_name(crash), &run_id, &clock);
            let (mut point, broken, _) = crash_point(test, &trial, &base, &clean, crash).await?;
            for v in broken {
                match first_seen.get(&v.subject) {
                    Some(at) => point
                        .repeated
                        .push(format!("{} (first at {at})", v.subject)),
                    None => {
                        let at = format!("write {at_write} {}", when.as_str());
                        first_seen.insert(v.subject, at);
                        point.violations.push(v.message);
                    }
                }
            }
            progress(&point);
            points.push(point);
        }
    }
    Ok(CrashReport {
        clean,
        clean_unexpected,
        points,
    })
}

/// What every trial of a test shares: a folder for their stores, the run
/// ID (so its steps have the same IDs in every trial: a service that keys
/// effects by step ID sees each trial as that run recovering), and the
/// test's manual clock, which the script moves (time the run waits passes
/// at once: every wait comes back to the script).
pub(crate) struct Prepared {
    pub(crate) root: tempfile::TempDir,
    pub(crate) run_id: String,
    pub(crate) clock: Arc<ManualClock>,
    /// The test, its engine on that clock with every wait parked.
    pub(crate) test: CrashTest,
}

impl Prepared {
    pub(crate) fn of(test: &CrashTest) -> Result<Prepared> {
        let root = tempfile::tempdir().map_err(|source| Error::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let clock = ManualClock::at(
            test.start_at_ms
                .unwrap_or_else(|| crate::SystemClock.now_ms()),
        );
        let mut test = test.clone();
        test.config.clock = clock.clone();
        test.config.park_limit = std::time::Duration::ZERO;
        Ok(Prepared {
            root,
            run_id: uuid::Uuid::now_v7().to_string(),
            clock,
            test,
        })
    }
}

/// A store of its own for one run, under `root`, behind a fault injector.
pub(crate) struct Trial {
    dir: PathBuf,
    config: Config,
    run_id: String,
    /// The script's steps taken so far (by the crashed run and its
    /// recovery alike: each is taken once).
    taken: AtomicUsize,
    /// The test's clock, which the script moves.
    clock: Arc<ManualClock>,
}

impl Trial {
    pub(crate) fn new(
        test: &CrashTest,
        root: &Path,
        name: &str,
        run_id: &str,
        clock: &Arc<ManualClock>,
    ) -> Trial {
        let dir = root.join(name);
        let mut config = test.config.clone();
        // One compile for all trials.
        config.cache_dir = root.join("compiled");
        Trial {
            dir,
            config,
            run_id: run_id.to_string(),
            taken: Default::default(),
            clock: clock.clone(),
        }
    }

    /// The trial's store (opened again after a crash), with `crash` armed.
    fn store(&self, crash: Option<Crash>) -> Result<Arc<FaultyStore<SledStore>>> {
        let store = SledStore::reopen(&self.dir)?;
        let store = Arc::new(FaultyStore::new(store));
        if let Some(crash) = crash {
            store.crash_at(crash);
        }
        Ok(store)
    }

    /// An engine over the trial's store sharing `base`'s runtime (so the
    /// component is compiled and loaded once), with `crash` armed.
    fn engine(
        &self,
        base: &Keel,
        crash: Option<Crash>,
    ) -> Result<(Keel, Arc<FaultyStore<SledStore>>)> {
        let store = self.store(crash)?;
        Ok((base.with_store(store.clone()), store))
    }

    /// Starts the run; with a crash armed the drive may end in an error.
    async fn start(&self, keel: &Keel, test: &CrashTest) -> Result<()> {
        let upgrades = test
            .script
            .iter()
            .any(|s| matches!(s, Scripted::Upgrade { .. }));
        // A run to be upgraded belongs to a deployment the upgrade moves.
        let component = match upgrades {
            true => crate::script::deploy_upgraded(keel, &test.component).await?,
            false => keel.load(&test.component).await?,
        };
        let options = StartOptions {
            run_id: Some(self.run_id.as_str().into()),
            ..StartOptions::default()
        };
        keel.start_with(&component, &test.workflow, &test.input, &options)
            .await?;
        if let Some(reason) = &test.cancel_at_start {
            keel.cancel(&self.run_id, reason, "crashtest").await?;
        }
        Ok(())
    }

    /// The fork's run ID, the same in every trial (so are its step IDs).
    fn fork_id(&self) -> String {
        format!("{}-fork", self.run_id)
    }

    /// The run the checks compare: the fork, if the test forks, else the
    /// run it started.
    fn subject(&self, test: &CrashTest) -> String {
        match test.fork_from {
            Some(_) => self.fork_id(),
            None => self.run_id.clone(),
        }
    }

    fn anonymous(&self, text: &str) -> String {
        text.replace(&self.fork_id(), "{fork_id}")
            .replace(&self.run_id, "{run_id}")
    }
}

/// The clean run, and its engine, whose runtime the trials share.
pub(crate) async fn clean_run(
    test: &CrashTest,
    root: &Path,
    run_id: &str,
    clock: &Arc<ManualClock>,
) -> Result<(CleanRun, Keel)> {
    let trial = Trial::new(test, root, "clean", run_id, clock);
    let store = trial.store(None)?;
    let keel = Keel::open(trial.config.clone(), store.clone())?;
    trial.start(&keel, test).await?;
    let run = run_to_end(&keel, &trial, test).await?;
    let journal = keel.journal(&trial.subject(test)).await?;
    let clean = CleanRun {
        ending: ending(&trial, &run),
        error: run.error.clone(),
        journal_writes: store.journal_writes(),
        steps: steps(&trial, &journal),
        outputs: outputs(&trial, &journal),
        streams: workflow_streams(&keel, &trial, test).await?,
        journal,
    };
    Ok((clean, keel))
}

fn crash_name(crash: Crash) -> String {
    format!("{}-{}", crash.at_write, crash.when.as_str())
}

/// One crash point: the report (with no violations yet), what recovery
/// broke, and the journal the run ended with.
pub(crate) async fn crash_point(
    test: &CrashTest,
    trial: &Trial,
    base: &Keel,
    clean: &CleanRun,
    crash: Crash,
) -> Result<(PointReport, Vec<Violation>, Vec<Entry>)> {
    let reached = {
        let (keel, store) = trial.engine(base, Some(crash))?;
        trial.start(&keel, test).await?;
        // The crash ends the drive with a storage error; a point the run
        // never reaches lets it end.
        let _ = run_to_end(&keel, trial, test).await;
        store.has_crashed()
    };
    // Recovery: the store reopened by a new engine, as after a restart.
    let (keel, _) = trial.engine(base, None)?;
    let subject = trial.subject(test);
    // A fork not yet made when it crashed: the run it forks from wrote last.
    let durable = match keel.journal(&subject).await {
        Err(Error::RunNotFound { .. }) => keel.journal(&trial.run_id).await?,
        durable => durable?,
    };
    let durable_last = durable
        .last()
        .map_or("nothing", |e| e.fact.name())
        .to_string();
    let run = run_to_end(&keel, trial, test).await?;
    let journal = keel.journal(&subject).await?;
    let mut violations = Vec::new();
    let got = ending(trial, &run);
    if got != clean.ending {
        violations.push(Violation::new(
            "the run's ending",
            format!(
                "it ended {}, the clean run {}: {}",
                got.status.as_str(),
                clean.ending.status.as_str(),
                ending_difference(&clean.ending, &got)
            ),
        ));
    }
    violations.extend(twice_completed(&journal));
    let got_steps = steps(trial, &journal);
    if got_steps != clean.steps {
        violations.push(Violation::new(
            "the run's steps",
            format!(
                "its steps are {got_steps:?}, the clean run's {:?}",
                clean.steps
            ),
        ));
    }
    violations.extend(outputs_differ(clean, &got_steps, &outputs(trial, &journal)));
    let streams = workflow_streams(&keel, trial, test).await?;
    if streams != clean.streams {
        violations.push(Violation::new(
            "the workflow's stream writes",
            format!(
                "its workflow's stream writes are {streams:?}, the clean run's {:?}: a write was lost or made twice",
                clean.streams
            ),
        ));
    }
    let verdict = keel.replay(&subject, None).await?;
    if !verdict.is_ok() {
        violations.push(Violation::new(
            "the journal's replay",
            format!("its journal does not replay: {verdict:?}"),
        ));
    }
    let point = PointReport {
        crash,
        durable_last,
        reached,
        violations: Vec::new(),
        repeated: Vec::new(),
    };
    Ok((point, violations, journal))
}

/// Where output `got` differs from the clean run's `was`, when both are
/// JSON objects or arrays: the first fields that differ, as
/// `/path: clean -> this run`.
fn field_difference(was: &str, got: &str) -> Option<String> {
    let json = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s)
            .ok()
            .filter(|v| v.is_object() || v.is_array())
    };
    let fields = keel_core::json_diff::diff(&json(was)?, &json(got)?);
    let shown: Vec<String> = fields.iter().take(5).map(|f| f.line()).collect();
    let more = match fields.len().saturating_sub(shown.len()) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!("{}{more}", shown.join(", ")))
}

/// How a run's ending `got` differs from the clean run's `was`.
fn ending_difference(was: &Ending, got: &Ending) -> String {
    match (&was.output, &got.output) {
        (Some(w), Some(g)) if field_difference(w, g).is_some() => format!(
            "its output differs at {} (clean -> this run)",
            field_difference(w, g).unwrap_or_default()
        ),
        _ if was.build != got.build => format!(
            "on build {}, the clean run on build {}",
            short(&got.build),
            short(&was.build)
        ),
        _ => format!(
            "with {}, the clean run with {}",
            describe(got),
            describe(was)
        ),
    }
}

/// A build's hash, short.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// Drives the run until it ends, following the runs that continue it
/// (and, with a restart asked, restarts it
/// once and drives it to its end again; with a fork asked, forks it and
/// drives the fork to its end, which it returns); a run left waiting for
/// something outside it (a hook, an event, another run) with nothing left
/// in the script cannot be crash-tested alone. Whether a restart or a fork
/// happened is read from the store, as an operator whose request went
/// unanswered would: a write that landed unheard is not made twice.
async fn run_to_end(keel: &Keel, trial: &Trial, test: &CrashTest) -> Result<keel_core::RunRecord> {
    // A workflow that continues as new ends with the last run of its
    // chain, each driven in turn (their IDs derive from the first's).
    let mut run = drive_to_end(keel, trial, test, &trial.run_id).await?;
    if let Some(point) = &test.restart_from {
        let journal = keel.journal(&trial.run_id).await?;
        let restarted = journal
            .iter()
            .any(|e| matches!(e.fact, Fact::RunRestarted { .. }));
        if !restarted {
            keel.restart_run(&trial.run_id, point, None, "crashtest")
                .await?;
        }
        run = drive_to_end(keel, trial, test, &trial.run_id).await?;
    }
    let Some(point) = &test.fork_from else {
        return Ok(run);
    };
    let fork_id = trial.fork_id();
    if let Err(Error::RunNotFound { .. }) = keel.get_run(&fork_id).await {
        let options = ForkOptions {
            run_id: Some(fork_id.as_str().into()),
            ..ForkOptions::default()
        };
        keel.fork_run(&trial.run_id, point, &options, "crashtest")
            .await?;
    }
    drive_to_end(keel, trial, test, &fork_id).await
}

/// Drives run `run_id` until it ends, by the test's script.
async fn drive_to_end(
    keel: &Keel,
    trial: &Trial,
    test: &CrashTest,
    run_id: &str,
) -> Result<keel_core::RunRecord> {
    match drive_chain(keel, &trial.clock, run_id, &test.script, &trial.taken)
        .await?
        .0
    {
        Driven::Ended(run) => Ok(run),
        Driven::Stuck { run, waits } => Err(Error::NotCrashTestable {
            run_id: run.run_id,
            reason: format!(
                "it waits on {} and the test's script has nothing left to give it; a crash test needs a workflow that ends by itself or a script (payloads, a cancel) that ends it",
                describe_waits(&waits)
            ),
        }),
    }
}

fn ending(trial: &Trial, run: &keel_core::RunRecord) -> Ending {
    Ending {
        status: run.status,
        output: run.output.as_deref().map(|o| trial.anonymous(o)),
        error_kind: run.error.as_ref().map(|e| e.kind.clone()),
        build: run.component_hash.to_string(),
    }
}

fn describe(ending: &Ending) -> String {
    match (&ending.output, &ending.error_kind) {
        (Some(output), _) => format!("output {output}"),
        (None, Some(kind)) => format!("error {kind}"),
        (None, None) => "nothing".into(),
    }
}

fn steps(trial: &Trial, journal: &[Entry]) -> Vec<(String, String)> {
    effective_entries(journal)
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled { name, step_id, .. } => {
                Some((name.clone(), trial.anonymous(step_id)))
            }
            _ => None,
        })
        .collect()
}

/// What the run's workflow wrote to each of its streams, in order (a
/// close as `<closed>`); a step's writes are left out, since a step that
/// runs again writes again (after a restart marker).
async fn workflow_streams(
    keel: &Keel,
    trial: &Trial,
    test: &CrashTest,
) -> Result<std::collections::BTreeMap<String, Vec<String>>> {
    use keel_core::stream::{ChunkBody, Origin};
    let subject = trial.subject(test);
    let mut streams = std::collections::BTreeMap::new();
    for stream in keel.streams(&subject).await? {
        let chunks = keel.chunks(&subject, &stream.name, 0, usize::MAX).await?;
        let written = chunks
            .iter()
            .filter(|c| matches!(c.origin, Origin::Workflow { .. }))
            .map(|c| match &c.body {
                ChunkBody::Data(json) => trial.anonymous(json),
                _ => "<closed>".to_string(),
            })
            .collect::<Vec<_>>();
        if !written.is_empty() {
            streams.insert(stream.name, written);
        }
    }
    Ok(streams)
}

/// The outputs of the steps that completed, by step ID (anonymous).
fn outputs(trial: &Trial, journal: &[Entry]) -> std::collections::BTreeMap<String, String> {
    let effective = effective_entries(journal);
    let step_ids: std::collections::HashMap<u32, &str> = effective
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled {
                command, step_id, ..
            } => Some((*command, step_id.as_str())),
            _ => None,
        })
        .collect();
    effective
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepCompleted { command, output } => step_ids
                .get(command)
                .map(|id| (trial.anonymous(id), trial.anonymous(output))),
            _ => None,
        })
        .collect()
}

/// Steps that completed with another output than in the clean run: they
/// ran again and repeated their effect, or depend on when they run.
fn outputs_differ(
    clean: &CleanRun,
    steps: &[(String, String)],
    outputs: &std::collections::BTreeMap<String, String>,
) -> Vec<Violation> {
    steps
        .iter()
        .filter_map(|(name, step_id)| {
            let (got, was) = (outputs.get(step_id)?, clean.outputs.get(step_id)?);
            (got != was).then(|| {
                let how = match field_difference(was, got) {
                    Some(fields) => format!(
                        "completed with another output than in the clean run, at {fields} (clean -> this run)"
                    ),
                    None => format!("completed with output {got}, in the clean run with {was}"),
                };
                Violation::new(
                    format!("step `{name}` ({step_id})"),
                    format!(
                        "step `{name}` ({step_id}) {how}: it is not idempotent (it repeated its effect when it ran again) or its output depends on when it runs"
                    ),
                )
            })
        })
        .collect()
}

/// Steps whose completion the journal records more than once.
fn twice_completed(journal: &[Entry]) -> Vec<Violation> {
    let mut counts = std::collections::BTreeMap::<u32, usize>::new();
    for entry in effective_entries(journal) {
        if let Fact::StepCompleted { command, .. } | Fact::StepFailed { command, .. } = entry.fact {
            *counts.entry(command).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(command, n)| {
            Violation::new(
                format!("the step of command {command}"),
                format!("the step of command {command} is recorded ended {n} times"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_differ_are_shown_by_the_fields_that_differ() {
        let was = r#"{"id": 1, "items": [1, 2], "note": "a"}"#;
        let got = r#"{"id": 1, "items": [1, 3], "note": "b"}"#;
        assert_eq!(
            field_difference(was, got).as_deref(),
            Some(r#"/items/1: 2 -> 3, /note: "a" -> "b""#)
        );
        assert_eq!(field_difference("1", "2"), None, "scalars are shown whole");
        let ending = |output: &str| Ending {
            status: RunStatus::Completed,
            output: Some(output.into()),
            error_kind: None,
            build: "aaaaaaaaaaaaaaaa".into(),
        };
        assert_eq!(
            ending_difference(&ending("1"), &ending("2")),
            "with output 2, the clean run with output 1"
        );
        let moved = Ending {
            build: "bbbbbbbbbbbbbbbb".into(),
            ..ending("1")
        };
        assert_eq!(
            ending_difference(&ending("1"), &moved),
            "on build bbbbbbbbbbbb, the clean run on build aaaaaaaaaaaa"
        );
        assert!(
            ending_difference(&ending(was), &ending(got))
                .starts_with("its output differs at /items/1")
        );
    }
}
