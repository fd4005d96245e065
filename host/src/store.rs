//! Durable storage of runs, journals and components, in sled.
//!
//! Every write that a caller depends on goes through [`Store::sync`], which
//! batches concurrent callers into one flush (group commit): a caller is
//! answered only once its writes are on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::journal::{self, Entry, FORMAT_VERSION};
use crate::{Error, Result};

/// A run's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Admitted, not yet executed.
    Pending,
    /// Being executed, or interrupted while it was (a worker resumes it).
    Running,
    /// Suspended until a timer is due.
    Waiting,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// The status named by [`RunStatus::as_str`].
    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// The run has ended and will not execute again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    pub kind: String,
    pub message: String,
}

/// A run's index record; the journal remains the source of truth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub workflow: String,
    pub component_hash: String,
    pub input: String,
    pub status: RunStatus,
    pub output: Option<String>,
    pub error: Option<RunError>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// When a waiting run's next timer is due.
    pub wake_at_ms: Option<u64>,
}

/// The run that holds an idempotency key, until its window passes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHold {
    pub run_id: String,
    pub expires_at_ms: u64,
}

/// An ingested event and the runs it started or was deduplicated against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub event_id: String,
    pub key: String,
    pub payload: String,
    pub metadata: String,
    pub at_ms: u64,
    pub outcomes: Vec<EventOutcome>,
}

/// What an event did for one subscribed workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventOutcome {
    pub workflow: String,
    /// The run it started, or the run that already held the key.
    pub run_id: Option<String>,
    /// The start collided with an idempotency key and was swallowed.
    pub deduplicated: bool,
    /// Why no run was started (a key expression that failed, say).
    pub error: Option<String>,
}

/// What a store supports, declared so that a start needing more fails
/// before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// A run and its start hook are admitted in one transaction.
    pub atomic_start_hook: bool,
    /// A token can be held after its run ends (`min_retention`).
    pub hook_retention: bool,
}

impl Capabilities {
    /// Everything keel can ask of a store; what sled provides.
    pub const ALL: Capabilities = Capabilities {
        atomic_start_hook: true,
        hook_retention: true,
    };
}

/// The embedded store: one directory, one process at a time. Clones share
/// the database; dropping the last one closes it and releases its lock.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<StoreInner>,
}

pub(crate) struct StoreInner {
    path: PathBuf,
    pub(crate) runs: sled::Tree,
    journal: sled::Tree,
    components: sled::Tree,
    /// Idempotency keys: `workflow \0 key` to the admitted run and expiry.
    pub(crate) keys: sled::Tree,
    /// Ingested events, by event ID (time-sortable).
    events: sled::Tree,
    /// `event key \0 workflow` to the hash of the component that subscribed.
    subscriptions: sled::Tree,
    /// Hook tokens to the hook that holds them.
    pub(crate) hooks: sled::Tree,
    /// `run \0 token` for every token a run registered.
    pub(crate) run_hooks: sled::Tree,
    /// `run \0 token \0 index` to a resumed payload.
    pub(crate) inbox: sled::Tree,
    /// `run \0 token` to the run that took the token over with force.
    pub(crate) claims: sled::Tree,
    /// Runs that something outside them moved on (a payload, a run's end).
    pub(crate) wakeups: sled::Tree,
    /// `awaited run \0 waiting run`.
    pub(crate) watchers: sled::Tree,
    /// The IDs of runs that have not ended, so that workers look at those only.
    pub(crate) live: sled::Tree,
    committer: GroupCommit,
    /// Test hook: the next sync reports a failure.
    fail_next_sync: std::sync::atomic::AtomicBool,
    capabilities: std::sync::Mutex<Capabilities>,
}

/// Group commit without a thread of its own: the first caller to need a
/// flush performs it on its own thread (the leader); callers that arrive
/// while it runs wait, and the next of them leads one flush for all. One run
/// at a time pays no hand-off; many runs share flushes.
struct GroupCommit {
    db: sled::Db,
    state: std::sync::Mutex<CommitState>,
    flushed: Notify,
}

#[derive(Default)]
struct CommitState {
    /// A leader is flushing.
    leading: bool,
    /// Flushes started and completed, numbered from 1.
    started: u64,
    completed: u64,
    /// The outcome of the last completed flush.
    last: Option<sled::Error>,
}

