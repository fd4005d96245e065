//! Hooks and run handles.
//!
//! A hook is a token-addressed inbox owned by one run: outside code (the
//! CLI, the host API, or a step calling [`resume_hook`]) delivers JSON
//! payloads to it, and the workflow reads them in order with
//! [`Hook::next`] or as a [`Stream`]. Payloads resumed before the workflow
//! opens the hook are kept and delivered first. A token is held by at most
//! one run at a time; [`Hook::conflict`] names the run that holds it.
//!
//! A [`RunHandle`] is another run: its status, its return value, and
//! [`start`] starts one from a workflow.
//!
//! Every call here is journaled, so replay gives the workflow the same
//! hooks, payloads, statuses and results.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::Stream;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::keel::workflow::types::{self, Outcome};
use crate::bindings::keel::workflow::{step_context, workflow_context as host};
use crate::error::Error;
use crate::executor::Command;

/// Options of [`create_hook`]. A `&str` or `String` converts into options
/// with that token.
///
/// ```ignore
/// let options = HookOptions::new().token(format!("order:{id}")).force(true);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookOptions {
    token: Option<String>,
    metadata: Option<String>,
    min_retention: Option<Duration>,
    force: bool,
}

impl HookOptions {
    /// A hook with a token derived from the run and the hook's position.
    pub fn new() -> Self {
        HookOptions::default()
    }

    /// The token outside code resumes the hook with.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// JSON metadata, shown by `keel hooks get`. Not for the start hook.
    pub fn metadata<M: Serialize>(mut self, metadata: &M) -> Self {
        self.metadata = serde_json::to_string(metadata).ok();
        self
    }

    /// Keeps the token unavailable for this long from now, even after the
    /// run ends (a disposed hook releases it at once). Not for the start hook.
    pub fn min_retention(mut self, retention: Duration) -> Self {
        self.min_retention = Some(retention);
        self
    }

    /// Takes the token over from the run that holds it, even a finished run
    /// keeping it for its retention. That run's next await on its hook fails
    /// with [`Error::HookForceClaimed`]. Not for the start hook.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }
}

impl From<&str> for HookOptions {
    fn from(token: &str) -> Self {
        HookOptions::new().token(token)
    }
}

impl From<String> for HookOptions {
    fn from(token: String) -> Self {
        HookOptions::new().token(token)
    }
}

/// Creates a hook whose payloads are `T`s (JSON).
///
/// `T`'s JSON Schema is recorded with the hook: a resume whose payload
/// does not fit it is refused (`invalid_input`, naming each place) before
/// anything is delivered, so a malformed payload never reaches the run.
/// Derive [`schemars::JsonSchema`](crate::JsonSchema) for the payload type,
/// or take `serde_json::Value` for any JSON. A payload that fits the
/// schema but does not decode (a custom `Deserialize` that refuses it) is
/// refused by the run: awaiting it fails with [`Error::Payload`], and a
/// retry of a run that failed on it skips that payload.
///
/// On the run's own start token the hook binds to the start hook: nothing
/// new is registered and [`Hook::conflict`] is `None`; metadata, retention
/// and force belong to `start()` there and are refused with
/// [`Error::HookOptions`]. On a token another run holds, nothing is
/// registered: [`Hook::conflict`] names that run and awaiting the hook fails
/// with [`Error::HookConflict`].
///
/// Dropping the hook disposes of it, as `dispose()` does: like `using` in
/// TypeScript, a hook created in an inner scope releases its token when the
/// scope ends, and one created at the top of the workflow releases it as
/// the run returns, before any retention. Call [`Hook::keep`] to hold the
/// token until the run ends instead (and for its retention after).
///
/// ```ignore
/// #[derive(Deserialize)]
/// struct Update { note: String, done: bool }
///
/// let mut updates = create_hook::<Update>(format!("order:{order_id}"))?.keep();
/// loop {
///     let update = updates.next().await?;
///     record_note(update.note).await?;
///     if update.done { break; }
/// }
/// ```
pub fn create_hook<T: DeserializeOwned + schemars::JsonSchema>(
    options: impl Into<HookOptions>,
) -> Result<Hook<T>, Error> {
    let options = options.into();
    let hook = host::create_hook(&types::HookOptions {
        token: options.token,
        metadata: options.metadata,
        min_retention_ms: options.min_retention.map(millis),
        force: options.force,
        payload_schema: serde_json::to_string(&schemars::schema_for!(T)).ok(),
    })
    .map_err(Error::HookOptions)?;
    let conflict = match hook.registration {
        types::HookRegistration::Conflict(owner) => Some(owner),
        types::HookRegistration::Registered | types::HookRegistration::BoundToStart => None,
    };
    Ok(Hook {
        handle: hook.handle,
        token: hook.token,
        conflict,
        keep: false,
        pending: Command::new(),
        _payload: PhantomData,
    })
}

