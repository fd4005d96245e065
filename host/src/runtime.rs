//! The wasm runtime: the wasmtime engine with the pooling allocator and
//! fuel, the linker, the compiled components, and one activation of a
//! workflow over a journal. It needs no store: an offline replay is a
//! runtime, a component and a journal.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use keel_core::divergence::{self, Outcome, Trace, Verdict};
use keel_core::{ComponentHash, Entry, RunRecord};
use std::time::Duration;
use wasmtime::component::Linker;

use wasmtime::{CallHook, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::activation::{Activation, ContinueAsNew, Offline, Outside, RunJournal, Suspend};
use crate::component::{self, Loaded, describe_trap};
use crate::config::Config;
use crate::sandbox::{self, GuestLog, HostState, Pulse};
use crate::slots::Slots;
use crate::{Error, Result};

/// How one activation ended.
pub(crate) enum Ended {
    Completed(String),
    Failed(Error),
    Suspended(Suspend),
    /// The workflow continued as new with this input.
    Continued(String),
}

impl Ended {
    /// The end as a verdict reads it.
    fn outcome(&self) -> Outcome {
        match self {
            Ended::Completed(output) => Outcome::Completed(output.clone()),
            Ended::Failed(e) => Outcome::Failed {
                kind: e.kind().as_str().into(),
                message: e.to_string(),
            },
            Ended::Suspended(_) => Outcome::Suspended,
            Ended::Continued(input) => Outcome::Continued(input.clone()),
        }
    }
}

/// Fuel between two yields of a guest to tokio (about 10 ms of work).
pub(crate) const YIELD_FUEL: u64 = 10_000_000;

/// The wasmtime engine, its linker and the components compiled for it.
pub struct Runtime {
    pub(crate) engine: Engine,
    base_linker: Linker<HostState>,
    pub(crate) config: Config,
    /// The instance slots every activation and step attempt takes one of.
    pub(crate) slots: Arc<Slots>,
    components: Mutex<HashMap<ComponentHash, Arc<Loaded>>>,
}

impl Runtime {
    /// A runtime with `config`'s bounds.
    pub fn new(config: Config) -> Result<Runtime> {
        let engine = build_engine(&config)?;
        let base_linker =
            sandbox::base_linker(&engine).map_err(|e| Error::Wasm(format!("{e:#}")))?;
        Ok(Runtime {
            engine,
            base_linker,
            slots: Arc::new(Slots::new(config.max_instances)),
            config,
            components: Mutex::default(),
        })
    }

    /// Compiles and validates `bytes` (or takes the component compiled
    /// before); `origin` names it in errors.
    pub async fn load(&self, origin: &Path, bytes: &[u8]) -> Result<Arc<Loaded>> {
        let hash = component::content_hash(bytes);
        if let Some(loaded) = self.cached(&hash) {
            return Ok(loaded);
        }
        let loaded = Arc::new(
            component::load(
                &self.engine,
                &self.base_linker,
                &self.config.cache_dir,
                origin,
                bytes,
                self.config.max_memory,
            )
            .await?,
        );
        self.components
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(hash, loaded.clone());
        Ok(loaded)
    }

    /// The component of `hash`, if compiled before.
    pub fn cached(&self, hash: &str) -> Option<Arc<Loaded>> {
        self.components
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(hash)
            .cloned()
    }

    /// Drops the compiled component of `hash` from memory (it was pruned
    /// from the store).
    pub fn forget(&self, hash: &str) {
        self.components
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(hash);
    }

    /// Runs the workflow of `run` once from the start over `journal`,
    /// reaching beyond the run through `outside`.
    pub(crate) async fn activate(
        &self,
        outside: Arc<dyn Outside>,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        journal: Arc<RunJournal>,
    ) -> (Ended, Trace) {
        // Queued for a slot; a forced cancel ends the wait.
        let _slot = tokio::select! {
            slot = self.slots.workflow() => slot,
            () = journal.until_terminated() => {
                let cancelled = Error::Cancelled { run_id: run.run_id.clone() };
                return (Ended::Failed(cancelled), Trace::default());
            }
        };
        let activation = Activation::new(
            outside,
            loaded.clone(),
            journal.clone(),
            &run.workflow,
            run.created_at_ms,
            self.slots.clone(),
        );
        let clock = activation.clock();
        let log = GuestLog::new(&run.run_id);
        let config = &self.config;
        let state =
            HostState::workflow(Box::new(activation), clock, log.clone(), config.max_memory);
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let pulse = store.data().pulse.clone();
        if let Err(e) = bound_cpu(&mut store, config.workflow_fuel) {
            return (Ended::Failed(Error::Wasm(e.to_string())), Trace::default());
        }
        let call = async {
            let instance = loaded.workflow_pre.instantiate_async(&mut store).await?;
            instance
                .keel_workflow_guest()
                .call_run_workflow(&mut store, &run.workflow, &run.input)
                .await
        };
        // A cancel or an overrun stops the guest in its own code; dropping
        // the call there is safe (a host call in progress finishes first).
        let result = tokio::select! {
            result = call => result,
            stop = stop(&journal, &pulse, config.activation_timeout) => {
                Err(wasmtime::Error::new(stop.error(&run.run_id)))
            }
        };
        let ended = match result {
            Ok(Ok(output)) => Ended::Completed(output),
            Ok(Err(message)) => Ended::Failed(Error::WorkflowFailed {
                run_id: run.run_id.clone(),
                message,
            }),
            Err(e) => self.classify(e, run, &log),
        };
        let activation = store
            .data_mut()
            .workflow_calls()
            .and_then(|calls| calls.downcast_mut::<Activation>());
        let trace = match activation {
            Some(a) => {
                if !matches!(ended, Ended::Failed(Error::Cancelled { .. })) {
                    a.settle_cancelled().await;
                }
                a.finish().await
            }
            None => Trace::default(),
        };
        (ended, trace)
    }

    fn classify(&self, e: wasmtime::Error, run: &RunRecord, log: &GuestLog) -> Ended {
        let e = match e.downcast::<Suspend>() {
            Ok(suspend) => return Ended::Suspended(suspend),
            Err(e) => e,
        };
        let e = match e.downcast::<ContinueAsNew>() {
            Ok(next) => return Ended::Continued(next.input),
            Err(e) => e,
        };
        let e = match e.downcast::<Error>() {
            Ok(error) => return Ended::Failed(error),
            Err(e) => e,
        };
        let run_id = run.run_id.clone();
        if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::OutOfFuel) {
            return Ended::Failed(Error::FuelExhausted {
                run_id,
                fuel: self.config.workflow_fuel,
            });
        }
        if component::exceeded_memory(&e) {
            return Ended::Failed(Error::MemoryExhausted {
                run_id,
                limit_bytes: self.config.max_memory,
            });
        }
        Ended::Failed(Error::GuestTrap {
            run_id,
            message: describe_trap(&e, &log.tail()),
        })
    }

    /// Replays `entries` of `run` against `loaded`, offline: the
    /// activation has no store behind it, no step runs, nothing is written.
    pub async fn replay(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        entries: Vec<Entry>,
    ) -> Result<Verdict> {
        Ok(self.replay_queries(loaded, run, entries).await?.0)
    }

    /// [`Runtime::replay`], with the queries the code had set when the
    /// replay stopped ([`keel_core::run_query`]).
    pub async fn replay_queries(
        &self,
        loaded: &Arc<Loaded>,
        run: &RunRecord,
        entries: Vec<Entry>,
    ) -> Result<(Verdict, BTreeMap<String, String>)> {
        // What a retry voided is not the run's history.
        let effective = keel_core::index::effective_entries(&entries);
        let clock = self.config.clock.clone();
        let journal = Arc::new(RunJournal::new(None, clock.clone(), &run.run_id, entries)?);
        let offline: Arc<dyn Outside> = Arc::new(Offline { clock });
        let (ended, mut trace) = self.activate(offline, loaded, run, journal).await;
        let queries = std::mem::take(&mut trace.queries);
        Ok((
            divergence::verdict(&effective, ended.outcome(), trace),
            queries,
        ))
    }
}

