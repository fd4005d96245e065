//! Leases and due work on sled: each run's driving state (its lease, its
//! record's next due time, whether something woke it: [`Driving`], in the
//! `leases` tree), the `due` tree that orders live runs by due time
//! (`keel_core::due`), the `held` tree of runs whose lease has an owner,
//! and the `counts` tree of live runs by status.
//!
//! Every write of a run's record or driving state goes through [`RunTx`]
//! inside the sled transaction that makes it, so the index never disagrees
//! with the records: a worker reads the front of `due` and nothing else.

use keel_core::codec;
use keel_core::due::{self, DueState};
use keel_core::{RunRecord, RunStatus};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

use super::runs::TxResult;
use super::*;
use crate::{Lease, LeaseStore, LiveCounts, LostLease};

/// What sled keeps of a run's driving: its lease (the epoch outlives
/// releases), what its record says of when it is next due, whether
/// something woke it since its lease was last taken, and the live status
/// it is counted under.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Driving {
    /// Empty when released.
    pub(super) owner: String,
    pub(super) epoch: u64,
    pub(super) expires_at_ms: u64,
    /// `keel_core::due::next_at` of its record, or earlier for a retry.
    pub(super) next_at_ms: Option<u64>,
    pub(super) woken: bool,
    /// The status the run is counted under in `counts` (with its
    /// workflow), while it is live.
    pub(super) counted: Option<RunStatus>,
}

/// The layout of a run's lease before its driving state was kept with it.
#[derive(serde::Deserialize)]
struct LeaseV1 {
    owner: String,
    epoch: u64,
    expires_at_ms: u64,
}

impl codec::Stored for Driving {
    const VERSION: u16 = 2;

    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        (version == 1).then(|| {
            codec::decode_layout::<LeaseV1>(bytes).map(|l| Driving {
                owner: l.owner,
                epoch: l.epoch,
                expires_at_ms: l.expires_at_ms,
                ..Driving::default()
            })
        })
    }
}

impl Driving {
    /// The run's due time (`keel_core::due`).
    pub(super) fn due_at(&self) -> Option<u64> {
        DueState {
            next_at_ms: self.next_at_ms,
            woken: self.woken,
            leased_until_ms: (!self.owner.is_empty()).then_some(self.expires_at_ms),
        }
        .due_at()
    }

    pub(super) fn is(&self, lease: &Lease) -> bool {
        self.owner == lease.owner && self.epoch == lease.epoch
    }

    pub(super) fn lease(&self, run_id: &str) -> Lease {
        Lease {
            took_over: None,
            run_id: run_id.into(),
            owner: self.owner.clone(),
            epoch: self.epoch,
            expires_at_ms: self.expires_at_ms,
        }
    }

    /// Taken by `owner` until `expires_at_ms`: a new epoch, and the wake
    /// taken with it.
    pub(super) fn take(&mut self, owner: &str, expires_at_ms: u64) {
        self.owner = owner.into();
        self.epoch += 1;
        self.expires_at_ms = expires_at_ms;
        self.woken = false;
    }

    fn release(&mut self) {
        self.owner.clear();
        self.expires_at_ms = 0;
    }
}

/// The expiry of a lease voided at the store's opening: its owner's
/// process is gone.
const VOIDED: u64 = 0;

/// The trees a run's lease and due time live in, inside a transaction.
pub(super) struct DueTx<'a> {
    pub(super) leases: &'a TransactionalTree,
    pub(super) due: &'a TransactionalTree,
    pub(super) held: &'a TransactionalTree,
}

