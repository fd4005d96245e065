//! Hooks and idempotency keys: registration under row locks, payloads in
//! the order of the hook's lock, disposal, expiry.

use super::*;
use crate::{PayloadId, Resumed};

pub(super) fn hook_of(row: &tokio_postgres::Row) -> HookRecord {
    HookRecord {
        token: row.get::<_, String>("token").into(),
        run_id: row.get::<_, String>("run_id").into(),
        command: row.get::<_, Option<i64>>("command").map(|c| c as u32),
        metadata: row.get("metadata"),
        created_at_ms: u(row.get("created_at_ms")),
        retain_until_ms: row.get::<_, Option<i64>>("retain_until_ms").map(u),
        active: row.get("active"),
        next_payload: u(row.get("next_payload")),
        payload_schema: row.get("payload_schema"),
    }
}

pub(super) const HOOK_COLUMNS: &str = "token, run_id, command, metadata, created_at_ms, retain_until_ms, active, next_payload, payload_schema";

/// Writes `hook` as a new row (`existing` false) or over the row it
/// replaces, whose lock the caller holds.
pub(super) async fn write_hook(
    tx: &Transaction<'_>,
    hook: &HookRecord,
    existing: bool,
) -> Result<Attempt<()>> {
    let sql = if existing {
        "UPDATE hooks SET run_id = $2, command = $3, metadata = $4, created_at_ms = $5,
             retain_until_ms = $6, active = $7, next_payload = $8, payload_schema = $9
             WHERE token = $1"
    } else {
        "INSERT INTO hooks (token, run_id, command, metadata, created_at_ms, retain_until_ms,
             active, next_payload, payload_schema) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    };
    let written = tx
        .run(
            sql,
            &[
                &hook.token.as_str(),
                &hook.run_id.as_str(),
                &hook.command.map(i64::from),
                &hook.metadata,
                &i(hook.created_at_ms),
                &hook.retain_until_ms.map(i),
                &hook.active,
                &i(hook.next_payload),
                &hook.payload_schema,
            ],
        )
        .await;
    match written {
        Ok(_) => Ok(Attempt::Done(())),
        Err(e) => race(e),
    }
}

/// The hook row of `token`, locked for this transaction.
pub(super) async fn lock_hook(tx: &Transaction<'_>, token: &str) -> Result<Option<HookRecord>> {
    let row = tx
        .row(
            &format!("SELECT {HOOK_COLUMNS} FROM hooks WHERE token = $1 FOR UPDATE"),
            &[&token],
        )
        .await
        .map_err(pg)?;
    Ok(row.as_ref().map(hook_of))
}

