//! The embedded store: sled, one directory, one process at a time.
//!
//! Trees: `runs` (run ID to record), `journal` (`run \0 seq` to entry),
//! `live` (IDs of runs that have not ended), `created` (`admission time ++
//! run ID`, the order of listings), `ended` (the same keys, of ended
//! runs), `leases` (each run's lease and due
//! state), `due` (live runs by due time), `held` (runs whose lease has an
//! owner) and `counts` (live runs by status): see [`due`]; `keys`, `hooks`, `run_hooks`,
//! `inbox`, `claims`, `watchers` and `watching`, `events`, `subscriptions`,
//! `components`, `schedules` (name to record), `jobs` (job ID to record)
//! and `running_jobs`,
//! `streams` and `chunks` (a run's streams: [`streams`]), `payload_ids`
//! and `remembered_ids`,
//! `purging` (deleted runs
//! whose data is being deleted: [`retention`]), `cancels` (run ID to its
//! cancel request), `pauses` (run ID to the pause that holds it), the
//! flow-control trees
//! (`slots`, `group_slots`, `groups`, `limits`: see [`flow`]) and `meta`
//! (the schema version). Writes are made at once
//! and made durable by a group commit ([`commit`]) before a method returns.
//! Multi-tree operations (admission, hook registration, ends) are sled
//! transactions, so concurrent callers in this process agree on who holds
//! a token or a key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use keel_core::codec;
use keel_core::journal;
use keel_core::{Capabilities, Deployment, Entry, EventRecord, RunId, RunRecord};

use crate::{
    CancelStore, ComponentStore, DeploymentStore, EventStore, JournalStore, KeyStore, PauseStore,
    Result, ScheduleStore, Store, StoreError, WakeStore, WorkerRecord, WorkerStore,
};

mod catalog;
mod commit;
mod due;
mod flow;
mod hooks;
mod integrations;
mod jobs;
mod retention;
mod runs;
mod schedules;
mod schema;
mod streams;
mod wakes;

use runs::*;

use commit::GroupCommit;
pub use schema::SCHEMA_VERSION;

/// The sled store. Clones share the database; dropping the last one
/// closes it and releases its lock.
#[derive(Clone)]
pub struct SledStore {
    inner: Arc<Closing>,
}

/// Free space the store keeps in reserve by default: writes that grow it
/// (admissions, journal entries, payloads, components) are refused below
/// this, so that sled itself never meets a full disk (which wedges it) and
/// writes resume by themselves once space is freed.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// How long closing the store may take: sled flushes as it closes, and
/// after an I/O error that flush can wait forever.
const CLOSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The store's state, closed on a thread of its own with a time bound.
struct Closing(Option<Inner>);

impl std::ops::Deref for Closing {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        self.0
            .as_ref()
            .expect("the store is open until its last handle is dropped")
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        let Some(inner) = self.0.take() else {
            return;
        };
        let path = inner.path.clone();
        let (closed, wait) = std::sync::mpsc::channel();
        let closer = std::thread::Builder::new()
            .name("keel-sled-close".into())
            .spawn(move || {
                drop(inner);
                let _ = closed.send(());
            });
        if closer.is_ok() && wait.recv_timeout(CLOSE_TIMEOUT).is_err() {
            tracing::error!(
                store = %path.display(),
                "the store did not close within {CLOSE_TIMEOUT:?} (its disk failed or is full); what was committed is on disk"
            );
        }
    }
}

