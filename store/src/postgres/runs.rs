//! Runs, their journals and their leases: admission, imports, listings,
//! ends; fenced appends; leases whose epoch fences every write.

use super::*;

/// Inserts entries; a position the journal holds is a conflict.
pub(super) async fn insert_entries(
    tx: &Transaction<'_>,
    run_id: &str,
    entries: &[Entry],
) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = entries.iter().map(|e| i(e.seq)).collect();
    let bytes: Vec<Vec<u8>> = entries.iter().map(journal::encode).collect();
    let inserted = tx
        .run(
            "INSERT INTO journal (run_id, seq, entry)
             SELECT $1, seq, entry FROM unnest($2::bigint[], $3::bytea[]) AS t(seq, entry)",
            &[&run_id, &seqs, &bytes],
        )
        .await;
    match inserted {
        Ok(_) => super::streams::write_journaled(tx, run_id, entries).await,
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            Err(StoreError::JournalConflict {
                run_id: run_id.into(),
                seq: entries[0].seq,
            })
        }
        Err(e) => Err(pg(e)),
    }
}

/// Locks the run's row and refuses if `fence` is no longer its lease.
pub(super) async fn check_fence(
    tx: &Transaction<'_>,
    run_id: &str,
    fence: Option<&Lease>,
) -> Result<()> {
    let Some(fence) = fence else { return Ok(()) };
    let row = tx
        .row(
            "SELECT lease_owner, lease_epoch FROM run_due WHERE run_id = $1 FOR UPDATE",
            &[&run_id],
        )
        .await
        .map_err(pg)?;
    let held = row.is_some_and(|r| {
        r.get::<_, String>(0) == fence.owner && u(r.get::<_, i64>(1)) == fence.epoch
    });
    if held {
        Ok(())
    } else {
        Err(StoreError::LeaseLost {
            run_id: fence.run_id.clone(),
            epoch: fence.epoch,
        })
    }
}

/// An append in one statement, so one round trip (its own transaction):
/// the fence's row lock and check, the entries, and the run's record if
/// given. `held` is false, and nothing written, when `$2`/`$3` no longer
/// hold the run's lease. The leading comment marks a statement that
/// commits on its own: the test that cuts connections at each commit
/// (`cli/tests/pg_cut.rs`) finds it by this mark, as it finds `COMMIT`.
const APPEND: &str = "/* keel:commits */ WITH fence AS (
        SELECT lease_owner = $2 AND lease_epoch = $3 AS held
        FROM run_due WHERE run_id = $1 AND $2::text IS NOT NULL FOR UPDATE
    ), ok AS (
        SELECT $2::text IS NULL OR coalesce((SELECT held FROM fence), false) AS held
    ), ins AS (
        INSERT INTO journal (run_id, seq, entry)
        SELECT $1, t.seq, t.entry
        FROM unnest($4::bigint[], $5::bytea[]) AS t(seq, entry), ok WHERE ok.held
        RETURNING 1
    ), upd AS (
        UPDATE runs SET record = $6, live = $7, attributes = $8::text::jsonb, status = $9
        FROM ok WHERE run_id = $1 AND $6::bytea IS NOT NULL AND ok.held
        RETURNING 1
    ), due AS (
        UPDATE run_due SET live = $7, next_at_ms = $10
        FROM ok WHERE run_id = $1 AND $6::bytea IS NOT NULL AND ok.held
        RETURNING 1
    )
    SELECT ok.held, (SELECT count(*) FROM ins), (SELECT count(*) FROM upd),
        (SELECT count(*) FROM due) FROM ok";

