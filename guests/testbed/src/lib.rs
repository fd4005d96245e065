//! keel's test guest: one workflow per behaviour the end-to-end tests drive.
#![cfg(target_arch = "wasm32")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keel_sdk::future::FutureExt;
use keel_sdk::http::{Body, Client, Request};
use keel_sdk::{Error, StepError, step, workflow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[step(max_retries = 0)]
async fn noop(i: u32) -> Result<u32, StepError> {
    Ok(i)
}

/// `n` trivial steps in sequence: the W10 benchmark's workflow.
#[workflow]
async fn ten_steps(n: u32) -> Result<u32, Error> {
    let mut sum = 0;
    for i in 0..n {
        sum += noop(i).await?;
    }
    Ok(sum)
}

/// W10 with strict durability: each step attempt's start, and the result
/// before it, durable before the attempt runs.
#[workflow(durability = "strict")]
async fn ten_steps_strict(n: u32) -> Result<u32, Error> {
    ten_steps(n).await
}

/// `n` steps in sequence that each POST to `url`: W10 of steps with an
/// effect, in the default durability (effect-gated).
#[workflow]
async fn ten_calls((url, n): (String, u32)) -> Result<u32, Error> {
    let mut sum = 0;
    for i in 0..n {
        sum += call(url.clone(), i).await?;
    }
    Ok(sum)
}

/// `ten_calls`, strict.
#[workflow(durability = "strict")]
async fn ten_calls_strict(input: (String, u32)) -> Result<u32, Error> {
    ten_calls(input).await
}

/// `ten_calls`, relaxed.
#[workflow(durability = "relaxed")]
async fn ten_calls_relaxed(input: (String, u32)) -> Result<u32, Error> {
    ten_calls(input).await
}

/// POSTs `i` to `url`; returns `i`.
#[step]
async fn call(url: String, i: u32) -> Result<u32, StepError> {
    keel_sdk::http::post(&url).send(&i).await?;
    Ok(i)
}

/// `two_steps` with strict durability: a journal write before each step.
#[workflow(durability = "strict")]
async fn two_steps_strict(x: i64) -> Result<Vec<i64>, Error> {
    two_steps(x).await
}

/// W10 with relaxed durability: its steps' results become durable with
/// the run's end, in one write.
#[workflow(durability = "relaxed")]
async fn ten_steps_relaxed(n: u32) -> Result<u32, Error> {
    ten_steps(n).await
}

/// W10 with a concurrency limit declared (one key for every run) that
/// the benchmark never reaches: what holding and freeing slots costs.
#[workflow(concurrency(key = "'bench'", limit = 100000))]
async fn ten_steps_limited(n: u32) -> Result<u32, Error> {
    ten_steps(n).await
}

/// W10 with a concurrency limit per tenant (`input[1]`) that the
/// benchmark never reaches: what slots cost when keys spread the load.
#[workflow(concurrency(key = "string(input[1])", limit = 100000))]
async fn ten_steps_per_tenant((n, _tenant): (u32, u32)) -> Result<u32, Error> {
    ten_steps(n).await
}

#[step]
async fn add(x: i64, y: i64) -> Result<i64, StepError> {
    Ok(x + y)
}

#[step]
async fn mul(x: i64, y: i64) -> Result<i64, StepError> {
    Ok(x * y)
}

/// Two steps; built with the `reordered` feature it calls them the other way round.
#[workflow]
async fn two_steps(x: i64) -> Result<Vec<i64>, Error> {
    if cfg!(feature = "reordered") {
        let b = mul(x, 2).await?;
        let a = add(x, 1).await?;
        Ok(vec![a, b])
    } else {
        let a = add(x, 1).await?;
        let b = mul(x, 2).await?;
        Ok(vec![a, b])
    }
}

/// A step, then a sleep of `ms`: a run that waits after its first step.
/// Built with the `reordered` feature its first step is another, so a run
/// of one build does not replay on the other.
#[workflow]
async fn step_then_sleep((x, ms): (i64, u64)) -> Result<i64, Error> {
    let first = match cfg!(feature = "reordered") {
        true => mul(x, 2).await?,
        false => add(x, 1).await?,
    };
    keel_sdk::sleep(Duration::from_millis(ms)).await;
    Ok(first)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn random_u64() -> u64 {
    getrandom::u64().unwrap_or(0)
}

/// Reads the clock and random numbers around a step.
#[workflow]
async fn clock_random() -> Result<Value, Error> {
    let before = (now_ms(), random_u64());
    let step = noop(7).await?;
    let after = (now_ms(), random_u64());
    let meta = keel_sdk::workflow_metadata();
    Ok(json!({
        "before": before,
        "after": after,
        "step": step,
        "run_id": meta.run_id,
        "started_at_ms": meta.started_at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64,
    }))
}

#[derive(Debug, Deserialize, Serialize)]
struct Labelled {
    label: String,
    step_id: String,
}

#[step]
async fn delayed(label: String, delay_ms: u64) -> Result<Labelled, StepError> {
    keel_sdk::wstd::task::sleep(Duration::from_millis(delay_ms).into()).await;
    Ok(Labelled {
        label,
        step_id: keel_sdk::step_metadata().step_id,
    })
}

/// Three concurrent steps of unequal length; returns them in completion order.
#[workflow]
async fn concurrent(delays: Vec<u64>) -> Result<Vec<Labelled>, Error> {
    use keel_sdk::future::{FutureExt as _, select_all};
    let mut pending: Vec<_> = delays
        .iter()
        .enumerate()
        .map(|(i, d)| delayed(format!("s{i}"), *d).boxed_local())
        .collect();
    let mut done = Vec::new();
    while !pending.is_empty() {
        let (result, _, rest) = select_all(pending).await;
        done.push(result?);
        pending = rest;
    }
    Ok(done)
}

/// The same as `concurrent`, with `FuturesUnordered`, which polls only the
/// futures that were woken.
#[workflow]
async fn unordered(delays: Vec<u64>) -> Result<Vec<String>, Error> {
    use keel_sdk::futures::stream::{FuturesUnordered, StreamExt};
    let mut pending: FuturesUnordered<_> = delays
        .iter()
        .enumerate()
        .map(|(i, d)| delayed(format!("s{i}"), *d))
        .collect();
    let mut done = Vec::new();
    while let Some(result) = pending.next().await {
        done.push(result?.label);
    }
    Ok(done)
}

/// Calls `step_metadata()`, which only steps may call.
#[workflow]
async fn metadata_in_workflow() -> Result<String, Error> {
    Ok(keel_sdk::step_metadata().step_id)
}

/// Recurses `depth` times with a large frame each time.
#[workflow]
async fn deep(depth: u32) -> Result<u64, Error> {
    fn down(n: u32) -> u64 {
        let frame = std::hint::black_box([n as u64; 512]);
        if n == 0 {
            frame[0]
        } else {
            down(n - 1) + frame[511]
        }
    }
    Ok(down(depth))
}

/// Misuses the host protocol: waits again on a step it has received.
#[workflow]
async fn wait_twice() -> Result<u32, Error> {
    use keel_sdk::__private::bindings::keel::workflow::workflow_context as host;
    let n = noop(1).await?;
    host::wait_any(&[0]);
    Ok(n)
}

/// The length of a text.
#[step(max_retries = 0)]
async fn measure(text: String) -> Result<usize, StepError> {
    Ok(text.len())
}

/// `count` concurrent steps, each given a text of `size` bytes: how much
/// one run can ask of the host at once.
#[workflow]
async fn fan_out((count, size): (u32, usize)) -> Result<usize, Error> {
    use keel_sdk::futures::stream::{FuturesUnordered, StreamExt};
    // Each text is made when its future first runs, so the guest holds
    // little and what a run can ask of the host is what is measured.
    let mut pending: FuturesUnordered<_> = (0..count)
        .map(|_| async move { measure("x".repeat(size)).await })
        .collect();
    let mut total = 0;
    while let Some(len) = pending.next().await {
        total += len?;
    }
    Ok(total)
}

/// `join!` of two steps and a timer.
#[workflow]
async fn joined() -> Result<Vec<Labelled>, Error> {
    let (a, b, ()) = keel_sdk::join!(
        delayed("slow".into(), 200),
        delayed("fast".into(), 1),
        keel_sdk::sleep(Duration::from_millis(50))
    );
    Ok(vec![a?, b?])
}

#[derive(Debug, Deserialize, Serialize)]
struct Attempt {
    attempt: u32,
    step_id: String,
    started_at_ms: u64,
}

fn attempt() -> Attempt {
    let meta = keel_sdk::step_metadata();
    Attempt {
        attempt: meta.attempt,
        step_id: meta.step_id,
        started_at_ms: meta
            .attempt_started_at
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    }
}

#[step(max_retries = 5, initial_backoff = "10ms")]
async fn declined() -> Result<Attempt, StepError> {
    Err(StepError::fatal("card declined"))
}

#[step(max_retries = 3, initial_backoff = "10ms")]
async fn retry_later() -> Result<Attempt, StepError> {
    let a = attempt();
    if a.attempt == 1 {
        return Err(StepError::retryable("rate limited").retry_after(Duration::from_millis(400)));
    }
    Ok(a)
}

#[step(max_retries = 2, initial_backoff = "10ms")]
async fn always_fails() -> Result<Attempt, StepError> {
    Err(StepError::retryable(format!(
        "attempt {} failed",
        attempt().attempt
    )))
}

/// Runs the step named by `mode` and returns what it saw.
#[workflow]
async fn flaky(mode: String) -> Result<Attempt, Error> {
    match mode.as_str() {
        "fatal" => declined().await,
        "retry_after" => retry_later().await,
        "exhaust" => always_fails().await,
        other => Err(Error::msg(format!("unknown mode {other}"))),
    }
}

#[workflow]
async fn trap() -> Result<(), Error> {
    panic!("boom from the guest")
}

#[workflow]
async fn spin() -> Result<u64, Error> {
    let mut i: u64 = 0;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

/// Blocks on the machine's clock, which a workflow may not do.
#[workflow]
async fn thread_sleep(ms: u64) -> Result<u64, Error> {
    std::thread::sleep(Duration::from_millis(ms));
    Ok(ms)
}

#[workflow]
async fn memory_bomb() -> Result<usize, Error> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

/// A step that allocates until its memory bound stops it.
#[step(max_retries = 0)]
async fn hoard() -> Result<usize, StepError> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&hoard);
    }
}

