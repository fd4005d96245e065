//! Flow control on PostgreSQL: `flow_groups` (one row per group, the lock
//! every decision against the group takes), `flow_slots` (one row per run
//! in a group), `flow_limits` (the operators' overrides, `scope` empty for
//! every key of a workflow, `=KEY` for one). Each decision is made in the
//! transaction of the admission, end or limit change it belongs to, under
//! the group's row lock, so a limit holds across every worker.

use keel_core::flow::{
    self, Group, GroupRecord, LimitOverride, LimitRow, RunSlot, Slot, SlotState,
};
use keel_core::{RunId, RunStatus};

use super::*;
use crate::FlowStore;
use crate::admission::AdmissionPlan;

fn scope(key: Option<&str>) -> String {
    key.map_or_else(String::new, |k| format!("={k}"))
}

/// A group's slots and its workflow's overrides, read in one round trip,
/// with a new arrival order for a slot the caller may place (sequences
/// take no lock; an order not used is a harmless gap).
struct View {
    slots: Vec<Slot>,
    overrides: Vec<LimitOverride>,
    seq: u64,
}

impl View {
    /// The query, of `$1` the workflow and `$2` the key.
    const SQL: &str =
        "SELECT ARRAY(SELECT record FROM flow_slots WHERE workflow = $1 AND key = $2),
                              ARRAY(SELECT record FROM flow_limits WHERE workflow = $1),
                              nextval('flow_seq')";

    async fn of(tx: &Transaction<'_>, group: &Group) -> Result<View> {
        let row = tx
            .row(View::SQL, &[&group.workflow, &group.key])
            .await
            .map_err(pg)?
            .ok_or_else(|| StoreError::Backend {
                reason: "a select of arrays answered no row".into(),
            })?;
        View::from_row(&row)
    }

    fn from_row(row: &tokio_postgres::Row) -> Result<View> {
        Ok(View {
            slots: decode_all(&row.get::<_, Vec<Vec<u8>>>(0), "slot")?,
            overrides: decode_all(&row.get::<_, Vec<Vec<u8>>>(1), "limit")?,
            seq: u(row.get(2)),
        })
    }

    /// The limit that holds for `group`, declared `declared`.
    fn limit(&self, declared: u32, group: &Group) -> u32 {
        flow::effective_limit(declared, &self.overrides, group)
    }
}

fn decode_all<T: codec::Stored>(records: &[Vec<u8>], what: &str) -> Result<Vec<T>> {
    records
        .iter()
        .map(|r| Ok(codec::decode(r, what)?))
        .collect()
}

/// `run_id`'s slot and its group's declared limit, the group's row locked
/// if `lock`.
async fn slot_of(tx: &Transaction<'_>, run_id: &str, lock: bool) -> Result<Option<(Slot, u32)>> {
    let sql = format!(
        "SELECT s.record, g.record FROM flow_slots s
         JOIN flow_groups g ON g.workflow = s.workflow AND g.key = s.key
         WHERE s.run_id = $1{}",
        if lock { " FOR UPDATE OF g" } else { "" }
    );
    let Some(row) = tx.row(&sql, &[&run_id]).await.map_err(pg)? else {
        return Ok(None);
    };
    let slot: Slot = codec::decode(row.get(0), "slot")?;
    let group: GroupRecord = codec::decode(row.get(1), "concurrency group")?;
    Ok(Some((slot, group.declared_limit)))
}