/// A run's end in one statement, so one round trip (its own transaction),
/// for a run that holds no concurrency slot: the fence's row lock and
/// check, the run's hooks retired (kept inactive while they are retained,
/// deleted otherwise), the record, the entries, the watchers woken (a
/// wakeup row and a `NOTIFY` each), and the run's inbox, claims and, if
/// `$10`, its cancel request gone. `held` is false when `$2`/`$3` no
/// longer hold the lease; `ended` is false, and nothing written, also when
/// the run holds a slot, whose release takes the transaction of
/// [`RunStore::end_run`]. Marked as [`APPEND`] is.
const END: &str = "/* keel:commits */ WITH fence AS (
        SELECT lease_owner = $2 AND lease_epoch = $3 AS held
        FROM run_due WHERE run_id = $1 AND $2::text IS NOT NULL FOR UPDATE
    ), ok AS (
        SELECT $2::text IS NULL OR coalesce((SELECT held FROM fence), false) AS held,
            NOT EXISTS (SELECT 1 FROM flow_slots WHERE run_id = $1) AS free
    ), go AS (
        SELECT held AND free AS go FROM ok
    ), kept AS (
        UPDATE hooks SET active = false FROM go
        WHERE run_id = $1 AND retain_until_ms > $4 AND go.go
        RETURNING 1
    ), dropped AS (
        DELETE FROM hooks USING go
        WHERE run_id = $1 AND active AND (retain_until_ms IS NULL OR retain_until_ms <= $4)
            AND go.go
        RETURNING 1
    ), upd AS (
        UPDATE runs SET record = $5, live = false, attributes = $6::text::jsonb, status = $11
        FROM go WHERE run_id = $1 AND go.go
        RETURNING 1
    ), released AS (
        UPDATE run_due SET live = false, lease_owner = '', lease_expires_ms = 0,
            next_at_ms = NULL, woken = false
        FROM go WHERE run_id = $1 AND go.go
        RETURNING 1
    ), ins AS (
        INSERT INTO journal (run_id, seq, entry)
        SELECT $1, t.seq, t.entry
        FROM unnest($7::bigint[], $8::bytea[]) AS t(seq, entry), go WHERE go.go
        RETURNING 1
    ), watched AS (
        DELETE FROM watchers USING go WHERE run_id = $1 AND go.go RETURNING watcher
    ), woken AS (
        UPDATE run_due SET woken = true
        WHERE run_id IN (SELECT watcher FROM watched) AND live AND run_id <> $1
        RETURNING 1
    ), told AS (
        SELECT pg_notify($9, watcher) FROM watched
    ), inbox AS (
        DELETE FROM inbox USING go WHERE run_id = $1 AND go.go RETURNING 1
    ), claims AS (
        DELETE FROM claims USING go WHERE run_id = $1 AND go.go RETURNING 1
    ), cancels AS (
        DELETE FROM cancel_requests USING go WHERE run_id = $1 AND $10 AND go.go RETURNING 1
    ), pauses AS (
        DELETE FROM pauses USING go WHERE run_id = $1 AND go.go RETURNING 1
    )
    SELECT ok.held, go.go, coalesce((SELECT array_agg(watcher) FROM watched), '{}'),
        (SELECT count(*) FROM told)
    FROM ok, go";

