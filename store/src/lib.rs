//! keel-store: the storage boundary of keel.
//!
//! The engine talks to storage through one async trait, [`Store`], made of
//! one part per concern: runs ([`RunStore`]), their journals
//! ([`JournalStore`]), leases and due work ([`LeaseStore`]), workers
//! ([`WorkerStore`]), hooks ([`HookStore`]), idempotency keys
//! ([`KeyStore`]), events ([`EventStore`]), components ([`ComponentStore`])
//! and deployments ([`DeploymentStore`]), wakes ([`WakeStore`]), cancel
//! requests ([`CancelStore`]), streams ([`StreamStore`]), retention
//! ([`RetentionStore`]), schedules ([`ScheduleStore`]), flow control
//! ([`FlowStore`], [`RateStore`]), bulk jobs ([`JobStore`]) and tokens and
//! webhooks ([`IntegrationStore`]). Their
//! methods are domain-level operations (admit a run with its key, start
//! hook and first journal entries; end a run with its hooks), each written
//! with its atomicity and durability. Every store passes the
//! [`conformance`] suite; [`sled::SledStore`] is the embedded default (one
//! process), [`postgres::PgStore`] the shared one (any number of processes
//! and machines), both cut into the same modules (runs, hooks, catalog,
//! wakes, flow, jobs, retention, schedules, streams, integrations, schema),
//! and [`faulty::FaultyStore`] wraps any store to inject failures in tests.
//!
//! Durability: unless a method says otherwise, a method that writes is
//! atomic (all of its writes or none survive a crash) and durable when it
//! returns `Ok`. A write whose durability could not be confirmed returns
//! [`StoreError::Unconfirmed`]: it may or may not have happened.

use async_trait::async_trait;
use keel_core::bulk::JobRecord;
use keel_core::flow::{LimitRow, OnLimit, RunSlot, SlotState};
use keel_core::lifecycle::{CancelRequest, PauseRequest};
use keel_core::schedule::ScheduleRecord;
use keel_core::stream::{Chunk, ChunkBody, Origin, StreamInfo};
use keel_core::webhook::WebhookRecord;
use keel_core::{
    Capabilities, Deployment, Entry, EventRecord, HookRecord, HookRegistration, KeyHold, RunCursor,
    RunId, RunRecord,
};

mod admission;
pub mod conformance;
mod continuation;
mod error;
pub mod faulty;
pub mod postgres;
pub mod sled;

pub use continuation::latest_run;
pub use error::{Result, StoreError};

/// A run to admit, with everything that must be written with it.
#[derive(Clone, Copy, Debug)]
pub struct Admission<'a> {
    /// The run's first record (status `pending`).
    pub run: &'a RunRecord,
    /// The idempotency key the run claims, if its workflow declares one.
    pub key: Option<KeyClaim<'a>>,
    /// The start hook registered with the run, if started with a token.
    pub start_hook: Option<&'a HookRecord>,
    /// The journal's first entries (the run's start).
    pub journal: &'a [Entry],
    /// The concurrency group the run enters, if its workflow declares a
    /// limit.
    pub flow: Option<FlowClaim<'a>>,
    /// The time admission decides windows and retention by.
    pub now_ms: u64,
    /// The lease the run is admitted under, for the admitting worker that
    /// drives it at once: no other worker claims it before the lease
    /// expires (or is released), and it is due when it does.
    pub lease: Option<AdmissionLease<'a>>,
    /// The run this one continues (continue-as-new), whose start hook it
    /// takes over in the same transaction.
    pub handover: Option<Handover<'a>>,
}

/// A continuation's handover ([`Admission::handover`]): if run `from`
/// still holds its start hook, the admitted run takes it over, with the
/// payloads from index `taken` on (those `from` did not take), renumbered
/// from 0, their payload IDs with them; a retried resume of one of them is
/// a duplicate delivered to the admitted run.
#[derive(Clone, Copy, Debug)]
pub struct Handover<'a> {
    /// The run that continues as the admitted one.
    pub from: &'a RunId,
    /// How many payloads of its start hook `from` took.
    pub taken: u64,
}

/// The lease a run is admitted under ([`Admission::lease`]).
#[derive(Clone, Copy, Debug)]
pub struct AdmissionLease<'a> {
    /// The admitting worker.
    pub owner: &'a str,
    pub expires_at_ms: u64,
}

