//! One activation of a workflow: the guest runs from the start, replaying
//! what the journal holds and appending what it does not.
//!
//! A command the workflow issues is matched against the journal's command
//! of the same ID; a divergence stops the run with `NonDeterminism`. A
//! completion is delivered by `wait-any` as the first completion in journal
//! order among the commands the workflow awaits, which is the same live and
//! on replay. When nothing awaited can complete soon (a long timer, a hook),
//! the activation suspends: the guest is dropped and the run resumes later
//! by replay. The activation reaches beyond its run only through
//! [`Outside`].

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::divergence::{Divergence, Trace};
use keel_core::index::Delivered;
use keel_core::journal::{Entry, Fact, step_digest};
use keel_core::lifecycle::{CancelRequest, ChildOptions, Grace, PauseRequest};
use keel_core::patch::{self, Patch};
use keel_core::{RunId, StepId};
use tokio::task::JoinHandle;

mod hooks;
mod journal;
mod outside;
mod streams;

use hooks::{External, OpenHook, wit_status};
pub use journal::RunJournal;
pub use outside::{ChildStart, Offline, Outside, StepCall};

use crate::Error;
use crate::component::Loaded;
use crate::effects::Effect;
use crate::sandbox::{JournalClock, WorkflowCalls, wit};
use crate::slots::Slots;

/// Raised out of the guest when the activation cannot go on now.
#[derive(Debug, thiserror::Error)]
pub enum Suspend {
    /// Waiting for a timer due at `wake_at_ms`, or for something outside
    /// the run (a hook's payload, another run's end), which wakes it.
    #[error("waiting for {on}")]
    Waiting { wake_at_ms: Option<u64>, on: String },
    /// An offline replay reached the journal's end.
    #[error("the journal ends here")]
    JournalEnd,
    /// The run was paused (`request`), and none of its step attempts is
    /// running: it stops until resumed.
    #[error("paused by {}", request.by)]
    Paused { request: PauseRequest },
}

/// Raised out of the guest when its workflow continues as new with
/// `input`: the activation ends, and the engine starts the run that
/// continues it ([`crate::runtime::Ended::Continued`]).
#[derive(Debug, thiserror::Error)]
#[error("the workflow continues as new")]
pub struct ContinueAsNew {
    pub input: String,
}

/// How often an activation waiting on something outside its run (a
/// payload, another run's end) looks at the store in case a wake was lost.
const EXTERNAL_POLL: Duration = Duration::from_secs(1);

/// What the journal holds at a command's position.
enum Recorded<T> {
    Absent,
    Matches { at_ms: u64, value: T },
    Differs(Entry),
}

/// The state of one workflow activation, held in the guest's store.
pub struct Activation {
    run_id: RunId,
    workflow: String,
    /// The workflow's durability, from its manifest (or the worker's
    /// default).
    durability: keel_core::manifest::Durability,
    started_at_ms: u64,
    outside: Arc<dyn Outside>,
    loaded: Arc<Loaded>,
    journal: Arc<RunJournal>,
    clock: JournalClock,
    /// Replay only: never append, never execute a step.
    offline: bool,
    next_command: u32,
    recorded_commands: u32,
    delivered: Delivered,
    /// Commands with a live task that will complete them.
    in_flight: HashSet<u32>,
    /// The steps among them.
    steps: HashSet<u32>,
    /// Fire times of the timers the workflow scheduled (those not in
    /// flight are too far away to arm in memory).
    timers: HashMap<u32, u64>,
    /// Commands completed from outside the run, by what they wait for.
    external: HashMap<u32, External>,
    /// The hooks the workflow created, by handle.
    hooks: HashMap<u32, OpenHook>,
    /// The payloads a retry skipped, as `(token, index)`.
    skipped: HashSet<(String, u64)>,
    /// The queries the workflow set, by name (never journaled).
    queries: std::collections::BTreeMap<String, String>,
    tasks: Vec<JoinHandle<()>>,
    /// How many tasks were live when completed commands were last
    /// forgotten.
    live_after_forget: usize,
    /// The engine's instance slots, which this activation holds one of.
    slots: Arc<Slots>,
    /// The first divergence from the journal, in detail.
    divergence: Option<Divergence>,
    /// How long and for how many steps a cancelled run's cleanup may go on.
    grace: Grace,
    /// Keel calls the workflow refused itself because the run is cancelled.
    refused_calls: u32,
    /// What its streams and replies have done.
    written: streams::Written,
    /// The pause read from the store that holds the run, if one does: the
    /// activation stops at its next wait once no attempt of it runs.
    pause: Option<PauseRequest>,
}

