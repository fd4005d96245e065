//! The sled store's schema version and its migrations, applied at open.
//!
//! - 1: journal keys are `run ID ++ seq`; the index of live runs may be
//!   missing (stores written before it existed).
//! - 2: journal keys are `run ID \0 seq`, so that a child run's ID, which
//!   extends its parent's, never falls under the parent's prefix.
//! - 3: the `created` index (admission time, run ID) orders listings.
//! - 4: each run's lease keeps its due state, the `due` index orders live
//!   runs by due time, `held` lists the runs whose lease has an owner and
//!   `counts` counts live runs by workflow and status (`super::due`); the
//!   `wakeups` tree goes (a wake is part of the due state); `running_jobs`
//!   lists the jobs still running; `ended` lists the ended runs' keys of
//!   `created`; `watching` holds `watchers` the other way round.

use super::{SledStore, backend, created_key, key_of};
use crate::{Result, StoreError};

/// The schema this keel writes.
pub const SCHEMA_VERSION: u32 = 4;

const SCHEMA_KEY: &[u8] = b"schema";
const LIVE_INDEX_MARKER: &[u8] = b"live-index-v1";

/// Brings the store at `meta` up to [`SCHEMA_VERSION`], durably; refuses a
/// newer one.
pub(super) fn migrate(store: &SledStore, meta: &sled::Tree, db: &sled::Db) -> Result<()> {
    let found = version(meta, &store.location_string())?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            location: store.location_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if !meta.contains_key(LIVE_INDEX_MARKER).map_err(backend)? {
        index_live_runs(store)?;
    }
    if found < 2 {
        separate_journal_keys(store)?;
    }
    if found < 3 {
        index_creation_times(store)?;
    }
    if found < 4 {
        index_due_times(store, db)?;
    }
    meta.insert(SCHEMA_KEY, &SCHEMA_VERSION.to_be_bytes())
        .map_err(backend)?;
    db.flush().map_err(backend)?;
    tracing::info!(from = found, to = SCHEMA_VERSION, "store schema migrated");
    Ok(())
}

/// The schema version `meta` records (1 for stores from before versions
/// were recorded).
pub(super) fn version(meta: &sled::Tree, location: &str) -> Result<u32> {
    Ok(match meta.get(SCHEMA_KEY).map_err(backend)? {
        Some(v) => {
            u32::from_be_bytes(v.as_ref().try_into().map_err(|_| StoreError::Unavailable {
                location: location.into(),
                reason: "its schema version record is malformed".into(),
            })?)
        }
        None => 1,
    })
}

/// Builds the index of live runs for a store written before it existed.
fn index_live_runs(store: &SledStore) -> Result<()> {
    for run in store.all_runs()? {
        if !run.status.is_final() {
            store
                .inner
                .live
                .insert(run.run_id.as_bytes(), &[])
                .map_err(backend)?;
        }
    }
    Ok(())
}

/// Indexes every run by admission time (idempotent, so an interrupted
/// migration resumes).
fn index_creation_times(store: &SledStore) -> Result<()> {
    for run in store.all_runs()? {
        let key = created_key(&keel_core::RunCursor::of(&run));
        store.inner.created.insert(key, &[]).map_err(backend)?;
    }
    Ok(())
}

/// Builds the due index, `held`, the live counts and `running_jobs` from the live runs'
/// records, leases and wakeups (from scratch, so an interrupted migration
/// starts over), then drops the `wakeups` tree.
fn index_due_times(store: &SledStore, db: &sled::Db) -> Result<()> {
    let i = &store.inner;
    for tree in [&i.due, &i.held, &i.counts] {
        tree.clear().map_err(backend)?;
    }
    let wakeups = db.open_tree("wakeups").map_err(backend)?;
    let live: Vec<String> = i
        .live
        .iter()
        .keys()
        .map(|k| Ok(String::from_utf8_lossy(&k.map_err(backend)?).into_owned()))
        .collect::<Result<_>>()?;
    for run_id in live {
        let run = store.read_run(&run_id)?;
        let woken = wakeups.contains_key(run_id.as_bytes()).map_err(backend)?;
        store.run_tx(|t| {
            t.due.change(&run_id, |d| d.counted = None)?;
            t.put_run(&run)?;
            if woken {
                t.wake(&run_id)?;
            }
            Ok(())
        })?;
    }
    drop(wakeups);
    db.drop_tree("wakeups").map_err(backend)?;
    i.ended.clear().map_err(backend)?;
    for key in i.created.iter().keys() {
        let key = key.map_err(backend)?;
        let run_id = String::from_utf8_lossy(&key[8.min(key.len())..]).into_owned();
        if !i.live.contains_key(run_id.as_bytes()).map_err(backend)? {
            i.ended.insert(key, &[]).map_err(backend)?;
        }
    }
    for key in i.watchers.iter().keys() {
        let key = key.map_err(backend)?;
        let mut sides = key.splitn(2, |b| *b == 0);
        if let (Some(awaited), Some(watcher)) = (sides.next(), sides.next()) {
            let reversed = key_of(
                &String::from_utf8_lossy(watcher),
                &String::from_utf8_lossy(awaited),
            );
            i.watching.insert(reversed, &[]).map_err(backend)?;
        }
    }
    for kv in i.jobs.iter() {
        let job: keel_core::bulk::JobRecord =
            keel_core::codec::decode(&kv.map_err(backend)?.1, "job")?;
        store.index_running(&job)?;
    }
    Ok(())
}

