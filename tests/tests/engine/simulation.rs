//! The engine's simulation: seeded, model-based sequences of operations on
//! live runs and of faults, driven through the real engine against real
//! guests on this suite's store (sled, or PostgreSQL with
//! `KEEL_TEST_STORE=postgres`), on the engine's manual clock, with keel's
//! promises checked after every step. proptest-state-machine generates the
//! sequences from a reference model (which runs exist, whether a next build
//! is deployed) and shrinks a failing one to the fewest steps that still
//! fail.
//!
//! The operations: starts of a billing run (a charge keyed by its step ID,
//! then a hook) and of a budgeted publish (a saga whose charge may fail for
//! good and be compensated), drives and worker passes, payloads (duplicate
//! payload IDs included), pause, resume, cancel, the deploy of a next build
//! with a patch marker before the charge, upgrades (dry, real, ramped),
//! restarts and retries (on the run's build or the next), forks, and the
//! faults: a crash at a journal write (lost or landed unheard) followed by a
//! takeover from a new worker, reads that fail, writes reported
//! unconfirmed, a payment API that refuses, clock jumps.
//!
//! The promises, checked after each step (`Sim::check`):
//! - each logical step's effect goes out under one step ID for the life of
//!   its run, seen from outside: every `Idempotency-Key` the payment API got
//!   from a run is the one ID its journal records for its charge;
//! - nothing compensated is reused: a run whose compensation ran never
//!   completes;
//! - no paused run is driven: between a `run_paused` and its `run_resumed`
//!   no step starts and no payload or timer reaches the code;
//! - no run is driven without end: a drain of worker passes on a frozen
//!   clock comes to rest;
//! - every answer given stays true: a run seen ended stays so (unless
//!   restarted or retried), a pause acknowledged holds until a resume is, a
//!   duplicate payload ID is answered as a duplicate of the same run;
//! - every journal replays on its build;
//! - nothing acknowledged is lost: a journal read once is a prefix of every
//!   later read, across crashes and takeovers.
//!
//! Budget: `KEEL_SIM_CASES` sequences (500 on sled, 100 on PostgreSQL by
//! default) of up to 24 steps. A run prints its seed; `KEEL_SIM_SEED=N`
//! runs that seed again, and proptest prints the shrunk failing sequence
//! and keeps it in `simulation.proptest-regressions` beside this file
//! (a failing seed is a test to keep: commit it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use keel_host::core::deployment::Target;
use keel_host::core::index::effective_entries;
use keel_host::core::journal::{Entry, Fact};
use keel_host::core::restart::RestartPoint;
use keel_host::core::{RunRecord, RunStatus};
use keel_host::store::faulty::{Crash, CrashWhen};
use keel_host::{DeploySpec, ForkOptions, Grants, Keel, StartOptions};
use keel_payment_api::PaymentApi;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence, RngSeed};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

use crate::common::{self, Backend, ManualClock, TestConfig, TestStore};

const T0: u64 = 1_800_000_000_000;
/// Most runs a sequence starts (forks come on top).
const MAX_RUNS: usize = 4;
/// Worker passes a drain may take before it must have come to rest.
const DRAIN_PASSES: usize = 12;

/// The workflows a sequence starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `billing`: a step, the charge, then a hook `sim:N`.
    Billing,
    /// `publish_on_budget`: reserve, charge; a charge that fails for good
    /// is compensated by releasing the budget.
    Budget,
    /// `countdown` from 2: a step and a continuation as new per number,
    /// three runs in a chain.
    Countdown,
}

impl Kind {
    fn workflow(self) -> &'static str {
        match self {
            Kind::Billing => "billing",
            Kind::Budget => "publish_on_budget",
            Kind::Countdown => "countdown",
        }
    }

    /// The step a restart or a fork "from the start" names.
    fn first_step(self) -> &'static str {
        match self {
            Kind::Billing | Kind::Countdown => "noop",
            Kind::Budget => "reserve_budget",
        }
    }
}

