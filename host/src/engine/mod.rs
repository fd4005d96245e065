//! The engine: admits runs (with idempotency keys and start tokens),
//! drives them through activations, wakes runs that hooks or other runs
//! moved on, recovers interrupted ones and replays journals.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::Instrument;
use wasmtime::component::Linker;
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::activation::{Activation, RunJournal, Suspend, now_ms};
use crate::component::{self, Loaded};
use crate::idempotency::{Clock, SystemClock};
use crate::journal::{Entry, Event};
use crate::replay::Verdict;
use crate::sandbox::{self, Grants, GuestLog, HostState, Role};
use crate::store::{RunError, RunRecord, RunStatus, Store};
use crate::{Error, Result};

mod admission;
mod worker;

pub(crate) use admission::start_child;
pub use admission::{StartHook, StartOptions};

/// How the engine runs guests.
#[derive(Clone, Debug)]
pub struct Config {
    /// The store's directory.
    pub db: PathBuf,
    /// Where compiled components are cached (default: `compiled/` in the store).
    pub cache_dir: PathBuf,
    /// Fuel for one workflow activation (a CPU bound; roughly one unit per
    /// wasm instruction).
    pub workflow_fuel: u64,
    /// Linear memory bound of any guest instance, in bytes.
    pub max_memory: usize,
    /// Capabilities granted to steps.
    pub grants: Grants,
    /// Timers due within this bound are awaited in memory; longer ones
    /// suspend the run until a worker resumes it.
    pub park_limit: Duration,
    /// Instances the pooling allocator keeps slots for.
    pub max_instances: u32,
    /// How long one step attempt may take before it is stopped and retried.
    pub step_timeout: Duration,
    /// The time admission reads (idempotency windows, run creation).
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

impl Config {
    /// Defaults for a store in `db`.
    pub fn new(db: impl Into<PathBuf>) -> Self {
        let db = db.into();
        Config {
            cache_dir: db.join("compiled"),
            db,
            workflow_fuel: 20_000_000_000,
            max_memory: 256 << 20,
            grants: Grants::default(),
            park_limit: Duration::from_secs(60),
            max_instances: 1000,
            step_timeout: Duration::from_secs(300),
            clock: Arc::new(SystemClock),
        }
    }
}

pub(crate) struct Inner {
    pub engine: Engine,
    pub store: Store,
    pub config: Config,
    base_linker: Linker<HostState>,
    components: Mutex<HashMap<String, Arc<Loaded>>>,
    /// Runs being driven in this process; a run has one activation at a time.
    active: Mutex<HashSet<String>>,
    /// The journals of the activations in this process, to wake them.
    live: Mutex<HashMap<String, Arc<RunJournal>>>,
    /// Notified when a run may have become due (a start, a payload, a
    /// run's end) and when a drive ends.
    progress: Notify,
    /// When expired keys and tokens were last deleted (admission clock).
    last_purge_ms: Mutex<u64>,
}

impl Inner {
    /// Wakes the activation of `run_id` if this process drives it, and the
    /// worker loop otherwise.
    pub(crate) fn poke(&self, run_id: &str) {
        if let Some(journal) = self.live.lock().expect("live runs").get(run_id) {
            journal.poke();
        }
        self.progress.notify_waiters();
    }
}

/// Marks a run active for as long as it lives.
struct ActiveRun<'a> {
    inner: &'a Inner,
    run_id: String,
}

impl ActiveRun<'_> {
    /// Lets others wake the run's activation through its journal.
    fn publish(&self, journal: &Arc<RunJournal>) {
        self.inner
            .live
            .lock()
            .expect("live runs")
            .insert(self.run_id.clone(), journal.clone());
    }
}

impl<'a> ActiveRun<'a> {
    fn claim(inner: &'a Inner, run_id: &str) -> Option<Self> {
        let mut active = inner.active.lock().expect("active runs");
        active.insert(run_id.to_string()).then(|| ActiveRun {
            inner,
            run_id: run_id.to_string(),
        })
    }
}

impl Drop for ActiveRun<'_> {
    fn drop(&mut self) {
        self.inner
            .live
            .lock()
            .expect("live runs")
            .remove(&self.run_id);
        self.inner
            .active
            .lock()
            .expect("active runs")
            .remove(&self.run_id);
        self.inner.progress.notify_waiters();
    }
}

/// A keel engine over one store.
///
/// ```no_run
/// # async fn demo() -> keel_host::Result<()> {
/// let keel = keel_host::Keel::open(keel_host::Config::new(".keel"))?;
/// let component = keel.load("order.wasm").await?;
/// let run = keel.run(&component, "process_order", r#"{"order_id": "o-1"}"#).await?;
/// println!("{} {:?}", run.run_id, run.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Keel {
    inner: Arc<Inner>,
}