impl AdmissionLease<'_> {
    /// The lease an admission of `run_id` under it took: a new run's first,
    /// epoch 1. An admitter whose admission went unconfirmed releases it
    /// with [`LeaseStore::release_lease`] so other workers drive the run at
    /// once if it was admitted; if it was not, the release changes nothing.
    pub fn lease(&self, run_id: &str) -> Lease {
        Lease {
            took_over: None,
            run_id: run_id.into(),
            owner: self.owner.into(),
            epoch: 1,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// A run's entry into its workflow's concurrency group
/// (`keel_core::flow`).
#[derive(Clone, Copy, Debug)]
pub struct FlowClaim<'a> {
    /// The key the workflow's expression evaluated to.
    pub key: &'a str,
    /// The limit the workflow declares (an operator's override wins).
    pub limit: u32,
    pub on_limit: OnLimit,
    /// 1 (highest) to 5.
    pub priority: u8,
}

/// What admission did with a run that entered a concurrency group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Stored as given: it holds a slot, has no group, or (a delayed
    /// start) asks for its slot when it comes due.
    AsGiven,
    /// Stored `queued`: its group is at the limit.
    Queued,
    /// `cancel_newest`: stored `cancelled` (`keel_core::flow::rejected`);
    /// `holder` holds the slot.
    Rejected { holder: RunId },
    /// `cancel_in_progress`: stored `queued` at the head of the queue;
    /// `victim` was chosen to be cancelled for it (the caller cancels it).
    Evicting { victim: Option<RunId> },
}

/// A claim of a workflow's idempotency key.
#[derive(Clone, Copy, Debug)]
pub struct KeyClaim<'a> {
    /// The key the workflow's expression evaluated to.
    pub key: &'a str,
    /// How long the key is held from `now_ms`.
    pub ttl_ms: u64,
}

/// How the store answered the registration of a workflow's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// Registered, bound to the run's start hook, or conflicting.
    pub registration: HookRegistration,
    /// After a force claim: the run the token was taken from.
    pub claimed_from: Option<RunId>,
}

/// What the store holds for the next payload of a run's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookPayload {
    /// The payload, as JSON.
    Ready(String),
    /// Another run took the token over; no payload will come.
    ForceClaimed(RunId),
    /// Nothing yet.
    Pending,
}

/// Where [`HookStore::deliver`] delivered a payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The run that holds the hook.
    pub run_id: RunId,
    /// The payload's place among the hook's payloads, from 0.
    pub index: u64,
    /// A payload of the same ID was delivered before; this one was not.
    pub duplicate: bool,
}

/// A payload's ID as its sender gave it (a client's payload ID, a
/// webhook's delivery ID): a payload of the same ID for the same token is
/// delivered once, while a run holds the hook and until
/// `remembered_until_ms` after its delivery, so that a sender's retry of
/// the delivery that ended its run is still answered as a duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadId<'a> {
    pub id: &'a str,
    /// The time of this delivery.
    pub now_ms: u64,
    /// Until when the ID is remembered once delivered.
    pub remembered_until_ms: u64,
}

/// How many live runs a store holds, by workflow and live status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts(pub std::collections::BTreeMap<(String, keel_core::RunStatus), u64>);

impl LiveCounts {
    /// Adds `n` runs of `workflow` in `status`.
    pub fn add(&mut self, workflow: &str, status: keel_core::RunStatus, n: u64) {
        if n > 0 {
            *self.0.entry((workflow.into(), status)).or_default() += n;
        }
    }

    /// The live runs of `workflow` in `status`.
    pub fn of(&self, workflow: &str, status: keel_core::RunStatus) -> u64 {
        self.0
            .get(&(workflow.to_string(), status))
            .copied()
            .unwrap_or(0)
    }

    /// The live runs in `status`, of every workflow.
    pub fn in_status(&self, status: keel_core::RunStatus) -> u64 {
        self.0
            .iter()
            .filter(|((_, s), _)| *s == status)
            .map(|(_, n)| n)
            .sum()
    }

    /// The workflows that have live runs.
    pub fn workflows(&self) -> std::collections::BTreeSet<&str> {
        self.0.keys().map(|(w, _)| w.as_str()).collect()
    }
}

/// A worker's exclusive right to drive a run until `expires_at_ms`. Every
/// take of a run's lease increments its epoch; writes fenced by a lease are
/// refused once another owner has taken the run (a later epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub run_id: RunId,
    /// The worker holding it.
    pub owner: String,
    pub epoch: u64,
    pub expires_at_ms: u64,
    /// The lease this take replaced: another worker's, expired without
    /// being released (that worker died or lost touch while driving the
    /// run). `None` for a run that was free, and for a renewal.
    pub took_over: Option<LostLease>,
}

/// A lease that expired under its owner without being released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostLease {
    /// The worker that held it.
    pub owner: String,
    /// When it expired; for a lease of a process that stopped before its
    /// lease expired (an embedded store opened again), the moment of the
    /// take.
    pub expired_at_ms: u64,
}

/// A worker process as it announces itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerRecord {
    /// Its lease owner name.
    pub worker_id: String,
    pub host: String,
    pub pid: u32,
    pub started_at_ms: u64,
    /// When it last said it was alive.
    pub heartbeat_at_ms: u64,
}

impl keel_core::codec::Stored for WorkerRecord {}

