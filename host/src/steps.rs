//! Step execution: each attempt in a fresh instance of the step sandbox,
//! retried under the step's policy, every attempt journaled (durably before
//! it runs or before its first effect, as its workflow's durability asks)
//! and its outcome recorded once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::Clock;
use keel_core::journal::{Entry, Fact};
use keel_core::manifest::{Durability, RetryPolicy};
use tracing::Instrument;

use crate::activation::{RunJournal, StepCall};
use crate::effects::{Effect, StepGate};
use crate::sandbox::{Grants, GuestLog, HostState, StepContext, StepOutside, wit};
use keel_store::Grant;

/// What every step attempt of an engine runs with.
pub(crate) struct StepRunner {
    pub engine: wasmtime::Engine,
    /// Steps that never run, by name, with the output each attempt gives.
    pub stubs: Arc<std::collections::BTreeMap<String, String>>,
    pub clock: Arc<dyn Clock>,
    pub observer: Arc<dyn crate::Observer>,
    /// The instance slots each attempt waits for before it starts.
    pub slots: Arc<crate::slots::Slots>,
    /// Where rate limits' grants and step concurrency permits are taken
    /// (shared by every worker).
    pub rates: Arc<dyn keel_store::RateStore>,
    /// How long a step concurrency permit lasts unless renewed (the lease
    /// TTL: a dead worker's permits lapse when its runs' leases do).
    pub permit_ttl: Duration,
    /// Woken when this engine gives a permit back, so that its waiters
    /// ask again at once rather than at their next poll.
    pub permits_freed: Arc<tokio::sync::Notify>,
}

/// A step concurrency permit held by an attempt, renewed every third of
/// its TTL while held; dropping it (the attempt ended, or its activation
/// was stopped) gives it back in the background and wakes this engine's
/// waiters. A failed renewal or release is logged: the permit lapses.
struct Held {
    key: String,
    holder: String,
    rates: Arc<dyn keel_store::RateStore>,
    freed: Arc<tokio::sync::Notify>,
    renewal: tokio::task::JoinHandle<()>,
}

impl Held {
    fn new(runner: &StepRunner, key: String, holder: String, limit: u32) -> Held {
        let (rates, clock, ttl) = (
            runner.rates.clone(),
            runner.clock.clone(),
            runner.permit_ttl,
        );
        let (k, h) = (key.clone(), holder.clone());
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                // A permit still held is renewed whatever the limit; one
                // that lapsed (its renewals failing for a TTL) is taken
                // again only if there is room.
                let renewed = rates
                    .take_permit(&k, &h, limit, ttl.as_millis() as u64, clock.now_ms())
                    .await;
                match renewed {
                    Ok(Grant::Granted { .. }) => {}
                    Ok(Grant::Wait { .. }) => tracing::warn!(
                        key = k,
                        "a step concurrency permit lapsed while its attempt ran; the attempt goes on beyond the limit"
                    ),
                    Err(e) => {
                        tracing::warn!(key = k, "renewing a step concurrency permit failed: {e}")
                    }
                }
            }
        });
        Held {
            key,
            holder,
            rates: runner.rates.clone(),
            freed: runner.permits_freed.clone(),
            renewal,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.renewal.abort();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (rates, freed) = (self.rates.clone(), self.freed.clone());
        let (key, holder) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.holder),
        );
        runtime.spawn(async move {
            if let Err(e) = rates.release_permit(&key, &holder).await {
                tracing::warn!(key, "giving a step concurrency permit back failed: {e}");
            }
            freed.notify_waiters();
        });
    }
}

/// The longest wait between asks for a step concurrency permit held
/// elsewhere (another worker's release wakes no one here).
const PERMIT_POLL_MAX: Duration = Duration::from_millis(500);

