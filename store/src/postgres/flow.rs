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

/// Locks `group`'s row (if it has one); returns its record.
pub(super) async fn lock_group(tx: &Transaction<'_>, group: &Group) -> Result<Option<GroupRecord>> {
    let held = tx
        .row(
            "SELECT record FROM flow_groups WHERE workflow = $1 AND key = $2 FOR UPDATE",
            &[&group.workflow, &group.key],
        )
        .await
        .map_err(pg)?;
    match held {
        Some(row) => Ok(Some(codec::decode(row.get(0), "concurrency group")?)),
        None => Ok(None),
    }
}

async fn group_slots(tx: &Transaction<'_>, group: &Group) -> Result<Vec<Slot>> {
    tx.rows(
        "SELECT record FROM flow_slots WHERE workflow = $1 AND key = $2",
        &[&group.workflow, &group.key],
    )
    .await
    .map_err(pg)?
    .iter()
    .map(|r| Ok(codec::decode(r.get(0), "slot")?))
    .collect()
}

async fn overrides(tx: &Transaction<'_>, workflow: &str) -> Result<Vec<LimitOverride>> {
    tx.rows(
        "SELECT record FROM flow_limits WHERE workflow = $1",
        &[&workflow],
    )
    .await
    .map_err(pg)?
    .iter()
    .map(|r| Ok(codec::decode(r.get(0), "limit")?))
    .collect()
}