/// Something that moved a run on, announced to every process sharing the
/// store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A run was admitted: workers look for due runs.
    Admitted,
    /// A payload, a force claim or an awaited run's end moved this run on.
    Run(RunId),
    /// Someone asked for this run to be cancelled: its driver journals
    /// the request (`CancelStore::cancel_request`).
    Cancel(RunId),
    /// Someone asked for this run to be ended at once: its driver stops it.
    Terminate(RunId),
    /// Someone paused this run: its driver stops it at its next wait
    /// (`PauseStore::pause_request`).
    Pause(RunId),
    /// A component was deployed: cached deployments are stale.
    Deployed,
}

/// Runs: admission, records and ends.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Admits a run: stores its record, claims its idempotency key,
    /// registers its start hook and appends its first journal entries, in
    /// one atomic, durable operation. A key held within its window refuses
    /// the run with [`StoreError::IdempotencyCollision`]; a token held by
    /// another run (active, or retained after its end) refuses it with
    /// [`StoreError::HookConflict`]; a run ID the store holds already, with
    /// [`StoreError::RunExists`]. A refused run writes nothing. A run with
    /// a [`FlowClaim`] enters its group in the same transaction
    /// (`keel_core::flow::decide`), which the answer reports.
    async fn admit(&self, admission: Admission<'_>) -> Result<Admitted>;

    /// Stores a run and its whole journal, as exported elsewhere; atomic
    /// and durable. [`StoreError::RunExists`] if the store holds the run.
    async fn import(&self, run: &RunRecord, journal: &[Entry]) -> Result<()>;

    /// A run's record, or [`StoreError::RunNotFound`].
    async fn get_run(&self, run_id: &str) -> Result<RunRecord>;

    /// Every run, by run ID.
    async fn list_runs(&self) -> Result<Vec<RunRecord>>;

    /// Up to `limit` runs that sort below `before` (every run if `None`),
    /// newest first by admission time, then by run ID: one page of a
    /// listing, in that order whatever IDs the runs were given.
    async fn runs_before(&self, before: Option<&RunCursor>, limit: usize)
    -> Result<Vec<RunRecord>>;

    /// As [`RunStore::runs_before`], only the runs that have every one of
    /// `attributes` with its value: one page of a listing filtered by
    /// attributes (through an index, where the store has one).
    async fn runs_with_attributes(
        &self,
        attributes: &keel_core::Attributes,
        before: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>>;

    /// The runs that have not ended, oldest first. A record that cannot be
    /// decoded is an error, never skipped. Reads every live run: for an
    /// operator's explicit command, never for a path that repeats.
    async fn live_runs(&self) -> Result<Vec<RunRecord>>;

    /// How many live runs the store holds, by workflow and live status: counts
    /// the store keeps with every status change, read without reading runs.
    async fn live_counts(&self) -> Result<LiveCounts>;

    /// Ends a run: stores its final record, ends its hooks (a hook with
    /// retention left keeps its token, inactive; the others release it),
    /// appends the journal's last entries and wakes the runs awaiting it,
    /// atomically and durably. Returns the woken runs. A run that held a
    /// concurrency slot frees it, and the queued runs that take the free
    /// slots (`keel_core::flow::promotions`) become `pending` in the same
    /// transaction and are returned with the woken ones; a queued or
    /// deferred run leaves its queue. With `fence`, refused with [`StoreError::LeaseLost`] (nothing
    /// written) unless the run's lease is still at that owner and epoch.
    /// The run's lease is released.
    async fn end_run(
        &self,
        run: &RunRecord,
        journal: &[Entry],
        now_ms: u64,
        fence: Option<&Lease>,
    ) -> Result<Vec<RunId>>;
}

/// Leases and due work: at most one worker drives a run at a time, and
/// workers find the runs they may drive through an index ordered by when
/// each is due (`keel_core::due`), never by reading every run.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease on `run_id` for `owner` until `now_ms + ttl_ms`,
    /// unless another owner holds it unexpired (`None`); atomic and durable.
    /// Each take increments the run's epoch, so writes fenced by an older
    /// lease are refused from then on. The take consumes the run's wake
    /// ([`WakeStore::is_woken`]): while the lease is held the run is due at
    /// its expiry, so a worker that dies holding it leaves the run due.
    async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Option<Lease>>;

    /// Extends a lease still held at its epoch (and the run's due time
    /// with it), or [`StoreError::LeaseLost`].
    async fn renew_lease(&self, lease: &Lease, ttl_ms: u64, now_ms: u64) -> Result<Lease>;

    /// Gives a lease up so another worker may take the run at once; a lease
    /// already lost is left alone. The run is then due as its record says
    /// (`keel_core::due::next_at`), or at `again_at_ms` if given instead (a
    /// drive that failed for a reason outside the run, tried again then),
    /// and at once if something woke it while the lease was held.
    async fn release_lease(&self, lease: &Lease, again_at_ms: Option<u64>) -> Result<()>;

    /// Takes, for `owner` until `now_ms + ttl_ms`, the leases of up to
    /// `limit` runs due at `now_ms` (due time at or before it), earliest
    /// due first, each as [`LeaseStore::acquire_lease`] takes one; a run
    /// whose lease expired under a dead owner is due. Each take is atomic
    /// and durable; two callers never take one run. Reads only due runs.
    async fn claim_due(
        &self,
        owner: &str,
        ttl_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<Lease>>;

    /// The earliest due time among live runs (a held lease's expiry
    /// included), if any run is due ever: the front of the index.
    async fn next_due(&self) -> Result<Option<u64>>;

    /// The unexpired leases on live runs at `now_ms`, by any owner. Reads
    /// only the runs whose lease has an owner.
    async fn held_leases(&self, now_ms: u64) -> Result<Vec<Lease>>;
}

/// Journals: append-only, in sequence.
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Appends entries to a run's journal and, with them, stores the run's
    /// record if given (a status change); atomic and durable on return.
    /// Entries must continue the journal's sequence: an entry at a position
    /// the journal already holds is refused with
    /// [`StoreError::JournalConflict`]. With `fence`, refused with
    /// [`StoreError::LeaseLost`] (nothing written) unless the run's lease
    /// is still at that owner and epoch.
    async fn append(
        &self,
        run_id: &str,
        entries: &[Entry],
        run: Option<&RunRecord>,
        fence: Option<&Lease>,
    ) -> Result<()>;

    /// A run's journal, in order (empty for an unknown run).
    async fn journal(&self, run_id: &str) -> Result<Vec<Entry>>;
}