/// Calls the hoarding step.
#[workflow]
async fn memory_bomb_step() -> Result<usize, Error> {
    Ok(hoard().await?)
}

/// Tries an HTTP call from the workflow itself, which the sandbox forbids.
#[workflow]
async fn http_in_workflow(url: String) -> Result<u16, Error> {
    let request = Request::get(&url).body(Body::empty()).map_err(Error::msg)?;
    let response = Client::new().send(request).await.map_err(Error::msg)?;
    Ok(response.status().as_u16())
}

/// Tries a file read from the workflow itself, which the sandbox forbids.
#[workflow]
async fn file_in_workflow() -> Result<String, Error> {
    std::fs::read_to_string("/etc/hostname").map_err(Error::msg)
}

/// Sleeps durably, then runs a step.
#[workflow]
async fn sleeper(ms: u64) -> Result<u32, Error> {
    keel_sdk::sleep(Duration::from_millis(ms)).await;
    noop(1).await
}

#[derive(Clone, Debug, Deserialize, Serialize)]
struct Probe {
    url: String,
    label: String,
    hang_on_first_attempt: bool,
}

/// Reports each attempt to `url`; hangs on its first attempt when asked, so
/// a test can kill the host in the middle of it.
#[step(max_retries = 3, initial_backoff = "10ms")]
async fn probe(p: Probe) -> Result<Attempt, StepError> {
    let a = attempt();
    let body = json!({"label": p.label, "step_id": a.step_id, "attempt": a.attempt});
    let request = Request::post(&p.url)
        .header("Content-Type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(StepError::fatal)?;
    Client::new()
        .send(request)
        .await
        .map_err(StepError::retryable)?;
    if p.hang_on_first_attempt && a.attempt == 1 {
        keel_sdk::wstd::task::sleep(Duration::from_secs(600).into()).await;
    }
    Ok(a)
}

/// Three probes in sequence; the second hangs on its first attempt.
#[workflow]
async fn crashable(url: String) -> Result<Vec<Attempt>, Error> {
    let mut out = Vec::new();
    for (label, hang) in [("a", false), ("b", true), ("c", false)] {
        let p = Probe {
            url: url.clone(),
            label: label.into(),
            hang_on_first_attempt: hang,
        };
        out.push(probe(p).await?);
    }
    Ok(out)
}

/// A step raced against a timer with `select`.
#[workflow]
async fn race((step_ms, timer_ms): (u64, u64)) -> Result<String, Error> {
    let step = delayed("step".into(), step_ms).fuse();
    let timer = keel_sdk::sleep(Duration::from_millis(timer_ms)).fuse();
    futures_pin(step, timer).await
}

async fn futures_pin(
    step: impl std::future::Future<Output = Result<Labelled, Error>>,
    timer: impl std::future::Future<Output = ()>,
) -> Result<String, Error> {
    let step = std::pin::pin!(step);
    let timer = std::pin::pin!(timer);
    match keel_sdk::future::select(step, timer).await {
        keel_sdk::future::Either::Left((r, _)) => Ok(r?.label),
        keel_sdk::future::Either::Right(_) => Ok("timer".into()),
    }
}

/// Spins on its first attempt; succeeds on the next.
#[step(max_retries = 1, initial_backoff = "10ms")]
async fn spin_once() -> Result<u32, StepError> {
    let meta = keel_sdk::step_metadata();
    if meta.attempt == 1 {
        let mut i: u64 = 0;
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }
    Ok(meta.attempt)
}

#[workflow]
async fn spinning_step() -> Result<u32, Error> {
    spin_once().await
}

/// Reads an environment variable and a file: what the operator granted.
#[step(max_retries = 0)]
async fn read_env_and_file(var: String, path: String) -> Result<Value, StepError> {
    Ok(json!({
        "env": std::env::var(&var).ok(),
        "file": std::fs::read_to_string(&path).ok(),
    }))
}

/// Appends a line to `path` and counts its lines: not idempotent, since
/// it does not key its effect by its step ID, so a crash between the
/// append and the journaling of its completion repeats the append.
#[step(max_retries = 0)]
async fn append_line(path: String) -> Result<usize, StepError> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| StepError::fatal(format!("{path}: {e}")))?;
    writeln!(file, "x").map_err(|e| StepError::fatal(e.to_string()))?;
    let text = std::fs::read_to_string(&path).map_err(|e| StepError::fatal(e.to_string()))?;
    Ok(text.lines().count())
}

