//! One activation of a workflow: the guest runs from the start, replaying
//! what the journal holds and appending what it does not.
//!
//! A command the workflow issues is matched against the journal's command
//! of the same ID; a divergence stops the run with `NonDeterminism`. A
//! completion is delivered by `wait-any` as the first completion in journal
//! order among the commands the workflow awaits, which is the same live and
//! on replay. When nothing awaited can complete soon (a long timer), the
//! activation suspends: the guest is dropped and the run resumes later by
//! replay.
//!
//! Entries are flushed when something depends on them: before a step
//! attempt executes, before a store effect other callers can see, and at
//! the run's end or suspension. Entries in between (commands, completions)
//! are written at once and covered by the next flush, so a step costs one
//! flush rather than three.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

mod hooks;

use hooks::{External, OpenHook, wit_status};

use crate::component::Loaded;
use crate::engine::Inner;
use crate::idempotency::Clock;
use crate::journal::{self, Entry, Event, step_digest, step_id};
use crate::replay::{CommandView, Divergence};
use crate::sandbox::{JournalClock, wit};
use crate::store::Store;
use crate::{Error, Result};

/// A run's journal in memory, shared by the activation and its step and
/// timer tasks, backed by the store.
pub struct RunJournal {
    store: Option<Store>,
    run_id: String,
    state: Mutex<JournalState>,
    changed: Notify,
    cancelled: AtomicBool,
}

#[derive(Default)]
struct JournalState {
    entries: Vec<Entry>,
    /// `entries[..durable]` are on disk.
    durable: usize,
    /// Entry index of each command, by command ID.
    commands: Vec<usize>,
    /// Entry indices of completions, in journal order.
    completions: Vec<usize>,
    completed: HashSet<u32>,
    /// A task's storage failure, which ends the activation.
    failure: Option<String>,
}

impl JournalState {
    fn push(&mut self, entry: Entry) -> usize {
        let idx = self.entries.len();
        if let Some(c) = entry.event.command() {
            debug_assert_eq!(c as usize, self.commands.len());
            self.commands.push(idx);
        }
        if let Some(c) = entry.event.completes() {
            self.completions.push(idx);
            self.completed.insert(c);
        }
        self.entries.push(entry);
        idx
    }
}