/// Most keel calls a cancelled workflow may refuse itself before the run
/// is ended: its code is looping on a cancel it swallows.
const MAX_REFUSED_CALLS: u32 = 10_000;

impl Drop for Activation {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Activation {
    /// An activation of `workflow` for `run_id` over `journal`.
    pub fn new(
        outside: Arc<dyn Outside>,
        loaded: Arc<Loaded>,
        journal: Arc<RunJournal>,
        workflow: &str,
        started_at_ms: u64,
        slots: Arc<Slots>,
    ) -> Self {
        let recorded_commands = journal.command_count();
        let skipped = journal.skipped_payloads();
        let grace = outside.limits().cancel_grace;
        Activation {
            run_id: journal.run_id().clone(),
            workflow: workflow.to_string(),
            durability: loaded
                .manifest
                .workflow(workflow)
                .and_then(|w| w.durability)
                .unwrap_or_else(|| outside.default_durability()),
            started_at_ms,
            clock: JournalClock::new(started_at_ms),
            offline: outside.store().is_none(),
            outside,
            loaded,
            journal,
            next_command: 0,
            recorded_commands,
            delivered: Delivered::default(),
            in_flight: HashSet::new(),
            steps: HashSet::new(),
            timers: HashMap::new(),
            external: HashMap::new(),
            hooks: HashMap::new(),
            skipped,
            queries: std::collections::BTreeMap::new(),
            tasks: Vec::new(),
            live_after_forget: 0,
            grace,
            slots,
            divergence: None,
            refused_calls: 0,
            written: streams::Written::default(),
            pause: None,
        }
    }

    /// The clock the guest reads: journal time.
    pub fn clock(&self) -> JournalClock {
        self.clock.clone()
    }

    /// Stops the step and timer tasks of this activation, waits until they
    /// are gone (so nothing of the run outlives it), and says what the
    /// activation did.
    pub async fn finish(&mut self) -> Trace {
        for task in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
        Trace {
            divergence: self.divergence.take(),
            issued: self.next_command,
            recorded: self.recorded_commands,
            queries: std::mem::take(&mut self.queries),
        }
    }

    /// Once a cancelled run's code has ended, lets the step attempts
    /// still running finish and journal their results (within the cancel
    /// grace), so that what they did is known; attempts not yet started
    /// never start.
    pub async fn settle_cancelled(&mut self) {
        if self.offline {
            return;
        }
        let Some(cancel) = self.journal.cancel_request() else {
            return;
        };
        let ends_at = self.grace.ends_at(cancel.at_ms);
        loop {
            let changed = self.journal.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let running = self.attempt_running();
            let left = ends_at.saturating_sub(self.now_ms());
            if !running || left == 0 || self.journal.failure().is_some() {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(left), changed).await;
        }
    }

    fn replaying(&self) -> bool {
        self.next_command < self.recorded_commands
    }

    /// The pause that holds the run, read from the store when a wake said
    /// one may have come (its driver read it before the activation began).
    async fn pause_holds(&mut self) -> wasmtime::Result<Option<PauseRequest>> {
        if !self.offline && self.journal.take_pause_hint() {
            self.pause = self.store()?.pause_request(self.run_id.as_str()).await?;
        }
        Ok(self.pause.clone())
    }

    /// Whether a step attempt of this activation is running.
    fn attempt_running(&self) -> bool {
        self.steps.iter().any(|c| self.journal.attempt_running(*c))
    }

    /// Journals the run's cancel when one was asked for (in the store) or
    /// its deadline has passed, unless the journal holds one already; then
    /// ends a run whose cleanup is past its grace.
    async fn note_cancel(&mut self) -> wasmtime::Result<()> {
        if self.offline || self.journal.has_ended() {
            return Ok(());
        }
        let cancel = match self.journal.cancel_request() {
            Some(cancel) => cancel,
            None => {
                let now = self.now_ms();
                let asked = match self.journal.take_cancel_hint() {
                    true => self.store()?.cancel_request(self.run_id.as_str()).await?,
                    false => None,
                };
                let due = self.journal.deadline_ms().filter(|d| *d <= now);
                let Some(request) = asked.or_else(|| due.map(CancelRequest::deadline)) else {
                    return Ok(());
                };
                tracing::info!(run_id = %self.run_id, reason = request.reason, by = request.by, "cancel journaled");
                self.journal.record(request.fact())?
            }
        };
        match self.grace.expired(cancel.at_ms, self.now_ms()) {
            Some(why) => Err(self.over_grace(why)),
            None => Ok(()),
        }
    }

