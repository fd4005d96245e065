//! Hooks: token-addressed inboxes owned by runs, and the admission of runs.
//!
//! A token is held by at most one run at a time: by the hook that
//! registered it while that hook is active (until it is disposed or its run
//! ends), and after its run ends until its retention passes. Admitting a run
//! with a start token, registering a hook, resuming one and ending a run are
//! each one store transaction, so concurrent callers always agree on who
//! holds a token. Payloads wait in the owner's inbox, in order, until the
//! workflow reads them.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

use crate::journal::HookRegistration;
use crate::store::{KeyHold, RunRecord, Store, decode_versioned, encode_versioned, key_of};
use crate::{Error, Result};

/// The hook that holds a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    pub token: String,
    /// The run that owns the hook.
    pub run_id: String,
    /// The workflow command that created it; `None` for a start hook.
    pub command: Option<u32>,
    /// JSON metadata given at creation.
    pub metadata: Option<String>,
    pub created_at_ms: u64,
    /// The token stays unavailable until then, even after the run ends.
    pub retain_until_ms: Option<u64>,
    /// The run has not ended: the hook accepts payloads.
    pub active: bool,
    /// Index of the next payload resumed into it.
    pub next_payload: u64,
}

impl HookRecord {
    /// The run holding the token at `now_ms`, if any.
    pub fn holder(&self, now_ms: u64) -> Option<&str> {
        let retained = self.retain_until_ms.is_some_and(|t| t > now_ms);
        (self.active || retained).then_some(self.run_id.as_str())
    }

    /// A start hook: created by `start()` rather than by the workflow.
    pub fn is_start_hook(&self) -> bool {
        self.command.is_none()
    }
}

/// What the store holds for a hook's next payload.
pub(crate) enum Payload {
    Ready(String),
    /// Another run took the token over.
    ForceClaimed(String),
    Pending,
}

type TxResult<T> = std::result::Result<T, ConflictableTransactionError<Error>>;

fn abort<T>(e: Error) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

fn read_hook(hooks: &TransactionalTree, token: &str) -> TxResult<Option<HookRecord>> {
    match hooks.get(token.as_bytes())? {
        Some(bytes) => decode_versioned(&bytes, "hook")
            .map(Some)
            .map_err(ConflictableTransactionError::Abort),
        None => Ok(None),
    }
}

fn write_hook(
    hooks: &TransactionalTree,
    run_hooks: &TransactionalTree,
    hook: &HookRecord,
) -> std::result::Result<(), UnabortableTransactionError> {
    hooks.insert(hook.token.as_bytes(), encode_versioned(hook))?;
    run_hooks.insert(key_of(&hook.run_id, &hook.token), &[])?;
    Ok(())
}

fn finish<T>(result: std::result::Result<T, TransactionError<Error>>) -> Result<T> {
    match result {
        Ok(v) => Ok(v),
        Err(TransactionError::Abort(e)) => Err(e),
        Err(TransactionError::Storage(e)) => Err(Error::Storage(e)),
    }
}

