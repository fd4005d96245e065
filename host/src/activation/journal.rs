//! A run's journal in memory, shared by its activation and its step and
//! timer tasks: the pure [`JournalIndex`] of what is recorded, and the
//! part of it that is durable.
//!
//! Recording is in memory; [`RunJournal::flush`] writes every entry
//! recorded since the last flush (and a pending status change) to the store
//! in one durable append. The activation flushes when something depends on
//! the entries: at the gates of [`crate::effects`] (before an effect
//! others can see, a wait or a suspension), before a step attempt as its
//! workflow's durability asks, and at the run's end. A crash before a
//! flush loses only entries whose effects never left the run, which the
//! recovered run makes again.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use keel_core::divergence::Divergence;
use keel_core::index::{Delivered, JournalIndex};
use keel_core::journal::{Entry, Fact};
use keel_core::lifecycle::Child;
use keel_core::{Clock, RunId, RunRecord, RunStatus};
use keel_store::{Lease, Store};
use tokio::sync::Notify;

use crate::{Error, Result};

/// A run's journal, backed by the store.
pub struct RunJournal {
    store: Option<Arc<dyn Store>>,
    /// The lease this journal's writes are fenced by.
    fence: Option<Lease>,
    clock: Arc<dyn Clock>,
    run_id: RunId,
    state: Arc<Mutex<JournalState>>,
    /// Held while a flush writes, so flushes append in order; owned by the
    /// write itself, which outlives a caller that stops waiting.
    flushing: Arc<tokio::sync::Mutex<()>>,
    pub(super) changed: Notify,
    /// Asked to stop at once (a forced cancel).
    terminated: AtomicBool,
    /// The store may hold a cancel request the activation has not read.
    cancel_hint: AtomicBool,
    /// The store may hold a pause the activation has not read.
    pause_hint: AtomicBool,
    /// Told how long each flush took.
    observer: Option<Arc<dyn crate::Observer>>,
    /// Told the run's ID after each durable write.
    written: Option<tokio::sync::broadcast::Sender<RunId>>,
    /// Most entries the journal may hold.
    max_entries: usize,
}

struct JournalState {
    index: JournalIndex,
    /// `index.entries()[..durable]` are in the store.
    durable: usize,
    /// A run record to store with the next flush.
    run: Option<RunRecord>,
    /// The run record as last set, which an attribute the workflow sets
    /// updates.
    last_run: Option<RunRecord>,
    /// A task's storage failure, which ends the activation.
    failure: Option<String>,
    /// A task tried to record past the journal's bound.
    exceeded: bool,
}

impl RunJournal {
    /// The journal of `run_id` as the store holds it. Without a store it
    /// is read-only: recording fails (offline replay). Entries that do not
    /// form a journal are refused.
    pub fn new(
        store: Option<Arc<dyn Store>>,
        clock: Arc<dyn Clock>,
        run_id: &RunId,
        entries: Vec<Entry>,
    ) -> Result<Self> {
        Self::fenced(store, clock, run_id, entries, None)
    }

    /// A journal whose writes are refused once `fence` is no longer the
    /// run's lease.
    pub fn fenced(
        store: Option<Arc<dyn Store>>,
        clock: Arc<dyn Clock>,
        run_id: &RunId,
        entries: Vec<Entry>,
        fence: Option<Lease>,
    ) -> Result<Self> {
        let durable = entries.len();
        let index = JournalIndex::new(entries).map_err(|e| Error::JournalWrite {
            run_id: run_id.clone(),
            reason: format!("the stored journal is malformed: {e}"),
        })?;
        Ok(RunJournal {
            store,
            fence,
            clock,
            run_id: run_id.clone(),
            state: Arc::new(Mutex::new(JournalState {
                index,
                durable,
                run: None,
                last_run: None,
                failure: None,
                exceeded: false,
            })),
            flushing: Arc::new(tokio::sync::Mutex::new(())),
            changed: Notify::new(),
            terminated: AtomicBool::new(false),
            cancel_hint: AtomicBool::new(false),
            pause_hint: AtomicBool::new(false),
            observer: None,
            written: None,
            max_entries: usize::MAX,
        })
    }

