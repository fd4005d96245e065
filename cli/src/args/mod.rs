//! The command line: every command, argument and flag, with its help.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use keel_host::defaults;

use crate::parse_duration;

mod runs;

use runs::parse_attribute;
pub use runs::{JobsCommand, RestartPointArgs, RunFilterArgs, RunsCommand};

#[derive(Parser)]
#[command(
    name = "keel",
    version,
    about = "A durable workflow engine for WebAssembly components",
    after_help = "Logs go to stderr, filtered by KEEL_LOG or RUST_LOG (for example KEEL_LOG=info, KEEL_LOG=keel_host=debug)."
)]
pub struct Cli {
    /// The store: a directory (the embedded sled store, one process at a
    /// time) or a PostgreSQL URL (`postgres://user@host/db`, shared by any
    /// number of processes and machines).
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "KEEL_DB",
        default_value = ".keel"
    )]
    pub db: String,
    /// Embedded store: MiB to keep free on its disk. Below it, writes that
    /// grow the store are refused (`storage_full`) and go on once space is
    /// freed.
    #[arg(long, global = true, help_heading = "Store", default_value_t = keel_host::store::sled::DEFAULT_MIN_FREE_BYTES >> 20)]
    pub min_free_mib: u64,
    /// Embedded store: MiB of memory its page cache may take; what the
    /// store holds beyond it stays on disk.
    #[arg(long, global = true, help_heading = "Store", default_value_t = keel_host::store::sled::DEFAULT_CACHE_BYTES >> 20)]
    pub sled_cache_mib: u64,
    /// Where compiled components are cached (native code: the directory
    /// must be this user's alone). At most 2 GiB, least recently used
    /// evicted. [default: `compiled/` in a sled store's directory;
    /// `~/.cache/keel/compiled` for PostgreSQL and `keel test`]
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "KEEL_CACHE_DIR",
        value_name = "DIR"
    )]
    pub cache_dir: Option<PathBuf>,
    /// PostgreSQL: the schema keel's tables live in.
    #[arg(
        long,
        global = true,
        help_heading = "Store",
        env = "KEEL_PG_SCHEMA",
        default_value = "keel"
    )]
    pub pg_schema: String,
    /// PostgreSQL: a PEM file of CA certificates to trust besides the
    /// system's, for `sslmode=require` in the URL.
    #[arg(long, global = true, help_heading = "Store", env = "KEEL_PG_CA_CERT")]
    pub pg_ca_cert: Option<PathBuf>,
    /// PostgreSQL: connections in this process's pool.
    #[arg(long, global = true, help_heading = "Store", default_value_t = 16)]
    pub pg_pool_size: usize,
    /// PostgreSQL: seconds after which the server cancels a statement.
    #[arg(long, global = true, help_heading = "Store", default_value_t = 30)]
    pub pg_statement_timeout: u64,
    /// Seconds a worker's lease on a run lasts without renewal: a worker
    /// that dies loses its runs to another after at most this long.
    #[arg(long, global = true, help_heading = "Worker", default_value_t = defaults::LEASE_TTL.as_secs())]
    pub lease_ttl: u64,
    /// The durability of workflows that declare none: effect_gated (a step
    /// durable before its first effect), strict (before each attempt) or
    /// relaxed (at the run's next wait or end).
    #[arg(long, global = true, help_heading = "Worker", default_value = "effect_gated", value_parser = parse_durability)]
    pub default_durability: keel_host::core::manifest::Durability,
    /// How many runs `keel worker` drives at once.
    #[arg(long, global = true, help_heading = "Worker", default_value_t = defaults::MAX_CONCURRENT_RUNS)]
    pub max_concurrent_runs: usize,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Send the command to the keel server at this URL (its HTTP API)
    /// instead of opening a store: `http://127.0.0.1:8080`.
    #[arg(
        long,
        global = true,
        help_heading = "Client",
        env = "KEEL_SERVER",
        value_name = "URL"
    )]
    pub server: Option<String>,
    /// The API token of the server (`--server`), or the token `keel serve`
    /// requires of its clients.
    #[arg(
        long,
        global = true,
        help_heading = "Client",
        env = "KEEL_API_TOKEN",
        hide_env_values = true
    )]
    pub api_token: Option<String>,
    /// Export OpenTelemetry traces (OTLP over HTTP, protobuf) to this collector
    /// (`http://127.0.0.1:4318`): a span per run, per activation and per
    /// step attempt, every run admitted here traced, a start's
    /// `traceparent` continued.
    #[arg(long, global = true, value_name = "URL", env = "KEEL_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Fuel (about one unit per wasm instruction) for the new work of one
    /// workflow activation; replaying its journal costs none.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::WORKFLOW_FUEL)]
    pub workflow_fuel: u64,
    /// Seconds a workflow may run its own code without calling keel before
    /// its run fails (a workflow only orchestrates; long work is a step's).
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::ACTIVATION_TIMEOUT.as_secs())]
    pub activation_timeout: u64,
    /// How long one step attempt may run, in seconds, before it is stopped
    /// and retried.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::STEP_TIMEOUT.as_secs())]
    pub step_timeout: u64,
    /// Largest run input, step input or output, hook payload or workflow
    /// output, in KiB of JSON.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_PAYLOAD_KIB)]
    pub max_payload_kib: usize,
    /// Most steps one run may have running at once.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_STEPS_IN_FLIGHT)]
    pub max_steps_in_flight: usize,
    /// Most entries one run's journal may hold.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_JOURNAL_ENTRIES)]
    pub max_journal_entries: usize,
    /// Most data a run's steps may write to its streams, in MiB.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_STREAM_MIB)]
    pub max_stream_mib: usize,
    /// Most times a run may be taken over from a worker that stopped while
    /// driving it, with no step completed or failed in between, before the
    /// run fails (it keeps killing its worker).
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_TAKEOVERS)]
    pub max_takeovers: usize,
    /// How long a cancelled run's cleanup may run, in seconds, before the
    /// run is ended without it.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = keel_host::core::lifecycle::Grace::default().ms / 1000)]
    pub cancel_grace: u64,
    /// How many steps a cancelled run's cleanup may schedule before the
    /// run is ended without it.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = keel_host::core::lifecycle::Grace::default().steps)]
    pub cancel_grace_steps: u32,
    /// How long ended runs are kept before this worker purges them, when
    /// their deployment sets no retention (`keel deploy --retention`), and
    /// ingested events:
    /// `30d`, `12h` [default: keep them].
    #[arg(long, global = true, help_heading = "Retention", value_parser = parse_duration, value_name = "DURATION")]
    pub run_retention: Option<std::time::Duration>,
    /// How long a payload's ID (a webhook delivery's ID, a resume's
    /// --payload-id) is remembered after its delivery: a retry of it within
    /// this long is answered as a duplicate, even once its run has ended.
    #[arg(long, global = true, help_heading = "Retention", value_parser = parse_duration, value_name = "DURATION", default_value = "7days")]
    pub payload_id_retention: std::time::Duration,
    /// Write each purged or deleted run's journal file (`RUN_ID.keel`, what
    /// `keel replay` and `keel journal import` read) into this directory
    /// before deleting the run.
    #[arg(long, global = true, help_heading = "Retention", value_name = "DIR")]
    pub archive: Option<PathBuf>,
    /// Guest instances this process keeps at once (workflow activations
    /// and step attempts). Beyond it runs and steps queue for a slot; they
    /// never fail for it. Each reserves `--max-memory` of address space.
    #[arg(long, global = true, help_heading = "Worker", default_value_t = defaults::MAX_INSTANCES, value_parser = clap::value_parser!(u32).range(keel_host::MIN_INSTANCES as i64..))]
    pub max_instances: u32,
    /// Memory bound of any guest instance, in MiB.
    #[arg(long, global = true, help_heading = "Limits", default_value_t = defaults::MAX_MEMORY_MIB)]
    pub max_memory: usize,
    /// Let steps send HTTP requests to `HOST[:PORT]` (repeatable). Recorded
    /// with the component's deployment (`keel deploy`, or a start from a
    /// `.wasm` path).
    #[arg(
        long = "allow-http",
        global = true,
        help_heading = "Grants",
        value_name = "HOST[:PORT]"
    )]
    pub allow_http: Vec<String>,
    /// Preopen DIR for steps, at the same path (repeatable); recorded with
    /// the deployment.
    #[arg(
        long = "allow-dir",
        global = true,
        help_heading = "Grants",
        value_name = "DIR"
    )]
    pub allow_dir: Vec<PathBuf>,
    /// Pass the environment variable NAME to steps (repeatable); recorded
    /// with the deployment, the value is the worker's.
    #[arg(
        long = "allow-env",
        global = true,
        help_heading = "Grants",
        value_name = "NAME"
    )]
    pub allow_env: Vec<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Start a run and drive it until it completes, fails or waits.
    Run(RunArgs),
    /// Start a run (with a start token, admitted at most once while the
    /// token is held) and drive it until it completes, fails or waits.
    Start(StartArgs),
    /// Resume and look up hooks.
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
    },
    /// Push events and list them.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Drive every run that can make progress.
    Worker {
        /// Exit when no run can make progress now.
        #[arg(long)]
        until_idle: bool,
        /// Also serve the HTTP API and console on this address.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        #[command(flatten)]
        serving: HttpOptions,
    },
    /// Drive runs and serve the HTTP API and web console (a worker with
    /// `--http`). Beyond loopback it requires `--api-token`.
    Serve {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
        http: std::net::SocketAddr,
        #[command(flatten)]
        serving: HttpOptions,
    },
    /// Register a component under a name, with its steps' grants
    /// (`--allow-http`, `--allow-dir`, `--allow-env`) and limits; starts
    /// then name its workflows.
    Deploy(DeployArgs),
    /// List or show deployments.
    Deployments {
        #[command(subcommand)]
        command: DeploymentsCommand,
    },
    /// Start workflows on time: cron or interval schedules, fired once
    /// each across workers.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// Concurrency limits: each group's limit, runs in progress and
    /// queued; an operator's override of a workflow's declared limit.
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
    },
    /// List or show runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Bulk jobs (`runs bulk`): list, show, cancel.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Scoped tokens: short-lived credentials that may only resume one
    /// hook, read one run, or start one workflow, safe to hand to a
    /// browser or a third party.
    Tokens {
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// Signed webhooks: a hook or an event key exposed at
    /// `POST /v1/webhooks/ID` to a sender that signs its deliveries
    /// (Stripe, GitHub, an HMAC-SHA256 header) instead of sending a token.
    Webhooks {
        #[command(subcommand)]
        command: WebhooksCommand,
    },
    /// The workers sharing the store.
    Workers {
        #[command(subcommand)]
        command: WorkersCommand,
    },
    /// Manage the store itself.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// List the workflows and steps a component exports, with the JSON
    /// Schemas of their inputs and outputs.
    Inspect {
        /// A `.wasm` file (read offline, no store needed), or a deployment
        /// name or build hash (through --server, a worker's socket, or the
        /// store).
        component: String,
    },
    /// Charge an order against a payment API that loses the first confirmation.
    Demo {
        /// The `order` guest [default: order.wasm under $CARGO_TARGET_DIR or
        /// ./target, wasm32-wasip2/release].
        #[arg(long)]
        component: Option<PathBuf>,
    },
    /// Export or import a run's journal.
    Journal {
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// Replay journal files (or directories of them) against a component,
    /// offline; exits non-zero if any diverged.
    Replay {
        /// The `.wasm` build to check.
        component: PathBuf,
        /// Journal files (from `keel journal export`), or directories of them.
        #[arg(required = true)]
        journals: Vec<PathBuf>,
    },
    /// Measure latency, throughput, replay speed and memory.
    Bench(keel_bench::Args),
    /// Create a guest crate that builds on the first `cargo build` (or,
    /// with `--lang python`, a Python project): a workflow with two steps,
    /// a scenario for `keel test`, a README.
    New {
        /// The crate's name (letters, digits, `-`, `_`).
        name: String,
        /// The folder to create it in.
        #[arg(long, default_value = ".")]
        path: PathBuf,
        /// The language: a Rust crate, or a Python project (app.py, built
        /// with componentize-py).
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::scaffold::Lang,
        /// Depend on the SDK at this path [default: the SDK this keel was
        /// built from].
        #[arg(long, conflicts_with = "sdk_git")]
        sdk_path: Option<PathBuf>,
        /// Depend on the SDK from this git repository.
        #[arg(long)]
        sdk_git: Option<String>,
        /// With --sdk-git: the revision to pin.
        #[arg(long, requires = "sdk_git")]
        sdk_rev: Option<String>,
    },
    /// Build a guest crate, run its scenarios (tests/runs/*.json, recording
    /// a journal for each that has none) and replay its journals
    /// (journals/*.journal) against the build; non-zero if anything fails.
    Test {
        /// The crate's folder.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Crash a workflow at every journal write and check that it recovers.
    ///
    /// Runs it once cleanly, then again with a crash injected at each
    /// journal write in turn (the write lost, or landed unheard), recovers
    /// each as a restarted worker would, and checks that it ends as the
    /// clean run did, that no step's completion is recorded twice, that
    /// step IDs are the same and that every journal replays. Prints a table
    /// of the points tried; non-zero on any violation. Each run gets a
    /// store of its own; steps get the grants given with --allow-*.
    Crashtest {
        /// The component's `.wasm`, or a guest crate's directory (built
        /// first).
        component: PathBuf,
        /// The workflow to run (or name a scenario with --scenario).
        #[arg(required_unless_present = "scenario")]
        workflow: Option<String>,
        /// A `keel test` scenario (tests/runs/NAME.json): its workflow,
        /// input, grants and hook payloads, its time skipped; its expected
        /// output is checked against the clean run.
        #[arg(long, value_name = "FILE", conflicts_with = "workflow")]
        scenario: Option<PathBuf>,
        /// The run's input, as JSON; `@FILE` reads it from a file, `-` from
        /// standard input.
        #[arg(long, default_value = "null")]
        input: String,
        /// Cancel the run with this reason as soon as it starts, so that
        /// its cleanup is crash-tested.
        #[arg(long, value_name = "REASON")]
        cancel: Option<String>,
        /// Each time the run waits for a hook, resume TOKEN with the JSON
        /// PAYLOAD (repeatable, taken in order).
        #[arg(long, value_name = "TOKEN=PAYLOAD")]
        resume: Vec<String>,
        /// Once the resumes are used up, cancel the waiting run with this
        /// reason.
        #[arg(long, value_name = "REASON")]
        cancel_when_waiting: Option<String>,
        /// Pause the run and resume it again each time it waits for a hook,
        /// before its payload is resumed, so that pauses and resumes are
        /// crash-tested too.
        #[arg(long)]
        pause_when_waiting: bool,
        /// Once the run has ended, restart it from the step of this name
        /// and drive it to its end again, so that a restart is
        /// crash-tested too.
        #[arg(long, value_name = "STEP")]
        restart_from_step: Option<String>,
        /// Once the run has ended, fork it from the step of this name and
        /// drive the fork to its end: the fork's writes are crash-tested,
        /// and the fork is what the checks compare.
        #[arg(long, value_name = "STEP")]
        fork_from_step: Option<String>,
        /// The first time the run waits, upgrade it to this build (a
        /// `.wasm` of the same workflow): the run's own build is deployed
        /// under one name, this one as its next build, and an upgrade job
        /// moves the run if its journal replays there. The run must end on
        /// the build the clean run ended on, whichever write a crash takes.
        #[arg(long, value_name = "BUILD")]
        upgrade_to: Option<std::path::PathBuf>,
        /// The clean run is expected to fail with an error of this kind
        /// (`step_failed`, ...). Without it (or a scenario's `error_kind`)
        /// a clean run that fails fails the test: its crash points would
        /// all fail the same way and check nothing.
        #[arg(long, value_name = "KIND", conflicts_with = "scenario")]
        expect_failure: Option<String>,
    },
    /// Run a workflow under generated schedules of what the world does to
    /// a run, each checked against its clean run.
    ///
    /// Runs the scenario's workflow once cleanly, then under up to SEEDS
    /// schedules generated from a seed: a payload sent again without its
    /// ID (an at-least-once sender's resend), a pause and resume before a
    /// payload, a crash at a journal write recovered by a new engine. Each
    /// must end as the clean run did (which must be what the scenario
    /// expects), with the same steps under the same step IDs and outputs
    /// and a journal that replays. A failing schedule is shrunk to the
    /// fewest perturbations that still fail and printed with its seed and
    /// where its journal departs from the clean run's; `--seed` runs the
    /// same schedules again. Non-zero on any failure.
    Simulate {
        /// The component's `.wasm`, or a guest crate's directory (built
        /// first).
        component: PathBuf,
        /// A `keel test` scenario (tests/runs/NAME.json): its workflow,
        /// input, grants, hook payloads and expected ending.
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        /// How many schedules to try.
        #[arg(long, value_name = "N", default_value_t = 64)]
        seeds: u32,
        /// The seed the schedules are generated from [default: a new one,
        /// printed].
        #[arg(long, value_name = "S")]
        seed: Option<u64>,
    },
    /// Print a shell completion script: `keel completions bash > /etc/bash_completion.d/keel`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
pub enum LimitsCommand {
    /// Every concurrency group (workflow and key) and override.
    List,
    /// Override WORKFLOW's declared limit, for every key or one (--key);
    /// 0 pauses it (new runs queue, none starts). A higher limit starts
    /// queued runs at once; a lower one cancels nothing.
    Set {
        /// The workflow whose limit it overrides.
        workflow: String,
        /// One key value [default: every key of the workflow].
        #[arg(long)]
        key: Option<String>,
        /// Runs of one key in progress at once.
        #[arg(long)]
        limit: u32,
    },
    /// Remove an override: the workflow's override or its declared limit
    /// holds again.
    Reset {
        /// The workflow whose override goes.
        workflow: String,
        /// The key value whose override goes [default: the workflow's].
        #[arg(long)]
        key: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum DeploymentsCommand {
    /// Every deployment, newest first.
    List,
    /// A deployment, by name (its latest) or component hash.
    Show {
        /// A deployment's name or component hash.
        name: String,
    },
    /// Add the --allow-http/--allow-dir/--allow-env grants to every build
    /// of deployment NAME, or the one build of a hash, without deploying
    /// again; runs pinned to them (a run that failed for want of a grant,
    /// then retried) get them at their next activation.
    Grant {
        /// A deployment name (every build of it) or component hash (that build).
        name: String,
        /// Set exactly the grants given (none: revoke all) instead of adding them.
        #[arg(long)]
        replace: bool,
    },
    /// Move the live runs of NAME's older builds to build --to (NAME's
    /// current build if not given), each only
    /// if its journal replays there (the others stay pinned, listed with
    /// their first divergence), as a job any worker carries out and takes
    /// over after a crash; waits for its end unless --detach.
    Upgrade {
        /// The deployment name whose runs move.
        name: String,
        /// The build they move to: a deployment name (its current build)
        /// or a build's hash; NAME's current build if not given.
        #[arg(long, value_name = "BUILD")]
        to: Option<String>,
        /// Judge each run (would it replay there?) and move none.
        #[arg(long)]
        dry_run: bool,
        /// Move only this share of the runs, in percent (the same runs each
        /// time: the same command without --ramp, or with a larger one,
        /// moves the rest).
        #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100))]
        ramp: Option<u8>,
        /// Return once the job is submitted; a worker carries it out.
        #[arg(long)]
        detach: bool,
    },
    /// Delete the stored components that no deployment and no run names
    /// (builds run from a `.wasm` path whose runs were purged).
    Prune {
        /// Keep a component stored within this long (a start or a deploy
        /// may be about to name it): `1h`, `0s`.
        #[arg(long, value_parser = parse_duration, default_value = "1h")]
        grace: std::time::Duration,
        /// Say what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
// Parsed once per process: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum SchedulesCommand {
    /// Create a schedule: WORKFLOW started on a cron spec (read in --tz) or
    /// every DURATION; each fire is a run `NAME:YYYYMMDDTHHMMSSZ`,
    /// admitted once whichever worker fires it.
    Create(ScheduleArgs),
    /// Change a schedule's workflow, spec, input or policies; its fires are
    /// kept, and a changed spec fires next at its first time after now.
    /// Whether it is paused does not change (pause/resume do that).
    Update(ScheduleArgs),
    /// Every schedule: spec, next fire, overlap, state.
    List,
    /// A schedule: its spec, next five fire times, latest fires with their
    /// runs, skipped and missed fires.
    Show {
        /// The schedule's name.
        name: String,
    },
    /// Pause a schedule: no fire until it is resumed.
    Pause {
        /// The schedule's name.
        name: String,
        /// Why, shown with the schedule.
        #[arg(long)]
        note: Option<String>,
    },
    /// Resume a schedule; it fires next at its first time after now.
    Resume {
        /// The schedule's name.
        name: String,
        /// Why, shown with the schedule.
        #[arg(long)]
        note: Option<String>,
    },
    /// Fire a schedule once now, under its overlap policy.
    Trigger {
        /// The schedule's name.
        name: String,
    },
    /// Start a run for every nominal time in a range, each once.
    Backfill {
        /// The schedule's name.
        name: String,
        /// The range's start (RFC 3339, or ms since the epoch).
        #[arg(long, value_parser = parse_time, value_name = "TIME")]
        from: u64,
        /// The range's end, included.
        #[arg(long, value_parser = parse_time, value_name = "TIME")]
        to: u64,
    },
    /// Delete a schedule (its fires' runs stay).
    Delete {
        /// The schedule's name.
        name: String,
    },
}

/// A schedule's settings, for `create` and `update`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("spec").required(true).args(["cron", "every"])))]
pub struct ScheduleArgs {
    /// The schedule's name.
    pub name: String,
    /// The workflow each fire starts.
    pub workflow: String,
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first; quote it.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in [default: UTC].
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub tz: Option<String>,
    /// An interval (30s, 5m, 1h), on a grid from the Unix epoch.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub every: Option<std::time::Duration>,
    /// Shifts the interval's grid (every 1h with 15m fires at :15).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "every")]
    pub offset: Option<std::time::Duration>,
    /// Every fire's input: JSON, @FILE or - for stdin.
    #[arg(long, default_value = "null")]
    pub input: String,
    /// The deployment the fires start on [default: the latest
    /// exporting the workflow].
    #[arg(long, value_name = "NAME")]
    pub deployment: Option<String>,
    /// What a fire does while the previous fire's run is live.
    #[arg(long, value_name = "POLICY", default_value = "skip", value_parser = ["skip", "buffer-one", "allow-all"])]
    pub overlap: String,
    /// After an outage, fires due within this long ago still run; older
    /// ones are recorded missed.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "365days")]
    pub catchup_window: std::time::Duration,
    /// Create it paused (ignored by `update`).
    #[arg(long)]
    pub paused: bool,
    /// No fire before this time (RFC 3339, or ms since the epoch).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub start_at: Option<u64>,
    /// No fire after this time.
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub end_at: Option<u64>,
}

/// A time given as RFC 3339 (`2026-12-01T09:00:00Z`) or milliseconds since
/// the epoch.
pub fn parse_time(s: &str) -> Result<u64, String> {
    if let Ok(ms) = s.trim().parse::<u64>() {
        return Ok(ms);
    }
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("`{s}` is not a time ({e}); write for example 2026-12-01T09:00:00Z"))
        .and_then(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .map_err(|_| format!("`{s}` is before 1970"))
        })
}

#[derive(Subcommand)]
pub enum WorkersCommand {
    /// Every worker that announced itself and did not sign off: ID, host,
    /// last heartbeat, runs held.
    List,
}

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Apply the schema migrations the store lacks (opening a store applies
    /// them too); refused for a schema newer than this keel.
    Migrate,
    /// What the store holds: runs by status, journal entries, hooks,
    /// payloads, events, components, size on disk.
    Stats,
    /// Purge the ended runs past their retention now (workers do so every
    /// few seconds), archived first with --archive.
    Purge,
}

#[derive(Subcommand)]
pub enum JournalCommand {
    /// Write a run's journal to a file (or stdout).
    Export {
        /// The run whose journal to export.
        run_id: String,
        /// The file to write [default: stdout, which must not be a terminal
        /// for the binary format].
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// postcard (compact, what `keel replay` and `import` read) or json.
        #[arg(long, value_enum, default_value_t = Format::Postcard)]
        format: Format,
    },
    /// Load a journal file into the store.
    Import {
        /// A file written by `keel journal export`.
        file: PathBuf,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Postcard,
    Json,
}

#[derive(Subcommand)]
pub enum EventsCommand {
    /// Ingest an event: start every workflow subscribed to KEY and drive them.
    Push {
        /// The event's key; workflows subscribe with `on_events = [KEY]`.
        key: String,
        /// The event's payload, as JSON: the input of the runs it starts;
        /// `@FILE` or `-` (standard input) for a large one.
        #[arg(long, default_value = "null")]
        payload: String,
        /// A JSON object, `additional_metadata` of the runs it starts.
        #[arg(long, default_value = "{}")]
        metadata: String,
    },
    /// Every event, with the runs it started or was deduplicated against.
    List,
}

#[derive(Subcommand)]
pub enum HooksCommand {
    /// Deliver a payload to the active hook holding TOKEN and drive its run on.
    Resume {
        /// The hook's token.
        token: String,
        /// The payload, as JSON; `@FILE` or `-` (standard input) for a large one.
        #[arg(long, default_value = "null")]
        payload: String,
        /// The payload's ID: a resume retried with the same ID delivers
        /// the payload once (and gets the same reply).
        #[arg(long, value_name = "ID")]
        payload_id: Option<String>,
        /// Wait up to DURATION for the workflow's reply (`next_request`)
        /// and print it.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        wait_reply: Option<std::time::Duration>,
    },
    /// The workflow's reply to the payload of ID PAYLOAD_ID delivered to
    /// TOKEN (none yet if the workflow has not sent it).
    Reply {
        /// The hook's token.
        token: String,
        /// The ID the payload was delivered with.
        payload_id: String,
        /// Wait up to DURATION for the reply.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        wait: Option<std::time::Duration>,
    },
    /// The hook holding TOKEN: owner, whether active, metadata, retention.
    Get {
        /// The hook's token.
        token: String,
    },
    /// Every token held now, by an active hook or for a retention.
    List,
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Mint a token for exactly one of --resume-hook, --read-run or
    /// --start. Through --server it is signed with that server's secret;
    /// otherwise with the store's, which every server on the store uses
    /// unless given --signing-secret.
    Create {
        /// It may resume the hook holding this token (and read the hook).
        #[arg(long, value_name = "TOKEN")]
        resume_hook: Option<String>,
        /// It may read this run: its record, result, journal, events and
        /// streams.
        #[arg(long, value_name = "RUN_ID")]
        read_run: Option<String>,
        /// It may start runs of this workflow.
        #[arg(long, value_name = "WORKFLOW")]
        start: Option<String>,
        /// With --start: every start must carry this start hook token.
        #[arg(long, requires = "start")]
        hook_token: Option<String>,
        /// With --start: every start must ask for this run ID (so at most
        /// one run is started).
        #[arg(long, requires = "start")]
        run_id: Option<String>,
        /// How long it is accepted (at most 7 days).
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
        ttl: std::time::Duration,
    },
}

#[derive(Subcommand)]
pub enum WebhooksCommand {
    /// Create webhook ID: deliveries to `POST /v1/webhooks/ID` signed with
    /// SECRET resume --hook or push --event, their raw body the payload.
    Create {
        /// The webhook's ID (the last part of its URL).
        id: String,
        /// The hook a delivery resumes; `{/json/pointer}` parts are filled
        /// from the body (`order:{/data/object/metadata/order_id}`).
        #[arg(long, conflicts_with = "event")]
        hook: Option<String>,
        /// The event key a delivery is pushed as.
        #[arg(long)]
        event: Option<String>,
        /// With --hook: the event key a delivery is pushed as when no run
        /// holds its hook, instead of answering 404 (which a sender retries)
        #[arg(long, requires = "hook", value_name = "KEY")]
        unheld_event: Option<String>,
        /// How deliveries are signed: stripe, github or hmac.
        #[arg(long, default_value = "stripe", value_parser = parse_scheme)]
        scheme: keel_server::wire::WebhookScheme,
        /// For --scheme hmac: the header holding the hex HMAC-SHA256 of
        /// the body.
        #[arg(long)]
        header: Option<String>,
        /// For --scheme stripe: how far a delivery's timestamp may be from
        /// now [default: 5m].
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        tolerance: Option<std::time::Duration>,
        /// The secret the sender signs with (Stripe's `whsec_...`).
        #[arg(long, env = "KEEL_WEBHOOK_SECRET", hide_env_values = true)]
        secret: String,
    },
    /// Every webhook: where it delivers and how it is signed.
    List,
    /// A webhook.
    Show {
        /// The webhook's ID.
        id: String,
    },
    /// Delete a webhook: later deliveries are refused as not found.
    Delete {
        /// The webhook's ID.
        id: String,
    },
}

fn parse_durability(s: &str) -> Result<keel_host::core::manifest::Durability, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| format!("{s:?} is not a durability: give effect_gated, strict or relaxed"))
}

fn parse_scheme(s: &str) -> Result<keel_server::wire::WebhookScheme, String> {
    use keel_server::wire::WebhookScheme as S;
    match s {
        "stripe" => Ok(S::Stripe),
        "github" => Ok(S::Github),
        "hmac" => Ok(S::Hmac),
        other => Err(format!(
            "`{other}` is not a webhook scheme: stripe, github or hmac"
        )),
    }
}

/// How `keel serve` (or `keel worker --http`) answers HTTP clients.
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "HTTP serving")]
pub struct HttpOptions {
    /// A host name clients reach the server by (repeatable). IP addresses
    /// and `localhost` always work; any other name in a request's `Host`
    /// is refused, so a web page cannot reach keel by rebinding a name.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// An origin (`https://app.example.com`) whose web pages may start,
    /// cancel and deploy (repeatable); by default only the console's own.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// The most HTTP connections open at once (lowered to fit the
    /// process's descriptor limit). At the bound the longest-idle
    /// connection is closed for a new one.
    #[arg(long, default_value_t = keel_server::ConnectionLimits::default().max_connections)]
    pub max_connections: usize,
    /// How long a client has to send a request's headers, on a new
    /// connection or between requests on a kept-alive one (10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: std::time::Duration,
    /// The secret scoped tokens are signed with (at least 32 bytes); by
    /// default the store's own, made once and shared by every server on
    /// the store. Changing it revokes every token signed before.
    #[arg(long, env = "KEEL_SIGNING_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub signing_secret: Option<String>,
}

fn parse_secret(s: &str) -> Result<String, String> {
    if s.len() < keel_host::core::access::SECRET_LEN {
        return Err(format!(
            "a signing secret is at least {} bytes, not {}",
            keel_host::core::access::SECRET_LEN,
            s.len()
        ));
    }
    Ok(s.to_string())
}

impl HttpOptions {
    /// The server's configuration for `addr` and `token`.
    pub fn config(
        &self,
        addr: std::net::SocketAddr,
        token: Option<String>,
    ) -> keel_server::ServerConfig {
        keel_server::ServerConfig {
            allowed_hosts: self.allowed_hosts.clone(),
            allowed_origins: self.allowed_origins.clone(),
            limits: keel_server::ConnectionLimits {
                max_connections: self.max_connections,
                header_timeout: self.header_timeout,
            },
            signing_secret: self.signing_secret.as_ref().map(|s| s.as_bytes().to_vec()),
            ..keel_server::ServerConfig::new(addr, token)
        }
    }
}

#[cfg(test)]
mod docs {
    //! The repository's Markdown: its relative links lead somewhere.

    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use pulldown_cmark::{Event, Parser, Tag, TagEnd};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The Markdown files of the repository (the root, `docs/`, the SDKs'
    /// and clients'), never what tools installed under them.
    fn markdown_files() -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut folders = vec![root()];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap().flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if path.is_dir() {
                    let skipped = name.starts_with('.')
                        || ["target", "node_modules", "dist", "build"].contains(&name.as_str());
                    if !skipped {
                        folders.push(path);
                    }
                } else if name.ends_with(".md") {
                    found.push(path);
                }
            }
        }
        found.sort();
        found
    }

    /// GitHub's anchor for a heading: lower case, punctuation dropped,
    /// spaces made hyphens; a repeated one gets `-1`, `-2`, ...
    fn slug(heading: &str, seen: &mut HashMap<String, usize>) -> String {
        let base: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(base.clone()).or_default();
        let slug = match *n {
            0 => base,
            n => format!("{base}-{n}"),
        };
        *n += 1;
        slug
    }

    /// A file's heading anchors and the destinations of its links.
    fn read(path: &Path) -> (Vec<String>, Vec<String>) {
        let text = std::fs::read_to_string(path).unwrap();
        let (mut anchors, mut links, mut seen) = (Vec::new(), Vec::new(), HashMap::new());
        let mut heading: Option<String> = None;
        for event in Parser::new(&text) {
            match event {
                Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
                Event::End(TagEnd::Heading(_)) => {
                    if let Some(h) = heading.take() {
                        anchors.push(slug(&h, &mut seen));
                    }
                }
                Event::Text(t) | Event::Code(t) => {
                    if let Some(h) = heading.as_mut() {
                        h.push_str(&t);
                    }
                }
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                    links.push(dest_url.into_string())
                }
                _ => {}
            }
        }
        (anchors, links)
    }

    #[test]
    fn every_relative_link_in_the_docs_leads_somewhere() {
        let files = markdown_files();
        assert!(files.len() > 10, "found only {files:?}");
        let anchors: HashMap<PathBuf, Vec<String>> = files
            .iter()
            .map(|f| (f.canonicalize().unwrap(), read(f).0))
            .collect();
        let mut broken = Vec::new();
        for file in &files {
            for link in read(file).1 {
                if link.contains("://") || link.starts_with("mailto:") {
                    continue;
                }
                let (target, anchor) = link.split_once('#').unwrap_or((&link, ""));
                let target = match target {
                    "" => file.clone(),
                    t => file.parent().unwrap().join(t),
                };
                let Ok(target) = target.canonicalize() else {
                    broken.push(format!("{}: {link}: no such file", file.display()));
                    continue;
                };
                if !target.starts_with(root().canonicalize().unwrap()) {
                    broken.push(format!(
                        "{}: {link}: outside the repository",
                        file.display()
                    ));
                } else if !anchor.is_empty()
                    && !anchors
                        .get(&target)
                        .is_some_and(|a| a.iter().any(|a| a == anchor))
                {
                    broken.push(format!("{}: {link}: no such heading", file.display()));
                }
            }
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }
}