fn inbox_key(run_id: &str, token: &str, index: u64) -> Vec<u8> {
    let mut key = key_of(run_id, token);
    key.push(0);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

impl Store {
    /// Admits a run in one transaction: stores its record, claims its
    /// idempotency key (`(key, ttl_ms)`) and registers its start hook. A key
    /// held within its window refuses the run with `IdempotencyCollision`; a
    /// token held by another run refuses it with `HookConflict`. A refused
    /// run writes nothing. Durable after [`Store::sync`].
    pub fn admit(
        &self,
        run: &RunRecord,
        key: Option<(&str, u64)>,
        start_hook: Option<&HookRecord>,
        now_ms: u64,
    ) -> Result<()> {
        use sled::Transactional;
        let i = &self.inner;
        let key_bytes = key.map(|(k, _)| key_of(&run.workflow, k));
        let record = encode_versioned(run);
        let trees = (&i.runs, &i.keys, &i.hooks, &i.run_hooks, &i.live);
        finish(trees.transaction(|(runs, keys, hooks, run_hooks, live)| {
            if let Some(hook) = start_hook
                && let Some(held) = read_hook(hooks, &hook.token)?
                && let Some(owner) = held.holder(now_ms)
            {
                return abort(Error::HookConflict {
                    token: hook.token.clone(),
                    conflicting_run_id: owner.into(),
                });
            }
            if let (Some(key_bytes), Some((key, ttl_ms))) = (&key_bytes, key) {
                if let Some(held) = keys.get(key_bytes)? {
                    let held: KeyHold = decode_versioned(&held, "idempotency key")
                        .map_err(ConflictableTransactionError::Abort)?;
                    if held.expires_at_ms > now_ms {
                        return abort(Error::IdempotencyCollision {
                            workflow: run.workflow.clone(),
                            key: key.into(),
                            existing_run_id: held.run_id,
                        });
                    }
                }
                let hold = KeyHold {
                    run_id: run.run_id.clone(),
                    expires_at_ms: now_ms.saturating_add(ttl_ms),
                };
                keys.insert(key_bytes.as_slice(), encode_versioned(&hold))?;
            }
            if let Some(hook) = start_hook {
                write_hook(hooks, run_hooks, hook)?;
            }
            live.insert(run.run_id.as_bytes(), &[])?;
            runs.insert(run.run_id.as_bytes(), record.as_slice())?;
            Ok(())
        }))
    }

    /// Registers the hook a workflow creates (`hook.command` is set). The
    /// run's own start hook binds; a token another run holds is a conflict,
    /// unless `force` takes it over, which the old owner learns on its next
    /// await. Registering again from the same command (a recovered run)
    /// finds its own hook. Returns the registration and, after a force
    /// claim, the run the token was taken from.
    pub(crate) fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<(HookRegistration, Option<String>)> {
        use sled::Transactional;
        let i = &self.inner;
        let trees = (&i.hooks, &i.run_hooks, &i.claims, &i.wakeups);
        finish(trees.transaction(|(hooks, run_hooks, claims, wakeups)| {
            let held = read_hook(hooks, &hook.token)?;
            let holder = held
                .as_ref()
                .and_then(|h| h.holder(now_ms).map(|o| (h, o.to_string())));
            match holder {
                Some((h, owner)) if owner == hook.run_id => {
                    let registration = if h.is_start_hook() {
                        HookRegistration::BoundToStart
                    } else if h.command == hook.command {
                        HookRegistration::Registered
                    } else {
                        HookRegistration::Conflict {
                            owner_run_id: owner,
                        }
                    };
                    Ok((registration, None))
                }
                Some((_, owner)) if !force => {
                    let conflict = HookRegistration::Conflict {
                        owner_run_id: owner,
                    };
                    Ok((conflict, None))
                }
                Some((_, owner)) => {
                    claims.insert(key_of(&owner, &hook.token), hook.run_id.as_bytes())?;
                    wakeups.insert(owner.as_bytes(), &[])?;
                    write_hook(hooks, run_hooks, hook)?;
                    Ok((HookRegistration::Registered, Some(owner)))
                }
                None => {
                    write_hook(hooks, run_hooks, hook)?;
                    Ok((HookRegistration::Registered, None))
                }
            }
        }))
    }

    /// Delivers a payload to the active hook holding `token` and wakes its
    /// run; returns the owner's run ID, or `HookNotFound`.
    pub fn resume_hook(&self, token: &str, payload: &str) -> Result<String> {
        use sled::Transactional;
        let i = &self.inner;
        let trees = (&i.hooks, &i.inbox, &i.wakeups);
        finish(trees.transaction(|(hooks, inbox, wakeups)| {
            let Some(mut hook) = read_hook(hooks, token)?.filter(|h| h.active) else {
                return abort(Error::HookNotFound {
                    token: token.into(),
                });
            };
            inbox.insert(
                inbox_key(&hook.run_id, token, hook.next_payload),
                payload.as_bytes(),
            )?;
            hook.next_payload += 1;
            hooks.insert(token.as_bytes(), encode_versioned(&hook))?;
            wakeups.insert(hook.run_id.as_bytes(), &[])?;
            Ok(hook.run_id)
        }))
    }

    /// The hook holding `token` (active, or retained after its run ended).
    pub fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord> {
        self.inner
            .hooks
            .get(token.as_bytes())?
            .map(|b| decode_versioned::<HookRecord>(&b, "hook"))
            .transpose()?
            .filter(|h| h.holder(now_ms).is_some())
            .ok_or_else(|| Error::HookNotFound {
                token: token.into(),
            })
    }

    /// Every hook holding its token at `now_ms`, by token.
    pub fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>> {
        let mut held = Vec::new();
        for kv in self.inner.hooks.iter() {
            let hook: HookRecord = decode_versioned(&kv?.1, "hook")?;
            if hook.holder(now_ms).is_some() {
                held.push(hook);
            }
        }
        Ok(held)
    }

    /// The `index`-th payload of `run_id`'s hook on `token`.
    pub(crate) fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<Payload> {
        let i = &self.inner;
        if let Some(by) = i.claims.get(key_of(run_id, token))? {
            return Ok(Payload::ForceClaimed(String::from_utf8_lossy(&by).into()));
        }
        Ok(match i.inbox.get(inbox_key(run_id, token, index))? {
            Some(bytes) => Payload::Ready(String::from_utf8_lossy(&bytes).into()),
            None => Payload::Pending,
        })
    }

    /// Releases `run_id`'s hook on `token` at once, retention or not, and
    /// drops its unread payloads.
    pub(crate) fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()> {
        use sled::Transactional;
        let i = &self.inner;
        finish((&i.hooks, &i.run_hooks).transaction(|(hooks, run_hooks)| {
            if read_hook(hooks, token)?.is_some_and(|h| h.run_id == run_id) {
                hooks.remove(token.as_bytes())?;
            }
            run_hooks.remove(key_of(run_id, token))?;
            Ok(())
        }))?;
        let mut payloads = key_of(run_id, token);
        payloads.push(0);
        self.drop_prefix(&i.inbox, &payloads)
    }

    /// Stores a run's final record and, in the same transaction, ends its
    /// hooks: a hook with retention left keeps the token, inactive; the
    /// others release it. Then wakes the runs awaiting this one and returns
    /// them: read after the record is final, so a run that starts watching
    /// meanwhile either is woken or sees the end itself.
    pub(crate) fn end_run(&self, run: &RunRecord, now_ms: u64) -> Result<Vec<String>> {
        use sled::Transactional;
        let i = &self.inner;
        let prefix = key_of(&run.run_id, "");
        let tokens: Vec<String> = self.suffixes(&i.run_hooks, &prefix)?;
        let record = encode_versioned(run);
        let trees = (&i.runs, &i.hooks, &i.live);
        finish(trees.transaction(|(runs, hooks, live)| {
            for token in &tokens {
                let Some(mut hook) = read_hook(hooks, token)? else {
                    continue;
                };
                if hook.run_id != run.run_id {
                    continue;
                }
                if hook.retain_until_ms.is_some_and(|t| t > now_ms) {
                    hook.active = false;
                    hooks.insert(token.as_bytes(), encode_versioned(&hook))?;
                } else {
                    hooks.remove(token.as_bytes())?;
                }
            }
            live.remove(run.run_id.as_bytes())?;
            runs.insert(run.run_id.as_bytes(), record.as_slice())?;
            Ok(())
        }))?;
        let watchers: Vec<String> = self.suffixes(&i.watchers, &prefix)?;
        for watcher in &watchers {
            i.wakeups.insert(watcher.as_bytes(), &[])?;
        }
        self.drop_prefix(&i.run_hooks, &prefix)?;
        self.drop_prefix(&i.inbox, &prefix)?;
        self.drop_prefix(&i.watchers, &prefix)?;
        Ok(watchers)
    }

    /// Deletes hooks whose run ended and whose retention has passed;
    /// returns how many.
    pub fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize> {
        self.purge(&self.inner.hooks, "hook", |h: &HookRecord| {
            h.holder(now_ms).is_none()
        })
    }

    /// Records that `watcher` waits for `run_id` to end.
    pub(crate) fn watch(&self, run_id: &str, watcher: &str) -> Result<()> {
        self.inner.watchers.insert(key_of(run_id, watcher), &[])?;
        Ok(())
    }

    /// Whether something woke the run since it was last driven.
    pub(crate) fn is_woken(&self, run_id: &str) -> Result<bool> {
        Ok(self.inner.wakeups.contains_key(run_id.as_bytes())?)
    }

    /// Clears a run's wakeup before it is driven.
    pub(crate) fn take_wakeup(&self, run_id: &str) -> Result<bool> {
        Ok(self.inner.wakeups.remove(run_id.as_bytes())?.is_some())
    }

    /// Every run with a pending wakeup.
    pub(crate) fn wakeups(&self) -> Result<HashSet<String>> {
        self.inner
            .wakeups
            .iter()
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k?).into_owned()))
            .collect()
    }

    fn suffixes(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<Vec<String>> {
        tree.scan_prefix(prefix)
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k?[prefix.len()..]).into_owned()))
            .collect()
    }

    fn drop_prefix(&self, tree: &sled::Tree, prefix: &[u8]) -> Result<()> {
        for k in tree.scan_prefix(prefix).keys() {
            tree.remove(k?)?;
        }
        Ok(())
    }
}