/// What the steps of one component run with: its deployment's grants and
/// limits (or the engine's, for a component never deployed).
#[derive(Debug)]
pub(crate) struct StepSettings {
    pub grants: Grants,
    /// Linear memory bound of a step instance, in bytes.
    pub max_memory: usize,
    /// How long one attempt may take before it is stopped and retried.
    pub timeout: Duration,
    /// Largest output a step may return, in bytes of JSON.
    pub max_output: usize,
    /// The deployment the grants come from, as (name, hash); `None` for a
    /// component never deployed (the worker's own grants).
    pub deployment: Option<(String, String)>,
}

/// How one attempt ended.
#[derive(Debug, PartialEq)]
enum Attempt {
    Ok(String),
    Fatal(String),
    Retryable {
        message: String,
        after: Option<Duration>,
    },
}

/// What follows an attempt: the fact to record, and whether to retry
/// after a delay.
#[derive(Debug, PartialEq)]
enum Next {
    Done(Fact),
    Retry { fact: Fact, delay: Duration },
}

/// Decides what follows attempt number `attempt` of the step of `command`,
/// whose retries count from the attempt after `before_retry` (the
/// attempts made before the run was retried) and must be due by
/// `budget_ends_ms` if the step has a retry budget.
fn next(
    command: u32,
    retry: &RetryPolicy,
    attempt: u32,
    before_retry: u32,
    outcome: Attempt,
    now_ms: u64,
    budget_ends_ms: Option<u64>,
) -> Next {
    let tries = attempt.saturating_sub(before_retry);
    match outcome {
        Attempt::Ok(output) => Next::Done(Fact::StepCompleted { command, output }),
        Attempt::Fatal(error) => Next::Done(Fact::StepFailed {
            command,
            error,
            fatal: true,
            attempts: attempt,
        }),
        Attempt::Retryable { message, .. } if tries > retry.max_retries => {
            Next::Done(Fact::StepFailed {
                command,
                error: message,
                fatal: false,
                attempts: attempt,
            })
        }
        Attempt::Retryable { message, after } => {
            let delay = retry.backoff(tries).max(after.unwrap_or_default());
            let due = now_ms + delay.as_millis() as u64;
            if let Some(end) = budget_ends_ms.filter(|end| due > *end) {
                let left = end.saturating_sub(now_ms);
                return Next::Done(Fact::StepFailed {
                    command,
                    error: format!(
                        "{message} (its retry budget ran out: the next retry would be due in {} ms, {left} ms were left)",
                        delay.as_millis()
                    ),
                    fatal: false,
                    attempts: attempt,
                });
            }
            Next::Retry {
                fact: Fact::StepAttemptFailed {
                    command,
                    attempt,
                    error: message,
                    retry_at_ms: now_ms + delay.as_millis() as u64,
                },
                delay,
            }
        }
    }
}

/// How long an effect-gated attempt may run before its start is made
/// durable anyway.
const DURABLE_AFTER: Duration = Duration::from_secs(1);

/// Runs `attempt`; if it still runs after [`DURABLE_AFTER`], makes the
/// journal durable through its start meanwhile (the first `through`
/// entries): a long step shows as running, and an attempt a crash
/// interrupts counts against its retries, as under strict. A short step
/// that makes no effect costs no write.
async fn durable_if_long<T>(
    attempt: impl Future<Output = T>,
    journal: &RunJournal,
    through: usize,
) -> crate::Result<T> {
    tokio::pin!(attempt);
    tokio::select! {
        out = &mut attempt => return Ok(out),
        () = tokio::time::sleep(DURABLE_AFTER) => {}
    }
    let (out, durable) = tokio::join!(attempt, journal.durable_through(through));
    durable?;
    Ok(out)
}

/// The effect gate of one step attempt: effect-gated, it makes the
/// journal durable through the attempt's start before the attempt's first
/// effect (and is passed at once by every later one); strict, that is
/// durable already; relaxed, effects wait for nothing.
struct AttemptGate {
    journal: Arc<RunJournal>,
    /// How many entries must be durable: through the attempt's start.
    through: Option<usize>,
}