    fn over_grace(&self, why: String) -> wasmtime::Error {
        wasmtime::Error::new(Error::CancelGrace {
            run_id: self.run_id.clone(),
            why,
        })
    }

    /// When the run must next be looked at for its lifecycle: its cleanup's
    /// grace end once cancelled, else its deadline.
    fn lifecycle_due_ms(&self) -> Option<u64> {
        match self.journal.cancel_request() {
            Some(cancel) => Some(self.grace.ends_at(cancel.at_ms)),
            None => self.journal.deadline_ms(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.outside.clock().now_ms()
    }

    /// A wait the workflow could never return from is a protocol error, not
    /// a hang: no command, a command never issued, or only completions the
    /// workflow has received already.
    fn check_wait(&self, ids: &[u32]) -> wasmtime::Result<()> {
        let misuse = |reason: String| {
            wasmtime::Error::new(Error::SandboxViolation {
                run_id: self.run_id.clone(),
                reason,
            })
        };
        if ids.is_empty() {
            return Err(misuse("waited on no command at all".into()));
        }
        if let Some(unknown) = ids.iter().find(|id| **id >= self.next_command) {
            return Err(misuse(format!(
                "waited on command {unknown}, which it never issued (it issued {})",
                self.next_command
            )));
        }
        if ids.iter().all(|id| self.delivered.contains(*id)) {
            return Err(misuse(format!(
                "waited again on commands whose completions it already received ({ids:?}); a workflow receives each completion once"
            )));
        }
        Ok(())
    }

    fn failed(&self, message: String) -> wasmtime::Error {
        wasmtime::Error::new(Error::WorkflowFailed {
            run_id: self.run_id.clone(),
            message,
        })
    }

    /// Matches the code's next command against the journal, or records it.
    /// `extract` recognises a matching recorded fact and takes what the
    /// caller needs from it; `build` makes the fact to record. Returns the
    /// command ID and, when replayed, the extracted value.
    fn command<T>(
        &mut self,
        extract: impl FnOnce(&Fact) -> Option<T>,
        build: impl Fn(u32) -> Fact,
    ) -> wasmtime::Result<(u32, Option<T>)> {
        let (command, recorded) = self.match_command(extract, &build)?;
        if recorded.is_none() {
            self.record_command(build(command))?;
        }
        Ok((command, recorded))
    }

    /// Takes the next command ID and matches it against the journal without
    /// recording: `None` means the journal ends here and the caller records
    /// (after any side effect the fact records). `requested` describes the
    /// command for a divergence report.
    fn match_command<T>(
        &mut self,
        extract: impl FnOnce(&Fact) -> Option<T>,
        requested: impl Fn(u32) -> Fact,
    ) -> wasmtime::Result<(u32, Option<T>)> {
        let command = self.next_command;
        self.next_command += 1;
        match self.recorded(command, extract) {
            Recorded::Matches { at_ms, value } => {
                self.clock.set(at_ms);
                Ok((command, Some(value)))
            }
            Recorded::Differs(recorded) => {
                Err(self.diverged(command, &recorded, &requested(command)))
            }
            Recorded::Absent if self.offline => Err(wasmtime::Error::new(Suspend::JournalEnd)),
            Recorded::Absent => Ok((command, None)),
        }
    }

    fn recorded<T>(&self, command: u32, extract: impl FnOnce(&Fact) -> Option<T>) -> Recorded<T> {
        let Some(entry) = self.journal.command(command) else {
            return Recorded::Absent;
        };
        match extract(&entry.fact) {
            Some(value) => Recorded::Matches {
                at_ms: entry.at_ms,
                value,
            },
            None => Recorded::Differs(entry),
        }
    }

    /// Records a command; the flush before whatever depends on it (a step
    /// attempt, the run's end) makes it durable.
    fn record_command(&mut self, fact: Fact) -> wasmtime::Result<()> {
        let entry = self.journal.record(fact)?;
        self.clock.set(entry.at_ms);
        Ok(())
    }

    /// Drops completed commands from the sets of live ones and finished
    /// tasks from `tasks`: what a wait or a bound looks at then stays the
    /// size of what runs, however long the run.
    fn forget_completed(&mut self) {
        let journal = &self.journal;
        self.in_flight.retain(|c| !journal.is_completed(*c));
        self.steps.retain(|c| !journal.is_completed(*c));
        self.tasks.retain(|t| !t.is_finished());
        self.live_after_forget = self.tasks.len();
    }

    /// [`Activation::forget_completed`] once `tasks` has doubled since it
    /// last ran: a constant cost per command, amortized.
    fn forget_completed_now_and_then(&mut self) {
        if self.tasks.len() >= 2 * self.live_after_forget + 16 {
            self.forget_completed();
        }
    }

    /// The store, which only a live activation reaches.
    fn store(&self) -> wasmtime::Result<&Arc<dyn keel_store::Store>> {
        self.outside
            .store()
            .ok_or_else(|| wasmtime::Error::new(Suspend::JournalEnd))
    }

    /// Records the divergence at `command` and returns its error.
    fn diverged(&mut self, command: u32, recorded: &Entry, requested: &Fact) -> wasmtime::Error {
        self.divergence = Some(self.journal.divergence(command, recorded, requested));
        wasmtime::Error::new(Error::NonDeterminism {
            run_id: self.run_id.clone(),
            position: command,
            recorded: format!("{} (entry {})", recorded.fact.describe(), recorded.seq),
            requested: requested.describe(),
        })
    }

    /// When a wait on `ids` ends by time: the earliest of their timers and
    /// the run's deadline or cancel grace.
    fn wake_at(&self, ids: &[u32]) -> Option<u64> {
        ids.iter()
            .filter_map(|id| self.timers.get(id))
            .copied()
            .chain(self.lifecycle_due_ms().filter(|_| !self.offline))
            .min()
    }

    /// The suspension of an activation whose awaited commands nothing in
    /// this process will complete (or that gives its slot up): a timer
    /// wakes it, or something outside the run does.
    fn suspend(&self, ids: &[u32]) -> wasmtime::Error {
        let wake_at_ms = self.wake_at(ids);
        let mut on: Vec<String> = ids
            .iter()
            .filter_map(|id| self.external.get(id).map(External::describe))
            .collect();
        if let Some(at) = wake_at_ms {
            on.push(format!(
                "a timer due at {}",
                keel_core::clock::timestamp(at)
            ));
        }
        if on.is_empty() {
            // Only a guest that bypasses keel-sdk gets here.
            return self.failed(format!(
                "it waits for commands {ids:?}, none of which is pending, so it would wait forever"
            ));
        }
        wasmtime::Error::new(Suspend::Waiting {
            wake_at_ms,
            on: on.join(" or "),
        })
    }

    /// Waits for the first completion among `ids` in journal order or,
    /// when the workflow `hears_cancel`, the run's cancel request (once).
    /// A workflow that does not hear cancels is stopped at its cancel.
    async fn wait(&mut self, ids: &[u32], hears_cancel: bool) -> wasmtime::Result<wit::Wake> {
        self.check_wait(ids)?;
        loop {
            let journal = self.journal.clone();
            let changed = journal.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // Paused: nothing more is delivered to the code, and it stops
            // once the attempts it has running end (they journal their
            // results, which its resume delivers).
            if let Some(request) = self.pause_holds().await? {
                if !self.attempt_running() {
                    return Err(wasmtime::Error::new(Suspend::Paused { request }));
                }
                changed.await;
                continue;
            }
            self.note_cancel().await?;
            if hears_cancel {
                if let Some((entry, is_cancel)) = self.journal.take_wake(ids, &mut self.delivered) {
                    self.journal.mark_running(self.now_ms());
                    self.clock.set(entry.at_ms);
                    return Ok(match (is_cancel, entry.fact) {
                        (true, Fact::CancelRequested { reason, by }) => {
                            wit::Wake::Cancelled(wit::CancelRequest { reason, by })
                        }
                        (_, fact) => wit::Wake::Completed(self.completion(Entry { fact, ..entry })),
                    });
                }
            } else if let Some(entry) = self.journal.take_completion(ids, &mut self.delivered) {
                self.journal.mark_running(self.now_ms());
                self.clock.set(entry.at_ms);
                return Ok(wit::Wake::Completed(self.completion(entry)));
            } else if self.journal.cancel_request().is_some() && !self.offline {
                return Err(self.over_grace(
                    "its component cannot hear a cancel (it was built with a keel-sdk older than cancellation), so it was stopped at once".into(),
                ));
            }
            if self.journal.exceeded() {
                return Err(wasmtime::Error::new(self.journal.over_bound()));
            }
            if let Some(reason) = self.journal.failure() {
                return Err(wasmtime::Error::new(Error::JournalWrite {
                    run_id: self.run_id.clone(),
                    reason,
                }));
            }
            if self.offline {
                return Err(wasmtime::Error::new(Suspend::JournalEnd));
            }
            if self.journal.is_terminated() {
                return Err(wasmtime::Error::new(Error::Cancelled {
                    run_id: self.run_id.clone(),
                }));
            }
            if self.complete_external(ids).await? {
                continue;
            }
            if !ids.iter().any(|id| self.in_flight.contains(id)) {
                return Err(self.suspend(ids));
            }
            // Activations queue for a slot: one parked on anything but its
            // own running steps gives its slot up and resumes by replay.
            let contention = self.slots.contention();
            tokio::pin!(contention);
            contention.as_mut().enable();
            if self.slots.contended() && !ids.iter().any(|id| self.steps.contains(id)) {
                return Err(self.suspend(ids));
            }
            if !ids.iter().any(|id| self.steps.contains(id)) {
                // Waiting on a timer, a payload or another run, in memory:
                // the run waits, and every view says so. What it did so far
                // and what it waits for become visible. A running step
                // flushes by itself before its attempt.
                let marked = self.journal.mark_waiting(self.wake_at(ids), self.now_ms());
                self.journal.gate(Effect::Wait).await?;
                if marked {
                    self.outside.settled(&self.run_id);
                }
            }
            let poll = if ids.iter().any(|id| self.external.contains_key(id)) {
                // Another process may complete it: its wake normally arrives
                // at once; looking again now and then covers a lost one.
                EXTERNAL_POLL
            } else {
                Duration::MAX
            };
            let lifecycle = self.lifecycle_due_ms().map_or(Duration::MAX, |at| {
                Duration::from_millis(at.saturating_sub(self.now_ms()))
            });
            tokio::select! {
                _ = changed => {}
                _ = contention => {}
                _ = tokio::time::sleep(poll.min(lifecycle)) => {}
            }
        }
    }

    fn completion(&self, entry: Entry) -> wit::Completion {
        let (id, outcome) = match entry.fact {
            Fact::StepCompleted { command, output } => {
                (command, wit::Outcome::StepCompleted(output))
            }
            Fact::StepFailed {
                command,
                error,
                fatal,
                attempts,
            } => {
                let (step_name, step_id) = match self.journal.command(command).map(|e| e.fact) {
                    Some(Fact::StepScheduled { name, step_id, .. }) => (name, step_id),
                    _ => (String::new(), String::new()),
                };
                (
                    command,
                    wit::Outcome::StepFailed(wit::StepFailure {
                        step_name,
                        step_id,
                        message: error,
                        fatal,
                        attempts,
                    }),
                )
            }
            Fact::TimerFired { command } => (command, wit::Outcome::TimerFired),
            Fact::HookReceived { command, payload } => {
                (command, wit::Outcome::HookPayload(payload))
            }
            Fact::HookForceClaimed {
                command,
                claimed_by_run_id,
            } => (
                command,
                wit::Outcome::HookRejected(wit::HookRejection::ForceClaimed(claimed_by_run_id)),
            ),
            Fact::AwaitedRunEnded {
                command,
                status,
                output,
                error,
            } => (
                command,
                wit::Outcome::RunEnded(wit::RunEnd {
                    status: wit_status(&status),
                    output,
                    error,
                }),
            ),
            other => unreachable!("{} is not a completion", other.name()),
        };
        wit::Completion { id, outcome }
    }
}

#[async_trait]
impl WorkflowCalls for Activation {
    fn run_id(&self) -> &RunId {
        &self.run_id
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn replaying(&self) -> bool {
        Activation::replaying(self)
    }

    async fn schedule_step(&mut self, name: String, input: String) -> wasmtime::Result<u32> {
        let Some(step) = self.loaded.manifest.step(&name) else {
            return Err(self.failed(format!(
                "it called step `{name}`, which this component does not export (it exports: {})",
                self.loaded.manifest.step_names().join(", ")
            )));
        };
        let retry = step.retry;
        let run_id = self.run_id.clone();
        if self.next_command >= self.journal.command_count() {
            // A new command: within the run's bounds, or the run fails.
            if self.journal.cancel_request().is_some()
                && let Some(why) = self.grace.refuses_step(self.journal.steps_after_cancel())
            {
                return Err(self.over_grace(why));
            }
            let limits = self.outside.limits();
            limits.payload(
                input.len(),
                || format!("the input of step `{name}`"),
                Some(&run_id),
            )?;
            // `steps` holds every running step and perhaps some completed
            // ones: only a count near the bound needs the exact figure.
            if self.steps.len() >= limits.max_steps_in_flight {
                self.forget_completed();
            }
            crate::config::bound(
                "max_steps_in_flight",
                limits.max_steps_in_flight,
                self.steps.len() + 1,
                || "the steps the run has running".into(),
                Some(&run_id),
            )?;
        }
        // Read before the command is recorded: the occurrence of this name
        // that counts next. A replayed command keeps the ID it recorded.
        let fresh_id = self.journal.step_id_for(&name);
        let (command, replayed) = self.command(
            |f| match f {
                Fact::StepScheduled {
                    name: n,
                    input: i,
                    step_id,
                    ..
                } => (*n == name && *i == input).then(|| StepId::from(step_id.as_str())),
                _ => None,
            },
            |command| Fact::StepScheduled {
                command,
                step_id: fresh_id.as_str().to_string(),
                digest: step_digest(&name, &input),
                name: name.clone(),
                input: input.clone(),
            },
        )?;
        if self.offline || self.journal.is_completed(command) {
            return Ok(command);
        }
        let (step_id, attempts) = match replayed {
            Some(step_id) => (step_id, self.journal.attempts(command)),
            None => (fresh_id, Default::default()),
        };
        let task = self.outside.spawn_step(StepCall {
            journal: self.journal.clone(),
            component: self.loaded.clone(),
            run_id: self.run_id.clone(),
            command,
            step_id,
            name,
            input,
            retry,
            next_attempt: attempts.started + 1,
            before_retry: attempts.before_retry,
            not_before_ms: attempts.retry_at_ms,
            durability: self.durability,
        })?;
        self.in_flight.insert(command);
        self.steps.insert(command);
        self.tasks.push(task);
        self.forget_completed_now_and_then();
        Ok(command)
    }

    async fn schedule_sleep(&mut self, duration_ms: u64) -> wasmtime::Result<u32> {
        let requested_fire_at = self.clock.ms().saturating_add(duration_ms);
        let (command, recorded) = self.command(
            |f| match f {
                Fact::TimerScheduled { fire_at_ms, .. } => Some(*fire_at_ms),
                _ => None,
            },
            |command| Fact::TimerScheduled {
                command,
                fire_at_ms: requested_fire_at,
            },
        )?;
        let fire_at_ms = recorded.unwrap_or(requested_fire_at);
        if self.offline || self.journal.is_completed(command) {
            return Ok(command);
        }
        self.timers.insert(command, fire_at_ms);
        let wait = Duration::from_millis(fire_at_ms.saturating_sub(self.now_ms()));
        if wait > self.outside.park_limit() {
            return Ok(command);
        }
        if wait.is_zero() {
            // Due already (the run was woken for it): fired now, not by a
            // task racing the workflow's wait, so the run's writes are the
            // same every time.
            self.journal.record(Fact::TimerFired { command })?;
            return Ok(command);
        }
        let journal = self.journal.clone();
        self.in_flight.insert(command);
        self.tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Err(e) = journal.record(Fact::TimerFired { command }) {
                journal.fail(e.to_string());
            }
        }));
        self.forget_completed_now_and_then();
        Ok(command)
    }