/// A file of `dir` for this admission of the run: a crash test's trials
/// share the run's ID but not its start time.
fn admission_file(dir: &str) -> String {
    let run = keel_sdk::workflow_metadata();
    let started = run
        .started_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("{dir}/{}-{started}.log", run.run_id)
}

/// Tallies its run in a file of the granted `dir` (one per admission) with
/// a step that is not idempotent: a crash test finds the points where the
/// tally goes wrong.
#[workflow]
async fn tally(dir: String) -> Result<usize, Error> {
    let file = admission_file(&dir);
    let count = append_line(file).await?;
    noop(1).await?;
    Ok(count)
}

/// Books with a saga whose compensation is not idempotent: it appends to
/// a file of the granted `dir` (one per admission), so a crash test of the
/// cancel path finds the points where the compensation ran twice.
#[workflow]
async fn careless_refund(dir: String) -> Result<usize, Error> {
    let file = admission_file(&dir);
    let saga = keel_sdk::Saga::new();
    saga.run(async {
        saga.step(noop(1), move |_| append_line(file)).await?;
        // A timer completes at once once the run is cancelled.
        keel_sdk::sleep(Duration::from_secs(3600)).await;
        keel_sdk::cancelled().map_or(Ok(0), Err)
    })
    .await
}

#[workflow]
async fn grants((var, path): (String, String)) -> Result<Value, Error> {
    read_env_and_file(var, path).await
}

