//! How an engine runs guests: bounds, grants, the clock, and their
//! defaults, written once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use keel_core::Clock;

use crate::clock::SystemClock;
use crate::observer::{Observer, Unobserved};
use crate::sandbox::Grants;

/// How a worker keeps ended runs, and what it remembers of deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// How long runs whose deployment sets no retention are kept once
    /// ended; `None` keeps them.
    pub default_ms: Option<u64>,
    /// How long a payload's ID (a webhook's delivery ID, a resume's
    /// payload ID) is remembered after its delivery, so that a retry of it
    /// is a duplicate even once the run it went to has ended: at least a
    /// sender's retry window (Stripe retries for three days).
    pub payload_ids_ms: u64,
    /// Each purged run's journal file is written here first
    /// (`RUN_ID.keel`, the format `keel replay` and `keel journal import`
    /// read).
    pub archive_dir: Option<PathBuf>,
}

/// How long payload IDs are remembered by default: seven days, beyond
/// the retry windows of Stripe (three days) and GitHub's redeliveries.
pub const DEFAULT_PAYLOAD_ID_RETENTION_MS: u64 = 7 * 86_400_000;

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            default_ms: None,
            payload_ids_ms: DEFAULT_PAYLOAD_ID_RETENTION_MS,
            archive_dir: None,
        }
    }
}

/// How the engine runs guests.
#[derive(Clone)]
pub struct Config {
    /// Where compiled components are cached (`keel` keeps them in
    /// `compiled/` beside a sled store). Native code is loaded from it: it
    /// must belong to this user and be writable by no one else (see
    /// [`crate::component`]).
    pub cache_dir: PathBuf,
    /// Fuel for the new work of one workflow activation (a CPU bound;
    /// roughly one unit per wasm instruction). Replaying the journal costs
    /// none: the budget is refilled at each call the journal answers.
    pub workflow_fuel: u64,
    /// The longest a workflow may run its own code without calling keel
    /// (a wall-clock bound; fuel bounds its CPU).
    pub activation_timeout: Duration,
    /// Linear memory bound of any guest instance, in bytes.
    pub max_memory: usize,
    /// Capabilities granted to steps.
    pub grants: Grants,
    /// For tests: steps, by name, that never run; each attempt returns the
    /// recorded output (JSON) instead, as a scenario's `stubs` say.
    pub step_stubs: Arc<std::collections::BTreeMap<String, String>>,
    /// Timers due within this bound are awaited in memory; longer ones
    /// suspend the run until a worker resumes it.
    pub park_limit: Duration,
    /// How often a watcher ([`crate::Keel::watch`]) looks at a run it heard
    /// nothing about: writes made in this process and wakes the store
    /// announces reach it at once; this covers writes of other processes
    /// that announce nothing.
    pub watch_poll: Duration,
    /// Guest instances kept at once (the pooling allocator's size): a cache
    /// that activations and step attempts queue for.
    pub max_instances: u32,
    /// How long one step attempt may take before it is stopped and retried.
    pub step_timeout: Duration,
    /// The durability of workflows that declare none.
    pub default_durability: keel_core::manifest::Durability,
    /// How many runs a worker drives at once; others wait for a slot (or for
    /// another worker sharing the store).
    pub max_concurrent_runs: usize,
    /// How long a worker's lease on a run lasts without renewal; the driver
    /// renews it every third of that. A worker that dies loses its runs to
    /// another after at most this long.
    pub lease_ttl: Duration,
    /// This engine's name as the owner of leases (host, process, random).
    pub worker_id: String,
    /// The clock of everything the engine decides by time: admission
    /// windows, retention, journal timestamps, timers, the worker, records.
    pub clock: Arc<dyn Clock>,
    /// Receives the engine's reports (for metrics); ignores them by default.
    pub observer: Arc<dyn Observer>,
    /// Every run admitted here gets a trace context (for OpenTelemetry),
    /// not only those whose start carried a `traceparent`.
    pub trace_runs: bool,
    /// Whether a run a caller does not wait for (a detached start, an
    /// event's runs, a payload delivered without waiting) is driven here in
    /// the background. A worker does; a CLI with no worker does not, since
    /// it stops before such a drive would end, and leaves the run to the
    /// next worker.
    pub background_drives: bool,
    /// Bounds of one run, which keep one run from taking the host's memory
    /// and disk.
    pub limits: RunLimits,
    /// How long ended runs are kept, and where purged runs are archived.
    pub retention: RetentionConfig,
}

/// Bounds of one run. Each, when exceeded, refuses the start (an input)
/// or the resume (a payload), or fails the run, naming the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// Largest run input, step input or output, hook payload or workflow
    /// output, in bytes of JSON.
    pub max_payload_bytes: usize,
    /// Most steps a run may have running at once.
    pub max_steps_in_flight: usize,
    /// Most entries a run's journal may hold.
    pub max_journal_entries: usize,
    /// Most bytes of data a run's steps may write to its streams (a
    /// workflow's writes are journal entries, bounded with the journal).
    pub max_stream_bytes: usize,
    /// How long, and for how many steps, a cancelled run's cleanup may go
    /// on before the run is ended without it.
    pub cancel_grace: keel_core::lifecycle::Grace,
    /// Most times a run may be taken over from a worker that stopped
    /// while driving it, without progress in between, before it fails
    /// (it, or a step of it, keeps killing its worker).
    pub max_takeovers: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_payload_bytes: defaults::MAX_PAYLOAD_KIB << 10,
            max_steps_in_flight: defaults::MAX_STEPS_IN_FLIGHT,
            max_journal_entries: defaults::MAX_JOURNAL_ENTRIES,
            max_stream_bytes: defaults::MAX_STREAM_MIB << 20,
            cancel_grace: keel_core::lifecycle::Grace::default(),
            max_takeovers: defaults::MAX_TAKEOVERS,
        }
    }
}

