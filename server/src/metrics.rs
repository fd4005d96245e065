//! `/metrics`: the engine's reports ([`Observer`]) counted in Prometheus
//! metrics, and gauges read when scraped (runs driven here, live runs by
//! status), in OpenMetrics or the Prometheus text format.

use std::sync::Mutex;
use std::time::Duration;

use keel_core::RunStatus;
use keel_host::{AttemptOutcome, Keel, Observer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkflowLabel {
    workflow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    workflow: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    step: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FireLabels {
    schedule: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

/// The metrics one server exports.
pub struct Metrics {
    registry: Mutex<Registry>,
    started: Family<WorkflowLabel, Counter>,
    ended: Family<EndLabels, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    flush: Histogram,
    run_seconds: Histogram,
    active: Gauge,
    live: Family<StatusLabel, Gauge>,
    fires: Family<FireLabels, Counter>,
    fire_lag: Histogram,
    start_wait: Family<WorkflowLabel, Histogram, fn() -> Histogram>,
    queued: Family<WorkflowLabel, Gauge>,
    in_progress: Family<WorkflowLabel, Gauge>,
    purged: Counter,
    purged_bytes: Counter,
    stored: Family<StoredLabel, Gauge>,
    /// The workflows with a concurrency group, and when they were read.
    limited: tokio::sync::Mutex<Option<(std::time::Instant, Vec<String>)>>,
}

/// How long the names of the workflows with a concurrency group are
/// trusted before they are read again.
const LIMITED_FOR: Duration = Duration::from_secs(60);

/// What a `keel_store` gauge counts (`runs`, `journal_entries`, ...), with
/// the runs' status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoredLabel {
    what: String,
    status: String,
}

fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("keel");
        let started = Family::<WorkflowLabel, Counter>::default();
        registry.register("runs_started", "Runs admitted", started.clone());
        let ended = Family::<EndLabels, Counter>::default();
        registry.register("runs_ended", "Runs ended, by status", ended.clone());
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "step_attempts",
            "Step attempts, by how they ended (completed, retried, failed)",
            attempts.clone(),
        );
        let flush = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "journal_flush_seconds",
            "Time to make a batch of journal entries durable",
            flush.clone(),
        );
        let run_seconds = Histogram::new(exponential_buckets(0.001, 4.0, 12));
        registry.register(
            "run_duration_seconds",
            "Time from a run's admission to its end",
            run_seconds.clone(),
        );
        let fires = Family::<FireLabels, Counter>::default();
        registry.register(
            "schedule_fires",
            "Schedule fires, by outcome (started, skipped, buffered, missed, already_fired, failed)",
            fires.clone(),
        );
        let fire_lag = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "schedule_fire_lag_seconds",
            "Time from a fire's nominal time to its decision",
            fire_lag.clone(),
        );
        let start_wait: Family<WorkflowLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(wait_buckets);
        registry.register(
            "run_start_wait_seconds",
            "Time from a run's admission (or delayed start time) to its first activation: the wait for a worker and for a concurrency slot",
            start_wait.clone(),
        );
        let queued = Family::<WorkflowLabel, Gauge>::default();
        registry.register(
            "concurrency_queued",
            "Runs waiting for a concurrency slot, by workflow",
            queued.clone(),
        );
        let in_progress = Family::<WorkflowLabel, Gauge>::default();
        registry.register(
            "concurrency_in_progress",
            "Runs holding a concurrency slot, by workflow",
            in_progress.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "runs_active",
            "Runs this process is driving now",
            active.clone(),
        );
        let live = Family::<StatusLabel, Gauge>::default();
        registry.register(
            "runs_live",
            "Runs that have not ended, by status (pending, scheduled, queued, running, waiting)",
            live.clone(),
        );
        let purged = Counter::default();
        registry.register(
            "runs_purged",
            "Ended runs deleted, past their retention or on request",
            purged.clone(),
        );
        let purged_bytes = Counter::default();
        registry.register(
            "purged_bytes",
            "Bytes of records, journal entries and payloads the deleted runs freed",
            purged_bytes.clone(),
        );
        let stored = Family::<StoredLabel, Gauge>::default();
        registry.register(
            "store",
            "What the store holds, as last counted by `keel store stats` (an operator's command: the count reads every record): runs by status, journal entries and bytes, hooks, payloads and their bytes, events, components and their bytes, size on disk",
            stored.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            stored,
            purged,
            purged_bytes,
            started,
            ended,
            attempts,
            flush,
            run_seconds,
            active,
            fires,
            fire_lag,
            live,
            start_wait,
            queued,
            in_progress,
            limited: Default::default(),
        }
    }
}