/// A hook created by [`create_hook`]; see there.
#[must_use = "dropping a hook disposes of it and releases its token"]
pub struct Hook<T> {
    handle: u32,
    token: String,
    /// The run that holds the token, when this hook registered nothing.
    conflict: Option<String>,
    keep: bool,
    /// The payload being awaited; kept across dropped `next()` futures so
    /// no payload is lost to a `select!`.
    pending: Command,
    _payload: PhantomData<fn() -> T>,
}

impl<T> Hook<T> {
    /// The hook's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The run that holds this hook's token, if it is not this run.
    pub async fn conflict(&self) -> Option<RunHandle> {
        self.conflict.clone().map(|run_id| RunHandle { run_id })
    }

    /// Holds the token until the run ends (and for its retention after),
    /// instead of disposing of the hook when it is dropped.
    pub fn keep(mut self) -> Self {
        self.keep = true;
        self
    }

    /// Releases the token at once; retention no longer applies.
    pub fn dispose(mut self) {
        self.keep = false;
    }
}

impl<T: DeserializeOwned> Hook<T> {
    /// The next payload, in the order they were resumed.
    pub async fn next(&mut self) -> Result<T, Error> {
        std::future::poll_fn(|cx| self.poll_payload(cx).map(|p| p.map(|(payload, _)| payload)))
            .await
    }

    /// The next payload with a [`Reply`] to answer it by: request/reply on
    /// a hook. A client resuming with `wait_reply_ms` (`keel hooks resume
    /// --wait-reply`) gets the reply in the same request, or fetches it
    /// later by its payload ID.
    ///
    /// ```ignore
    /// let mut approvals = create_hook::<Approval>(format!("approve:{id}"))?.keep();
    /// let (approval, reply) = approvals.next_request().await?;
    /// let result = run_tool(approval).await?;
    /// reply.send(&result)?;
    /// ```
    pub async fn next_request(&mut self) -> Result<(T, Reply), Error> {
        let (payload, request) = std::future::poll_fn(|cx| self.poll_payload(cx)).await?;
        Ok((
            payload,
            Reply {
                request,
                token: self.token.clone(),
            },
        ))
    }

    /// The next payload and the ID of the command that received it.
    fn poll_payload(&mut self, cx: &mut Context<'_>) -> Poll<Result<(T, u32), Error>> {
        if let Some(owner) = &self.conflict {
            return Poll::Ready(Err(Error::HookConflict {
                token: self.token.clone(),
                conflicting_run_id: owner.clone(),
            }));
        }
        let handle = self.handle;
        let outcome = ready!(self.pending.poll(cx, || host::hook_next(handle)));
        let request = self.pending.id().unwrap_or_default();
        self.pending = Command::new();
        Poll::Ready(match outcome? {
            Outcome::HookPayload(json) => serde_json::from_str(&json)
                .map(|payload| (payload, request))
                .map_err(|e| {
                    let reason = format!("a payload of hook `{}` does not decode: {e}", self.token);
                    // Journaled, so that a retry of a run this fails skips
                    // the payload instead of failing on it again.
                    let _ = host::hook_refuse(request, &reason);
                    Error::Payload(reason)
                }),
            Outcome::HookRejected(types::HookRejection::ForceClaimed(by)) => {
                Err(Error::HookForceClaimed {
                    token: self.token.clone(),
                    claimed_by_run_id: by,
                })
            }
            _ => unreachable!("the host completed a hook with something else"),
        })
    }
}

