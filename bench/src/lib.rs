//! `keel bench`: the W10 benchmark (a workflow of 10 trivial steps through
//! the durable path), in process and through the HTTP API of a `keel
//! serve` child process (the path a client takes), journal replay speed,
//! memory per parked run, and runs beyond the instance slots; with
//! `--parked`, the cost of the work a store holds ([`scale`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_host::core::RunStatus;
use keel_host::core::journal::Fact;
use keel_host::{Config, Keel, Loaded, StartOptions};

#[derive(clap::Args)]
pub struct Args {
    /// The `testbed` guest.
    #[arg(long, default_value = "target/wasm32-wasip2/release/testbed.wasm")]
    component: PathBuf,
    /// Sequential W10 runs for the latency figures.
    #[arg(long, default_value_t = 200)]
    latency_runs: usize,
    /// W10 runs for each throughput figure.
    #[arg(long, default_value_t = 640)]
    throughput_runs: usize,
    /// Entries of the replayed journal.
    #[arg(long, default_value_t = 10_000)]
    replay_entries: usize,
    /// Step counts of the runs for the per-step cost figures.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000")]
    step_counts: Vec<u32>,
    /// Runs parked at once for the memory figure.
    #[arg(long, default_value_t = 500)]
    parked_runs: usize,
    /// The `order-hooks` guest, for the start-token and hook figures
    /// (skipped if the file does not exist).
    #[arg(long, default_value = "target/wasm32-wasip2/release/order_hooks.wasm")]
    hooks_component: PathBuf,
    /// A Python guest with `ten_steps` (the SDK's `guests/python/probes`,
    /// built with `python -m keel build probes`), for W10 in Python beside
    /// Rust (skipped if the file does not exist).
    #[arg(long, default_value = "guests/python/probes/probes.wasm")]
    python_component: PathBuf,
    /// Tokens for the start-token figures; each is started by 8 callers at once.
    #[arg(long, default_value_t = 200)]
    tokens: usize,
    /// A PostgreSQL database to measure W10 on too, with one engine and
    /// with two sharing it (in a scratch schema, dropped afterwards).
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Runs (each one 100 ms step) driven at once on an engine of 64
    /// instance slots, for the figure beyond the slots; 0 skips it.
    #[arg(long, default_value_t = 1000)]
    queued_runs: usize,
    /// Fires of a schedule every second, for the fire-lag figures (in
    /// process, and by a `keel serve` with the HTTP figures); 0 skips them.
    #[arg(long, default_value_t = 10)]
    fires: usize,
    /// W10 runs through the HTTP API for its throughput figure (16 in
    /// flight); 0 skips the HTTP figures.
    #[arg(long, default_value_t = 200)]
    http_runs: usize,
    /// Ended runs (imported copies of one real run, admitted two days ago,
    /// each with a `tenant` attribute of 100 values) beside 100 live ones,
    /// for the attribute-listing and purge figures on each store; 0 skips
    /// them.
    #[arg(long, default_value_t = 0)]
    retention_runs: usize,
    /// Measure only the cost of held work: for each of these counts of
    /// runs parked on a day's sleep, a `keel serve` on a fresh sled store
    /// (W10 latency and throughput, admissions, wake lag, `/metrics`, idle
    /// CPU, memory), e.g. `0,10000,100000`.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    parked: Vec<usize>,
    /// With `--parked` and `--postgres`: the counts to park on PostgreSQL,
    /// e.g. `0,100000,1000000`.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    parked_postgres: Vec<usize>,
    /// With `--parked`: runs of the wake-lag figure, due 1,000 a second.
    #[arg(long, default_value_t = 3000)]
    wake_runs: usize,
    /// With `--parked`: MiB of page cache for the sled stores' servers.
    #[arg(long, default_value_t = keel_host::store::sled::DEFAULT_CACHE_BYTES >> 20)]
    sled_cache_mib: u64,
    /// With `--parked`: runs due in the same second on a fresh sled store,
    /// for the burst figures (0 skips them).
    #[arg(long, default_value_t = 0)]
    burst: usize,
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    if !args.parked.is_empty() {
        return scale::figures(args).await;
    }
    let dir = std::env::temp_dir().join(format!("keel-bench-{}", std::process::id()));
    let keel = Keel::open_sled(
        Config::caching_in(dir.join("compiled")),
        &keel_host::store::sled::SledOptions::new(&dir),
    )?;
    let loaded = keel.load(&args.component).await?;
    let result = figures(&keel, &loaded, args).await;
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
    let in_process = result?;
    durability::figures(args).await?;
    if args.queued_runs > 0 {
        beyond_the_slots(args).await?;
    }
    if args.fires > 0 {
        fire_lag(args).await?;
    }
    if args.http_runs > 0 {
        http::figures(args, in_process).await?;
    }
    if let Some(url) = &args.postgres {
        for engines in [1, 2] {
            postgres(url, engines, args).await?;
        }
    }
    if args.retention_runs > 0 {
        retention::figures(args).await?;
    }
    Ok(())
}