/// Why the watchdog stopped an activation.
enum Stop {
    Cancelled,
    Overran { ran: Duration, bound: Duration },
}

impl Stop {
    fn error(self, run_id: &keel_core::RunId) -> Error {
        let run_id = run_id.clone();
        match self {
            Stop::Cancelled => Error::Cancelled { run_id },
            Stop::Overran { ran, bound } => Error::ActivationTimeout {
                run_id,
                ran_ms: ran.as_millis() as u64,
                bound_ms: bound.as_millis() as u64,
            },
        }
    }
}

/// Completes when the activation must stop while its guest runs its own
/// code: the run was cancelled, or the guest ran longer than `bound`
/// without calling the host.
async fn stop(journal: &RunJournal, pulse: &Pulse, bound: Duration) -> Stop {
    tokio::select! {
        () = journal.until_terminated() => {
            pulse.outside_keel().await;
            Stop::Cancelled
        }
        ran = pulse.overrun(bound) => Stop::Overran { ran, bound },
    }
}

/// Bounds a workflow store's CPU: `fuel` for its new work, refilled when
/// a keel call the journal answered returns (so replaying a long history
/// costs none of it), yielding to tokio every slice so that other runs go
/// on while it computes.
fn bound_cpu(store: &mut wasmtime::Store<HostState>, fuel: u64) -> wasmtime::Result<()> {
    store.set_fuel(fuel)?;
    store.fuel_async_yield_interval(Some(YIELD_FUEL))?;
    store.call_hook(move |mut ctx, hook| {
        if matches!(hook, CallHook::ReturningFromHost)
            && ctx.data().pulse.take_returned()
            && ctx.data().replaying()
        {
            ctx.set_fuel(fuel)?;
        }
        Ok(())
    });
    Ok(())
}