struct Inner {
    path: PathBuf,
    runs: sled::Tree,
    journal: sled::Tree,
    components: sled::Tree,
    /// Component hash to when it was last stored (big-endian ms).
    component_times: sled::Tree,
    /// Component hash to its deployment.
    deployments: sled::Tree,
    /// `workflow \0 key` to the admitted run and expiry.
    keys: sled::Tree,
    /// Ingested events, by event ID (time-sortable).
    events: sled::Tree,
    /// `event key \0 workflow` to the hash of the component that subscribed.
    subscriptions: sled::Tree,
    /// Hook tokens to the hook that holds them.
    hooks: sled::Tree,
    /// `run \0 token` for every token a run registered.
    run_hooks: sled::Tree,
    /// `run \0 token \0 index` to a resumed payload.
    inbox: sled::Tree,
    /// `run \0 token` to the run that took the token over with force.
    claims: sled::Tree,
    /// Run ID to the cancel request its driver has yet to journal.
    cancels: sled::Tree,
    /// Run ID to the pause that holds it.
    pauses: sled::Tree,
    /// `awaited run \0 waiting run`.
    watchers: sled::Tree,
    /// `waiting run \0 awaited run`: `watchers` the other way round.
    watching: sled::Tree,
    /// The IDs of runs that have not ended, so that workers look at those only.
    live: sled::Tree,
    /// `created_at_ms (big-endian) ++ run ID`, so listings go newest first
    /// whatever IDs runs were given.
    created: sled::Tree,
    /// The keys of `created` of the runs that have ended: what a purge
    /// pages through.
    ended: sled::Tree,
    /// Run ID to its lease and due state ([`due::Driving`]); the epoch
    /// outlives releases.
    leases: sled::Tree,
    /// `due time (big-endian) ++ run ID` for every live run that is due
    /// ever (`keel_core::due`).
    due: sled::Tree,
    /// IDs of runs whose lease has an owner (held, or expired unreleased).
    held: sled::Tree,
    /// Live status to how many live runs have it (big-endian).
    counts: sled::Tree,
    /// Worker ID to its announcement.
    workers: sled::Tree,
    /// Schedule name to its record.
    schedules: sled::Tree,
    /// Job ID (time-sortable) to the bulk operation's record.
    jobs: sled::Tree,
    /// IDs of the jobs still running.
    running_jobs: sled::Tree,
    /// Run ID to its concurrency slot (`flow`).
    slots: sled::Tree,
    /// Group key ++ run ID to the slot: the slots of each concurrency group.
    group_slots: sled::Tree,
    /// Group key to what its latest admission declared.
    groups: sled::Tree,
    /// The operators' concurrency limits.
    limits: sled::Tree,
    /// Rate-limit key to its window of grants.
    rates: sled::Tree,
    /// `run \0 stream` to the stream's state (`streams`).
    streams: sled::Tree,
    /// `run \0 stream \0 index` to a chunk.
    chunks: sled::Tree,
    /// `run \0 token \0 payload ID` to the index of the payload delivered
    /// with that ID.
    payload_ids: sled::Tree,
    /// `token \0 payload ID` to the run and index it was delivered to and
    /// until when it is remembered, whether or not a run holds the token.
    remembered_ids: sled::Tree,
    /// Run ID to the slot it held when it failed, out of its group until a
    /// retry (`FlowStore::rearm_slot`).
    failed_slots: sled::Tree,
    /// Step concurrency key to its permits (emptied at open).
    permits: sled::Tree,
    /// IDs of deleted runs whose data is still being deleted
    /// ([`retention`]).
    purging: sled::Tree,
    /// Secret name to its bytes (the signing secret of scoped tokens).
    secrets: sled::Tree,
    /// Webhook ID to its record ([`integrations`]).
    webhooks: sled::Tree,
    /// `webhook ID \0 signature` to when it may be forgotten (big-endian ms).
    signatures: sled::Tree,
    /// Serializes decisions against concurrency groups (`flow`).
    flow_lock: std::sync::Mutex<()>,
    db: sled::Db,
    committer: GroupCommit,
    /// Growing writes are refused with less free space than this.
    min_free_bytes: u64,
    /// The last reading of the disk's free space, and when it was taken.
    room: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// Where each tree's sweep of expired records goes on from
    /// ([`SledStore::purge`]).
    sweeps: std::sync::Mutex<std::collections::HashMap<Vec<u8>, Vec<u8>>>,
}

/// The most records one sweep of a tree examines.
const SWEEP: usize = 4096;

/// Locks a mutex, taking the data of a poisoned one.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the sled store is and how it keeps its disk.
#[derive(Clone, Debug)]
pub struct SledOptions {
    /// The store's directory (created if missing).
    pub path: PathBuf,
    /// Free space kept on the store's disk: writes that would grow the
    /// store with less free are refused with [`StoreError::StorageFull`],
    /// and go on once space is freed.
    pub min_free_bytes: u64,
    /// The most memory sled's page cache takes: what the store holds
    /// beyond it stays on disk, so a process's memory does not grow with
    /// the runs it holds.
    pub cache_bytes: u64,
}

