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
use crate::hooks::HookRecord;
use crate::idempotency::{Clock, SystemClock};
use crate::journal::{Entry, Event, StartOutcome};
use crate::replay::Verdict;
use crate::sandbox::{self, Grants, GuestLog, HostState, Role};
use crate::store::{EventOutcome, EventRecord, RunError, RunRecord, RunStatus, Store};
use crate::{Error, Result};

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

/// Options of a start.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// A JSON object given to key expressions as `additional_metadata`.
    pub additional_metadata: Option<serde_json::Value>,
    /// A start token: the run is admitted together with its start hook, or
    /// refused with `HookConflict` if another run holds the token.
    pub hook: Option<StartHook>,
}

/// The start hook of a run (`start(..., { hook: { token, ... } })`).
///
/// ```
/// # use std::time::Duration;
/// let hook = keel_host::StartHook::new("order:42")
///     .min_retention(Duration::from_secs(30 * 24 * 3600))
///     .metadata(serde_json::json!({"order_id": 42}));
/// assert_eq!(hook.token, "order:42");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StartHook {
    pub token: String,
    /// Keep the token unavailable for this long from the start, even after
    /// the run ends (not after it disposes of the hook).
    pub min_retention: Option<Duration>,
    /// JSON shown by `hooks get`.
    pub metadata: Option<serde_json::Value>,
}

impl StartHook {
    pub fn new(token: impl Into<String>) -> Self {
        StartHook {
            token: token.into(),
            min_retention: None,
            metadata: None,
        }
    }

    pub fn min_retention(mut self, retention: Duration) -> Self {
        self.min_retention = Some(retention);
        self
    }

    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

impl StartOptions {
    /// Options with a start token.
    pub fn token(token: impl Into<String>) -> Self {
        StartOptions {
            hook: Some(StartHook::new(token)),
            ..StartOptions::default()
        }
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

type DriveTasks = tokio::task::JoinSet<(String, Result<RunRecord>)>;

/// Logs how a worker's drive ended; returns the run's ID ("" if unknown).
fn log_driven(
    result: std::result::Result<(String, Result<RunRecord>), tokio::task::JoinError>,
) -> String {
    match result {
        Ok((run_id, Ok(run))) => {
            tracing::info!(run_id, status = run.status.as_str(), "worker drove run");
            run_id
        }
        Ok((run_id, Err(e))) => {
            tracing::error!(run_id, "worker could not drive the run: {e}");
            run_id
        }
        Err(e) => {
            tracing::error!("worker task failed: {e}");
            String::new()
        }
    }
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

    /// Admits a run of `workflow` with a JSON `input`; durable on return.
    pub async fn start(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
    ) -> Result<RunRecord> {
        self.start_with(component, workflow, input, &StartOptions::default())
            .await
    }

    /// Admits a run with options, durable on return. A workflow with an
    /// idempotency key admits one run per key within its TTL; a collision
    /// fails with `IdempotencyCollision` naming the run that holds the key.
    /// With a start token the run and its start hook are admitted in one
    /// transaction; a token another run holds fails with `HookConflict`
    /// naming it, and nothing is written. If the admission cannot be
    /// confirmed durable the call fails with `StartOutcomeUnknown`: retrying
    /// with the same token is safe.
    pub async fn start_with(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
        options: &StartOptions,
    ) -> Result<RunRecord> {
        let run_id = uuid::Uuid::now_v7().to_string();
        self.admit(component, workflow, input, options, run_id)
            .await
    }

    async fn admit(
        &self,
        component: &Loaded,
        workflow: &str,
        input: &str,
        options: &StartOptions,
        run_id: String,
    ) -> Result<RunRecord> {
        component.check_workflow(workflow)?;
        self.check_capabilities(options)?;
        let value: serde_json::Value =
            serde_json::from_str(input).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })?;
        let input = value.to_string();
        let metadata = options
            .additional_metadata
            .clone()
            .unwrap_or_else(|| serde_json::json!({}));
        let key = component
            .key(workflow)
            .map(|k| Ok::<_, Error>((k.evaluate(&value, &metadata)?, k.ttl_ms)))
            .transpose()?;
        let now = self.inner.config.clock.now_ms();
        let run = RunRecord {
            run_id: run_id.clone(),
            workflow: workflow.into(),
            component_hash: component.hash.clone(),
            input: input.clone(),
            status: RunStatus::Pending,
            output: None,
            error: None,
            created_at_ms: now,
            updated_at_ms: now,
            wake_at_ms: None,
        };
        let start_hook = options.hook.as_ref().map(|h| HookRecord {
            token: h.token.clone(),
            run_id: run_id.clone(),
            command: None,
            metadata: h.metadata.as_ref().map(|m| m.to_string()),
            created_at_ms: now,
            retain_until_ms: h
                .min_retention
                .map(|r| now.saturating_add(r.as_millis() as u64)),
            active: true,
            next_payload: 0,
        });
        let key_ref = key.as_ref().map(|(k, ttl)| (k.as_str(), *ttl));
        self.inner
            .store
            .admit(&run, key_ref, start_hook.as_ref(), now)?;
        // Appending syncs, which makes the run record durable too.
        let journal = RunJournal::new(Some(self.inner.store.clone()), &run_id, Vec::new());
        let started = Event::RunStarted {
            workflow: workflow.into(),
            input,
        };
        if let Err(e) = journal.append(started).await {
            return Err(Error::StartOutcomeUnknown {
                run_id,
                reason: e.to_string(),
            });
        }
        tracing::info!(run_id = %run.run_id, workflow, "run admitted");
        self.inner.progress.notify_waiters();
        Ok(run)
    }

