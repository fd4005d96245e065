//! The engine: a [`Keel`] over any [`Store`]. It loads components, admits
//! runs ([`admission`]), drives them through activations and finishes them
//! ([`drive`]), and finds the runs that can make progress ([`worker`]). It
//! is what activations reach through [`Outside`] and steps through
//! [`StepOutside`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tracing::Instrument as _;

use async_trait::async_trait;
use keel_core::journal::StartOutcome;
use keel_core::{Clock, Entry, RunId, RunRecord};
use keel_store::sled::{SledOptions, SledStore};
use keel_store::{Store, Wake};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::activation::{ChildStart, Outside, RunJournal, StepCall};
use crate::component::Loaded;
use crate::runtime::Runtime;
use crate::sandbox::StepOutside;
use crate::steps::StepRunner;
use crate::{Error, Result};

mod admission;
mod cancels;
mod children;
mod continuation;
mod deployments;
mod drive;
mod integrations;
mod jobs;
mod limits;
mod pauses;
mod queries;
mod restarts;
mod retention;
mod schedules;
mod streams;
mod upgrades;
mod watch;
mod worker;

pub use admission::{StartHook, StartOptions};
pub use children::ChildRun;
pub use deployments::DeploySpec;
pub use drive::Until;
pub use integrations::Received;
pub use jobs::BulkPreview;
pub use restarts::ForkOptions;
pub use retention::{PURGE_BATCH, Purge, archive_path};
pub use schedules::MAX_BACKFILL;
pub use streams::{CHUNK_PAGE, MAX_PAYLOAD_ID, Reply};
pub use watch::Watched;
pub use worker::{FORGET_GONE_AFTER_MS, GONE_AFTER_LEASES, WorkSummary, WorkerState};

use crate::config::Config;

pub(crate) struct Inner {
    runtime: Arc<Runtime>,
    store: Arc<dyn Store>,
    config: Config,
    steps: Arc<StepRunner>,
    /// Runs being driven in this process; a run has one activation at a time.
    active: Mutex<HashSet<RunId>>,
    /// Leases admissions here took for runs driven here at once.
    admitted_leases: admission::AdmittedLeases,
    /// The journals of the activations in this process, to wake them.
    live: Mutex<HashMap<RunId, Arc<RunJournal>>>,
    /// Notified when a run may have become due (a start, a payload, a
    /// run's end) and when a drive ends: what waits for a run listens.
    progress: Notify,
    /// Notified when a run may have become due that no activation of this
    /// process will take (a wake of a run not driven here, an admission, a
    /// wake from another process): what the worker loop listens to.
    due_changed: Notify,
    /// The ID of each run whose journal this process just wrote: what
    /// [`Keel::watch`] follows.
    journaled: tokio::sync::broadcast::Sender<RunId>,
    /// Runs whose drives failed for a reason outside them, in a row.
    retries: Mutex<worker::Retries>,
    /// When expired keys and tokens were last deleted.
    last_purge_ms: Mutex<u64>,
    /// Where the next purge of ended runs goes on from.
    purge_cursor: Mutex<Option<keel_core::RunCursor>>,
    /// The worker's purge of ended runs in progress, and when the last
    /// one started.
    purging: Mutex<(Option<JoinHandle<()>>, u64)>,
    /// The bulk jobs this process is carrying out.
    jobs: jobs::JobsRunning,
    /// When the worker looks at the schedules next (the earliest fire it
    /// knows of, or a second on, for schedules other processes create; 0
    /// once a schedule changed in this process), and that earliest fire.
    next_schedule_look_ms: Mutex<(u64, Option<u64>)>,
    /// The engine is shutting down: it starts no drive.
    stopping: std::sync::atomic::AtomicBool,
    /// The store's deployments, newest first, until one is deployed.
    deployments: Mutex<Option<Arc<Vec<keel_core::Deployment>>>>,
    /// What steps run with, by component hash, as last read from the
    /// deployment when a run of that component was activated.
    step_settings: Mutex<HashMap<keel_core::ComponentHash, Arc<crate::steps::StepSettings>>>,
    /// Hooks' payload schemas, compiled once each.
    payload_schemas: crate::component::PayloadSchemas,
}

/// How many runs one page of a listing reads at most.
pub const SCAN_BUDGET: usize = 10_000;

/// Locks a mutex, taking the data of a poisoned one (every critical
/// section here leaves its data consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A keel engine over one store.
///
/// ```no_run
/// # async fn demo() -> keel_host::Result<()> {
/// let sled = keel_host::store::sled::SledOptions::new(".keel");
/// let keel = keel_host::Keel::open_sled(keel_host::Config::caching_in(".keel/compiled"), &sled)?;
/// let component = keel.load("order.wasm").await?;
/// let run = keel.run(&component, "process_order", r#"{"order_id": "o-1"}"#).await?;
/// println!("{} {:?}", run.run_id, run.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Keel {
    inner: Arc<Inner>,
}