/// One step of a sequence. Runs are named by their index among the runs
/// the sequence started.
#[derive(Clone, Debug)]
enum Op {
    Start(Kind),
    Drive(usize),
    /// Worker passes until nothing is due (bounded: more is a spin).
    Drain,
    /// A payload for the run's hook, with payload ID `N-ID`.
    Deliver {
        run: usize,
        id: u8,
    },
    Pause(usize),
    Resume(usize),
    Cancel(usize),
    /// Deploys the next build (a patch marker before the charge).
    DeployNext,
    Upgrade {
        dry_run: bool,
        ramp: Option<u8>,
    },
    Restart {
        run: usize,
        from_charge: bool,
        on_next: bool,
    },
    Retry {
        run: usize,
        on_next: bool,
    },
    Fork {
        run: usize,
        from_charge: bool,
    },
    /// The payment API refuses every charge (503), or takes them again.
    Refusing(bool),
    /// Moves the engine's clock on: timers, backoffs, leases.
    Clock {
        secs: u64,
    },
    /// A crash at the `nth` journal write from now (the write lost, or
    /// landed unheard), while the workers drain; then a new worker takes
    /// over after the dead one's leases expire.
    Crash {
        nth: u64,
        landed: bool,
    },
    /// Reads of runs and journals fail for one worker pass.
    FailingReads,
    /// The next write lands but is reported unconfirmed, in one pass.
    Unconfirmed,
    /// A bulk job over every run of a workflow, carried out at once.
    Bulk {
        action: BulkOp,
        kind: Kind,
    },
}

/// The bulk actions a sequence takes.
#[derive(Clone, Copy, Debug)]
enum BulkOp {
    Pause,
    Resume,
    Cancel,
    Retry,
}

/// What the model knows: which runs exist (by kind) and whether the next
/// build is deployed. Everything else is the engine's to decide; the checks
/// hold whatever it decides.
#[derive(Clone, Debug, Default)]
struct Model {
    runs: Vec<Kind>,
    next_build: bool,
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(model: &Model) -> BoxedStrategy<Op> {
        let kind = prop_oneof![
            3 => Just(Kind::Billing),
            3 => Just(Kind::Budget),
            1 => Just(Kind::Countdown),
        ];
        let mut ops: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (2, Just(Op::Drain).boxed()),
            (1, any::<bool>().prop_map(Op::Refusing).boxed()),
            (1, (1u64..120).prop_map(|secs| Op::Clock { secs }).boxed()),
            (
                2,
                (1u64..6, any::<bool>())
                    .prop_map(|(nth, landed)| Op::Crash { nth, landed })
                    .boxed(),
            ),
            (1, Just(Op::FailingReads).boxed()),
            (1, Just(Op::Unconfirmed).boxed()),
            (1, Just(Op::DeployNext).boxed()),
            (
                2,
                (
                    prop_oneof![
                        Just(BulkOp::Pause),
                        Just(BulkOp::Resume),
                        Just(BulkOp::Cancel),
                        Just(BulkOp::Retry),
                    ],
                    prop_oneof![Just(Kind::Billing), Just(Kind::Budget)],
                )
                    .prop_map(|(action, kind)| Op::Bulk { action, kind })
                    .boxed(),
            ),
        ];
        if model.runs.len() < MAX_RUNS {
            ops.push((4, kind.prop_map(Op::Start).boxed()));
        }
        if model.next_build {
            ops.push((
                2,
                (any::<bool>(), proptest::option::of(1u8..100))
                    .prop_map(|(dry_run, ramp)| Op::Upgrade { dry_run, ramp })
                    .boxed(),
            ));
        }
        if !model.runs.is_empty() {
            let run = 0..model.runs.len();
            let next = model.next_build;
            ops.extend([
                (3, run.clone().prop_map(Op::Drive).boxed()),
                (
                    4,
                    (run.clone(), 0u8..3)
                        .prop_map(|(run, id)| Op::Deliver { run, id })
                        .boxed(),
                ),
                (3, run.clone().prop_map(Op::Pause).boxed()),
                (3, run.clone().prop_map(Op::Resume).boxed()),
                (1, run.clone().prop_map(Op::Cancel).boxed()),
                (
                    2,
                    (run.clone(), any::<bool>(), any::<bool>())
                        .prop_map(move |(run, from_charge, on)| Op::Restart {
                            run,
                            from_charge,
                            on_next: on && next,
                        })
                        .boxed(),
                ),
                (
                    2,
                    (run.clone(), any::<bool>())
                        .prop_map(move |(run, on)| Op::Retry {
                            run,
                            on_next: on && next,
                        })
                        .boxed(),
                ),
                (
                    1,
                    (run, any::<bool>())
                        .prop_map(|(run, from_charge)| Op::Fork { run, from_charge })
                        .boxed(),
                ),
            ]);
        }
        proptest::strategy::Union::new_weighted(ops).boxed()
    }

    fn apply(mut model: Model, op: &Op) -> Model {
        match op {
            Op::Start(kind) => model.runs.push(*kind),
            Op::DeployNext => model.next_build = true,
            _ => {}
        }
        model
    }

    fn preconditions(model: &Model, op: &Op) -> bool {
        let n = model.runs.len();
        match op {
            Op::Start(_) => n < MAX_RUNS,
            Op::Drive(r) | Op::Pause(r) | Op::Resume(r) | Op::Cancel(r) => *r < n,
            Op::Deliver { run, .. } | Op::Fork { run, .. } => *run < n,
            Op::Restart { run, on_next, .. } | Op::Retry { run, on_next } => {
                *run < n && (!on_next || model.next_build)
            }
            Op::Upgrade { .. } => model.next_build,
            _ => true,
        }
    }
}