/// sled's page cache by default (sled's own default is 1 GiB).
pub const DEFAULT_CACHE_BYTES: u64 = 128 << 20;

/// Free space beyond the reserve above which [`SledStore::room`] trusts a
/// recent reading.
const ROOM_MARGIN: u64 = 256 << 20;
/// How long such a reading is trusted.
const ROOM_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

impl SledOptions {
    /// The store in `path`, with the default reserve.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SledOptions {
            path: path.into(),
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

impl SledStore {
    /// Opens (or creates) the store in `path`, migrating an older schema.
    /// A store another process holds is [`StoreError::Locked`]; one written
    /// by a newer keel is [`StoreError::SchemaTooNew`].
    pub fn open(path: impl AsRef<Path>) -> Result<SledStore> {
        SledStore::open_with(&SledOptions::new(path.as_ref()))
    }

    /// As [`SledStore::open`], with `options`.
    pub fn open_with(options: &SledOptions) -> Result<SledStore> {
        let path = options.path.clone();
        let min_free_bytes = options.min_free_bytes;
        private_dir(&path)?;
        remove_unfinished_snapshots(&path);
        let db = sled::Config::new()
            .path(&path)
            .mode(sled::Mode::LowSpace)
            .cache_capacity(options.cache_bytes)
            .open()
            .map_err(|e| open_error(&path, e))?;
        // Again, for the files sled has just created.
        private_dir(&path)?;
        let open = |name: &str| db.open_tree(name).map_err(backend);
        let meta = open("meta")?;
        // sled 0.34 keeps its log in the file `db` of its directory.
        let log = std::fs::File::open(path.join("db")).map_err(|e| StoreError::Backend {
            reason: format!("opening sled's log file to sync it: {e}"),
        })?;
        let inner = Inner {
            runs: open("runs")?,
            journal: open("journal")?,
            components: open("components")?,
            component_times: open("component_times")?,
            deployments: open("deployments")?,
            keys: open("keys")?,
            events: open("events")?,
            subscriptions: open("subscriptions")?,
            hooks: open("hooks")?,
            secrets: open("secrets")?,
            webhooks: open("webhooks")?,
            signatures: open("signatures")?,
            run_hooks: open("run_hooks")?,
            inbox: open("inbox")?,
            claims: open("claims")?,
            cancels: open("cancels")?,
            pauses: open("pauses")?,
            watchers: open("watchers")?,
            watching: open("watching")?,
            live: open("live")?,
            created: open("created")?,
            ended: open("ended")?,
            leases: open("leases")?,
            due: open("due")?,
            held: open("held")?,
            counts: open("counts")?,
            workers: open("workers")?,
            schedules: open("schedules")?,
            jobs: open("jobs")?,
            running_jobs: open("running_jobs")?,
            slots: open("slots")?,
            group_slots: open("group_slots")?,
            groups: open("groups")?,
            limits: open("limits")?,
            rates: open("rates")?,
            streams: open("streams")?,
            chunks: open("chunks")?,
            payload_ids: open("payload_ids")?,
            remembered_ids: open("remembered_ids")?,
            permits: open("permits")?,
            failed_slots: open("failed_slots")?,
            purging: open("purging")?,
            flow_lock: std::sync::Mutex::new(()),
            db: db.clone(),
            committer: GroupCommit::new(db.clone(), Some(log)),
            path,
            min_free_bytes,
            room: std::sync::Mutex::new(None),
            sweeps: Default::default(),
        };
        let store = SledStore {
            inner: Arc::new(Closing(Some(inner))),
        };
        schema::migrate(&store, &meta, &db)?;
        store.void_leases()?;
        store.finish_purges()?;
        // No step attempt outlives the process that held the store.
        store.inner.permits.clear().map_err(backend)?;
        Ok(store)
    }

    /// Opens the store in `path` once the handles of this process that
    /// held it are gone: sled releases its lock a moment after its last
    /// handle drops. For tests that reopen a store; gives up after 10 s.
    #[doc(hidden)]
    pub fn reopen(path: impl AsRef<Path>) -> Result<SledStore> {
        SledStore::reopen_with(&SledOptions::new(path.as_ref()))
    }