impl RunJournal {
    /// A journal loaded from `entries`. Without a store it is read-only:
    /// appends fail (offline replay).
    pub fn new(store: Option<Store>, run_id: &str, entries: Vec<Entry>) -> Self {
        let mut state = JournalState::default();
        for entry in entries {
            state.push(entry);
        }
        state.durable = state.entries.len();
        RunJournal {
            store,
            run_id: run_id.to_string(),
            state: Mutex::new(state),
            changed: Notify::new(),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Wakes the activation to look again at what the store holds for it
    /// (a payload, another run's end).
    pub fn poke(&self) {
        self.changed.notify_waiters();
    }

    /// Asks the activation to stop at its next wait: the run is cancelled.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.state.lock().expect("journal lock poisoned")
    }

    /// Appends an event and returns the entry once it (and every entry
    /// before it) is on disk.
    pub async fn append(&self, event: Event) -> Result<Entry> {
        let entry = self.record(event)?;
        self.flush().await?;
        Ok(entry)
    }

    /// Appends an event without waiting for the disk. For entries nothing
    /// outside the run depends on yet: the next flush covers them, and one
    /// happens before anything that depends on them executes or is
    /// acknowledged (a step attempt, a store effect others can see, the
    /// run's end or suspension). A crash before it loses only entries whose
    /// effects never left the run, which the recovered run makes again.
    pub fn record(&self, event: Event) -> Result<Entry> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| Error::Wasm("replay never writes".into()))?;
        let entry = {
            let mut state = self.lock();
            let last = state.entries.last().map_or(0, |e| e.at_ms);
            let entry = Entry {
                seq: state.entries.len() as u64,
                at_ms: now_ms().max(last),
                event,
            };
            store.append(&self.run_id, &entry)?;
            state.push(entry.clone());
            entry
        };
        self.changed.notify_waiters();
        Ok(entry)
    }

    /// Waits until every entry recorded so far is on disk.
    pub async fn flush(&self) -> Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let recorded = {
            let state = self.lock();
            if state.durable >= state.entries.len() {
                return Ok(());
            }
            state.entries.len()
        };
        store.sync().await?;
        let mut state = self.lock();
        state.durable = state.durable.max(recorded);
        Ok(())
    }

    /// Records a task's failure, which ends the activation.
    pub fn fail(&self, message: String) {
        self.lock().failure.get_or_insert(message);
        self.changed.notify_waiters();
    }

    /// Compares the recorded command `command` with what the code asks for,
    /// without copying it unless it differs: `extract` returns what the
    /// caller needs from a matching event, or `None` if it does not match.
    fn recorded<T>(&self, command: u32, extract: impl FnOnce(&Event) -> Option<T>) -> Recorded<T> {
        let state = self.lock();
        let Some(&i) = state.commands.get(command as usize) else {
            return Recorded::Absent;
        };
        let entry = &state.entries[i];
        match extract(&entry.event) {
            Some(value) => Recorded::Matches {
                at_ms: entry.at_ms,
                value,
            },
            None => Recorded::Differs(entry.clone()),
        }
    }

    fn recorded_command(&self, command: u32) -> Option<Entry> {
        let state = self.lock();
        state
            .commands
            .get(command as usize)
            .map(|&i| state.entries[i].clone())
    }

    /// Views of the recorded commands in `range`, as `(command, view)`.
    pub(crate) fn command_views(&self, range: std::ops::Range<u32>) -> Vec<(u32, CommandView)> {
        let state = self.lock();
        range
            .filter_map(|c| {
                let &i = state.commands.get(c as usize)?;
                Some((c, CommandView::of(&state.entries[i].event)))
            })
            .collect()
    }

    fn is_completed(&self, command: u32) -> bool {
        self.lock().completed.contains(&command)
    }

    /// How many attempts of a step were started, and when the next may start.
    fn attempts(&self, command: u32) -> (u32, Option<u64>) {
        let state = self.lock();
        let mut started = 0;
        let mut retry_at = None;
        for e in &state.entries {
            match &e.event {
                Event::StepAttemptStarted {
                    command: c,
                    attempt,
                } if *c == command => {
                    started = started.max(*attempt);
                }
                Event::StepAttemptFailed {
                    command: c,
                    retry_at_ms,
                    ..
                } if *c == command => {
                    retry_at = Some(*retry_at_ms);
                }
                _ => {}
            }
        }
        (started, retry_at)
    }

    /// The first undelivered completion among `ids`, in journal order.
    fn take_completion(&self, ids: &[u32], delivered: &mut Delivered) -> Option<Entry> {
        let state = self.lock();
        let recorded = &state.completions;
        let pos = recorded.iter().skip(delivered.prefix).position(|&i| {
            let c = state.entries[i]
                .event
                .completes()
                .expect("indexed as a completion");
            ids.contains(&c) && !delivered.commands.contains(&c)
        })? + delivered.prefix;
        let entry = state.entries[recorded[pos]].clone();
        delivered
            .commands
            .insert(entry.event.completes().expect("a completion"));
        while delivered.prefix < recorded.len()
            && delivered.commands.contains(
                &state.entries[recorded[delivered.prefix]]
                    .event
                    .completes()
                    .expect("a completion"),
            )
        {
            delivered.prefix += 1;
        }
        Some(entry)
    }

    /// The journal records the run's end: everything in it is history.
    fn has_ended(&self) -> bool {
        matches!(
            self.lock().entries.last().map(|e| &e.event),
            Some(Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled)
        )
    }

    fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }
}

/// What the journal holds at a command's position.
enum Recorded<T> {
    Absent,
    Matches { at_ms: u64, value: T },
    Differs(Entry),
}

/// The completions an activation has handed to the workflow.
#[derive(Default)]
struct Delivered {
    commands: HashSet<u32>,
    /// Every completion before this index (in journal order) is delivered.
    prefix: usize,
}