/// The Hatchet page's example: one run per `input.id` per minute.
#[workflow(idempotency(key = "input.id", ttl = "60s"), on_events = ["idempotency:example"])]
async fn idempotent_task(input: Value) -> Result<Value, Error> {
    let id = input["id"]
        .as_str()
        .map_or_else(|| input["id"].to_string(), str::to_string);
    Ok(json!({ "result": format!("Hello, world from task {id}") }))
}

/// A key from the metadata given at start: one run per tenant and ID.
#[workflow(idempotency(key = "additional_metadata.tenant + ':' + input.id", ttl = "5m"))]
async fn tenant_task(input: Value) -> Result<Value, Error> {
    Ok(input)
}

/// A key expression that evaluates to a number, not a string.
#[workflow(idempotency(key = "input.count", ttl = "1m"))]
async fn numeric_key(input: Value) -> Result<Value, Error> {
    Ok(input)
}

/// Built with the `bad_key` feature, a key expression that does not parse.
#[cfg_attr(
    feature = "bad_key",
    workflow(idempotency(key = "input.(", ttl = "1m"))
)]
#[cfg_attr(not(feature = "bad_key"), workflow)]
async fn broken_key(input: Value) -> Result<Value, Error> {
    Ok(input)
}

/// Declares a schedule: deploying the testbed creates `testbed.hourly`.
/// Returns `[sum, schedule, scheduled_at_ms]`.
#[workflow(schedule(every = "1h", overlap = "allow-all", input = "4"))]
async fn hourly(n: u32) -> Result<(u32, Option<String>, Option<u64>), Error> {
    let sum = ten_steps(n).await?;
    let meta = keel_sdk::workflow_metadata();
    let at = meta.scheduled_at.map(|t| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    });
    Ok((sum, meta.schedule, at))
}

/// Sleeps until `at_ms` (ms since the epoch) on the workflow's clock;
/// returns the clock's time then.
#[workflow]
async fn sleep_until_ms(at_ms: u64) -> Result<u64, Error> {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms);
    keel_sdk::sleep_until(at).await;
    Ok(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64)
}

/// A call of a tenant to a downstream service that takes `hold_ms`.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Call {
    url: String,
    tenant: String,
    hold_ms: u64,
    /// The first attempt hangs (ten minutes), so that a test can kill the
    /// worker in the middle of it.
    #[serde(default)]
    hang_first_attempt: bool,
}

/// Calls `URL/TENANT?hold_ms=N`; answers the status.
#[step(max_retries = 3, initial_backoff = "10ms")]
async fn call_downstream(call: Call) -> Result<u16, StepError> {
    let hold_ms = if call.hang_first_attempt && attempt().attempt == 1 {
        600_000
    } else {
        call.hold_ms
    };
    post(&call, hold_ms).await
}

/// POSTs to the downstream for `call.tenant`, asking it to hold the
/// request `hold_ms`; answers its status.
async fn post(call: &Call, hold_ms: u64) -> Result<u16, StepError> {
    let url = format!("{}/{}?hold_ms={hold_ms}", call.url, call.tenant);
    let request = Request::post(&url)
        .body(Body::empty())
        .map_err(StepError::fatal)?;
    let response = Client::new()
        .send(request)
        .await
        .map_err(StepError::retryable)?;
    Ok(response.status().as_u16())
}

/// Calls the downstream as `call_downstream` does; at most ten attempts a
/// second start, across every run and worker.
#[step(
    max_retries = 3,
    initial_backoff = "10ms",
    rate_limit(key = "'downstream'", limit = 10, per = "1s")
)]
async fn call_limited(call: Call) -> Result<u16, StepError> {
    post(&call, call.hold_ms).await
}

/// Calls the downstream as `call_downstream` does; at most two attempts
/// for one tenant run at once, across every run and worker.
#[step(
    initial_backoff = "10ms",
    concurrency(key = "'guarded-' + input.tenant", limit = 2)
)]
async fn call_guarded(call: Call) -> Result<u16, StepError> {
    post(&call, call.hold_ms).await
}

/// `x * x`, one attempt at a time across every run (and at most a
/// thousand a second): a step under both limits that needs no grant.
#[step(
    rate_limit(key = "'squares'", limit = 1000, per = "1s"),
    concurrency(key = "'squares'", limit = 1)
)]
async fn square_one_at_a_time(x: u64) -> Result<u64, StepError> {
    Ok(x * x)
}