#[cfg(test)]
mod reference {
    /// docs/cli.md is the reference clap gives of these arguments;
    /// `KEEL_BLESS=1` writes it.
    #[test]
    fn the_cli_reference_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
        let current = clap_markdown::help_markdown::<super::Cli>();
        if std::env::var_os("KEEL_BLESS").is_some() {
            std::fs::write(&path, &current).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == current,
            "docs/cli.md is not the CLI's reference: run `KEEL_BLESS=1 cargo test -p keel-cli the_cli_reference_is_current`"
        );
    }
}

/// Parses the command line into [`Cli`]. A subcommand's `--help` shows
/// its own options and names the global ones in one line; `keel --help`
/// describes them all.
pub fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut full = Cli::command();
    let names_a_subcommand = args.iter().skip(1).any(|arg| {
        let arg = arg.to_string_lossy();
        full.get_subcommands().any(|c| c.get_name() == arg)
    });
    let command = match names_a_subcommand {
        true => globals_in_one_line(Cli::command()),
        false => full,
    };
    full = command;
    let matches = full.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches)
}

/// `command` with its global options hidden from its subcommands' help,
/// which name them in one line instead.
fn globals_in_one_line(command: clap::Command) -> clap::Command {
    let note = "Global options (--json, --db and the store's, --server and --api-token, worker, limits, retention, grants, --otlp-endpoint) are accepted here too: `keel --help` lists them.";
    command
        .mut_args(|a| match a.is_global_set() {
            true => a.hide(true),
            false => a,
        })
        .mut_subcommands(|sub| with_note(sub, note))
}