    /// Announces on `written` the run's ID after every durable write, so
    /// that watchers in this process follow the journal without polling.
    pub fn announcing(mut self, written: tokio::sync::broadcast::Sender<RunId>) -> Self {
        self.written = Some(written);
        self
    }

    /// The error of a journal full to its bound.
    pub(super) fn over_bound(&self) -> Error {
        Error::BoundExceeded {
            run_id: Some(self.run_id.clone()),
            bound: "max_journal_entries",
            limit: self.max_entries,
            size: self.max_entries + 1,
            what: "the run's journal".into(),
        }
    }

    /// Whether a task tried to record past the bound (the run fails).
    pub(super) fn exceeded(&self) -> bool {
        self.lock().exceeded
    }

    /// Refuses to record past `max_entries` entries.
    pub fn bounded(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries;
        self
    }

    /// Reports each flush to `observer`.
    pub fn observed(mut self, observer: Arc<dyn crate::Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn lock(&self) -> MutexGuard<'_, JournalState> {
        lock(&self.state)
    }

    /// The run this journal belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// Wakes the activation to look again at what the store holds for it
    /// (a payload, another run's end).
    pub fn poke(&self) {
        self.changed.notify_waiters();
    }

    /// Asks the activation to stop at once: the run is terminated.
    pub fn terminate(&self) {
        self.terminated.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub(super) fn is_terminated(&self) -> bool {
        self.terminated.load(Ordering::SeqCst)
    }

    /// Completes once the run is terminated.
    pub(crate) async fn until_terminated(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_terminated() {
                return;
            }
            changed.await;
        }
    }

