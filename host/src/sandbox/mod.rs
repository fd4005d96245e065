//! The two sandboxes a guest runs in, and the WIT contract's host side.
//!
//! The workflow sandbox is deterministic: its clocks read journal time
//! ([`clock`]), its randomness is seeded by the run ID, it has no
//! filesystem, sockets, environment, arguments or stdin, and every
//! non-deterministic import (filesystem, sockets, HTTP, sleeping on the
//! machine's clock) is shadowed by a stub that fails the run; its
//! [`Pulse`] says whether it runs or is in a keel call. Its keel imports are answered by a
//! [`WorkflowCalls`] (the activation). The step sandbox has real clocks and
//! randomness and only what the operator granted ([`grants`]).

use std::any::Any;
use std::sync::Arc;

use crate::effects::{Effect, StepGate};
use async_trait::async_trait;
use keel_core::RunId;
use keel_core::lifecycle::{ChildOptions, ClosePolicy};
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

mod clock;
mod grants;
mod log;
mod pulse;

pub use clock::JournalClock;
pub use grants::Grants;
use grants::HttpGrant;
pub use log::GuestLog;
pub use pulse::Pulse;

wasmtime::component::bindgen!({
    path: "../guest-sdk/wit",
    world: "keel:workflow/workflow-component",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use keel::workflow::types as wit;

/// The workflow side of the contract: what a workflow's keel imports do.
/// The activation implements it; the sandbox only forwards.
#[async_trait]
pub trait WorkflowCalls: Send {
    /// The run this activation belongs to.
    fn run_id(&self) -> &RunId;
    /// The activation itself, for the engine to take back after the call.
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The workflow is still re-issuing commands the journal holds.
    fn replaying(&self) -> bool;
    async fn schedule_step(&mut self, name: String, input: String) -> wasmtime::Result<u32>;
    async fn schedule_sleep(&mut self, duration_ms: u64) -> wasmtime::Result<u32>;
    async fn wait_any(&mut self, ids: &[u32]) -> wasmtime::Result<wit::Completion>;
    /// `wait_any` that also delivers the run's cancel request, once.
    async fn await_any(&mut self, ids: &[u32]) -> wasmtime::Result<wit::Wake>;
    /// The workflow refused a call because its run is cancelled.
    async fn cancelled_call(&mut self) -> wasmtime::Result<()>;
    fn metadata(&self) -> wit::WorkflowMetadata;
    async fn patched(&mut self, change_id: String) -> wasmtime::Result<bool>;
    fn log(&self, level: wit::LogLevel, message: &str);
    async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>>;
    async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32>;
    async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()>;
    async fn run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus>;
    async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32>;
    /// Starts a child run (`start-workflow` and `start-child`).
    async fn start_child(
        &mut self,
        workflow: String,
        input: String,
        options: ChildOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>>;
    /// Sets one of the run's attributes.
    async fn set_attribute(
        &mut self,
        key: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>>;
    /// Sets one of the run's queries (never journaled).
    fn set_query(&mut self, name: String, value: String) -> Result<(), String>;
    /// Ends the run by continuing as new with `input`: raises
    /// [`crate::activation::ContinueAsNew`] out of the guest, or answers
    /// why the input cannot be a run's.
    fn continue_as_new(&mut self, input: String) -> wasmtime::Result<Result<(), String>>;
    /// Writes a chunk to one of the run's streams.
    async fn stream_write(
        &mut self,
        stream: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>>;
    /// Closes one of the run's streams.
    async fn stream_close(&mut self, stream: String) -> wasmtime::Result<Result<(), String>>;
    /// Replies to the payload a `hook-next` command received.
    async fn hook_reply(
        &mut self,
        request: u32,
        reply: String,
    ) -> wasmtime::Result<Result<(), String>>;
    /// Refuses the payload a `hook-next` command received.
    async fn hook_refuse(
        &mut self,
        request: u32,
        reason: String,
    ) -> wasmtime::Result<Result<(), String>>;
}

/// What a step may do beyond its grants: resume other runs' hooks, write
/// its own run's streams.
#[async_trait]
pub trait StepOutside: Send + Sync {
    /// Delivers `payload` to the active hook holding `token`; the owner.
    async fn resume_hook(&self, token: &str, payload: &str) -> crate::Result<RunId>;

    /// Stores `body` in the run's stream `stream`, written by attempt
    /// `attempt` of step `step_id` (`keel_store::StreamStore::write_stream`).
    async fn write_stream(
        &self,
        run_id: &RunId,
        stream: &str,
        step_id: &str,
        attempt: u32,
        body: keel_core::stream::ChunkBody,
    ) -> crate::Result<()>;

    /// Attempt `attempt` (after the first) of step `step_id` begins: the
    /// streams its earlier attempts wrote get a restart marker.
    async fn begin_attempt(&self, run_id: &RunId, step_id: &str, attempt: u32)
    -> crate::Result<()>;
}

/// What a step attempt learns about itself through `step_metadata()`, and
/// what it may do beyond its grants.
#[derive(Clone)]
pub struct StepContext {
    pub metadata: wit::StepMetadata,
    /// Acts on the step's behalf.
    pub outside: Arc<dyn StepOutside>,
    /// Passed before each of the attempt's effects.
    pub gate: Arc<dyn StepGate>,
}

/// Which side of the contract a store's guest is on.
pub enum Role {
    /// Only `get-manifest` is called.
    Manifest,
    Workflow(Box<dyn WorkflowCalls>),
    Step(StepContext),
}

/// The data of every wasmtime store the host creates.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    http_hooks: HttpGrant,
    pub(crate) limits: StoreLimits,
    pub(crate) role: Role,
    /// A workflow's pulse (unused by other guests).
    pub(crate) pulse: Arc<Pulse>,
}

impl HostState {
    fn new(wasi: WasiCtx, http: Vec<String>, max_memory: usize, role: Role) -> Self {
        let gate = match &role {
            Role::Step(ctx) => Some(ctx.gate.clone()),
            _ => None,
        };
        HostState {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            http_hooks: HttpGrant {
                allowed: http,
                denied: Vec::new(),
                gate,
            },
            limits: StoreLimitsBuilder::new()
                .memory_size(max_memory)
                .trap_on_grow_failure(true)
                .build(),
            role,
            pulse: Arc::default(),
        }
    }

    /// The hosts whose HTTP requests were denied, in order.
    pub(crate) fn denied_http(&self) -> &[String] {
        &self.http_hooks.denied
    }

    /// State for calling `get-manifest`: nothing granted.
    pub fn manifest(max_memory: usize) -> Self {
        let wasi = WasiCtxBuilder::new().build();
        HostState::new(wasi, Vec::new(), max_memory, Role::Manifest)
    }

    /// State for one workflow activation: journal clocks, randomness
    /// seeded by the run ID.
    pub fn workflow(
        calls: Box<dyn WorkflowCalls>,
        clock: JournalClock,
        log: GuestLog,
        max_memory: usize,
    ) -> Self {
        let seed = seed_from(calls.run_id());
        let mut b = WasiCtxBuilder::new();
        b.wall_clock(clock.clone())
            .monotonic_clock(clock)
            .secure_random(ChaCha12Rng::seed_from_u64(seed))
            .insecure_random(ChaCha12Rng::seed_from_u64(seed.rotate_left(17)))
            .insecure_random_seed(u128::from(seed))
            .stdout(log.stream("stdout"))
            .stderr(log.stream("stderr"));
        HostState::new(b.build(), Vec::new(), max_memory, Role::Workflow(calls))
    }

    /// State for one step attempt: real clocks and randomness, and the grants.
    pub fn step(
        ctx: StepContext,
        grants: &Grants,
        log: GuestLog,
        max_memory: usize,
    ) -> crate::Result<Self> {
        let mut b = WasiCtxBuilder::new();
        b.stdout(log.stream("stdout")).stderr(log.stream("stderr"));
        b.envs(&grants.env);
        for dir in &grants.dirs {
            let guest = dir.to_string_lossy().to_string();
            b.preopened_dir(dir, &guest, FsPerms::ReadWrite)
                .map_err(|e| crate::Error::Io {
                    path: dir.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
        }
        Ok(HostState::new(
            b.build(),
            grants.http.clone(),
            max_memory,
            Role::Step(ctx),
        ))
    }

    /// The workflow is replaying its journal (false outside a workflow).
    pub fn replaying(&self) -> bool {
        matches!(&self.role, Role::Workflow(w) if w.replaying())
    }

    /// The workflow calls this store was made for, to take back after a call.
    pub fn workflow_calls(&mut self) -> Option<&mut dyn Any> {
        match &mut self.role {
            Role::Workflow(w) => Some(w.as_any_mut()),
            _ => None,
        }
    }
}

fn seed_from(run_id: &str) -> u64 {
    let digest = Sha256::digest(run_id.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// The linker every guest is instantiated against: WASI 0.2, wasi:http and
/// keel's own interfaces.
pub fn base_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    WorkflowComponent::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// Interfaces whose results depend on the world outside the journal.
const NON_DETERMINISTIC: &[&str] = &["wasi:filesystem/", "wasi:sockets/", "wasi:http/"];

/// Why a workflow may not call `func` of `interface`, if it may not.
fn forbidden(interface: &str, func: &str) -> Option<&'static str> {
    if NON_DETERMINISTIC.iter().any(|p| interface.starts_with(p)) {
        return Some(
            "is not deterministic and is not available to workflows. Move this I/O into a \
             step (#[step] in Rust, @keel.step in Python); steps run with the capabilities granted to the component (HTTP hosts, \
             directories, environment variables)",
        );
    }
    if interface.starts_with("wasi:clocks/monotonic-clock") && func.starts_with("subscribe-") {
        return Some(
            "blocks on the machine's clock (a thread sleep), which a workflow may not do: it \
             would hold its run without a trace in the journal. Wait with `keel_sdk::sleep` \
             (`keel.sleep` in Python), which is durable",
        );
    }
    None
}

/// The component's imports a workflow may not call (I/O outside the
/// journal, sleeping on the machine's clock), as `interface#function`.
pub fn non_deterministic_imports(engine: &Engine, component: &Component) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, item) in component.component_type().imports(engine) {
        if let ComponentItem::ComponentInstance(instance) = item.ty {
            for (func, item) in instance.exports(engine) {
                if matches!(item.ty, ComponentItem::ComponentFunc(_))
                    && forbidden(name, func).is_some()
                {
                    out.push((name.to_string(), func.to_string()));
                }
            }
        }
    }
    out
}

/// The version of WASI 0.2 that wasmtime-wasi defines in [`base_linker`].
const WASI_P2_VERSION: &str = "0.2.12";

/// The name under which [`base_linker`] defines the WASI interface that
/// a component imports as `import`. wasmtime links an import of any 0.2.x
/// to the host's 0.2 definition, so a shadowing stub must go into that
/// definition: an instance under the import's own version would hide the
/// host's functions the guest may call (componentize-py imports 0.2.9).
fn host_interface_name(import: &str) -> String {
    match import.split_once('@') {
        Some((name, version)) if name.starts_with("wasi:") && version.starts_with("0.2.") => {
            format!("{name}@{WASI_P2_VERSION}")
        }
        _ => import.to_string(),
    }
}

/// The workflow linker for one component: the base linker with every
/// function a workflow may not call shadowed by a stub that fails the run.
pub fn workflow_linker(
    base: &Linker<HostState>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = base.clone();
    linker.allow_shadowing(true);
    for (interface, func) in non_deterministic_imports(engine, component) {
        let what = format!("{interface}#{func}");
        let why = forbidden(&interface, &func).unwrap_or_default();
        linker
            .instance(&host_interface_name(&interface))?
            .func_new(&func, move |store, _ty, _params, _results| {
                let run_id = match &store.data().role {
                    Role::Workflow(w) => w.run_id().clone(),
                    _ => RunId::default(),
                };
                Err(wasmtime::Error::new(crate::Error::SandboxViolation {
                    run_id,
                    reason: format!("called `{what}`, which {why}"),
                }))
            })?;
    }
    Ok(linker)
}

impl keel::workflow::types::Host for HostState {}

impl keel::workflow::step_context::Host for HostState {
    async fn metadata(&mut self) -> wasmtime::Result<wit::StepMetadata> {
        Ok(self.step_context()?.metadata.clone())
    }

    async fn resume_hook(
        &mut self,
        token: String,
        payload: String,
    ) -> wasmtime::Result<Result<String, wit::ResumeError>> {
        let ctx = self.step_context()?;
        let (outside, gate) = (ctx.outside.clone(), ctx.gate.clone());
        if let Err(e) = gate.before(Effect::StepHookResume).await {
            return Ok(Err(wit::ResumeError::Failed(e.to_string())));
        }
        Ok(match outside.resume_hook(&token, &payload).await {
            Ok(run_id) => Ok(run_id.into_string()),
            Err(crate::Error::HookNotFound { .. }) => Err(wit::ResumeError::HookNotFound),
            Err(e) => Err(wit::ResumeError::Failed(e.to_string())),
        })
    }

    async fn stream_write(
        &mut self,
        name: String,
        chunk: String,
    ) -> wasmtime::Result<Result<(), String>> {
        self.step_stream(&name, keel_core::stream::ChunkBody::Data(chunk))
            .await
    }

    async fn stream_close(&mut self, name: String) -> wasmtime::Result<Result<(), String>> {
        self.step_stream(&name, keel_core::stream::ChunkBody::Closed)
            .await
    }
}

impl HostState {
    /// A step's write of `body` to its run's stream `stream`; an error
    /// the guest gets names the refusal.
    async fn step_stream(
        &mut self,
        stream: &str,
        body: keel_core::stream::ChunkBody,
    ) -> wasmtime::Result<Result<(), String>> {
        if let Err(e) = keel_core::stream::check_stream_name(stream) {
            return Ok(Err(e));
        }
        let ctx = self.step_context()?;
        let (outside, m, gate) = (ctx.outside.clone(), ctx.metadata.clone(), ctx.gate.clone());
        if let Err(e) = gate.before(Effect::StepStreamChunk).await {
            return Ok(Err(e.to_string()));
        }
        let run_id = RunId::from(m.run_id.as_str());
        Ok(outside
            .write_stream(&run_id, stream, &m.step_id, m.attempt, body)
            .await
            .map_err(|e| e.to_string()))
    }

    fn step_context(&self) -> wasmtime::Result<&StepContext> {
        match &self.role {
            Role::Step(ctx) => Ok(ctx),
            Role::Workflow(w) => Err(wasmtime::Error::new(crate::Error::SandboxViolation {
                run_id: w.run_id().clone(),
                reason: "called step_metadata(), resume_hook() or a step's stream, which only steps may call; in a workflow use workflow_metadata(), hooks to wait for payloads, and keel_sdk::stream (which journals the workflow's writes)".into(),
            })),
            _ => Err(wasmtime::Error::msg(
                "a step function (step_metadata, resume_hook) was called outside a step; inside a workflow use workflow_metadata() and hooks",
            )),
        }
    }

    fn calls(&mut self) -> wasmtime::Result<&mut dyn WorkflowCalls> {
        match &mut self.role {
            Role::Workflow(w) => Ok(w.as_mut()),
            _ => Err(wasmtime::Error::msg(
                "a step called a workflow function (schedule a step, sleep, wait); \
                 steps cannot orchestrate: call them from a #[workflow]",
            )),
        }
    }
}

impl keel::workflow::workflow_context::Host for HostState {
    async fn schedule_step(&mut self, name: String, input: String) -> wasmtime::Result<u32> {
        let _call = self.pulse.keel_call();
        self.calls()?.schedule_step(name, input).await
    }

    async fn schedule_sleep(&mut self, duration_ms: u64) -> wasmtime::Result<u32> {
        let _call = self.pulse.keel_call();
        self.calls()?.schedule_sleep(duration_ms).await
    }

    async fn wait_any(&mut self, ids: Vec<u32>) -> wasmtime::Result<wit::Completion> {
        let _call = self.pulse.keel_call();
        self.calls()?.wait_any(&ids).await
    }

    async fn await_any(&mut self, ids: Vec<u32>) -> wasmtime::Result<wit::Wake> {
        let _call = self.pulse.keel_call();
        self.calls()?.await_any(&ids).await
    }

    async fn cancelled_call(&mut self) -> wasmtime::Result<()> {
        let _call = self.pulse.keel_call();
        self.calls()?.cancelled_call().await
    }

    async fn metadata(&mut self) -> wasmtime::Result<wit::WorkflowMetadata> {
        Ok(self.calls()?.metadata())
    }

    async fn patched(&mut self, change_id: String) -> wasmtime::Result<bool> {
        let _call = self.pulse.keel_call();
        self.calls()?.patched(change_id).await
    }

    async fn log(&mut self, level: wit::LogLevel, message: String) -> wasmtime::Result<()> {
        self.calls()?.log(level, &message);
        Ok(())
    }

    async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.create_hook(options).await
    }

    async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32> {
        let _call = self.pulse.keel_call();
        self.calls()?.hook_next(handle).await
    }

    async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()> {
        let _call = self.pulse.keel_call();
        self.calls()?.dispose_hook(handle).await
    }

    async fn read_run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus> {
        let _call = self.pulse.keel_call();
        self.calls()?.run_status(run_id).await
    }

    async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32> {
        let _call = self.pulse.keel_call();
        self.calls()?.await_run(run_id).await
    }

    async fn start_workflow(
        &mut self,
        workflow: String,
        input: String,
        options: wit::StartOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        let _call = self.pulse.keel_call();
        let options = child_options(options.token, options.metadata, options.min_retention_ms);
        self.calls()?.start_child(workflow, input, options).await
    }

    async fn start_child(
        &mut self,
        workflow: String,
        input: String,
        options: wit::ChildOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        let _call = self.pulse.keel_call();
        let options = ChildOptions {
            deployment: options.deployment,
            close: match options.close {
                wit::ClosePolicy::Cancel => ClosePolicy::Cancel,
                wit::ClosePolicy::Abandon => ClosePolicy::Abandon,
                wit::ClosePolicy::Wait => ClosePolicy::Wait,
            },
            timeout_ms: options.timeout_ms,
            ..child_options(options.token, options.metadata, options.min_retention_ms)
        };
        self.calls()?.start_child(workflow, input, options).await
    }

    async fn set_attribute(
        &mut self,
        key: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.set_attribute(key, value).await
    }

    async fn set_query(
        &mut self,
        name: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        Ok(self.calls()?.set_query(name, value))
    }

    async fn continue_as_new(&mut self, input: String) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.continue_as_new(input)
    }

    async fn stream_write(
        &mut self,
        name: String,
        chunk: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.stream_write(name, chunk).await
    }

    async fn stream_close(&mut self, name: String) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.stream_close(name).await
    }

    async fn hook_reply(
        &mut self,
        request: u32,
        reply: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.hook_reply(request, reply).await
    }

    async fn hook_refuse(
        &mut self,
        request: u32,
        reason: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let _call = self.pulse.keel_call();
        self.calls()?.hook_refuse(request, reason).await
    }
}

/// The options of a child start with its start hook's, closed by `cancel`.
fn child_options(
    token: Option<String>,
    metadata: Option<String>,
    min_retention_ms: Option<u64>,
) -> ChildOptions {
    ChildOptions {
        token,
        metadata,
        min_retention_ms,
        ..ChildOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stubs shadow the host's own definitions only if
    /// [`WASI_P2_VERSION`] is the version wasmtime-wasi defines: the
    /// exact name is taken.
    #[test]
    fn the_host_defines_wasi_at_the_version_the_stubs_shadow() {
        let engine = Engine::default();
        let mut linker = base_linker(&engine).unwrap();
        linker.allow_shadowing(false);
        let name = host_interface_name("wasi:clocks/monotonic-clock@0.2.9");
        assert_eq!(
            name,
            format!("wasi:clocks/monotonic-clock@{WASI_P2_VERSION}")
        );
        let defined = linker
            .instance(&name)
            .unwrap()
            .func_wrap("now", |_, (): ()| Ok((0u64,)));
        assert!(
            defined.is_err(),
            "wasmtime-wasi no longer defines WASI {WASI_P2_VERSION}: update WASI_P2_VERSION"
        );
    }

    #[test]
    fn only_wasi_0_2_imports_are_renamed() {
        assert_eq!(
            host_interface_name("keel:workflow/workflow-context@0.1.0"),
            "keel:workflow/workflow-context@0.1.0"
        );
        assert_eq!(
            host_interface_name("wasi:http/types@0.3.0"),
            "wasi:http/types@0.3.0"
        );
    }
}
