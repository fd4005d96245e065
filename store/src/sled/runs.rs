//! Runs and their journals: admission, import, listings and ends as sled
//! transactions over the trees they touch (a record always with its due
//! state: [`super::due`]), then one group commit; appends.

use async_trait::async_trait;
use keel_core::codec;
use keel_core::journal;
use keel_core::{Entry, HookRecord, KeyHold, RunCursor, RunId, RunRecord};
use sled::transaction::{
    ConflictableTransactionError, TransactionalTree, UnabortableTransactionError,
};

use crate::{Admission, Admitted, Lease, LiveCounts, Result, RunStore, StoreError};

use super::*;

pub(super) type TxResult<T> = std::result::Result<T, ConflictableTransactionError<StoreError>>;

pub(super) fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

pub(super) fn read_hook(hooks: &TransactionalTree, token: &str) -> TxResult<Option<HookRecord>> {
    match hooks.get(token.as_bytes())? {
        Some(bytes) => codec::decode(&bytes, "hook")
            .map(Some)
            .map_err(|e| ConflictableTransactionError::Abort(e.into())),
        None => Ok(None),
    }
}

pub(super) fn write_hook(
    hooks: &TransactionalTree,
    run_hooks: &TransactionalTree,
    hook: &HookRecord,
) -> std::result::Result<(), UnabortableTransactionError> {
    hooks.insert(hook.token.as_bytes(), codec::encode(hook))?;
    run_hooks.insert(key_of(&hook.run_id, &hook.token), &[])?;
    Ok(())
}

/// Writes entries at positions the journal does not hold yet.
pub(super) fn write_entries(
    tree: &TransactionalTree,
    run_id: &str,
    entries: &[Entry],
) -> TxResult<()> {
    for entry in entries {
        let key = journal_key(run_id, entry.seq);
        if tree.get(&key)?.is_some() {
            return abort(StoreError::JournalConflict {
                run_id: run_id.into(),
                seq: entry.seq,
            });
        }
        tree.insert(key, journal::encode(entry))?;
    }
    Ok(())
}

pub(super) fn inbox_key(run_id: &str, token: &str, index: u64) -> Vec<u8> {
    let mut key = key_of(run_id, token);
    key.push(0);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

impl SledStore {
    /// The runs admitted below `before` (every run if `None`), newest
    /// first: the order of listings.
    fn newest_first<'a>(
        &'a self,
        before: Option<&RunCursor>,
    ) -> impl Iterator<Item = Result<RunRecord>> + 'a {
        let created = &self.inner.created;
        let range = match before {
            Some(cursor) => created.range(..created_key(cursor)),
            None => created.iter(),
        };
        range.rev().map(move |kv| {
            let (key, _) = kv.map_err(backend)?;
            self.read_run(&String::from_utf8_lossy(&key[8.min(key.len())..]))
        })
    }

    pub(super) fn suffixes(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<String>> {
        tree.scan_prefix(prefix)
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k.map_err(backend)?[prefix.len()..]).into_owned()))
            .collect()
    }

    pub(super) fn drop_prefix(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<()> {
        for k in tree.scan_prefix(prefix).keys() {
            tree.remove(k.map_err(backend)?).map_err(backend)?;
        }
        Ok(())
    }
}

#[async_trait]
impl RunStore for SledStore {
    async fn admit(&self, a: Admission<'_>) -> Result<Admitted> {
        self.room()?;
        // A continuation's handover is read first (a transaction cannot
        // scan) and checked unchanged inside the transaction: a delivery
        // in between makes it read again.
        for _ in 0..super::hooks::HANDOVER_TRIES {
            let handover = match a.handover {
                Some(h) => self.handover_plan(h)?,
                None => None,
            };
            if let Some(admitted) = self.admit_once(&a, handover.as_ref())? {
                self.sync().await?;
                return Ok(admitted);
            }
        }
        Err(StoreError::Backend {
            reason: "the start hook a continuation takes over kept receiving payloads while it was admitted".into(),
        })
    }

    async fn import(&self, run: &RunRecord, entries: &[Entry]) -> Result<()> {
        self.room()?;
        let i = &self.inner;
        let writes: Vec<super::streams::Write<'_>> = keel_core::stream::journaled_writes(entries)
            .map(|(stream, origin, body, at)| (stream, origin, Some(body), at))
            .collect();
        self.with_runs(&[&i.journal, &i.streams, &i.chunks], |record_tx, t| {
            let [journal, streams, chunks] = t else {
                unreachable!("the trees asked for")
            };
            if record_tx.runs.get(run.run_id.as_bytes())?.is_some() {
                return abort(StoreError::RunExists {
                    run_id: run.run_id.clone(),
                });
            }
            write_entries(journal, &run.run_id, entries)?;
            super::streams::apply(streams, chunks, &run.run_id, &writes, 0, u64::MAX)?;
            record_tx.put_run(run)
        })?;
        self.sync().await
    }