    /// Tells the activation that the store may hold a cancel request for
    /// the run, which it reads and journals at its next wait.
    pub fn hint_cancel(&self) {
        self.cancel_hint.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Whether a cancel request may be waiting in the store; clears it.
    pub(super) fn take_cancel_hint(&self) -> bool {
        self.cancel_hint.swap(false, Ordering::SeqCst)
    }

    /// Tells the activation that the store may hold a pause of the run,
    /// which it reads at its next wait.
    pub fn hint_pause(&self) {
        self.pause_hint.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Whether a pause may be waiting in the store; clears it.
    pub(super) fn take_pause_hint(&self) -> bool {
        self.pause_hint.swap(false, Ordering::SeqCst)
    }

    /// The pause the journal says holds the run (its [`Fact::RunPaused`]
    /// entry), if no resume followed it.
    pub fn paused(&self) -> Option<Entry> {
        self.lock().index.paused().cloned()
    }

    /// The run's journaled cancel request, if any.
    pub fn cancel_request(&self) -> Option<Entry> {
        self.lock().index.cancel_request().cloned()
    }

    /// The steps the workflow scheduled after its cancel.
    pub(super) fn steps_after_cancel(&self) -> usize {
        self.lock().index.steps_after_cancel()
    }

    /// The runs the workflow started, in order, with their close policies.
    pub fn children(&self) -> Vec<Child> {
        self.lock().index.children()
    }

    /// When the step of `command`'s first attempt since the last retry
    /// started.
    pub(crate) fn first_attempt_at(&self, command: u32) -> Option<u64> {
        self.lock().index.first_attempt_at(command)
    }

    /// An attempt of the step of `command` is running.
    pub(super) fn attempt_running(&self, command: u32) -> bool {
        self.lock().index.attempt_running(command)
    }

    /// Journals, durably (so that a run which kills its workers before
    /// anything else of it is durable is still counted), that worker
    /// `by_worker` took the run over from `lost`; the error of the
    /// `max_takeovers` bound if more than `max` takeovers have come since
    /// the run's last progress
    /// ([`JournalIndex::takeovers_since_progress`]).
    pub async fn taken_over(
        &self,
        lost: &keel_store::LostLease,
        by_worker: &str,
        max: usize,
    ) -> Result<Option<Error>> {
        self.append(Fact::TakenOver {
            from_worker: lost.owner.clone(),
            expired_at_ms: lost.expired_at_ms,
            by_worker: by_worker.into(),
        })
        .await?;
        let takeovers = self.lock().index.takeovers_since_progress();
        Ok((takeovers > max).then(|| Error::BoundExceeded {
            run_id: Some(self.run_id.clone()),
            bound: "max_takeovers",
            limit: max,
            size: takeovers,
            what: "the run's count of takeovers from workers that stopped while driving it, with no step completed or failed in between,".into(),
        }))
    }

    /// The run's deadline, if one was set.
    pub(super) fn deadline_ms(&self) -> Option<u64> {
        self.lock().index.deadline_ms()
    }

    /// Records a fact in memory and returns its entry; the next flush
    /// makes it durable.
    pub fn record(&self, fact: Fact) -> Result<Entry> {
        if self.store.is_none() {
            return Err(Error::Wasm("replay never writes".into()));
        }
        let entry = {
            let mut state = self.lock();
            // The run's end is always recorded, so that a run over the bound
            // can end.
            if !fact.is_end() && state.index.len() >= self.max_entries {
                state.exceeded = true;
                return Err(self.over_bound());
            }
            let entry = state.index.next_entry(fact, self.clock.now_ms());
            state
                .index
                .push(entry.clone())
                .map_err(|e| Error::JournalWrite {
                    run_id: self.run_id.clone(),
                    reason: e.to_string(),
                })?;
            entry
        };
        self.changed.notify_waiters();
        Ok(entry)
    }

    /// Records a fact and returns its entry once it is durable.
    pub async fn append(&self, fact: Fact) -> Result<Entry> {
        let entry = self.record(fact)?;
        self.flush().await?;
        Ok(entry)
    }

    /// Stores `run` with the next flush.
    pub fn set_run(&self, run: RunRecord) {
        let mut state = self.lock();
        state.last_run = Some(run.clone());
        state.run = Some(run);
    }

    /// Stores the run as waiting (on a timer due at `wake_at_ms`, or on
    /// something outside it) with the next flush, while its activation
    /// waits in memory: every view says `waiting`, however the instance
    /// is kept. Whether the record changed.
    pub(super) fn mark_waiting(&self, wake_at_ms: Option<u64>, now_ms: u64) -> bool {
        let mut state = self.lock();
        let Some(mut run) = state.run.take().or_else(|| state.last_run.clone()) else {
            return false;
        };
        let changed = run.status != RunStatus::Waiting || run.wake_at_ms != wake_at_ms;
        if changed {
            run.status = RunStatus::Waiting;
            run.wake_at_ms = wake_at_ms;
            run.updated_at_ms = now_ms;
            state.run = Some(run.clone());
        }
        state.last_run = Some(run);
        changed
    }

    /// Stores the run as running again with the next flush, if it was
    /// marked waiting ([`RunJournal::mark_waiting`]).
    pub(super) fn mark_running(&self, now_ms: u64) {
        let mut state = self.lock();
        let waiting = state.last_run.as_ref().map(|r| r.status) == Some(RunStatus::Waiting);
        if let (true, Some(mut run)) = (waiting, state.last_run.clone()) {
            run.status = RunStatus::Running;
            run.wake_at_ms = None;
            run.updated_at_ms = now_ms;
            state.last_run = Some(run.clone());
            state.run = Some(run);
        }
    }

    /// Stores the run record with the attribute the workflow set, with
    /// the next flush (the attribute's entry is journaled already).
    pub(super) fn set_attribute(&self, key: String, value: String) {
        let mut state = self.lock();
        if let Some(mut run) = state.run.take().or_else(|| state.last_run.clone()) {
            run.attributes.insert(key, value);
            state.last_run = Some(run.clone());
            state.run = Some(run);
        }
    }

    /// The run's trace context, if its admission recorded one: `(trace_id,
    /// span_id, parent_span_id)`.
    pub fn trace(&self) -> Option<(String, String, Option<String>)> {
        let state = self.lock();
        let (t, s, p) = state.index.trace()?;
        Some((t.to_string(), s.to_string(), p.map(str::to_string)))
    }

    /// The attributes the workflow set, as its journal records them.
    pub fn attributes(&self) -> keel_core::Attributes {
        self.lock().index.attributes()
    }

    /// How many payloads of its start token the run took
    /// ([`keel_core::index::JournalIndex::start_payloads_taken`]).
    pub fn start_payloads_taken(&self) -> u64 {
        self.lock().index.start_payloads_taken()
    }

    /// Makes every entry recorded so far (and a pending run record)
    /// durable before `effect`, which may depend on them.
    pub async fn gate(&self, effect: crate::effects::Effect) -> Result<()> {
        tracing::trace!(effect = effect.as_str(), "effect gate");
        self.flush().await
    }

    /// Makes the first `entries` entries durable, if they are not yet
    /// (with whatever else is recorded by then).
    pub async fn durable_through(&self, entries: usize) -> Result<()> {
        if self.lock().durable >= entries {
            return Ok(());
        }
        self.flush().await
    }

    /// Writes every entry recorded so far (and a pending run record) to
    /// the store, durably.
    pub async fn flush(&self) -> Result<()> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        let flushing = self.flushing.clone().lock_owned().await;
        let (batch, run, end) = {
            let mut state = self.lock();
            let end = state.index.len();
            let batch = state.index.entries()[state.durable..].to_vec();
            (batch, state.run.take(), end)
        };
        if batch.is_empty() && run.is_none() {
            return Ok(());
        }
        let (run_id, fence) = (self.run_id.clone(), self.fence.clone());
        self.write(flushing, batch.len(), end, async move {
            store
                .append(&run_id, &batch, run.as_ref(), fence.as_ref())
                .await
        })
        .await
    }

    /// Ends the run: records `fact` and stores the final `run` record with
    /// every entry not yet durable, ending the run's hooks, in one durable
    /// store operation. Returns the runs that were waiting for this one.
    pub async fn end(&self, run: &RunRecord, fact: Fact) -> Result<Vec<RunId>> {
        let store = self
            .store
            .clone()
            .ok_or_else(|| Error::Wasm("replay never writes".into()))?;
        let flushing = self.flushing.clone().lock_owned().await;
        self.record(fact)?;
        let (batch, end) = {
            let mut state = self.lock();
            state.run = None;
            let end = state.index.len();
            (state.index.entries()[state.durable..].to_vec(), end)
        };
        let now = self.clock.now_ms();
        let (run, fence) = (run.clone(), self.fence.clone());
        self.write(flushing, batch.len(), end, async move {
            store.end_run(&run, &batch, now, fence.as_ref()).await
        })
        .await
    }

    /// Carries out a store write of the entries up to `end`, holding
    /// `flushing`, on a task of its own: a caller that stops waiting (a step
    /// task aborted as its activation ends) does not stop the write
    /// halfway, so what the store wrote is always known to be durable and
    /// the next flush starts after it, never writing an entry twice.
    async fn write<T: Send + 'static>(
        &self,
        flushing: tokio::sync::OwnedMutexGuard<()>,
        entries: usize,
        end: usize,
        write: impl Future<Output = keel_store::Result<T>> + Send + 'static,
    ) -> Result<T> {
        let state = self.state.clone();
        let observer = self.observer.clone();
        let written = self.written.clone();
        let run_id = self.run_id.clone();
        let task = tokio::spawn(async move {
            let _flushing = flushing;
            let started = std::time::Instant::now();
            let out = write.await?;
            if let Some(observer) = &observer {
                observer.journal_flush(entries, started.elapsed());
            }
            {
                let mut state = lock(&state);
                state.durable = state.durable.max(end);
            }
            if let Some(written) = &written {
                // No watcher is no error.
                let _ = written.send(run_id);
            }
            Ok(out)
        });
        task.await.map_err(|e| Error::JournalWrite {
            run_id: self.run_id.clone(),
            reason: format!("the journal write stopped: {e}"),
        })?
    }