impl PgStore {
    /// One of the statements above, with `params`, retried while it loses
    /// a race (a deadlock, a serialization failure); its answer row. A
    /// position the journal holds is [`StoreError::JournalConflict`] at
    /// `seq`; a failure the database did not answer (a connection lost
    /// after sending) may have committed: [`StoreError::Unconfirmed`].
    async fn one_statement(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        run_id: &str,
        seq: u64,
    ) -> Result<Option<Row>> {
        let client = self.client().await?;
        let mut answer = client.row(sql, params).await;
        for _ in 1..RETRIES {
            match &answer {
                Err(e) if is_race(e) && e.code() != Some(&SqlState::UNIQUE_VIOLATION) => {
                    answer = client.row(sql, params).await;
                }
                _ => break,
            }
        }
        match answer {
            Ok(row) => Ok(row),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(StoreError::JournalConflict {
                    run_id: run_id.into(),
                    seq,
                })
            }
            Err(e) if e.as_db_error().is_some() => Err(pg(e)),
            Err(e) => Err(StoreError::Unconfirmed {
                reason: describe(&e),
            }),
        }
    }

    /// [`RunStore::append`] of entries that write no stream (those take
    /// statements of their own, in a transaction).
    async fn append_in_one_statement(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        let seqs: Vec<i64> = entries.iter().map(|e| i(e.seq)).collect();
        let bytes: Vec<Vec<u8>> = entries.iter().map(journal::encode).collect();
        let record = run.map(codec::encode);
        let live = run.map(|r| !r.status.is_final());
        let attributes = run.map(attributes_json);
        let status = run.map(|r| r.status.as_str());
        let next_at = run.and_then(next_at);
        let owner = fence.map(|f| f.owner.as_str());
        let epoch = fence.map(|f| i(f.epoch));
        let params: [&(dyn ToSql + Sync); 10] = [
            &run_id,
            &owner,
            &epoch,
            &seqs,
            &bytes,
            &record,
            &live,
            &attributes,
            &status,
            &next_at,
        ];
        let first = entries.first().map_or(0, |e| e.seq);
        match self.one_statement(APPEND, &params, run_id, first).await? {
            Some(row) if row.get::<_, bool>(0) => Ok(()),
            _ => Err(lease_lost(run_id, fence)),
        }
    }

    /// [`RunStore::end_run`] in one statement ([`END`]); `None`, and
    /// nothing written, if the run holds a concurrency slot or its end
    /// writes a stream: those take the transaction.
    async fn end_in_one_statement(
        &self,
        run: &RunRecord,
        entries: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Option<Vec<RunId>>> {
        if keel_core::stream::journaled_writes(entries)
            .next()
            .is_some()
        {
            return Ok(None);
        }
        let run_id = run.run_id.as_str();
        let seqs: Vec<i64> = entries.iter().map(|e| i(e.seq)).collect();
        let bytes: Vec<Vec<u8>> = entries.iter().map(journal::encode).collect();
        let owner = fence.map(|f| f.owner.as_str());
        let epoch = fence.map(|f| i(f.epoch));
        let cancelled = run.status == keel_core::RunStatus::Cancelled;
        let params: [&(dyn ToSql + Sync); 11] = [
            &run_id,
            &owner,
            &epoch,
            &i(now_ms),
            &codec::encode(run),
            &attributes_json(run),
            &seqs,
            &bytes,
            &channel(&self.inner.schema),
            &cancelled,
            &run.status.as_str(),
        ];
        let first = entries.first().map_or(0, |e| e.seq);
        let row = self.one_statement(END, &params, run_id, first).await?;
        let Some(row) = row.filter(|r| r.get::<_, bool>(0)) else {
            return Err(lease_lost(run_id, fence));
        };
        if !row.get::<_, bool>(1) {
            return Ok(None);
        }
        let watchers: Vec<String> = row.get(2);
        Ok(Some(watchers.into_iter().map(RunId::from).collect()))
    }
}

/// The error of a fenced write whose lease `fence` no longer holds.
fn lease_lost(run_id: &str, fence: Option<&Lease>) -> StoreError {
    StoreError::LeaseLost {
        run_id: run_id.into(),
        epoch: fence.map_or(0, |f| f.epoch),
    }
}

