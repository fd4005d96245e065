//! `keel bench --parked N,...`: what the work a store holds costs. For each
//! N, on sled (and on PostgreSQL with `--postgres`, `--parked-postgres`), a
//! `keel serve` on a fresh store parks N runs on a day-long sleep, then,
//! through its HTTP API (the path a client takes): W10 latency and
//! throughput, admissions per second, the wake lag of runs due at 1,000 a
//! second, `/metrics`' answer time, the server's CPU per idle second and
//! its resident memory. With `--burst M`: M runs due in the same second,
//! how long until all have fired, their lag, and W10's latency meanwhile.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{self, Server};
use super::{Args, ms};

/// How long a parked run sleeps.
const DAY_MS: u64 = 86_400_000;
/// Callers at once when parking and admitting.
const CALLERS: usize = 64;
/// Runs of the wake-lag figure come due at this many a second.
const DUE_PER_SECOND: u64 = 1_000;
/// W10 runs before the latency figure, not counted: the first runs of a
/// fresh server compile and cache what later runs reuse.
const WARM_UP: usize = 30;
/// The most the operating system may hold unwritten before figures are
/// taken, and how long the bench waits for it to get there.
const DIRTY_MIB: u64 = 64;
const WRITE_BACK_WAIT: Duration = Duration::from_secs(600);
/// How long the server's CPU is sampled while idle.
const IDLE: Duration = Duration::from_secs(10);

/// A fresh store for one row.
enum Target {
    Sled(std::path::PathBuf),
    Postgres { url: String, schema: String },
}

impl Target {
    fn sled(n: usize) -> Target {
        let name = format!("keel-bench-scale-{}-{n}", std::process::id());
        Target::Sled(std::env::temp_dir().join(name))
    }