/// Raised out of the guest when the activation cannot go on now.
#[derive(Debug, thiserror::Error)]
pub enum Suspend {
    /// Waiting for a timer due at `wake_at_ms`, or for something outside
    /// the run (a hook's payload, another run's end), which wakes it.
    #[error("waiting for {on}")]
    Waiting { wake_at_ms: Option<u64>, on: String },
    #[error("the journal ends here")]
    JournalEnd,
}

/// The state of one workflow activation, held in the guest's store.
pub struct Activation {
    pub run_id: String,
    pub workflow: String,
    pub started_at_ms: u64,
    pub(crate) inner: Arc<Inner>,
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) journal: Arc<RunJournal>,
    pub(crate) clock: JournalClock,
    /// Replay only: never append, never execute a step.
    pub(crate) offline: bool,
    next_command: u32,
    recorded_commands: u32,
    delivered: Delivered,
    /// Commands with a live task that will complete them.
    in_flight: HashSet<u32>,
    /// Fire times of timers not armed in memory (too far away).
    dormant_timers: HashMap<u32, u64>,
    /// Commands completed from outside the run, by what they wait for.
    external: HashMap<u32, External>,
    /// The hooks the workflow created, by handle.
    hooks: HashMap<u32, OpenHook>,
    tasks: Vec<JoinHandle<()>>,
    /// The first divergence from the journal, in detail.
    pub(crate) divergence: Option<Divergence>,
}

impl Drop for Activation {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Activation {
    pub(crate) fn new(
        inner: Arc<Inner>,
        loaded: Arc<Loaded>,
        journal: Arc<RunJournal>,
        run_id: &str,
        workflow: &str,
        started_at_ms: u64,
        offline: bool,
    ) -> Self {
        let recorded_commands = journal.lock().commands.len() as u32;
        Activation {
            run_id: run_id.to_string(),
            workflow: workflow.to_string(),
            started_at_ms,
            clock: JournalClock::new(started_at_ms),
            inner,
            loaded,
            journal,
            offline,
            next_command: 0,
            recorded_commands,
            delivered: Delivered::default(),
            in_flight: HashSet::new(),
            dormant_timers: HashMap::new(),
            external: HashMap::new(),
            hooks: HashMap::new(),
            tasks: Vec::new(),
            divergence: None,
        }
    }

    /// Commands the workflow issued so far, and commands the journal holds.
    pub(crate) fn progress(&self) -> (u32, u32) {
        (self.next_command, self.recorded_commands)
    }

    /// Stops the step and timer tasks of this activation and waits until
    /// they are gone, so nothing of the run outlives it.
    pub(crate) async fn stop_tasks(&mut self) {
        for task in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
    }

    fn replaying(&self) -> bool {
        self.next_command < self.recorded_commands
    }

    /// Matches the code's next command against the journal, or appends it.
    /// `extract` recognises a matching recorded event and takes what the
    /// caller needs from it; `build` makes the event to append. Returns the
    /// command ID and, when replayed, the extracted value.
    async fn command<T>(
        &mut self,
        extract: impl FnOnce(&Event) -> Option<T>,
        build: impl Fn(u32) -> Event,
    ) -> wasmtime::Result<(u32, Option<T>)> {
        let (command, recorded) = self.match_command(extract, &build)?;
        if recorded.is_none() {
            self.append_command(build(command)).await?;
        }
        Ok((command, recorded))
    }