/// What an activation did, for replay reports.
#[derive(Default)]
pub(crate) struct Trace {
    pub divergence: Option<crate::replay::Divergence>,
    /// Commands issued by the code, and commands the journal held.
    pub progress: (u32, u32),
}

/// How one activation ended.
pub(crate) enum Ended {
    Completed(String),
    Failed(Error),
    Suspended(Suspend),
}

impl Keel {
    /// Opens the store and builds the wasmtime engine.
    pub fn open(config: Config) -> Result<Keel> {
        let store = Store::open(&config.db)?;
        let engine = build_engine(&config)?;
        let base_linker =
            sandbox::base_linker(&engine).map_err(|e| Error::Wasm(format!("{e:#}")))?;
        Ok(Keel {
            inner: Arc::new(Inner {
                engine,
                store,
                config,
                base_linker,
                components: Mutex::default(),
                active: Mutex::default(),
                live: Mutex::default(),
                progress: Notify::new(),
                last_purge_ms: Mutex::default(),
            }),
        })
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Keel {
        Keel { inner }
    }

    /// The store this engine writes to.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Loads a component file, stores its bytes (runs are pinned to them)
    /// and returns it ready to run.
    pub async fn load(&self, path: impl AsRef<Path>) -> Result<Arc<Loaded>> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        let loaded = self.load_bytes(path, &bytes).await?;
        self.inner.store.put_component(&loaded.hash, &bytes)?;
        for w in &loaded.manifest.workflows {
            for event in &w.on_events {
                self.inner.store.subscribe(event, &w.name, &loaded.hash)?;
            }
        }
        Ok(loaded)
    }

    async fn load_bytes(&self, origin: &Path, bytes: &[u8]) -> Result<Arc<Loaded>> {
        let hash = component::content_hash(bytes);
        if let Some(loaded) = self.cached(&hash) {
            return Ok(loaded);
        }
        let cache_dir = &self.inner.config.cache_dir;
        let loaded = Arc::new(
            component::load(
                &self.inner.engine,
                &self.inner.base_linker,
                cache_dir,
                origin,
                bytes,
                self.inner.config.max_memory,
            )
            .await?,
        );
        self.inner
            .components
            .lock()
            .expect("component cache")
            .insert(hash, loaded.clone());
        Ok(loaded)
    }

    fn cached(&self, hash: &str) -> Option<Arc<Loaded>> {
        self.inner
            .components
            .lock()
            .expect("component cache")
            .get(hash)
            .cloned()
    }

    /// The component a run is pinned to, from the store.
    async fn component_of(&self, run: &RunRecord) -> Result<Arc<Loaded>> {
        self.component_by_hash(&run.component_hash).await
    }

    async fn component_by_hash(&self, hash: &str) -> Result<Arc<Loaded>> {
        if let Some(loaded) = self.cached(hash) {
            return Ok(loaded);
        }
        let bytes = self.inner.store.get_component(hash)?;
        let origin = PathBuf::from(format!("<stored component {hash}>"));
        self.load_bytes(&origin, &bytes).await
    }