/// Workers: who drives runs, and whether they are alive.
#[async_trait]
pub trait WorkerStore: Send + Sync {
    /// Records that `worker` is alive at its `heartbeat_at_ms`.
    async fn heartbeat(&self, worker: &WorkerRecord) -> Result<()>;

    /// Every worker that announced itself and did not leave, with how many
    /// live runs it holds unexpired leases on at `now_ms`.
    async fn list_workers(&self, now_ms: u64) -> Result<Vec<(WorkerRecord, usize)>>;

    /// Forgets a worker that leaves.
    async fn remove_worker(&self, worker_id: &str) -> Result<()>;
}

/// Hooks: token-addressed inboxes owned by runs.
#[async_trait]
pub trait HookStore: Send + Sync {
    /// Registers the hook a workflow creates (`hook.command` is set); atomic
    /// and durable. The run's own start hook binds; a token another run
    /// holds is a conflict, unless `force` takes it over, which the old
    /// owner learns from [`HookStore::payload`] and a wakeup. Registering
    /// again from the same command (a recovered run) finds its own hook.
    async fn register_hook(
        &self,
        hook: &HookRecord,
        force: bool,
        now_ms: u64,
    ) -> Result<Registered>;

    /// Delivers a payload to the active hook holding `token`, after the
    /// payloads before it, and wakes its run; atomic and durable. Returns
    /// the owner, or [`StoreError::HookNotFound`].
    async fn resume_hook(&self, token: &str, payload: &str) -> Result<RunId> {
        Ok(self.deliver(token, payload, None).await?.run_id)
    }

    /// As [`HookStore::resume_hook`], and says where the payload went.
    /// With `payload_id`, a payload of that ID already delivered on `token`
    /// (to the run holding the hook, or to any run within the ID's
    /// remembrance, even one that has ended) is not delivered again: the
    /// answer names the first delivery (`duplicate`), and nothing is
    /// written.
    async fn deliver(
        &self,
        token: &str,
        payload: &str,
        payload_id: Option<PayloadId<'_>>,
    ) -> Result<Resumed>;

    /// Forgets payload IDs remembered until before `now_ms`, a bounded
    /// batch per call; how many.
    async fn purge_expired_payload_ids(&self, now_ms: u64) -> Result<u64>;

    /// The index of the payload of ID `payload_id` delivered to `run_id`'s
    /// hook on `token`, if one was.
    async fn delivered(&self, run_id: &str, token: &str, payload_id: &str) -> Result<Option<u64>>;

    /// The hook holding `token` at `now_ms` (active, or retained after its
    /// run ended), or [`StoreError::HookNotFound`].
    async fn get_hook(&self, token: &str, now_ms: u64) -> Result<HookRecord>;

    /// Every hook holding its token at `now_ms`, by token.
    async fn list_hooks(&self, now_ms: u64) -> Result<Vec<HookRecord>>;

    /// The `index`-th payload of `run_id`'s hook on `token`.
    async fn payload(&self, run_id: &str, token: &str, index: u64) -> Result<HookPayload>;

    /// Releases `run_id`'s hook on `token` at once, retention or not, and
    /// drops its unread payloads; durable.
    async fn dispose_hook(&self, run_id: &str, token: &str) -> Result<()>;