    /// Takes the next command ID and matches it against the journal without
    /// appending: `None` means the journal ends here and the caller appends
    /// (after any side effect the event records). `requested` describes the
    /// command for a divergence report.
    fn match_command<T>(
        &mut self,
        extract: impl FnOnce(&Event) -> Option<T>,
        requested: impl Fn(u32) -> Event,
    ) -> wasmtime::Result<(u32, Option<T>)> {
        let command = self.next_command;
        self.next_command += 1;
        match self.journal.recorded(command, extract) {
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

    /// Records a command; the flush before whatever depends on it (a step
    /// attempt, the run's end) makes it durable.
    async fn append_command(&mut self, event: Event) -> wasmtime::Result<()> {
        let entry = self.journal.record(event)?;
        self.clock.set(entry.at_ms);
        Ok(())
    }

    /// Flushes the journal before a store effect other callers can see (a
    /// hook registered or released, a run started): what led the workflow
    /// there must not be lost once others have seen its effect.
    async fn flush_before_effect(&self) -> wasmtime::Result<()> {
        Ok(self.journal.flush().await?)
    }

    /// Records the divergence at `command` and returns its error.
    fn diverged(&mut self, command: u32, recorded: &Entry, requested: &Event) -> wasmtime::Error {
        self.divergence = Some(Divergence {
            position: command,
            journal_seq: recorded.seq,
            recorded: CommandView::of(&recorded.event),
            requested: CommandView::of(requested),
            journal_context: self
                .journal
                .command_views(command.saturating_sub(2)..command + 3),
            code_context: self
                .journal
                .command_views(command.saturating_sub(2)..command),
        });
        wasmtime::Error::new(Error::NonDeterminism {
            run_id: self.run_id.clone(),
            position: command,
            recorded: format!("{} (entry {})", recorded.event.describe(), recorded.seq),
            requested: requested.describe(),
        })
    }

    pub async fn schedule_step(&mut self, name: String, input: String) -> wasmtime::Result<u32> {
        let Some(step) = self.loaded.step(&name) else {
            return Err(wasmtime::Error::new(Error::WorkflowFailed {
                run_id: self.run_id.clone(),
                message: format!(
                    "it called step `{name}`, which this component does not export (it exports: {})",
                    self.loaded.step_names().join(", ")
                ),
            }));
        };
        let retry = step.retry;
        let run_id = self.run_id.clone();
        let (command, replayed) = self
            .command(
                |e| match e {
                    Event::StepScheduled {
                        name: n, input: i, ..
                    } => (*n == name && *i == input).then_some(()),
                    _ => None,
                },
                |command| Event::StepScheduled {
                    command,
                    step_id: step_id(&run_id, command),
                    digest: step_digest(&name, &input),
                    name: name.clone(),
                    input: input.clone(),
                },
            )
            .await?;
        if self.offline || self.journal.is_completed(command) {
            return Ok(command);
        }
        let (started, retry_at) = match replayed {
            Some(()) => self.journal.attempts(command),
            None => (0, None),
        };
        let step_id = step_id(&self.run_id, command);
        let task = crate::steps::StepTask {
            inner: self.inner.clone(),
            loaded: self.loaded.clone(),
            journal: self.journal.clone(),
            run_id: self.run_id.clone(),
            command,
            name,
            input,
            step_id,
            retry,
            next_attempt: started + 1,
            not_before_ms: retry_at,
        };
        self.in_flight.insert(command);
        self.tasks.push(tokio::spawn(task.run()));
        Ok(command)
    }

    pub async fn schedule_sleep(&mut self, duration_ms: u64) -> wasmtime::Result<u32> {
        let requested_fire_at = self.clock_ms().saturating_add(duration_ms);
        let (command, recorded) = self
            .command(
                |e| match e {
                    Event::TimerScheduled { fire_at_ms, .. } => Some(*fire_at_ms),
                    _ => None,
                },
                |command| Event::TimerScheduled {
                    command,
                    fire_at_ms: requested_fire_at,
                },
            )
            .await?;
        let fire_at_ms = recorded.unwrap_or(requested_fire_at);
        if self.offline || self.journal.is_completed(command) {
            return Ok(command);
        }
        let wait = fire_at_ms.saturating_sub(now_ms());
        if Duration::from_millis(wait) > self.inner.config.park_limit {
            self.dormant_timers.insert(command, fire_at_ms);
            return Ok(command);
        }
        let journal = self.journal.clone();
        self.in_flight.insert(command);
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            if let Err(e) = journal.record(Event::TimerFired { command }) {
                journal.fail(e.to_string());
            }
        });
        self.tasks.push(task);
        Ok(command)
    }