/// The runtime every sequence runs on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// What keel acknowledged, to be checked against what it later says.
#[derive(Default)]
struct Answers {
    /// Runs seen ended, with their status: they stay so until a restart
    /// or retry of theirs is acknowledged.
    ended: HashMap<String, RunStatus>,
    /// Runs a pause of which was acknowledged and seen hold (`paused`),
    /// no resume acknowledged since.
    paused: HashSet<String>,
    /// Each payload ID delivered to a run, by (token, ID).
    delivered: HashMap<(String, String), String>,
    /// Every journal as last read: later reads must extend it.
    journals: HashMap<String, Vec<Entry>>,
}

/// The system under test: an engine over this suite's store, a payment
/// API, the engine's manual clock, and what keel acknowledged.
struct Sim {
    store: TestStore,
    config: TestConfig,
    keel: Option<Keel>,
    /// The store's fault injector (`None` only while reopening).
    backend: Option<Arc<Backend>>,
    clock: Arc<ManualClock>,
    api: PaymentApi,
    /// The sequence's runs, by model index (`None`: its start failed).
    runs: Vec<Option<String>>,
    kinds: Vec<Kind>,
    /// Runs made from them: forks, and the runs that continue them.
    forks: Vec<String>,
    /// What keel acknowledged; [`Sim::check`], which runs on a shared
    /// borrow, records what it read there.
    answers: std::cell::RefCell<Answers>,
    /// Worker lives so far (a crash ends one).
    life: u32,
    /// What each step did, for a failure's message.
    log: Vec<String>,
}

impl Sim {
    async fn new() -> Sim {
        let api = PaymentApi::start(false).await.expect("a payment API");
        let store = TestStore::new();
        let clock = ManualClock::at(T0);
        let mut config = store.config();
        config.clock = clock.clone();
        config.park_limit = std::time::Duration::ZERO;
        config.worker_id = "sim-0".into();
        config.grants = Grants {
            http: vec![api.addr.to_string()],
            ..Grants::default()
        };
        let (keel, _, backend) = common::open_backend(config.clone(), keel_tests::TESTBED).await;
        let sim = Sim {
            store,
            config,
            keel: Some(keel),
            backend: Some(backend),
            clock,
            api,
            runs: Vec::new(),
            kinds: Vec::new(),
            forks: Vec::new(),
            answers: Default::default(),
            life: 0,
            log: Vec::new(),
        };
        sim.deploy(keel_tests::TESTBED)
            .await
            .expect("deploying the testbed");
        sim
    }