    /// Deletes hooks whose run ended and whose retention has passed;
    /// returns how many. Each is deleted only if unchanged since read.
    /// The worker calls it every second: its cost is bounded by what it
    /// deletes (an index of expiries), or by a fixed number of records
    /// examined per call, going on from where the last call stopped.
    async fn purge_expired_hooks(&self, now_ms: u64) -> Result<usize>;
}

/// Schedules: records any worker fires on time. Writes are atomic and
/// durable; an update is a compare-and-set on the revision it read, so two
/// workers deciding one schedule never both write.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Creates `schedule` at revision 0, or [`StoreError::ScheduleExists`].
    async fn create_schedule(&self, schedule: &ScheduleRecord) -> Result<()>;

    /// Writes `schedule` if the stored one is still at
    /// `schedule.revision` ([`StoreError::ScheduleConflict`] if not,
    /// [`StoreError::ScheduleNotFound`] if it is gone); the stored
    /// revision becomes `schedule.revision + 1`, which is returned.
    async fn update_schedule(&self, schedule: &ScheduleRecord) -> Result<u64>;

    /// The schedule named `name`, if any.
    async fn schedule(&self, name: &str) -> Result<Option<ScheduleRecord>>;

    /// Every schedule, by name.
    async fn list_schedules(&self) -> Result<Vec<ScheduleRecord>>;

    /// Deletes the schedule; whether there was one.
    async fn delete_schedule(&self, name: &str) -> Result<bool>;

    /// Up to `limit` schedules with work at `now_ms`
    /// ([`ScheduleRecord::is_due`]), earliest fire first.
    async fn due_schedules(&self, now_ms: u64, limit: usize) -> Result<Vec<ScheduleRecord>>;
}

/// Integrations: the secret scoped tokens are signed with, and the
/// webhooks third parties call with signed deliveries. Writes are atomic
/// and durable.
#[async_trait]
pub trait IntegrationStore: Send + Sync {
    /// The store's signing secret: `candidate` if the store had none (it
    /// is stored), otherwise the one stored first, so that every process
    /// sharing the store signs and verifies with the same one.
    async fn signing_secret(&self, candidate: &[u8]) -> Result<Vec<u8>>;

    /// Creates `webhook`, or [`StoreError::WebhookExists`].
    async fn create_webhook(&self, webhook: &WebhookRecord) -> Result<()>;

    /// The webhook `id`, if any.
    async fn webhook(&self, id: &str) -> Result<Option<WebhookRecord>>;

    /// Every webhook, by ID.
    async fn list_webhooks(&self) -> Result<Vec<WebhookRecord>>;

    /// Deletes the webhook (and what it remembers of signatures); whether
    /// there was one.
    async fn delete_webhook(&self, id: &str) -> Result<bool>;

    /// Claims `signature` of webhook `id`, remembered until `until_ms`:
    /// `true` the first time, `false` if it was claimed before and is
    /// still remembered at `now_ms` (a replay).
    async fn claim_signature(
        &self,
        id: &str,
        signature: &str,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<bool>;

    /// Forgets the signatures remembered until before `now_ms`; how many.
    /// The worker calls it every second: its cost is bounded by what it
    /// deletes (an index of expiries), or by a fixed number of records
    /// examined per call, going on from where the last call stopped.
    async fn purge_expired_signatures(&self, now_ms: u64) -> Result<u64>;
}

/// Bulk operations' jobs: records any worker carries out page by page.
/// Writes are atomic and durable; an update is a compare-and-set on the
/// revision it read, so a worker that lost a job's claim cannot write its
/// progress over another's.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Creates `job` at revision 0; [`StoreError::JobConflict`] if its ID
    /// is taken.
    async fn create_job(&self, job: &JobRecord) -> Result<()>;

    /// Writes `job` if the stored one is still at `job.revision`
    /// ([`StoreError::JobConflict`] if not, [`StoreError::JobNotFound`] if
    /// it is gone); the stored revision becomes `job.revision + 1`, which
    /// is returned.
    async fn update_job(&self, job: &JobRecord) -> Result<u64>;

    /// The job `job_id`, if any.
    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>>;

    /// Up to `limit` jobs, newest first.
    async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>>;

    /// The jobs still running (claimed or not), oldest first.
    async fn running_jobs(&self) -> Result<Vec<JobRecord>>;
}

/// Flow control: the concurrency groups, their queues and the operators'
/// limits. Every write is atomic and durable, and happens in one
/// transaction with the admissions and ends it decides against, so a
/// limit holds across every process sharing the store.
#[async_trait]
pub trait FlowStore: Send + Sync {
    /// A delayed start that came due asks for its slot: it holds one
    /// (status `pending`) or is queued (status `queued`). `None` if the run
    /// has no deferred slot (it has no group, or asked already).
    async fn take_slot(&self, run_id: &str, now_ms: u64) -> Result<Option<SlotState>>;