/// Instance slots reset together (one madvise for the batch).
const DECOMMIT_BATCH: usize = 32;

/// Core instances a component may hold, pooled per instance slot: a Rust
/// guest has 3, a componentize-py guest 14 (CPython, its libraries and
/// their shims, linked dynamically). A component with more is refused
/// when it is instantiated, naming the bound.
const CORE_INSTANCES_PER_SLOT: u32 = 20;

/// Tables a component may hold, pooled per instance slot (2 for both).
const TABLES_PER_SLOT: u32 = 4;

/// Bytes of a memory or table slot kept resident between its instances.
const KEEP_RESIDENT: usize = 256 << 10;

fn build_engine(config: &Config) -> Result<Engine> {
    let mut wasm = wasmtime::Config::new();
    wasm.consume_fuel(true).wasm_component_model(true);
    // A dropped instance's slot is reused once its memory is reset, which
    // happens in batches: the pool keeps a batch beyond the slots handed
    // out, so that an instance given its slot always finds one.
    let instances = config.max_instances.max(crate::slots::MIN_INSTANCES) + DECOMMIT_BATCH as u32;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        .max_core_instances_per_component(CORE_INSTANCES_PER_SLOT)
        .total_core_instances(instances * CORE_INSTANCES_PER_SLOT)
        .total_memories(instances)
        .max_tables_per_component(TABLES_PER_SLOT)
        .total_tables(instances * TABLES_PER_SLOT)
        .max_memory_size(config.max_memory)
        // Every step attempt is a fresh instance; resetting slots in batches
        // rather than one madvise (and TLB shootdown) per instance is worth
        // ~20% of W10 throughput on two cores.
        .decommit_batch_size(DECOMMIT_BATCH)
        // A slot reused for the same component keeps the pages its last
        // instance touched (up to KEEP_RESIDENT) and restores only those
        // from the memory image: the next instance's writes then take no
        // copy-on-write fault, and no TLB shootdown across cores.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(KEEP_RESIDENT)
        .pagemap_scan(wasmtime::Enabled::Auto);
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&wasm).map_err(|e| Error::Wasm(format!("building the wasmtime engine: {e:#}")))
}