impl DueTx<'_> {
    /// The run's driving state (the default for a run never written).
    pub(super) fn driving(&self, run_id: &str) -> TxResult<Driving> {
        match self.leases.get(run_id.as_bytes())? {
            Some(bytes) => codec::decode(&bytes, "lease")
                .map_err(|e| ConflictableTransactionError::Abort(e.into())),
            None => Ok(Driving::default()),
        }
    }

    /// Changes the run's driving state by `change`, moving it in the due
    /// index and `held` accordingly; returns the state written.
    pub(super) fn change(
        &self,
        run_id: &str,
        change: impl FnOnce(&mut Driving),
    ) -> TxResult<Driving> {
        let old = self.driving(run_id)?;
        let mut new = old.clone();
        change(&mut new);
        if new == old {
            return Ok(new);
        }
        if old.due_at() != new.due_at() {
            if let Some(at) = old.due_at() {
                self.due.remove(due::index_key(at, run_id))?;
            }
            if let Some(at) = new.due_at() {
                self.due.insert(due::index_key(at, run_id), &[])?;
            }
        }
        match new.owner.is_empty() {
            true => self.held.remove(run_id.as_bytes())?,
            false => self.held.insert(run_id.as_bytes(), &[])?,
        };
        self.leases.insert(run_id.as_bytes(), codec::encode(&new))?;
        Ok(new)
    }
}

/// The trees every write of a run's record goes through, inside a
/// transaction: the record, the indexes of live, listed and ended runs,
/// the live counts and the run's driving state.
pub(super) struct RunTx<'a> {
    pub(super) runs: &'a TransactionalTree,
    pub(super) live: &'a TransactionalTree,
    pub(super) created: &'a TransactionalTree,
    pub(super) ended: &'a TransactionalTree,
    pub(super) counts: &'a TransactionalTree,
    pub(super) due: DueTx<'a>,
}

/// How many trees [`SledStore::with_runs`] puts before the caller's.
const RUN_TREES: usize = 8;

impl RunTx<'_> {
    /// Writes `run`'s record, keeping its place among the live runs, the
    /// live counts and its due time; an ended run's lease and wake go
    /// with its end.
    pub(super) fn put_run(&self, run: &RunRecord) -> TxResult<()> {
        let id = run.run_id.as_str();
        let live = !run.status.is_final();
        let listed = super::runs::created_key(&keel_core::RunCursor::of(run));
        match live {
            true => {
                self.live.insert(id.as_bytes(), &[])?;
                self.ended.remove(listed.as_slice())?;
            }
            false => {
                self.live.remove(id.as_bytes())?;
                self.ended.insert(listed.as_slice(), &[])?;
            }
        };
        self.created.insert(listed, &[])?;
        self.runs.insert(id.as_bytes(), codec::encode(run))?;
        let counted = live.then_some(run.status);
        let was = self.due.driving(id)?.counted;
        if was != counted {
            self.count(&run.workflow, was, -1)?;
            self.count(&run.workflow, counted, 1)?;
        }
        self.due.change(id, |d| {
            d.next_at_ms = due::next_at(run);
            d.counted = counted;
            if !live {
                d.release();
                d.woken = false;
            }
        })?;
        Ok(())
    }

    /// Marks a live run woken: due at once unless a lease is held, and at
    /// once when it is released. A run that has ended is left alone.
    pub(super) fn wake(&self, run_id: &str) -> TxResult<()> {
        if self.live.get(run_id.as_bytes())?.is_some() {
            self.due.change(run_id, |d| d.woken = true)?;
        }
        Ok(())
    }

    /// Counts `by` more live runs of `workflow` in `status` (under the key
    /// `workflow \0 status`).
    fn count(&self, workflow: &str, status: Option<RunStatus>, by: i64) -> TxResult<()> {
        let Some(status) = status else {
            return Ok(());
        };
        let key = key_of(workflow, status.as_str());
        let n = self.counts.get(&key)?.map_or(0, |v| read_u64(&v));
        match n.saturating_add_signed(by) {
            0 => self.counts.remove(key)?,
            n => self.counts.insert(key, &n.to_be_bytes())?,
        };
        Ok(())
    }
}