impl AttemptGate {
    fn new(call: &StepCall, started: &Entry) -> Self {
        let through = match call.durability {
            Durability::Relaxed => None,
            Durability::Strict | Durability::EffectGated => Some(started.seq as usize + 1),
        };
        AttemptGate {
            journal: call.journal.clone(),
            through,
        }
    }
}

#[async_trait]
impl StepGate for AttemptGate {
    async fn before(&self, effect: Effect) -> crate::Result<()> {
        let Some(through) = self.through else {
            return Ok(());
        };
        tracing::trace!(effect = effect.as_str(), "step effect gate");
        let durable = self.journal.durable_through(through).await;
        if let Err(e) = &durable {
            // The activation ends: what the run did is not durable.
            self.journal.fail(e.to_string());
        }
        durable
    }
}

impl StepRunner {
    /// Runs `call`'s attempts until the step completes or fails; a storage
    /// failure ends the run's activation.
    pub async fn run(
        self: Arc<Self>,
        call: StepCall,
        settings: Arc<StepSettings>,
        outside: Arc<dyn StepOutside>,
    ) {
        let span = tracing::info_span!("step", run_id = %call.run_id, step_id = %call.step_id, step = %call.name);
        let journal = call.journal.clone();
        if let Err(e) = self
            .attempts(&call, &settings, outside)
            .instrument(span)
            .await
        {
            journal.fail(e.to_string());
        }
    }