    /// `patched(change_id)`, decided by [`keel_core::patch::decide`] (its
    /// doc has the truth table).
    async fn patched(&mut self, change_id: String) -> wasmtime::Result<bool> {
        let recorded = self.journal.command(self.next_command);
        let can_record = !self.offline && !self.journal.has_ended();
        let decision = patch::decide(recorded.as_ref().map(|e| &e.fact), &change_id, can_record);
        match (decision, recorded) {
            (Patch::Marked, Some(entry)) => {
                self.next_command += 1;
                self.clock.set(entry.at_ms);
            }
            (Patch::Record, _) => {
                self.command(
                    |_| Some(()),
                    |command| Fact::PatchMarker {
                        command,
                        change_id: change_id.clone(),
                    },
                )?;
            }
            _ => {}
        }
        Ok(decision.is_patched())
    }

    async fn wait_any(&mut self, ids: &[u32]) -> wasmtime::Result<wit::Completion> {
        match self.wait(ids, false).await? {
            wit::Wake::Completed(completion) => Ok(completion),
            wit::Wake::Cancelled(_) => unreachable!("a wait that does not hear cancels"),
        }
    }

    async fn await_any(&mut self, ids: &[u32]) -> wasmtime::Result<wit::Wake> {
        self.wait(ids, true).await
    }

