//! A store that wraps another and injects faults, for testing what the
//! engine does when a store fails or supports less, and for `keel
//! crashtest`'s crash points. Every method delegates to the wrapped store
//! unless a fault is armed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use keel_core::bulk::JobRecord;
use keel_core::flow::{LimitRow, RunSlot, SlotState};
use keel_core::schedule::ScheduleRecord;
use keel_core::{
    Capabilities, Deployment, Entry, EventRecord, HookRecord, KeyHold, RunId, RunRecord,
};

use crate::{
    Admission, Admitted, ComponentStore, DeploymentStore, EventStore, FlowStore, HookPayload,
    HookStore, JournalStore, KeyStore, Lease, LeaseStore, Registered, Result, RunStore,
    ScheduleStore, Store, StoreError, Wake, WakeStore, WorkerRecord, WorkerStore,
};

/// Wraps a store and injects faults. `FaultyStore<dyn Store>` (through an
/// `Arc` of a concrete one) lets a test arm faults whatever store it runs
/// on.
pub struct FaultyStore<S: ?Sized> {
    unconfirm_next_write: AtomicBool,
    /// Reads of runs and journals fail, as with the database gone.
    unreadable: AtomicBool,
    /// The next event record is stored but reported unconfirmed.
    unconfirm_next_event: AtomicBool,
    lose_start_hooks: AtomicBool,
    capabilities: Mutex<Option<Capabilities>>,
    /// Journal writes (appends and run ends) made so far.
    journal_writes: AtomicU64,
    /// Leases asked for by `acquire_lease` so far.
    lease_takes: AtomicU64,
    /// The crash armed, if any: at which journal write, and how.
    crash: Mutex<Option<Crash>>,
    /// The crash happened: every journal write fails from then on.
    crashed: AtomicBool,
    /// The next journal write lands, then waits for a release before its
    /// caller hears of it.
    hold: Hold,
    /// Job updates made (or attempted) so far.
    job_updates: AtomicU64,
    /// From this job update on (counted from 1; 0: never), job updates
    /// fail as a dead process's would.
    die_at_job_update: AtomicU64,
    /// Last, so that the wrapper can be unsized to `FaultyStore<dyn Store>`.
    inner: S,
}

/// A journal write held after it landed: armed, then held, then released.
#[derive(Default)]
struct Hold {
    armed: AtomicBool,
    held: tokio::sync::Notify,
    released: tokio::sync::Notify,
}

/// A crash injected at a journal write, as a process killed there would
/// leave the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The journal write (appends and run ends, counted from 1) it hits.
    pub at_write: u64,
    /// Whether that write lands before the crash.
    pub when: CrashWhen,
}

/// Where in a journal write a crash strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashWhen {
    /// The write is lost.
    Before,
    /// The write lands, and the process dies before it hears so.
    After,
}

impl CrashWhen {
    /// `before` or `after`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashWhen::Before => "before",
            CrashWhen::After => "after",
        }
    }
}