    async fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        self.read_run(run_id)
    }

    async fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.all_runs()
    }

    async fn runs_before(
        &self,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        self.newest_first(before).take(limit).collect()
    }

    /// Scans the runs newest first, reading each record: sled keeps no
    /// index of attributes.
    async fn runs_with_attributes(
        &self,
        attributes: &keel_core::Attributes,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let has = |run: &RunRecord| {
            attributes
                .iter()
                .all(|(k, v)| run.attributes.get(k) == Some(v))
        };
        self.newest_first(before)
            .filter(|run| run.as_ref().map_or(true, has))
            .take(limit)
            .collect()
    }

    async fn live_runs(&self) -> Result<Vec<RunRecord>> {
        self.inner
            .live
            .iter()
            .keys()
            .map(|id| self.read_run(&String::from_utf8_lossy(&id.map_err(backend)?)))
            .collect()
    }

    async fn live_counts(&self) -> Result<LiveCounts> {
        self.counts()
    }

    async fn end_run(
        &self,
        run: &RunRecord,
        entries: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Vec<RunId>> {
        let i = &self.inner;
        self.check_fence(fence)?;
        let prefix = key_of(&run.run_id, "");
        let tokens = self.suffixes(&i.run_hooks, &prefix)?;
        // A run has a slot from its admission to its end: one without
        // decides nothing against a group.
        let flow_guard = self.slot_of(&run.run_id)?.map(|_| self.flow_lock());
        let flow = self.flow_end(&run.run_id, run.status == keel_core::RunStatus::Failed)?;
        let writes: Vec<super::streams::Write<'_>> = keel_core::stream::journaled_writes(entries)
            .map(|(stream, origin, body, at)| (stream, origin, Some(body), at))
            .collect();
        let extra = [
            &i.hooks,
            &i.journal,
            &i.slots,
            &i.group_slots,
            &i.groups,
            &i.failed_slots,
            &i.streams,
            &i.chunks,
        ];
        self.with_runs(&extra, |record_tx, t| {
            let [
                hooks,
                journal,
                slots,
                index,
                groups,
                failed,
                streams,
                chunks,
            ] = t
            else {
                unreachable!("the trees asked for")
            };
            for token in &tokens {
                let Some(mut hook) = read_hook(hooks, token)? else {
                    continue;
                };
                if hook.run_id != run.run_id {
                    continue;
                }
                if hook.retain_until_ms.is_some_and(|t| t > now_ms) {
                    hook.active = false;
                    hooks.insert(token.as_bytes(), codec::encode(&hook))?;
                } else {
                    hooks.remove(token.as_bytes())?;
                }
            }
            record_tx.put_run(run)?;
            write_entries(journal, &run.run_id, entries)?;
            super::streams::apply(streams, chunks, &run.run_id, &writes, 0, u64::MAX)?;
            flow.apply(slots, index, groups)?;
            flow.park_in(failed)?;
            flow.promote(record_tx, now_ms)?;
            Ok(())
        })?;
        drop(flow_guard);
        // Read after the record is final, so a run that starts watching
        // meanwhile either is woken here or sees the end itself.
        let watchers = self.suffixes(&i.watchers, &prefix)?;
        for watcher in &watchers {
            self.run_tx(|t| t.wake(watcher))?;
            i.watching
                .remove(key_of(watcher, &run.run_id))
                .map_err(backend)?;
        }
        // A retained hook stays listed under the run, for its purge.
        for token in &tokens {
            let retained = match i.hooks.get(token.as_bytes()).map_err(backend)? {
                Some(v) => codec::decode::<HookRecord>(&v, "hook")?.run_id == run.run_id,
                None => false,
            };
            if !retained {
                i.run_hooks
                    .remove(key_of(&run.run_id, token))
                    .map_err(backend)?;
            }
        }
        self.drop_prefix(&i.inbox, &prefix)?;
        self.drop_prefix(&i.watchers, &prefix)?;
        i.cancels.remove(run.run_id.as_bytes()).map_err(backend)?;
        i.pauses.remove(run.run_id.as_bytes()).map_err(backend)?;
        self.sync().await?;
        let mut woken: Vec<RunId> = watchers.into_iter().map(RunId::from).collect();
        woken.extend(flow.promoted);
        Ok(woken)
    }
}