/// Payloads forever, or an error; use `while let Some(p) = hook.next().await`
/// style loops with [`futures::StreamExt`].
impl<T: DeserializeOwned> Stream for Hook<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_payload(cx)
            .map(|p| Some(p.map(|(payload, _)| payload)))
    }
}

/// The answer to one payload of a hook, from [`Hook::next_request`].
#[must_use = "a request waits for its reply until `send` is called"]
#[derive(Debug)]
pub struct Reply {
    /// The command that received the payload.
    request: u32,
    token: String,
}

impl Reply {
    /// Sends `value` (as JSON) as the reply: journaled and durable on
    /// return, once per payload.
    pub fn send<R: Serialize + ?Sized>(self, value: &R) -> Result<(), Error> {
        let json = serde_json::to_string(value)?;
        host::hook_reply(self.request, &json)
            .map_err(|e| Error::Custom(format!("replying on hook `{}`: {e}", self.token)))
    }
}

impl<T> Drop for Hook<T> {
    fn drop(&mut self) {
        if !self.keep && self.conflict.is_none() {
            host::dispose_hook(self.handle);
        }
    }
}

/// A run's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    Pending,
    Running,
    /// Running, suspended until a timer, a payload or another run.
    Waiting,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// The run has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

/// Another run: the owner of a token, or a run this workflow started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunHandle {
    pub run_id: String,
}

impl RunHandle {
    /// The run's status at this point of the workflow (journaled).
    pub async fn status(&self) -> RunStatus {
        match host::read_run_status(&self.run_id) {
            types::RunStatus::Pending => RunStatus::Pending,
            types::RunStatus::Running => RunStatus::Running,
            types::RunStatus::Waiting => RunStatus::Waiting,
            types::RunStatus::Completed => RunStatus::Completed,
            types::RunStatus::Failed => RunStatus::Failed,
            types::RunStatus::Cancelled => RunStatus::Cancelled,
        }
    }

    /// Waits until the run ends and returns its output, or
    /// [`Error::RunFailed`] if it failed or was cancelled.
    pub fn return_value<T: DeserializeOwned>(&self) -> ReturnValue<T> {
        ReturnValue {
            run_id: self.run_id.clone(),
            command: Command::new(),
            _output: PhantomData,
        }
    }
}

/// The future of [`RunHandle::return_value`].
#[must_use = "the run is awaited only when this future is"]
pub struct ReturnValue<T> {
    run_id: String,
    command: Command,
    _output: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Future for ReturnValue<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let run_id = &this.run_id;
        let outcome = ready!(this.command.poll(cx, || host::await_run(run_id)));
        Poll::Ready(match outcome? {
            Outcome::RunEnded(end) => match (end.status, end.output) {
                (types::RunStatus::Completed, Some(json)) => serde_json::from_str(&json)
                    .map_err(|e| Error::Payload(format!("run {run_id}'s output: {e}"))),
                (status, _) => Err(Error::RunFailed {
                    run_id: run_id.clone(),
                    cancelled: status == types::RunStatus::Cancelled,
                    message: end.error.unwrap_or_default(),
                }),
            },
            _ => unreachable!("the host completed a run await with something else"),
        })
    }
}

/// What becomes of a child run when the workflow that started it ends
/// (completes, fails or is cancelled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClosePolicy {
    /// The child gets a cancel request and runs its own cleanup.
    #[default]
    Cancel,
    /// The child goes on.
    Abandon,
    /// The parent's end waits until the child has ended.
    Wait,
}