    async fn cancelled_call(&mut self) -> wasmtime::Result<()> {
        self.refused_calls += 1;
        if self.refused_calls > MAX_REFUSED_CALLS {
            return Err(self.over_grace(format!(
                "its code went on calling keel after {MAX_REFUSED_CALLS} calls were refused for the cancel"
            )));
        }
        self.note_cancel().await
    }

    fn metadata(&self) -> wit::WorkflowMetadata {
        wit::WorkflowMetadata {
            run_id: self.run_id.to_string(),
            workflow_name: self.workflow.clone(),
            started_at_ms: self.started_at_ms,
        }
    }

    fn log(&self, level: wit::LogLevel, message: &str) {
        if self.replaying() || self.offline {
            return;
        }
        let run_id = self.run_id.as_str();
        match level {
            wit::LogLevel::Trace => tracing::trace!(run_id, "{message}"),
            wit::LogLevel::Debug => tracing::debug!(run_id, "{message}"),
            wit::LogLevel::Info => tracing::info!(run_id, "{message}"),
            wit::LogLevel::Warn => tracing::warn!(run_id, "{message}"),
            wit::LogLevel::Error => tracing::error!(run_id, "{message}"),
        }
    }

    async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>> {
        Activation::create_hook(self, options).await
    }

    async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32> {
        Activation::hook_next(self, handle).await
    }

