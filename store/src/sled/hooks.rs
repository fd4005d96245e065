//! The sled transactions of runs and hooks: admission, import, ends, and
//! the registration, resumption and disposal of hooks. Each is one sled
//! transaction over the trees it touches, then one group commit.

use async_trait::async_trait;
use keel_core::codec;
use keel_core::journal;
use keel_core::{
    Entry, HookRecord, HookRegistration, KeyHold, Registration, RunCursor, RunId, RunRecord,
};
use sled::Transactional;
use sled::transaction::{
    ConflictableTransactionError, TransactionalTree, UnabortableTransactionError,
};

use super::{SledStore, backend, created_key, journal_key, key_of};
use crate::{
    Admission, HookPayload, HookStore, Lease, LeaseStore, Registered, Result, RunStore, StoreError,
};

type TxResult<T> = std::result::Result<T, ConflictableTransactionError<StoreError>>;

fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

fn read_hook(hooks: &TransactionalTree, token: &str) -> TxResult<Option<HookRecord>> {
    match hooks.get(token.as_bytes())? {
        Some(bytes) => codec::decode(&bytes, "hook")
            .map(Some)
            .map_err(|e| ConflictableTransactionError::Abort(e.into())),
        None => Ok(None),
    }
}

fn write_hook(
    hooks: &TransactionalTree,
    run_hooks: &TransactionalTree,
    hook: &HookRecord,
) -> std::result::Result<(), UnabortableTransactionError> {
    hooks.insert(hook.token.as_bytes(), codec::encode(hook))?;
    run_hooks.insert(key_of(&hook.run_id, &hook.token), &[])?;
    Ok(())
}