    /// Refuses, before anything is written, a start that needs what the
    /// store cannot do.
    fn check_capabilities(&self, options: &StartOptions) -> Result<()> {
        let caps = self.inner.store.capabilities();
        let missing = match &options.hook {
            Some(_) if !caps.atomic_start_hook => Some("atomic start hooks"),
            Some(h) if h.min_retention.is_some() && !caps.hook_retention => Some("hook retention"),
            _ => None,
        };
        match missing {
            Some(capability) => Err(Error::StoreCapability {
                capability: capability.into(),
            }),
            None => Ok(()),
        }
    }

    /// Delivers a JSON payload to the active hook holding `token`, in order
    /// after the payloads before it, even if its run has not opened the hook
    /// yet. Returns the owner's run ID (drive it, or let a worker), or
    /// `HookNotFound` when no active hook holds the token.
    pub async fn resume_hook(&self, token: &str, payload: &str) -> Result<String> {
        let value: serde_json::Value =
            serde_json::from_str(payload).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })?;
        let run_id = self.inner.store.resume_hook(token, &value.to_string())?;
        self.inner.store.sync().await?;
        tracing::info!(run_id, token, "hook resumed");
        self.inner.poke(&run_id);
        Ok(run_id)
    }

    /// The hook holding `token`: active, or kept after its run ended until
    /// its retention passes. `HookNotFound` otherwise.
    pub fn get_hook(&self, token: &str) -> Result<HookRecord> {
        self.inner
            .store
            .get_hook(token, self.inner.config.clock.now_ms())
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

    /// Starts a run and drives it until it completes, fails or waits.
    pub async fn run(&self, component: &Loaded, workflow: &str, input: &str) -> Result<RunRecord> {
        let run = self.start(component, workflow, input).await?;
        self.drive(&run.run_id).await
    }

    /// Loads a journal file's run into the store. To drive it on, the store
    /// must also hold its component (load the same `.wasm` once).
    pub async fn import(&self, file: &crate::JournalFile) -> Result<RunRecord> {
        let run = file.run_record();
        if self.inner.store.get_run(&run.run_id).is_ok() {
            return Err(Error::RunExists { run_id: run.run_id });
        }
        for entry in &file.entries {
            self.inner.store.append(&run.run_id, entry)?;
        }
        self.inner.store.put_run(&run)?;
        self.inner.store.sync().await?;
        Ok(run)
    }

    /// Ingests an event: stores it and starts a run of every workflow
    /// subscribed to `key`, with the payload as input and the metadata as
    /// `additional_metadata`. A start that collides with an idempotency key
    /// is swallowed and recorded against the run that holds the key.
    pub async fn push_event(
        &self,
        key: &str,
        payload: &str,
        metadata: &str,
    ) -> Result<EventRecord> {
        let parse = |s: &str| {
            serde_json::from_str::<serde_json::Value>(s).map_err(|e| Error::InvalidInput {
                reason: e.to_string(),
            })
        };
        let (payload_value, metadata_value) = (parse(payload)?, parse(metadata)?);
        let options = StartOptions {
            additional_metadata: Some(metadata_value.clone()),
            hook: None,
        };
        let mut outcomes = Vec::new();
        for (workflow, hash) in self.inner.store.subscribers(key)? {
            let component = self.component_by_hash(&hash).await?;
            let started = self
                .start_with(&component, &workflow, &payload_value.to_string(), &options)
                .await;
            outcomes.push(match started {
                Ok(run) => EventOutcome {
                    workflow,
                    run_id: Some(run.run_id),
                    deduplicated: false,
                    error: None,
                },
                Err(Error::IdempotencyCollision {
                    existing_run_id, ..
                }) => EventOutcome {
                    workflow,
                    run_id: Some(existing_run_id),
                    deduplicated: true,
                    error: None,
                },
                Err(e) => EventOutcome {
                    workflow,
                    run_id: None,
                    deduplicated: false,
                    error: Some(e.to_string()),
                },
            });
        }
        let event = EventRecord {
            event_id: uuid::Uuid::now_v7().to_string(),
            key: key.into(),
            payload: payload_value.to_string(),
            metadata: metadata_value.to_string(),
            at_ms: self.inner.config.clock.now_ms(),
            outcomes,
        };
        self.inner.store.put_event(&event)?;
        self.inner.store.sync().await?;
        Ok(event)
    }

    /// Every ingested event, oldest first.
    pub fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.inner.store.list_events()
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
                    || self.inner.store.wakeups()?.contains(&run.run_id)
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
    /// record. A finished run, or one this process is already driving, is
    /// returned as it is.
    pub async fn drive(&self, run_id: &str) -> Result<RunRecord> {
        let span = tracing::info_span!("run", run_id);
        self.drive_inner(run_id).instrument(span).await
    }

    async fn drive_inner(&self, run_id: &str) -> Result<RunRecord> {
        let Some(active) = ActiveRun::claim(&self.inner, run_id) else {
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

    /// Runs that can make progress now (pending and interrupted runs,
    /// waiting runs whose timer is due or that something woke), not counting
    /// `busy` ones, and when the next of the others is due. Only live runs
    /// are read.
    fn due_runs(&self, busy: &HashSet<String>) -> Result<(Vec<String>, Option<u64>)> {
        self.purge_expired()?;
        let now = now_ms();
        let active = self.inner.active.lock().expect("active runs").clone();
        let woken = self.inner.store.wakeups()?;
        let (mut due, mut next_wake) = (Vec::new(), None::<u64>);
        for run in self.inner.store.live_runs()? {
            if busy.contains(&run.run_id) || active.contains(&run.run_id) {
                continue;
            }
            match (run.status, run.wake_at_ms) {
                (RunStatus::Pending | RunStatus::Running, _) => due.push(run.run_id),
                (RunStatus::Waiting, _) if woken.contains(&run.run_id) => due.push(run.run_id),
                (RunStatus::Waiting, Some(at)) if at > now => {
                    next_wake = Some(next_wake.map_or(at, |n| n.min(at)));
                }
                (RunStatus::Waiting, Some(_)) => due.push(run.run_id),
                _ => {}
            }
        }
        Ok((due, next_wake))
    }

    /// Deletes expired idempotency keys and retained tokens, at most once a
    /// second of the admission clock (they are already refused by
    /// admission once expired; this only reclaims the space).
    fn purge_expired(&self) -> Result<()> {
        let now = self.inner.config.clock.now_ms();
        {
            let mut last = self.inner.last_purge_ms.lock().expect("purge time");
            if now < last.saturating_add(1000) {
                return Ok(());
            }
            *last = now;
        }
        let keys = self.inner.store.purge_expired_keys(now)?;
        let tokens = self.inner.store.purge_expired_hooks(now)?;
        if keys + tokens > 0 {
            tracing::debug!(keys, tokens, "expired keys and tokens deleted");
        }
        Ok(())
    }

    /// Drives every run that can make progress now, and waits for them to
    /// complete, fail or wait. Returns how many it drove.
    pub async fn work_once(&self) -> Result<usize> {
        let mut tasks = tokio::task::JoinSet::new();
        let (due, _) = self.due_runs(&HashSet::new())?;
        for run_id in &due {
            self.spawn_drive(&mut tasks, run_id);
        }
        while let Some(result) = tasks.join_next().await {
            log_driven(result);
        }
        Ok(due.len())
    }

    /// The worker loop: drives runs as they become due, each in its own
    /// task, so that one run parked on a short timer holds up no other.
    /// With `until_idle`, returns once nothing runs and no run is due within
    /// a second. Returns how many runs it drove.
    pub async fn work(&self, until_idle: bool) -> Result<usize> {
        let mut tasks = tokio::task::JoinSet::new();
        let mut in_flight = HashSet::new();
        let mut driven = 0;
        loop {
            let (due, next_wake) = self.due_runs(&in_flight)?;
            for run_id in due {
                self.spawn_drive(&mut tasks, &run_id);
                in_flight.insert(run_id);
                driven += 1;
            }
            let wait = next_wake.map_or(Duration::from_secs(1), |at| {
                Duration::from_millis(at.saturating_sub(now_ms()))
            });
            if until_idle && tasks.is_empty() && wait >= Duration::from_secs(1) {
                return Ok(driven);
            }
            let progress = self.inner.progress.notified();
            tokio::select! {
                () = progress => {}
                Some(result) = tasks.join_next() => {
                    in_flight.remove(&log_driven(result));
                }
                () = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
            }
        }
    }

    fn spawn_drive(&self, tasks: &mut DriveTasks, run_id: &str) {
        let keel = self.clone();
        let run_id = run_id.to_string();
        tasks.spawn(async move {
            let result = keel.drive(&run_id).await;
            (run_id, result)
        });
    }

    /// When the next waiting run is due, if any.
    pub fn next_wake(&self) -> Result<Option<u64>> {
        Ok(self
            .inner
            .store
            .live_runs()?
            .iter()
            .filter(|r| r.status == RunStatus::Waiting)
            .filter_map(|r| r.wake_at_ms)
            .min())
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

/// Starts a run on behalf of a workflow (`start_workflow`), with the run ID
/// the workflow's command derives, so a recovered workflow that starts it
/// again finds it instead of starting another.
pub(crate) async fn start_child(
    inner: &Arc<Inner>,
    loaded: &Loaded,
    run_id: String,
    workflow: &str,
    input: &str,
    options: &sandbox::wit::StartOptions,
) -> Result<StartOutcome> {
    if inner.store.get_run(&run_id).is_ok() {
        return Ok(StartOutcome::Started { run_id });
    }
    let metadata = match options.metadata.as_deref().map(serde_json::from_str) {
        Some(Ok(value)) => Some(value),
        Some(Err(e)) => {
            return Ok(StartOutcome::Refused {
                reason: format!("the start hook's metadata is not valid JSON: {e}"),
            });
        }
        None => None,
    };
    let options = StartOptions {
        additional_metadata: None,
        hook: options.token.as_ref().map(|token| StartHook {
            token: token.clone(),
            min_retention: options.min_retention_ms.map(Duration::from_millis),
            metadata,
        }),
    };
    let keel = Keel::from_inner(inner.clone());
    match keel.admit(loaded, workflow, input, &options, run_id).await {
        Ok(run) => Ok(StartOutcome::Started { run_id: run.run_id }),
        Err(Error::HookConflict {
            conflicting_run_id, ..
        }) => Ok(StartOutcome::HookConflict { conflicting_run_id }),
        Err(
            e @ (Error::InvalidInput { .. }
            | Error::UnknownWorkflow { .. }
            | Error::KeyExpression { .. }
            | Error::IdempotencyCollision { .. }
            | Error::StoreCapability { .. }),
        ) => Ok(StartOutcome::Refused {
            reason: e.to_string(),
        }),
        Err(e) => Err(e),
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