mod durability;
mod http;
mod retention;
mod scale;

/// W10 latency and throughput on PostgreSQL with `engines` engines (each
/// with its own pool and lease owner) sharing one database.
async fn postgres(url: &str, engines: usize, args: &Args) -> anyhow::Result<()> {
    use keel_host::store::postgres::{PgOptions, PgStore};
    let mut options = PgOptions::new(url);
    options.schema = format!("keel_bench_{}_{engines}", std::process::id());
    let mut keels = Vec::new();
    let mut stores = Vec::new();
    for _ in 0..engines {
        let store = Arc::new(PgStore::open(options.clone()).await?);
        let keel = Keel::open(
            Config::caching_in(keel_host::user_cache_dir()),
            store.clone(),
        )?;
        let loaded = keel.load(&args.component).await?;
        keels.push((keel, loaded));
        stores.push(store);
    }
    let what = format!("PostgreSQL, {engines} engine(s)");
    let (keel, loaded) = &keels[0];
    w10(keel, loaded, "10").await?;
    if engines == 1 {
        let mut latencies = Vec::with_capacity(args.latency_runs);
        for _ in 0..args.latency_runs {
            let t = Instant::now();
            w10(keel, loaded, "10").await?;
            latencies.push(t.elapsed());
        }
        print_latencies(
            &format!("{what}: W10 latency, one run at a time"),
            latencies,
        );
    }
    for in_flight in [16, 64] {
        let rate = throughput_across(&keels, in_flight, args.throughput_runs).await?;
        println!("{what}: W10 throughput, {in_flight} in flight: {rate:.0} runs/s");
    }
    limited_beside_unlimited(&what, &keels, args.throughput_runs).await?;
    stores[0].drop_schema().await?;
    Ok(())
}

/// Runs `total` W10 runs with `in_flight` at a time, spread over engines.
async fn throughput_across(
    keels: &[(Keel, Arc<Loaded>)],
    in_flight: usize,
    total: usize,
) -> anyhow::Result<f64> {
    throughput_of(keels, W10, |_| "10".into(), in_flight, total).await
}

/// Runs `total` runs of `workflow` (W10's shape; the `i`th run's input is
/// `input(i)`) with `in_flight` at a time, spread over engines; runs per
/// second.
async fn throughput_of(
    keels: &[(Keel, Arc<Loaded>)],
    workflow: &'static str,
    input: fn(usize) -> String,
    in_flight: usize,
    total: usize,
) -> anyhow::Result<f64> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for i in 0..in_flight {
        let (keel, loaded) = keels[i % keels.len()].clone();
        let next = next.clone();
        workers.spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    break;
                }
                w10_of(&keel, &loaded, workflow, &input(n)).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = workers.join_next().await {
        r??;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64())
}

/// The in-process figures the HTTP ones are compared with.
struct InProcess {
    p50: Duration,
    /// W10 runs/s at 16 in flight.
    rate16: f64,
    /// W10 runs/s at 64 in flight.
    rate64: f64,
    /// A run of [`STREAM_CHUNKS`] journaled chunks, started and read to
    /// its close by a follower.
    stream: Duration,
    /// W10's p50 in the Python guest, when it was measured.
    python_p50: Option<Duration>,
}

/// Chunks the stream figure's run writes (`streamer`, from its workflow).
const STREAM_CHUNKS: u32 = 1000;