    /// A failed run being retried gets back the slot it held, as a
    /// deferred slot of its group (so that it asks for one, `take_slot`,
    /// when driven); whether it has one (a run of no group has none).
    /// The slot is kept aside, out of its group, from the run's failure.
    async fn rearm_slot(&self, run_id: &str) -> Result<bool>;

    /// A run's place in its group, if it has one.
    async fn run_slot(&self, run_id: &str) -> Result<Option<RunSlot>>;

    /// Sets (`Some`) or removes (`None`) the operator's limit for a
    /// workflow's every key (`key` `None`) or one key value; the queued
    /// runs that take the slots a higher limit frees become `pending` in
    /// the same transaction and are returned. A lower limit cancels
    /// nothing: runs in progress finish, and no queued run starts until
    /// the group is under its new limit.
    async fn set_limit(
        &self,
        workflow: &str,
        key: Option<&str>,
        limit: Option<u32>,
        now_ms: u64,
    ) -> Result<Vec<RunId>>;

    /// Every group and every override (`keel_core::flow::limit_rows`).
    /// Reads every slot: for an operator's explicit command.
    async fn limit_rows(&self) -> Result<Vec<LimitRow>>;

    /// The workflows that have a concurrency group (one read per group,
    /// none per run).
    async fn limited_workflows(&self) -> Result<Vec<String>>;
}

/// Step rate and concurrency limits: one sliding window of grants per
/// rate-limit key (`keel_core::flow::RateWindow`) and one set of permits
/// per step concurrency key (`keel_core::flow::Permits`), shared by every
/// process sharing the store.
#[async_trait]
pub trait RateStore: Send + Sync {
    /// Takes a grant of `key` under `limit` per `per_ms`, or says how many
    /// milliseconds to wait before asking again; atomic.
    /// sled decides at `now_ms` and keeps the windows without forcing them
    /// to disk (a restart forgets the last window's grants); PostgreSQL
    /// decides on the database's clock, read under the window's row lock,
    /// so workers whose clocks differ agree, and a grant is durable on
    /// return.
    async fn take_grant(&self, key: &str, limit: u32, per_ms: u64, now_ms: u64) -> Result<Grant>;

    /// Moves the grant of `key` made at `at_ms` to now (`now_ms` on sled,
    /// the database's clock on PostgreSQL): its attempt calls out now
    /// (`keel_core::flow::RateWindow::restamp`).
    async fn restamp_grant(&self, key: &str, at_ms: u64, now_ms: u64) -> Result<()>;

    /// Takes or renews `holder`'s permit of step concurrency key `key`
    /// under `limit`, lapsing `ttl_ms` from now unless taken again
    /// (`Granted`), or says in how many milliseconds the first permit held
    /// lapses (`Wait`); atomic. Now is `now_ms` on sled (whose permits a
    /// restart drops, since no attempt outlives its process) and the
    /// database's clock on PostgreSQL.
    async fn take_permit(
        &self,
        key: &str,
        holder: &str,
        limit: u32,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<Grant>;

    /// Gives `holder`'s permit of `key` back (nothing if it holds none).
    async fn release_permit(&self, key: &str, holder: &str) -> Result<()>;
}

/// The answer of [`RateStore::take_grant`] and [`RateStore::take_permit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Granted, stamped at this time (to restamp it by).
    Granted { at_ms: u64 },
    /// Ask again after this many milliseconds.
    Wait { ms: u64 },
}

impl Grant {
    /// The answer for what `RateWindow::take` decided at `now_ms`.
    pub(crate) fn of(
        answer: std::result::Result<(), u64>,
        window: &keel_core::flow::RateWindow,
        now_ms: u64,
    ) -> Grant {
        match answer {
            Ok(()) => Grant::Granted {
                at_ms: window.grants.last().copied().unwrap_or(now_ms),
            },
            Err(at) => Grant::Wait {
                ms: at.saturating_sub(now_ms).max(1),
            },
        }
    }

    /// The answer for what `Permits::take` decided at `now_ms`.
    pub(crate) fn of_permit(answer: std::result::Result<(), u64>, now_ms: u64) -> Grant {
        match answer {
            Ok(()) => Grant::Granted { at_ms: now_ms },
            Err(ms) => Grant::Wait { ms },
        }
    }
}

/// TTL idempotency keys.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Who holds a workflow's idempotency key, and until when.
    async fn key_hold(&self, workflow: &str, key: &str) -> Result<Option<KeyHold>>;

    /// Deletes the keys whose window has passed; returns how many.
    /// The worker calls it every second: its cost is bounded by what it
    /// deletes (an index of expiries), or by a fixed number of records
    /// examined per call, going on from where the last call stopped.
    async fn purge_expired_keys(&self, now_ms: u64) -> Result<usize>;
}