impl Metrics {
    /// The metrics in the Prometheus text format, with gauges read now:
    /// from counts the store keeps and the names of the workflows with a
    /// concurrency group (looked up at most once a minute), never by
    /// reading runs.
    pub async fn render(&self, keel: &Keel) -> keel_host::Result<String> {
        self.active.set(keel.active_runs() as i64);
        let live = keel.live_counts().await?;
        for status in [
            RunStatus::Pending,
            RunStatus::Scheduled,
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Queued,
        ] {
            self.live
                .get_or_create(&StatusLabel {
                    status: status.as_str().into(),
                })
                .set(live.in_status(status) as i64);
        }
        for workflow in self.limited_workflows(keel).await? {
            let label = WorkflowLabel {
                workflow: workflow.clone(),
            };
            let of = |status| live.of(&workflow, status) as i64;
            self.queued.get_or_create(&label).set(of(RunStatus::Queued));
            // A live run of a limited workflow holds its slot from its
            // start (or, delayed, from when it comes due) to its end.
            let holding = of(RunStatus::Pending) + of(RunStatus::Running) + of(RunStatus::Waiting);
            self.in_progress.get_or_create(&label).set(holding);
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String never fails");
        Ok(out)
    }
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition, for
/// the scrapers (and `promtool check metrics`) that do not ask for
/// OpenMetrics. The samples are the same; a counter's `# HELP` and
/// `# TYPE` lines name its `_total` samples, as the text format wants,
/// `unknown` is `untyped`, and OpenMetrics' `# UNIT` and `# EOF` lines go.
pub fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's `# HELP`, written once its `# TYPE` says its samples' name.
    let mut help: Option<(&str, &str)> = None;
    let flush = |help: &mut Option<(&str, &str)>, out: &mut String, name: Option<&str>| {
        if let Some((family, text)) = help.take() {
            out.push_str(&format!("# HELP {} {text}\n", name.unwrap_or(family)));
        }
    };
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush(&mut help, &mut out, None);
            help = rest.split_once(' ').or(Some((rest, "")));
            continue;
        }
        if let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' ')) {
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "unknown" => (family.to_string(), "untyped"),
                kind => (family.to_string(), kind),
            };
            let named = help
                .is_some_and(|(f, _)| f == family)
                .then_some(name.as_str());
            flush(&mut help, &mut out, named);
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        flush(&mut help, &mut out, None);
        out.push_str(line);
        out.push('\n');
    }
    flush(&mut help, &mut out, None);
    out
}

impl Metrics {
    /// The workflows with a concurrency group, read at most every
    /// [`LIMITED_FOR`].
    async fn limited_workflows(&self, keel: &Keel) -> keel_host::Result<Vec<String>> {
        let mut cached = self.limited.lock().await;
        if let Some((at, workflows)) = &*cached
            && at.elapsed() < LIMITED_FOR
        {
            return Ok(workflows.clone());
        }
        let workflows = keel.limited_workflows().await?;
        *cached = Some((std::time::Instant::now(), workflows.clone()));
        Ok(workflows)
    }
}

impl Observer for Metrics {
    fn store_counted(&self, stats: &keel_core::retention::StoreStats) {
        let set = |what: &str, status: &str, value: u64| {
            self.stored
                .get_or_create(&StoredLabel {
                    what: what.into(),
                    status: status.into(),
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        for status in RunStatus::all() {
            let count = stats.runs_by_status.get(status.as_str()).copied();
            set("runs", status.as_str(), count.unwrap_or(0));
        }
        set("journal_entries", "", stats.journal_entries);
        set("journal_bytes", "", stats.journal_bytes);
        set("hooks", "", stats.hooks);
        set("payloads", "", stats.payloads);
        set("payload_bytes", "", stats.payload_bytes);
        set("events", "", stats.events);
        set("components", "", stats.components);
        set("component_bytes", "", stats.component_bytes);
        set("size_bytes", "", stats.size_bytes);
    }

    fn runs_purged(&self, deleted: &keel_core::retention::Deleted) {
        self.purged.inc_by(deleted.runs.len() as u64);
        self.purged_bytes.inc_by(deleted.bytes);
    }

    fn run_started(&self, workflow: &str) {
        self.started
            .get_or_create(&WorkflowLabel {
                workflow: workflow.into(),
            })
            .inc();
    }

    fn run_first_activated(&self, workflow: &str, waited: Duration) {
        self.start_wait
            .get_or_create(&WorkflowLabel {
                workflow: workflow.into(),
            })
            .observe(waited.as_secs_f64());
    }

    fn run_ended(&self, workflow: &str, status: RunStatus, lifetime: Duration) {
        self.ended
            .get_or_create(&EndLabels {
                workflow: workflow.into(),
                status: status.as_str().into(),
            })
            .inc();
        self.run_seconds.observe(lifetime.as_secs_f64());
    }

    fn step_attempt(&self, step: &str, outcome: AttemptOutcome) {
        self.attempts
            .get_or_create(&AttemptLabels {
                step: step.into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
    }

    fn schedule_fired(
        &self,
        schedule: &str,
        outcome: keel_core::schedule::FireOutcome,
        lag_ms: Option<u64>,
    ) {
        self.fires
            .get_or_create(&FireLabels {
                schedule: schedule.into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
        // The lag of fires decided on time: a missed fire's is the outage.
        if let Some(lag_ms) = lag_ms
            && outcome != keel_core::schedule::FireOutcome::Missed
        {
            self.fire_lag.observe(lag_ms as f64 / 1000.0);
        }
    }

    fn journal_flush(&self, _entries: usize, elapsed: Duration) {
        self.flush.observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn the_text_format_names_counters_by_their_samples_and_drops_openmetrics_lines() {
        let openmetrics = "\
# HELP keel_runs_started Runs admitted.
# TYPE keel_runs_started counter
keel_runs_started_total{workflow=\"w\"} 1
# HELP keel_flush_seconds Flush time.
# TYPE keel_flush_seconds histogram
# UNIT keel_flush_seconds seconds
keel_flush_seconds_sum 0.5
keel_flush_seconds_count 1
keel_flush_seconds_bucket{le=\"+Inf\"} 1
# HELP keel_odd Something.
# TYPE keel_odd unknown
keel_odd 3
# EOF
";
        assert_eq!(
            prometheus_text(openmetrics),
            "\
# HELP keel_runs_started_total Runs admitted.
# TYPE keel_runs_started_total counter
keel_runs_started_total{workflow=\"w\"} 1
# HELP keel_flush_seconds Flush time.
# TYPE keel_flush_seconds histogram
keel_flush_seconds_sum 0.5
keel_flush_seconds_count 1
keel_flush_seconds_bucket{le=\"+Inf\"} 1
# HELP keel_odd Something.
# TYPE keel_odd untyped
keel_odd 3
"
        );
    }
}