/// Options of [`start`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartOptions {
    token: Option<String>,
    metadata: Option<String>,
    min_retention: Option<Duration>,
    deployment: Option<String>,
    close: ClosePolicy,
    timeout: Option<Duration>,
}

impl StartOptions {
    /// A start with the start token `token`: refused with
    /// [`Error::HookConflict`] while another run holds it.
    pub fn token(token: impl Into<String>) -> Self {
        StartOptions {
            token: Some(token.into()),
            ..StartOptions::default()
        }
    }

    /// JSON metadata of the start hook.
    pub fn metadata<M: Serialize>(mut self, metadata: &M) -> Self {
        self.metadata = serde_json::to_string(metadata).ok();
        self
    }

    /// Keeps the token for this long from the start, even after the run ends.
    pub fn min_retention(mut self, retention: Duration) -> Self {
        self.min_retention = Some(retention);
        self
    }

    /// Runs the child on the latest component of the deployment `name`
    /// (which must export the workflow) instead of this run's component.
    pub fn deployment(mut self, name: impl Into<String>) -> Self {
        self.deployment = Some(name.into());
        self
    }

    /// What becomes of the child when this workflow ends; default
    /// [`ClosePolicy::Cancel`].
    pub fn close(mut self, policy: ClosePolicy) -> Self {
        self.close = policy;
        self
    }

    /// The child's deadline, from its start (its workflow's own timeout
    /// otherwise): past it, the child is cancelled with `deadline_exceeded`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Starts a child run of `workflow` (of this component, or of the
/// deployment [`StartOptions::deployment`] names) with `input`, from a
/// workflow; journaled, so a recovered workflow does not start it twice.
/// When this workflow ends, the child follows its [`ClosePolicy`].
///
/// ```ignore
/// let child = keel_sdk::start("order_updates", &input, StartOptions::token("order:7")).await?;
/// let notes: Vec<String> = child.return_value().await?;
/// let audit = StartOptions::default().deployment("audit").close(ClosePolicy::Abandon);
/// keel_sdk::start("record", &input, audit).await?;
/// ```
pub async fn start<I: Serialize + ?Sized>(
    workflow: &str,
    input: &I,
    options: StartOptions,
) -> Result<RunHandle, Error> {
    let input = serde_json::to_string(input)?;
    let token = options.token.clone();
    let options = types::ChildOptions {
        token: options.token,
        metadata: options.metadata,
        min_retention_ms: options.min_retention.map(millis),
        deployment: options.deployment,
        close: match options.close {
            ClosePolicy::Cancel => types::ClosePolicy::Cancel,
            ClosePolicy::Abandon => types::ClosePolicy::Abandon,
            ClosePolicy::Wait => types::ClosePolicy::Wait,
        },
        timeout_ms: options.timeout.map(millis),
    };
    match host::start_child(workflow, &input, &options) {
        Ok(run_id) => Ok(RunHandle { run_id }),
        Err(types::StartError::HookConflict(owner)) => Err(Error::HookConflict {
            token: token.unwrap_or_default(),
            conflicting_run_id: owner,
        }),
        Err(types::StartError::Refused(reason)) => Err(Error::Custom(format!(
            "starting `{workflow}` was refused: {reason}"
        ))),
    }
}

/// Delivers `payload` to the active hook holding `token`, from a step (the
/// "signal the owner" pattern); returns the owner's handle, or
/// [`Error::HookNotFound`] when no active hook holds the token.
pub async fn resume_hook<P: Serialize + ?Sized>(
    token: &str,
    payload: &P,
) -> Result<RunHandle, Error> {
    let payload = serde_json::to_string(payload)?;
    match step_context::resume_hook(token, &payload) {
        Ok(run_id) => Ok(RunHandle { run_id }),
        Err(types::ResumeError::HookNotFound) => Err(Error::HookNotFound {
            token: token.into(),
        }),
        Err(types::ResumeError::Failed(reason)) => Err(Error::Custom(format!(
            "resuming hook `{token}` failed: {reason}"
        ))),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