    fn keel(&self) -> &Keel {
        self.keel.as_ref().expect("an engine")
    }

    fn backend(&self) -> &Backend {
        self.backend.as_ref().expect("a store")
    }

    /// Deploys the guest at `path` as the next build of `testbed`.
    async fn deploy(&self, path: &str) -> keel_host::Result<()> {
        let bytes = std::fs::read(path).expect("the guest");
        let spec = DeploySpec {
            name: Some("testbed".into()),
            grants: Some(self.config.grants.spec()),
            ..DeploySpec::default()
        };
        self.keel().deploy(Path::new(path), &bytes, spec).await?;
        Ok(())
    }

    /// Every run of the sequence, forks included.
    fn all_runs(&self) -> Vec<String> {
        self.runs
            .iter()
            .flatten()
            .cloned()
            .chain(self.forks.iter().cloned())
            .collect()
    }

    fn run(&self, index: usize) -> Option<String> {
        self.runs.get(index).cloned().flatten()
    }

    fn note(&mut self, what: String) {
        self.log.push(what);
    }

    /// Applies `op`, noting what keel answered; what it answers is
    /// checked by [`Sim::check`], not here (a refusal is an answer).
    async fn apply(&mut self, op: &Op) {
        let answer = match op {
            Op::Start(kind) => {
                let n = self.runs.len();
                let input = match kind {
                    Kind::Billing => {
                        serde_json::json!([self.api.url("/charge"), format!("sim:{n}")])
                    }
                    Kind::Budget => serde_json::json!(self.api.url("/charge")),
                    Kind::Countdown => serde_json::json!([2, 0]),
                };
                let started = self
                    .keel()
                    .start_workflow(
                        kind.workflow(),
                        Target::Name("testbed"),
                        &input.to_string(),
                        &StartOptions::default(),
                    )
                    .await;
                self.kinds.push(*kind);
                match started {
                    Ok(run) => {
                        self.runs.push(Some(run.run_id.to_string()));
                        format!("started {}", run.run_id)
                    }
                    Err(e) => {
                        self.runs.push(None);
                        format!("start refused: {e}")
                    }
                }
            }
            Op::Drive(r) => match self.run(*r) {
                Some(id) => self.observe(self.keel().drive(&id).await),
                None => "no run".into(),
            },
            Op::Drain => self.drain().await,
            Op::Deliver { run, id } => self.deliver(*run, *id).await,
            Op::Pause(r) => match self.run(*r) {
                Some(id) => {
                    let answer = self.keel().pause_run(&id, "sim").await;
                    if let Ok(run) = &answer
                        && run.status == RunStatus::Paused
                    {
                        self.answers.get_mut().paused.insert(id.clone());
                    }
                    format!("{answer:?}")
                }
                None => "no run".into(),
            },
            Op::Resume(r) => match self.run(*r) {
                Some(id) => {
                    let answer = self.keel().resume_run(&id, "sim").await;
                    if answer.is_ok() {
                        self.answers.get_mut().paused.remove(&id);
                    }
                    format!("{answer:?}")
                }
                None => "no run".into(),
            },
            Op::Cancel(r) => match self.run(*r) {
                Some(id) => format!("{:?}", self.keel().cancel(&id, "sim", "sim").await),
                None => "no run".into(),
            },
            Op::DeployNext => format!("{:?}", self.deploy(keel_tests::TESTBED_REORDERED).await),
            Op::Upgrade { dry_run, ramp } => {
                let job = self
                    .keel()
                    .submit_upgrade("testbed", "testbed", *dry_run, *ramp)
                    .await;
                match job {
                    Ok(job) => format!(
                        "{:?}",
                        self.keel().run_job(&job.job_id).await.map(|j| j.counts)
                    ),
                    Err(e) => format!("upgrade refused: {e}"),
                }
            }
            Op::Restart {
                run,
                from_charge,
                on_next,
            } => match self.run(*run) {
                Some(id) => {
                    let point = self.point(*run, *from_charge);
                    let on = on_next.then_some("testbed");
                    let answer = self.keel().restart_run(&id, &point, on, "sim").await;
                    self.maybe_reopened(&id, &answer);
                    format!("{:?}", answer.map(|r| r.status))
                }
                None => "no run".into(),
            },
            Op::Retry { run, on_next } => match self.run(*run) {
                Some(id) => {
                    let answer = match on_next {
                        true => self.keel().retry_on(&id, "testbed").await,
                        false => self.keel().retry(&id).await,
                    };
                    self.maybe_reopened(&id, &answer);
                    format!("{:?}", answer.map(|r| r.status))
                }
                None => "no run".into(),
            },
            Op::Fork { run, from_charge } => match self.run(*run) {
                Some(id) => {
                    let point = self.point(*run, *from_charge);
                    let answer = self
                        .keel()
                        .fork_run(&id, &point, &ForkOptions::default(), "sim")
                        .await;
                    match answer {
                        Ok(fork) => {
                            self.forks.push(fork.run_id.to_string());
                            format!("forked into {}", fork.run_id)
                        }
                        Err(e) => format!("fork refused: {e}"),
                    }
                }
                None => "no run".into(),
            },
            Op::Refusing(on) => {
                self.api.set_refusing(*on);
                format!("payment API refusing: {on}")
            }
            Op::Clock { secs } => {
                self.clock.advance(secs * 1000);
                format!("clock +{secs}s")
            }
            Op::Crash { nth, landed } => self.crash(*nth, *landed).await,
            Op::FailingReads => {
                self.backend().fail_reads(true);
                let pass = self.keel().work_once().await;
                self.backend().fail_reads(false);
                format!("a pass with failing reads: {pass:?}")
            }
            Op::Bulk { action, kind } => self.bulk(*action, *kind).await,
            Op::Unconfirmed => {
                self.backend().unconfirm_next_write();
                format!(
                    "a pass with an unconfirmed write: {:?}",
                    self.keel().work_once().await
                )
            }
        };
        self.note(format!("{op:?} -> {answer}"));
        self.follow_chains().await;
    }