impl RunLimits {
    /// Refuses a payload (`what`, of `size` bytes) over `max_payload_bytes`.
    pub(crate) fn payload(
        &self,
        size: usize,
        what: impl FnOnce() -> String,
        run_id: Option<&keel_core::RunId>,
    ) -> crate::Result<()> {
        bound(
            "max_payload_bytes",
            self.max_payload_bytes,
            size,
            what,
            run_id,
        )
    }

    /// No bound: for offline replay, which records nothing.
    pub fn unbounded() -> Self {
        RunLimits {
            max_payload_bytes: usize::MAX,
            max_steps_in_flight: usize::MAX,
            max_journal_entries: usize::MAX,
            max_stream_bytes: usize::MAX,
            cancel_grace: keel_core::lifecycle::Grace {
                ms: u64::MAX,
                steps: u32::MAX,
            },
            max_takeovers: usize::MAX,
        }
    }
}

/// The defaults, written once.
pub mod defaults {
    use std::time::Duration;

    /// Fuel for the new work of one workflow activation.
    pub const WORKFLOW_FUEL: u64 = 20_000_000_000;
    /// The longest a workflow may run its own code without calling keel.
    pub const ACTIVATION_TIMEOUT: Duration = Duration::from_secs(60);
    /// Memory bound of a guest instance, in MiB.
    pub const MAX_MEMORY_MIB: usize = 256;
    /// How long one step attempt may take.
    pub const STEP_TIMEOUT: Duration = Duration::from_secs(300);
    /// Timers due within this bound are awaited in memory.
    pub const PARK_LIMIT: Duration = Duration::from_secs(60);
    /// How often a watcher looks at a run it heard nothing about.
    pub const WATCH_POLL: Duration = Duration::from_secs(1);
    /// Instances the pooling allocator keeps slots for.
    pub const MAX_INSTANCES: u32 = 1000;
    /// How long a lease on a run lasts without renewal.
    pub const LEASE_TTL: Duration = Duration::from_secs(10);
    /// How many runs a worker drives at once.
    pub const MAX_CONCURRENT_RUNS: usize = 64;
    /// Largest input, output or payload of a run, in KiB.
    pub const MAX_PAYLOAD_KIB: usize = 1024;
    /// Most steps one run may have scheduled and not yet ended at once
    /// (beyond the instance slots, they queue).
    pub const MAX_STEPS_IN_FLIGHT: usize = 10_000;
    /// Most entries one run's journal may hold.
    pub const MAX_JOURNAL_ENTRIES: usize = 100_000;
    /// Most data a run's steps may write to its streams, in MiB.
    pub const MAX_STREAM_MIB: usize = 64;
    /// Most takeovers of a run without progress between them.
    pub const MAX_TAKEOVERS: usize = 10;
}

/// Refuses `size` over `limit`, naming the bound and what went over it.
pub(crate) fn bound(
    bound: &'static str,
    limit: usize,
    size: usize,
    what: impl FnOnce() -> String,
    run_id: Option<&keel_core::RunId>,
) -> crate::Result<()> {
    if size <= limit {
        return Ok(());
    }
    Err(crate::Error::BoundExceeded {
        run_id: run_id.cloned(),
        bound,
        limit,
        size,
        what: what(),
    })
}

/// This machine's name.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A name for this process as a lease owner: host, process ID and a random
/// suffix (two engines in one process are two owners).
fn worker_id() -> String {
    let host = host_name();
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &unique[..8])
}

impl Config {
    /// The defaults, caching compiled components in `cache_dir`. The store
    /// is the engine's own business: see [`crate::Keel::open`].
    pub fn caching_in(cache_dir: impl Into<PathBuf>) -> Self {
        Config {
            cache_dir: cache_dir.into(),
            workflow_fuel: defaults::WORKFLOW_FUEL,
            activation_timeout: defaults::ACTIVATION_TIMEOUT,
            max_memory: defaults::MAX_MEMORY_MIB << 20,
            grants: Grants::default(),
            step_stubs: Arc::default(),
            park_limit: defaults::PARK_LIMIT,
            watch_poll: defaults::WATCH_POLL,
            max_instances: defaults::MAX_INSTANCES,
            step_timeout: defaults::STEP_TIMEOUT,
            default_durability: keel_core::manifest::Durability::default(),
            lease_ttl: defaults::LEASE_TTL,
            max_concurrent_runs: defaults::MAX_CONCURRENT_RUNS,
            worker_id: worker_id(),
            clock: Arc::new(SystemClock),
            observer: Arc::new(Unobserved),
            trace_runs: false,
            background_drives: true,
            limits: RunLimits::default(),
            retention: RetentionConfig::default(),
        }
    }
}

/// Where compiled components of a PostgreSQL store's runs are cached, per
/// user: `$XDG_CACHE_HOME/keel/compiled`, else `~/.cache/keel/compiled`.
pub fn user_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("keel").join("compiled")
}