impl<S: Store> FaultyStore<S> {
    /// `inner`, with no fault armed.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            unconfirm_next_write: AtomicBool::new(false),
            unreadable: AtomicBool::new(false),
            unconfirm_next_event: AtomicBool::new(false),
            lose_start_hooks: AtomicBool::new(false),
            capabilities: Mutex::new(None),
            journal_writes: AtomicU64::new(0),
            lease_takes: AtomicU64::new(0),
            crash: Mutex::new(None),
            crashed: AtomicBool::new(false),
            hold: Hold::default(),
            job_updates: AtomicU64::new(0),
            die_at_job_update: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Store + ?Sized> FaultyStore<S> {
    /// Arms a crash: at its journal write, the store stops taking journal
    /// writes (that one lost or landed, as `crash.when` says; every one
    /// after fails), so the run goes no further, as if the process had
    /// died there. Recovery reopens the wrapped store.
    pub fn crash_at(&self, crash: Crash) {
        *self.crash.lock().unwrap_or_else(|e| e.into_inner()) = Some(crash);
    }

    /// Journal writes made (or attempted) so far.
    pub fn journal_writes(&self) -> u64 {
        self.journal_writes.load(Ordering::SeqCst)
    }

    /// Leases asked for with `acquire_lease` so far.
    pub fn lease_takes(&self) -> u64 {
        self.lease_takes.load(Ordering::SeqCst)
    }

    /// Whether the armed crash has happened.
    pub fn has_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    fn dead() -> StoreError {
        StoreError::Backend {
            reason: "injected crash: the process died here".into(),
        }
    }

    /// Makes a journal write through `write`, unless the armed crash
    /// strikes it (or struck before).
    async fn journal_write<T>(
        &self,
        write: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        if self.has_crashed() {
            return Err(Self::dead());
        }
        let n = self.journal_writes.fetch_add(1, Ordering::SeqCst) + 1;
        let crash = *self.crash.lock().unwrap_or_else(|e| e.into_inner());
        match crash {
            Some(c) if c.at_write == n => {
                self.crashed.store(true, Ordering::SeqCst);
                if c.when == CrashWhen::After {
                    write.await?;
                }
                Err(Self::dead())
            }
            _ => {
                let result = write.await;
                if self.hold.armed.swap(false, Ordering::SeqCst) {
                    let released = self.hold.released.notified();
                    self.hold.held.notify_one();
                    released.await;
                }
                self.confirm(result)
            }
        }
    }

    /// The next journal write lands in the wrapped store and then waits,
    /// its caller not yet told, until [`FaultyStore::release_write`]: for
    /// proving what happens when the caller stops waiting in between.
    pub fn hold_next_write(&self) {
        self.hold.armed.store(true, Ordering::SeqCst);
    }

    /// Completes once the write armed by [`FaultyStore::hold_next_write`]
    /// has landed and is held.
    pub async fn write_held(&self) {
        self.hold.held.notified().await;
    }

    /// From job update `n` on (counted from 1), every job update is lost,
    /// as if the process carrying the job out died there: the actions it
    /// took since its last update have landed, its progress has not.
    pub fn die_at_job_update(&self, n: u64) {
        self.die_at_job_update.store(n, Ordering::SeqCst);
    }

    /// Lets the held write report to its caller.
    pub fn release_write(&self) {
        self.hold.released.notify_one();
    }

    /// The next write is made but reported [`StoreError::Unconfirmed`], as a
    /// lost connection or a failed flush would leave it.
    pub fn unconfirm_next_write(&self) {
        self.unconfirm_next_write.store(true, Ordering::SeqCst);
    }

    /// The next event record is stored but reported
    /// [`StoreError::Unconfirmed`] (the runs the event starts are not).
    pub fn unconfirm_next_event(&self) {
        self.unconfirm_next_event.store(true, Ordering::SeqCst);
    }

    /// While `on`, reading a run or a journal fails as a database that went
    /// away would fail it.
    pub fn fail_reads(&self, on: bool) {
        self.unreadable.store(on, Ordering::SeqCst);
    }

    fn readable(&self) -> Result<()> {
        if self.unreadable.load(Ordering::SeqCst) {
            return Err(StoreError::Backend {
                reason: "injected fault: the database went away".into(),
            });
        }
        Ok(())
    }

    /// Declares fewer capabilities than the wrapped store has.
    pub fn limit_capabilities(&self, capabilities: Capabilities) {
        *self.capabilities.lock().unwrap_or_else(|e| e.into_inner()) = Some(capabilities);
    }

    /// Admits runs without their start hooks, as a broken store would: for
    /// proving that the conformance suite catches it.
    pub fn lose_start_hooks(&self) {
        self.lose_start_hooks.store(true, Ordering::SeqCst);
    }

    fn confirm<T>(&self, result: Result<T>) -> Result<T> {
        let value = result?;
        if self.unconfirm_next_write.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unconfirmed {
                reason: "injected fault".into(),
            });
        }
        Ok(value)
    }
}

#[async_trait]
impl<S: Store + ?Sized> RunStore for FaultyStore<S> {
    async fn admit(&self, mut admission: Admission<'_>) -> Result<Admitted> {
        if self.lose_start_hooks.load(Ordering::SeqCst) {
            admission.start_hook = None;
        }
        // A continuation's admission (continue-as-new) is a write of the
        // run that continues: a crash point.
        if admission.handover.is_some() {
            return self.journal_write(self.inner.admit(admission)).await;
        }
        self.confirm(self.inner.admit(admission).await)
    }
    async fn import(&self, run: &RunRecord, journal: &[Entry]) -> Result<()> {
        self.confirm(self.inner.import(run, journal).await)
    }
    async fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        self.readable()?;
        self.inner.get_run(run_id).await
    }
    async fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner.list_runs().await
    }
    async fn runs_before(
        &self,
        before: Option<&keel_core::RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        self.inner.runs_before(before, limit).await
    }
    async fn runs_with_attributes(
        &self,
        attributes: &keel_core::Attributes,
        before: Option<&keel_core::RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        self.inner
            .runs_with_attributes(attributes, before, limit)
            .await
    }
    async fn live_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner.live_runs().await
    }
    async fn live_counts(&self) -> Result<crate::LiveCounts> {
        self.inner.live_counts().await
    }
    async fn end_run(
        &self,
        run: &RunRecord,
        journal: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Vec<RunId>> {
        self.journal_write(self.inner.end_run(run, journal, now_ms, fence))
            .await
    }
}