/// A run of `streamer` writing [`STREAM_CHUNKS`] journaled chunks, driven
/// while a follower reads its stream from 0 to the close: the time from
/// the start to the follower's last chunk.
async fn stream_read(keel: &Keel, loaded: &Arc<Loaded>) -> anyhow::Result<Duration> {
    use futures::StreamExt;
    let input = format!("{{\"count\": {STREAM_CHUNKS}}}");
    let t = Instant::now();
    let run = keel.start(loaded, "streamer", &input).await?;
    let driver = {
        let (keel, run_id) = (keel.clone(), run.run_id.clone());
        tokio::spawn(async move { keel.drive(&run_id).await })
    };
    let read = keel
        .follow_stream(&run.run_id, "progress", 0)
        .filter(|c| std::future::ready(c.is_ok()))
        .count()
        .await;
    let elapsed = t.elapsed();
    driver.await??;
    anyhow::ensure!(
        read == STREAM_CHUNKS as usize + 1,
        "the follower read {read} chunks of {STREAM_CHUNKS} and the close"
    );
    stream_figure(
        "in process",
        "followed to its close",
        STREAM_CHUNKS,
        elapsed,
    );
    Ok(elapsed)
}

/// Prints the stream figure of one path: `chunks` followed `how` in
/// `elapsed`.
fn stream_figure(path: &str, how: &str, chunks: u32, elapsed: Duration) {
    println!(
        "{path}: a run writing {chunks} journaled stream chunks, {how}: {:.1} ms ({:.0} chunks/s)",
        ms(elapsed),
        f64::from(chunks) / elapsed.as_secs_f64()
    );
}

async fn figures(keel: &Keel, loaded: &Arc<Loaded>, args: &Args) -> anyhow::Result<InProcess> {
    w10(keel, loaded, "10").await?;
    let p50 = print_latencies(
        "in process: W10 latency, one run at a time",
        latencies_of(keel, loaded, W10, args.latency_runs).await?,
    );
    let python_p50 = python_beside(keel, args, p50).await?;
    let mut rates = Vec::new();
    for in_flight in [16, 64] {
        let rate = throughput(keel, loaded, in_flight, args.throughput_runs).await?;
        println!("in process: W10 throughput, {in_flight} in flight: {rate:.0} runs/s");
        rates.push(rate);
    }
    let keels = [(keel.clone(), loaded.clone())];
    limited_beside_unlimited("in process", &keels, args.throughput_runs).await?;
    replay(keel, loaded, args.replay_entries).await?;
    step_costs(keel, loaded, &args.step_counts).await?;
    parked(keel, loaded, args.parked_runs).await?;
    if args.hooks_component.exists() {
        let hooks_guest = keel.load(&args.hooks_component).await?;
        start_tokens(keel, &hooks_guest, args.tokens).await?;
    } else {
        println!(
            "start tokens and hooks: skipped, build the guest with `cargo build --release --target wasm32-wasip2 -p order-hooks`"
        );
    }
    let stream = stream_read(keel, loaded).await?;
    Ok(InProcess {
        p50,
        rate16: rates[0],
        rate64: rates[1],
        stream,
        python_p50,
    })
}

/// W10 of the Python guest beside the Rust one's p50 (`rust_p50`): the
/// cost of a CPython instance per step attempt and per activation.
async fn python_beside(
    keel: &Keel,
    args: &Args,
    rust_p50: Duration,
) -> anyhow::Result<Option<Duration>> {
    if !args.python_component.exists() {
        println!(
            "in process: W10 in Python: skipped, build it with `python -m keel build probes` in guests/python/probes (sdk/python on PYTHONPATH)"
        );
        return Ok(None);
    }
    let started = Instant::now();
    let python = keel.load(&args.python_component).await?;
    println!(
        "in process: the Python guest ({} KiB) loaded in {:.0} ms (compiled or read from the cache)",
        std::fs::metadata(&args.python_component)?.len() / 1024,
        ms(started.elapsed())
    );
    w10(keel, &python, "10").await?;
    let p50 = print_latencies(
        "in process: W10 latency in Python, one run at a time",
        latencies_of(keel, &python, W10, args.latency_runs.min(50)).await?,
    );
    println!(
        "in process: W10 in Python against Rust, p50: {:.1}x",
        p50.as_secs_f64() / rust_p50.as_secs_f64()
    );
    Ok(Some(p50))
}

