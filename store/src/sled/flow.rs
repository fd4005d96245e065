//! Flow control on sled: `slots` (run ID to its [`Slot`]), `group_slots`
//! (group key ++ run ID, the index of a group's slots), `groups` (group key
//! to the latest [`GroupRecord`]) and `limits` (the operators'
//! overrides). One process opens a sled store, so a mutex serializes the
//! operations that decide against a group (admissions with a claim, ends
//! of runs with a slot, limit changes): each reads the group under it and
//! writes its decision in one transaction with the run it concerns.

use keel_core::flow::{
    self, Group, GroupRecord, LimitOverride, LimitRow, RunSlot, Slot, SlotState,
};
use keel_core::{RunId, RunRecord, RunStatus};
use sled::Transactional;
use sled::transaction::{TransactionalTree, UnabortableTransactionError};

use super::due::RunTx;
use super::*;
use crate::admission::AdmissionPlan;
use crate::{Admission, FlowStore};

/// A group's key: `workflow \0` then the key's length and bytes, so that
/// no key (which may hold any character) falls under another's prefix.
fn group_key(group: &Group) -> Vec<u8> {
    let mut key = key_of(&group.workflow, "");
    key.extend_from_slice(&(group.key.len() as u32).to_be_bytes());
    key.extend_from_slice(group.key.as_bytes());
    key
}

pub(super) fn slot_index_key(slot: &Slot) -> Vec<u8> {
    let mut key = group_key(&slot.group());
    key.extend_from_slice(slot.run_id.as_bytes());
    key
}

/// An override's key: `workflow \0 \0` for every key, `workflow \0 \1 key`
/// for one.
fn override_key(workflow: &str, key: Option<&str>) -> Vec<u8> {
    let mut out = key_of(workflow, "");
    match key {
        None => out.push(0),
        Some(k) => {
            out.push(1);
            out.extend_from_slice(k.as_bytes());
        }
    }
    out
}

/// What one flow decision writes, applied inside the transaction of the
/// operation it belongs to.
#[derive(Default)]
pub(super) struct FlowWrites {
    /// Slots to store (new, or in a new state).
    pub(super) put: Vec<Slot>,
    /// Slots to delete.
    pub(super) remove: Vec<Slot>,
    /// Queued runs that now hold a slot: their records become `pending`.
    pub(super) promoted: Vec<RunId>,
    pub(super) group: Option<GroupRecord>,
    /// The slot of a run that failed, kept aside (`failed_slots`).
    pub(super) park: Option<Slot>,
}

impl FlowWrites {
    /// Writes the slots and the group record.
    pub(super) fn apply(
        &self,
        slots: &TransactionalTree,
        index: &TransactionalTree,
        groups: &TransactionalTree,
    ) -> std::result::Result<(), UnabortableTransactionError> {
        for slot in &self.remove {
            slots.remove(slot.run_id.as_bytes())?;
            index.remove(slot_index_key(slot))?;
        }
        for slot in &self.put {
            let bytes = codec::encode(slot);
            slots.insert(slot.run_id.as_bytes(), bytes.as_slice())?;
            index.insert(slot_index_key(slot), bytes)?;
        }
        if let Some(group) = &self.group {
            groups.insert(group_key(&group.group), codec::encode(group))?;
        }
        Ok(())
    }

    /// Keeps a failed run's slot aside, out of its group.
    pub(super) fn park_in(&self, failed: &TransactionalTree) -> TxResult<()> {
        if let Some(slot) = &self.park {
            failed.insert(slot.run_id.as_bytes(), codec::encode(slot))?;
        }
        Ok(())
    }

    /// Marks the promoted runs `pending` (and so due).
    pub(super) fn promote(&self, t: &RunTx<'_>, now_ms: u64) -> TxResult<()> {
        for run_id in &self.promoted {
            set_status(t, run_id, RunStatus::Pending, now_ms)?;
        }
        Ok(())
    }
}

/// Rewrites a run's status inside a transaction (a run that is gone or
/// ended is left alone).
pub(super) fn set_status(
    t: &RunTx<'_>,
    run_id: &str,
    status: RunStatus,
    now_ms: u64,
) -> TxResult<()> {
    let Some(bytes) = t.runs.get(run_id.as_bytes())? else {
        return Ok(());
    };
    let mut run: RunRecord = codec::decode(&bytes, "run record")
        .map_err(|e| sled::transaction::ConflictableTransactionError::Abort(e.into()))?;
    if run.status.is_final() {
        return Ok(());
    }
    run.status = status;
    run.updated_at_ms = now_ms;
    t.put_run(&run)
}