#[async_trait]
impl RunStore for PgStore {
    async fn admit(&self, a: Admission<'_>) -> Result<Admitted> {
        transact!(self, |tx| {
            // Everything that does not hang on the flow decision is written
            // first, as given, so that the concurrency group's row lock
            // (taken by the decision) is held only for the statements that
            // need it and the commit: runs of one key serialize on it.
            let run = a.run;
            let record = codec::encode(run);
            let mut hook_row = false;
            if let Some(hook) = a.start_hook
                && let Some(held) = lock_hook(tx, &hook.token).await?
            {
                if let Some(owner) = held.holder(a.now_ms) {
                    return Err(StoreError::HookConflict {
                        token: hook.token.clone(),
                        conflicting_run_id: owner.clone(),
                    });
                }
                hook_row = true;
            }
            if let Some(claim) = a.key {
                let held = tx
                    .row(
                        "SELECT run_id, expires_at_ms FROM keys
                         WHERE workflow = $1 AND key = $2 FOR UPDATE",
                        &[&run.workflow, &claim.key],
                    )
                    .await
                    .map_err(pg)?;
                let expires = i(a.now_ms.saturating_add(claim.ttl_ms));
                let sql = match &held {
                    Some(row) if u(row.get(1)) > a.now_ms => {
                        return Err(StoreError::IdempotencyCollision {
                            workflow: run.workflow.clone(),
                            key: claim.key.into(),
                            existing_run_id: row.get::<_, String>(0).into(),
                        });
                    }
                    Some(_) => {
                        "UPDATE keys SET run_id = $3, expires_at_ms = $4
                         WHERE workflow = $1 AND key = $2"
                    }
                    None => {
                        "INSERT INTO keys (workflow, key, run_id, expires_at_ms)
                         VALUES ($1, $2, $3, $4)"
                    }
                };
                if let Err(e) = tx
                    .run(
                        sql,
                        &[&run.workflow, &claim.key, &run.run_id.as_str(), &expires],
                    )
                    .await
                {
                    return race(e);
                }
            }
            match tx
                .run(
                    INSERT_RUN,
                    &[
                        &run.run_id.as_str(),
                        &!run.status.is_final(),
                        &record,
                        &i(run.created_at_ms),
                        &attributes_json(run),
                        &run.status.as_str(),
                        &next_at(run),
                        &run.workflow.as_str(),
                        &a.lease.map_or("", |l| l.owner),
                        &a.lease.map_or(0, |l| i(l.expires_at_ms)),
                    ],
                )
                .await
            {
                Ok(0) => {
                    return Err(StoreError::RunExists {
                        run_id: run.run_id.clone(),
                    });
                }
                Ok(_) => {}
                Err(e) => return race(e),
            }
            if let Some(hook) = a.start_hook
                && let Attempt::Retry = write_hook(tx, hook, hook_row).await?
            {
                return Ok(Attempt::Retry);
            }
            if let Some(handover) = a.handover {
                hooks::hand_over(tx, handover, &run.run_id).await?;
            }
            insert_entries(tx, &run.run_id, a.journal).await?;
            // Delivered at commit.
            self.notify(tx, &Wake::Admitted).await?;
            let plan = flow::admission_plan(tx, &a).await?;
            if plan.run != *run {
                tx.run(
                    "WITH due AS (
                         UPDATE run_due SET live = $3, next_at_ms = $5 WHERE run_id = $1
                     )
                     UPDATE runs SET record = $2, live = $3, status = $4 WHERE run_id = $1",
                    &[
                        &run.run_id.as_str(),
                        &codec::encode(&plan.run),
                        &!plan.run.status.is_final(),
                        &plan.run.status.as_str(),
                        &next_at(&plan.run),
                    ],
                )
                .await
                .map_err(pg)?;
            }
            insert_entries(tx, &run.run_id, &plan.journal[a.journal.len()..]).await?;
            if let Some(hook) = &plan.start_hook
                && a.start_hook != Some(hook)
                && let Attempt::Retry = write_hook(tx, hook, true).await?
            {
                return Ok(Attempt::Retry);
            }
            for slot in &plan.slots {
                flow::put_slot(tx, slot).await?;
            }
            Ok(Attempt::Done(plan.admitted))
        })
    }

    async fn import(&self, run: &RunRecord, entries: &[Entry]) -> Result<()> {
        let record = codec::encode(run);
        transact!(self, |tx| {
            let inserted = tx
                .run(
                    INSERT_RUN,
                    &[
                        &run.run_id.as_str(),
                        &!run.status.is_final(),
                        &record,
                        &i(run.created_at_ms),
                        &attributes_json(run),
                        &run.status.as_str(),
                        &next_at(run),
                        &run.workflow.as_str(),
                        &"",
                        &0i64,
                    ],
                )
                .await
                .map_err(pg)?;
            if inserted == 0 {
                return Err(StoreError::RunExists {
                    run_id: run.run_id.clone(),
                });
            }
            insert_entries(tx, &run.run_id, entries).await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn get_run(&self, run_id: &str) -> Result<RunRecord> {
        let row = self
            .select_one("SELECT record FROM runs WHERE run_id = $1", &[&run_id])
            .await?
            .ok_or_else(|| StoreError::RunNotFound {
                run_id: run_id.into(),
            })?;
        Ok(codec::decode(row.get(0), "run record")?)
    }

    async fn list_runs(&self) -> Result<Vec<RunRecord>> {
        self.records("SELECT record FROM runs ORDER BY run_id", &[], "run record")
            .await
    }

    async fn runs_before(
        &self,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let limit = limit as i64;
        match before {
            Some(before) => {
                self.records(
                    "SELECT record FROM runs WHERE (created_at_ms, run_id) < ($1, $2)
                     ORDER BY created_at_ms DESC, run_id DESC LIMIT $3",
                    &[&i(before.created_at_ms), &before.run_id.as_str(), &limit],
                    "run record",
                )
                .await
            }
            None => {
                self.records(
                    "SELECT record FROM runs ORDER BY created_at_ms DESC, run_id DESC LIMIT $1",
                    &[&limit],
                    "run record",
                )
                .await
            }
        }
    }

    async fn runs_with_attributes(
        &self,
        attributes: &keel_core::Attributes,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let wanted = serde_json::to_string(attributes).expect("attributes encode");
        let before = before.cloned().unwrap_or(RunCursor {
            created_at_ms: u64::MAX >> 1,
            run_id: RunId::default(),
        });
        self.records(
            "SELECT record FROM runs WHERE attributes @> $1::text::jsonb
                 AND (created_at_ms, run_id) < ($2, $3)
             ORDER BY created_at_ms DESC, run_id DESC LIMIT $4",
            &[
                &wanted,
                &i(before.created_at_ms),
                &before.run_id.as_str(),
                &(limit as i64),
            ],
            "run record",
        )
        .await
    }

    async fn live_runs(&self) -> Result<Vec<RunRecord>> {
        self.records(
            "SELECT record FROM runs WHERE live ORDER BY run_id",
            &[],
            "run record",
        )
        .await
    }

    async fn live_counts(&self) -> Result<crate::LiveCounts> {
        let mut counts = crate::LiveCounts::default();
        for row in self
            .select(
                "SELECT workflow, status, sum(n)::bigint FROM run_counts
                 GROUP BY workflow, status",
                &[],
            )
            .await?
        {
            if let Some(status) = keel_core::RunStatus::parse(row.get(1)) {
                counts.add(row.get(0), status, u(row.get(2)));
            }
        }
        Ok(counts)
    }

    async fn end_run(
        &self,
        run: &RunRecord,
        entries: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Vec<RunId>> {
        if let Some(woken) = self
            .end_in_one_statement(run, entries, now_ms, fence)
            .await?
        {
            return Ok(woken);
        }
        let record = codec::encode(run);
        let run_id = run.run_id.as_str();
        transact!(self, |tx| {
            check_fence(tx, run_id, fence).await?;
            tx.run(
                "UPDATE hooks SET active = false WHERE run_id = $1 AND retain_until_ms > $2",
                &[&run_id, &i(now_ms)],
            )
            .await
            .map_err(pg)?;
            tx.run("DELETE FROM hooks WHERE run_id = $1 AND active", &[&run_id])
                .await
                .map_err(pg)?;
            tx.run(
                "WITH due AS (
                     UPDATE run_due SET live = false, lease_owner = '', lease_expires_ms = 0,
                         next_at_ms = NULL, woken = false
                     WHERE run_id = $1
                 )
                 UPDATE runs SET record = $2, live = false, attributes = $3::text::jsonb,
                     status = $4
                 WHERE run_id = $1",
                &[
                    &run_id,
                    &record,
                    &attributes_json(run),
                    &run.status.as_str(),
                ],
            )
            .await
            .map_err(pg)?;
            insert_entries(tx, run_id, entries).await?;
            let watchers: Vec<RunId> = tx
                .rows(
                    "DELETE FROM watchers WHERE run_id = $1 RETURNING watcher",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
                .iter()
                .map(|r| r.get::<_, String>(0).into())
                .collect();
            for watcher in &watchers {
                wake(tx, watcher).await?;
                self.notify(tx, &Wake::Run(watcher.clone())).await?;
            }
            tx.run("DELETE FROM inbox WHERE run_id = $1", &[&run_id])
                .await
                .map_err(pg)?;
            tx.run("DELETE FROM claims WHERE run_id = $1", &[&run_id])
                .await
                .map_err(pg)?;
            if run.status == keel_core::RunStatus::Cancelled {
                tx.run("DELETE FROM cancel_requests WHERE run_id = $1", &[&run_id])
                    .await
                    .map_err(pg)?;
            }
            tx.run("DELETE FROM pauses WHERE run_id = $1", &[&run_id])
                .await
                .map_err(pg)?;
            let failed = run.status == keel_core::RunStatus::Failed;
            let promoted = flow::flow_end(tx, run_id, failed, now_ms).await?;
            if !promoted.is_empty() {
                self.notify(tx, &Wake::Admitted).await?;
            }
            let mut woken = watchers;
            woken.extend(promoted);
            Ok(Attempt::Done(woken))
        })
    }
}

#[async_trait]
impl JournalStore for PgStore {
    async fn append(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        if keel_core::stream::journaled_writes(entries)
            .next()
            .is_none()
        {
            return self
                .append_in_one_statement(run_id, entries, run, fence)
                .await;
        }
        let record = run.map(|r| {
            let row = (!r.status.is_final(), r.status.as_str(), next_at(r));
            (codec::encode(r), row, attributes_json(r))
        });
        transact!(self, |tx| {
            check_fence(tx, run_id, fence).await?;
            insert_entries(tx, run_id, entries).await?;
            if let Some((record, (live, status, next_at), attributes)) = &record {
                tx.run(
                    "WITH due AS (
                         UPDATE run_due SET live = $3, next_at_ms = $6 WHERE run_id = $1
                     )
                     UPDATE runs SET record = $2, live = $3, attributes = $4::text::jsonb,
                         status = $5
                     WHERE run_id = $1",
                    &[&run_id, record, live, attributes, status, next_at],
                )
                .await
                .map_err(pg)?;
            }
            Ok(Attempt::Done(()))
        })
    }

    async fn journal(&self, run_id: &str) -> Result<Vec<Entry>> {
        self.select(
            "SELECT entry FROM journal WHERE run_id = $1 ORDER BY seq",
            &[&run_id],
        )
        .await?
        .iter()
        .map(|r| Ok(journal::decode(r.get(0))?))
        .collect()
    }
}

#[async_trait]
impl LeaseStore for PgStore {
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>> {
        let expires = i(now_ms.saturating_add(ttl_ms));
        let row = self
            .select_one(
                "WITH held AS (
                     SELECT run_id, lease_owner, lease_expires_ms FROM run_due
                     WHERE run_id = $1 FOR UPDATE
                 )
                 UPDATE run_due r SET lease_owner = $2, lease_epoch = r.lease_epoch + 1,
                     lease_expires_ms = $3, woken = false
                 FROM held WHERE r.run_id = held.run_id
                   AND (held.lease_owner = '' OR held.lease_owner = $2
                        OR held.lease_expires_ms <= $4)
                 RETURNING r.lease_epoch, held.lease_owner, held.lease_expires_ms",
                &[&run_id, &owner, &expires, &i(now_ms)],
            )
            .await?;
        Ok(row.map(|r| Lease {
            run_id: run_id.into(),
            owner: owner.into(),
            epoch: u(r.get(0)),
            expires_at_ms: u(expires),
            took_over: lost_lease(owner, r.get(1), r.get(2)),
        }))
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64, now_ms: u64) -> Result<Lease> {
        let expires = i(now_ms.saturating_add(ttl_ms));
        let renewed = self
            .exec(
                "UPDATE run_due SET lease_expires_ms = $4
                 WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
                &[
                    &lease.run_id.as_str(),
                    &lease.owner,
                    &i(lease.epoch),
                    &expires,
                ],
            )
            .await?;
        if renewed == 0 {
            return Err(StoreError::LeaseLost {
                run_id: lease.run_id.clone(),
                epoch: lease.epoch,
            });
        }
        Ok(Lease {
            expires_at_ms: u(expires),
            ..lease.clone()
        })
    }

    async fn release_lease(&self, lease: &Lease, again_at_ms: Option<u64>) -> Result<()> {
        self.exec(
            "UPDATE run_due SET lease_owner = '', lease_expires_ms = 0,
                 next_at_ms = COALESCE($4, next_at_ms)
             WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
            &[
                &lease.run_id.as_str(),
                &lease.owner,
                &i(lease.epoch),
                &again_at_ms.map(i),
            ],
        )
        .await?;
        Ok(())
    }

    async fn claim_due(
        &self,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<Lease>> {
        let expires = i(now_ms.saturating_add(ttl_ms));
        Ok(self
            .select(CLAIM_DUE, &[&i(now_ms), &(limit as i64), &owner, &expires])
            .await?
            .iter()
            .map(|r| Lease {
                run_id: r.get::<_, String>(0).into(),
                owner: owner.into(),
                epoch: u(r.get(1)),
                expires_at_ms: u(expires),
                took_over: lost_lease(owner, r.get(2), r.get(3)),
            })
            .collect())
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        Ok(self
            .select_one(
                "SELECT due_at_ms FROM run_due WHERE due_at_ms IS NOT NULL
                 ORDER BY due_at_ms LIMIT 1",
                &[],
            )
            .await?
            .map(|r| u(r.get(0))))
    }

    async fn held_leases(&self, now_ms: u64) -> Result<Vec<Lease>> {
        Ok(self
            .select(
                "SELECT run_id, lease_owner, lease_epoch, lease_expires_ms FROM run_due
                 WHERE lease_owner <> '' AND live AND lease_expires_ms > $1",
                &[&i(now_ms)],
            )
            .await?
            .iter()
            .map(|r| Lease {
                run_id: r.get::<_, String>(0).into(),
                owner: r.get(1),
                epoch: u(r.get(2)),
                expires_at_ms: u(r.get(3)),
                took_over: None,
            })
            .collect())
    }
}

/// Takes the leases of the runs due at `$1`, at most `$2`, earliest due
/// first, for `$3` until `$4`: one statement over the due index that skips
/// rows another claim has locked, so concurrent claims take disjoint runs
/// without waiting on each other.
const CLAIM_DUE: &str = "WITH due AS (
        SELECT run_id, due_at_ms, lease_owner, lease_expires_ms FROM run_due
        WHERE due_at_ms <= $1
        ORDER BY due_at_ms, run_id LIMIT $2
        FOR UPDATE SKIP LOCKED
    ), taken AS (
        UPDATE run_due r SET lease_owner = $3, lease_epoch = r.lease_epoch + 1,
            lease_expires_ms = $4, woken = false
        FROM due WHERE r.run_id = due.run_id
        RETURNING r.run_id, r.lease_epoch, due.due_at_ms, due.lease_owner,
            due.lease_expires_ms
    )
    SELECT run_id, lease_epoch, lease_owner, lease_expires_ms FROM taken
    ORDER BY due_at_ms, run_id";

/// The lease a take by `owner` replaced, from the row's owner and expiry
/// before the take: another worker's that was never released.
fn lost_lease(owner: &str, held_by: String, expired_at: i64) -> Option<crate::LostLease> {
    (!held_by.is_empty() && held_by != owner).then(|| crate::LostLease {
        owner: held_by,
        expired_at_ms: u(expired_at),
    })
}

/// Inserts a run's row and its driving state: `$1` run ID, `$2` live, `$3`
/// record, `$4` admission time, `$5` attributes, `$6` status, `$7`
/// record-given due time, `$8` workflow, `$9` the lease's owner (`''` for
/// none) and `$10` its expiry; nothing if the run ID is taken (the count of
/// rows is then 0).
const INSERT_RUN: &str = "WITH run AS (
        INSERT INTO runs (run_id, live, record, created_at_ms, attributes, status, workflow)
        VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $8)
        ON CONFLICT (run_id) DO NOTHING
        RETURNING run_id
    )
    INSERT INTO run_due (run_id, live, next_at_ms, lease_owner, lease_epoch, lease_expires_ms)
    SELECT run_id, $2, $7, $9, ($9 <> '')::int, $10 FROM run
    ON CONFLICT (run_id) DO UPDATE SET live = excluded.live, next_at_ms = excluded.next_at_ms,
        woken = false, lease_owner = excluded.lease_owner,
        lease_epoch = run_due.lease_epoch + 1, lease_expires_ms = excluded.lease_expires_ms";

/// Marks a live run woken (due at once once no lease is held).
pub(super) async fn wake(tx: &Transaction<'_>, run_id: &str) -> Result<()> {
    tx.run(
        "UPDATE run_due SET woken = true WHERE run_id = $1 AND live",
        &[&run_id],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// A record's due time as its row keeps it (`keel_core::due::next_at`).
pub(super) fn next_at(run: &RunRecord) -> Option<i64> {
    keel_core::due::next_at(run).map(i)
}

/// A run's attributes as the `attributes` column's JSON.
fn attributes_json(run: &RunRecord) -> String {
    serde_json::to_string(&run.attributes).expect("attributes encode")
}