    /// Tracks the runs that continue a tracked run as new, so that every
    /// run of a chain is checked.
    async fn follow_chains(&mut self) {
        for id in self.all_runs() {
            let Ok(run) = self.keel().get_run(&id).await else {
                continue;
            };
            if run.status != RunStatus::Continued {
                continue;
            }
            let next = run.run_id.continued().to_string();
            if !self.all_runs().contains(&next) && self.keel().get_run(&next).await.is_ok() {
                self.forks.push(next);
            }
        }
    }

    /// A restart or a retry of `id` answered `answer`: acknowledged, or
    /// of an outcome it says is unknown (the run may be live again), the
    /// run is no longer held to the end it was seen at.
    fn maybe_reopened(&mut self, id: &str, answer: &keel_host::Result<RunRecord>) {
        match answer {
            Ok(_) | Err(keel_host::Error::OutcomeUnknown { .. }) => {
                self.answers.get_mut().ended.remove(id);
            }
            Err(e) => assert!(
                !e.is_storage(),
                "a restart or retry of {id} failed with a bare storage error, naming no outcome: {e}\n{}",
                self.log.join("\n")
            ),
        }
    }

    /// Submits a bulk `action` over the runs of `kind`'s workflow and
    /// carries it out; what a pause or resume acknowledged for a run, and
    /// which runs a retry may have reopened, is what the job reports.
    async fn bulk(&mut self, action: BulkOp, kind: Kind) -> String {
        use keel_host::core::bulk::{BulkAction, BulkRequest};
        let request = BulkRequest {
            action: match action {
                BulkOp::Pause => BulkAction::Pause,
                BulkOp::Resume => BulkAction::Resume,
                BulkOp::Cancel => BulkAction::Cancel,
                BulkOp::Retry => BulkAction::Retry,
            },
            filter: keel_host::core::RunFilter {
                workflow: Some(kind.workflow().into()),
                ..Default::default()
            },
            reason: Some("sim".into()),
            force: false,
            upgrade: None,
            restart: None,
        };
        let job = match self.keel().submit_bulk(request).await {
            Ok(job) => self.keel().run_job(&job.job_id).await,
            Err(e) => return format!("bulk refused: {e}"),
        };
        // Which runs it acted on is not in its answer: a resume or retry
        // may have reached any run of the workflow, a pause is held only
        // once seen held.
        for (id, k) in self.runs.clone().into_iter().zip(self.kinds.clone()) {
            let Some(id) = id.filter(|_| k == kind) else {
                continue;
            };
            match action {
                BulkOp::Resume => {
                    self.answers.get_mut().paused.remove(&id);
                }
                BulkOp::Retry => {
                    self.answers.get_mut().ended.remove(&id);
                }
                BulkOp::Pause | BulkOp::Cancel => {}
            }
        }
        format!("{:?}", job.map(|j| (j.state, j.counts)))
    }

