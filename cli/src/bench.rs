//! `keel bench`: the W10 benchmark (a workflow of 10 trivial steps through
//! the durable path), in process and through the HTTP API of a `keel
//! serve` child process (the path a client takes), journal replay speed,
//! memory per parked run, and runs beyond the instance slots.

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
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
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

mod retention {
    //! A store of many ended runs and 100 live ones: listing by attribute,
    //! the purge of the ended ones past a retention of a day, the store's
    //! size before and after, and the live runs completing afterwards.

    use super::*;
    use keel_host::core::file::JournalFile;
    use keel_host::core::retention::StoreStats;
    use keel_host::core::{Clock, RunFilter};
    use keel_host::store::Store;

    const DAY: u64 = 86_400_000;
    const LIVE: usize = 100;

    pub(super) async fn figures(args: &Args) -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("keel-bench-retention-{}", std::process::id()));
        let sled = Arc::new(keel_host::store::sled::SledStore::open(&dir)?);
        let outcome = on("sled", sled, &dir.join("compiled"), args, || async {
            Ok(())
        })
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        outcome?;
        if let Some(url) = &args.postgres {
            use keel_host::store::postgres::{PgOptions, PgStore};
            let mut options = PgOptions::new(url);
            options.schema = format!("keel_bench_retention_{}", std::process::id());
            let pg = Arc::new(PgStore::open(options).await?);
            let vacuumed = pg.clone();
            let outcome = on(
                "PostgreSQL",
                pg.clone(),
                &crate::user_cache_dir(),
                args,
                || async move { Ok(vacuumed.vacuum_full().await?) },
            )
            .await;
            pg.drop_schema().await?;
            outcome?;
        }
        Ok(())
    }

    async fn on<F, Fut>(
        what: &str,
        store: Arc<dyn Store>,
        cache: &std::path::Path,
        args: &Args,
        compact: F,
    ) -> anyhow::Result<()>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let mut config = Config::caching_in(cache);
        config.retention.default_ms = Some(DAY);
        let keel = Keel::open(config, store.clone())?;
        let loaded = keel.load(&args.component).await?;
        let model = keel.run(&loaded, "two_steps", "1").await?;
        let file = JournalFile::new(&model, keel.journal(&model.run_id).await?);
        let n = args.retention_runs;
        let t = Instant::now();
        import_copies(&keel, &file, n).await?;
        println!(
            "{what}: {n} ended runs imported in {:.1} s ({:.0} runs/s)",
            t.elapsed().as_secs_f64(),
            n as f64 / t.elapsed().as_secs_f64()
        );
        let mut live = Vec::new();
        for _ in 0..LIVE {
            live.push(keel.start(&loaded, "sleeper", "10").await?.run_id);
        }
        let before = keel.store_stats().await?;
        list_by_attribute(what, &keel).await?;
        let t = Instant::now();
        let purge = keel.purge_ended(usize::MAX).await?;
        let took = t.elapsed();
        anyhow::ensure!(
            purge.deleted.runs.len() == n,
            "{what}: the purge deleted {} runs, not {n}",
            purge.deleted.runs.len()
        );
        let after = keel.store_stats().await?;
        anyhow::ensure!(
            after.runs_by_status.get("completed") == Some(&1)
                && after.runs_by_status.get("pending") == Some(&(LIVE as u64)),
            "{what}: after the purge the store holds {:?}",
            after.runs_by_status
        );
        println!(
            "{what}: purge of {n} ended runs ({} journal entries, {} bytes) in {:.1} s ({:.0} runs/s, batches of {})",
            purge.deleted.journal_entries,
            purge.deleted.bytes,
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64(),
            keel_host::PURGE_BATCH
        );
        compact().await?;
        let compacted = keel.store_stats().await?;
        print_sizes(what, &before, &after, &compacted);
        // Whether the freed space takes new runs: as many again, purged.
        import_copies(&keel, &file, n).await?;
        let refilled = keel.store_stats().await?;
        println!(
            "{what}: store size {:.1} MiB with {n} ended runs imported again",
            refilled.size_bytes as f64 / (1 << 20) as f64
        );
        keel.purge_ended(usize::MAX).await?;
        keel.work(true).await?;
        for run_id in &live {
            let run = keel.get_run(run_id).await?;
            anyhow::ensure!(
                run.status == RunStatus::Completed,
                "{what}: live run {run_id} is {} after the purge",
                run.status.as_str()
            );
        }
        println!("{what}: the {LIVE} live runs completed after the purge");
        Ok(())
    }

    /// Imports `n` copies of `file`'s run, admitted and ended two days
    /// ago, 64 at a time.
    async fn import_copies(keel: &Keel, file: &JournalFile, n: usize) -> anyhow::Result<()> {
        let at = keel_host::SystemClock.now_ms() - 2 * DAY;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            if tasks.len() == 64 {
                tasks.join_next().await.expect("a task")??;
            }
            let mut copy = file.clone();
            let run = &mut copy.header.run;
            run.run_id = format!("bench-{i:07}").into();
            (run.created_at_ms, run.updated_at_ms) = (at + i as u64, at + i as u64);
            run.attributes = [("tenant".to_string(), format!("t{}", i % 100))].into();
            let keel = keel.clone();
            tasks.spawn(async move { keel.import(&copy).await.map(|_| ()) });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        Ok(())
    }

    /// The first page of one tenant's runs, ten times.
    async fn list_by_attribute(what: &str, keel: &Keel) -> anyhow::Result<()> {
        let filter = RunFilter {
            attributes: [("tenant".to_string(), "t42".to_string())].into(),
            ..RunFilter::default()
        };
        let mut latencies = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let page = keel.runs_page(&filter, None, 50).await?;
            latencies.push(t.elapsed());
            let tenant = filter.attributes.get("tenant");
            anyhow::ensure!(
                !page.runs.is_empty()
                    && page
                        .runs
                        .iter()
                        .all(|r| r.attributes.get("tenant") == tenant),
                "{what}: the page of t42 holds {:?}",
                page.runs.iter().map(|r| &r.attributes).collect::<Vec<_>>()
            );
        }
        print_latencies(
            &format!("{what}: runs list --attr tenant=t42 (a page of 50)"),
            latencies,
        );
        Ok(())
    }

    fn print_sizes(what: &str, before: &StoreStats, after: &StoreStats, compacted: &StoreStats) {
        let mib = |s: &StoreStats| s.size_bytes as f64 / (1 << 20) as f64;
        println!(
            "{what}: store size {:.1} MiB before the purge, {:.1} MiB after, {:.1} MiB after {}",
            mib(before),
            mib(after),
            mib(compacted),
            if what == "sled" {
                "nothing (sled reuses the space)"
            } else {
                "VACUUM FULL"
            }
        );
    }
}

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
        let keel = Keel::open(Config::caching_in(crate::user_cache_dir()), store.clone())?;
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
    relaxed(keel, loaded, args).await?;
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
const W10_RELAXED: &str = "ten_steps_relaxed";
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