#[async_trait]
impl<S: Store + ?Sized> JournalStore for FaultyStore<S> {
    async fn append(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        self.journal_write(self.inner.append(run_id, entries, run, fence))
            .await
    }
    async fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.readable()?;
        self.inner.journal(run_id).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> LeaseStore for FaultyStore<S> {
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>> {
        self.lease_takes.fetch_add(1, Ordering::SeqCst);
        self.inner
            .acquire_lease(run_id, owner, ttl_ms, now_ms)
            .await
    }
    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64, now_ms: u64) -> Result<Lease> {
        self.inner.renew_lease(lease, ttl_ms, now_ms).await
    }
    async fn release_lease(&self, lease: &Lease, again_at_ms: Option<u64>) -> Result<()> {
        self.inner.release_lease(lease, again_at_ms).await
    }
    async fn claim_due(
        &self,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<Lease>> {
        self.inner.claim_due(owner, ttl_ms, now_ms, limit).await
    }
    async fn next_due(&self) -> Result<Option<u64>> {
        self.inner.next_due().await
    }
    async fn held_leases(&self, now_ms: u64) -> Result<Vec<Lease>> {
        self.inner.held_leases(now_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> WorkerStore for FaultyStore<S> {
    async fn heartbeat(&self, worker: &WorkerRecord) -> Result<()> {
        self.inner.heartbeat(worker).await
    }
    async fn list_workers(&self, now_ms: u64) -> Result<Vec<(WorkerRecord, usize)>> {
        self.inner.list_workers(now_ms).await
    }
    async fn remove_worker(&self, worker_id: &str) -> Result<()> {
        self.inner.remove_worker(worker_id).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> HookStore for FaultyStore<S> {
    async fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<Registered> {
        self.confirm(self.inner.register_hook(hook, force, now_ms).await)
    }
    async fn deliver(
        &self,
        token: &str,
        payload: &str,
        payload_id: Option<crate::PayloadId<'_>>,
    ) -> Result<crate::Resumed> {
        self.confirm(self.inner.deliver(token, payload, payload_id).await)
    }
    async fn purge_expired_payload_ids(&self, now_ms: u64) -> Result<u64> {
        self.inner.purge_expired_payload_ids(now_ms).await
    }
    async fn delivered(&self, run_id: &str, token: &str, payload_id: &str) -> Result<Option<u64>> {
        self.inner.delivered(run_id, token, payload_id).await
    }
    async fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord> {
        self.inner.get_hook(token, now_ms).await
    }
    async fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>> {
        self.inner.list_hooks(now_ms).await
    }
    async fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<HookPayload> {
        self.inner.payload(run_id, token, index).await
    }
    async fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()> {
        self.confirm(self.inner.dispose_hook(run_id, token).await)
    }
    async fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize> {
        self.inner.purge_expired_hooks(now_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> KeyStore for FaultyStore<S> {
    async fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>> {
        self.inner.key_hold(workflow, key).await
    }
    async fn purge_expired_keys(&self, now_ms: u64) -> Result<usize> {
        self.inner.purge_expired_keys(now_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> EventStore for FaultyStore<S> {
    async fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()> {
        self.inner.subscribe(event_key, workflow, hash).await
    }
    async fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>> {
        self.inner.subscribers(event_key).await
    }
    async fn put_event(&self, event: &EventRecord) -> Result<()> {
        let stored = self.confirm(self.inner.put_event(event).await);
        if stored.is_ok() && self.unconfirm_next_event.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unconfirmed {
                reason: "injected fault".into(),
            });
        }
        stored
    }
    async fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.inner.list_events().await
    }
}

#[async_trait]
impl<S: Store + ?Sized> ComponentStore for FaultyStore<S> {
    async fn put_component(&self, hash: &str, bytes: &[u8], now_ms: u64) -> Result<()> {
        self.inner.put_component(hash, bytes, now_ms).await
    }
    async fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.inner.get_component(hash).await
    }
    async fn components(&self) -> Result<Vec<crate::StoredComponent>> {
        self.inner.components().await
    }
    async fn delete_components(
        &self,
        hashes: &[String],
        stored_before_ms: u64,
    ) -> Result<Vec<crate::StoredComponent>> {
        self.inner.delete_components(hashes, stored_before_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> DeploymentStore for FaultyStore<S> {
    async fn put_deployment(&self, deployment: &Deployment) -> Result<()> {
        self.confirm(self.inner.put_deployment(deployment).await)
    }
    async fn deployments(&self) -> Result<Vec<Deployment>> {
        self.inner.deployments().await
    }
    async fn deployment(&self, hash: &str) -> Result<Option<Deployment>> {
        self.inner.deployment(hash).await
    }
    async fn delete_deployment(&self, hash: &str, deployed_at_ms: u64) -> Result<bool> {
        self.inner.delete_deployment(hash, deployed_at_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> WakeStore for FaultyStore<S> {
    async fn watch(&self, run_id: &str, watcher: &str) -> Result<()> {
        self.inner.watch(run_id, watcher).await
    }
    async fn is_woken(&self, run_id: &str) -> Result<bool> {
        self.inner.is_woken(run_id).await
    }
    fn wake_stream(&self) -> Option<tokio::sync::broadcast::Receiver<Wake>> {
        self.inner.wake_stream()
    }
    async fn announce(&self, wake: &Wake) -> Result<()> {
        self.inner.announce(wake).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> ScheduleStore for FaultyStore<S> {
    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        self.inner.create_schedule(schedule).await
    }
    async fn update_schedule(&self, schedule: &ScheduleRecord) -> Result<u64> {
        self.inner.update_schedule(schedule).await
    }
    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRecord>> {
        self.inner.schedule(name).await
    }
    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>> {
        self.inner.list_schedules().await
    }
    async fn delete_schedule(&self, name: &str) -> Result<bool> {
        self.inner.delete_schedule(name).await
    }
    async fn due_schedules(&self, now_ms: u64, limit: usize) -> Result<Vec<ScheduleRecord>> {
        self.inner.due_schedules(now_ms, limit).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::IntegrationStore for FaultyStore<S> {
    async fn signing_secret(&self, candidate: &[u8]) -> Result<Vec<u8>> {
        self.inner.signing_secret(candidate).await
    }
    async fn create_webhook(&self, webhook: &keel_core::webhook::WebhookRecord) -> Result<()> {
        self.inner.create_webhook(webhook).await
    }
    async fn webhook(&self, id: &str) -> Result<Option<keel_core::webhook::WebhookRecord>> {
        self.inner.webhook(id).await
    }
    async fn list_webhooks(&self) -> Result<Vec<keel_core::webhook::WebhookRecord>> {
        self.inner.list_webhooks().await
    }
    async fn delete_webhook(&self, id: &str) -> Result<bool> {
        self.inner.delete_webhook(id).await
    }
    async fn claim_signature(
        &self,
        id: &str,
        signature: &str,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<bool> {
        self.inner
            .claim_signature(id, signature, until_ms, now_ms)
            .await
    }
    async fn purge_expired_signatures(&self, now_ms: u64) -> Result<u64> {
        self.inner.purge_expired_signatures(now_ms).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::JobStore for FaultyStore<S> {
    async fn create_job(&self, job: &JobRecord) -> Result<()> {
        self.inner.create_job(job).await
    }
    async fn update_job(&self, job: &JobRecord) -> Result<u64> {
        let n = self.job_updates.fetch_add(1, Ordering::SeqCst) + 1;
        let die = self.die_at_job_update.load(Ordering::SeqCst);
        if die != 0 && n >= die {
            return Err(Self::dead());
        }
        self.inner.update_job(job).await
    }
    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        self.inner.job(job_id).await
    }
    async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>> {
        self.inner.jobs(limit).await
    }
    async fn running_jobs(&self) -> Result<Vec<JobRecord>> {
        self.inner.running_jobs().await
    }
}

#[async_trait]
impl<S: Store + ?Sized> FlowStore for FaultyStore<S> {
    async fn take_slot(&self, run_id: &str, now_ms: u64) -> Result<Option<SlotState>> {
        self.confirm(self.inner.take_slot(run_id, now_ms).await)
    }
    // Not a fault point: it is idempotent and changes no run, so the
    // faults injected into a retry reach the write that does.
    async fn rearm_slot(&self, run_id: &str) -> Result<bool> {
        self.inner.rearm_slot(run_id).await
    }
    async fn run_slot(&self, run_id: &str) -> Result<Option<RunSlot>> {
        self.inner.run_slot(run_id).await
    }
    async fn set_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: Option<u32>,
        now_ms: u64,
    ) -> Result<Vec<RunId>> {
        self.confirm(self.inner.set_limit(workflow, key, limit, now_ms).await)
    }
    async fn limit_rows(&self) -> Result<Vec<LimitRow>> {
        self.inner.limit_rows().await
    }
    async fn limited_workflows(&self) -> Result<Vec<String>> {
        self.inner.limited_workflows().await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::RateStore for FaultyStore<S> {
    async fn take_grant(
        &self,
        key: &str,
        limit: u32,
        per_ms: u64,
        now_ms: u64,
    ) -> Result<crate::Grant> {
        self.inner.take_grant(key, limit, per_ms, now_ms).await
    }
    async fn restamp_grant(&self, key: &str, at_ms: u64, now_ms: u64) -> Result<()> {
        self.inner.restamp_grant(key, at_ms, now_ms).await
    }
    async fn take_permit(
        &self,
        key: &str,
        holder: &str,
        limit: u32,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<crate::Grant> {
        self.inner
            .take_permit(key, holder, limit, ttl_ms, now_ms)
            .await
    }
    async fn release_permit(&self, key: &str, holder: &str) -> Result<()> {
        self.inner.release_permit(key, holder).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::CancelStore for FaultyStore<S> {
    async fn request_cancel(
        &self,
        run_id: &str,
        request: &keel_core::lifecycle::CancelRequest,
    ) -> Result<Option<keel_core::lifecycle::CancelRequest>> {
        self.confirm(self.inner.request_cancel(run_id, request).await)
    }
    async fn cancel_request(
        &self,
        run_id: &str,
    ) -> Result<Option<keel_core::lifecycle::CancelRequest>> {
        self.inner.cancel_request(run_id).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::PauseStore for FaultyStore<S> {
    async fn request_pause(
        &self,
        run_id: &str,
        request: &keel_core::lifecycle::PauseRequest,
    ) -> Result<Option<keel_core::lifecycle::PauseRequest>> {
        self.confirm(self.inner.request_pause(run_id, request).await)
    }
    async fn lift_pause(&self, run_id: &str) -> Result<Option<keel_core::lifecycle::PauseRequest>> {
        self.confirm(self.inner.lift_pause(run_id).await)
    }
    async fn pause_request(
        &self,
        run_id: &str,
    ) -> Result<Option<keel_core::lifecycle::PauseRequest>> {
        self.inner.pause_request(run_id).await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::RetentionStore for FaultyStore<S> {
    async fn ended_runs(
        &self,
        created_before_ms: u64,
        after: Option<&keel_core::RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        self.inner.ended_runs(created_before_ms, after, limit).await
    }
    async fn delete_runs(
        &self,
        run_ids: &[RunId],
        tokens_at_ms: Option<u64>,
    ) -> Result<keel_core::retention::Deleted> {
        self.confirm(self.inner.delete_runs(run_ids, tokens_at_ms).await)
    }
    async fn delete_events_before(&self, before_ms: u64) -> Result<u64> {
        self.inner.delete_events_before(before_ms).await
    }
    async fn stats(&self) -> Result<keel_core::retention::StoreStats> {
        self.inner.stats().await
    }
}

#[async_trait]
impl<S: Store + ?Sized> crate::StreamStore for FaultyStore<S> {
    async fn write_stream(
        &self,
        run_id: &str,
        stream: &str,
        origin: &keel_core::stream::Origin,
        body: keel_core::stream::ChunkBody,
        now_ms: u64,
        max_run_bytes: u64,
    ) -> Result<Vec<keel_core::stream::Chunk>> {
        self.confirm(
            self.inner
                .write_stream(run_id, stream, origin, body, now_ms, max_run_bytes)
                .await,
        )
    }
    async fn begin_attempt(
        &self,
        run_id: &str,
        step_id: &str,
        attempt: u32,
        now_ms: u64,
    ) -> Result<Vec<keel_core::stream::Chunk>> {
        self.inner
            .begin_attempt(run_id, step_id, attempt, now_ms)
            .await
    }
    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<keel_core::stream::Chunk>> {
        self.readable()?;
        self.inner.chunks(run_id, stream, from, limit).await
    }
    async fn streams(&self, run_id: &str) -> Result<Vec<keel_core::stream::StreamInfo>> {
        self.readable()?;
        self.inner.streams(run_id).await
    }
}

impl<S: Store + ?Sized> Store for FaultyStore<S> {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(|| self.inner.capabilities())
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}