pub(super) async fn put_slot(tx: &Transaction<'_>, slot: &Slot) -> Result<()> {
    tx.run(
        "INSERT INTO flow_slots (run_id, workflow, key, record) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id) DO UPDATE SET record = excluded.record",
        &[
            &slot.run_id.as_str(),
            &slot.workflow,
            &slot.key,
            &codec::encode(slot),
        ],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// Rewrites a live run's status in its record.
async fn set_status(
    tx: &Transaction<'_>,
    run_id: &str,
    status: RunStatus,
    now_ms: u64,
) -> Result<()> {
    let Some(row) = tx
        .row(
            "SELECT record FROM runs WHERE run_id = $1 AND live FOR UPDATE",
            &[&run_id],
        )
        .await
        .map_err(pg)?
    else {
        return Ok(());
    };
    let mut run: keel_core::RunRecord = codec::decode(row.get(0), "run record")?;
    run.status = status;
    run.updated_at_ms = now_ms;
    tx.run(
        "WITH due AS (UPDATE run_due SET next_at_ms = $4 WHERE run_id = $1)
         UPDATE runs SET record = $2, status = $3 WHERE run_id = $1",
        &[
            &run_id,
            &codec::encode(&run),
            &run.status.as_str(),
            &super::runs::next_at(&run),
        ],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// Promotes the queued runs of `group` (locked, declared `declared`)
/// that take its free slots; returns them.
async fn promote(
    tx: &Transaction<'_>,
    group: &Group,
    declared: u32,
    now_ms: u64,
) -> Result<Vec<RunId>> {
    promote_in(tx, group, declared, &View::of(tx, group).await?, now_ms).await
}

/// Promotes the queued runs of `group` (locked, declared `declared`, its
/// slots as `view` read them under the lock) that take its free slots;
/// returns them.
async fn promote_in(
    tx: &Transaction<'_>,
    group: &Group,
    declared: u32,
    view: &View,
    now_ms: u64,
) -> Result<Vec<RunId>> {
    let promoted = flow::promotions(view.limit(declared, group), &view.slots);
    for slot in view.slots.iter().filter(|s| promoted.contains(&s.run_id)) {
        put_slot(
            tx,
            &Slot {
                state: SlotState::Holding,
                ..slot.clone()
            },
        )
        .await?;
        set_status(tx, &slot.run_id, RunStatus::Pending, now_ms).await?;
    }
    Ok(promoted)
}

/// What ending `run_id` does to its group, in the end's transaction: its
/// slot goes (for a run that `failed`, kept aside in `flow_failed`, out of
/// its group, so that a retry asks for one again), and the queued runs
/// that take a slot it frees are promoted (returned).
pub(super) async fn flow_end(
    tx: &Transaction<'_>,
    run_id: &str,
    failed: bool,
    now_ms: u64,
) -> Result<Vec<RunId>> {
    // A slot's group never changes: read without a lock.
    let Some(row) = tx
        .row(
            "SELECT workflow, key FROM flow_slots WHERE run_id = $1",
            &[&run_id],
        )
        .await
        .map_err(pg)?
    else {
        return Ok(Vec::new());
    };
    let group = Group {
        workflow: row.get(0),
        key: row.get(1),
    };
    // The group's row locked, the slot gone (as it stands under the lock)
    // and the group read after: three statements pipelined in one round
    // trip, prepared first so that they go in this order.
    let lock = tx
        .prepare_cached(
            "SELECT record FROM flow_groups WHERE workflow = $1 AND key = $2 FOR UPDATE",
        )
        .await
        .map_err(pg)?;
    let delete = tx
        .prepare_cached("DELETE FROM flow_slots WHERE run_id = $1 RETURNING record")
        .await
        .map_err(pg)?;
    let read = tx.prepare_cached(View::SQL).await.map_err(pg)?;
    let group_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
        [&group.workflow, &group.key];
    let run_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&run_id];
    let (locked, gone, view) = tokio::try_join!(
        tx.query_opt(&lock, &group_params),
        tx.query_opt(&delete, &run_params),
        tx.query_one(&read, &group_params),
    )
    .map_err(pg)?;
    let Some(gone) = gone else {
        return Ok(Vec::new());
    };
    let slot: Slot = codec::decode(gone.get(0), "slot")?;
    if failed {
        tx.run(
            "INSERT INTO flow_failed (run_id, record) VALUES ($1, $2)
             ON CONFLICT (run_id) DO UPDATE SET record = excluded.record",
            &[&run_id, &codec::encode(&slot)],
        )
        .await
        .map_err(pg)?;
    }
    if !slot.state.holds() {
        return Ok(Vec::new());
    }
    let declared = match locked {
        Some(row) => codec::decode::<GroupRecord>(row.get(0), "concurrency group")?.declared_limit,
        None => 0,
    };
    promote_in(tx, &group, declared, &View::from_row(&view)?, now_ms).await
}

/// What admitting `a` writes, decided under its group's lock, and the
/// slots written.
pub(super) async fn admission_plan(
    tx: &Transaction<'_>,
    a: &Admission<'_>,
) -> Result<AdmissionPlan> {
    let Some(claim) = a.flow else {
        return Ok(AdmissionPlan::as_given(a));
    };
    let group = Group {
        workflow: a.run.workflow.clone(),
        key: claim.key.into(),
    };
    let record = GroupRecord {
        group: group.clone(),
        declared_limit: claim.limit,
        on_limit: claim.on_limit,
    };
    // The upsert takes the group's row lock; the view is read by the
    // statement after it, so under the lock. The two are pipelined (sent
    // together, prepared first so that they go in this order): one round
    // trip while the lock is held.
    let upsert = tx
        .prepare_cached(
            "INSERT INTO flow_groups (workflow, key, record) VALUES ($1, $2, $3)
             ON CONFLICT (workflow, key) DO UPDATE SET record = excluded.record",
        )
        .await
        .map_err(pg)?;
    let read = tx.prepare_cached(View::SQL).await.map_err(pg)?;
    let record = codec::encode(&record);
    let upsert_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
        [&group.workflow, &group.key, &record];
    let read_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
        [&group.workflow, &group.key];
    let (_, row) = tokio::try_join!(
        tx.execute(&upsert, &upsert_params),
        tx.query_one(&read, &read_params),
    )
    .map_err(pg)?;
    let view = View::from_row(&row)?;
    let limit = view.limit(claim.limit, &group);
    Ok(AdmissionPlan::decide(a, limit, &view.slots, view.seq))
}

#[async_trait]
impl FlowStore for PgStore {
    async fn rearm_slot(&self, run_id: &str) -> Result<bool> {
        transact!(self, |tx| {
            let Some(row) = tx
                .row(
                    "DELETE FROM flow_failed WHERE run_id = $1 RETURNING record",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
            else {
                // Rearmed already (by a retry whose write did not land).
                let deferred = slot_of(tx, run_id, false)
                    .await?
                    .is_some_and(|(s, _)| s.state == SlotState::Deferred);
                return Ok(Attempt::Done(deferred));
            };
            let slot: Slot = codec::decode(row.get(0), "slot")?;
            // A deferred slot counts against nothing: no lock is needed.
            put_slot(
                tx,
                &Slot {
                    state: SlotState::Deferred,
                    ..slot
                },
            )
            .await?;
            Ok(Attempt::Done(true))
        })
    }

    async fn take_slot(&self, run_id: &str, now_ms: u64) -> Result<Option<SlotState>> {
        transact!(self, |tx| {
            let Some((slot, declared)) = slot_of(tx, run_id, true).await? else {
                return Ok(Attempt::Done(None));
            };
            let group = slot.group();
            // Read again under the group's lock.
            let view = View::of(tx, &group).await?;
            let Some(slot) = view.slots.iter().find(|s| s.run_id == slot.run_id).cloned() else {
                return Ok(Attempt::Done(None));
            };
            if slot.state != SlotState::Deferred {
                return Ok(Attempt::Done(None));
            }
            let others: Vec<Slot> = view
                .slots
                .iter()
                .filter(|s| s.run_id != slot.run_id)
                .cloned()
                .collect();
            let limit = view.limit(declared, &group);
            let (state, status) =
                match flow::decide(limit, &others, flow::OnLimit::Queue, slot.priority) {
                    flow::Decision::Take => (SlotState::Holding, RunStatus::Pending),
                    _ => (SlotState::Queued, RunStatus::Queued),
                };
            put_slot(
                tx,
                &Slot {
                    state,
                    seq: view.seq,
                    ..slot
                },
            )
            .await?;
            set_status(tx, run_id, status, now_ms).await?;
            Ok(Attempt::Done(Some(state)))
        })
    }

    async fn run_slot(&self, run_id: &str) -> Result<Option<RunSlot>> {
        transact!(self, |tx| {
            let Some((slot, declared)) = slot_of(tx, run_id, false).await? else {
                return Ok(Attempt::Done(None));
            };
            let group = slot.group();
            let view = View::of(tx, &group).await?;
            Ok(Attempt::Done(Some(RunSlot {
                position: flow::position(&slot, &view.slots),
                limit: view.limit(declared, &group),
                key: slot.key,
                state: slot.state,
                priority: slot.priority,
            })))
        })
    }

    async fn set_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: Option<u32>,
        now_ms: u64,
    ) -> Result<Vec<RunId>> {
        let scope = scope(key);
        let promoted = transact!(self, |tx| {
            match limit {
                Some(limit) => {
                    let o = LimitOverride {
                        workflow: workflow.into(),
                        key: key.map(str::to_string),
                        limit,
                    };
                    tx.run(
                        "INSERT INTO flow_limits (workflow, scope, record) VALUES ($1, $2, $3)
                         ON CONFLICT (workflow, scope) DO UPDATE SET record = excluded.record",
                        &[&workflow, &scope, &codec::encode(&o)],
                    )
                    .await
                    .map_err(pg)?
                }
                None => tx
                    .run(
                        "DELETE FROM flow_limits WHERE workflow = $1 AND scope = $2",
                        &[&workflow, &scope],
                    )
                    .await
                    .map_err(pg)?,
            };
            // The groups the limit covers, locked in key order.
            let groups: Vec<GroupRecord> = decode_all(
                &tx.rows(
                    "SELECT record FROM flow_groups WHERE workflow = $1
                       AND ($2::text IS NULL OR key = $2) ORDER BY key FOR UPDATE",
                    &[&workflow, &key],
                )
                .await
                .map_err(pg)?
                .iter()
                .map(|r| r.get(0))
                .collect::<Vec<Vec<u8>>>(),
                "concurrency group",
            )?;
            let mut promoted = Vec::new();
            for g in groups {
                promoted.extend(promote(tx, &g.group, g.declared_limit, now_ms).await?);
            }
            if !promoted.is_empty() {
                self.notify(tx, &Wake::Admitted).await?;
            }
            Ok(Attempt::Done(promoted))
        })?;
        Ok(promoted)
    }

    async fn limit_rows(&self) -> Result<Vec<LimitRow>> {
        let groups: Vec<GroupRecord> = self
            .records("SELECT record FROM flow_groups", &[], "concurrency group")
            .await?;
        let slots: Vec<Slot> = self
            .records("SELECT record FROM flow_slots", &[], "slot")
            .await?;
        let overrides: Vec<LimitOverride> = self
            .records("SELECT record FROM flow_limits", &[], "limit")
            .await?;
        Ok(flow::limit_rows(&groups, &slots, &overrides))
    }

    async fn limited_workflows(&self) -> Result<Vec<String>> {
        Ok(self
            .select("SELECT DISTINCT workflow FROM flow_groups ORDER BY 1", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

#[async_trait]
impl crate::RateStore for PgStore {
    async fn take_grant(
        &self,
        key: &str,
        limit: u32,
        per_ms: u64,
        _now_ms: u64,
    ) -> Result<crate::Grant> {
        transact!(self, |tx| {
            let grant = update_locked(
                tx,
                Locked::RateWindows,
                key,
                |w: &mut flow::RateWindow, now_ms| {
                    let answer = w.take(limit, per_ms, now_ms);
                    (crate::Grant::of(answer, w, now_ms), answer.is_ok())
                },
            )
            .await?;
            Ok(Attempt::Done(grant))
        })
    }

    async fn restamp_grant(&self, key: &str, at_ms: u64, _now_ms: u64) -> Result<()> {
        transact!(self, |tx| {
            update_locked(
                tx,
                Locked::RateWindows,
                key,
                |w: &mut flow::RateWindow, now_ms| {
                    w.restamp(at_ms, now_ms);
                    ((), !w.grants.is_empty())
                },
            )
            .await?;
            Ok(Attempt::Done(()))
        })
    }

    async fn take_permit(
        &self,
        key: &str,
        holder: &str,
        limit: u32,
        ttl_ms: u64,
        _now_ms: u64,
    ) -> Result<crate::Grant> {
        transact!(self, |tx| {
            let grant = update_locked(
                tx,
                Locked::StepPermits,
                key,
                |p: &mut flow::Permits, now_ms| {
                    let answer = p.take(holder, limit, now_ms, ttl_ms);
                    (crate::Grant::of_permit(answer, now_ms), true)
                },
            )
            .await?;
            Ok(Attempt::Done(grant))
        })
    }

    async fn release_permit(&self, key: &str, holder: &str) -> Result<()> {
        transact!(self, |tx| {
            update_locked(tx, Locked::StepPermits, key, |p: &mut flow::Permits, _| {
                ((), p.release(holder))
            })
            .await?;
            Ok(Attempt::Done(()))
        })
    }
}

/// The tables of records decided under their row's lock.
#[derive(Clone, Copy)]
enum Locked {
    RateWindows,
    StepPermits,
}

impl Locked {
    fn table(self) -> &'static str {
        match self {
            Locked::RateWindows => "rate_windows",
            Locked::StepPermits => "step_permits",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Locked::RateWindows => "rate window",
            Locked::StepPermits => "permits",
        }
    }
}

/// Locks the record of `key` in `table` (made the default if none), lets
/// `f` change it at the database's time, read once the lock is held, and
/// writes it back if `f` says it changed; returns what `f` answered.
async fn update_locked<T, A>(
    tx: &Transaction<'_>,
    table: Locked,
    key: &str,
    f: impl FnOnce(&mut T, u64) -> (A, bool),
) -> Result<A>
where
    T: Default + codec::Stored,
{
    let name = table.table();
    tx.run(
        &format!("INSERT INTO {name} (key, record) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING"),
        &[&key, &codec::encode(&T::default())],
    )
    .await
    .map_err(pg)?;
    let row = tx
        .row(
            &format!("SELECT record FROM {name} WHERE key = $1 FOR UPDATE"),
            &[&key],
        )
        .await
        .map_err(pg)?;
    let mut record: T = match row {
        Some(row) => codec::decode(row.get(0), table.what())?,
        None => T::default(),
    };
    let (answer, changed) = f(&mut record, db_now(tx).await?);
    if changed {
        tx.run(
            &format!("UPDATE {name} SET record = $2 WHERE key = $1"),
            &[&key, &codec::encode(&record)],
        )
        .await
        .map_err(pg)?;
    }
    Ok(answer)
}

/// The database's clock, in ms since the epoch.
async fn db_now(tx: &Transaction<'_>) -> Result<u64> {
    let now: i64 = tx
        .row(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .await
        .map_err(pg)?
        .map_or(0, |r| r.get(0));
    Ok(u(now))
}
