//! The `keel` command: run workflows, drive a worker, inspect components
//! and runs. Human-readable output by default, `--json` for scripts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use keel_host::core::file::JournalFile;
use keel_host::store::postgres::PgStore;
use keel_host::{Config, Grants, Keel, Replayer};
use serde_json::json;

use db::{Db, open, open_with};

mod args;
mod commands;
mod connect;
mod control;
mod crashtest;
mod db;
mod demo;
mod hints;
mod print;
mod progress;
mod remote;
mod request;
mod scaffold;
mod simulate;
mod telemetry;

use args::{Cli, Command, Format, JournalCommand, RunsCommand, StoreCommand, WorkersCommand};

fn main() -> ExitCode {
    // A closed pipe (`keel runs list | head`) ends the process quietly, as
    // for other command-line tools, instead of a panic on the next print.
    // SAFETY: restoring a signal's default disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Everything keel writes (the store, compiled code, sockets) is this
    // user's alone, whatever the umask it was started with.
    // SAFETY: setting the process's file mode mask has no memory effects.
    let user_umask = unsafe { libc::umask(0o077) };
    let cli = match args::parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // A new crate is the user's source code, made as their umask says.
    if matches!(cli.command, Command::New { .. }) {
        // SAFETY: as above, before any thread starts.
        unsafe {
            libc::umask(user_umask);
        }
    }
    let json = cli.json;
    let telemetry = match telemetry::init(&cli.command, cli.otlp_endpoint.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            report_error(&e, json);
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = match runtime.block_on(execute(cli)) {
        Ok(code) => code,
        Err(e) => {
            report_error(&e, json);
            ExitCode::FAILURE
        }
    };
    drop(runtime);
    telemetry.shutdown();
    code
}

/// A command line that does not parse: clap's message, or with `--json`
/// a JSON error of kind `usage`; exit code 2 either way (help and version
/// print as usual).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let json = std::env::args().any(|a| a == "--json");
    if !json || matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    let message = e.render().to_string();
    let message = message.trim().trim_start_matches("error: ");
    let usage = keel_host::core::ErrorReport::new(keel_host::core::ErrorKind::Usage, message);
    println!(
        "{}",
        json!({ "error": { "kind": usage.kind.as_str(), "message": message, "hint": hints::hint(&usage) } })
    );
    ExitCode::from(2)
}

pub fn report_error(e: &anyhow::Error, json: bool) {
    let remote = match e.downcast_ref::<keel_host::Error>() {
        Some(k) => Some(remote::RemoteError::from_error(k)),
        None => e.downcast_ref::<remote::RemoteError>().cloned(),
    };
    let hint = remote.as_ref().and_then(|r| hints::hint(&r.report()));
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
    let mut config = Config::caching_in(match (&cli.cache_dir, Db::of(cli)) {
        (Some(dir), _) => dir.clone(),
        // Compiled components live beside the store they belong to.
        (None, Db::Sled(path)) => path.join("compiled"),
        (None, Db::Postgres(_)) => keel_host::user_cache_dir(),
    });
    config.lease_ttl = std::time::Duration::from_secs(cli.lease_ttl.max(1));
    config.trace_runs = cli.otlp_endpoint.is_some();
    config.max_concurrent_runs = cli.max_concurrent_runs.max(1);
    config.workflow_fuel = cli.workflow_fuel;
    config.activation_timeout = std::time::Duration::from_secs(cli.activation_timeout.max(1));
    config.max_instances = cli.max_instances;
    config.max_memory = cli.max_memory << 20;
    config.step_timeout = std::time::Duration::from_secs(cli.step_timeout);
    config.default_durability = cli.default_durability;
    config.limits = keel_host::RunLimits {
        max_payload_bytes: cli.max_payload_kib.saturating_mul(1024),
        max_steps_in_flight: cli.max_steps_in_flight.max(1),
        max_journal_entries: cli.max_journal_entries.max(1),
        max_stream_bytes: cli.max_stream_mib.saturating_mul(1 << 20),
        cancel_grace: keel_host::core::lifecycle::Grace {
            ms: cli.cancel_grace.saturating_mul(1000),
            steps: cli.cancel_grace_steps,
        },
        max_takeovers: cli.max_takeovers.max(1),
    };
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
    config.retention = keel_host::RetentionConfig {
        default_ms: cli.run_retention.map(|d| d.as_millis() as u64),
        payload_ids_ms: cli.payload_id_retention.as_millis() as u64,
        archive_dir: cli.archive.clone(),
    };
    Ok(config)
}