    /// Cancels a run: it ends with status `cancelled` and releases its
    /// tokens (after any retention). An activation in this process is
    /// stopped at its next wait. A finished run is returned as it is.
    pub async fn cancel(&self, run_id: &str) -> Result<RunRecord> {
        loop {
            let run = self.inner.store.get_run(run_id)?;
            if run.status.is_final() {
                return Ok(run);
            }
            if let Some(_active) = ActiveRun::claim(&self.inner, run_id) {
                let entries = self.inner.store.journal(run_id)?;
                let journal = RunJournal::new(Some(self.inner.store.clone()), run_id, entries);
                let cancelled = Error::Cancelled {
                    run_id: run_id.into(),
                };
                return self.finish(run, Ended::Failed(cancelled), &journal).await;
            }
            let ended = self.inner.progress.notified();
            if let Some(journal) = self.inner.live.lock().expect("live runs").get(run_id) {
                journal.cancel();
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), ended).await;
        }
    }

    /// A run's record once it has ended; with `wait`, drives it (and waits
    /// for its timers) until it ends.
    pub async fn result(&self, run_id: &str, wait: bool) -> Result<RunRecord> {
        let mut run = self.drive(run_id).await?;
        while wait && !run.status.is_final() {
            // Woken by a payload or a run's end in this process, by the
            // run's timer, or after a second to look again.
            let progress = self.inner.progress.notified();
            let wake = run.wake_at_ms.unwrap_or_else(|| now_ms() + 1000);
            let timer = Duration::from_millis(wake.saturating_sub(now_ms()));
            let _ = tokio::time::timeout(timer, progress).await;
            run = self.inner.store.get_run(run_id)?;
            if self.is_due(&run)? {
                run = self.drive(run_id).await?;
            }
        }
        Ok(run)
    }

    /// The run can make progress now.
    fn is_due(&self, run: &RunRecord) -> Result<bool> {
        Ok(match run.status {
            RunStatus::Pending | RunStatus::Running => true,
            RunStatus::Waiting => {
                run.wake_at_ms.is_some_and(|at| at <= now_ms())
                    || self.inner.store.is_woken(&run.run_id)?
            }
            _ => false,
        })
    }

    /// A run's record; `RunNotFound` if the store has none.
    pub fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        self.inner.store.get_run(run_id)
    }

    /// Every run, oldest first.
    pub fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner.store.list_runs()
    }

    /// A run's journal, in order.
    pub fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.inner.store.get_run(run_id)?;
        self.inner.store.journal(run_id)
    }

    /// Executes a run until it completes, fails or must wait; returns its
    /// record. A finished run is returned as it is; if this process is
    /// already driving the run, waits for that drive to end instead.
    pub async fn drive(&self, run_id: &str) -> Result<RunRecord> {
        let span = tracing::info_span!("run", run_id);
        self.drive_inner(run_id).instrument(span).await
    }

    async fn drive_inner(&self, run_id: &str) -> Result<RunRecord> {
        let Some(active) = ActiveRun::claim(&self.inner, run_id) else {
            self.until_not_active(run_id).await;
            return self.inner.store.get_run(run_id);
        };
        let mut run = self.inner.store.get_run(run_id)?;
        if run.status.is_final() {
            return Ok(run);
        }
        // Cleared before the activation reads the store, so that a payload
        // resumed from now on wakes the run again.
        self.inner.store.take_wakeup(run_id)?;
        let loaded = self.component_of(&run).await?;
        let entries = self.inner.store.journal(run_id)?;
        let journal = Arc::new(RunJournal::new(
            Some(self.inner.store.clone()),
            run_id,
            entries,
        ));
        active.publish(&journal);
        run.status = RunStatus::Running;
        run.wake_at_ms = None;
        self.inner.store.put_run(&run)?;
        let (ended, _) = self.activate(&loaded, &run, journal.clone(), false).await;
        if let Ended::Failed(e @ (Error::JournalWrite { .. } | Error::Storage(_))) = ended {
            // Not the run's failure: what is durable stays, a worker resumes it.
            return Err(e);
        }
        self.finish(run, ended, &journal).await
    }

    /// Waits until this process no longer drives `run_id`.
    async fn until_not_active(&self, run_id: &str) {
        loop {
            let ended = self.inner.progress.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self
                .inner
                .active
                .lock()
                .expect("active runs")
                .contains(run_id)
            {
                return;
            }
            ended.await;
        }
    }

    /// Records how an activation ended: a suspended run waits; a finished
    /// one gets its final record, its hooks end and the runs awaiting it are
    /// woken, then its journal's last entry, all durable on return.
    async fn finish(
        &self,
        mut run: RunRecord,
        ended: Ended,
        journal: &RunJournal,
    ) -> Result<RunRecord> {
        run.updated_at_ms = now_ms();
        let event = match ended {
            Ended::Completed(output) => {
                run.status = RunStatus::Completed;
                run.output = Some(output.clone());
                Event::RunCompleted { output }
            }
            Ended::Failed(Error::Cancelled { .. }) => {
                tracing::info!("run cancelled");
                run.status = RunStatus::Cancelled;
                run.error = Some(RunError {
                    kind: "cancelled".into(),
                    message: "the run was cancelled".into(),
                });
                Event::RunCancelled
            }
            Ended::Failed(e) => {
                tracing::warn!("run failed: {e}");
                run.status = RunStatus::Failed;
                run.error = Some(RunError {
                    kind: e.kind().into(),
                    message: e.to_string(),
                });
                Event::RunFailed {
                    kind: e.kind().into(),
                    error: e.to_string(),
                }
            }
            Ended::Suspended(Suspend::Waiting { wake_at_ms, on }) => {
                tracing::debug!(on, "run waits");
                run.status = RunStatus::Waiting;
                run.wake_at_ms = wake_at_ms;
                self.inner.store.put_run(&run)?;
                self.inner.store.sync().await?;
                return Ok(run);
            }
            Ended::Suspended(Suspend::JournalEnd) => unreachable!("live runs append"),
        };
        let watchers = self
            .inner
            .store
            .end_run(&run, self.inner.config.clock.now_ms())?;
        // One sync covers the run record, its hooks and the journal's end.
        journal.append(event).await?;
        for watcher in watchers {
            self.inner.poke(&watcher);
        }
        self.inner.progress.notify_waiters();
        Ok(run)
    }

    /// Runs the workflow once from the start over `journal`.
    async fn activate(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        journal: Arc<RunJournal>,
        offline: bool,
    ) -> (Ended, Trace) {
        let activation = Activation::new(
            self.inner.clone(),
            loaded.clone(),
            journal,
            &run.run_id,
            &run.workflow,
            run.created_at_ms,
            offline,
        );
        let clock = activation.clock.clone();
        let log = GuestLog::new(&run.run_id);
        let config = &self.inner.config;
        let state = HostState::workflow(activation, clock, log.clone(), config.max_memory);
        let mut store = wasmtime::Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        if let Err(e) = store.set_fuel(config.workflow_fuel) {
            return (Ended::Failed(Error::Wasm(e.to_string())), Trace::default());
        }
        let result = async {
            let instance = loaded.workflow_pre.instantiate_async(&mut store).await?;
            instance
                .keel_workflow_guest()
                .call_run_workflow(&mut store, &run.workflow, &run.input)
                .await
        }
        .await;
        let ended = match result {
            Ok(Ok(output)) => Ended::Completed(output),
            Ok(Err(message)) => Ended::Failed(Error::WorkflowFailed {
                run_id: run.run_id.clone(),
                message,
            }),
            Err(e) => self.classify(e, run, &log),
        };
        let trace = match &mut store.data_mut().role {
            Role::Workflow(a) => {
                a.stop_tasks().await;
                Trace {
                    divergence: a.divergence.take(),
                    progress: a.progress(),
                }
            }
            _ => Trace::default(),
        };
        (ended, trace)
    }

    fn classify(&self, e: wasmtime::Error, run: &RunRecord, log: &GuestLog) -> Ended {
        let e = match e.downcast::<Suspend>() {
            Ok(suspend) => return Ended::Suspended(suspend),
            Err(e) => e,
        };
        let e = match e.downcast::<Error>() {
            Ok(error) => return Ended::Failed(error),
            Err(e) => e,
        };
        let run_id = run.run_id.clone();
        if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::OutOfFuel) {
            return Ended::Failed(Error::FuelExhausted {
                run_id,
                fuel: self.inner.config.workflow_fuel,
            });
        }
        if format!("{e:?}").contains("growing memory") {
            return Ended::Failed(Error::MemoryExhausted {
                run_id,
                limit_bytes: self.inner.config.max_memory,
            });
        }
        Ended::Failed(Error::GuestTrap {
            run_id,
            message: describe_trap(&e, &log.tail()),
        })
    }

    /// Replays a run's journal against `component` (or the run's own)
    /// without executing anything: steps are not run, nothing is written.
    pub async fn replay(&self, run_id: &str, component: Option<&Arc<Loaded>>) -> Result<Verdict> {
        let run = self.inner.store.get_run(run_id)?;
        let loaded = match component {
            Some(c) => c.clone(),
            None => self.component_of(&run).await?,
        };
        let entries = self.inner.store.journal(run_id)?;
        Ok(self.replay_entries(&loaded, &run, entries).await)
    }

    /// Replays `entries` of `run` against `loaded`, offline.
    pub async fn replay_entries(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        entries: Vec<Entry>,
    ) -> Verdict {
        let journal = Arc::new(RunJournal::new(None, &run.run_id, entries.clone()));
        let (ended, trace) = self.activate(loaded, run, journal, true).await;
        crate::replay::verdict(&entries, ended, trace)
    }
}

