//! The workflow's executor: a single-threaded loop that polls the workflow's
//! future and, whenever it is pending, asks the host for the next completion
//! of the commands it awaits.
//!
//! Every future here schedules its command on first poll, so the order of
//! commands is the order in which the workflow's code polls them, which is
//! deterministic; the host delivers completions in journal order.
//!
//! A cancel of the run is delivered the same way, once, in journal order.
//! From then on every keel future fails with [`Error::Cancelled`] (a timer
//! completes at once), without reaching the host, unless it is polled
//! inside [`non_cancellable`]: the workflow's cleanup.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::bindings::keel::workflow::types::{Outcome, Wake};
use crate::bindings::keel::workflow::workflow_context as host;
use crate::error::{Error, StepFailure};

#[derive(Default)]
struct State {
    /// Commands some live future awaits.
    awaited: BTreeSet<u32>,
    /// Completions delivered by the host, not yet taken by their future.
    delivered: HashMap<u32, Outcome>,
    /// The waker of each awaiting future, woken on delivery so that
    /// combinators which poll only woken children (`FuturesUnordered`) work.
    wakers: HashMap<u32, Waker>,
    /// The run's cancel, once the host delivered it.
    cancel: Option<Error>,
    /// How many [`non_cancellable`] futures are being polled.
    shield: u32,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Drives `future` to completion, blocking on the host while it is pending.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    STATE.with(|s| *s.borrow_mut() = State::default());
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        let awaited: Vec<u32> = STATE.with(|s| s.borrow().awaited.iter().copied().collect());
        assert!(
            !awaited.is_empty(),
            "the workflow is pending on a future that is not a keel step, timer, hook or run; \
             workflows may only await keel futures"
        );
        let wakers = match host::await_any(&awaited) {
            Wake::Completed(completion) => STATE.with(|s| {
                let mut s = s.borrow_mut();
                s.awaited.remove(&completion.id);
                s.delivered.insert(completion.id, completion.outcome);
                s.wakers.remove(&completion.id).into_iter().collect()
            }),
            Wake::Cancelled(request) => STATE.with(|s| {
                let mut s = s.borrow_mut();
                s.cancel = Some(Error::Cancelled {
                    reason: request.reason,
                    by: request.by,
                });
                s.wakers.values().cloned().collect::<Vec<_>>()
            }),
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The run's cancel, if the workflow has received it: `Some(Error::Cancelled)`.
///
/// ```ignore
/// if keel_sdk::cancelled().is_some() {
///     return Ok(Summary::partial(done));
/// }
/// ```
pub fn cancelled() -> Option<Error> {
    STATE.with(|s| s.borrow().cancel.clone())
}

/// Runs `future` to its end even when the run is cancelled meanwhile: the
/// keel futures it polls (steps, timers, hooks, runs) complete as they
/// would have. This is how a cancelled workflow cleans up; the cleanup
/// has the cancel grace (`--cancel-grace`, `--cancel-grace-steps`).
///
/// ```ignore
/// match reserve_and_charge(&order).await {
///     Err(e @ keel_sdk::Error::Cancelled { .. }) => {
///         keel_sdk::non_cancellable(release(order.id.clone())).await?;
///         Err(e)
///     }
///     other => other,
/// }
/// ```
pub fn non_cancellable<F: Future>(future: F) -> NonCancellable<F> {
    NonCancellable { future }
}

/// A future that the run's cancel does not interrupt; see [`non_cancellable`].
#[must_use = "futures do nothing unless awaited"]
pub struct NonCancellable<F> {
    future: F,
}

impl<F: Future> Future for NonCancellable<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Safety: `future` is structurally pinned; it is never moved out.
        let future = unsafe { self.map_unchecked_mut(|s| &mut s.future) };
        STATE.with(|s| s.borrow_mut().shield += 1);
        let polled = future.poll(cx);
        STATE.with(|s| s.borrow_mut().shield -= 1);
        polled
    }
}

/// A scheduled command's slot: schedules on first poll, then waits for the
/// host's completion.
pub(crate) struct Command {
    id: Option<u32>,
}