    fn postgres(url: &str, n: usize) -> Target {
        Target::Postgres {
            url: url.into(),
            schema: format!("keel_bench_scale_{}_{n}", std::process::id()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Target::Sled(_) => "sled",
            Target::Postgres { .. } => "PostgreSQL",
        }
    }

    /// The global arguments that open it.
    fn db_args(&self, args: &Args) -> Vec<OsString> {
        match self {
            Target::Sled(dir) => vec![
                "--db".into(),
                dir.into(),
                "--sled-cache-mib".into(),
                args.sled_cache_mib.to_string().into(),
            ],
            Target::Postgres { url, schema } => ["--db", url, "--pg-schema", schema]
                .map(OsString::from)
                .to_vec(),
        }
    }

    /// Brings the store to a steady state after many writes at once: on
    /// PostgreSQL, the vacuum autovacuum would otherwise run during the
    /// figures that follow, then a checkpoint, whose writes would otherwise
    /// go on for minutes beside them (the WAL of a million runs parked in
    /// minutes spans checkpoints that real traffic spreads over days); on
    /// either store, then waits for the operating system to write back
    /// what it holds dirty. The time it took.
    async fn settle(&self, parked: usize) -> anyhow::Result<Duration> {
        let t = Instant::now();
        if let (Target::Postgres { url, schema }, 1..) = (self, parked) {
            use keel_host::store::postgres::{PgOptions, PgStore};
            let mut options = PgOptions::new(url);
            options.schema = schema.clone();
            let store = PgStore::open(options).await?;
            store.vacuum_analyze().await?;
            if let Err(e) = store.checkpoint().await {
                println!("PostgreSQL: no checkpoint ({e}): the figures may include its writes");
            }
        }
        written_back().await;
        Ok(t.elapsed())
    }

    async fn remove(&self) -> anyhow::Result<()> {
        match self {
            Target::Sled(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Target::Postgres { url, schema } => {
                use keel_host::store::postgres::{PgOptions, PgStore};
                let mut options = PgOptions::new(url);
                options.schema = schema.clone();
                PgStore::open(options).await?.drop_schema().await?;
            }
        }
        Ok(())
    }
}

/// The figures of one store holding `parked` runs.
struct Row {
    store: &'static str,
    parked: usize,
    park: Duration,
    p50: Duration,
    p99: Duration,
    rate16: f64,
    rate64: f64,
    admissions: f64,
    wake: (Duration, Duration),
    metrics: Duration,
    idle_cpu: f64,
    rss_mib: f64,
}

pub(super) async fn figures(args: &Args) -> anyhow::Result<()> {
    let mut targets: Vec<(Target, usize)> =
        args.parked.iter().map(|&n| (Target::sled(n), n)).collect();
    if let Some(url) = &args.postgres {
        targets.extend(
            args.parked_postgres
                .iter()
                .map(|&n| (Target::postgres(url, n), n)),
        );
    }
    let mut rows = Vec::new();
    for (target, n) in targets {
        let server = http::serve(&target.db_args(args), None)?;
        let row = measure(&target, &server, n, args).await;
        drop(server);
        target.remove().await?;
        let row = row?;
        print_row(&row);
        rows.push(row);
    }
    print_table(&rows);
    if args.burst > 0 {
        let target = Target::sled(0);
        let server = http::serve(&target.db_args(args), None)?;
        let outcome = burst(&server, args).await;
        drop(server);
        target.remove().await?;
        outcome?;
    }
    Ok(())
}

async fn measure(
    target: &Target,
    server: &Server,
    parked: usize,
    args: &Args,
) -> anyhow::Result<Row> {
    let store = target.name();
    let client = reqwest::Client::new();
    let url = server.url.as_str();
    http::deploy(&client, url, &args.component).await?;
    let t = Instant::now();
    start_many(&client, url, parked, |_| DAY_MS, true).await?;
    let park = t.elapsed();
    println!(
        "{store}: {parked} runs parked on a day's sleep in {:.1} s ({:.0} runs/s)",
        park.as_secs_f64(),
        parked as f64 / park.as_secs_f64().max(1e-9)
    );
    let settled = target.settle(parked).await?;
    println!(
        "{store}: settled before measuring (vacuum and checkpoint on PostgreSQL with runs parked, the disk's write-back): {:.1} s",
        settled.as_secs_f64()
    );
    http::latencies(&client, url, WARM_UP).await?;
    let mut latencies = http::latencies(&client, url, args.latency_runs).await?;
    latencies.sort();
    let (p50, p99) = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));
    let rate16 = http::throughput(&client, url, 16, args.http_runs).await?;
    let rate64 = http::throughput(&client, url, 64, args.http_runs).await?;
    let admitted = args.http_runs.max(1000);
    let t = Instant::now();
    start_many(&client, url, admitted, |_| DAY_MS, false).await?;
    let admissions = admitted as f64 / t.elapsed().as_secs_f64();
    let wake = wake_lag(&client, url, args.wake_runs).await?;
    let metrics = metrics_latency(&client, url).await?;
    let idle_cpu = idle_cpu(server.pid()).await?;
    Ok(Row {
        store,
        parked,
        park,
        p50,
        p99,
        rate16,
        rate64,
        admissions,
        wake,
        metrics,
        idle_cpu,
        rss_mib: rss_kib(server.pid())? as f64 / 1024.0,
    })
}

/// Starts `count` runs of `sleeper`, the `i`th sleeping `sleep_ms(i)`,
/// [`CALLERS`] at a time; with `settle`, each request answers once its
/// run waits (so the count is of runs parked, not only admitted).
/// Returns the run IDs in order.
async fn start_many(
    client: &reqwest::Client,
    url: &str,
    count: usize,
    sleep_ms: impl Fn(usize) -> u64 + Send + Sync + 'static,
    settle: bool,
) -> anyhow::Result<Vec<String>> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sleep_ms = std::sync::Arc::new(sleep_ms);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (client, url) = (client.clone(), url.to_string());
        let (next, sleep_ms) = (next.clone(), sleep_ms.clone());
        callers.spawn(async move {
            let mut started = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return anyhow::Ok(started);
                }
                let body = match settle {
                    true => {
                        json!({"input": sleep_ms(i), "wait_ms": 60_000, "return_on_wait": true})
                    }
                    false => json!({"input": sleep_ms(i)}),
                };
                let run: Value = client
                    .post(format!("{url}/v1/workflows/sleeper/runs"))
                    .json(&body)
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                anyhow::ensure!(
                    !settle || run["status"] == "waiting",
                    "a parked run is not waiting: {run}"
                );
                let run_id = run["run_id"].as_str().unwrap_or_default().to_string();
                started.push((i, run_id));
            }
        });
    }
    let mut all = Vec::with_capacity(count);
    while let Some(started) = callers.join_next().await {
        all.extend(started??);
    }
    all.sort();
    Ok(all.into_iter().map(|(_, id)| id).collect())
}