    async fn attempts(
        &self,
        call: &StepCall,
        settings: &StepSettings,
        outside: Arc<dyn StepOutside>,
    ) -> crate::Result<()> {
        if let Some(at) = call.not_before_ms {
            let wait = at.saturating_sub(self.clock.now_ms());
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        let mut attempt = call.next_attempt;
        loop {
            // A grant of the step's rate limit, then a slot, before the
            // attempt is recorded as started: neither wait is an attempt,
            // and the rate-limit wait holds no instance.
            let grant = self.throttle(call, attempt).await?;
            let permit = self.permit(call, attempt).await?;
            let slot = self.slots.step().await;
            let start = Fact::StepAttemptStarted {
                command: call.command,
                attempt,
            };
            let started = match call.durability {
                Durability::Strict => call.journal.append(start).await?,
                Durability::EffectGated if !settings.grants.dirs.is_empty() => {
                    let started = call.journal.record(start)?;
                    let gate = AttemptGate::new(call, &started);
                    gate.before(Effect::StepGrantedDirectories).await?;
                    started
                }
                // Durable before the attempt's first effect (or, relaxed,
                // with the run's next flush): a crash before then runs the
                // step again, under the same step ID.
                Durability::EffectGated | Durability::Relaxed => call.journal.record(start)?,
            };
            if attempt > 1 {
                // Readers drop what the step's earlier attempts streamed.
                outside
                    .begin_attempt(&call.run_id, call.step_id.as_str(), attempt)
                    .await?;
            }
            self.observer
                .step_started(&call.run_id, &call.name, attempt);
            let span = tracing::info_span!(
                "step_attempt",
                otel.name = %format!("step {}", call.name),
                keel.step_id = %call.step_id,
                keel.attempt = attempt,
                keel.outcome = tracing::field::Empty,
                keel.retry_delay_ms = tracing::field::Empty,
            );
            let attempt_run = self
                .execute(call, settings, &started, &outside, &grant)
                .instrument(span.clone());
            let outcome = match call.durability {
                Durability::EffectGated => {
                    durable_if_long(attempt_run, &call.journal, started.seq as usize + 1).await?
                }
                Durability::Strict | Durability::Relaxed => attempt_run.await,
            };
            drop(slot);
            drop(permit);
            let budget_ends_ms = call
                .component
                .manifest
                .step(&call.name)
                .and_then(|s| s.retry_budget_ms)
                .and_then(|budget| {
                    let first = call.journal.first_attempt_at(call.command)?;
                    Some(first.saturating_add(budget))
                });
            match next(
                call.command,
                &call.retry,
                attempt,
                call.before_retry,
                outcome,
                self.clock.now_ms(),
                budget_ends_ms,
            ) {
                Next::Done(fact) => {
                    let outcome = match fact {
                        Fact::StepCompleted { .. } => crate::AttemptOutcome::Completed,
                        _ => crate::AttemptOutcome::Failed,
                    };
                    span.record("keel.outcome", outcome.as_str());
                    self.observer.step_attempt(&call.name, outcome);
                    // The run's next flush (before its next step attempt, or
                    // its end) makes the result durable before anything
                    // depends on it.
                    call.journal.record(fact)?;
                    return Ok(());
                }
                Next::Retry { fact, delay } => {
                    span.record("keel.outcome", "retried");
                    span.record("keel.retry_delay_ms", delay.as_millis() as u64);
                    self.observer
                        .step_attempt(&call.name, crate::AttemptOutcome::Retried);
                    if let Fact::StepAttemptFailed { error, .. } = &fact {
                        self.observer
                            .step_retrying(&call.name, attempt, delay, error);
                    }
                    tracing::info!(attempt, ?delay, "step attempt failed, retrying");
                    call.journal.append(fact).await?;
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Waits for a grant of the step's rate limit, if it declares one
    /// (keys are one namespace: steps of any component that name the same
    /// key share its limit); a wait is recorded (`StepThrottled`) and made
    /// durable with the attempt's start. A key expression that does not
    /// evaluate on the step's input stops the activation with the error.
    /// Returns the grant taken (its key and stamp), if any.
    async fn throttle(
        &self,
        call: &StepCall,
        attempt: u32,
    ) -> crate::Result<Option<(String, u64)>> {
        let Some((expr, rate)) = call.component.rate_limit(&call.name) else {
            return Ok(None);
        };
        let input: serde_json::Value =
            serde_json::from_str(&call.input).unwrap_or(serde_json::Value::Null);
        let key = expr.evaluate(&input, &serde_json::json!({}))?;
        let began = self.clock.now_ms();
        let at_ms = loop {
            let now = self.clock.now_ms();
            let next = self
                .rates
                .take_grant(&key, rate.limit, rate.per_ms, now)
                .await?;
            match next {
                Grant::Granted { at_ms } => break at_ms,
                Grant::Wait { ms } => {
                    tracing::debug!(key, wait_ms = ms, "step waits for its rate limit");
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
        };
        let waited_ms = self.clock.now_ms().saturating_sub(began);
        if waited_ms > 0 {
            call.journal.record(Fact::StepThrottled {
                command: call.command,
                attempt,
                key: key.clone(),
                waited_ms,
            })?;
        }
        Ok(Some((key, at_ms)))
    }

    /// Waits for a permit of the step's concurrency limit, if it declares
    /// one (keys are one namespace, as for rate limits); the wait is
    /// recorded as for a rate limit. Returns the permit held.
    async fn permit(&self, call: &StepCall, attempt: u32) -> crate::Result<Option<Held>> {
        let Some((expr, limit)) = call.component.step_concurrency(&call.name) else {
            return Ok(None);
        };
        let input: serde_json::Value =
            serde_json::from_str(&call.input).unwrap_or(serde_json::Value::Null);
        let key = expr.evaluate(&input, &serde_json::json!({}))?;
        let holder = format!("{}/{}", call.run_id, call.command);
        let ttl_ms = self.permit_ttl.as_millis() as u64;
        let began = self.clock.now_ms();
        let mut poll = Duration::from_millis(10);
        loop {
            // Registered before asking, so a release between the answer
            // and the wait is not missed.
            let freed = self.permits_freed.notified();
            let now = self.clock.now_ms();
            match self
                .rates
                .take_permit(&key, &holder, limit.limit, ttl_ms, now)
                .await?
            {
                Grant::Granted { .. } => break,
                Grant::Wait { ms } => {
                    tracing::debug!(key, "step waits for its concurrency limit");
                    let wait = poll.min(Duration::from_millis(ms));
                    tokio::select! {
                        () = freed => {}
                        () = tokio::time::sleep(wait) => {}
                    }
                    poll = (poll * 2).min(PERMIT_POLL_MAX);
                }
            }
        }
        let waited_ms = self.clock.now_ms().saturating_sub(began);
        if waited_ms > 0 {
            call.journal.record(Fact::StepThrottled {
                command: call.command,
                attempt,
                key: key.clone(),
                waited_ms,
            })?;
        }
        Ok(Some(Held::new(self, key, holder, limit.limit)))
    }

    /// Moves a grant to now, as its attempt's instance is ready to call
    /// out; a failure leaves the grant where it was (it still counts).
    async fn restamp(&self, grant: &Option<(String, u64)>) {
        if let Some((key, at_ms)) = grant
            && let Err(e) = self
                .rates
                .restamp_grant(key, *at_ms, self.clock.now_ms())
                .await
        {
            tracing::warn!(key, "moving a rate-limit grant to its call failed: {e}");
        }
    }

    async fn execute(
        &self,
        call: &StepCall,
        settings: &StepSettings,
        started: &Entry,
        outside: &Arc<dyn StepOutside>,
        grant: &Option<(String, u64)>,
    ) -> Attempt {
        let Fact::StepAttemptStarted { attempt, .. } = started.fact else {
            return Attempt::Fatal("an attempt begins with its start".into());
        };
        if let Some(output) = self.stubs.get(&call.name) {
            return Attempt::Ok(output.clone());
        }
        let ctx = StepContext {
            metadata: wit::StepMetadata {
                step_id: call.step_id.to_string(),
                attempt,
                step_name: call.name.clone(),
                run_id: call.run_id.to_string(),
                attempt_started_at_ms: started.at_ms,
            },
            outside: outside.clone(),
            gate: Arc::new(AttemptGate::new(call, started)),
        };
        let log = GuestLog::new(&call.run_id);
        let state = match HostState::step(ctx, &settings.grants, log.clone(), settings.max_memory) {
            Ok(state) => state,
            Err(e) => return Attempt::Fatal(e.to_string()),
        };
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // Fuel is not a bound for steps, only a way to make a busy guest
        // yield to tokio, so that the attempt's timeout can stop it.
        let fueled = store
            .set_fuel(u64::MAX)
            .and_then(|()| store.fuel_async_yield_interval(Some(crate::runtime::YIELD_FUEL)));
        if let Err(e) = fueled {
            return Attempt::Fatal(e.to_string());
        }
        let run = async {
            let instance = call
                .component
                .step_pre
                .instantiate_async(&mut store)
                .await?;
            self.restamp(grant).await;
            instance
                .keel_workflow_guest()
                .call_run_step(&mut store, &call.name, &call.input)
                .await
        };
        let timeout = settings.timeout;
        let Ok(result) = tokio::time::timeout(timeout, run).await else {
            return Attempt::Retryable {
                message: format!(
                    "the attempt timed out after {timeout:?}; if the step needs longer, raise the step timeout"
                ),
                after: None,
            };
        };
        let outcome = match result {
            Ok(Ok(output)) => Attempt::Ok(output),
            Ok(Err(wit::StepError::Fatal(message))) => Attempt::Fatal(message),
            Ok(Err(wit::StepError::Retryable(e))) => Attempt::Retryable {
                message: e.message,
                after: e.retry_after_ms.map(Duration::from_millis),
            },
            Err(trap) if crate::component::exceeded_memory(&trap) => Attempt::Retryable {
                message: format!(
                    "the step went over its memory bound of {} bytes; if it really needs more, raise the `max_memory` bound",
                    settings.max_memory
                ),
                after: None,
            },
            Err(trap) => Attempt::Retryable {
                message: format!(
                    "the step trapped: {}",
                    crate::component::describe_trap(&trap, &log.tail())
                ),
                after: None,
            },
        };
        let outcome = match outcome {
            Attempt::Ok(output) if output.len() > settings.max_output => Attempt::Fatal(format!(
                "its output is {} bytes, over the `max_payload_bytes` bound of {}",
                output.len(),
                settings.max_output
            )),
            other => other,
        };
        let outcome = with_denials(outcome, store.data().denied_http(), &settings.deployment);
        with_missing_dirs(outcome, &settings.grants.dirs)
    }
}

/// A failed attempt whose error says a file is missing: outside the
/// granted directories every path reads as missing, so the message says
/// which directories the step may reach.
fn with_missing_dirs(outcome: Attempt, granted: &[std::path::PathBuf]) -> Attempt {
    let missing = |m: &str| m.contains("os error 44") || m.contains("No such file or directory");
    let note = || {
        let dirs = if granted.is_empty() {
            "none".to_string()
        } else {
            granted
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            " (steps see only the directories their deployment grants, and a path outside them reads as missing; granted: {dirs})"
        )
    };
    match &outcome {
        Attempt::Fatal(message) | Attempt::Retryable { message, .. } if missing(message) => {
            annotate(outcome, &note())
        }
        _ => outcome,
    }
}

/// A failed attempt that was denied HTTP requests: fatal, since no retry
/// gets a grant the deployment lacks, with the hosts denied, the build
/// that lacks them and the grant that would let them through.
fn with_denials(
    outcome: Attempt,
    denied: &[String],
    deployment: &Option<(String, String)>,
) -> Attempt {
    let message = match outcome {
        Attempt::Fatal(message) | Attempt::Retryable { message, .. } if !denied.is_empty() => {
            message
        }
        other => return other,
    };
    let mut hosts = denied.to_vec();
    hosts.sort();
    hosts.dedup();
    let hosts = hosts.join(", ");
    let lacking = match deployment {
        Some((name, hash)) => format!(
            "deployment `{name}` (build {}) grants no HTTP access there; grant it (`keel deployments grant {name} --allow-http {}`, or `POST /v1/deployments/{name}/grants`) and retry the run",
            &hash[..hash.len().min(12)],
            hosts.replace(", ", " --allow-http ")
        ),
        None => format!(
            "this component is not deployed and the worker grants no HTTP access there; grant {hosts} to the worker or deploy the component with it"
        ),
    };
    Attempt::Fatal(format!(
        "{message} (the host denied HTTP requests to {hosts}: {lacking})"
    ))
}

/// A failed attempt with `note` added to its message; a success as it is.
fn annotate(outcome: Attempt, note: &str) -> Attempt {
    match outcome {
        Attempt::Fatal(message) => Attempt::Fatal(message + note),
        Attempt::Retryable { message, after } => Attempt::Retryable {
            message: message + note,
            after,
        },
        ok => ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETRY: RetryPolicy = RetryPolicy {
        max_retries: 2,
        initial_backoff_ms: 100,
        backoff_factor: 2.0,
        max_backoff_ms: 10_000,
    };

    #[test]
    fn a_denied_attempt_is_fatal_and_names_the_build_and_the_grant() {
        let denied = ["127.0.0.1:9".to_string(), "127.0.0.1:9".to_string()];
        let order = Some(("order".to_string(), "0123456789abcdef".to_string()));
        let Attempt::Fatal(message) = with_denials(retryable(None), &denied, &order) else {
            panic!("a denied attempt is not retried");
        };
        assert_eq!(
            message,
            "e (the host denied HTTP requests to 127.0.0.1:9: deployment `order` (build 0123456789ab) grants no HTTP access there; grant it (`keel deployments grant order --allow-http 127.0.0.1:9`, or `POST /v1/deployments/order/grants`) and retry the run)"
        );
        let Attempt::Fatal(message) = with_denials(retryable(None), &denied, &None) else {
            panic!("fatal");
        };
        assert!(
            message.contains("this component is not deployed"),
            "{message}"
        );
        // A step that was denied and still succeeded, or was denied
        // nothing, is as it was.
        assert_eq!(
            with_denials(Attempt::Ok("1".into()), &denied, &order),
            Attempt::Ok("1".into())
        );
        assert_eq!(with_denials(retryable(None), &[], &order), retryable(None));
    }

    #[test]
    fn a_missing_file_names_the_directories_granted() {
        let failed =
            Attempt::Fatal("reading /data/in.csv: No such file or directory (os error 44)".into());
        let Attempt::Fatal(message) = with_missing_dirs(failed, &[]) else {
            panic!("still fatal");
        };
        assert!(message.ends_with("granted: none)"), "{message}");
        let failed = retryable(None);
        assert_eq!(
            with_missing_dirs(failed, &["/data".into()]),
            retryable(None)
        );
    }

    fn retryable(after: Option<u64>) -> Attempt {
        Attempt::Retryable {
            message: "e".into(),
            after: after.map(Duration::from_millis),
        }
    }

    #[test]
    fn a_retryable_failure_backs_off_until_the_retries_are_spent() {
        let n = next(4, &RETRY, 2, 0, retryable(None), 1_000, None);
        assert_eq!(
            n,
            Next::Retry {
                fact: Fact::StepAttemptFailed {
                    command: 4,
                    attempt: 2,
                    error: "e".into(),
                    retry_at_ms: 1_200,
                },
                delay: Duration::from_millis(200),
            }
        );
        let n = next(4, &RETRY, 3, 0, retryable(None), 1_000, None);
        assert!(matches!(
            n,
            Next::Done(Fact::StepFailed {
                fatal: false,
                attempts: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_retried_run_gives_the_step_a_fresh_budget() {
        // Attempts 1..=3 failed before the run was retried; 4 is the
        // first of a new budget of 2 retries.
        let n = next(4, &RETRY, 4, 3, retryable(None), 1_000, None);
        assert!(matches!(n, Next::Retry { .. }), "{n:?}");
        let n = next(4, &RETRY, 6, 3, retryable(None), 1_000, None);
        assert!(
            matches!(n, Next::Done(Fact::StepFailed { attempts: 6, .. })),
            "{n:?}"
        );
    }

    #[test]
    fn a_retry_due_past_the_budget_fails_the_step() {
        // Retry 1 is due at 1_200 (200 ms backoff): inside a budget ending
        // then, outside one ending a millisecond earlier.
        let n = next(4, &RETRY, 2, 0, retryable(None), 1_000, Some(1_200));
        assert!(matches!(n, Next::Retry { .. }), "{n:?}");
        let n = next(4, &RETRY, 2, 0, retryable(None), 1_000, Some(1_199));
        let Next::Done(Fact::StepFailed {
            error,
            fatal: false,
            attempts: 2,
            ..
        }) = n
        else {
            panic!("{n:?}")
        };
        assert!(error.contains("retry budget ran out"), "{error}");
    }

    #[test]
    fn retry_after_only_lengthens_the_backoff() {
        let Next::Retry { delay, .. } = next(0, &RETRY, 1, 0, retryable(Some(5_000)), 0, None)
        else {
            panic!("not retried")
        };
        assert_eq!(delay, Duration::from_millis(5_000));
        let Next::Retry { delay, .. } = next(0, &RETRY, 1, 0, retryable(Some(1)), 0, None) else {
            panic!("not retried")
        };
        assert_eq!(delay, Duration::from_millis(100));
    }

    #[test]
    fn fatal_failures_and_outputs_end_the_step_at_once() {
        let n = next(1, &RETRY, 1, 0, Attempt::Fatal("no".into()), 0, None);
        assert!(matches!(
            n,
            Next::Done(Fact::StepFailed {
                fatal: true,
                attempts: 1,
                ..
            })
        ));
        let n = next(1, &RETRY, 1, 0, Attempt::Ok("7".into()), 0, None);
        assert_eq!(
            n,
            Next::Done(Fact::StepCompleted {
                command: 1,
                output: "7".into()
            })
        );
    }
}