/// Starts with tokens (8 concurrent callers per token, one admitted), then
/// the latency of a resume that completes a waiting run (resume, then drive
/// by replay).
async fn start_tokens(keel: &Keel, loaded: &Arc<Loaded>, tokens: usize) -> anyhow::Result<()> {
    let t = Instant::now();
    let mut owners = Vec::with_capacity(tokens);
    for i in 0..tokens {
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (keel, loaded) = (keel.clone(), loaded.clone());
            let input = format!(r#"{{"order_id": "bench-{i}", "note": "first"}}"#);
            let options = StartOptions::token(format!("order:bench-{i}"));
            callers.spawn(async move {
                keel.start_with(&loaded, "order_updates", &input, &options)
                    .await
            });
        }
        let mut admitted = Vec::new();
        while let Some(r) = callers.join_next().await {
            match r? {
                Ok(run) => admitted.push(run.run_id),
                Err(keel_host::Error::HookConflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        anyhow::ensure!(admitted.len() == 1, "token {i}: {admitted:?} admitted");
        owners.extend(admitted);
    }
    let elapsed = t.elapsed();
    println!(
        "start with a token, 8 callers per token ({tokens} tokens): {:.0} starts/s, {:.2} ms per token",
        (tokens * 8) as f64 / elapsed.as_secs_f64(),
        ms(elapsed) / tokens as f64
    );
    let mut latencies = Vec::with_capacity(owners.len());
    for (i, run_id) in owners.iter().enumerate() {
        keel.drive(run_id).await?;
        let t = Instant::now();
        keel.resume_hook(
            &format!("order:bench-{i}"),
            r#"{"note": "done", "done": true}"#,
        )
        .await?;
        let run = keel.drive(run_id).await?;
        latencies.push(t.elapsed());
        anyhow::ensure!(run.status == RunStatus::Completed, "{run:?}");
    }
    print_latencies("hook resume until the waiting run completes", latencies);
    Ok(())
}

/// Prints the median and 99th percentile of `latencies`; returns the median.
fn print_latencies(what: &str, mut latencies: Vec<Duration>) -> Duration {
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    println!(
        "{what} ({} runs): p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        ms(pct(0.5)),
        ms(pct(0.99))
    );
    pct(0.5)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn w10(keel: &Keel, loaded: &Loaded, n: &str) -> anyhow::Result<keel_host::core::RunId> {
    w10_of(keel, loaded, W10, n).await
}

/// The W10 workflow, and the same with a concurrency limit it never
/// reaches.
const W10: &str = "ten_steps";
const W10_LIMITED: &str = "ten_steps_limited";
const W10_PER_TENANT: &str = "ten_steps_per_tenant";

/// The time of each of `runs` W10 runs of `workflow`, one at a time.
async fn latencies_of(
    keel: &Keel,
    loaded: &Loaded,
    workflow: &str,
    runs: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        w10_of(keel, loaded, workflow, "10").await?;
        latencies.push(t.elapsed());
    }
    Ok(latencies)
}

async fn w10_of(
    keel: &Keel,
    loaded: &Loaded,
    workflow: &str,
    n: &str,
) -> anyhow::Result<keel_host::core::RunId> {
    let run = keel.run(loaded, workflow, n).await?;
    anyhow::ensure!(
        run.status == RunStatus::Completed,
        "W10 run did not complete: {:?}",
        run.error
    );
    Ok(run.run_id)
}

async fn throughput(
    keel: &Keel,
    loaded: &Arc<Loaded>,
    in_flight: usize,
    total: usize,
) -> anyhow::Result<f64> {
    throughput_across(&[(keel.clone(), loaded.clone())], in_flight, total).await
}

/// W10 throughput at 16 in flight without a concurrency limit, with one
/// key for every run, and with a key per tenant (16 tenants, runs dealt
/// round-robin), each limit declared and not reached; measured in turn
/// (five rounds each) so that all see the same machine. Prints the
/// medians and the differences.
async fn limited_beside_unlimited(
    what: &str,
    keels: &[(Keel, Arc<Loaded>)],
    total: usize,
) -> anyhow::Result<()> {
    let manifest = &keels[0].1.manifest;
    if manifest.workflow(W10_LIMITED).is_none() || manifest.workflow(W10_PER_TENANT).is_none() {
        println!(
            "{what}: W10 with a concurrency limit: skipped, the component has no `{W10_LIMITED}` or `{W10_PER_TENANT}`"
        );
        return Ok(());
    }
    let (mut plain, mut one_key, mut per_tenant) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        plain.push(throughput_of(keels, W10, |_| "10".into(), 16, total).await?);
        one_key.push(throughput_of(keels, W10_LIMITED, |_| "10".into(), 16, total).await?);
        per_tenant.push(
            throughput_of(
                keels,
                W10_PER_TENANT,
                |i| format!("[10, {}]", i % 16),
                16,
                total,
            )
            .await?,
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (plain, one_key, per_tenant) = (
        median(&mut plain),
        median(&mut one_key),
        median(&mut per_tenant),
    );
    let change = |x: f64| (x / plain - 1.0) * 100.0;
    println!(
        "{what}: W10 throughput, 16 in flight, median of 5: {plain:.0} runs/s without a limit; with one declared and not reached: {one_key:.0} runs/s on one key ({:+.1} %), {per_tenant:.0} runs/s on a key per tenant ({:+.1} %)",
        change(one_key),
        change(per_tenant)
    );
    Ok(())
}

async fn replay(keel: &Keel, loaded: &Arc<Loaded>, entries: usize) -> anyhow::Result<()> {
    // Each step journals 3 entries; the run adds 2.
    let steps = entries.saturating_sub(2) / 3;
    let run_id = w10(keel, loaded, &steps.to_string()).await?;
    let journal = keel.journal(&run_id).await?;
    let run = keel.get_run(&run_id).await?;
    let mut rounds = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let verdict = keel.replay_entries(loaded, &run, journal.clone()).await?;
        rounds.push(t.elapsed());
        anyhow::ensure!(verdict.is_ok(), "the replay diverged: {verdict:?}");
    }
    rounds.sort();
    let median = rounds[rounds.len() / 2];
    println!(
        "replay of a {}-entry journal (median of {} rounds): {:.1} ms, {:.0} entries/s",
        journal.len(),
        rounds.len(),
        ms(median),
        journal.len() as f64 / median.as_secs_f64()
    );
    Ok(())
}

/// The cost of a step in runs of each of `counts` sequential steps (the
/// median run's time over its steps; fewer rounds for longer runs), and
/// each beside the shortest: a step must not cost more because its
/// journal is long.
async fn step_costs(keel: &Keel, loaded: &Arc<Loaded>, counts: &[u32]) -> anyhow::Result<()> {
    let mut first: Option<f64> = None;
    for &steps in counts {
        let rounds = (20_000 / steps.max(1)).clamp(1, 50);
        let mut costs = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let t = Instant::now();
            w10(keel, loaded, &steps.to_string()).await?;
            costs.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(steps.max(1)));
        }
        costs.sort_by(f64::total_cmp);
        let median = costs[costs.len() / 2];
        let ratio = *first.get_or_insert(median);
        println!(
            "in process: a run of {steps} sequential steps (median of {rounds}): {median:.1} µs per step, {:.2}× the cost at {} steps",
            median / ratio,
            counts[0]
        );
    }
    Ok(())
}

/// Each fire's lag, as the engine reports it.
#[derive(Default)]
struct Lags(std::sync::Mutex<Vec<Duration>>);

impl keel_host::Observer for Lags {
    fn schedule_fired(
        &self,
        _schedule: &str,
        _outcome: keel_host::core::schedule::FireOutcome,
        lag_ms: Option<u64>,
    ) {
        if let Some(ms) = lag_ms {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Duration::from_millis(ms));
        }
    }
}

