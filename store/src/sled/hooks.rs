//! Hooks and idempotency keys: registration, resumption and disposal of
//! hooks as sled transactions, payloads in order, expiry.

use async_trait::async_trait;
use keel_core::codec;
use keel_core::{HookRecord, HookRegistration, KeyHold, Registration};
use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use crate::{HookPayload, HookStore, PayloadId, Registered, Result, Resumed, StoreError};

use super::*;

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
        let trees = [&i.hooks, &i.run_hooks, &i.claims];
        let registered = self.with_runs(&trees, |run_tx, t| {
            let [hooks, run_hooks, claims] = t else {
                unreachable!("the trees asked for")
            };
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
                    Registration::Bind(start) => {
                        write_hook(hooks, run_hooks, &start)?;
                        registered(HookRegistration::BoundToStart, None)
                    }
                    Registration::TakeFrom(owner) => {
                        claims.insert(key_of(&owner, &hook.token), hook.run_id.as_bytes())?;
                        run_tx.wake(&owner)?;
                        write_hook(hooks, run_hooks, hook)?;
                        registered(HookRegistration::Registered, Some(owner))
                    }
                },
            )
        })?;
        self.sync().await?;
        Ok(registered)
    }

    async fn deliver(
        &self,
        token: &str,
        payload: &str,
        payload_id: Option<PayloadId<'_>>,
    ) -> Result<Resumed> {
        self.room()?;
        let i = &self.inner;
        let trees = [&i.hooks, &i.inbox, &i.payload_ids, &i.remembered_ids];
        let resumed = self.with_runs(&trees, |run_tx, t| {
            let [hooks, inbox, ids, remembered] = t else {
                unreachable!("the trees asked for")
            };
            let remembered_key = payload_id.map(|p| key_of(token, p.id));
            if let (Some(p), Some(key)) = (payload_id, &remembered_key)
                && let Some(bytes) = remembered.get(key)?
            {
                let first: Remembered = codec::decode(&bytes, "remembered payload ID")
                    .map_err(|e| ConflictableTransactionError::Abort(e.into()))?;
                if first.until_ms >= p.now_ms {
                    return Ok(Resumed {
                        run_id: first.run_id.into(),
                        index: first.index,
                        duplicate: true,
                    });
                }
            }
            let Some(mut hook) = read_hook(hooks, token)?.filter(|h| h.active) else {
                return abort(StoreError::HookNotFound {
                    token: token.into(),
                });
            };
            let id_key = payload_id.map(|p| payload_id_key(&hook.run_id, token, p.id));
            if let Some(key) = &id_key
                && let Some(index) = ids.get(key)?
            {
                return Ok(Resumed {
                    run_id: hook.run_id,
                    index: index_of(&index),
                    duplicate: true,
                });
            }
            let index = hook.next_payload;
            inbox.insert(inbox_key(&hook.run_id, token, index), payload.as_bytes())?;
            if let Some(key) = id_key {
                ids.insert(key, &index.to_be_bytes())?;
            }
            if let (Some(p), Some(key)) = (payload_id, remembered_key) {
                let first = Remembered {
                    run_id: hook.run_id.to_string(),
                    index,
                    until_ms: p.remembered_until_ms,
                };
                remembered.insert(key, codec::encode(&first))?;
            }
            hook.next_payload += 1;
            hooks.insert(token.as_bytes(), codec::encode(&hook))?;
            run_tx.wake(&hook.run_id)?;
            Ok(Resumed {
                run_id: hook.run_id,
                index,
                duplicate: false,
            })
        })?;
        if !resumed.duplicate {
            self.sync().await?;
        }
        Ok(resumed)
    }

    async fn purge_expired_payload_ids(&self, now_ms: u64) -> Result<u64> {
        // Removed only if unchanged: a delivery remembered anew stays.
        let purged = self.purge(&self.inner.remembered_ids, |_, v| {
            Ok(codec::decode::<Remembered>(v, "remembered payload ID")?.until_ms < now_ms)
        })? as u64;
        if purged > 0 {
            self.sync().await?;
        }
        Ok(purged)
    }

    async fn delivered(&self, run_id: &str, token: &str, payload_id: &str) -> Result<Option<u64>> {
        Ok(self
            .inner
            .payload_ids
            .get(payload_id_key(run_id, token, payload_id))
            .map_err(backend)?
            .map(|index| index_of(&index)))
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
        self.purge(&self.inner.hooks, |_, v| {
            Ok(codec::decode::<HookRecord>(v, "hook")?
                .holder(now_ms)
                .is_none())
        })
    }
}

#[async_trait]
impl KeyStore for SledStore {
    async fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>> {
        self.inner
            .keys
            .get(key_of(workflow, key))
            .map_err(backend)?
            .map(|b| codec::decode(&b, "idempotency key").map_err(StoreError::from))
            .transpose()
    }