/// The sum of the squares of `1..=n`, their steps scheduled at once (all
/// but one wait for the concurrency limit).
#[workflow]
async fn sum_of_squares(n: u64) -> Result<u64, Error> {
    let squares =
        keel_sdk::futures::future::try_join_all((1..=n).map(square_one_at_a_time)).await?;
    Ok(squares.into_iter().sum())
}

/// `n` concurrency-limited calls at once; answers how many succeeded.
#[workflow]
async fn guarded_burst((call, n): (Call, u32)) -> Result<u32, Error> {
    all_ok((0..n).map(|_| call_guarded(call.clone()))).await
}

/// `n` rate-limited calls at once; answers how many succeeded.
#[workflow]
async fn burst((call, n): (Call, u32)) -> Result<u32, Error> {
    all_ok((0..n).map(|_| call_limited(call.clone()))).await
}

/// Awaits `calls` at once; answers how many answered 200.
async fn all_ok(calls: impl Iterator<Item = keel_sdk::StepFuture<u16>>) -> Result<u32, Error> {
    use keel_sdk::futures::stream::{FuturesUnordered, StreamExt};
    let mut pending: FuturesUnordered<_> = calls.collect();
    let mut ok = 0;
    while let Some(status) = pending.next().await {
        if status? == 200 {
            ok += 1;
        }
    }
    Ok(ok)
}

/// At most two runs of one tenant call the downstream at once.
#[workflow(concurrency(key = "input.tenant", limit = 2))]
async fn per_tenant(call: Call) -> Result<u16, Error> {
    Ok(call_downstream(call).await?)
}

/// One run of the whole workflow at a time, the others queued by
/// priority: sleeps `ms` durably, then returns its label (or fails, for
/// the label `declined`).
#[workflow(concurrency(key = "'all'", limit = 1))]
async fn one_at_a_time((label, ms): (String, u64)) -> Result<String, Error> {
    keel_sdk::sleep(Duration::from_millis(ms)).await;
    if label == "declined" {
        declined().await?;
    }
    Ok(label)
}

/// One run at a time; a start while one runs is cancelled at once.
#[workflow(concurrency(key = "'solo'", limit = 1, on_limit = "cancel_newest"))]
async fn solo(ms: u64) -> Result<u64, Error> {
    keel_sdk::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

/// One run at a time; a start cancels the run in progress and takes over.
#[workflow(concurrency(key = "'latest'", limit = 1, on_limit = "cancel_in_progress"))]
async fn latest(ms: u64) -> Result<u64, Error> {
    keel_sdk::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

/// A booking to charge, confirm and ship; its calls go to the downstream
/// as `charge-ID`, `refund-ID` and `ship-ID`.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Booking {
    url: String,
    id: String,
    /// How long the charge takes.
    charge_ms: u64,
}

impl Booking {
    fn call(&self, what: &str) -> Call {
        Call {
            url: self.url.clone(),
            tenant: format!("{what}-{}", self.id),
            hold_ms: if what == "charge" { self.charge_ms } else { 0 },
            hang_first_attempt: false,
        }
    }
}

/// Charges, waits for a confirmation on hook `confirm:ID`, then ships; on
/// an error or a cancel the charge is refunded (a saga).
#[workflow]
async fn refundable(booking: Booking) -> Result<String, Error> {
    let saga = keel_sdk::Saga::new();
    saga.run(async {
        let refund = booking.call("refund");
        saga.step(call_downstream(booking.call("charge")), move |_| {
            call_downstream(refund)
        })
        .await?;
        let mut confirm = keel_sdk::create_hook::<bool>(format!("confirm:{}", booking.id))?;
        confirm.next().await?;
        call_downstream(booking.call("ship")).await?;
        Ok("shipped".to_string())
    })
    .await
}

/// Starts `refundable` for `booking` as a child run and waits for it; a
/// cancel of this run cancels the child, which refunds its own charge.
#[workflow]
async fn book_through_child(booking: Booking) -> Result<String, Error> {
    let child = keel_sdk::start("refundable", &booking, keel_sdk::StartOptions::default()).await?;
    child.return_value::<String>().await
}

/// Starts three `refundable` children, one per close policy (IDs
/// `ID-cancel`, `ID-abandon`, `ID-wait`), waits for a go on hook `go:ID`,
/// then books like `refundable` itself: what its end does to each child
/// is their policy's.
#[workflow]
async fn family(booking: Booking) -> Result<String, Error> {
    use keel_sdk::{ClosePolicy, StartOptions};
    for (suffix, close) in [
        ("cancel", ClosePolicy::Cancel),
        ("abandon", ClosePolicy::Abandon),
        ("wait", ClosePolicy::Wait),
    ] {
        let child = Booking {
            url: booking.url.clone(),
            id: format!("{}-{suffix}", booking.id),
            charge_ms: 0,
        };
        keel_sdk::start("refundable", &child, StartOptions::default().close(close)).await?;
    }
    let mut go = keel_sdk::create_hook::<bool>(format!("go:{}", booking.id))?;
    go.next().await?;
    refundable(booking).await
}

/// Tags its run with `stage` as it goes: `charged` after a step, then
/// `done`; and with `tenant` from its input.
#[workflow]
async fn tagged(tenant: String) -> Result<u32, Error> {
    keel_sdk::set_attribute("tenant", &tenant)?;
    let n = noop(1).await?;
    keel_sdk::set_attribute("stage", "charged")?;
    keel_sdk::sleep(Duration::from_millis(10)).await;
    keel_sdk::set_attribute("stage", "done")?;
    Ok(n)
}

/// Waits for a confirmation on hook `confirm:ID` for at most an hour; on
/// its deadline, says so in a cleanup step.
#[workflow(timeout = "1h")]
async fn confirm_within_an_hour(id: String) -> Result<bool, Error> {
    let mut confirm = keel_sdk::create_hook::<bool>(format!("confirm:{id}"))?;
    match confirm.next().await {
        Err(e @ Error::Cancelled { .. }) => {
            keel_sdk::non_cancellable(noop(7)).await?;
            Err(e)
        }
        other => other,
    }
}

/// Always fails, retryably, with up to 100 retries 50 ms apart but a
/// retry budget of 200 ms from its first attempt.
#[step(
    max_retries = 100,
    initial_backoff = "50ms",
    backoff_factor = 1.0,
    retry_budget = "200ms"
)]
async fn out_of_budget() -> Result<u32, StepError> {
    Err(StepError::retryable("the service is down"))
}