/// Runs `body` in a transaction over a run's trees ([`RunTx`]) and the
/// slots, group slots and groups of flow control.
fn flow_tx(
    store: &SledStore,
    body: impl Fn(
        &RunTx<'_>,
        &TransactionalTree,
        &TransactionalTree,
        &TransactionalTree,
    ) -> TxResult<()>,
) -> Result<()> {
    let i = &store.inner;
    store.with_runs(&[&i.slots, &i.group_slots, &i.groups], |t, flow| {
        let [slots, index, groups] = flow else {
            unreachable!("the trees asked for")
        };
        body(t, slots, index, groups)
    })
}

impl SledStore {
    /// Serializes the decisions against groups (see the module's doc).
    pub(super) fn flow_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner
            .flow_lock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new slot's arrival order.
    pub(super) fn next_slot_seq(&self) -> Result<u64> {
        self.inner.db.generate_id().map_err(backend)
    }

    pub(super) fn slot_of(&self, run_id: &str) -> Result<Option<Slot>> {
        match self.inner.slots.get(run_id.as_bytes()).map_err(backend)? {
            Some(bytes) => Ok(Some(codec::decode(&bytes, "slot")?)),
            None => Ok(None),
        }
    }

    /// Every slot of `group` (the index holds a copy of each, written in
    /// the same transaction as the slot itself).
    pub(super) fn group_slots(&self, group: &Group) -> Result<Vec<Slot>> {
        self.inner
            .group_slots
            .scan_prefix(group_key(group))
            .values()
            .map(|v| Ok(codec::decode(&v.map_err(backend)?, "slot")?))
            .collect()
    }

    fn overrides(&self) -> Result<Vec<LimitOverride>> {
        self.inner
            .limits
            .iter()
            .values()
            .map(|v| Ok(codec::decode(&v.map_err(backend)?, "limit")?))
            .collect()
    }

    fn group_record(&self, group: &Group) -> Result<Option<GroupRecord>> {
        match self.inner.groups.get(group_key(group)).map_err(backend)? {
            Some(bytes) => Ok(Some(codec::decode(&bytes, "concurrency group")?)),
            None => Ok(None),
        }
    }

    /// The limit that holds for `group` (its declared limit `declared` if
    /// given, else the one its latest admission declared).
    pub(super) fn limit_of(&self, group: &Group, declared: Option<u32>) -> Result<u32> {
        let declared = match declared {
            Some(d) => d,
            None => self.group_record(group)?.map_or(0, |g| g.declared_limit),
        };
        Ok(flow::effective_limit(declared, &self.overrides()?, group))
    }

    /// The queued runs of `group` that take its free slots, `leaving`
    /// (if given) gone from it.
    fn promote_in(&self, group: &Group, leaving: Option<&Slot>) -> Result<FlowWrites> {
        let slots: Vec<Slot> = self
            .group_slots(group)?
            .into_iter()
            .filter(|s| leaving.is_none_or(|l| l.run_id != s.run_id))
            .collect();
        let limit = self.limit_of(group, None)?;
        let promoted = flow::promotions(limit, &slots);
        let put = slots
            .iter()
            .filter(|s| promoted.contains(&s.run_id))
            .map(|s| Slot {
                state: SlotState::Holding,
                ..s.clone()
            })
            .collect();
        Ok(FlowWrites {
            put,
            remove: leaving.into_iter().cloned().collect(),
            promoted,
            ..FlowWrites::default()
        })
    }

    /// What ending `run_id` does to its group: its slot goes (for a run
    /// that `failed`, kept aside out of its group, so that a retry asks
    /// for one again), and the queued runs that take a slot it frees are
    /// promoted. Call under [`SledStore::flow_lock`].
    pub(super) fn flow_end(&self, run_id: &str, failed: bool) -> Result<FlowWrites> {
        let Some(slot) = self.slot_of(run_id)? else {
            return Ok(FlowWrites::default());
        };
        let mut writes = if slot.state.holds() {
            self.promote_in(&slot.group(), Some(&slot))?
        } else {
            FlowWrites {
                remove: vec![slot.clone()],
                ..FlowWrites::default()
            }
        };
        if failed {
            writes.park = Some(slot);
        }
        Ok(writes)
    }

    /// Applies `writes` and the promotions' records in one transaction
    /// (made durable by the caller's sync).
    fn write_flow(&self, writes: &FlowWrites, now_ms: u64) -> Result<()> {
        flow_tx(self, |t, slots, index, groups| {
            writes.apply(slots, index, groups)?;
            writes.promote(t, now_ms)?;
            Ok(())
        })?;
        Ok(())
    }
}