fn build_engine(config: &Config) -> Result<Engine> {
    let mut wasm = wasmtime::Config::new();
    wasm.consume_fuel(true).wasm_component_model(true);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(config.max_instances)
        .total_core_instances(config.max_instances * 4)
        .total_memories(config.max_instances)
        .total_tables(config.max_instances * 4)
        .max_memory_size(config.max_memory)
        // Every step attempt is a fresh instance; resetting slots in batches
        // rather than one madvise (and TLB shootdown) per instance is worth
        // ~20% of W10 throughput on two cores.
        .decommit_batch_size(32);
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&wasm).map_err(|e| Error::Wasm(format!("building the wasmtime engine: {e:#}")))
}

/// A trap in words: the guest's last stderr (a panic message) and the trap.
pub(crate) fn describe_trap(e: &wasmtime::Error, stderr_tail: &str) -> String {
    let trap = e
        .downcast_ref::<wasmtime::Trap>()
        .map(|t| t.to_string())
        .unwrap_or_else(|| e.to_string());
    let panic = stderr_tail.rfind("panicked at").map(|i| {
        stderr_tail[i..]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    });
    match panic {
        Some(p) => format!("{p} ({trap})"),
        None if !stderr_tail.is_empty() => format!("{trap}; guest stderr: {stderr_tail}"),
        None => trap,
    }
}