/// This machine's clock, which the server on it sets timers by.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `count` runs due [`DUE_PER_SECOND`] a second, from a few seconds after
/// they are all started: the lag from each run's timer to its step's
/// scheduling, read from its journal (p50, p99).
async fn wake_lag(
    client: &reqwest::Client,
    url: &str,
    count: usize,
) -> anyhow::Result<(Duration, Duration)> {
    if count == 0 {
        return Ok((Duration::ZERO, Duration::ZERO));
    }
    // Starting them takes under 2 ms each; then they come due in turn.
    let first_due = now_ms() + 2 * count as u64 + 3_000;
    let spacing = 1_000 / DUE_PER_SECOND;
    let runs = start_many(
        client,
        url,
        count,
        move |i| (first_due + i as u64 * spacing).saturating_sub(now_ms()),
        false,
    )
    .await?;
    let mut lags = Vec::with_capacity(count);
    for run_id in &runs {
        let ended: Value = client
            .get(format!("{url}/v1/runs/{run_id}/result?wait_ms=60000"))
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(ended["status"] == "completed", "a woken run: {ended}");
        lags.extend(timer_lag(client, url, run_id).await?);
    }
    anyhow::ensure!(!lags.is_empty(), "no woken run journaled its step");
    lags.sort();
    Ok((quantile(&lags, 0.5), quantile(&lags, 0.99)))
}