/// Rewrites `run ++ seq` journal keys as `run \0 seq`, each key in one
/// batch (new written, old removed), so an interrupted migration resumes:
/// a key already rewritten has the separator before its last 8 bytes.
fn separate_journal_keys(store: &SledStore) -> Result<()> {
    let tree = &store.inner.journal;
    for kv in tree.iter() {
        let (old, value) = kv.map_err(backend)?;
        if old.len() < 8 || (old.len() > 8 && old[old.len() - 9] == 0) {
            continue;
        }
        let (run, seq) = old.split_at(old.len() - 8);
        let mut new = key_of(&String::from_utf8_lossy(run), "");
        new.extend_from_slice(seq);
        let mut batch = sled::Batch::default();
        batch.insert(new, value);
        batch.remove(old);
        tree.apply_batch(batch).map_err(backend)?;
    }
    Ok(())
}

impl SledStore {
    fn location_string(&self) -> String {
        self.inner.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JournalStore;
    use keel_core::journal::{Entry, Fact};

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            at_ms: 1,
            fact: Fact::TimerFired {
                command: seq as u32,
            },
        }
    }

    /// Writes a schema-1 store: old journal keys, no schema record.
    fn old_store(dir: &std::path::Path) {
        let db = sled::Config::new().path(dir).open().unwrap();
        let journal = db.open_tree("journal").unwrap();
        for (run, seq) in [("parent", 0u64), ("parent", 1), ("parent.1", 0)] {
            let mut key = run.as_bytes().to_vec();
            key.extend_from_slice(&seq.to_be_bytes());
            journal
                .insert(key, keel_core::journal::encode(&entry(seq)))
                .unwrap();
        }
        db.open_tree("meta")
            .unwrap()
            .insert(LIVE_INDEX_MARKER, &[])
            .unwrap();
        db.flush().unwrap();
    }

    #[tokio::test]
    async fn a_schema_1_store_is_migrated_and_children_stay_apart() {
        let dir = tempfile::tempdir().unwrap();
        old_store(dir.path());
        // sled lets go of the old store's lock a moment after its drop.
        let store = SledStore::reopen(dir.path()).unwrap();
        assert_eq!(store.journal("parent").await.unwrap(), [entry(0), entry(1)]);
        assert_eq!(store.journal("parent.1").await.unwrap(), [entry(0)]);
        drop(store);
        // Opening again finds schema 2 and changes nothing.
        let store = SledStore::reopen(dir.path()).unwrap();
        assert_eq!(store.journal("parent").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_snapshot_left_unfinished_does_not_keep_the_store_shut() {
        use crate::RunStore;
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let run = keel_core::testing::run_record("kept", keel_core::RunStatus::Completed, 5);
        store.import(&run, &[entry(0)]).await.unwrap();
        drop(store);
        // What an open that met a full disk leaves: an empty snapshot
        // newer than the last, which sled alone reads as corruption.
        std::fs::write(dir.path().join("snap.FFFFFFFFFFFFFFF0.generating"), b"").unwrap();
        let store = SledStore::reopen(dir.path()).unwrap();
        assert_eq!(
            store.get_run("kept").await.unwrap().status,
            keel_core::RunStatus::Completed
        );
        assert_eq!(store.journal("kept").await.unwrap(), [entry(0)]);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".generating"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn a_schema_2_store_gets_its_creation_index() {
        use crate::RunStore;
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        for (id, at) in [("zz-older", 5), ("aa-newer", 9)] {
            let run = keel_core::testing::run_record(id, keel_core::RunStatus::Completed, at);
            store.import(&run, &[]).await.unwrap();
        }
        drop(store);
        {
            // As schema 2 left it: no creation index.
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            db.drop_tree("created").unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert(SCHEMA_KEY, &2u32.to_be_bytes())
                .unwrap();
            db.flush().unwrap();
        }
        let store = SledStore::reopen(dir.path()).unwrap();
        let listed: Vec<String> = store
            .runs_before(None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.run_id.into_string())
            .collect();
        assert_eq!(listed, ["aa-newer", "zz-older"]);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            let meta = db.open_tree("meta").unwrap();
            meta.insert(SCHEMA_KEY, &9u32.to_be_bytes()).unwrap();
            db.flush().unwrap();
        }
        let err = SledStore::open(dir.path()).err().expect("refused");
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 9,
                    supported: 4,
                    ..
                }
            ),
            "{err}"
        );
    }
}