async fn limit_of(tx: &Transaction<'_>, group: &Group, declared: u32) -> Result<u32> {
    Ok(flow::effective_limit(
        declared,
        &overrides(tx, &group.workflow).await?,
        group,
    ))
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
        "UPDATE runs SET record = $2 WHERE run_id = $1",
        &[&run_id, &codec::encode(&run)],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// Promotes the queued runs of `group` (locked) that take its free slots;
/// returns them.
async fn promote(tx: &Transaction<'_>, group: &Group, now_ms: u64) -> Result<Vec<RunId>> {
    let declared = lock_group(tx, group).await?.map_or(0, |g| g.declared_limit);
    let slots = group_slots(tx, group).await?;
    let limit = limit_of(tx, group, declared).await?;
    let promoted = flow::promotions(limit, &slots);
    for slot in slots.iter().filter(|s| promoted.contains(&s.run_id)) {
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
/// slot goes, and the queued runs that take a slot it frees are promoted
/// (returned).
pub(super) async fn flow_end(
    tx: &Transaction<'_>,
    run_id: &str,
    now_ms: u64,
) -> Result<Vec<RunId>> {
    let Some(row) = tx
        .row(
            "DELETE FROM flow_slots WHERE run_id = $1 RETURNING record",
            &[&run_id],
        )
        .await
        .map_err(pg)?
    else {
        return Ok(Vec::new());
    };
    let slot: Slot = codec::decode(row.get(0), "slot")?;
    if !slot.state.holds() {
        return Ok(Vec::new());
    }
    promote(tx, &slot.group(), now_ms).await
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
    // The upsert takes the group's row lock.
    tx.run(
        "INSERT INTO flow_groups (workflow, key, record) VALUES ($1, $2, $3)
         ON CONFLICT (workflow, key) DO UPDATE SET record = excluded.record",
        &[&group.workflow, &group.key, &codec::encode(&record)],
    )
    .await
    .map_err(pg)?;
    let slots = group_slots(tx, &group).await?;
    // The arrival order and the overrides in one round trip.
    let row = tx
        .row(
            "SELECT nextval('flow_seq'),
                    ARRAY(SELECT record FROM flow_limits WHERE workflow = $1)",
            &[&group.workflow],
        )
        .await
        .map_err(pg)?
        .ok_or_else(|| StoreError::Backend {
            reason: "nextval answered no row".into(),
        })?;
    let seq: i64 = row.get(0);
    let overrides = row
        .get::<_, Vec<Vec<u8>>>(1)
        .iter()
        .map(|r| Ok(codec::decode(r, "limit")?))
        .collect::<Result<Vec<LimitOverride>>>()?;
    let limit = flow::effective_limit(claim.limit, &overrides, &group);
    let plan = AdmissionPlan::decide(a, limit, &slots, u(seq));
    Ok(plan)
}

#[async_trait]
impl FlowStore for PgStore {
    async fn take_slot(&self, run_id: &str, now_ms: u64) -> Result<Option<SlotState>> {
        transact!(self, |tx| {
            let Some(row) = tx
                .row(
                    "SELECT record FROM flow_slots WHERE run_id = $1",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
            else {
                return Ok(Attempt::Done(None));
            };
            let slot: Slot = codec::decode(row.get(0), "slot")?;
            let group = slot.group();
            let declared = lock_group(tx, &group)
                .await?
                .map_or(0, |g| g.declared_limit);
            // Read again under the group's lock.
            let slots = group_slots(tx, &group).await?;
            let Some(slot) = slots.iter().find(|s| s.run_id == slot.run_id).cloned() else {
                return Ok(Attempt::Done(None));
            };
            if slot.state != SlotState::Deferred {
                return Ok(Attempt::Done(None));
            }
            let others: Vec<Slot> = slots
                .into_iter()
                .filter(|s| s.run_id != slot.run_id)
                .collect();
            let limit = limit_of(tx, &group, declared).await?;
            let (state, status) =
                match flow::decide(limit, &others, flow::OnLimit::Queue, slot.priority) {
                    flow::Decision::Take => (SlotState::Holding, RunStatus::Pending),
                    _ => (SlotState::Queued, RunStatus::Queued),
                };
            let seq: i64 = tx
                .row("SELECT nextval('flow_seq')", &[])
                .await
                .map_err(pg)?
                .map_or(0, |r| r.get(0));
            put_slot(
                tx,
                &Slot {
                    state,
                    seq: u(seq),
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
            let Some(row) = tx
                .row(
                    "SELECT record FROM flow_slots WHERE run_id = $1",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
            else {
                return Ok(Attempt::Done(None));
            };
            let slot: Slot = codec::decode(row.get(0), "slot")?;
            let group = slot.group();
            let declared = tx
                .row(
                    "SELECT record FROM flow_groups WHERE workflow = $1 AND key = $2",
                    &[&group.workflow, &group.key],
                )
                .await
                .map_err(pg)?
                .map(|r| codec::decode::<GroupRecord>(r.get(0), "concurrency group"))
                .transpose()?
                .map_or(0, |g| g.declared_limit);
            let slots = group_slots(tx, &group).await?;
            Ok(Attempt::Done(Some(RunSlot {
                position: flow::position(&slot, &slots),
                limit: limit_of(tx, &group, declared).await?,
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
            let keys: Vec<String> = match key {
                Some(k) => vec![k.to_string()],
                None => tx
                    .rows(
                        "SELECT key FROM flow_groups WHERE workflow = $1 ORDER BY key",
                        &[&workflow],
                    )
                    .await
                    .map_err(pg)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect(),
            };
            let mut promoted = Vec::new();
            for key in keys {
                let group = Group {
                    workflow: workflow.into(),
                    key,
                };
                promoted.extend(promote(tx, &group, now_ms).await?);
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
            tx.run(
                "INSERT INTO rate_windows (key, record) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &codec::encode(&flow::RateWindow::default())],
            )
            .await
            .map_err(pg)?;
            let row = tx
                .row(
                    "SELECT record FROM rate_windows WHERE key = $1 FOR UPDATE",
                    &[&key],
                )
                .await
                .map_err(pg)?;
            let mut window: flow::RateWindow = match row {
                Some(row) => codec::decode(row.get(0), "rate window")?,
                None => flow::RateWindow::default(),
            };
            // Read once the lock is held: a grant is stamped when it is made.
            let now_ms = db_now(tx).await?;
            let answer = window.take(limit, per_ms, now_ms);
            if answer.is_ok() {
                tx.run(
                    "UPDATE rate_windows SET record = $2 WHERE key = $1",
                    &[&key, &codec::encode(&window)],
                )
                .await
                .map_err(pg)?;
            }
            Ok(Attempt::Done(crate::Grant::of(answer, &window, now_ms)))
        })
    }

    async fn restamp_grant(&self, key: &str, at_ms: u64, _now_ms: u64) -> Result<()> {
        transact!(self, |tx| {
            let Some(row) = tx
                .row(
                    "SELECT record FROM rate_windows WHERE key = $1 FOR UPDATE",
                    &[&key],
                )
                .await
                .map_err(pg)?
            else {
                return Ok(Attempt::Done(()));
            };
            let mut window: flow::RateWindow = codec::decode(row.get(0), "rate window")?;
            window.restamp(at_ms, db_now(tx).await?);
            tx.run(
                "UPDATE rate_windows SET record = $2 WHERE key = $1",
                &[&key, &codec::encode(&window)],
            )
            .await
            .map_err(pg)?;
            Ok(Attempt::Done(()))
        })
    }
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