/// Ingested events and the workflows subscribed to them.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Records that `workflow` of component `hash` starts on `event_key`.
    async fn subscribe(&self, event_key: &str, workflow: &str, hash: &str) -> Result<()>;

    /// The `(workflow, component hash)` pairs subscribed to `event_key`.
    async fn subscribers(&self, event_key: &str) -> Result<Vec<(String, String)>>;

    /// Stores an ingested event; durable.
    async fn put_event(&self, event: &EventRecord) -> Result<()>;

    /// Every event, oldest first.
    async fn list_events(&self) -> Result<Vec<EventRecord>>;
}

/// Components, stored by content hash so that any worker can run any run.
#[async_trait]
pub trait ComponentStore: Send + Sync {
    /// Stores a component's bytes under their hash (once), and records
    /// `now_ms` as when it was last stored (every put, so that a prune
    /// spares a component a start or a deploy is about to reference);
    /// durable.
    async fn put_component(&self, hash: &str, bytes: &[u8], now_ms: u64) -> Result<()>;

    /// A component's bytes, or [`StoreError::ComponentNotFound`].
    async fn get_component(&self, hash: &str) -> Result<Vec<u8>>;

    /// Every stored component: hash, size, when it was last stored (0 for
    /// one stored before keel recorded it).
    async fn components(&self) -> Result<Vec<StoredComponent>>;

    /// Deletes those of `hashes` last stored at or before
    /// `stored_before_ms` (one stored again since is kept), atomically for
    /// each; durable. Returns the deleted components.
    async fn delete_components(
        &self,
        hashes: &[String],
        stored_before_ms: u64,
    ) -> Result<Vec<StoredComponent>>;
}

/// A stored component, without its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredComponent {
    pub hash: String,
    pub size_bytes: u64,
    /// When it was last stored ([`ComponentStore::put_component`]).
    pub stored_at_ms: u64,
}

/// Deployments: components registered under a name with their grants and
/// limits, one per component hash.
#[async_trait]
pub trait DeploymentStore: Send + Sync {
    /// Stores a deployment, replacing the one of the same hash; durable.
    /// The component's bytes are stored with [`ComponentStore::put_component`].
    async fn put_deployment(&self, deployment: &Deployment) -> Result<()>;

    /// Every deployment, in no particular order.
    async fn deployments(&self) -> Result<Vec<Deployment>>;

    /// The deployment of a component hash, if it was deployed.
    async fn deployment(&self, hash: &str) -> Result<Option<Deployment>>;

    /// Deletes the deployment of `hash` if it is still the one deployed at
    /// `deployed_at_ms` (a redeploy since keeps it); whether it did;
    /// durable.
    async fn delete_deployment(&self, hash: &str, deployed_at_ms: u64) -> Result<bool>;
}

/// Wakes: runs that something outside them moved on (a payload, a force
/// claim, an awaited run's end, a cancel request), which makes them due at
/// once (`keel_core::due`), and the announcement of such moves to every
/// process sharing the store.
#[async_trait]
pub trait WakeStore: Send + Sync {
    /// Records that `watcher` waits for `run_id` to end; durable.
    async fn watch(&self, run_id: &str, watcher: &str) -> Result<()>;

    /// Whether something woke the run since its lease was last taken
    /// (which makes it due at once once no lease is held).
    async fn is_woken(&self, run_id: &str) -> Result<bool>;

    /// Wakes announced by other processes sharing the store, as they
    /// happen; `None` for a store only one process opens.
    fn wake_stream(&self) -> Option<tokio::sync::broadcast::Receiver<Wake>> {
        None
    }

    /// Announces `wake` to the other processes sharing the store (nothing
    /// for a store only one process opens).
    async fn announce(&self, _wake: &Wake) -> Result<()> {
        Ok(())
    }
}

/// Cancel requests: asked by anyone, journaled by the run's driver, which
/// alone writes the run's journal.
#[async_trait]
pub trait CancelStore: Send + Sync {
    /// Records `request` for a live run and wakes it (a wakeup and
    /// [`Wake::Cancel`]), atomically and durably. A run asked before keeps
    /// its first request, which is returned instead. `None` if the run has
    /// ended (nothing is written); [`StoreError::RunNotFound`] if there is
    /// no such run.
    async fn request_cancel(
        &self,
        run_id: &str,
        request: &CancelRequest,
    ) -> Result<Option<CancelRequest>>;

    /// The run's cancel request, if one was made and the run has not
    /// ended cancelled.
    async fn cancel_request(&self, run_id: &str) -> Result<Option<CancelRequest>>;
}