fn with_note(command: clap::Command, note: &'static str) -> clap::Command {
    let help = match command.get_after_help() {
        Some(help) => format!("{help}\n\n{note}"),
        None => note.to_string(),
    };
    command
        .after_help(help)
        .mut_subcommands(|sub| with_note(sub, note))
}

/// What a start starts: the workflow, the component it is in, its input.
#[derive(clap::Args)]
pub struct StartTarget {
    /// A `.wasm` file (deployed on the way), or a deployment's name or
    /// component hash.
    pub component: String,
    /// The workflow to start.
    pub workflow: String,
    /// The run's input, as JSON; `@FILE` reads it from a file, `-` from
    /// standard input.
    #[arg(long, default_value = "null")]
    pub input: String,
}

/// The options every start has: its place in a queue, its deadline and
/// its attributes.
#[derive(clap::Args)]
pub struct RunOptions {
    /// Where the run stands in its concurrency queue if the workflow's
    /// limit is reached: 1 (highest) to 5 [default: 3].
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub priority: Option<u8>,
    /// Cancel the run (reason `deadline_exceeded`) if it has not ended
    /// this long after its start: `30s`, `2h`; default: the workflow's
    /// own `timeout`.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,
    /// A searchable attribute of the run, KEY=VALUE (repeatable):
    /// `runs list --attr KEY=VALUE` finds it.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attribute)]
    pub attr: Vec<(String, String)>,
}