impl Keel {
    /// An engine over `store`.
    pub fn open(config: Config, store: Arc<dyn Store>) -> Result<Keel> {
        let runtime = Arc::new(Runtime::new(config.clone())?);
        Ok(Keel::over(runtime, config, store))
    }

    /// A new engine over `store` sharing this one's runtime (its wasmtime
    /// engine, compiled components and instance slots) and settings: no
    /// component is loaded twice.
    pub fn with_store(&self, store: Arc<dyn Store>) -> Keel {
        Keel::over(self.inner.runtime.clone(), self.inner.config.clone(), store)
    }

    fn over(runtime: Arc<Runtime>, config: Config, store: Arc<dyn Store>) -> Keel {
        let steps = Arc::new(StepRunner {
            engine: runtime.engine.clone(),
            stubs: config.step_stubs.clone(),
            clock: config.clock.clone(),
            observer: config.observer.clone(),
            slots: runtime.slots.clone(),
            rates: store.clone(),
            permit_ttl: config.lease_ttl,
            permits_freed: Arc::new(Notify::new()),
        });
        let keel = Keel {
            inner: Arc::new(Inner {
                runtime,
                store,
                config,
                steps,
                active: Mutex::default(),
                admitted_leases: Default::default(),
                live: Mutex::default(),
                progress: Notify::new(),
                due_changed: Notify::new(),
                journaled: tokio::sync::broadcast::channel(1024).0,
                retries: Mutex::default(),
                last_purge_ms: Mutex::default(),
                purge_cursor: Mutex::default(),
                purging: Mutex::default(),
                jobs: Mutex::default(),
                next_schedule_look_ms: Mutex::default(),
                stopping: Default::default(),
                deployments: Mutex::default(),
                step_settings: Mutex::default(),
                payload_schemas: Default::default(),
            }),
        };
        keel.listen_for_wakes();
        keel
    }