/// Calls `out_of_budget`.
#[workflow]
async fn budgeted() -> Result<u32, Error> {
    Ok(out_of_budget().await?)
}

/// Swallows its cancel and goes on: `sleep` loops on timers (which a
/// cancelled run's code gets at once), `steps` on cleanup steps.
#[workflow]
async fn stubborn(mode: String) -> Result<u32, Error> {
    let mut n = 0;
    loop {
        n += 1;
        if mode == "steps" && keel_sdk::cancelled().is_some() {
            let _ = keel_sdk::non_cancellable(noop(n)).await;
        } else {
            keel_sdk::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What `streamer` writes.
#[derive(Deserialize)]
struct StreamPlan {
    /// Chunks written in all.
    count: u32,
    /// After this many chunks, waits for a payload on hook `token` (or,
    /// without one, runs a step: the run's journal is written between).
    pause_at: Option<u32>,
    token: Option<String>,
    /// Write `{"token": "t{i} "}` (a model's output, token by token)
    /// instead of `{"i": i}`.
    #[serde(default)]
    tokens: bool,
}

/// Writes `count` chunks `{"i": i}` to stream `progress` from the workflow
/// (journaled), pausing on a hook midway if asked, then closes it.
#[workflow]
async fn streamer(plan: StreamPlan) -> Result<u32, Error> {
    let progress = keel_sdk::stream::<Value>("progress");
    for i in 0..plan.count {
        if Some(i) == plan.pause_at {
            match &plan.token {
                Some(token) => {
                    let mut go = keel_sdk::create_hook::<Value>(token.as_str())?;
                    go.next().await?;
                }
                None => {
                    noop(i).await?;
                }
            }
        }
        match plan.tokens {
            true => progress.write(&json!({ "token": format!("t{i} ") }))?,
            false => progress.write(&json!({ "i": i }))?,
        }
    }
    progress.close()?;
    // A closed stream refuses further writes.
    if progress.write(&json!({ "late": true })).is_ok() {
        return Err(Error::msg("a write after the close was taken"));
    }
    Ok(plan.count)
}

/// Streams tokens: attempt 1 writes two and fails, attempt 2 writes three
/// and succeeds.
#[step(max_retries = 2, initial_backoff = "10ms")]
async fn tokens() -> Result<String, StepError> {
    let a = attempt().attempt;
    let out = keel_sdk::stream::<String>("tokens");
    let count = if a == 1 { 2 } else { 3 };
    let mut text = String::new();
    for i in 0..count {
        let token = format!("a{a}-{i}");
        out.write(&token)?;
        text.push_str(&token);
    }
    if a == 1 {
        return Err(StepError::retryable("the model went away"));
    }
    out.close()?;
    Ok(text)
}

#[workflow]
async fn step_stream() -> Result<String, Error> {
    tokens().await
}

/// Answers each request on hook `token` with `{"echo": payload, "n": n}`
/// until a payload is `"stop"`; returns how many it answered.
#[workflow]
async fn replier(token: String) -> Result<u32, Error> {
    let mut requests = keel_sdk::create_hook::<Value>(token)?.keep();
    let mut n = 0;
    loop {
        let (payload, reply) = requests.next_request().await?;
        n += 1;
        reply.send(&json!({ "echo": payload, "n": n }))?;
        if payload == json!("stop") {
            return Ok(n);
        }
    }
}

/// Waits for a count on hook `token`, then computes that many rounds
/// before it writes anything: a worker killed while it computes has taken
/// the payload's wake and written nothing since.
#[workflow]
async fn hook_then_compute(token: String) -> Result<u64, Error> {
    // Held to the end: disposing of it is an effect, flushed first.
    let mut hook = keel_sdk::create_hook::<u64>(token)?;
    let rounds = hook.next().await?;
    let mut x: u64 = 0;
    for i in 0..rounds {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    std::hint::black_box(x);
    drop(hook);
    Ok(rounds)
}

/// Takes numbers from hook `token` until a 0, calling step `call` (a POST
/// of the number to `url`) for each: a run whose progress a service sees,
/// payload by payload. Returns the numbers in the order it took them.
#[workflow]
async fn inbox((url, token): (String, String)) -> Result<Vec<u32>, Error> {
    let mut numbers = keel_sdk::create_hook::<u32>(token)?;
    let mut taken = Vec::new();
    loop {
        let n = numbers.next().await?;
        if n == 0 {
            return Ok(taken);
        }
        taken.push(call(url.clone(), n).await?);
    }
}

/// Adds up the numbers it takes from hook `token` until a 0, showing the
/// total and how many it took as queries (`total`, `count`) as it goes;
/// returns the total. A step adds each (so the journal grows per number).
#[workflow]
async fn running_total(token: String) -> Result<u64, Error> {
    let mut numbers = keel_sdk::create_hook::<u64>(token)?;
    let (mut total, mut count) = (0u64, 0u64);
    keel_sdk::set_query("total", &total)?;
    keel_sdk::set_query("count", &count)?;
    loop {
        let n = numbers.next().await?;
        if n == 0 {
            return Ok(total);
        }
        total = add(total as i64, n as i64).await? as u64;
        count += 1;
        keel_sdk::set_query("total", &total)?;
        keel_sdk::set_query("count", &count)?;
    }
}

/// What an [`entity`] carries from one run of it to the next.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EntityState {
    /// Its start token, where the numbers are resumed.
    pub token: String,
    /// The numbers taken so far, across runs, added up.
    pub total: u64,
    /// How many numbers were taken so far, across runs.
    pub count: u64,
    /// The runs before this one.
    pub runs: u64,
    /// How many numbers a run takes before it continues as new.
    pub per_run: u64,
}

/// An entity that lives as long as it is sent numbers: adds up what it
/// takes from its start token until a 0, continuing as new after every
/// `per_run` numbers so that no journal holds more than that many;
/// shows `total`, `count` and `runs` as queries; returns the total.
#[workflow]
async fn entity(mut state: EntityState) -> Result<u64, Error> {
    let mut numbers = keel_sdk::create_hook::<u64>(state.token.clone())?;
    let show = |s: &EntityState| {
        keel_sdk::set_query("total", &s.total)?;
        keel_sdk::set_query("count", &s.count)?;
        keel_sdk::set_query("runs", &s.runs)
    };
    show(&state)?;
    for _ in 0..state.per_run {
        let n = numbers.next().await?;
        if n == 0 {
            return Ok(state.total);
        }
        state.total += n;
        state.count += 1;
        show(&state)?;
    }
    state.runs += 1;
    Err(keel_sdk::continue_as_new(&state))
}

/// Counts down from `n`, a step and a new run per number (continue as
/// new), and returns how many runs it took.
#[workflow]
async fn countdown((n, runs): (u32, u32)) -> Result<u32, Error> {
    if n == 0 {
        return Ok(runs + 1);
    }
    noop(n).await?;
    Err(keel_sdk::continue_as_new(&(n - 1, runs + 1)))
}

/// Starts `countdown` from `n` as a child and returns its output: the
/// output of the last run of the child's chain.
#[workflow]
async fn await_countdown(n: u32) -> Result<u32, Error> {
    let child = keel_sdk::start("countdown", &(n, 0u32), keel_sdk::StartOptions::default()).await?;
    child.return_value::<u32>().await
}

/// A text that is not blank: its schema is a string's, but it refuses to
/// decode from a blank one, so a payload can fit the hook's schema and
/// still be refused by the run.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[schemars(transparent)]
pub struct Note(String);

impl<'de> Deserialize<'de> for Note {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim().is_empty() {
            return Err(serde::de::Error::custom("a note cannot be blank"));
        }
        Ok(Note(text))
    }
}

/// A decision on a typed hook.
#[derive(Debug, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub approved: bool,
    pub note: Note,
}

/// Records `id`, then waits for a [`Decision`] on hook `decide:ID` and
/// returns it; a payload that does not decode fails the run.
#[workflow]
async fn decide(id: String) -> Result<Decision, Error> {
    noop(1).await?;
    let mut decisions = keel_sdk::create_hook::<Decision>(format!("decide:{id}"))?;
    let decision = decisions.next().await?;
    noop(2).await?;
    Ok(decision)
}

/// [`decide`] that passes over payloads that do not decode (each refused
/// and journaled) until one does.
#[workflow]
async fn decide_patiently(id: String) -> Result<Decision, Error> {
    let mut decisions = keel_sdk::create_hook::<Decision>(format!("decide:{id}"))?;
    loop {
        match decisions.next().await {
            Err(Error::Payload(_)) => continue,
            other => return other,
        }
    }
}

/// Posts a charge to `url` (a payment API's `/charge`); the SDK sends the
/// step ID as its `Idempotency-Key`, so the API charges once per step ID.
#[step(max_retries = 2, initial_backoff = "10ms")]
async fn charge(url: String) -> Result<String, StepError> {
    let answer: Value = keel_sdk::http::post(&url)
        .send(&json!({"amount": 100}))
        .await?
        .ok()?
        .json()?;
    Ok(answer["charge_id"].as_str().unwrap_or_default().to_string())
}

/// Prepares, charges through `url`, then waits on hook `token` for a note.
/// Its next build (feature `reordered`) verifies before it charges, behind
/// a patch marker, as docs/guide.md recommends for a compatible change: a
/// run moved there and run again from its charge must charge under the
/// step ID it charged under before.
#[workflow]
async fn billing((url, token): (String, String)) -> Result<String, Error> {
    noop(0).await?;
    if cfg!(feature = "reordered") && keel_sdk::patched("verify-before-charge") {
        noop(1).await?;
    }
    let charge_id = charge(url).await?;
    let note = keel_sdk::create_hook::<String>(token)?.next().await?;
    Ok(format!("{charge_id}: {note}"))
}

/// Charges through `url` and returns the charge's ID: a run with an
/// effect and no compensation, which a retry takes on from its charge.
#[workflow]
async fn charge_once(url: String) -> Result<String, Error> {
    Ok(charge(url).await?)
}

/// A note a sender posts to a tally, with the sender's ID for it.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
struct TallyNote {
    id: String,
    text: String,
}

/// Records a note (its effect, say, a row in a ledger); returns its text.
#[step(max_retries = 0)]
async fn record_note(text: String) -> Result<String, StepError> {
    Ok(text)
}

/// Takes two notes from hook `token` and records each as it comes: a note
/// its sender sends twice is recorded twice. The planted bug `keel
/// simulate` finds; `tally_notes_once` is its fix.
#[workflow]
async fn tally_notes(token: String) -> Result<Vec<String>, Error> {
    let mut notes = keel_sdk::create_hook::<TallyNote>(token)?;
    let mut recorded = Vec::new();
    for _ in 0..2 {
        let note = notes.next().await?;
        recorded.push(record_note(note.text).await?);
    }
    Ok(recorded)
}

/// `tally_notes`, recording each note once by its sender's ID: a note sent
/// twice is taken and passed over.
#[workflow]
async fn tally_notes_once(token: String) -> Result<Vec<String>, Error> {
    let mut notes = keel_sdk::create_hook::<TallyNote>(token)?;
    let mut seen = std::collections::BTreeSet::new();
    let mut recorded = Vec::new();
    while recorded.len() < 2 {
        let note = notes.next().await?;
        if seen.insert(note.id) {
            recorded.push(record_note(note.text).await?);
        }
    }
    Ok(recorded)
}

/// Reserves `amount` of a budget.
#[step(max_retries = 0)]
async fn reserve_budget(amount: u64) -> Result<u64, StepError> {
    Ok(amount)
}

/// Releases what `reserve_budget` reserved: its compensation.
#[step(max_retries = 0)]
async fn release_budget(amount: u64) -> Result<u64, StepError> {
    Ok(amount)
}

/// Reserves a budget, then publishes by charging through `url`; when the
/// charge fails for good (the API refuses) the saga releases the budget.
#[workflow]
async fn publish_on_budget(url: String) -> Result<String, Error> {
    let saga = keel_sdk::Saga::new();
    saga.run(async {
        saga.step(reserve_budget(100), |amount| release_budget(*amount))
            .await?;
        Ok(charge(url.clone()).await?)
    })
    .await
}

keel_sdk::component!(
    workflows = [
        decide,
        decide_patiently,
        refundable,
        book_through_child,
        family,
        tagged,
        budgeted,
        confirm_within_an_hour,
        stubborn,
        burst,
        guarded_burst,
        sum_of_squares,
        ten_steps_limited,
        ten_steps_relaxed,
        ten_steps_strict,
        two_steps_strict,
        ten_calls,
        ten_calls_strict,
        ten_calls_relaxed,
        ten_steps_per_tenant,
        per_tenant,
        one_at_a_time,
        solo,
        latest,
        hourly,
        sleep_until_ms,
        ten_steps,
        two_steps,
        clock_random,
        concurrent,
        unordered,
        joined,
        flaky,
        trap,
        spin,
        thread_sleep,
        memory_bomb,
        memory_bomb_step,
        http_in_workflow,
        file_in_workflow,
        sleeper,
        crashable,
        race,
        grants,
        idempotent_task,
        tenant_task,
        numeric_key,
        broken_key,
        spinning_step,
        tally,
        careless_refund,
        fan_out,
        metadata_in_workflow,
        deep,
        wait_twice,
        streamer,
        step_stream,
        replier,
        hook_then_compute,
        inbox,
        step_then_sleep,
        running_total,
        entity,
        countdown,
        await_countdown,
        billing,
        publish_on_budget,
        charge_once,
        tally_notes,
        tally_notes_once,
    ],
    steps = [
        call,
        charge,
        reserve_budget,
        release_budget,
        record_note,
        tokens,
        out_of_budget,
        call_limited,
        call_guarded,
        square_one_at_a_time,
        call_downstream,
        noop,
        add,
        mul,
        delayed,
        declined,
        retry_later,
        always_fails,
        probe,
        read_env_and_file,
        append_line,
        spin_once,
        hoard,
        measure,
    ]
);
