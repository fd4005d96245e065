//! The two sandboxes a guest runs in.
//!
//! The workflow sandbox is deterministic: its clocks read journal time, its
//! randomness is seeded by the run ID, it has no filesystem, sockets,
//! environment, arguments or stdin, and every non-deterministic import
//! (filesystem, sockets, HTTP) is shadowed by a stub that fails the run. The
//! step sandbox has real clocks and randomness and only the capabilities the
//! operator granted.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;
use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{
    FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::activation::Activation;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "keel:workflow/workflow-component",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use keel::workflow::types as wit;

/// The capabilities the operator grants to steps. Nothing by default.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// Hosts (`host` or `host:port`) steps may send HTTP requests to.
    pub http: Vec<String>,
    /// Host directories preopened for steps, at the same path in the guest.
    pub dirs: Vec<PathBuf>,
    /// Environment variables passed to steps, with their values.
    pub env: Vec<(String, String)>,
}

/// What a step attempt learns about itself through `step_metadata()`.
#[derive(Clone)]
pub struct StepContext {
    pub metadata: wit::StepMetadata,
    /// The engine, which resumes hooks on the step's behalf.
    pub(crate) keel: crate::Keel,
}

/// Which side of the contract a store's guest is on.
pub enum Role {
    /// Only `get-manifest` is called.
    Manifest,
    Workflow(Box<Activation>),
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
}

impl HostState {
    fn new(wasi: WasiCtx, http: Vec<String>, max_memory: usize, role: Role) -> Self {
        HostState {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            http_hooks: HttpGrant { allowed: http },
            limits: StoreLimitsBuilder::new()
                .memory_size(max_memory)
                .trap_on_grow_failure(true)
                .build(),
            role,
        }
    }

    /// State for calling `get-manifest`: nothing granted.
    pub fn manifest(max_memory: usize) -> Self {
        let wasi = WasiCtxBuilder::new().build();
        HostState::new(wasi, Vec::new(), max_memory, Role::Manifest)
    }

    /// State for one workflow activation: journal clocks, seeded randomness.
    pub fn workflow(
        activation: Activation,
        clock: JournalClock,
        log: GuestLog,
        max_memory: usize,
    ) -> Self {
        let seed = seed_from(&activation.run_id);
        let mut b = WasiCtxBuilder::new();
        b.wall_clock(clock.clone())
            .monotonic_clock(clock)
            .secure_random(ChaCha12Rng::seed_from_u64(seed))
            .insecure_random(ChaCha12Rng::seed_from_u64(seed.rotate_left(17)))
            .insecure_random_seed(u128::from(seed))
            .stdout(log.stream("stdout"))
            .stderr(log.stream("stderr"));
        HostState::new(
            b.build(),
            Vec::new(),
            max_memory,
            Role::Workflow(Box::new(activation)),
        )
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

/// Outbound HTTP limited to the granted hosts.
struct HttpGrant {
    allowed: Vec<String>,
}

impl HttpGrant {
    fn permits(&self, uri: &http::Uri) -> bool {
        let Some(host) = uri.host() else { return false };
        let port = uri.port_u16();
        self.allowed
            .iter()
            .any(|grant| match grant.rsplit_once(':') {
                Some((h, p)) if p.parse::<u16>().is_ok() => {
                    h == host && (port.map(|x| x.to_string()).as_deref() == Some(p))
                }
                _ => grant == host,
            })
    }
}

type SendFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<wasmtime_wasi_http::WasiBody>,
                Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for HttpGrant {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> SendFuture {
        if !self.permits(request.uri()) {
            tracing::warn!(uri = %request.uri(), "step HTTP request denied: grant the host with --allow-http");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                res.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

/// The workflow's clocks: the time of the journal entry being replayed or
/// appended, never the machine's.
#[derive(Clone)]
pub struct JournalClock {
    now_ms: Arc<AtomicU64>,
    started_ms: u64,
}

impl JournalClock {
    pub fn new(started_ms: u64) -> Self {
        JournalClock {
            now_ms: Arc::new(AtomicU64::new(started_ms)),
            started_ms,
        }
    }

    /// Moves the clock to an entry's time.
    pub fn set(&self, ms: u64) {
        self.now_ms.store(ms, Ordering::Relaxed);
    }

    /// The clock's current value, in milliseconds since the Unix epoch.
    pub fn ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }
}

impl HostWallClock for JournalClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.ms())
    }
}

impl HostMonotonicClock for JournalClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        self.ms().saturating_sub(self.started_ms) * 1_000_000
    }
}

/// A guest's stdout and stderr, sent to `tracing` tagged with the run ID.
/// The tail of stderr is kept to explain a trap.
#[derive(Clone)]
pub struct GuestLog {
    run_id: Arc<str>,
    tail: Arc<Mutex<String>>,
}

const TAIL_BYTES: usize = 2048;

impl GuestLog {
    pub fn new(run_id: &str) -> Self {
        GuestLog {
            run_id: run_id.into(),
            tail: Arc::default(),
        }
    }

    fn stream(&self, name: &'static str) -> GuestStream {
        GuestStream {
            log: self.clone(),
            name,
        }
    }

    /// The last lines the guest wrote to stderr.
    pub fn tail(&self) -> String {
        self.tail.lock().expect("log tail").trim().to_string()
    }
}

