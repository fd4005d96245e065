//! The `keel` command: run workflows, drive a worker, inspect components
//! and runs. Human-readable output by default, `--json` for scripts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use keel_host::core::Clock;
use keel_host::core::file::JournalFile;
use keel_host::core::journal::{Entry, Fact, excerpt};
use keel_host::core::{EventRecord, HookRecord, RunRecord, RunStatus};
use keel_host::store::StoreError;
use keel_host::{Config, Grants, Keel, Replayer, SystemClock, defaults};
use serde_json::{Value, json};

use control::{Reply, Request};

mod bench;
mod control;
mod demo;
mod hints;

#[derive(Parser)]
#[command(
    name = "keel",
    version,
    about = "A durable workflow engine for WebAssembly components"
)]
struct Cli {
    /// The store's directory.
    #[arg(long, global = true, env = "KEEL_DB", default_value = ".keel")]
    db: PathBuf,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Fuel (about one unit per wasm instruction) for one workflow activation.
    #[arg(long, global = true, default_value_t = defaults::WORKFLOW_FUEL)]
    workflow_fuel: u64,
    /// How long one step attempt may run, in seconds, before it is stopped
    /// and retried.
    #[arg(long, global = true, default_value_t = defaults::STEP_TIMEOUT.as_secs())]
    step_timeout: u64,
    /// Memory bound of any guest instance, in MiB.
    #[arg(long, global = true, default_value_t = defaults::MAX_MEMORY_MIB)]
    max_memory: usize,
    /// Let steps send HTTP requests to `HOST[:PORT]` (repeatable).
    #[arg(long = "allow-http", global = true, value_name = "HOST[:PORT]")]
    allow_http: Vec<String>,
    /// Preopen DIR for steps, at the same path (repeatable).
    #[arg(long = "allow-dir", global = true, value_name = "DIR")]
    allow_dir: Vec<PathBuf>,
    /// Pass the environment variable NAME to steps (repeatable).
    #[arg(long = "allow-env", global = true, value_name = "NAME")]
    allow_env: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a run and drive it until it completes, fails or waits.
    Run {
        component: PathBuf,
        workflow: String,
        /// The run's input, as JSON.
        #[arg(long, default_value = "null")]
        input: String,
        /// A JSON object, `additional_metadata` of key expressions.
        #[arg(long)]
        metadata: Option<String>,
    },
    /// Start a run (with a start token, admitted at most once while the
    /// token is held) and drive it until it completes, fails or waits.
    Start {
        component: PathBuf,
        workflow: String,
        /// The run's input, as JSON.
        #[arg(long, default_value = "null")]
        input: String,
        /// A start token: refused with `hook_conflict` while another run holds it.
        #[arg(long)]
        token: Option<String>,
        /// Keep the token after the run ends, counted from now: `30s`,
        /// `10m`, `30 days`, or milliseconds.
        #[arg(long, value_parser = parse_duration, requires = "token")]
        retention: Option<std::time::Duration>,
        /// JSON metadata of the start hook, shown by `keel hooks get`.
        #[arg(long, requires = "token")]
        metadata: Option<String>,
        /// A JSON object, `additional_metadata` of key expressions.
        #[arg(long)]
        additional_metadata: Option<String>,
    },
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
    },
    /// List or show runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// List the workflows and steps a component exports.
    Inspect { component: PathBuf },
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
        component: PathBuf,
        #[arg(required = true)]
        journals: Vec<PathBuf>,
    },
    /// Measure latency, throughput, replay speed and memory.
    Bench(bench::Args),
}