/// The arguments of `keel run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: StartTarget,
    /// A JSON object, `additional_metadata` of key expressions.
    #[arg(long)]
    pub metadata: Option<String>,
    #[command(flatten)]
    pub options: RunOptions,
}

/// The arguments of `keel start`.
#[derive(clap::Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub target: StartTarget,
    /// The run's ID (1 to 128 letters, digits, `-`, `_`, `.` or `:`);
    /// refused with `run_exists` if the store holds a run of it. By
    /// default a new UUID.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// A start token: refused with `hook_conflict` while another run holds it.
    #[arg(long)]
    pub token: Option<String>,
    /// Keep the token after the run ends, counted from now: `30s`,
    /// `10m`, `30 days`, or milliseconds.
    #[arg(long, value_parser = parse_duration, requires = "token")]
    pub retention: Option<std::time::Duration>,
    /// JSON metadata of the start hook, shown by `keel hooks get`.
    #[arg(long, requires = "token")]
    pub metadata: Option<String>,
    /// A JSON object, `additional_metadata` of key expressions.
    #[arg(long)]
    pub additional_metadata: Option<String>,
    /// Admit the run and return at once; a worker drives it.
    #[arg(long)]
    pub detach: bool,
    /// A delayed start: admitted now (its token and key decided now),
    /// listed `scheduled`, first run this long from now (30s, 2h).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", conflicts_with = "start_at")]
    pub delay: Option<std::time::Duration>,
    /// A delayed start at this time (RFC 3339, or ms since the epoch).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub start_at: Option<u64>,
    #[command(flatten)]
    pub options: RunOptions,
}

/// The arguments of `keel deploy`.
#[derive(clap::Args)]
pub struct DeployArgs {
    /// The `.wasm` component.
    pub component: PathBuf,
    /// The deployment's name [default: the file's stem].
    #[arg(long)]
    pub name: Option<String>,
    /// Memory bound of one step instance, in MiB [default: the
    /// worker's --max-memory].
    #[arg(long, value_name = "MIB")]
    pub step_memory: Option<u64>,
    /// How long one step attempt may take before it is retried:
    /// `30s`, `5m` [default: the worker's --step-timeout].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub attempt_timeout: Option<std::time::Duration>,
    /// How long its runs are kept once ended before a worker purges
    /// them: `30d`, `12h`; every deployment of the name gets it
    /// [default: the name's earlier retention, else the worker's
    /// --run-retention].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub retention: Option<std::time::Duration>,
    /// Grant nothing. Without it and without any --allow-*, a deploy
    /// keeps the grants of the name's latest deployment.
    #[arg(long)]
    pub no_grants: bool,
    /// Deploy a build the name had before a later one even so, moving
    /// the name back to it (starts by the name then run it).
    #[arg(long)]
    pub force: bool,
}