#[async_trait]
impl JournalStore for SledStore {
    async fn append(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        self.room()?;
        // One process opens a sled store, and drives a run from one task at
        // a time: checking the fence before writing is enough here.
        self.check_fence(fence)?;
        // sled recovers a prefix of its writes: entries first, then the
        // record, so a record never describes entries that were lost.
        if keel_core::stream::journaled_writes(entries)
            .next()
            .is_some()
        {
            self.write_entries_and_chunks(run_id, entries)?;
        } else {
            self.write_entries(run_id, entries)?;
        }
        if let Some(run) = run {
            self.write_run(run)?;
        }
        self.sync().await
    }

    async fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.inner
            .journal
            .scan_prefix(key_of(run_id, ""))
            .map(|kv| Ok(journal::decode(&kv.map_err(backend)?.1)?))
            .collect()
    }
}

/// A run's key in the `created` tree: its place in listings.
pub(super) fn created_key(cursor: &keel_core::RunCursor) -> Vec<u8> {
    let mut key = cursor.created_at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(cursor.run_id.as_bytes());
    key
}

impl SledStore {
    /// One try at admitting `a` in one transaction, with the handover read
    /// before it; `None` if the start hook it takes over changed since.
    fn admit_once(
        &self,
        a: &Admission<'_>,
        handover: Option<&super::hooks::HandoverPlan>,
    ) -> Result<Option<Admitted>> {
        let i = &self.inner;
        let flow_guard = a.flow.is_some().then(|| self.flow_lock());
        let plan = self.admission_plan(a)?;
        let run = &plan.run;
        let key_bytes = a.key.map(|k| key_of(&run.workflow, k.key));
        let mut extra = vec![
            &i.keys,
            &i.hooks,
            &i.run_hooks,
            &i.journal,
            &i.slots,
            &i.group_slots,
            &i.groups,
        ];
        if a.handover.is_some() {
            extra.extend([&i.inbox, &i.payload_ids, &i.remembered_ids]);
        }
        let admitted = self.with_runs(&extra, |record_tx, t| {
            let [
                keys,
                hooks,
                run_hooks,
                journal,
                slots,
                index,
                groups,
                moving @ ..,
            ] = t
            else {
                unreachable!("the trees asked for")
            };
            if let Some(h) = handover
                && read_hook(hooks, &h.start.token)?.as_ref() != Some(&h.start)
            {
                return Ok(false);
            }
            if record_tx.runs.get(run.run_id.as_bytes())?.is_some() {
                return abort(StoreError::RunExists {
                    run_id: run.run_id.clone(),
                });
            }
            if let Some(hook) = a.start_hook
                && let Some(held) = read_hook(hooks, &hook.token)?
                && let Some(owner) = held.holder(a.now_ms)
            {
                return abort(StoreError::HookConflict {
                    token: hook.token.clone(),
                    conflicting_run_id: owner.clone(),
                });
            }
            if let (Some(key_bytes), Some(claim)) = (&key_bytes, a.key) {
                if let Some(held) = keys.get(key_bytes)? {
                    let held: KeyHold = codec::decode(&held, "idempotency key")
                        .map_err(|e| ConflictableTransactionError::Abort(e.into()))?;
                    if held.expires_at_ms > a.now_ms {
                        return abort(StoreError::IdempotencyCollision {
                            workflow: run.workflow.clone(),
                            key: claim.key.into(),
                            existing_run_id: held.run_id,
                        });
                    }
                }
                let hold = KeyHold {
                    run_id: run.run_id.clone(),
                    expires_at_ms: a.now_ms.saturating_add(claim.ttl_ms),
                };
                keys.insert(key_bytes.as_slice(), codec::encode(&hold))?;
            }
            if let Some(hook) = &plan.start_hook {
                write_hook(hooks, run_hooks, hook)?;
            }
            if let (Some(handover), [inbox, ids, remembered]) = (handover, moving) {
                let trees = super::hooks::HandoverTrees {
                    hooks,
                    run_hooks,
                    inbox,
                    ids,
                    remembered,
                };
                super::hooks::hand_over(&trees, handover, &run.run_id)?;
            }
            record_tx.put_run(run)?;
            if let Some(lease) = a.lease {
                record_tx
                    .due
                    .change(&run.run_id, |d| d.take(lease.owner, lease.expires_at_ms))?;
            }
            write_entries(journal, &run.run_id, &plan.journal)?;
            plan.flow.apply(slots, index, groups)?;
            Ok(true)
        })?;
        drop(flow_guard);
        Ok(admitted.then_some(plan.admitted))
    }
}