#[derive(Subcommand)]
enum JournalCommand {
    /// Write a run's journal to a file (or stdout).
    Export {
        run_id: String,
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Postcard)]
        format: Format,
    },
    /// Load a journal file into the store.
    Import { file: PathBuf },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Postcard,
    Json,
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Ingest an event: start every workflow subscribed to KEY and drive them.
    Push {
        key: String,
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
enum HooksCommand {
    /// Deliver a payload to the active hook holding TOKEN and drive its run on.
    Resume {
        token: String,
        #[arg(long, default_value = "null")]
        payload: String,
    },
    /// The hook holding TOKEN: owner, whether active, metadata, retention.
    Get { token: String },
    /// Every token held now, by an active hook or for a retention.
    List,
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Every run, oldest first.
    List,
    /// A run's status and output.
    Get { run_id: String },
    /// Cancel a run: it ends and releases its tokens (after any retention).
    Cancel { run_id: String },
    /// A run's output; with --wait, drive it until it ends first.
    Result {
        run_id: String,
        #[arg(long)]
        wait: bool,
    },
    /// A run and its journal.
    Show { run_id: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KEEL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let json = cli.json;
    match runtime.block_on(execute(cli)) {
        Ok(code) => code,
        Err(e) => {
            report_error(&e, json);
            ExitCode::FAILURE
        }
    }
}

fn report_error(e: &anyhow::Error, json: bool) {
    let remote = match e.downcast_ref::<keel_host::Error>() {
        Some(k) => Some(control::RemoteError::from_error(k)),
        None => e.downcast_ref::<control::RemoteError>().cloned(),
    };
    let hint = remote.as_ref().and_then(|r| hints::hint(&r.kind, &r.ids));
    if json {
        let kind = remote.as_ref().map_or("error", |r| r.kind.as_str());
        let mut error = json!({ "kind": kind, "message": format!("{e:#}") });
        if let Some(hint) = &hint {
            error["hint"] = json!(hint);
        }
        for (field, value) in remote.map(|r| r.ids).unwrap_or_default() {
            error[field] = json!(value);
        }
        println!("{}", json!({ "error": error }));
    } else {
        eprintln!("error: {e:#}");
        if let Some(hint) = hint {
            eprintln!("hint: {hint}");
        }
    }
}

fn config(cli: &Cli) -> anyhow::Result<Config> {
    let mut config = Config::new(&cli.db);
    config.workflow_fuel = cli.workflow_fuel;
    config.max_memory = cli.max_memory << 20;
    config.step_timeout = std::time::Duration::from_secs(cli.step_timeout);
    let env = cli
        .allow_env
        .iter()
        .map(|name| {
            std::env::var(name)
                .map(|v| (name.clone(), v))
                .with_context(|| format!("--allow-env {name}: the variable is not set"))
        })
        .collect::<anyhow::Result<_>>()?;
    config.grants = Grants {
        http: cli.allow_http.clone(),
        dirs: cli.allow_dir.clone(),
        env,
    };
    Ok(config)
}

async fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Bench(args) = &cli.command {
        return bench::run(args).await.map(|()| ExitCode::SUCCESS);
    }
    if let Command::Replay {
        component,
        journals,
    } = &cli.command
    {
        return replay(component, journals, &config(&cli)?.cache_dir, cli.json).await;
    }
    if let Command::Demo { component } = &cli.command {
        let component = component.clone().unwrap_or_else(demo::default_component);
        return demo::run(&cli.db, &component, cli.json)
            .await
            .map(|()| ExitCode::SUCCESS);
    }
    if let Some(request) = request_of(&cli.command)? {
        let reply = submit(&cli, request).await?;
        return Ok(print_reply(&cli.command, reply, cli.json));
    }
    let keel = Keel::open_sled(config(&cli)?)?;
    match &cli.command {
        Command::Worker { until_idle } => {
            worker(&keel, &cli.db, *until_idle, cli.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { component } => {
            let loaded = keel.load(component).await?;
            inspect(&loaded, cli.json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Journal {
            command:
                JournalCommand::Export {
                    run_id,
                    output,
                    format,
                },
        } => {
            let file = JournalFile::new(&keel.get_run(run_id).await?, keel.journal(run_id).await?);
            let bytes = match format {
                Format::Postcard => file.to_bytes(),
                Format::Json => file.to_json().into_bytes(),
            };
            match output {
                Some(path) => std::fs::write(path, bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => std::io::Write::write_all(&mut std::io::stdout(), &bytes)?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Journal {
            command: JournalCommand::Import { file },
        } => {
            let bytes =
                std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
            let parsed = JournalFile::parse(&bytes).map_err(|e| keel_host::Error::JournalFile {
                path: file.clone(),
                reason: e.0,
            })?;
            let run = keel.import(&parsed).await?;
            if cli.json {
                println!("{}", json!({ "run_id": run.run_id }));
            } else {
                println!("imported run {} ({})", run.run_id, run.workflow);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(_)
        | Command::Demo { .. }
        | Command::Replay { .. }
        | Command::Run { .. }
        | Command::Start { .. }
        | Command::Hooks { .. }
        | Command::Events { .. }
        | Command::Runs { .. } => {
            unreachable!("handled above")
        }
    }
}

/// The request a command makes of the store, for the commands a running
/// worker can answer too.
fn request_of(command: &Command) -> anyhow::Result<Option<Request>> {
    let absolute =
        |p: &Path| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    Ok(Some(match command {
        Command::Run {
            component,
            workflow,
            input,
            metadata,
        } => Request::Start {
            component: absolute(component)?,
            workflow: workflow.clone(),
            input: input.clone(),
            token: None,
            retention_ms: None,
            metadata: None,
            additional_metadata: json_arg("--metadata", metadata)?,
        },
        Command::Start {
            component,
            workflow,
            input,
            token,
            retention,
            metadata,
            additional_metadata,
        } => Request::Start {
            component: absolute(component)?,
            workflow: workflow.clone(),
            input: input.clone(),
            token: token.clone(),
            retention_ms: retention.map(|r| r.as_millis() as u64),
            metadata: json_arg("--metadata", metadata)?,
            additional_metadata: json_arg("--additional-metadata", additional_metadata)?,
        },
        Command::Hooks {
            command: HooksCommand::Resume { token, payload },
        } => Request::Resume {
            token: token.clone(),
            payload: payload.clone(),
        },
        Command::Hooks {
            command: HooksCommand::Get { token },
        } => Request::GetHook {
            token: token.clone(),
        },
        Command::Hooks {
            command: HooksCommand::List,
        } => Request::ListHooks,
        Command::Runs {
            command: RunsCommand::Get { run_id },
        } => Request::GetRun {
            run_id: run_id.clone(),
        },
        Command::Runs {
            command: RunsCommand::Cancel { run_id },
        } => Request::Cancel {
            run_id: run_id.clone(),
        },
        Command::Runs {
            command: RunsCommand::Result { run_id, wait },
        } => Request::Result {
            run_id: run_id.clone(),
            wait: *wait,
        },
        Command::Runs {
            command: RunsCommand::List,
        } => Request::ListRuns,
        Command::Runs {
            command: RunsCommand::Show { run_id },
        } => Request::ShowRun {
            run_id: run_id.clone(),
        },
        Command::Events {
            command:
                EventsCommand::Push {
                    key,
                    payload,
                    metadata,
                },
        } => Request::PushEvent {
            key: key.clone(),
            payload: payload.clone(),
            metadata: metadata.clone(),
        },
        Command::Events {
            command: EventsCommand::List,
        } => Request::ListEvents,
        _ => return Ok(None),
    }))
}

/// Executes a request on the store, or, when a `keel worker` holds the
/// store, forwards it to that worker.
async fn submit(cli: &Cli, request: Request) -> anyhow::Result<Reply> {
    match Keel::open_sled(config(cli)?) {
        Ok(keel) => Ok(control::execute(&keel, request).await?),
        Err(keel_host::Error::Store(StoreError::Locked { .. }))
            if control::socket_path(&cli.db).exists() =>
        {
            control::forward(&cli.db, &request).await
        }
        Err(e) => Err(e.into()),
    }
}

fn print_reply(command: &Command, reply: Reply, json: bool) -> ExitCode {
    match reply {
        Reply::Run(run)
            if matches!(
                command,
                Command::Runs {
                    command: RunsCommand::Result { .. }
                }
            ) =>
        {
            print_result(&run, json);
            exit_for(&run)
        }
        Reply::Run(run) => {
            if let (false, Command::Hooks { .. }) = (json, command) {
                println!("delivered to the hook of run {}", run.run_id);
            }
            print_run(&run, json);
            match command {
                Command::Run { .. } | Command::Start { .. } => exit_for(&run),
                _ => ExitCode::SUCCESS,
            }
        }
        Reply::Hook(hook) => {
            print_hook(&hook, json);
            ExitCode::SUCCESS
        }
        Reply::Hooks(hooks) => {
            if json {
                println!("{}", Value::Array(hooks.iter().map(hook_json).collect()));
            } else {
                for hook in &hooks {
                    let state = if hook.active { "active" } else { "retained" };
                    println!("{:<32} {:<9} run {}", hook.token, state, hook.run_id);
                }
            }
            ExitCode::SUCCESS
        }
        Reply::Runs(runs) => {
            print_runs(&runs, json);
            ExitCode::SUCCESS
        }
        Reply::Journal { run, journal } => {
            show_run(&run, &journal, json);
            ExitCode::SUCCESS
        }
        Reply::Event(event) => {
            if json {
                println!("{}", json!(event));
            } else {
                print_event(&event);
            }
            ExitCode::SUCCESS
        }
        Reply::Events(events) => {
            if json {
                println!("{}", json!(events));
            } else {
                events.iter().for_each(print_event);
            }
            ExitCode::SUCCESS
        }
        Reply::Error(e) => {
            report_error(&e.into(), json);
            ExitCode::FAILURE
        }
    }
}

fn print_result(run: &RunRecord, json: bool) {
    if json {
        println!("{}", run_json(run));
        return;
    }
    match (&run.output, &run.error) {
        (Some(output), _) => println!("{output}"),
        (_, Some(error)) => println!("error [{}]: {}", error.kind, error.message),
        _ => println!("run {} is {}", run.run_id, run.status.as_str()),
    }
}

fn print_runs(runs: &[RunRecord], json: bool) {
    if json {
        println!("{}", Value::Array(runs.iter().map(run_json).collect()));
        return;
    }
    for run in runs {
        println!(
            "{}  {:<10} {}",
            run.run_id,
            run.status.as_str(),
            run.workflow
        );
    }
}

fn print_hook(hook: &HookRecord, json: bool) {
    let value = hook_json(hook);
    if json {
        println!("{value}");
        return;
    }
    let state = if hook.active {
        "active"
    } else {
        "kept after its run ended"
    };
    println!("hook `{}` of run {}: {state}", hook.token, hook.run_id);
    println!("metadata: {}", value["metadata"]);
    if let Some(until) = hook.retain_until_ms {
        println!("retained until {until} ms");
    }
}

async fn replay(
    component: &Path,
    journals: &[PathBuf],
    cache_dir: &Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let replayer = Replayer::new(component, cache_dir).await?;
    let reports = replayer.replay_paths(journals).await?;
    if json {
        println!("{}", serde_json::to_value(&reports)?);
    } else {
        for report in &reports {
            println!("{}", report.render());
        }
    }
    let diverged = reports.iter().filter(|r| !r.is_ok()).count();
    if !json {
        println!("{} journal(s) replayed, {diverged} diverged", reports.len());
    }
    Ok(if diverged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn worker(keel: &Keel, db: &Path, until_idle: bool, json: bool) -> anyhow::Result<()> {
    // A long-running worker holds the store; it answers the CLI's requests.
    let control = (!until_idle).then(|| {
        let (keel, db) = (keel.clone(), db.to_path_buf());
        tokio::spawn(async move { control::serve(keel, &db).await })
    });
    let driven = keel.work(until_idle).await;
    if let Some(control) = control {
        control.abort();
    }
    let driven = driven?;
    if json {
        println!("{}", json!({ "driven": driven }));
    } else {
        println!("worker idle after driving {driven} run(s)");
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemClock.now_ms()
}

fn print_event(event: &EventRecord) {
    println!(
        "event {} `{}` at {} ms, payload {}",
        event.event_id, event.key, event.at_ms, event.payload
    );
    for o in &event.outcomes {
        match (&o.run_id, o.deduplicated, &o.error) {
            (Some(run), true, _) => println!("  {}: deduplicated against run {run}", o.workflow),
            (Some(run), false, _) => println!("  {}: started run {run}", o.workflow),
            (_, _, Some(error)) => println!("  {}: no run: {error}", o.workflow),
            _ => {}
        }
    }
}

/// A duration given as `30s`, `10m`, `30 days`, or a number of milliseconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(ms) = s.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_millis(ms));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!("`{s}` is not a duration ({e}); write for example 30s, 10m, 30 days or 5000 (ms)")
    })
}

/// An optional JSON argument, parsed.
fn json_arg(flag: &str, value: &Option<String>) -> Result<Option<Value>, keel_host::Error> {
    value
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| keel_host::Error::InvalidInput {
            reason: format!("{flag}: {e}"),
        })
}

fn hook_json(hook: &HookRecord) -> Value {
    json!({
        "token": hook.token,
        "run_id": hook.run_id,
        "active": hook.active,
        "start_hook": hook.is_start_hook(),
        "metadata": hook.metadata.as_deref().map(payload),
        "created_at_ms": hook.created_at_ms,
        "retain_until_ms": hook.retain_until_ms,
    })
}

fn exit_for(run: &RunRecord) -> ExitCode {
    if run.status == RunStatus::Failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A JSON payload as a value, or as a string when it does not parse.
fn payload(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

fn run_json(run: &RunRecord) -> Value {
    json!({
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status.as_str(),
        "input": payload(&run.input),
        "output": run.output.as_deref().map(payload),
        "error": run.error.as_ref().map(|e| json!({"kind": e.kind, "message": e.message})),
        "component_hash": run.component_hash,
        "created_at_ms": run.created_at_ms,
        "updated_at_ms": run.updated_at_ms,
        "wake_at_ms": run.wake_at_ms,
    })
}

fn print_run(run: &RunRecord, json: bool) {
    if json {
        println!("{}", run_json(run));
        return;
    }
    println!(
        "run {} ({}): {}",
        run.run_id,
        run.workflow,
        run.status.as_str()
    );
    if let Some(output) = &run.output {
        println!("output: {output}");
    }
    if let Some(error) = &run.error {
        println!("error [{}]: {}", error.kind, error.message);
    }
    match (run.status, run.wake_at_ms) {
        (RunStatus::Waiting, Some(at)) => println!(
            "waiting for a timer due in {} ms (or a hook's payload, another run's end); `keel worker` resumes it",
            at.saturating_sub(now_ms())
        ),
        (RunStatus::Waiting, None) => println!(
            "waiting for a hook's payload or another run's end; `keel hooks resume` or `keel worker` moves it on"
        ),
        _ => {}
    }
}

fn entry_json(entry: &Entry) -> Value {
    let mut value = json!({
        "seq": entry.seq,
        "at_ms": entry.at_ms,
        "kind": entry.fact.name(),
    });
    let fields = match &entry.fact {
        Fact::RunStarted { workflow, input } => {
            json!({"workflow": workflow, "input": payload(input)})
        }
        Fact::StepScheduled {
            command,
            name,
            input,
            step_id,
            digest,
        } => {
            json!({"command": command, "step_name": name, "step_id": step_id, "input": payload(input), "digest": digest})
        }
        Fact::StepAttemptStarted { command, attempt } => {
            json!({"command": command, "attempt": attempt})
        }
        Fact::StepAttemptFailed {
            command,
            attempt,
            error,
            retry_at_ms,
        } => {
            json!({"command": command, "attempt": attempt, "error": error, "retry_at_ms": retry_at_ms})
        }
        Fact::StepCompleted { command, output } => {
            json!({"command": command, "output": payload(output)})
        }
        Fact::StepFailed {
            command,
            error,
            fatal,
            attempts,
        } => json!({"command": command, "error": error, "fatal": fatal, "attempts": attempts}),
        Fact::TimerScheduled {
            command,
            fire_at_ms,
        } => json!({"command": command, "fire_at_ms": fire_at_ms}),
        Fact::TimerFired { command } => json!({"command": command}),
        Fact::PatchMarker { command, change_id } => {
            json!({"command": command, "change_id": change_id})
        }
        Fact::RunCompleted { output } => json!({"output": payload(output)}),
        Fact::RunFailed { kind, error } => json!({"error_kind": kind, "error": error}),
        Fact::HookReceived {
            command,
            payload: p,
        } => {
            json!({"command": command, "payload": payload(p)})
        }
        other => fields_of(other),
    };
    if let (Value::Object(v), Value::Object(f)) = (&mut value, fields) {
        v.extend(f);
    }
    value
}

/// A fact's fields as serde writes them, without the variant's name.
fn fields_of(fact: &Fact) -> Value {
    match serde_json::to_value(fact) {
        Ok(Value::Object(map)) => map.into_iter().next().map_or(json!({}), |(_, v)| v),
        _ => json!({}),
    }
}

fn show_run(run: &RunRecord, journal: &[Entry], json: bool) {
    if json {
        let entries: Vec<Value> = journal.iter().map(entry_json).collect();
        println!("{}", json!({"run": run_json(run), "journal": entries}));
        return;
    }
    print_run(run, false);
    println!("input: {}", run.input);
    println!("journal:");
    for entry in journal {
        let v = entry_json(entry);
        let field = |k: &str| v.get(k).map(|x| x.to_string()).unwrap_or_default();
        let summary = match &entry.fact {
            Fact::StepCompleted { output, .. } | Fact::RunCompleted { output } => {
                excerpt(output, 60)
            }
            Fact::StepAttemptFailed { error, .. }
            | Fact::StepFailed { error, .. }
            | Fact::RunFailed { error, .. } => excerpt(error, 60),
            Fact::StepScheduled { input, .. } => format!("input {}", excerpt(input, 50)),
            Fact::HookReceived { payload, .. } => format!("payload {}", excerpt(payload, 50)),
            other if other.command().is_some() => other.describe(),
            _ => String::new(),
        };
        println!(
            "{:>4}  {:<20} {:<14} {:<40} {:<4} {}  {}",
            entry.seq,
            entry.fact.name(),
            field("step_name").trim_matches('"'),
            field("step_id").trim_matches('"'),
            field("attempt"),
            entry.at_ms,
            summary
        );
    }
}

fn inspect(loaded: &keel_host::Loaded, json: bool) {
    if json {
        println!(
            "{}",
            json!({
                "hash": loaded.hash,
                "sdk_version": loaded.manifest.sdk_version,
                "workflows": loaded.manifest.workflows,
                "steps": loaded.manifest.steps,
                "stubbed_in_workflows": loaded.stubbed_imports,
            })
        );
        return;
    }
    println!(
        "component {} (keel-sdk {})",
        loaded.hash, loaded.manifest.sdk_version
    );
    println!("workflows:");
    for w in &loaded.manifest.workflows {
        let mut line = format!("  {}", w.name);
        if let Some(i) = &w.idempotency {
            line += &format!("  idempotency key `{}` ttl={}ms", i.key, i.ttl_ms);
        }
        if !w.on_events.is_empty() {
            line += &format!("  on events {}", w.on_events.join(", "));
        }
        println!("{line}");
    }
    println!("steps:");
    for s in &loaded.manifest.steps {
        let r = &s.retry;
        println!(
            "  {:<20} max_retries={} initial_backoff={}ms backoff_factor={} max_backoff={}ms",
            s.name, r.max_retries, r.initial_backoff_ms, r.backoff_factor, r.max_backoff_ms
        );
    }
    println!(
        "non-deterministic imports, stubbed in workflows (steps may use them): {}",
        loaded.stubbed_imports.len()
    );
    for import in &loaded.stubbed_imports {
        println!("  {import}");
    }
}