    /// Records a task's failure, which ends the activation.
    pub fn fail(&self, message: String) {
        self.lock().failure.get_or_insert(message);
        self.changed.notify_waiters();
    }

    pub(super) fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// The recorded command `command`, if any.
    pub(super) fn command(&self, command: u32) -> Option<Entry> {
        self.lock().index.command(command).cloned()
    }

    /// The ID of the step named `name` the run schedules next
    /// (`JournalIndex::step_id_for`).
    pub(super) fn step_id_for(&self, name: &str) -> keel_core::StepId {
        let state = self.lock();
        state.index.step_id_for(&self.run_id, name)
    }

    /// A retry was recorded after `command`.
    pub(super) fn retried_after(&self, command: u32) -> bool {
        self.lock().index.retried_after(command)
    }

    /// The index after the last payload of hook `token` the run took.
    pub(super) fn payloads_taken(&self, token: &str) -> u64 {
        self.lock().index.payloads_taken(token)
    }

    /// The payloads a retry skipped, as `(token, index)`.
    pub(super) fn skipped_payloads(&self) -> HashSet<(String, u64)> {
        self.lock().index.skipped_payloads()
    }

    pub(super) fn is_completed(&self, command: u32) -> bool {
        self.lock().index.is_completed(command)
    }

    pub(super) fn attempts(&self, command: u32) -> keel_core::index::Attempts {
        self.lock().index.attempts(command)
    }