    /// [`SledStore::reopen`] with `options`, as [`SledStore::open_with`]:
    /// for the crash harness, which reopens each trial's store as a
    /// restarted process would.
    pub fn reopen_with(options: &SledOptions) -> Result<SledStore> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match SledStore::open_with(options) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }

    /// The schema version of the store in `path` (0 if there is none),
    /// without migrating it.
    pub fn schema_version_of(path: impl AsRef<Path>) -> Result<u32> {
        let path = path.as_ref();
        if !path.exists() {
            return Ok(0);
        }
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| open_error(path, e))?;
        let meta = db.open_tree("meta").map_err(backend)?;
        schema::version(&meta, &path.display().to_string())
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Refuses a write that grows the store when its disk has less free
    /// space than the reserve. Far above the reserve (by [`ROOM_MARGIN`]
    /// or the reserve again, whichever is more), the last reading is used
    /// for [`ROOM_RECHECK`]: a `statvfs` per write costs more than the
    /// write itself, and a disk cannot fill that far that fast but by
    /// another program, whose writes sled's own error then reports.
    fn room(&self) -> Result<()> {
        let margin = self.inner.min_free_bytes.max(ROOM_MARGIN);
        let recent = |(at, free): (std::time::Instant, u64)| {
            at.elapsed() < ROOM_RECHECK && free >= self.inner.min_free_bytes.saturating_add(margin)
        };
        let mut last = self.inner.room.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(recent) {
            return Ok(());
        }
        let Ok(stat) = rustix::fs::statvfs(&self.inner.path) else {
            // Unknown: sled's own error, if any, says more.
            return Ok(());
        };
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        *last = Some((std::time::Instant::now(), free));
        if free >= self.inner.min_free_bytes {
            return Ok(());
        }
        Err(StoreError::StorageFull {
            reason: format!(
                "{free} bytes free at `{}`, under the {} bytes keel keeps in reserve",
                self.inner.path.display(),
                self.inner.min_free_bytes
            ),
        })
    }

    /// Waits until every write made before the call is on disk.
    async fn sync(&self) -> Result<()> {
        self.inner.committer.sync().await
    }

    /// Writes entries at positions the journal does not hold yet.
    fn write_entries(&self, run_id: &str, entries: &[Entry]) -> Result<()> {
        for entry in entries {
            let key = journal_key(run_id, entry.seq);
            let written = self
                .inner
                .journal
                .compare_and_swap(key, None::<&[u8]>, Some(journal::encode(entry)))
                .map_err(backend)?;
            if written.is_err() {
                return Err(StoreError::JournalConflict {
                    run_id: run_id.into(),
                    seq: entry.seq,
                });
            }
        }
        Ok(())
    }

    fn read_run(&self, run_id: &str) -> Result<RunRecord> {
        match self.inner.runs.get(run_id.as_bytes()).map_err(backend)? {
            Some(bytes) => Ok(codec::decode(&bytes, "run record")?),
            None => Err(StoreError::RunNotFound {
                run_id: run_id.into(),
            }),
        }
    }

    fn all_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner
            .runs
            .iter()
            .map(|kv| Ok(codec::decode(&kv.map_err(backend)?.1, "run record")?))
            .collect()
    }

    /// Deletes the records of `tree` that are `expired` (`expired(key,
    /// value)`), each only if it has not changed since it was read; returns
    /// how many. sled keeps no index of expiries, so one call examines at
    /// most [`SWEEP`] records, going on from where the last call on `tree`
    /// stopped and round to the start: a sweep whose cost per call is
    /// bounded however many records the tree holds.
    fn purge(
        &self,
        tree: &sled::Tree,
        expired: impl Fn(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<usize> {
        let name = tree.name();
        let from = lock(&self.inner.sweeps).get(name.as_ref()).cloned();
        let after = |k: &[u8]| from.as_deref().is_none_or(|f| k > f);
        let ahead = match &from {
            Some(f) => tree.range::<&[u8], _>((
                std::ops::Bound::Excluded(f.as_slice()),
                std::ops::Bound::Unbounded,
            )),
            None => tree.iter(),
        };
        let behind = tree
            .iter()
            .take_while(|kv| kv.as_ref().map_or(true, |(k, _)| !after(k)));
        let (mut purged, mut last) = (0, None);
        for kv in ahead.chain(behind).take(SWEEP) {
            let (k, v) = kv.map_err(backend)?;
            if expired(&k, &v)?
                && tree
                    .compare_and_swap(&k, Some(&v), None::<&[u8]>)
                    .map_err(backend)?
                    .is_ok()
            {
                purged += 1;
            }
            last = Some(k.to_vec());
        }
        let mut sweeps = lock(&self.inner.sweeps);
        match last {
            Some(last) => sweeps.insert(name.to_vec(), last),
            None => sweeps.remove(name.as_ref()),
        };
        Ok(purged)
    }
}

impl Store for SledStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    fn location(&self) -> String {
        self.inner.path.display().to_string()
    }
}