    async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()> {
        Activation::dispose_hook(self, handle).await
    }

    async fn run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus> {
        Activation::run_status(self, run_id).await
    }

    async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32> {
        Activation::await_run(self, run_id).await
    }

    async fn start_child(
        &mut self,
        workflow: String,
        input: String,
        options: ChildOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        Activation::start_child(self, workflow, input, options).await
    }

    async fn set_attribute(
        &mut self,
        key: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        Activation::set_attribute(self, key, value)
    }

    fn set_query(&mut self, name: String, value: String) -> Result<(), String> {
        keel_core::run_query::check_query(&name, &value, &self.queries)?;
        self.queries.insert(name, value);
        Ok(())
    }

    fn continue_as_new(&mut self, input: String) -> wasmtime::Result<Result<(), String>> {
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&input) {
            return Ok(Err(format!("the input is no JSON: {e}")));
        }
        let limit = self.outside.limits().max_payload_bytes;
        if input.len() > limit {
            return Ok(Err(format!(
                "an input of {} bytes is over max_payload_bytes ({limit} bytes)",
                input.len()
            )));
        }
        Err(wasmtime::Error::new(ContinueAsNew { input }))
    }

    async fn stream_write(
        &mut self,
        stream: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        Activation::stream_write(self, stream, value)
    }

    async fn stream_close(&mut self, stream: String) -> wasmtime::Result<Result<(), String>> {
        Activation::stream_close(self, stream)
    }

    async fn hook_reply(
        &mut self,
        request: u32,
        reply: String,
    ) -> wasmtime::Result<Result<(), String>> {
        Activation::hook_reply(self, request, reply).await
    }

    async fn hook_refuse(
        &mut self,
        request: u32,
        reason: String,
    ) -> wasmtime::Result<Result<(), String>> {
        Activation::hook_refuse(self, request, reason)
    }
}
