//! Retention on sled: ended runs oldest first (the `ended` tree), their
//! deletion, and the store's figures.
//!
//! A deletion removes each run's record, `created` key and lease in one
//! transaction that also marks the run in `purging`; the rest of its data
//! (journal, hooks, payloads, slots, ...) is deleted after, and the mark
//! last. A crash in between leaves the mark, and the next deletion (or the
//! next open) finishes the job, so nothing of a deleted run stays behind.

use keel_core::RunCursor;
use keel_core::retention::{Deleted, StoreStats};
use sled::Transactional;

use super::runs::{abort, created_key};
use super::*;
use crate::RetentionStore;

#[async_trait]
impl RetentionStore for SledStore {
    async fn ended_runs(
        &self,
        created_before_ms: u64,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let i = &self.inner;
        let end = created_key(&RunCursor::before_time(created_before_ms));
        let range = match after {
            Some(cursor) => {
                let mut start = created_key(cursor);
                // Just after the cursor's own key.
                start.push(0);
                i.ended.range(start..end)
            }
            None => i.ended.range(..end),
        };
        let mut found = Vec::new();
        for kv in range {
            if found.len() == limit {
                break;
            }
            let (key, _) = kv.map_err(backend)?;
            let run_id = String::from_utf8_lossy(&key[8.min(key.len())..]).into_owned();
            match self.read_run(&run_id) {
                Ok(run) if run.status.is_final() => found.push(run),
                Ok(_) | Err(StoreError::RunNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    async fn delete_runs(&self, run_ids: &[RunId], tokens_at_ms: Option<u64>) -> Result<Deleted> {
        self.finish_purges()?;
        let mut deleted = Deleted::default();
        for run_id in run_ids {
            if let Some(record_bytes) = self.unlink_run(run_id)? {
                deleted.runs.push(run_id.clone());
                deleted.bytes += record_bytes;
            }
        }
        let (entries, bytes) = self.drop_runs_data(&deleted.runs, tokens_at_ms)?;
        deleted.journal_entries = entries;
        deleted.bytes += bytes;
        if !deleted.runs.is_empty() {
            self.sync().await?;
        }
        Ok(deleted)
    }

    async fn delete_events_before(&self, before_ms: u64) -> Result<u64> {
        let mut deleted = 0;
        for kv in self.inner.events.iter() {
            let (key, bytes) = kv.map_err(backend)?;
            let event: EventRecord = codec::decode(&bytes, "event")?;
            if event.at_ms < before_ms {
                self.inner.events.remove(key).map_err(backend)?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            self.sync().await?;
        }
        Ok(deleted)
    }

    async fn stats(&self) -> Result<StoreStats> {
        let i = &self.inner;
        let mut stats = StoreStats::default();
        for kv in i.runs.iter() {
            let run: RunRecord = codec::decode(&kv.map_err(backend)?.1, "run record")?;
            *stats
                .runs_by_status
                .entry(run.status.as_str().to_string())
                .or_default() += 1;
        }
        (stats.journal_entries, stats.journal_bytes) = count(&i.journal)?;
        (stats.payloads, stats.payload_bytes) = count(&i.inbox)?;
        (stats.components, stats.component_bytes) = count(&i.components)?;
        stats.hooks = i.hooks.len() as u64;
        stats.events = i.events.len() as u64;
        stats.size_bytes = i.db.size_on_disk().map_err(backend)?;
        Ok(stats)
    }
}

/// How many values `tree` holds, and their bytes.
fn count(tree: &sled::Tree) -> Result<(u64, u64)> {
    let (mut n, mut bytes) = (0, 0);
    for v in tree.iter().values() {
        n += 1;
        bytes += v.map_err(backend)?.len() as u64;
    }
    Ok((n, bytes))
}

impl SledStore {
    /// Removes an ended run's record, listing key and lease, marking it in
    /// `purging`, in one transaction; the record's size, or `None` if the
    /// run is unknown or live.
    fn unlink_run(&self, run_id: &str) -> Result<Option<u64>> {
        let i = &self.inner;
        let trees = (
            &i.runs, &i.live, &i.created, &i.ended, &i.leases, &i.purging,
        );
        let unlinked = trees.transaction(|(runs, live, created, ended, leases, purging)| {
            let Some(bytes) = runs.get(run_id.as_bytes())? else {
                return Ok(None);
            };
            let run: RunRecord = match codec::decode(&bytes, "run record") {
                Ok(run) => run,
                Err(e) => return abort(e.into()),
            };
            if live.get(run_id.as_bytes())?.is_some() || !run.status.is_final() {
                return Ok(None);
            }
            purging.insert(run_id.as_bytes(), &[])?;
            runs.remove(run_id.as_bytes())?;
            created.remove(created_key(&RunCursor::of(&run)))?;
            ended.remove(created_key(&RunCursor::of(&run)))?;
            // An ended run is out of the due index: only its lease goes.
            leases.remove(run_id.as_bytes())?;
            Ok(Some(bytes.len() as u64))
        })?;
        Ok(unlinked)
    }

    /// Deletes everything else stored for runs whose records are gone,
    /// then their `purging` marks; the journal entries and bytes deleted.
    fn drop_runs_data(&self, run_ids: &[RunId], tokens_at_ms: Option<u64>) -> Result<(u64, u64)> {
        let i = &self.inner;
        let (mut entries, mut bytes) = (0, 0);
        for run_id in run_ids {
            let prefix = key_of(run_id, "");
            for kv in i.journal.scan_prefix(&prefix) {
                let (key, value) = kv.map_err(backend)?;
                entries += 1;
                bytes += value.len() as u64;
                i.journal.remove(key).map_err(backend)?;
            }
            for kv in i.inbox.scan_prefix(&prefix) {
                let (key, value) = kv.map_err(backend)?;
                bytes += value.len() as u64;
                i.inbox.remove(key).map_err(backend)?;
            }
            bytes += self.drop_streams(run_id)?;
            self.drop_prefix(&i.claims, &prefix)?;
            self.drop_prefix(&i.payload_ids, &prefix)?;
            if let Some(slot) = self.slot_of(run_id)? {
                i.group_slots
                    .remove(super::flow::slot_index_key(&slot))
                    .map_err(backend)?;
            }
            for tree in [&i.slots, &i.failed_slots, &i.cancels, &i.pauses] {
                tree.remove(run_id.as_bytes()).map_err(backend)?;
            }
        }
        self.drop_hooks_and_watches(run_ids, tokens_at_ms)?;
        for run_id in run_ids {
            i.purging.remove(run_id.as_bytes()).map_err(backend)?;
        }
        Ok((entries, bytes))
    }

    /// Deletes the hooks `run_ids` hold (found under each run's prefix of
    /// `run_hooks`, which keeps the hooks retained after its end) and the
    /// watches they are in, either side (`watchers`, and `watching` for the
    /// other side): reads only what the runs hold. A hook retained past
    /// `tokens_at_ms` stays (`RetentionStore::delete_runs`), until
    /// `HookStore::purge_expired_hooks` finds it.
    fn drop_hooks_and_watches(&self, run_ids: &[RunId], tokens_at_ms: Option<u64>) -> Result<()> {
        let i = &self.inner;
        for run_id in run_ids {
            let prefix = key_of(run_id, "");
            for token in self.suffixes(&i.run_hooks, &prefix)? {
                let Some(value) = i.hooks.get(token.as_bytes()).map_err(backend)? else {
                    continue;
                };
                let hook: keel_core::HookRecord = codec::decode(&value, "hook")?;
                let kept = tokens_at_ms
                    .is_some_and(|at| hook.retain_until_ms.is_some_and(|until| until > at));
                if hook.run_id == *run_id && !kept {
                    i.hooks.remove(token.as_bytes()).map_err(backend)?;
                }
            }
            self.drop_prefix(&i.run_hooks, &prefix)?;
            // Watches of the run, and by it.
            for watcher in self.suffixes(&i.watchers, &prefix)? {
                i.watching
                    .remove(key_of(&watcher, run_id))
                    .map_err(backend)?;
            }
            self.drop_prefix(&i.watchers, &prefix)?;
            for awaited in self.suffixes(&i.watching, &prefix)? {
                i.watchers
                    .remove(key_of(&awaited, run_id))
                    .map_err(backend)?;
            }
            self.drop_prefix(&i.watching, &prefix)?;
        }
        Ok(())
    }

    /// Finishes the deletions a crash interrupted (runs still marked in
    /// `purging`).
    pub(super) fn finish_purges(&self) -> Result<()> {
        let marked: Vec<RunId> = self
            .inner
            .purging
            .iter()
            .keys()
            .map(|id| {
                Ok(String::from_utf8_lossy(&id.map_err(backend)?)
                    .into_owned()
                    .into())
            })
            .collect::<Result<_>>()?;
        // The kept tokens of a purge a crash cut short are not known
        // here: they go with the rest.
        self.drop_runs_data(&marked, None)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use keel_core::RunStatus;
    use keel_core::testing::{JournalBuilder, run_record};

    use super::*;
    use crate::{JournalStore, RunStore};

    #[tokio::test]
    async fn a_deletion_cut_short_by_a_crash_is_finished_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path()).unwrap();
        let run = run_record("gone", RunStatus::Completed, 5);
        let journal = JournalBuilder::started("w", "null").entries();
        store.import(&run, &journal).await.unwrap();
        // The crash: the record is unlinked and marked, the rest not yet
        // deleted.
        assert!(store.unlink_run("gone").unwrap().is_some());
        store.inner.db.flush().unwrap();
        assert!(!store.journal("gone").await.unwrap().is_empty());
        drop(store);
        let store = SledStore::reopen(dir.path()).unwrap();
        assert!(store.journal("gone").await.unwrap().is_empty());
        assert!(
            store.inner.purging.is_empty(),
            "the mark is gone with the data"
        );
        assert!(matches!(
            store.get_run("gone").await,
            Err(StoreError::RunNotFound { .. })
        ));
    }
}
