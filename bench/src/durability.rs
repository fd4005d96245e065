//! The three durability modes side by side, in process on a fresh sled
//! store: W10 of steps that make no effect and W10 of steps that each POST
//! to a local HTTP service, each with its latency one run at a time, the
//! journal flushes per run and the CPU per step.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use keel_host::core::RunStatus;
use keel_host::store::sled::SledOptions;
use keel_host::{Config, Grants, Keel, Loaded};
use keel_payment_api::PaymentApi;

use crate::scale::cpu_time;
use crate::{Args, print_latencies};

/// Counts the engine's journal flushes.
#[derive(Default)]
struct Flushes(AtomicU64);

impl keel_host::Observer for Flushes {
    fn journal_flush(&self, _entries: usize, _elapsed: Duration) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The modes and the workflows of each: `(mode, pure W10, HTTP W10)`.
const MODES: [(&str, &str, &str); 3] = [
    ("strict", "ten_steps_strict", "ten_calls_strict"),
    ("effect_gated", "ten_steps", "ten_calls"),
    ("relaxed", "ten_steps_relaxed", "ten_calls_relaxed"),
];

/// Prints, for each mode, the figures of both W10s.
pub async fn figures(args: &Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("keel-bench-durability-{}", std::process::id()));
    let api = PaymentApi::start(false).await?;
    let flushes = Arc::new(Flushes::default());
    let mut config = Config::caching_in(dir.join("compiled"));
    config.observer = flushes.clone();
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    let keel = Keel::open_sled(config, &SledOptions::new(&dir))?;
    let result = async {
        let loaded = keel.load(&args.component).await?;
        let pure = |_: &str| "10".to_string();
        let url = api.url("/call");
        let http = |_: &str| serde_json::json!([url, 10]).to_string();
        for (mode, w10, calls) in MODES {
            let shape = Shape {
                keel: &keel,
                loaded: &loaded,
                flushes: &flushes,
                runs: args.latency_runs,
            };
            shape.measure(mode, "W10", w10, &pure).await?;
            shape
                .measure(mode, "W10 of HTTP steps", calls, &http)
                .await?;
        }
        anyhow::Ok(())
    }
    .await;
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What one line of figures is measured on.
struct Shape<'a> {
    keel: &'a Keel,
    loaded: &'a Arc<Loaded>,
    flushes: &'a Flushes,
    runs: usize,
}

impl Shape<'_> {
    /// `runs` runs of `workflow` one at a time (after one to warm up):
    /// latency, flushes per run and CPU per step.
    async fn measure(
        &self,
        mode: &str,
        what: &str,
        workflow: &str,
        input: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<()> {
        self.once(workflow, &input(workflow)).await?;
        let flushed = self.flushes.0.load(Ordering::Relaxed);
        let cpu = cpu_time(std::process::id())?;
        let mut latencies = Vec::with_capacity(self.runs);
        for _ in 0..self.runs {
            let t = Instant::now();
            self.once(workflow, &input(workflow)).await?;
            latencies.push(t.elapsed());
        }
        let cpu = cpu_time(std::process::id())?.saturating_sub(cpu);
        let flushes = self.flushes.0.load(Ordering::Relaxed) - flushed;
        print_latencies(
            &format!("in process, durability {mode}: {what} latency, one run at a time"),
            latencies,
        );
        let runs = self.runs.max(1) as f64;
        println!(
            "in process, durability {mode}: {what}: {:.1} journal flushes per run, {:.0} µs CPU per step",
            flushes as f64 / runs,
            cpu.as_secs_f64() * 1e6 / (runs * 10.0),
        );
        Ok(())
    }

    async fn once(&self, workflow: &str, input: &str) -> anyhow::Result<()> {
        let run = self.keel.run(self.loaded, workflow, input).await?;
        anyhow::ensure!(
            run.status == RunStatus::Completed,
            "{workflow} did not complete: {:?}",
            run.error
        );
        Ok(())
    }
}