    /// Passes wakes announced by other processes sharing the store to the
    /// runs and the worker loop of this engine, for as long as it lives.
    fn listen_for_wakes(&self) {
        let (Some(mut wakes), Ok(runtime)) = (
            self.inner.store.wake_stream(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let engine = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            loop {
                let wake = wakes.recv().await;
                let Some(inner) = engine.upgrade() else {
                    return;
                };
                let keel = Keel { inner };
                match wake {
                    Ok(Wake::Run(run_id)) => keel.poke(&run_id),
                    Ok(Wake::Cancel(run_id)) => {
                        match lock(&keel.inner.live).get(&run_id) {
                            Some(journal) => journal.hint_cancel(),
                            None => keel.inner.due_changed.notify_one(),
                        }
                        keel.inner.progress.notify_waiters();
                    }
                    Ok(Wake::Pause(run_id)) => match lock(&keel.inner.live).get(&run_id) {
                        Some(journal) => journal.hint_pause(),
                        None => keel.inner.due_changed.notify_one(),
                    },
                    Ok(Wake::Terminate(run_id)) => {
                        if let Some(journal) = lock(&keel.inner.live).get(&run_id) {
                            journal.terminate();
                        }
                    }
                    Ok(Wake::Admitted) => {
                        keel.inner.due_changed.notify_one();
                        keel.inner.progress.notify_waiters();
                    }
                    Ok(Wake::Deployed) => keel.forget_deployments(),
                    // Missed some: every run may have moved.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        keel.forget_deployments();
                        for journal in lock(&keel.inner.live).values() {
                            journal.poke();
                        }
                        keel.inner.due_changed.notify_one();
                        keel.inner.progress.notify_waiters();
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// An engine over the sled store `sled` names, opened (or created).
    pub fn open_sled(config: Config, sled: &SledOptions) -> Result<Keel> {
        let store = SledStore::open_with(sled)?;
        Keel::open(config, Arc::new(store))
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The engine's clock, in milliseconds since the Unix epoch.
    pub fn clock_ms(&self) -> u64 {
        self.now_ms()
    }

    /// What this engine grants the steps of a component never deployed.
    pub(crate) fn default_grants(&self) -> &crate::Grants {
        &self.inner.config.grants
    }

    fn now_ms(&self) -> u64 {
        self.inner.config.clock.now_ms()
    }

    /// Shuts the engine down gracefully: the worker loop starts no drive,
    /// and every activation of this process stops at its next wait and
    /// releases its run's lease, so another worker takes the run over at
    /// once (steps already running are abandoned and rerun there, with the
    /// same step IDs). `work` returns once its drives have ended.
    pub fn shutdown(&self) {
        self.inner
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for journal in lock(&self.inner.live).values() {
            journal.fail("the worker is shutting down".into());
        }
        self.inner.progress.notify_waiters();
        self.inner.due_changed.notify_one();
    }

    fn is_stopping(&self) -> bool {
        self.inner
            .stopping
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Where the engine's store is.
    pub fn location(&self) -> String {
        self.inner.store.location()
    }

    /// Wakes the activation of `run_id` if this process drives it, and the
    /// worker loop otherwise (and whoever waits for a run).
    fn poke(&self, run_id: &str) {
        match lock(&self.inner.live).get(run_id) {
            Some(journal) => journal.poke(),
            None => self.inner.due_changed.notify_one(),
        }
        self.inner.progress.notify_waiters();
    }

    /// Tells the worker loop that runs may have become due.
    fn due_changed(&self) {
        self.inner.due_changed.notify_one();
    }

    /// Loads a component file, stores its bytes (runs are pinned to them)
    /// and returns it ready to run, without deploying it: its steps get
    /// the engine's [`Config`] grants and limits (see [`Keel::deploy`]).
    pub async fn load(&self, path: impl AsRef<Path>) -> Result<Arc<Loaded>> {
        let path = path.as_ref();
        let bytes = tokio::fs::read(path).await.map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        self.store_component(path, &bytes).await
    }

    /// Compiles a component, stores its bytes and subscribes its workflows
    /// to their events.
    async fn store_component(&self, path: &Path, bytes: &[u8]) -> Result<Arc<Loaded>> {
        let loaded = self.load_bytes(path, bytes).await?;
        self.store()
            .put_component(&loaded.hash, bytes, self.now_ms())
            .await?;
        for w in &loaded.manifest.workflows {
            for event in &w.on_events {
                self.store().subscribe(event, &w.name, &loaded.hash).await?;
            }
        }
        Ok(loaded)
    }

    async fn load_bytes(&self, origin: &Path, bytes: &[u8]) -> Result<Arc<Loaded>> {
        self.inner.runtime.load(origin, bytes).await
    }

    /// The component a run is pinned to, from the store.
    async fn component_by_hash(&self, hash: &str) -> Result<Arc<Loaded>> {
        if let Some(loaded) = self.inner.runtime.cached(hash) {
            return Ok(loaded);
        }
        let bytes = self.store().get_component(hash).await?;
        let origin = PathBuf::from(format!("<stored component {hash}>"));
        self.load_bytes(&origin, &bytes).await
    }

    /// A run's record; `RunNotFound` if the store has none.
    pub async fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        Ok(self.store().get_run(run_id).await?)
    }

    /// Every run, by run ID.
    pub async fn list_runs(&self) -> Result<Vec<RunRecord>> {
        Ok(self.store().list_runs().await?)
    }

    /// One page of runs passing `filter`, newest first, starting below the
    /// cursor `before`. A page ends after `limit` runs, or after scanning
    /// [`SCAN_BUDGET`] runs (with a cursor to go on from), so that a
    /// sparse filter never reads the whole store in one call.
    pub async fn runs_page(
        &self,
        filter: &keel_core::RunFilter,
        before: Option<&keel_core::RunCursor>,
        limit: usize,
    ) -> Result<keel_core::RunPage> {
        if !(1..=keel_core::query::MAX_PAGE).contains(&limit) {
            return Err(Error::InvalidRequest {
                reason: format!(
                    "a page holds 1 to {} runs, not {limit}; page on with the cursor",
                    keel_core::query::MAX_PAGE
                ),
            });
        }
        // A value no run can hold (a NUL) matches no run; no store is asked.
        if !filter
            .attributes
            .values()
            .all(|v| keel_core::records::can_hold(v))
        {
            return Ok(keel_core::RunPage::default());
        }
        let batch = (limit * 2).clamp(64, 512);
        // A listing `until` starts below that time, unless the cursor is lower.
        let until = filter.until_ms.map(keel_core::RunCursor::before_time);
        let mut cursor = match (before.cloned(), until) {
            (Some(b), Some(u)) => Some(b.min(u)),
            (b, u) => b.or(u),
        };
        let mut runs = Vec::new();
        let mut scanned = 0;
        loop {
            let page = if filter.attributes.is_empty() {
                self.store().runs_before(cursor.as_ref(), batch).await?
            } else {
                let attributes = &filter.attributes;
                let store = self.store();
                store
                    .runs_with_attributes(attributes, cursor.as_ref(), batch)
                    .await?
            };
            let exhausted = page.len() < batch;
            for run in page {
                scanned += 1;
                cursor = Some(keel_core::RunCursor::of(&run));
                if !filter.reaches(run.created_at_ms) {
                    return Ok(keel_core::RunPage {
                        runs,
                        next_cursor: None,
                    });
                }
                if filter.matches(&run) {
                    runs.push(run);
                    if runs.len() == limit {
                        return Ok(keel_core::RunPage {
                            runs,
                            next_cursor: cursor.as_ref().map(keel_core::RunCursor::encode),
                        });
                    }
                }
            }
            if exhausted {
                return Ok(keel_core::RunPage {
                    runs,
                    next_cursor: None,
                });
            }
            if scanned >= SCAN_BUDGET {
                return Ok(keel_core::RunPage {
                    runs,
                    next_cursor: cursor.as_ref().map(keel_core::RunCursor::encode),
                });
            }
        }
    }

    /// The runs that have not ended, oldest first. Reads every live run:
    /// for an operator's explicit command only.
    pub async fn live_runs(&self) -> Result<Vec<RunRecord>> {
        Ok(self.store().live_runs().await?)
    }

    /// How many live runs the store holds in each live status, from the
    /// counts it keeps (no run is read).
    pub async fn live_counts(&self) -> Result<keel_store::LiveCounts> {
        Ok(self.store().live_counts().await?)
    }

    /// How many runs this process is driving now.
    pub fn active_runs(&self) -> usize {
        lock(&self.inner.active).len()
    }

    /// What `run` waits on, if it is waiting: its open hooks' tokens, its
    /// timers and the runs it awaits (from its journal).
    pub async fn waiting_on(&self, run: &RunRecord) -> Result<Vec<keel_core::timeline::WaitingOn>> {
        if run.status != keel_core::RunStatus::Waiting {
            return Ok(Vec::new());
        }
        let journal = self.store().journal(&run.run_id).await?;
        let rows = keel_core::timeline::timeline(&journal);
        Ok(keel_core::timeline::waiting_on(&rows))
    }

    /// A run's journal, in order.
    pub async fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.store().get_run(run_id).await?;
        Ok(self.store().journal(run_id).await?)
    }

    /// The run that holds `workflow`'s idempotency key `key`, if its window
    /// has not passed.
    pub async fn key_holder(&self, workflow: &str, key: &str) -> Result<Option<RunId>> {
        let now = self.now_ms();
        Ok(self
            .store()
            .key_hold(workflow, key)
            .await?
            .filter(|h| h.expires_at_ms > now)
            .map(|h| h.run_id))
    }
}

#[async_trait]
impl Outside for Keel {
    fn store(&self) -> Option<&Arc<dyn Store>> {
        Some(&self.inner.store)
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.config.clock
    }

    fn park_limit(&self) -> Duration {
        self.inner.config.park_limit
    }

    fn limits(&self) -> crate::RunLimits {
        self.inner.config.limits
    }

    fn default_durability(&self) -> keel_core::manifest::Durability {
        self.inner.config.default_durability
    }

    fn wake(&self, run_id: &RunId) {
        self.poke(run_id);
    }

    fn settled(&self, _run_id: &RunId) {
        self.inner.progress.notify_waiters();
    }

    fn spawn_step(&self, step: StepCall) -> Result<JoinHandle<()>> {
        let outside: Arc<dyn StepOutside> = Arc::new(self.clone());
        let settings = self.step_settings(&step.component.hash);
        // Its spans go under the activation's, which schedules it.
        Ok(tokio::spawn(
            self.inner
                .steps
                .clone()
                .run(step, settings, outside)
                .in_current_span(),
        ))
    }

    async fn start_child(&self, child: ChildStart) -> Result<StartOutcome> {
        self.start_child_run(child).await
    }
}

#[async_trait]
impl StepOutside for Keel {
    async fn resume_hook(&self, token: &str, payload: &str) -> Result<RunId> {
        Keel::resume_hook(self, token, payload).await
    }

    async fn write_stream(
        &self,
        run_id: &RunId,
        stream: &str,
        step_id: &str,
        attempt: u32,
        body: keel_core::stream::ChunkBody,
    ) -> Result<()> {
        let origin = keel_core::stream::Origin::Step {
            step_id: step_id.into(),
            attempt,
        };
        let now = self.clock().now_ms();
        let bound = self.inner.config.limits.max_stream_bytes as u64;
        self.store()
            .write_stream(run_id, stream, &origin, body, now, bound)
            .await?;
        let _ = self.inner.journaled.send(run_id.clone());
        Ok(())
    }

    async fn begin_attempt(&self, run_id: &RunId, step_id: &str, attempt: u32) -> Result<()> {
        let now = self.clock().now_ms();
        let marked = self
            .store()
            .begin_attempt(run_id, step_id, attempt, now)
            .await?;
        if !marked.is_empty() {
            let _ = self.inner.journaled.send(run_id.clone());
        }
        Ok(())
    }
}