fn read_u64(bytes: &[u8]) -> u64 {
    bytes.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

impl SledStore {
    /// Runs `body` in one transaction over the trees of a run's record
    /// ([`RunTx`]) and `extra`, whose views `body` gets in that order.
    pub(super) fn with_runs<T>(
        &self,
        extra: &[&sled::Tree],
        body: impl Fn(&RunTx<'_>, &[TransactionalTree]) -> TxResult<T>,
    ) -> Result<T> {
        let i = &self.inner;
        let mut trees: Vec<&sled::Tree> = vec![
            &i.runs, &i.live, &i.created, &i.ended, &i.counts, &i.leases, &i.due, &i.held,
        ];
        trees.extend_from_slice(extra);
        Ok(trees
            .as_slice()
            .transaction(|views: &Vec<TransactionalTree>| {
                let run_tx = RunTx {
                    runs: &views[0],
                    live: &views[1],
                    created: &views[2],
                    ended: &views[3],
                    counts: &views[4],
                    due: DueTx {
                        leases: &views[5],
                        due: &views[6],
                        held: &views[7],
                    },
                };
                body(&run_tx, &views[RUN_TREES..])
            })?)
    }

    /// Runs `body` in a transaction over the trees of [`RunTx`].
    pub(super) fn run_tx<T>(&self, body: impl Fn(&RunTx<'_>) -> TxResult<T>) -> Result<T> {
        self.with_runs(&[], |t, _| body(t))
    }

    /// Runs `body` in a transaction over the trees of [`DueTx`].
    pub(super) fn due_tx<T>(&self, body: impl Fn(&DueTx<'_>) -> TxResult<T>) -> Result<T> {
        let i = &self.inner;
        Ok((&i.leases, &i.due, &i.held)
            .transaction(|(leases, due, held)| body(&DueTx { leases, due, held }))?)
    }

    /// Writes a run's record (with its index, counts and due time).
    pub(super) fn write_run(&self, run: &RunRecord) -> Result<()> {
        self.run_tx(|t| t.put_run(run))
    }

    /// A run's driving state (the default if it has none).
    pub(super) fn driving_of(&self, run_id: &str) -> Result<Driving> {
        Ok(match self.inner.leases.get(run_id).map_err(backend)? {
            Some(bytes) => codec::decode(&bytes, "lease")?,
            None => Driving::default(),
        })
    }

    /// Refuses a write fenced by a lease that is no longer the run's.
    pub(super) fn check_fence(&self, fence: Option<&Lease>) -> Result<()> {
        if let Some(fence) = fence
            && !self.driving_of(&fence.run_id)?.is(fence)
        {
            return Err(StoreError::LeaseLost {
                run_id: fence.run_id.clone(),
                epoch: fence.epoch,
            });
        }
        Ok(())
    }

    /// Voids every lease held: one process opens a sled store at a time,
    /// so a lease found at open belongs to a process that is gone, and its
    /// run is due at once whatever its record says (the process may have
    /// taken its wake). The lease stays its dead owner's, expired, so that
    /// the take that follows names the worker it takes the run over from.
    /// Reads only the runs that were held.
    pub(super) fn void_leases(&self) -> Result<()> {
        let held: Vec<String> = self
            .inner
            .held
            .iter()
            .keys()
            .map(|k| Ok(String::from_utf8_lossy(&k.map_err(backend)?).into_owned()))
            .collect::<Result<_>>()?;
        for run_id in held {
            self.run_tx(|t| {
                let live = t.live.get(run_id.as_bytes())?.is_some();
                t.due.change(&run_id, |d| match live {
                    true => {
                        d.expires_at_ms = VOIDED;
                        d.woken = true;
                    }
                    false => d.release(),
                })?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Takes `run_id`'s lease for `owner` if it is free or expired at
    /// `now_ms` and, with `due_by`, only if the run is due by then.
    fn take_lease(
        &self,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
        now_ms: u64,
        due_by: Option<u64>,
    ) -> Result<Option<Lease>> {
        self.due_tx(|t| {
            let held = t.driving(run_id)?;
            let free = held.owner.is_empty() || held.owner == owner || held.expires_at_ms <= now_ms;
            let due = due_by.is_none_or(|by| held.due_at().is_some_and(|at| at <= by));
            if !free || !due {
                return Ok(None);
            }
            let took_over = (!held.owner.is_empty() && held.owner != owner).then(|| LostLease {
                owner: held.owner.clone(),
                // A voided lease ended when its process stopped; this take
                // is the first moment known after that.
                expired_at_ms: match held.expires_at_ms {
                    VOIDED => now_ms,
                    at => at,
                },
            });
            let taken = t.change(run_id, |d| d.take(owner, expires_at_ms))?;
            Ok(Some(Lease {
                took_over,
                ..taken.lease(run_id)
            }))
        })
    }
}

#[async_trait]
impl LeaseStore for SledStore {
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>> {
        // Not flushed on its own: one process opens a sled store, so after a
        // restart no earlier owner runs; the next flush covers it anyway.
        self.take_lease(run_id, owner, now_ms.saturating_add(ttl_ms), now_ms, None)
    }

    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64, now_ms: u64) -> Result<Lease> {
        let renewed = self.due_tx(|t| {
            if !t.driving(&lease.run_id)?.is(lease) {
                return Ok(None);
            }
            let renewed = t.change(&lease.run_id, |d| {
                d.expires_at_ms = now_ms.saturating_add(ttl_ms);
            })?;
            Ok(Some(renewed.lease(&lease.run_id)))
        })?;
        renewed.ok_or_else(|| StoreError::LeaseLost {
            run_id: lease.run_id.clone(),
            epoch: lease.epoch,
        })
    }

    async fn release_lease(&self, lease: &Lease, again_at_ms: Option<u64>) -> Result<()> {
        self.due_tx(|t| {
            if t.driving(&lease.run_id)?.is(lease) {
                t.change(&lease.run_id, |d| {
                    d.release();
                    d.next_at_ms = again_at_ms.or(d.next_at_ms);
                })?;
            }
            Ok(())
        })
    }

    async fn claim_due(
        &self,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<Lease>> {
        let expires = now_ms.saturating_add(ttl_ms);
        let end = due::index_key(now_ms.saturating_add(1), "");
        let mut taken = Vec::new();
        for key in self.inner.due.range(..end).keys() {
            if taken.len() == limit {
                break;
            }
            let key = key.map_err(backend)?;
            let Some((_, run_id)) = due::parse_index_key(&key) else {
                continue;
            };
            // Checked again in the take's transaction: it may have moved
            // since the scan read it.
            if let Some(lease) = self.take_lease(&run_id, owner, expires, now_ms, Some(now_ms))? {
                taken.push(lease);
            }
        }
        Ok(taken)
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        let first = self.inner.due.first().map_err(backend)?;
        Ok(first.and_then(|(key, _)| due::parse_index_key(&key).map(|(at, _)| at)))
    }

    async fn held_leases(&self, now_ms: u64) -> Result<Vec<Lease>> {
        let mut held = Vec::new();
        for id in self.inner.held.iter().keys() {
            let id = String::from_utf8_lossy(&id.map_err(backend)?).into_owned();
            let driving = self.driving_of(&id)?;
            let live = self
                .inner
                .live
                .contains_key(id.as_bytes())
                .map_err(backend)?;
            if live && !driving.owner.is_empty() && driving.expires_at_ms > now_ms {
                held.push(driving.lease(&id));
            }
        }
        Ok(held)
    }
}

impl SledStore {
    /// The live counts, as [`crate::RunStore::live_counts`] answers them.
    pub(super) fn counts(&self) -> Result<LiveCounts> {
        let mut counts = LiveCounts::default();
        for kv in self.inner.counts.iter() {
            let (key, value) = kv.map_err(backend)?;
            let key = String::from_utf8_lossy(&key);
            if let Some((workflow, status)) = key.split_once('\0')
                && let Some(status) = RunStatus::parse(status)
            {
                counts.add(workflow, status, read_u64(&value));
            }
        }
        Ok(counts)
    }
}