impl GroupCommit {
    fn new(db: sled::Db) -> Self {
        GroupCommit {
            db,
            state: Default::default(),
            flushed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CommitState> {
        self.state.lock().expect("group commit state")
    }

    /// Waits for a flush that started after this call.
    async fn sync(&self) -> Result<()> {
        let needed = self.lock().started + 1;
        loop {
            let flushed = self.flushed.notified();
            tokio::pin!(flushed);
            flushed.as_mut().enable();
            let lead = {
                let mut state = self.lock();
                if state.completed >= needed {
                    return match &state.last {
                        None => Ok(()),
                        Some(e) => Err(Error::Storage(e.clone())),
                    };
                }
                if state.leading {
                    None
                } else {
                    state.leading = true;
                    state.started += 1;
                    Some(state.started)
                }
            };
            match lead {
                Some(flush) => {
                    let result = self.db.flush();
                    {
                        let mut state = self.lock();
                        state.leading = false;
                        state.completed = flush;
                        state.last = result.as_ref().err().cloned();
                    }
                    self.flushed.notify_waiters();
                }
                None => flushed.await,
            }
        }
    }
}

impl Store {
    /// Opens (or creates) the store in `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let db = sled::Config::new()
            .path(&path)
            .mode(sled::Mode::LowSpace)
            .open()
            .map_err(|e| open_error(&path, e))?;
        let open = |name: &str| db.open_tree(name);
        let meta = open("meta")?;
        let inner = StoreInner {
            runs: open("runs")?,
            journal: open("journal")?,
            components: open("components")?,
            keys: open("keys")?,
            events: open("events")?,
            subscriptions: open("subscriptions")?,
            hooks: open("hooks")?,
            run_hooks: open("run_hooks")?,
            inbox: open("inbox")?,
            claims: open("claims")?,
            wakeups: open("wakeups")?,
            watchers: open("watchers")?,
            live: open("live")?,
            committer: GroupCommit::new(db),
            fail_next_sync: Default::default(),
            capabilities: std::sync::Mutex::new(Capabilities::ALL),
            path,
        };
        let store = Store {
            inner: Arc::new(inner),
        };
        store.index_live_runs(&meta)?;
        Ok(store)
    }

    /// Builds the index of live runs once for a store written before it
    /// existed.
    fn index_live_runs(&self, meta: &sled::Tree) -> Result<()> {
        const MARKER: &[u8] = b"live-index-v1";
        if meta.contains_key(MARKER)? {
            return Ok(());
        }
        for run in self.list_runs()? {
            if !run.status.is_final() {
                self.inner.live.insert(run.run_id.as_bytes(), &[])?;
            }
        }
        meta.insert(MARKER, &[])?;
        Ok(())
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Waits until every write made before the call is on disk. Concurrent
    /// callers share one flush.
    pub async fn sync(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.inner.fail_next_sync.swap(false, Ordering::SeqCst) {
            return Err(Error::Wasm("injected flush failure".into()));
        }
        self.inner.committer.sync().await
    }

    /// Makes the next [`Store::sync`] fail, as a lost connection or a full
    /// disk would: for testing what callers do when an outcome is unknown.
    #[doc(hidden)]
    pub fn inject_sync_failure(&self) {
        self.inner
            .fail_next_sync
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// What this store can do; see [`Capabilities`].
    pub fn capabilities(&self) -> Capabilities {
        *self.inner.capabilities.lock().expect("capabilities")
    }

    /// Declares fewer capabilities than sled has, as a store without them
    /// would: for testing that callers fail before writing anything.
    #[doc(hidden)]
    pub fn limit_capabilities(&self, capabilities: Capabilities) {
        *self.inner.capabilities.lock().expect("capabilities") = capabilities;
    }

    /// Stores a component's bytes under their content hash.
    pub fn put_component(&self, hash: &str, bytes: &[u8]) -> Result<()> {
        if !self.inner.components.contains_key(hash)? {
            self.inner.components.insert(hash, bytes)?;
        }
        Ok(())
    }

    pub fn get_component(&self, hash: &str) -> Result<Vec<u8>> {
        self.inner
            .components
            .get(hash)?
            .map(|b| b.to_vec())
            .ok_or_else(|| Error::ComponentNotFound { hash: hash.into() })
    }

    /// Stores a run's record and keeps the index of live runs: a live run
    /// is indexed before its record is written and a finished one after, so
    /// a crash between the two never hides a live run from workers.
    pub fn put_run(&self, run: &RunRecord) -> Result<()> {
        let id = run.run_id.as_bytes();
        if !run.status.is_final() {
            self.inner.live.insert(id, &[])?;
        }
        self.inner.runs.insert(id, encode_versioned(run))?;
        if run.status.is_final() {
            self.inner.live.remove(id)?;
        }
        Ok(())
    }

    /// The runs that have not ended, oldest first.
    pub fn live_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner
            .live
            .iter()
            .keys()
            .filter_map(|id| match id {
                Ok(id) => self.get_run(&String::from_utf8_lossy(&id)).ok().map(Ok),
                Err(e) => Some(Err(e.into())),
            })
            .collect()
    }

    pub fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        match self.inner.runs.get(run_id.as_bytes())? {
            Some(bytes) => decode_versioned(&bytes, "run record"),
            None => Err(Error::RunNotFound {
                run_id: run_id.into(),
            }),
        }
    }

    /// Every run, oldest first (run IDs sort by creation time).
    pub fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner
            .runs
            .iter()
            .map(|kv| decode_versioned(&kv?.1, "run record"))
            .collect()
    }

    /// Who holds a workflow's idempotency key, and until when.
    pub fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>> {
        self.inner
            .keys
            .get(key_of(workflow, key))?
            .map(|b| decode_versioned(&b, "idempotency key"))
            .transpose()
    }

    /// Deletes the keys whose window has passed; returns how many.
    pub fn purge_expired_keys(&self, now_ms: u64) -> Result<usize> {
        self.purge(&self.inner.keys, "idempotency key", |h: &KeyHold| {
            h.expires_at_ms <= now_ms
        })
    }