/// `a \0 b`.
fn key_of(a: &str, b: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(a.len() + b.len() + 1);
    key.extend_from_slice(a.as_bytes());
    key.push(0);
    key.extend_from_slice(b.as_bytes());
    key
}

/// `run \0 seq`, the sequence number big-endian so that keys sort by it.
fn journal_key(run_id: &str, seq: u64) -> Vec<u8> {
    let mut key = key_of(run_id, "");
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn backend(e: sled::Error) -> StoreError {
    if is_full(&e) {
        return StoreError::StorageFull {
            reason: e.to_string(),
        };
    }
    StoreError::Backend {
        reason: e.to_string(),
    }
}

/// The error is a full disk's.
fn is_full(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull)
}

/// Makes the store's directory this user's alone (0700), creating it if
/// needed, and the files sled keeps in it 0600, whatever the umask: they
/// hold every run's inputs and outputs.
fn private_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if path.exists() && !path.is_dir() {
        return Err(StoreError::NotADirectory {
            location: path.display().to_string(),
        });
    }
    let io = |e: std::io::Error| StoreError::Unavailable {
        location: path.display().to_string(),
        reason: format!("making the store private: {e}"),
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(path)
        .map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let kind = entry.file_type().map_err(io)?;
            // The compile cache and the control socket guard themselves.
            if kind.is_dir() && !matches!(entry.file_name().to_str(), Some("compiled" | "control"))
            {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o700))
                    .map_err(io)?;
                dirs.push(entry.path());
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))
                    .map_err(io)?;
            }
        }
    }
    Ok(())
}

/// Deletes the snapshots sled began and never finished
/// (`snap.*.generating`), which a process leaves when it dies or meets a
/// full disk while opening the store: sled 0.34 takes one for the newest
/// snapshot and refuses to open the store as corrupt, though nothing in it
/// is lost. Only while no other process holds the store (sled's lock on
/// its log file `db` is taken meanwhile), so no snapshot in progress is
/// touched. Anything it cannot do is left for sled's open to report.
fn remove_unfinished_snapshots(path: &Path) {
    use rustix::fs::{FlockOperation, flock};
    let Ok(log) = std::fs::File::open(path.join("db")) else {
        return;
    };
    if flock(&log, FlockOperation::NonBlockingLockExclusive).is_err() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => tracing::info!(file = %name, "removed a snapshot sled never finished"),
                Err(e) => {
                    tracing::warn!(file = %name, "cannot remove a snapshot sled never finished: {e}")
                }
            }
        }
    }
}

fn open_error(path: &Path, e: sled::Error) -> StoreError {
    let text = e.to_string();
    let location = path.display().to_string();
    if is_full(&e) {
        return StoreError::StorageFull {
            reason: format!("opening `{location}`: {text}"),
        };
    }
    if text.contains("lock")
        || text.contains("WouldBlock")
        || text.contains("temporarily unavailable")
    {
        StoreError::Locked { location }
    } else {
        StoreError::Unavailable {
            location,
            reason: text,
        }
    }
}

impl From<sled::transaction::TransactionError<StoreError>> for StoreError {
    fn from(e: sled::transaction::TransactionError<StoreError>) -> Self {
        match e {
            sled::transaction::TransactionError::Abort(e) => e,
            sled::transaction::TransactionError::Storage(e) => backend(e),
        }
    }
}