impl SledStore {
    /// What admitting `a` writes; with a flow claim, call under
    /// [`SledStore::flow_lock`].
    pub(super) fn admission_plan(&self, a: &Admission<'_>) -> Result<AdmissionWrites> {
        let Some(claim) = a.flow else {
            return Ok(AdmissionWrites::from(AdmissionPlan::as_given(a)));
        };
        let group = Group {
            workflow: a.run.workflow.clone(),
            key: claim.key.into(),
        };
        let slots = self.group_slots(&group)?;
        let limit = self.limit_of(&group, Some(claim.limit))?;
        let mut plan = AdmissionPlan::decide(a, limit, &slots, self.next_slot_seq()?);
        // The group's record is written only when the declaration changed.
        if plan.group.is_some() && self.group_record(&group)? == plan.group {
            plan.group = None;
        }
        Ok(AdmissionWrites::from(plan))
    }
}

/// An admission's plan with its flow writes in sled's form.
pub(super) struct AdmissionWrites {
    pub(super) run: RunRecord,
    pub(super) journal: Vec<keel_core::Entry>,
    pub(super) start_hook: Option<keel_core::HookRecord>,
    pub(super) flow: FlowWrites,
    pub(super) admitted: crate::Admitted,
}

impl From<AdmissionPlan> for AdmissionWrites {
    fn from(plan: AdmissionPlan) -> Self {
        AdmissionWrites {
            run: plan.run,
            journal: plan.journal,
            start_hook: plan.start_hook,
            flow: FlowWrites {
                put: plan.slots,
                group: plan.group,
                ..FlowWrites::default()
            },
            admitted: plan.admitted,
        }
    }
}

#[async_trait]
impl FlowStore for SledStore {
    async fn rearm_slot(&self, run_id: &str) -> Result<bool> {
        {
            let _flow = self.flow_lock();
            let i = &self.inner;
            let Some(bytes) = i.failed_slots.get(run_id.as_bytes()).map_err(backend)? else {
                // Rearmed already (by a retry whose write did not land).
                return Ok(self
                    .slot_of(run_id)?
                    .is_some_and(|s| s.state == SlotState::Deferred));
            };
            let slot: Slot = codec::decode(&bytes, "slot")?;
            let writes = FlowWrites {
                put: vec![Slot {
                    state: SlotState::Deferred,
                    ..slot
                }],
                ..FlowWrites::default()
            };
            (&i.slots, &i.group_slots, &i.groups, &i.failed_slots).transaction(
                |(slots, index, groups, failed)| {
                    writes.apply(slots, index, groups)?;
                    failed.remove(run_id.as_bytes())?;
                    Ok::<_, sled::transaction::ConflictableTransactionError<StoreError>>(())
                },
            )?;
        }
        self.sync().await?;
        Ok(true)
    }

    async fn take_slot(&self, run_id: &str, now_ms: u64) -> Result<Option<SlotState>> {
        let state = {
            let _flow = self.flow_lock();
            let Some(slot) = self.slot_of(run_id)? else {
                return Ok(None);
            };
            if slot.state != SlotState::Deferred {
                return Ok(None);
            }
            let group = slot.group();
            let others: Vec<Slot> = self
                .group_slots(&group)?
                .into_iter()
                .filter(|s| s.run_id != slot.run_id)
                .collect();
            let limit = self.limit_of(&group, None)?;
            let state = match flow::decide(limit, &others, flow::OnLimit::Queue, slot.priority) {
                flow::Decision::Take => SlotState::Holding,
                _ => SlotState::Queued,
            };
            let status = match state {
                SlotState::Holding => RunStatus::Pending,
                _ => RunStatus::Queued,
            };
            let writes = FlowWrites {
                put: vec![Slot {
                    state,
                    seq: self.next_slot_seq()?,
                    ..slot
                }],
                ..FlowWrites::default()
            };
            flow_tx(self, |t, slots, index, groups| {
                writes.apply(slots, index, groups)?;
                set_status(t, run_id, status, now_ms)?;
                Ok(())
            })?;
            state
        };
        self.sync().await?;
        Ok(Some(state))
    }

    async fn run_slot(&self, run_id: &str) -> Result<Option<RunSlot>> {
        let Some(slot) = self.slot_of(run_id)? else {
            return Ok(None);
        };
        let group = slot.group();
        let slots = self.group_slots(&group)?;
        Ok(Some(RunSlot {
            position: flow::position(&slot, &slots),
            limit: self.limit_of(&group, None)?,
            key: slot.key,
            state: slot.state,
            priority: slot.priority,
        }))
    }