    /// Deletes the records of `tree` that are `expired`, each only if it
    /// has not changed since it was read; returns how many.
    pub(crate) fn purge<T: DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        what: &str,
        expired: impl Fn(&T) -> bool,
    ) -> Result<usize> {
        let mut purged = 0;
        for kv in tree.iter() {
            let (k, v) = kv?;
            if expired(&decode_versioned(&v, what)?)
                && tree.compare_and_swap(&k, Some(v), None::<&[u8]>)?.is_ok()
            {
                purged += 1;
            }
        }
        Ok(purged)
    }

    /// Records that `workflow` of component `hash` starts on `event_key`.
    pub fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()> {
        self.inner
            .subscriptions
            .insert(key_of(event_key, workflow), hash.as_bytes())?;
        Ok(())
    }

    /// The `(workflow, component hash)` subscribed to `event_key`.
    pub fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>> {
        let prefix = key_of(event_key, "");
        self.inner
            .subscriptions
            .scan_prefix(&prefix)
            .map(|kv| {
                let (k, v) = kv?;
                Ok((
                    String::from_utf8_lossy(&k[prefix.len()..]).into(),
                    String::from_utf8_lossy(&v).into(),
                ))
            })
            .collect()
    }

    pub fn put_event(&self, event: &EventRecord) -> Result<()> {
        self.inner
            .events
            .insert(event.event_id.as_bytes(), encode_versioned(event))?;
        Ok(())
    }

    /// Every event, oldest first.
    pub fn list_events(&self) -> Result<Vec<EventRecord>> {
        self.inner
            .events
            .iter()
            .map(|kv| decode_versioned(&kv?.1, "event"))
            .collect()
    }

    /// Appends an entry to a run's journal (durable after [`Store::sync`]).
    pub fn append(&self, run_id: &str, entry: &Entry) -> Result<()> {
        self.inner
            .journal
            .insert(journal_key(run_id, entry.seq), journal::encode(entry))?;
        Ok(())
    }

    /// A run's journal, in order.
    pub fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        // A child's run ID extends its parent's: keep this run's keys only.
        let key_len = run_id.len() + 8;
        self.inner
            .journal
            .scan_prefix(run_id.as_bytes())
            .filter(|kv| kv.as_ref().map_or(true, |(k, _)| k.len() == key_len))
            .map(|kv| journal::decode(&kv?.1))
            .collect()
    }
}

/// `a \0 b`.
pub(crate) fn key_of(a: &str, b: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(a.len() + b.len() + 1);
    key.extend_from_slice(a.as_bytes());
    key.push(0);
    key.extend_from_slice(b.as_bytes());
    key
}

fn journal_key(run_id: &str, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(run_id.len() + 8);
    key.extend_from_slice(run_id.as_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn open_error(path: &Path, e: sled::Error) -> Error {
    let text = e.to_string();
    if text.contains("lock")
        || text.contains("WouldBlock")
        || text.contains("temporarily unavailable")
    {
        Error::StoreLocked { path: path.into() }
    } else {
        Error::StoreUnavailable {
            path: path.into(),
            reason: text,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    version: u16,
    value: T,
}

pub(crate) fn encode_versioned<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(&Versioned {
        version: FORMAT_VERSION,
        value,
    })
    .expect("records always encode")
}

pub(crate) fn decode_versioned<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    let record: Versioned<T> = postcard::from_bytes(bytes).map_err(|e| Error::CorruptRecord {
        what: what.into(),
        reason: e.to_string(),
    })?;
    if record.version != FORMAT_VERSION {
        return Err(Error::CorruptRecord {
            what: what.into(),
            reason: format!(
                "format version {}, but this keel reads version {FORMAT_VERSION}",
                record.version
            ),
        });
    }
    Ok(record.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, status: RunStatus) -> RunRecord {
        RunRecord {
            run_id: id.into(),
            workflow: "w".into(),
            component_hash: "h".into(),
            input: "null".into(),
            status,
            output: None,
            error: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            wake_at_ms: None,
        }
    }

    fn live_ids(store: &Store) -> Vec<String> {
        store
            .live_runs()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect()
    }

    #[test]
    fn only_runs_that_have_not_ended_are_live() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.put_run(&run("a", RunStatus::Pending)).unwrap();
        store.put_run(&run("b", RunStatus::Waiting)).unwrap();
        store.put_run(&run("c", RunStatus::Completed)).unwrap();
        assert_eq!(live_ids(&store), ["a", "b"]);
        store.put_run(&run("a", RunStatus::Failed)).unwrap();
        assert_eq!(live_ids(&store), ["b"]);
    }

    #[test]
    fn a_store_without_the_index_is_indexed_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.put_run(&run("a", RunStatus::Running)).unwrap();
            store.put_run(&run("b", RunStatus::Completed)).unwrap();
            store.inner.live.clear().unwrap();
        }
        {
            // As a store written before the index existed.
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            db.open_tree("meta").unwrap().clear().unwrap();
            db.flush().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(live_ids(&store), ["a"]);
    }
}