impl Command {
    pub(crate) fn new() -> Self {
        Command { id: None }
    }

    /// The command's ID, once scheduled.
    pub(crate) fn id(&self) -> Option<u32> {
        self.id
    }

    /// Polls the command, scheduling it first; `Err(Cancelled)` once the
    /// run is cancelled, unless the command completed before the cancel
    /// or is polled inside [`non_cancellable`].
    pub(crate) fn poll(
        &mut self,
        cx: &Context<'_>,
        schedule: impl FnOnce() -> u32,
    ) -> Poll<Result<Outcome, Error>> {
        if self.id.is_none()
            && let Some(cancel) = refusing()
        {
            host::cancelled_call();
            return Poll::Ready(Err(cancel));
        }
        let id = *self.id.get_or_insert_with(schedule);
        let cancel = refusing();
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            match (s.delivered.remove(&id), cancel) {
                (Some(outcome), _) => Poll::Ready(Ok(outcome)),
                (None, Some(cancel)) => {
                    s.awaited.remove(&id);
                    s.wakers.remove(&id);
                    Poll::Ready(Err(cancel))
                }
                (None, None) => {
                    s.awaited.insert(id);
                    s.wakers.insert(id, cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            STATE.with(|s| {
                let mut s = s.borrow_mut();
                s.awaited.remove(&id);
                s.wakers.remove(&id);
            });
        }
    }
}

/// The run's cancel, if futures polled now must fail with it.
fn refusing() -> Option<Error> {
    STATE.with(|s| {
        let s = s.borrow();
        s.cancel.clone().filter(|_| s.shield == 0)
    })
}

/// The future of a step called from a workflow; resolves to the step's
/// output, or to [`Error::StepFailed`] once its retries are exhausted.
#[must_use = "a step is scheduled only when its future is awaited"]
pub struct StepFuture<T> {
    name: &'static str,
    input: Result<String, String>,
    command: Command,
    _output: PhantomData<fn() -> T>,
}

impl<T> StepFuture<T> {
    pub(crate) fn new(name: &'static str, input: Result<String, String>) -> Self {
        StepFuture {
            name,
            input,
            command: Command::new(),
            _output: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Future for StepFuture<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let input = match &this.input {
            Ok(input) => input,
            Err(e) => return Poll::Ready(Err(Error::Payload(e.clone()))),
        };
        let name = this.name;
        this.command
            .poll(cx, || host::schedule_step(name, input))
            .map(|outcome| match outcome? {
                Outcome::StepCompleted(json) => serde_json::from_str(&json).map_err(|e| {
                    Error::Payload(format!("output of step `{name}` does not decode: {e}"))
                }),
                Outcome::StepFailed(f) => Err(Error::StepFailed(StepFailure {
                    step_name: f.step_name,
                    step_id: f.step_id,
                    message: f.message,
                    fatal: f.fatal,
                    attempts: f.attempts,
                })),
                _ => unreachable!("the host completed a step with something else"),
            })
    }
}

/// A durable timer; see [`sleep`].
#[must_use = "a timer starts only when awaited"]
pub struct Timer {
    duration: Duration,
    command: Command,
}

/// Sleeps durably: the timer survives crashes and restarts, and a long sleep
/// holds no resources while it waits.
pub fn sleep(duration: Duration) -> Timer {
    Timer {
        duration,
        command: Command::new(),
    }
}

/// Sleeps durably until `at`, a time on the workflow's clock (journal
/// time, so a replay waits for the same timer); a time already past
/// completes at once.
///
/// ```ignore
/// let reminder = signed_up_at + Duration::from_secs(2 * 24 * 3600);
/// keel_sdk::sleep_until(reminder).await;
/// ```
pub fn sleep_until(at: std::time::SystemTime) -> Timer {
    sleep(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

impl Future for Timer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let ms = u64::try_from(this.duration.as_millis()).unwrap_or(u64::MAX);
        // A cancelled run's timer completes at once.
        this.command
            .poll(cx, || host::schedule_sleep(ms))
            .map(|_| ())
    }
}