/// Writes entries at positions the journal does not hold yet.
fn write_entries(tree: &TransactionalTree, run_id: &str, entries: &[Entry]) -> TxResult<()> {
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

fn inbox_key(run_id: &str, token: &str, index: u64) -> Vec<u8> {
    let mut key = key_of(run_id, token);
    key.push(0);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

impl SledStore {
    fn suffixes(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<String>> {
        tree.scan_prefix(prefix)
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k.map_err(backend)?[prefix.len()..]).into_owned()))
            .collect()
    }

    fn drop_prefix(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<()> {
        for k in tree.scan_prefix(prefix).keys() {
            tree.remove(k.map_err(backend)?).map_err(backend)?;
        }
        Ok(())
    }
}

#[async_trait]
impl RunStore for SledStore {
    async fn admit(&self, a: Admission<'_>) -> Result<()> {
        self.room()?;
        let i = &self.inner;
        let run = a.run;
        let key_bytes = a.key.map(|k| key_of(&run.workflow, k.key));
        let record = codec::encode(run);
        let created_key = created_key(&RunCursor::of(run));
        let trees = (
            &i.runs,
            &i.keys,
            &i.hooks,
            &i.run_hooks,
            &i.live,
            &i.journal,
            &i.created,
        );
        trees.transaction(|(runs, keys, hooks, run_hooks, live, journal, created)| {
            if runs.get(run.run_id.as_bytes())?.is_some() {
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
            if let Some(hook) = a.start_hook {
                write_hook(hooks, run_hooks, hook)?;
            }
            live.insert(run.run_id.as_bytes(), &[])?;
            runs.insert(run.run_id.as_bytes(), record.as_slice())?;
            created.insert(created_key.as_slice(), &[])?;
            write_entries(journal, &run.run_id, a.journal)?;
            Ok(())
        })?;
        self.sync().await
    }

    async fn import(&self, run: &RunRecord, entries: &[Entry]) -> Result<()> {
        self.room()?;
        let i = &self.inner;
        let record = codec::encode(run);
        let created_key = created_key(&RunCursor::of(run));
        let trees = (&i.runs, &i.live, &i.journal, &i.created);
        trees.transaction(|(runs, live, journal, created)| {
            if runs.get(run.run_id.as_bytes())?.is_some() {
                return abort(StoreError::RunExists {
                    run_id: run.run_id.clone(),
                });
            }
            write_entries(journal, &run.run_id, entries)?;
            if !run.status.is_final() {
                live.insert(run.run_id.as_bytes(), &[])?;
            }
            runs.insert(run.run_id.as_bytes(), record.as_slice())?;
            created.insert(created_key.as_slice(), &[])?;
            Ok(())
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
        let created = &self.inner.created;
        let range = match before {
            Some(cursor) => created.range(..created_key(cursor)),
            None => created.iter(),
        };
        range
            .rev()
            .take(limit)
            .map(|kv| {
                let (key, _) = kv.map_err(backend)?;
                self.read_run(&String::from_utf8_lossy(&key[8.min(key.len())..]))
            })
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
        let record = codec::encode(run);
        (&i.runs, &i.hooks, &i.live, &i.journal).transaction(|(runs, hooks, live, journal)| {
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
            live.remove(run.run_id.as_bytes())?;
            runs.insert(run.run_id.as_bytes(), record.as_slice())?;
            write_entries(journal, &run.run_id, entries)?;
            Ok(())
        })?;
        // Read after the record is final, so a run that starts watching
        // meanwhile either is woken here or sees the end itself.
        let watchers = self.suffixes(&i.watchers, &prefix)?;
        for watcher in &watchers {
            i.wakeups.insert(watcher.as_bytes(), &[]).map_err(backend)?;
        }
        self.drop_prefix(&i.run_hooks, &prefix)?;
        self.drop_prefix(&i.inbox, &prefix)?;
        self.drop_prefix(&i.watchers, &prefix)?;
        if let Some(fence) = fence {
            self.release_lease(fence).await?;
        }
        self.sync().await?;
        Ok(watchers.into_iter().map(RunId::from).collect())
    }
}

#[async_trait]
impl HookStore for SledStore {
    async fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<Registered> {
        self.room()?;
        let i = &self.inner;
        let trees = (&i.hooks, &i.run_hooks, &i.claims, &i.wakeups);
        let registered = trees.transaction(|(hooks, run_hooks, claims, wakeups)| {
            let held = read_hook(hooks, &hook.token)?;
            let registered = |registration, claimed_from| Registered {
                registration,
                claimed_from,
            };
            Ok(
                match Registration::decide(held.as_ref(), hook, force, now_ms) {
                    Registration::Answer(registration) => registered(registration, None),
                    Registration::Take => {
                        write_hook(hooks, run_hooks, hook)?;
                        registered(HookRegistration::Registered, None)
                    }
                    Registration::TakeFrom(owner) => {
                        claims.insert(key_of(&owner, &hook.token), hook.run_id.as_bytes())?;
                        wakeups.insert(owner.as_bytes(), &[])?;
                        write_hook(hooks, run_hooks, hook)?;
                        registered(HookRegistration::Registered, Some(owner))
                    }
                },
            )
        })?;
        self.sync().await?;
        Ok(registered)
    }

    async fn resume_hook(&self, token: &str, payload: &str) -> Result<RunId> {
        self.room()?;
        let i = &self.inner;
        let owner = (&i.hooks, &i.inbox, &i.wakeups).transaction(|(hooks, inbox, wakeups)| {
            let Some(mut hook) = read_hook(hooks, token)?.filter(|h| h.active) else {
                return abort(StoreError::HookNotFound {
                    token: token.into(),
                });
            };
            inbox.insert(
                inbox_key(&hook.run_id, token, hook.next_payload),
                payload.as_bytes(),
            )?;
            hook.next_payload += 1;
            hooks.insert(token.as_bytes(), codec::encode(&hook))?;
            wakeups.insert(hook.run_id.as_bytes(), &[])?;
            Ok(hook.run_id)
        })?;
        self.sync().await?;
        Ok(owner)
    }

    async fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord> {
        self.inner
            .hooks
            .get(token.as_bytes())
            .map_err(backend)?
            .map(|b| codec::decode::<HookRecord>(&b, "hook"))
            .transpose()?
            .filter(|h| h.holder(now_ms).is_some())
            .ok_or_else(|| StoreError::HookNotFound {
                token: token.into(),
            })
    }

    async fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>> {
        let mut held = Vec::new();
        for kv in self.inner.hooks.iter() {
            let hook: HookRecord = codec::decode(&kv.map_err(backend)?.1, "hook")?;
            if hook.holder(now_ms).is_some() {
                held.push(hook);
            }
        }
        Ok(held)
    }

    async fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<HookPayload> {
        let i = &self.inner;
        if let Some(by) = i.claims.get(key_of(run_id, token)).map_err(backend)? {
            return Ok(HookPayload::ForceClaimed(
                String::from_utf8_lossy(&by).into_owned().into(),
            ));
        }
        Ok(
            match i
                .inbox
                .get(inbox_key(run_id, token, index))
                .map_err(backend)?
            {
                Some(bytes) => HookPayload::Ready(String::from_utf8_lossy(&bytes).into()),
                None => HookPayload::Pending,
            },
        )
    }

    async fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()> {
        let i = &self.inner;
        (&i.hooks, &i.run_hooks).transaction(|(hooks, run_hooks)| {
            if read_hook(hooks, token)?.is_some_and(|h| h.run_id == run_id) {
                hooks.remove(token.as_bytes())?;
            }
            run_hooks.remove(key_of(run_id, token))?;
            Ok(())
        })?;
        let mut payloads = key_of(run_id, token);
        payloads.push(0);
        self.drop_prefix(&i.inbox, &payloads)?;
        self.sync().await
    }

    async fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize> {
        self.purge(&self.inner.hooks, "hook", |h: &HookRecord| {
            h.holder(now_ms).is_none()
        })
    }
}