    /// `patched(change_id)`: true when the journal holds this marker here or
    /// the run is past its history; false for history recorded before the
    /// change, which consumes nothing.
    pub async fn patched(&mut self, change_id: String) -> wasmtime::Result<bool> {
        let command = self.next_command;
        if let Some(recorded) = self.journal.recorded_command(command) {
            return Ok(match &recorded.event {
                Event::PatchMarker { change_id: c, .. } if *c == change_id => {
                    self.next_command += 1;
                    self.clock.set(recorded.at_ms);
                    true
                }
                _ => false,
            });
        }
        if self.offline || self.journal.has_ended() {
            return Ok(false);
        }
        // Past the journal's commands: nothing recorded to match.
        self.command(
            |_| Some(()),
            |command| Event::PatchMarker {
                command,
                change_id: change_id.clone(),
            },
        )
        .await?;
        Ok(true)
    }

    fn clock_ms(&self) -> u64 {
        self.clock.ms()
    }

    pub async fn wait_any(&mut self, ids: &[u32]) -> wasmtime::Result<wit::Completion> {
        loop {
            let journal = self.journal.clone();
            let changed = journal.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(entry) = self.journal.take_completion(ids, &mut self.delivered) {
                self.clock.set(entry.at_ms);
                return Ok(self.completion(entry));
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
            if self.journal.is_cancelled() {
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
            changed.await;
        }
    }

    /// The suspension of an activation whose awaited commands nothing in
    /// this process will complete: a dormant timer wakes it, or something
    /// outside the run does.
    fn suspend(&self, ids: &[u32]) -> wasmtime::Error {
        let wake_at_ms = ids
            .iter()
            .filter_map(|id| self.dormant_timers.get(id))
            .min()
            .copied();
        let mut on: Vec<String> = ids
            .iter()
            .filter_map(|id| self.external.get(id).map(External::describe))
            .collect();
        if let Some(at) = wake_at_ms {
            on.push(format!("a timer due at {at} ms"));
        }
        if on.is_empty() {
            // Only a guest that bypasses keel-sdk gets here.
            return wasmtime::Error::new(Error::WorkflowFailed {
                run_id: self.run_id.clone(),
                message: format!(
                    "it waits for commands {ids:?}, none of which is pending, so it would wait forever"
                ),
            });
        }
        wasmtime::Error::new(Suspend::Waiting {
            wake_at_ms,
            on: on.join(" or "),
        })
    }

    fn completion(&self, entry: Entry) -> wit::Completion {
        let (id, outcome) = match entry.event {
            Event::StepCompleted { command, output } => {
                (command, wit::Outcome::StepCompleted(output))
            }
            Event::StepFailed {
                command,
                error,
                fatal,
                attempts,
            } => {
                let (step_name, step_id) =
                    match self.journal.recorded_command(command).map(|e| e.event) {
                        Some(Event::StepScheduled { name, step_id, .. }) => (name, step_id),
                        _ => (String::new(), journal::step_id(&self.run_id, command)),
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
            Event::TimerFired { command } => (command, wit::Outcome::TimerFired),
            Event::HookReceived { command, payload } => {
                (command, wit::Outcome::HookPayload(payload))
            }
            Event::HookForceClaimed {
                command,
                claimed_by_run_id,
            } => (
                command,
                wit::Outcome::HookRejected(wit::HookRejection::ForceClaimed(claimed_by_run_id)),
            ),
            Event::AwaitedRunEnded {
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
            other => unreachable!("{} is not a completion", other.kind()),
        };
        wit::Completion { id, outcome }
    }

    pub fn metadata(&self) -> wit::WorkflowMetadata {
        wit::WorkflowMetadata {
            run_id: self.run_id.clone(),
            workflow_name: self.workflow.clone(),
            started_at_ms: self.started_at_ms,
        }
    }

    pub fn log(&self, level: wit::LogLevel, message: &str) {
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
}

/// Milliseconds since the Unix epoch, by the machine's clock.
pub fn now_ms() -> u64 {
    crate::idempotency::SystemClock.now_ms()
}