/// From run `run_id`'s timer to its step's scheduling, read from its
/// journal; `None` if it has not journaled both.
async fn timer_lag(
    client: &reqwest::Client,
    url: &str,
    run_id: &str,
) -> anyhow::Result<Option<Duration>> {
    let journal: Vec<Value> = client
        .get(format!("{url}/v1/runs/{run_id}/journal"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let at = |kind: &str, field: &str| {
        journal
            .iter()
            .find(|e| e["kind"] == kind)
            .and_then(|e| e[field].as_u64())
    };
    Ok(at("timer_scheduled", "fire_at_ms")
        .zip(at("step_scheduled", "at_ms"))
        .map(|(fire_at, stepped)| Duration::from_millis(stepped.saturating_sub(fire_at))))
}

/// The median time of 20 scrapes of `/metrics`.
async fn metrics_latency(client: &reqwest::Client, url: &str) -> anyhow::Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        client
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(quantile(&times, 0.5))
}

/// Waits (up to [`WRITE_BACK_WAIT`]) until the operating system holds under
/// [`DIRTY_MIB`] of pages not yet written to disk (`Dirty` and `Writeback`
/// in `/proc/meminfo`), so figures are not taken while the disk is still
/// busy with what was written before them; says so if it gave up.
async fn written_back() {
    let unwritten_mib = || -> Option<u64> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib = |field: &str| -> Option<u64> {
            let line = meminfo.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        Some((kib("Dirty:")? + kib("Writeback:")?) / 1024)
    };
    let t = Instant::now();
    while let Some(mib) = unwritten_mib() {
        if mib < DIRTY_MIB {
            return;
        }
        if t.elapsed() > WRITE_BACK_WAIT {
            println!("the disk still has {mib} MiB to write back: the figures may include it");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The CPU time of process `pid` (user and system), from `/proc`.
pub(crate) fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let total = ticks(11) + ticks(12);
    Ok(Duration::from_millis(total * 1000 / per_second))
}

/// The share of a core process `pid` uses over [`IDLE`] with nothing due.
async fn idle_cpu(pid: u32) -> anyhow::Result<f64> {
    let before = cpu_time(pid)?;
    tokio::time::sleep(IDLE).await;
    let used = cpu_time(pid)?.saturating_sub(before);
    Ok(used.as_secs_f64() / IDLE.as_secs_f64() * 100.0)
}

/// Process `pid`'s resident memory, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// `burst` runs due in the same second on a fresh store: from their due
/// time until the last has fired, the lag of each (p50, p99, max) and W10's
/// latency on the same server meanwhile.
async fn burst(server: &Server, args: &Args) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let url = server.url.as_str();
    http::deploy(&client, url, &args.component).await?;
    let count = args.burst;
    let due = now_ms() + 2 * count as u64 + 5_000;
    let t = Instant::now();
    let runs = start_many(
        &client,
        url,
        count,
        move |_| due.saturating_sub(now_ms()),
        false,
    )
    .await?;
    println!(
        "burst: {count} runs started in {:.1} s, all due at the same moment",
        t.elapsed().as_secs_f64()
    );
    anyhow::ensure!(now_ms() < due, "starting the burst took past its due time");
    tokio::time::sleep(Duration::from_millis(due - now_ms())).await;
    // W10 one at a time until every run of the burst has ended.
    let mut during = Vec::new();
    loop {
        let t = Instant::now();
        http::w10(&client, url).await?;
        during.push(t.elapsed());
        if waiting(&client, url).await? == 0 {
            break;
        }
    }
    let all_fired = now_ms().saturating_sub(due);
    let mut lags = Vec::new();
    let sample = runs.iter().step_by((count / 1000).max(1));
    for run_id in sample {
        lags.extend(timer_lag(&client, url, run_id).await?);
    }
    lags.sort();
    during.sort();
    println!(
        "burst: {count} runs due at once all fired within {:.1} s of their due time; lag p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} sampled); W10 meanwhile p50 {:.2} ms, p99 {:.2} ms ({} runs)",
        all_fired as f64 / 1000.0,
        ms(quantile(&lags, 0.5)),
        ms(quantile(&lags, 0.99)),
        ms(lags.last().copied().unwrap_or_default()),
        lags.len(),
        ms(quantile(&during, 0.5)),
        ms(quantile(&during, 0.99)),
        during.len()
    );
    Ok(())
}

/// How many runs the server says are waiting (`keel_runs_live`).
async fn waiting(client: &reqwest::Client, url: &str) -> anyhow::Result<u64> {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(text
        .lines()
        .find(|l| l.starts_with("keel_runs_live{") && l.contains("status=\"waiting\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// The value at `q` (0 to 1) of sorted `values`.
fn quantile(values: &[Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i.min(values.len() - 1)]
}

fn print_row(r: &Row) {
    println!(
        "{}: {} parked: W10 p50 {:.2} ms, p99 {:.2} ms; {:.0} / {:.0} runs/s at 16 / 64 in flight; {:.0} admissions/s; wake lag p50 {:.0} ms, p99 {:.0} ms at {DUE_PER_SECOND} due/s; /metrics {:.1} ms; idle {:.2} % of a core; RSS {:.0} MiB",
        r.store,
        r.parked,
        ms(r.p50),
        ms(r.p99),
        r.rate16,
        r.rate64,
        r.admissions,
        ms(r.wake.0),
        ms(r.wake.1),
        ms(r.metrics),
        r.idle_cpu,
        r.rss_mib
    );
}

/// The rows as a Markdown table (for docs/performance.md), each figure
/// beside the same store's row with nothing parked.
fn print_table(rows: &[Row]) {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    table.set_header([
        "store",
        "parked",
        "time to park",
        "W10 p50 / p99 (ms)",
        "runs/s at 16 / 64",
        "admissions/s",
        "wake lag p50 / p99 (ms)",
        "/metrics (ms)",
        "idle CPU",
        "RSS (MiB)",
    ]);
    for r in rows {
        let empty = rows.iter().find(|e| e.store == r.store && e.parked == 0);
        let versus = |value: f64, of: fn(&Row) -> f64| match empty {
            Some(e) if e.parked != r.parked && of(e) > 0.0 => {
                format!(" ({:+.0} %)", (value / of(e) - 1.0) * 100.0)
            }
            _ => String::new(),
        };
        table.add_row([
            r.store.to_string(),
            r.parked.to_string(),
            format!("{:.0} s", r.park.as_secs_f64()),
            format!(
                "{:.2}{} / {:.2}",
                ms(r.p50),
                versus(ms(r.p50), |e| ms(e.p50)),
                ms(r.p99)
            ),
            format!(
                "{:.0}{} / {:.0}",
                r.rate16,
                versus(r.rate16, |e| e.rate16),
                r.rate64
            ),
            format!("{:.0}", r.admissions),
            format!("{:.0} / {:.0}", ms(r.wake.0), ms(r.wake.1)),
            format!("{:.1}", ms(r.metrics)),
            format!("{:.2} %", r.idle_cpu),
            format!("{:.0}", r.rss_mib),
        ]);
    }
    println!("{table}");
}