    async fn purge_expired_keys(&self, now_ms: u64) -> Result<usize> {
        self.purge(&self.inner.keys, |_, v| {
            Ok(codec::decode::<KeyHold>(v, "idempotency key")?.expires_at_ms <= now_ms)
        })
    }
}

/// How many times an admission reads a continuation's handover again
/// when payloads arrive while it is admitted.
pub(super) const HANDOVER_TRIES: usize = 16;

/// The trees a continuation's handover writes, as one transaction's views.
pub(super) struct HandoverTrees<'t> {
    pub(super) hooks: &'t sled::transaction::TransactionalTree,
    pub(super) run_hooks: &'t sled::transaction::TransactionalTree,
    pub(super) inbox: &'t sled::transaction::TransactionalTree,
    pub(super) ids: &'t sled::transaction::TransactionalTree,
    pub(super) remembered: &'t sled::transaction::TransactionalTree,
}

/// A continuation's handover as read before its transaction
/// ([`crate::Handover`]): the start hook it moves, as it was then, how
/// many payloads its run took, and the payload IDs of those it did not.
pub(super) struct HandoverPlan {
    pub(super) start: HookRecord,
    taken: u64,
    /// `(payload ID, index)` of the payloads that move.
    ids: Vec<(String, u64)>,
}

impl SledStore {
    /// Reads what a continuation of `handover.from` moves: its start hook,
    /// if it still holds one, and the payload IDs of its untaken payloads.
    pub(super) fn handover_plan(
        &self,
        handover: crate::Handover<'_>,
    ) -> Result<Option<HandoverPlan>> {
        let i = &self.inner;
        let from = handover.from.as_str();
        let mut start = None;
        for kv in i.run_hooks.scan_prefix(key_of(from, "")) {
            let (key, _) = kv.map_err(backend)?;
            let token = &key[from.len() + 1..];
            let Some(bytes) = i.hooks.get(token).map_err(backend)? else {
                continue;
            };
            let hook: HookRecord = codec::decode(&bytes, "hook")?;
            if hook.run_id == from && hook.is_start_hook() {
                start = Some(hook);
                break;
            }
        }
        let Some(start) = start else {
            return Ok(None);
        };
        let taken = handover.taken.min(start.next_payload);
        let mut prefix = key_of(from, &start.token);
        prefix.push(0);
        let mut ids = Vec::new();
        for kv in i.payload_ids.scan_prefix(&prefix) {
            let (key, index) = kv.map_err(backend)?;
            let index = index_of(&index);
            if index >= taken {
                let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                ids.push((id, index));
            }
        }
        Ok(Some(HandoverPlan { start, taken, ids }))
    }
}

/// Moves the start hook `plan` read, unchanged since (the caller checked),
/// to run `to` with the payloads its run did not take, renumbered from 0,
/// and their payload IDs.
pub(super) fn hand_over(
    t: &HandoverTrees<'_>,
    plan: &HandoverPlan,
    to: &str,
) -> super::TxResult<()> {
    let hook = &plan.start;
    let (from, token, taken) = (hook.run_id.as_str(), hook.token.as_str(), plan.taken);
    for index in taken..hook.next_payload {
        if let Some(payload) = t.inbox.remove(inbox_key(from, token, index))? {
            t.inbox
                .insert(inbox_key(to, token, index - taken), payload)?;
        }
    }
    for (payload_id, index) in &plan.ids {
        let moved = index - taken;
        t.ids.remove(payload_id_key(from, token, payload_id))?;
        t.ids
            .insert(payload_id_key(to, token, payload_id), &moved.to_be_bytes())?;
        let remembered_key = key_of(token, payload_id);
        if let Some(bytes) = t.remembered.get(&remembered_key)? {
            let mut first: Remembered = codec::decode(&bytes, "remembered payload ID")
                .map_err(|e| ConflictableTransactionError::Abort(e.into()))?;
            if first.run_id == from && first.index == *index {
                first.run_id = to.into();
                first.index = moved;
                t.remembered.insert(remembered_key, codec::encode(&first))?;
            }
        }
    }
    t.run_hooks.remove(key_of(from, token))?;
    let moved = HookRecord {
        run_id: to.into(),
        next_payload: hook.next_payload - taken,
        ..hook.clone()
    };
    write_hook(t.hooks, t.run_hooks, &moved)?;
    Ok(())
}

/// A payload ID as `remembered_ids` keeps it: where the payload went, and
/// until when a payload of the same ID for the token is a duplicate.
#[derive(serde::Serialize, serde::Deserialize)]
struct Remembered {
    run_id: String,
    index: u64,
    until_ms: u64,
}

impl codec::Stored for Remembered {}

/// The key of a payload ID: `run \0 token \0 payload ID`.
fn payload_id_key(run_id: &str, token: &str, payload_id: &str) -> Vec<u8> {
    let mut key = key_of(run_id, token);
    key.push(0);
    key.extend_from_slice(payload_id.as_bytes());
    key
}

/// A payload index as `payload_ids` stores it (big-endian).
fn index_of(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]))
}