/// The command table: every command and where it runs (on its own, on the
/// store where it is, or as a request a worker or a server can answer).
async fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match &cli.command {
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "keel", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::New {
            name,
            path,
            lang,
            sdk_path,
            sdk_git,
            sdk_rev,
        } => new_project(name, path, *lang, sdk_path, sdk_git, sdk_rev, json),
        Command::Test { dir } => {
            let grants = request::grants_of(&cli)?;
            let cache = cli
                .cache_dir
                .clone()
                .unwrap_or_else(keel_host::user_cache_dir);
            scaffold::test(dir, &cache, &grants, json).await
        }
        Command::Crashtest {
            component,
            workflow,
            scenario,
            input,
            cancel,
            resume,
            cancel_when_waiting,
            pause_when_waiting,
            restart_from_step,
            fork_from_step,
            upgrade_to,
            expect_failure,
        } => {
            let script = crashtest::Script {
                resumes: resume.clone(),
                cancel_when_waiting: cancel_when_waiting.clone(),
                pause_when_waiting: *pause_when_waiting,
                upgrade_to: upgrade_to.clone(),
            };
            let mut config = config(&cli)?;
            let mut start_at_ms = None;
            let (workflow, input, mut steps, expected) = match (scenario, workflow) {
                (Some(path), _) => {
                    let scenario = scaffold::Scenario::read(path)?;
                    let grants = request::grants_of(&cli)?.with(&scenario.grants);
                    config.grants = keel_host::Grants::of(&grants);
                    config.step_stubs = scenario.stubs();
                    start_at_ms = scenario.start_at;
                    (
                        scenario.workflow.clone(),
                        scenario.input.to_string(),
                        scenario.script(),
                        Some(scenario.expected()),
                    )
                }
                (None, Some(workflow)) => {
                    let input = request::text_arg("--input", input)?;
                    (workflow.clone(), input, Vec::new(), None)
                }
                (None, None) => anyhow::bail!("name a WORKFLOW or a --scenario FILE"),
            };
            steps.extend(script.steps()?);
            // A crate's directory is built first, as `keel test` does.
            let component = match component.is_dir() {
                true => scaffold::build(component)?,
                false => component.clone(),
            };
            let test = keel_host::crashtest::CrashTest {
                component,
                workflow,
                input,
                config,
                script: steps,
                cancel_at_start: cancel.clone(),
                start_at_ms,
                restart_from: restart_from_step
                    .clone()
                    .map(keel_host::core::restart::RestartPoint::Step),
                fork_from: fork_from_step
                    .clone()
                    .map(keel_host::core::restart::RestartPoint::Step),
                expected_failure: expected
                    .as_ref()
                    .and_then(|e| e.failure_kind())
                    .or(expect_failure.as_deref())
                    .map(str::to_string),
            };
            crashtest::run(&test, expected.as_ref(), json).await
        }
        Command::Simulate {
            component,
            scenario,
            seeds,
            seed,
        } => simulate::run(&cli, component, scenario, *seeds, *seed, json).await,
        Command::Bench(args) => keel_bench::run(args).await.map(|()| ExitCode::SUCCESS),
        Command::Replay {
            component,
            journals,
        } => replay(component, journals, &config(&cli)?.cache_dir, json).await,
        Command::Demo { component } => {
            let Db::Sled(path) = Db::of(&cli) else {
                anyhow::bail!("the demo runs on the embedded store: pass a directory with --db");
            };
            let component = component.clone().unwrap_or_else(demo::default_component);
            demo::run(&path, &component, json)
                .await
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Worker {
            until_idle,
            http,
            serving,
        } => serve(&cli, *until_idle, http.map(|addr| (addr, serving))).await,
        Command::Serve { http, serving } => serve(&cli, false, Some((*http, serving))).await,
        Command::Inspect { component } => {
            let view = match Path::new(component).is_file() || component.ends_with(".wasm") {
                // A file is read offline: no store, so it works while a
                // server or worker holds one.
                true => {
                    let runtime = keel_host::Runtime::new(config(&cli)?)?;
                    let bytes =
                        std::fs::read(component).with_context(|| format!("reading {component}"))?;
                    let loaded = runtime.load(Path::new(component), &bytes).await?;
                    keel_server::wire::ComponentView::from(loaded.as_ref())
                }
                false => commands::inspect(&cli, component).await?,
            };
            print::inspect(&view, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Journal {
            command: JournalCommand::Import { file },
        } => import_journal(&local(&cli).await?, file, json).await,
        // The rest are calls of keel's API.
        Command::Run(args) => commands::run(&cli, args).await,
        Command::Start(args) => commands::start(&cli, args).await,
        Command::Deploy(args) => commands::deploy(&cli, args).await,
        Command::Deployments { command } => commands::deployments(&cli, command).await,
        Command::Runs { command } => commands::runs(&cli, command).await,
        Command::Hooks { command } => commands::hooks(&cli, command).await,
        Command::Events { command } => commands::events(&cli, command).await,
        Command::Schedules { command } => commands::schedules(&cli, command).await,
        Command::Limits { command } => commands::limits(&cli, command).await,
        Command::Store { command } => commands::store(&cli, command).await,
        Command::Jobs { command } => commands::jobs(&cli, command).await,
        Command::Tokens { command } => commands::tokens(&cli, command).await,
        Command::Webhooks { command } => commands::webhooks(&cli, command).await,
        Command::Workers {
            command: WorkersCommand::List,
        } => commands::workers(&cli).await,
        Command::Journal {
            command:
                JournalCommand::Export {
                    run_id,
                    output,
                    format,
                },
        } => commands::export(&cli, run_id, output.as_deref(), *format).await,
    }
}

/// `keel new`: a workflow crate from the template.
fn new_project(
    name: &str,
    path: &Path,
    lang: scaffold::Lang,
    sdk_path: &Option<PathBuf>,
    sdk_git: &Option<String>,
    sdk_rev: &Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let sdk = match (sdk_path, sdk_git) {
        (Some(path), _) => scaffold::Sdk::Path(std::path::absolute(path)?),
        (None, Some(url)) => scaffold::Sdk::Git {
            url: url.clone(),
            rev: sdk_rev.clone(),
        },
        (None, None) => scaffold::Sdk::bundled(lang).ok_or_else(|| {
            anyhow::anyhow!(
                "this keel was not built from a checkout it can still find; pass --sdk-path DIR (a keel checkout's guest-sdk, or sdk/python) or --sdk-git URL"
            )
        })?,
    };
    let dir = scaffold::new_project(name, path, &sdk, lang)?;
    if json {
        println!("{}", json!({ "created": dir }));
    } else if lang == scaffold::Lang::Python {
        println!(
            "created {}: `cd {} && python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && keel test`",
            dir.display(),
            dir.display()
        );
    } else {
        println!(
            "created {}: `cd {} && cargo build --release && keel test`",
            dir.display(),
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A command that only reads the store must not create one: a sled
/// directory that does not exist is `store_not_found`.
pub(crate) fn refuse_missing_store(cli: &Cli) -> anyhow::Result<()> {
    if cli.server.is_none()
        && needs_existing_store(&cli.command)
        && let Db::Sled(path) = Db::of(cli)
        && !path.exists()
    {
        return Err(remote::RemoteError {
            kind: keel_host::core::ErrorKind::StoreNotFound.as_str().into(),
            message: format!(
                "there is no store at {}; pass --db (or KEEL_DB) where your store is. A store is created by the first `keel run`, `start`, `deploy` or `worker`",
                path.display()
            ),
            ids: Vec::new(),
        }
        .into());
    }
    Ok(())
}

/// The engine for a command that runs where the store is (never through
/// a server).
async fn local(cli: &Cli) -> anyhow::Result<Keel> {
    refuse_missing_store(cli)?;
    if let Some(server) = &cli.server {
        anyhow::bail!(
            "this command runs where the store is and cannot be sent to a server ({server}); run it without --server"
        );
    }
    open(cli).await
}

/// `keel worker` and `keel serve`: drives runs, serving the HTTP API on
/// `http` if given.
async fn serve(
    cli: &Cli,
    until_idle: bool,
    http: Option<(std::net::SocketAddr, &args::HttpOptions)>,
) -> anyhow::Result<ExitCode> {
    if let Some(server) = &cli.server {
        anyhow::bail!(
            "this command runs where the store is and cannot be sent to a server ({server}); run it without --server"
        );
    }
    let metrics = Arc::new(keel_server::Metrics::default());
    let mut config = config(cli)?;
    if http.is_some() {
        config.observer = metrics.clone();
    }
    let keel = open_with(cli, config).await?;
    let socket_dir = match Db::of(cli) {
        Db::Sled(path) => Some(path),
        Db::Postgres(_) => None,
    };
    let api = http.map(|(addr, serving)| Api {
        config: serving.config(addr, cli.api_token.clone()),
        metrics,
    });
    worker(&keel, socket_dir.as_deref(), until_idle, api, cli.json).await?;
    Ok(ExitCode::SUCCESS)
}

/// `keel journal export`: writes `file`, read where the store is (in this
/// process, through a serving worker's socket or through `--server`).
fn export_journal(
    file: &JournalFile,
    run_id: &str,
    output: Option<&Path>,
    format: Format,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let entries = file.entries.len();
    if output.is_none()
        && matches!(format, Format::Postcard)
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
    {
        anyhow::bail!(
            "refusing to write the binary journal to a terminal; pass -o FILE, or --format json to read it"
        );
    }
    let bytes = match format {
        Format::Postcard => file.to_bytes(),
        Format::Json => file.to_json().into_bytes(),
    };
    match output {
        // Written to a file: say what was written (the journal itself
        // goes to standard output only without -o).
        Some(path) => {
            std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
            if json {
                println!(
                    "{}",
                    json!({"run_id": run_id, "entries": entries, "bytes": bytes.len(), "file": path})
                );
            } else {
                println!(
                    "exported run {run_id}: {entries} journal entries ({} bytes) to {}; `keel replay COMPONENT {}` checks a build against it",
                    bytes.len(),
                    path.display(),
                    path.display()
                );
            }
        }
        None => std::io::Write::write_all(&mut std::io::stdout(), &bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `keel journal import`.
async fn import_journal(keel: &Keel, file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let parsed = JournalFile::parse(&bytes).map_err(|e| keel_host::Error::JournalFile {
        path: file.to_path_buf(),
        reason: e.0,
    })?;
    let run = keel.import(&parsed).await?;
    if json {
        println!("{}", json!({ "run_id": run.run_id }));
    } else {
        println!("imported run {} ({})", run.run_id, run.workflow);
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a command acts on what a store already holds (reading it, or
/// changing runs in it), and so must not create one.
fn needs_existing_store(command: &Command) -> bool {
    use args::{DeploymentsCommand, EventsCommand, HooksCommand};
    matches!(
        command,
        Command::Runs {
            command: RunsCommand::List { .. }
                | RunsCommand::Get { .. }
                | RunsCommand::Show { .. }
                | RunsCommand::Result { .. }
                | RunsCommand::Cancel { .. }
                | RunsCommand::Retry { .. }
                | RunsCommand::Delete { .. }
                | RunsCommand::Bulk { .. }
                | RunsCommand::Streams { .. }
                | RunsCommand::Stream { .. }
        } | Command::Jobs { .. }
            | Command::Store {
                command: StoreCommand::Stats | StoreCommand::Purge
            }
            | Command::Hooks {
                command: HooksCommand::Get { .. }
                    | HooksCommand::List
                    | HooksCommand::Resume { .. }
            }
            | Command::Events {
                command: EventsCommand::List
            }
            | Command::Deployments {
                command: DeploymentsCommand::List
                    | DeploymentsCommand::Show { .. }
                    | DeploymentsCommand::Prune { .. }
            }
            | Command::Schedules {
                command: args::SchedulesCommand::List | args::SchedulesCommand::Show { .. }
            }
            | Command::Webhooks {
                command: args::WebhooksCommand::List | args::WebhooksCommand::Show { .. }
            }
            | Command::Workers { .. }
            | Command::Journal {
                command: JournalCommand::Export { .. }
            }
    )
}

/// Whether this command prints its run's progress: one that drives a run
/// in this process, for a person at a terminal.
fn shows_progress(cli: &Cli) -> bool {
    use std::io::IsTerminal;
    !cli.json
        && std::io::stderr().is_terminal()
        && matches!(
            cli.command,
            Command::Run { .. } | Command::Start { .. } | Command::Hooks { .. }
        )
}

/// `keel store migrate`.
async fn migrate(cli: &Cli) -> anyhow::Result<ExitCode> {
    let (from, to) = match Db::of(cli) {
        Db::Postgres(options) => {
            let from = PgStore::migrate(&options)
                .await
                .map_err(keel_host::Error::from)?;
            (
                from as u32,
                keel_host::store::postgres::SCHEMA_VERSION as u32,
            )
        }
        Db::Sled(path) => {
            let from = keel_host::store::sled::SledStore::schema_version_of(&path)
                .map_err(keel_host::Error::from)?;
            keel_host::store::sled::SledStore::open(&path).map_err(keel_host::Error::from)?;
            (from, keel_host::store::sled::SCHEMA_VERSION)
        }
    };
    if cli.json {
        println!("{}", json!({ "from": from, "to": to }));
    } else if from == to {
        println!("the store is at schema version {to}; nothing to migrate");
    } else {
        println!("the store was migrated from schema version {from} to {to}");
    }
    Ok(ExitCode::SUCCESS)
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

/// The HTTP API a worker serves.
struct Api {
    config: keel_server::ServerConfig,
    metrics: Arc<keel_server::Metrics>,
}

async fn worker(
    keel: &Keel,
    socket_dir: Option<&Path>,
    until_idle: bool,
    api: Option<Api>,
    json: bool,
) -> anyhow::Result<()> {
    let metrics = api
        .as_ref()
        .map_or_else(Default::default, |api| api.metrics.clone());
    let server = match api {
        Some(api) => {
            let (listener, addr) = keel_server::bind(&api.config).await.map_err(|e| {
                let hint = match e {
                    keel_server::ServeError::TokenRequired { .. } => {
                        "\nhint: pass --api-token (or set KEEL_API_TOKEN), or serve on 127.0.0.1"
                    }
                    _ => "",
                };
                anyhow::anyhow!("{e}{hint}")
            })?;
            eprintln!("keel: serving the API and console on http://{addr}/");
            eprintln!("keel: serving MCP (docs/mcp.md) on http://{addr}/mcp");
            let keel = keel.clone();
            Some(tokio::spawn(async move {
                keel_server::serve(
                    listener,
                    keel,
                    api.metrics,
                    &api.config,
                    std::future::pending(),
                )
                .await
            }))
        }
        None => None,
    };
    // A long-running worker holds a sled store; it answers the CLI's requests.
    let control = socket_dir.filter(|_| !until_idle).map(|db| {
        let (keel, db) = (keel.clone(), db.to_path_buf());
        tokio::spawn(async move { control::serve(keel, &db, metrics).await })
    });
    // On SIGTERM or SIGINT the worker stops claiming runs, its activations
    // stop and release their leases, and `work` returns.
    let stopper = {
        let keel = keel.clone();
        tokio::spawn(async move {
            termination().await;
            tracing::warn!("shutting down: releasing runs to other workers");
            keel.shutdown();
        })
    };
    let driven = keel.work(until_idle).await;
    stopper.abort();
    if let Some(control) = control {
        control.abort();
    }
    if let Some(server) = server {
        server.abort();
    }
    let summary = driven?;
    let undriven: Vec<_> = summary
        .undriven
        .iter()
        .map(|(run_id, failures, error)| json!({"run_id": run_id, "failures": failures, "error": error}))
        .collect();
    if json {
        println!(
            "{}",
            json!({ "driven": summary.driven, "undriven": undriven })
        );
    } else {
        println!("worker idle after driving {} run(s)", summary.driven);
        for (run_id, failures, error) in &summary.undriven {
            println!("could not drive run {run_id} ({failures} tries): {error}");
        }
    }
    if !summary.undriven.is_empty() {
        anyhow::bail!(
            "{} run(s) could not be driven; fix the cause above (a missing component: load or deploy it again) and run the worker again",
            summary.undriven.len()
        );
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// A duration given as `30s`, `10m`, `30 days`, or a number of milliseconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(ms) = s.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_millis(ms));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!("`{s}` is not a duration ({e}); write for example 30s, 10m, 30 days or 5000 (ms)")
    })
}
