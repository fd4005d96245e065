//! W10 through the HTTP API: a `keel serve` child process on a fresh store,
//! called by this process the way a client calls it (one request that
//! starts a run and waits for its result).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

use super::{Args, InProcess, ms, print_latencies};

/// The server, killed when dropped (and its store's directory removed,
/// if it has one).
pub(super) struct Server {
    child: Child,
    pub(super) url: String,
    dir: Option<std::path::PathBuf>,
}

impl Server {
    /// The server's process ID.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A `keel serve` on a store of its own, named `label` in this run; with
/// `otlp`, exporting its traces there.
fn start(label: &str, otlp: Option<&str>) -> anyhow::Result<Server> {
    let dir = std::env::temp_dir().join(format!("keel-bench-http-{}-{label}", std::process::id(),));
    let mut server = serve(
        &[std::ffi::OsString::from("--db"), dir.clone().into()],
        otlp,
    )?;
    server.dir = Some(dir);
    Ok(server)
}

/// A `keel serve` with the global arguments `db` (the store), listening on
/// a loopback port; with `otlp`, exporting its traces there.
pub(super) fn serve(db: &[std::ffi::OsString], otlp: Option<&str>) -> anyhow::Result<Server> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(db)
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
    let mut lines = BufReader::new(stderr).lines();
    let mut url = None;
    for line in lines.by_ref() {
        let line = line?;
        if let Some(rest) = line.split("serving the API and console on ").nth(1) {
            url = Some(rest.trim_end_matches('/').to_string());
            break;
        }
    }
    // Read on, so that the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let url = url.ok_or_else(|| anyhow::anyhow!("keel serve exited before it listened"))?;
    Ok(Server {
        child,
        url,
        dir: None,
    })
}

pub(super) async fn w10(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
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
async fn stream_read(client: &reqwest::Client, url: &str) -> anyhow::Result<std::time::Duration> {
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
pub(super) async fn deploy(
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
pub(super) async fn latencies(
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
async fn traced_beside(client: &reqwest::Client, args: &Args, plain: &str) -> anyhow::Result<()> {
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
async fn collector() -> anyhow::Result<(String, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
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
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
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
pub(super) async fn throughput(
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