    /// Where a restart or fork of run `index` starts over.
    fn point(&self, index: usize, from_charge: bool) -> RestartPoint {
        RestartPoint::Step(match from_charge {
            true => "charge".into(),
            false => self.kinds[index].first_step().into(),
        })
    }

    fn observe(&mut self, driven: keel_host::Result<RunRecord>) -> String {
        match driven {
            Ok(run) => format!("{} {}", run.run_id, run.status.as_str()),
            Err(e) => format!("drive failed: {e}"),
        }
    }

    async fn deliver(&mut self, index: usize, id: u8) -> String {
        let token = format!("sim:{index}");
        let payload_id = format!("{index}-{id}");
        let payload = serde_json::json!(format!("note {payload_id}")).to_string();
        let answer = self
            .keel()
            .deliver(&token, &payload, Some(&payload_id))
            .await;
        if let Ok(resumed) = &answer {
            let key = (token.clone(), payload_id.clone());
            match self.answers.get_mut().delivered.get(&key).cloned() {
                Some(first) => assert!(
                    resumed.duplicate && first == resumed.run_id.as_str(),
                    "payload {payload_id} was delivered before to {first}; delivered again it must be answered a duplicate of that run, was {resumed:?}\n{}",
                    self.log.join("\n")
                ),
                None => {
                    self.answers
                        .get_mut()
                        .delivered
                        .insert(key, resumed.run_id.to_string());
                }
            }
        }
        format!("{answer:?}")
    }

    /// Worker passes until one finds nothing due; more than
    /// [`DRAIN_PASSES`] on a frozen clock is a run driven without end.
    async fn drain(&mut self) -> String {
        let mut driven = Vec::new();
        for _ in 0..DRAIN_PASSES {
            match self.keel().work_once().await {
                Ok(0) => return format!("drained after {driven:?}"),
                Ok(n) => driven.push(n),
                Err(e) => return format!("a pass failed: {e}"),
            }
        }
        panic!(
            "{DRAIN_PASSES} worker passes on a frozen clock still found runs due ({driven:?}): a run is driven without end\n{}",
            self.log.join("\n")
        );
    }