/// W10 with relaxed durability (its steps journaled with its end, one
/// durable write): latency one run at a time and throughput at 16 in
/// flight, beside the default's figures above.
async fn relaxed(keel: &Keel, loaded: &Arc<Loaded>, args: &Args) -> anyhow::Result<()> {
    print_latencies(
        "in process, relaxed durability: W10 latency, one run at a time",
        latencies_of(keel, loaded, W10_RELAXED, args.latency_runs).await?,
    );
    let rate = throughput_of(
        &[(keel.clone(), loaded.clone())],
        W10_RELAXED,
        |_| "10".into(),
        16,
        args.throughput_runs,
    )
    .await?;
    println!("in process, relaxed durability: W10 throughput, 16 in flight: {rate:.0} runs/s");
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

/// W10 through the HTTP API: a `keel serve` child process on a fresh store,
/// called by this process the way a client calls it (one request that
/// starts a run and waits for its result).
mod http {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    use serde_json::{Value, json};

    use super::{Args, InProcess, ms, print_latencies};

    /// The server, killed when dropped.
    struct Server {
        child: Child,
        url: String,
        dir: std::path::PathBuf,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A `keel serve` on a fresh store; with `otlp`, exporting its traces
    /// there.
    /// A `keel serve` on a store of its own, named `label` in this run.
    fn start(label: &str, otlp: Option<&str>) -> anyhow::Result<Server> {
        let dir =
            std::env::temp_dir().join(format!("keel-bench-http-{}-{label}", std::process::id(),));
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--db")
            .arg(&dir)
            .args(
                otlp.map(|url| ["--otlp-endpoint", url])
                    .into_iter()
                    .flatten(),
            )
            .args(["serve", "--http", "127.0.0.1:0"])
            .env("KEEL_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().expect("piped");
        let mut url = None;
        for line in BufReader::new(stderr).lines() {
            let line = line?;
            if let Some(rest) = line.split("serving the API and console on ").nth(1) {
                url = Some(rest.trim_end_matches('/').to_string());
                break;
            }
        }
        let url = url.ok_or_else(|| anyhow::anyhow!("keel serve exited before it listened"))?;
        Ok(Server { child, url, dir })
    }

    async fn w10(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
        let run: Value = client
            .post(format!("{url}/v1/workflows/ten_steps/runs"))
            .json(&json!({"input": 10, "wait_ms": 60000}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::ensure!(
            run["status"] == "completed" && run["output"] == 45,
            "W10 over HTTP did not complete: {run}"
        );
        Ok(())
    }

    /// `streamer` started over HTTP and its stream followed as server-sent
    /// events to the close, as a browser's `EventSource` does: the time
    /// from the start request to the last event.
    async fn stream_read(
        client: &reqwest::Client,
        url: &str,
    ) -> anyhow::Result<std::time::Duration> {
        use futures::StreamExt;
        let chunks = super::STREAM_CHUNKS;
        let t = Instant::now();
        let run: Value = client
            .post(format!("{url}/v1/workflows/streamer/runs"))
            .json(&json!({"input": {"count": chunks}}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let run_id = run["run_id"].as_str().unwrap_or_default();
        let mut body = client
            .get(format!("{url}/v1/runs/{run_id}/streams/progress"))
            .send()
            .await?
            .error_for_status()?
            .bytes_stream();
        let (mut events, mut text) = (0, String::new());
        while let Some(bytes) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&bytes?));
            while let Some(end) = text.find('\n') {
                events += usize::from(text[..end].starts_with("event:"));
                text.drain(..=end);
            }
        }
        let elapsed = t.elapsed();
        anyhow::ensure!(
            events == chunks as usize + 1,
            "the event stream held {events} events, not {chunks} chunks and the close"
        );
        super::stream_figure(
            "HTTP API (client process -> keel serve)",
            "followed as server-sent events to its close",
            chunks,
            elapsed,
        );
        Ok(elapsed)
    }

    /// A schedule every second created through the API of a `keel serve`
    /// and fired by its worker: the lag from each nominal time to the
    /// fire's decision, as the API reports the fires.
    async fn fire_lag(client: &reqwest::Client, url: &str, fires: usize) -> anyhow::Result<()> {
        client
            .post(format!("{url}/v1/schedules"))
            .json(
                &json!({"name": "bench-http", "workflow": "ten_steps", "input": 10,
                          "every_ms": 1000, "overlap": "allow-all"}),
            )
            .send()
            .await?
            .error_for_status()?;
        let deadline = Instant::now() + std::time::Duration::from_secs(fires as u64 * 2 + 10);
        let schedule = loop {
            let schedule: Value = client
                .get(format!("{url}/v1/schedules/bench-http"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if schedule["recent"].as_array().map_or(0, Vec::len) >= fires {
                break schedule;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the schedule did not fire: {schedule}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        let lags = schedule["recent"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| {
                Some(
                    f["at_ms"]
                        .as_u64()?
                        .saturating_sub(f["nominal_ms"].as_u64()?),
                )
            })
            .map(std::time::Duration::from_millis)
            .collect();
        print_latencies(
            "Schedule fire lag on an idle `keel serve`, created over HTTP: nominal time to decision",
            lags,
        );
        Ok(())
    }

    pub(super) async fn figures(args: &Args, in_process: InProcess) -> anyhow::Result<()> {
        let server = start("plain", None)?;
        let client = reqwest::Client::new();
        deploy(&client, &server.url, &args.component).await?;
        let p50 = print_latencies(
            "HTTP API (client process -> keel serve): W10 latency, one run at a time",
            latencies(&client, &server.url, args.latency_runs).await?,
        );
        if let Some(in_process_python) = in_process.python_p50 {
            python_over_http(&client, args, p50, in_process_python).await?;
        }
        let total = args.http_runs;
        let mut rates = Vec::new();
        for in_flight in [16, 64] {
            let rate = throughput(&client, &server.url, in_flight, total).await?;
            println!(
                "HTTP API: W10 throughput, {in_flight} in flight ({total} runs): {rate:.0} runs/s"
            );
            rates.push(rate);
        }
        let (rate, rate64) = (rates[0], rates[1]);
        let stream = stream_read(&client, &server.url).await?;
        println!(
            "HTTP API against in process, same run: stream of {} chunks followed to its close in {:.1} vs {:.1} ms",
            super::STREAM_CHUNKS,
            ms(stream),
            ms(in_process.stream),
        );
        if args.fires > 0 {
            fire_lag(&client, &server.url, args.fires).await?;
        }
        traced_beside(&client, args, &server.url).await?;
        drop(server);
        println!(
            "HTTP API against in process, same run: throughput {:.0}% at 16 in flight ({rate:.0} vs {:.0} runs/s), {:.0}% at 64 ({rate64:.0} vs {:.0} runs/s), p50 {:.2} vs {:.2} ms",
            rate / in_process.rate16 * 100.0,
            in_process.rate16,
            rate64 / in_process.rate64 * 100.0,
            in_process.rate64,
            ms(p50),
            ms(in_process.p50),
        );
        Ok(())
    }

    /// W10 of the Python guest through the HTTP API of a `keel serve` of
    /// its own, beside the Rust guest's (`rust_p50`) and its own in
    /// process (`in_process`).
    async fn python_over_http(
        client: &reqwest::Client,
        args: &Args,
        rust_p50: std::time::Duration,
        in_process: std::time::Duration,
    ) -> anyhow::Result<()> {
        let server = start("python", None)?;
        deploy(client, &server.url, &args.python_component).await?;
        let p50 = print_latencies(
            "HTTP API: W10 latency in Python, one run at a time",
            latencies(client, &server.url, args.latency_runs.min(50)).await?,
        );
        println!(
            "HTTP API: W10 in Python against Rust, p50: {:.1}x ({:.2} vs {:.2} ms); against Python in process, same run: {:.2} vs {:.2} ms",
            p50.as_secs_f64() / rust_p50.as_secs_f64(),
            ms(p50),
            ms(rust_p50),
            ms(p50),
            ms(in_process),
        );
        Ok(())
    }

    /// Uploads the testbed as deployment `testbed`, and warms it up.
    async fn deploy(
        client: &reqwest::Client,
        url: &str,
        component: &std::path::Path,
    ) -> anyhow::Result<()> {
        let bytes = tokio::fs::read(component).await?;
        client
            .post(format!("{url}/v1/deployments?name=testbed"))
            .header(reqwest::header::CONTENT_TYPE, "application/wasm")
            .body(bytes)
            .send()
            .await?
            .error_for_status()?;
        for _ in 0..5 {
            w10(client, url).await?;
        }
        Ok(())
    }

    /// The time of each of `runs` W10 runs, one at a time.
    async fn latencies(
        client: &reqwest::Client,
        url: &str,
        runs: usize,
    ) -> anyhow::Result<Vec<std::time::Duration>> {
        let mut latencies = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            w10(client, url).await?;
            latencies.push(t.elapsed());
        }
        Ok(latencies)
    }

    /// W10 on a `keel serve` exporting its traces (to a collector in this
    /// process that takes and drops them) against the one at `plain` that
    /// does not, measured in alternating rounds (so neither gains from
    /// going second): the medians of each.
    async fn traced_beside(
        client: &reqwest::Client,
        args: &Args,
        plain: &str,
    ) -> anyhow::Result<()> {
        const ROUNDS: usize = 9;
        let (collector, exports) = collector().await?;
        let server = start("traced", Some(&collector))?;
        deploy(client, &server.url, &args.component).await?;
        let (mut p50s, mut rates) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        let runs = (args.latency_runs / ROUNDS).max(5);
        let total = (args.http_runs / ROUNDS).max(64);
        for _ in 0..ROUNDS {
            for (i, url) in [plain, server.url.as_str()].into_iter().enumerate() {
                let mut l = latencies(client, url, runs).await?;
                l.sort();
                p50s[i].push(ms(l[l.len() / 2]));
                rates[i].push(throughput(client, url, 16, total).await?);
            }
        }
        drop(server);
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (p50, traced_p50) = (median(&mut p50s[0]), median(&mut p50s[1]));
        let (rate, traced_rate) = (median(&mut rates[0]), median(&mut rates[1]));
        println!(
            "HTTP API exporting traces (OTLP) against none, same run, medians of {ROUNDS} alternating rounds: W10 p50 {traced_p50:.2} vs {p50:.2} ms ({:+.1} %), throughput at 16 in flight {traced_rate:.0} vs {rate:.0} runs/s ({:+.1} %); the collector took {} exports",
            (traced_p50 / p50 - 1.0) * 100.0,
            (traced_rate / rate - 1.0) * 100.0,
            exports.load(std::sync::atomic::Ordering::Relaxed),
        );
        Ok(())
    }

    /// An OTLP collector on a loopback port that answers every export
    /// with 200 and counts them.
    async fn collector() -> anyhow::Result<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)>
    {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let exports = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = exports.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut stream = tokio::io::BufReader::new(stream);
                    loop {
                        let mut length = 0;
                        loop {
                            let mut line = String::new();
                            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; length];
                        if stream.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if stream.get_mut().write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok((url, exports))
    }

    /// W10 runs/s over `total` runs with `in_flight` callers.
    async fn throughput(
        client: &reqwest::Client,
        url: &str,
        in_flight: usize,
        total: usize,
    ) -> anyhow::Result<f64> {
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t = Instant::now();
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..in_flight {
            let (client, url, next) = (client.clone(), url.to_string(), next.clone());
            callers.spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                    w10(&client, &url).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = callers.join_next().await {
            r??;
        }
        Ok(total as f64 / t.elapsed().as_secs_f64())
    }
}