/// Pauses (`keel_core::lifecycle::PauseRequest`): holds on live runs,
/// kept until lifted. The run's driver journals a pause when it takes hold
/// (`Fact::RunPaused`, the record `paused`) and its lift when the run goes
/// on (`Fact::RunResumed`).
#[async_trait]
pub trait PauseStore: Send + Sync {
    /// Records `request` for a live run and wakes it (a wakeup and
    /// [`Wake::Pause`]), atomically and durably. A run paused already
    /// keeps its first request, which is returned instead. `None` if the
    /// run has ended (nothing is written); [`StoreError::RunNotFound`] if
    /// there is no such run.
    async fn request_pause(
        &self,
        run_id: &str,
        request: &PauseRequest,
    ) -> Result<Option<PauseRequest>>;

    /// Lifts the run's pause and wakes it (a wakeup and [`Wake::Run`]),
    /// atomically and durably; returns the pause lifted, or `None` if none
    /// held it (nothing is written). [`StoreError::RunNotFound`] if there
    /// is no such run.
    async fn lift_pause(&self, run_id: &str) -> Result<Option<PauseRequest>>;

    /// The pause that holds the run, if one does.
    async fn pause_request(&self, run_id: &str) -> Result<Option<PauseRequest>>;
}

/// Streams a run writes (`keel_core::stream`). A workflow's writes are
/// stored with the journal entries that record them, by
/// [`JournalStore::append`] (and [`RunStore::import`]) in the same atomic
/// write; a step attempt's are stored here as it makes them.
#[async_trait]
pub trait StreamStore: Send + Sync {
    /// Stores a step attempt's write of `body` to `run_id`'s stream
    /// `stream` (after a restart marker, when an earlier attempt of the
    /// step wrote to it: `StreamState::accept`), atomically and durably;
    /// returns the chunks stored. Refused with [`StoreError::StreamRefused`]
    /// on a closed stream, past `max_run_bytes` of the run's streams, or a
    /// new stream past the most a run may have.
    async fn write_stream(
        &self,
        run_id: &str,
        stream: &str,
        origin: &Origin,
        body: ChunkBody,
        now_ms: u64,
        max_run_bytes: u64,
    ) -> Result<Vec<Chunk>>;

    /// Attempt `attempt` of step `step_id` of `run_id` begins: each of the
    /// run's streams an earlier attempt of the step wrote to gets a restart
    /// marker; durable. Returns the markers stored.
    async fn begin_attempt(
        &self,
        run_id: &str,
        step_id: &str,
        attempt: u32,
        now_ms: u64,
    ) -> Result<Vec<Chunk>>;

    /// Up to `limit` chunks of `run_id`'s stream `stream` from index
    /// `from`, in order (none for an unknown run or stream).
    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Chunk>>;

    /// The streams of `run_id`, by name.
    async fn streams(&self, run_id: &str) -> Result<Vec<StreamInfo>>;
}

/// Retention: the ended runs a purge looks at, their deletion with
/// everything stored for them, and what the store holds.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Up to `limit` ended runs admitted before `created_before_ms` that
    /// sort after `after` (from the oldest if `None`), oldest first by
    /// admission time, then by run ID: the runs a purge decides on, page
    /// by page (`keel_core::retention::RetentionRules::is_due`).
    async fn ended_runs(
        &self,
        created_before_ms: u64,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>>;

    /// Deletes those of `run_ids` that have ended, each with everything
    /// stored for it (record, journal, hooks and their payloads and
    /// claims, wakeups, watches, lease, slots, cancel request), atomically
    /// per call and durably; returns what was deleted. A live run, an
    /// unknown ID and (on a store processes share) a run another process
    /// is deleting at the same time are left out, so that two purges never
    /// delete one run twice. Idempotency keys stay until their window
    /// passes (`KeyStore::purge_expired_keys`). With `tokens_at_ms`, a
    /// hook whose token retention runs past that time stays (inactive, its
    /// token still refused to other runs) until
    /// `HookStore::purge_expired_hooks`: a purge keeps a start token's
    /// promise; a deletion on request (`None`) erases it too.
    async fn delete_runs(
        &self,
        run_ids: &[RunId],
        tokens_at_ms: Option<u64>,
    ) -> Result<keel_core::retention::Deleted>;

    /// Deletes the events ingested before `before_ms`; how many.
    async fn delete_events_before(&self, before_ms: u64) -> Result<u64>;

    /// What the store holds, counted now.
    async fn stats(&self) -> Result<keel_core::retention::StoreStats>;
}

/// A store: every part, and what it supports.
pub trait Store:
    RunStore
    + JournalStore
    + LeaseStore
    + WorkerStore
    + HookStore
    + KeyStore
    + EventStore
    + ComponentStore
    + DeploymentStore
    + WakeStore
    + ScheduleStore
    + JobStore
    + FlowStore
    + RateStore
    + CancelStore
    + PauseStore
    + RetentionStore
    + StreamStore
    + IntegrationStore
{
    /// What this store supports; a start needing more is refused before
    /// anything is written.
    fn capabilities(&self) -> Capabilities;

    /// Where the store is, for messages (a path, a URL without secrets).
    fn location(&self) -> String;
}