    /// Arms a crash at the `nth` journal write from now and drains; then
    /// the process is gone: the store is reopened by a new worker once
    /// the dead one's leases expired, which takes its runs over.
    async fn crash(&mut self, nth: u64, landed: bool) -> String {
        let at_write = self.backend().journal_writes() + nth;
        let when = match landed {
            true => CrashWhen::After,
            false => CrashWhen::Before,
        };
        self.backend().crash_at(Crash { at_write, when });
        let mut passes = 0;
        while !self.backend().has_crashed() && passes < 3 {
            passes += 1;
            if self.keel().work_once().await.is_ok_and(|n| n == 0) {
                break;
            }
        }
        let struck = self.backend().has_crashed();
        self.recover().await;
        format!(
            "crash at write {at_write} ({}): struck {struck}",
            when.as_str()
        )
    }

    /// A new process: the engine and the store opened again, a new worker
    /// ID, the clock past the dead worker's leases.
    async fn recover(&mut self) {
        drop(self.keel.take());
        drop(self.backend.take());
        self.life += 1;
        self.config.worker_id = format!("sim-{}", self.life);
        self.clock
            .advance(self.config.lease_ttl.as_millis() as u64 + 1);
        let (store, backend) = common::open_store(&self.config).await;
        self.keel = Some(Keel::open(self.config.engine.clone(), store).expect("reopening"));
        self.backend = Some(backend);
    }

    /// Checks every promise; panics naming the one broken, with the log.
    async fn check(&self) {
        let charges = self.api.requests();
        for run_id in self.all_runs() {
            let (run, journal) = match (
                self.keel().get_run(&run_id).await,
                self.keel().journal(&run_id).await,
            ) {
                (Ok(run), Ok(journal)) => (run, journal),
                (run, journal) => panic!(
                    "run {run_id}, acknowledged, cannot be read: {:?} {:?}\n{}",
                    run.err(),
                    journal.err(),
                    self.log.join("\n")
                ),
            };
            let fail = |what: String| -> ! {
                panic!(
                    "run {run_id} ({}): {what}\njournal: {:#?}\n{}",
                    run.workflow,
                    journal
                        .iter()
                        .map(|e| format!("{} {:?}", e.seq, e.fact))
                        .collect::<Vec<_>>(),
                    self.log.join("\n")
                )
            };
            // Nothing acknowledged lost: the journal extends what was read.
            let before = self.answers.borrow().journals.get(&run_id).cloned();
            if let Some(before) = before
                && !journal.starts_with(&before)
            {
                fail(format!(
                    "its journal no longer starts with the {} entries read before",
                    before.len()
                ));
            }
            // One step ID per logical step, seen from outside.
            let ids: HashSet<&str> = journal
                .iter()
                .filter_map(|e| match &e.fact {
                    Fact::StepScheduled { name, step_id, .. } if name == "charge" => {
                        Some(step_id.as_str())
                    }
                    _ => None,
                })
                .collect();
            let keys: HashSet<&str> = charges
                .iter()
                .filter(|r| r.path == "/charge")
                .filter_map(|r| r.idempotency_key.as_deref())
                .filter(|k| k.starts_with(&format!("{run_id}-")))
                .collect();
            if keys.len() > 1 || !keys.iter().all(|k| ids.contains(k)) {
                fail(format!(
                    "its charge went out under {keys:?}; its journal's charge is {ids:?}: one logical step, one step ID"
                ));
            }
            // Nothing compensated reused.
            let compensated = journal.iter().any(|e| match &e.fact {
                Fact::StepCompleted { command, .. } => journal.iter().any(|s| {
                    matches!(&s.fact, Fact::StepScheduled { command: c, name, .. }
                        if c == command && name == "release_budget")
                }),
                _ => false,
            });
            if compensated && run.status == RunStatus::Completed {
                fail("it completed after its compensation released the budget".into());
            }
            // No paused run driven.
            let mut paused = false;
            for e in &journal {
                match &e.fact {
                    Fact::RunPaused { .. } => paused = true,
                    Fact::RunResumed => paused = false,
                    Fact::StepAttemptStarted { .. }
                    | Fact::HookReceived { .. }
                    | Fact::TimerFired { .. }
                    | Fact::StepScheduled { .. }
                        if paused =>
                    {
                        fail(format!(
                            "entry {} ({}) was journaled while the run was paused",
                            e.seq,
                            e.fact.name()
                        ))
                    }
                    _ => {}
                }
            }
            // Answers stay true.
            let seen_ended = self.answers.borrow().ended.get(&run_id).copied();
            if let Some(status) = seen_ended
                && run.status != status
            {
                fail(format!(
                    "it was seen {}, and is now {} with no restart or retry of it acknowledged",
                    status.as_str(),
                    run.status.as_str()
                ));
            }
            let paused_answer = self.answers.borrow().paused.contains(&run_id);
            if paused_answer && run.status != RunStatus::Paused && !run.status.is_final() {
                fail(format!(
                    "its pause was acknowledged and no resume was, yet it is {}",
                    run.status.as_str()
                ));
            }
            // The payloads it took, each once.
            let mut taken = BTreeMap::<&str, usize>::new();
            let effective = effective_entries(&journal);
            for e in &effective {
                if let Fact::HookReceived { payload, .. } = &e.fact {
                    *taken.entry(payload.as_str()).or_default() += 1;
                }
            }
            if let Some((payload, n)) = taken.iter().find(|(_, n)| **n > 1) {
                fail(format!("payload {payload} was taken {n} times"));
            }
            // Its journal replays on its build.
            match self.keel().replay(&run_id, None).await {
                Ok(verdict) if verdict.is_ok() => {}
                verdict => fail(format!("its journal does not replay: {verdict:?}")),
            }
            let mut answers = self.answers.borrow_mut();
            if run.status.is_final() {
                answers.ended.insert(run_id.clone(), run.status);
            }
            answers.journals.insert(run_id, journal);
        }
    }