    async fn set_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: Option<u32>,
        now_ms: u64,
    ) -> Result<Vec<RunId>> {
        self.room()?;
        let mut promoted = Vec::new();
        {
            let _flow = self.flow_lock();
            let okey = override_key(workflow, key);
            match limit {
                Some(limit) => {
                    let o = LimitOverride {
                        workflow: workflow.into(),
                        key: key.map(str::to_string),
                        limit,
                    };
                    self.inner
                        .limits
                        .insert(okey, codec::encode(&o))
                        .map_err(backend)?
                }
                None => self.inner.limits.remove(okey).map_err(backend)?,
            };
            let groups: Vec<Group> = match key {
                Some(k) => vec![Group {
                    workflow: workflow.into(),
                    key: k.into(),
                }],
                None => self
                    .inner
                    .groups
                    .scan_prefix(key_of(workflow, ""))
                    .values()
                    .map(|v| {
                        let g: GroupRecord = codec::decode(&v.map_err(backend)?, "group")?;
                        Ok(g.group)
                    })
                    .collect::<Result<_>>()?,
            };
            for group in groups {
                let writes = self.promote_in(&group, None)?;
                self.write_flow(&writes, now_ms)?;
                promoted.extend(writes.promoted);
            }
        }
        self.sync().await?;
        Ok(promoted)
    }

    async fn limit_rows(&self) -> Result<Vec<LimitRow>> {
        let groups: Vec<GroupRecord> = self
            .inner
            .groups
            .iter()
            .values()
            .map(|v| Ok(codec::decode(&v.map_err(backend)?, "group")?))
            .collect::<Result<_>>()?;
        let slots: Vec<Slot> = self
            .inner
            .slots
            .iter()
            .values()
            .map(|v| Ok(codec::decode(&v.map_err(backend)?, "slot")?))
            .collect::<Result<_>>()?;
        Ok(flow::limit_rows(&groups, &slots, &self.overrides()?))
    }

    async fn limited_workflows(&self) -> Result<Vec<String>> {
        let mut workflows = std::collections::BTreeSet::new();
        for key in self.inner.groups.iter().keys() {
            let key = key.map_err(backend)?;
            let workflow = key.split(|b| *b == 0).next().unwrap_or_default();
            workflows.insert(String::from_utf8_lossy(workflow).into_owned());
        }
        Ok(workflows.into_iter().collect())
    }
}

#[async_trait]
impl crate::RateStore for SledStore {
    async fn take_grant(
        &self,
        key: &str,
        limit: u32,
        per_ms: u64,
        now_ms: u64,
    ) -> Result<crate::Grant> {
        self.update(
            &self.inner.rates,
            key,
            "rate window",
            |w: &mut flow::RateWindow| {
                let answer = w.take(limit, per_ms, now_ms);
                (crate::Grant::of(answer, w, now_ms), answer.is_ok())
            },
        )
    }

    async fn restamp_grant(&self, key: &str, at_ms: u64, now_ms: u64) -> Result<()> {
        self.update(
            &self.inner.rates,
            key,
            "rate window",
            |w: &mut flow::RateWindow| {
                w.restamp(at_ms, now_ms);
                ((), !w.grants.is_empty())
            },
        )
    }

    async fn take_permit(
        &self,
        key: &str,
        holder: &str,
        limit: u32,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<crate::Grant> {
        self.update(
            &self.inner.permits,
            key,
            "permits",
            |p: &mut flow::Permits| {
                let answer = p.take(holder, limit, now_ms, ttl_ms);
                (crate::Grant::of_permit(answer, now_ms), true)
            },
        )
    }

    async fn release_permit(&self, key: &str, holder: &str) -> Result<()> {
        self.update(
            &self.inner.permits,
            key,
            "permits",
            |p: &mut flow::Permits| ((), p.release(holder)),
        )
    }
}

impl SledStore {
    /// Reads the record of `key` in `tree` (the default if none), lets `f`
    /// change it and writes it back if `f` says it changed, under
    /// [`SledStore::flow_lock`]; returns what `f` answered.
    fn update<T, A>(
        &self,
        tree: &sled::Tree,
        key: &str,
        what: &'static str,
        f: impl FnOnce(&mut T) -> (A, bool),
    ) -> Result<A>
    where
        T: Default + codec::Stored,
    {
        let _flow = self.flow_lock();
        let mut record: T = match tree.get(key).map_err(backend)? {
            Some(bytes) => codec::decode(&bytes, what)?,
            None => T::default(),
        };
        let (answer, changed) = f(&mut record);
        if changed {
            tree.insert(key, codec::encode(&record)).map_err(backend)?;
        }
        Ok(answer)
    }
}