/// A schedule firing `ten_steps` every second, for the fire-lag figures.
fn every_second(name: &str) -> keel_host::core::schedule::ScheduleSpec {
    use keel_host::core::schedule::{DEFAULT_CATCHUP_WINDOW_MS, Overlap, ScheduleSpec, Spec};
    ScheduleSpec {
        name: name.into(),
        workflow: "ten_steps".into(),
        deployment: None,
        input: "10".into(),
        additional_metadata: None,
        spec: Spec::every(1000, 0).expect("a valid interval"),
        overlap: Overlap::AllowAll,
        catchup_window_ms: DEFAULT_CATCHUP_WINDOW_MS,
        paused: false,
        note: None,
        start_at_ms: None,
        end_at_ms: None,
        declared_by: None,
    }
}

/// The lag from a fire's nominal time to its decision and to its run's
/// admission, on an idle worker in this process firing a schedule every
/// second.
async fn fire_lag(args: &Args) -> anyhow::Result<()> {
    use keel_host::store::sled::SledOptions;
    let dir = std::env::temp_dir().join(format!("keel-bench-fires-{}", std::process::id()));
    let lags = Arc::new(Lags::default());
    let mut config = Config::caching_in(dir.join("compiled"));
    config.observer = lags.clone();
    let keel = Keel::open_sled(config, &SledOptions::new(&dir))?;
    let result = async {
        keel.deploy_file(&args.component, None).await?;
        keel.create_schedule(every_second("bench")).await?;
        let worker = tokio::spawn({
            let keel = keel.clone();
            async move { keel.work(false).await }
        });
        let deadline = Instant::now() + Duration::from_secs(args.fires as u64 * 2 + 10);
        while lags.0.lock().unwrap_or_else(|e| e.into_inner()).len() < args.fires {
            anyhow::ensure!(Instant::now() < deadline, "the schedule did not fire");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        keel.shutdown();
        worker.await??;
        let decided = lags.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let admitted = admission_lags(&keel.list_runs().await?);
        print_latencies(
            "Schedule fire lag on an idle worker, in process: nominal time to decision",
            decided,
        );
        print_latencies(
            "Schedule fire lag on an idle worker, in process: nominal time to the run's admission",
            admitted,
        );
        anyhow::Ok(())
    }
    .await;
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// From each fire's nominal time (in its run ID) to the run's admission.
fn admission_lags(runs: &[keel_host::core::RunRecord]) -> Vec<Duration> {
    runs.iter()
        .filter_map(|r| {
            let (_, nominal) = keel_host::core::schedule::parse_fire_run_id(r.run_id.as_str())?;
            Some(Duration::from_millis(
                r.created_at_ms.saturating_sub(nominal),
            ))
        })
        .collect()
}

/// Instance slots of the engine for the figure beyond the slots.
const FEW_SLOTS: u32 = 64;

/// `queued_runs` runs of one 100 ms step each, driven at once on an engine
/// of [`FEW_SLOTS`] instance slots: they queue for slots, and all complete.
async fn beyond_the_slots(args: &Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("keel-bench-slots-{}", std::process::id()));
    let mut config = Config::caching_in(dir.join("compiled"));
    config.max_instances = FEW_SLOTS;
    let keel = Keel::open_sled(config, &keel_host::store::sled::SledOptions::new(&dir))?;
    let result = async {
        let loaded = keel.load(&args.component).await?;
        let mut runs = Vec::with_capacity(args.queued_runs);
        for _ in 0..args.queued_runs {
            runs.push(keel.start(&loaded, "concurrent", "[100]").await?.run_id);
        }
        let before = rss_bytes();
        let t = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for run_id in runs {
            let keel = keel.clone();
            tasks.spawn(async move { keel.result(&run_id, true).await });
        }
        let mut completed = 0;
        while let Some(run) = tasks.join_next().await {
            if run??.status == RunStatus::Completed {
                completed += 1;
            }
        }
        let elapsed = t.elapsed();
        println!(
            "beyond the instance slots: {completed} of {} runs (one 100 ms step each) completed on {FEW_SLOTS} slots in {:.1} s: {:.0} runs/s, {:.1} kB more memory per run",
            args.queued_runs,
            elapsed.as_secs_f64(),
            completed as f64 / elapsed.as_secs_f64(),
            rss_bytes().saturating_sub(before) as f64 / args.queued_runs as f64 / 1024.0
        );
        anyhow::Ok(())
    }
    .await;
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

async fn parked(keel: &Keel, loaded: &Arc<Loaded>, count: usize) -> anyhow::Result<()> {
    let mut runs = Vec::with_capacity(count);
    for _ in 0..count {
        runs.push(keel.start(loaded, "sleeper", "30000").await?.run_id);
    }
    let before = rss_bytes();
    let mut tasks = tokio::task::JoinSet::new();
    for run_id in &runs {
        let (keel, run_id) = (keel.clone(), run_id.clone());
        tasks.spawn(async move { keel.drive(&run_id).await });
    }
    // Wait until every run has journaled its timer, i.e. is parked on it.
    loop {
        let mut parked = 0;
        for run_id in &runs {
            let journal = keel.journal(run_id).await.unwrap_or_default();
            if journal
                .iter()
                .any(|e| matches!(e.fact, Fact::TimerScheduled { .. }))
            {
                parked += 1;
            }
        }
        if parked == runs.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = rss_bytes();
    tasks.abort_all();
    println!(
        "memory per parked run ({count} parked): {:.1} kB",
        after.saturating_sub(before) as f64 / count as f64 / 1024.0
    );
    Ok(())
}