    /// The end of a sequence: every pause lifted, the API taking charges,
    /// the clock moved on, and the workers drained; the promises hold then.
    async fn settle(&mut self) {
        for run in self.all_runs() {
            if self.keel().resume_run(&run, "sim").await.is_ok() {
                self.answers.get_mut().paused.remove(&run);
            }
        }
        self.api.set_refusing(false);
        self.clock.advance(3_600_000);
        let drained = self.drain().await;
        self.note(format!("settle: {drained}"));
        self.check().await;
    }
}

struct Simulation;

impl StateMachineTest for Simulation {
    type SystemUnderTest = Sim;
    type Reference = Reference;

    fn init_test(_: &Model) -> Sim {
        runtime().block_on(Sim::new())
    }

    fn apply(mut sim: Sim, _: &Model, op: Op) -> Sim {
        runtime().block_on(async {
            sim.apply(&op).await;
        });
        sim
    }

    fn check_invariants(sim: &Sim, _: &Model) {
        runtime().block_on(sim.check());
    }

    fn teardown(mut sim: Sim, _: Model) {
        runtime().block_on(sim.settle());
        let Sim { keel, store, .. } = sim;
        drop(keel);
        drop(store);
    }
}

/// The budget: `KEEL_SIM_CASES`, else 500 sequences on sled and 100 on
/// PostgreSQL; the seed `KEEL_SIM_SEED`, else a new one, printed.
fn config() -> ProptestConfig {
    static CONFIG: OnceLock<ProptestConfig> = OnceLock::new();
    CONFIG.get_or_init(budget).clone()
}

/// [`config`], made once (the runner asks for it more than once).
fn budget() -> ProptestConfig {
    let cases = std::env::var("KEEL_SIM_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if common::on_postgres() { 100 } else { 500 });
    let seed = std::env::var("KEEL_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand_seed);
    eprintln!(
        "simulation: {cases} sequences on {}, seed {seed} (KEEL_SIM_SEED={seed} runs it again)",
        if common::on_postgres() {
            "PostgreSQL"
        } else {
            "sled"
        }
    );
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

/// A seed from the time.
fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

prop_state_machine! {
    #![proptest_config(config())]

    /// Sequences of operations and faults keep every promise.
    #[test]
    fn operations_and_faults_keep_every_promise(sequential 1..24 => Simulation);
}