    pub(super) fn take_completion(&self, ids: &[u32], delivered: &mut Delivered) -> Option<Entry> {
        self.lock().index.take_completion(ids, delivered).cloned()
    }

    /// The next completion among `ids`, or the cancel, in journal order;
    /// `(entry, is_cancel)`.
    pub(super) fn take_wake(
        &self,
        ids: &[u32],
        delivered: &mut Delivered,
    ) -> Option<(Entry, bool)> {
        use keel_core::index::Wake;
        match self.lock().index.take_wake(ids, delivered)? {
            Wake::Completion(e) => Some((e.clone(), false)),
            Wake::Cancel(e) => Some((e.clone(), true)),
        }
    }

    pub(super) fn has_ended(&self) -> bool {
        self.lock().index.has_ended()
    }

    pub(super) fn command_count(&self) -> u32 {
        self.lock().index.command_count()
    }

    /// The divergence of `requested` from the recorded command `command`.
    pub(super) fn divergence(
        &self,
        command: u32,
        recorded: &Entry,
        requested: &Fact,
    ) -> Divergence {
        Divergence::at(&self.lock().index, command, recorded, requested)
    }
}

fn lock(state: &Mutex<JournalState>) -> MutexGuard<'_, JournalState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use keel_store::JournalStore;
    use keel_store::faulty::FaultyStore;
    use keel_store::sled::SledStore;

    use super::*;

    fn started() -> Fact {
        Fact::RunStarted {
            workflow: "w".into(),
            input: "null".into(),
        }
    }

    fn attempt(command: u32) -> Fact {
        Fact::StepAttemptStarted {
            command,
            attempt: 1,
        }
    }

    /// A step task aborted while its flush waits on the store (its
    /// activation ended) leaves the journal consistent: the write it began
    /// completes, and the next flush writes only what came after it.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_flush_abandoned_by_its_caller_still_completes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FaultyStore::new(SledStore::open(dir.path()).unwrap()));
        let run_id = RunId::parse("held-flush").unwrap();
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let dyn_store: Arc<dyn Store> = store.clone();
        let journal = Arc::new(RunJournal::new(Some(dyn_store), clock, &run_id, vec![]).unwrap());
        journal.append(started()).await.unwrap();

        store.hold_next_write();
        let task = tokio::spawn({
            let journal = journal.clone();
            async move { journal.append(attempt(0)).await }
        });
        store.write_held().await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        journal.record(attempt(1)).unwrap();
        store.release_write();

        journal.flush().await.unwrap();
        let stored = store.journal(&run_id).await.unwrap();
        let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [0, 1, 2], "each entry stored once, in order");
        assert_eq!(stored[2].fact, attempt(1));
    }
}