/// Moves `handover.from`'s start hook, if it still holds it, to run `to`
/// with the payloads it did not take, renumbered from 0, and their payload
/// IDs ([`crate::Handover`]), in the caller's transaction.
pub(super) async fn hand_over(
    tx: &Transaction<'_>,
    handover: crate::Handover<'_>,
    to: &str,
) -> Result<()> {
    let from = handover.from.as_str();
    let Some(row) = tx
        .row(
            "SELECT token, next_payload FROM hooks
             WHERE run_id = $1 AND command IS NULL FOR UPDATE",
            &[&from],
        )
        .await
        .map_err(pg)?
    else {
        return Ok(());
    };
    let token: String = row.get(0);
    let taken = i(handover.taken.min(u(row.get(1))));
    tx.run(
        "UPDATE remembered_payloads r SET run_id = $3, idx = r.idx - $4
         FROM inbox p
         WHERE p.run_id = $1 AND p.token = $2 AND p.idx >= $4 AND p.payload_id IS NOT NULL
           AND r.token = $2 AND r.payload_id = p.payload_id AND r.run_id = $1 AND r.idx = p.idx",
        &[&from, &token, &to, &taken],
    )
    .await
    .map_err(pg)?;
    tx.run(
        "UPDATE inbox SET run_id = $3, idx = idx - $4
         WHERE run_id = $1 AND token = $2 AND idx >= $4",
        &[&from, &token, &to, &taken],
    )
    .await
    .map_err(pg)?;
    tx.run(
        "UPDATE hooks SET run_id = $2, next_payload = next_payload - $3 WHERE token = $1",
        &[&token, &to, &taken],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

#[async_trait]
impl HookStore for PgStore {
    async fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<Registered> {
        transact!(self, |tx| {
            let held = lock_hook(tx, &hook.token).await?;
            let registered = |registration, claimed_from| {
                Ok(Attempt::Done(Registered {
                    registration,
                    claimed_from,
                }))
            };
            match Registration::decide(held.as_ref(), hook, force, now_ms) {
                Registration::Answer(registration) => registered(registration, None),
                Registration::Take => {
                    if let Attempt::Retry = write_hook(tx, hook, held.is_some()).await? {
                        return Ok(Attempt::Retry);
                    }
                    registered(HookRegistration::Registered, None)
                }
                Registration::Bind(start) => {
                    if let Attempt::Retry = write_hook(tx, &start, true).await? {
                        return Ok(Attempt::Retry);
                    }
                    registered(HookRegistration::BoundToStart, None)
                }
                Registration::TakeFrom(owner) => {
                    tx.run(
                        "INSERT INTO claims (run_id, token, claimed_by) VALUES ($1, $2, $3)
                         ON CONFLICT (run_id, token) DO UPDATE SET claimed_by = excluded.claimed_by",
                        &[&owner.as_str(), &hook.token.as_str(), &hook.run_id.as_str()],
                    )
                    .await
                    .map_err(pg)?;
                    super::runs::wake(tx, &owner).await?;
                    self.notify(tx, &Wake::Run(owner.clone())).await?;
                    if let Attempt::Retry = write_hook(tx, hook, true).await? {
                        return Ok(Attempt::Retry);
                    }
                    registered(HookRegistration::Registered, Some(owner))
                }
            }
        })
    }

    async fn deliver(
        &self,
        token: &str,
        payload: &str,
        payload_id: Option<PayloadId<'_>>,
    ) -> Result<Resumed> {
        transact!(self, |tx| {
            if let Some(p) = payload_id {
                let first = tx
                    .row(
                        "SELECT run_id, idx FROM remembered_payloads
                         WHERE token = $1 AND payload_id = $2 AND until_ms >= $3",
                        &[&token, &p.id, &i(p.now_ms)],
                    )
                    .await
                    .map_err(pg)?;
                if let Some(row) = first {
                    return Ok(Attempt::Done(Resumed {
                        run_id: row.get::<_, String>(0).into(),
                        index: u(row.get(1)),
                        duplicate: true,
                    }));
                }
            }
            let Some(hook) = lock_hook(tx, token).await?.filter(|h| h.active) else {
                return Err(StoreError::HookNotFound {
                    token: token.into(),
                });
            };
            if let Some(id) = payload_id.map(|p| p.id) {
                let first = tx
                    .row(
                        "SELECT idx FROM inbox WHERE run_id = $1 AND token = $2 AND payload_id = $3",
                        &[&hook.run_id.as_str(), &token, &id],
                    )
                    .await
                    .map_err(pg)?;
                if let Some(row) = first {
                    return Ok(Attempt::Done(Resumed {
                        run_id: hook.run_id,
                        index: u(row.get(0)),
                        duplicate: true,
                    }));
                }
            }
            let index = hook.next_payload;
            tx.run(
                "UPDATE hooks SET next_payload = next_payload + 1 WHERE token = $1",
                &[&token],
            )
            .await
            .map_err(pg)?;
            tx.run(
                "INSERT INTO inbox (run_id, token, idx, payload, payload_id)
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &hook.run_id.as_str(),
                    &token,
                    &i(index),
                    &payload,
                    &payload_id.map(|p| p.id),
                ],
            )
            .await
            .map_err(pg)?;
            if let Some(p) = payload_id {
                tx.run(
                    "INSERT INTO remembered_payloads (token, payload_id, run_id, idx, until_ms)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (token, payload_id) DO UPDATE SET run_id = excluded.run_id,
                         idx = excluded.idx, until_ms = excluded.until_ms",
                    &[
                        &token,
                        &p.id,
                        &hook.run_id.as_str(),
                        &i(index),
                        &i(p.remembered_until_ms),
                    ],
                )
                .await
                .map_err(pg)?;
            }
            super::runs::wake(tx, &hook.run_id).await?;
            self.notify(tx, &Wake::Run(hook.run_id.clone())).await?;
            Ok(Attempt::Done(Resumed {
                run_id: hook.run_id,
                index,
                duplicate: false,
            }))
        })
    }

    async fn purge_expired_payload_ids(&self, now_ms: u64) -> Result<u64> {
        self.exec(
            "DELETE FROM remembered_payloads WHERE (token, payload_id) IN (
                 SELECT token, payload_id FROM remembered_payloads WHERE until_ms < $1
                 LIMIT 1000)",
            &[&i(now_ms)],
        )
        .await
    }

    async fn delivered(&self, run_id: &str, token: &str, payload_id: &str) -> Result<Option<u64>> {
        Ok(self
            .select_one(
                "SELECT idx FROM inbox WHERE run_id = $1 AND token = $2 AND payload_id = $3",
                &[&run_id, &token, &payload_id],
            )
            .await?
            .map(|row| u(row.get(0))))
    }

    async fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord> {
        let row = self
            .select_one(
                &format!("SELECT {HOOK_COLUMNS} FROM hooks WHERE token = $1"),
                &[&token],
            )
            .await?;
        row.map(|r| hook_of(&r))
            .filter(|h| h.holder(now_ms).is_some())
            .ok_or_else(|| StoreError::HookNotFound {
                token: token.into(),
            })
    }

    async fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>> {
        Ok(self
            .select(
                &format!("SELECT {HOOK_COLUMNS} FROM hooks ORDER BY token"),
                &[],
            )
            .await?
            .iter()
            .map(hook_of)
            .filter(|h| h.holder(now_ms).is_some())
            .collect())
    }

    async fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<HookPayload> {
        let claimed = self
            .select_one(
                "SELECT claimed_by FROM claims WHERE run_id = $1 AND token = $2",
                &[&run_id, &token],
            )
            .await?;
        if let Some(row) = claimed {
            return Ok(HookPayload::ForceClaimed(row.get::<_, String>(0).into()));
        }
        let row = self
            .select_one(
                "SELECT payload FROM inbox WHERE run_id = $1 AND token = $2 AND idx = $3",
                &[&run_id, &token, &i(index)],
            )
            .await?;
        Ok(match row {
            Some(row) => HookPayload::Ready(row.get(0)),
            None => HookPayload::Pending,
        })
    }

    async fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()> {
        transact!(self, |tx| {
            tx.run(
                "DELETE FROM hooks WHERE token = $1 AND run_id = $2",
                &[&token, &run_id],
            )
            .await
            .map_err(pg)?;
            tx.run(
                "DELETE FROM inbox WHERE run_id = $1 AND token = $2",
                &[&run_id, &token],
            )
            .await
            .map_err(pg)?;
            Ok(Attempt::Done(()))
        })
    }

    async fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize> {
        let purged = self
            .exec(
                "DELETE FROM hooks WHERE NOT active
                   AND (retain_until_ms IS NULL OR retain_until_ms <= $1)",
                &[&i(now_ms)],
            )
            .await?;
        Ok(purged as usize)
    }
}

#[async_trait]
impl KeyStore for PgStore {
    async fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>> {
        let row = self
            .select_one(
                "SELECT run_id, expires_at_ms FROM keys WHERE workflow = $1 AND key = $2",
                &[&workflow, &key],
            )
            .await?;
        Ok(row.map(|r| KeyHold {
            run_id: r.get::<_, String>(0).into(),
            expires_at_ms: u(r.get(1)),
        }))
    }

    async fn purge_expired_keys(&self, now_ms: u64) -> Result<usize> {
        let purged = self
            .exec("DELETE FROM keys WHERE expires_at_ms <= $1", &[&i(now_ms)])
            .await?;
        Ok(purged as usize)
    }
}