struct GuestStream {
    log: GuestLog,
    name: &'static str,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(GuestWriter {
            log: self.log.clone(),
            name: self.name,
        })
    }
}

struct GuestWriter {
    log: GuestLog,
    name: &'static str,
}

impl tokio::io::AsyncWrite for GuestWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let text = String::from_utf8_lossy(buf);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::info!(run_id = %self.log.run_id, stream = self.name, "guest: {line}");
        }
        if self.name == "stderr" {
            let mut tail = self.log.tail.lock().expect("log tail");
            tail.push_str(&text);
            if tail.len() > TAIL_BYTES {
                let cut = tail.len() - TAIL_BYTES;
                let cut = (cut..tail.len())
                    .find(|i| tail.is_char_boundary(*i))
                    .unwrap_or(0);
                tail.drain(..cut);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
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

/// The component's imports that are not deterministic, as `interface#function`.
pub fn non_deterministic_imports(engine: &Engine, component: &Component) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, item) in component.component_type().imports(engine) {
        if !NON_DETERMINISTIC.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        if let ComponentItem::ComponentInstance(instance) = item.ty {
            for (func, item) in instance.exports(engine) {
                if matches!(item.ty, ComponentItem::ComponentFunc(_)) {
                    out.push((name.to_string(), func.to_string()));
                }
            }
        }
    }
    out
}

/// The workflow linker for one component: the base linker with every
/// non-deterministic function shadowed by a stub that fails the run.
pub fn workflow_linker(
    base: &Linker<HostState>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = base.clone();
    linker.allow_shadowing(true);
    for (interface, func) in non_deterministic_imports(engine, component) {
        let what = format!("{interface}#{func}");
        linker
            .instance(&interface)?
            .func_new(&func, move |store, _ty, _params, _results| {
                let run_id = match &store.data().role {
                    Role::Workflow(a) => a.run_id.clone(),
                    _ => String::new(),
                };
                Err(wasmtime::Error::new(crate::Error::SandboxViolation {
                    run_id,
                    reason: format!(
                        "called `{what}`, which is not deterministic and is not available to \
                         workflows. Move this I/O into a #[step]; steps run with the \
                         capabilities granted by --allow-http, --allow-dir and --allow-env"
                    ),
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
        let keel = self.step_context()?.keel.clone();
        Ok(match keel.resume_hook(&token, &payload).await {
            Ok(run_id) => Ok(run_id),
            Err(crate::Error::HookNotFound { .. }) => Err(wit::ResumeError::HookNotFound),
            Err(e) => Err(wit::ResumeError::Failed(e.to_string())),
        })
    }
}

impl HostState {
    fn step_context(&self) -> wasmtime::Result<&StepContext> {
        match &self.role {
            Role::Step(ctx) => Ok(ctx),
            _ => Err(wasmtime::Error::msg(
                "a step function (step_metadata, resume_hook) was called outside a step; inside a workflow use workflow_metadata() and hooks",
            )),
        }
    }
}

impl keel::workflow::workflow_context::Host for HostState {
    async fn schedule_step(&mut self, name: String, input: String) -> wasmtime::Result<u32> {
        self.activation()?.schedule_step(name, input).await
    }

    async fn schedule_sleep(&mut self, duration_ms: u64) -> wasmtime::Result<u32> {
        self.activation()?.schedule_sleep(duration_ms).await
    }

    async fn wait_any(&mut self, ids: Vec<u32>) -> wasmtime::Result<wit::Completion> {
        self.activation()?.wait_any(&ids).await
    }

    async fn metadata(&mut self) -> wasmtime::Result<wit::WorkflowMetadata> {
        Ok(self.activation()?.metadata())
    }

    async fn patched(&mut self, change_id: String) -> wasmtime::Result<bool> {
        self.activation()?.patched(change_id).await
    }

    async fn log(&mut self, level: wit::LogLevel, message: String) -> wasmtime::Result<()> {
        self.activation()?.log(level, &message);
        Ok(())
    }

    async fn create_hook(
        &mut self,
        options: wit::HookOptions,
    ) -> wasmtime::Result<Result<wit::Hook, String>> {
        self.activation()?.create_hook(options).await
    }

    async fn hook_next(&mut self, handle: u32) -> wasmtime::Result<u32> {
        self.activation()?.hook_next(handle).await
    }

    async fn dispose_hook(&mut self, handle: u32) -> wasmtime::Result<()> {
        self.activation()?.dispose_hook(handle).await
    }

    async fn read_run_status(&mut self, run_id: String) -> wasmtime::Result<wit::RunStatus> {
        self.activation()?.run_status(run_id).await
    }

    async fn await_run(&mut self, run_id: String) -> wasmtime::Result<u32> {
        self.activation()?.await_run(run_id).await
    }

    async fn start_workflow(
        &mut self,
        workflow: String,
        input: String,
        options: wit::StartOptions,
    ) -> wasmtime::Result<Result<String, wit::StartError>> {
        self.activation()?
            .start_workflow(workflow, input, options)
            .await
    }
}

impl HostState {
    fn activation(&mut self) -> wasmtime::Result<&mut Activation> {
        match &mut self.role {
            Role::Workflow(a) => Ok(a),
            _ => Err(wasmtime::Error::msg(
                "a step called a workflow function (schedule a step, sleep, wait); \
                 steps cannot orchestrate: call them from a #[workflow]",
            )),
        }
    }
}
