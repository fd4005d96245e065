//! `keel new`: a guest crate that builds on the first `cargo build`, with
//! a workflow of two steps, a scenario for `keel test` and a README; and
//! `keel test`: build a guest crate, run its scenarios, replay its journals.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::Context;
use keel_host::core::clock::ManualClock;
use keel_host::core::{Clock, GrantSpec, RunError, RunRecord, RunStatus};
use keel_host::script::{Driven, Scripted, describe_waits, drive_chain};
use keel_host::{Config, Keel, Replayer};
use serde::Deserialize;
use serde_json::Value;

const CARGO_TOML: &str = include_str!("../templates/guest/Cargo.toml.tmpl");
const CARGO_CONFIG: &str = include_str!("../templates/guest/cargo-config.toml.tmpl");
const TOOLCHAIN: &str = include_str!("../templates/guest/rust-toolchain.toml.tmpl");
const GITIGNORE: &str = include_str!("../templates/guest/gitignore.tmpl");
const LIB_RS: &str = include_str!("../templates/guest/lib.rs.tmpl");
const RUN_JSON: &str = include_str!("../templates/guest/run.json.tmpl");
const README: &str = include_str!("../templates/guest/README.md.tmpl");

/// The toolchain guests are built with (this keel's).
const TOOLCHAIN_CHANNEL: &str = "1.95.0";

const PY_APP: &str = include_str!("../templates/python/app.py.tmpl");
const PY_REQUIREMENTS: &str = include_str!("../templates/python/requirements.txt.tmpl");
const PY_GITIGNORE: &str = include_str!("../templates/python/gitignore.tmpl");
const PY_README: &str = include_str!("../templates/python/README.md.tmpl");

/// The module a Python project's workflows are declared in.
const PY_MODULE: &str = "app";

/// The language of a new project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
}

/// Where the SDK comes from.
pub enum Sdk {
    Path(PathBuf),
    Git { url: String, rev: Option<String> },
}

impl Sdk {
    /// The SDK this keel was built from, when its sources are still there.
    pub fn bundled(lang: Lang) -> Option<Sdk> {
        let (dir, marker) = match lang {
            Lang::Rust => ("../guest-sdk", "Cargo.toml"),
            Lang::Python => ("../sdk/python", "pyproject.toml"),
        };
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        path.join(marker)
            .is_file()
            .then(|| Sdk::Path(path.canonicalize().unwrap_or(path)))
    }

    /// The requirement line of the Python SDK, and a comment on it.
    fn python_requirement(&self) -> (String, String) {
        match self {
            Sdk::Path(path) => (
                format!("file://{}", path.display()),
                "the SDK in a keel checkout".into(),
            ),
            Sdk::Git { url, rev } => (
                format!(
                    "git+{url}{}#subdirectory=sdk/python",
                    rev.as_ref().map(|r| format!("@{r}")).unwrap_or_default()
                ),
                "the SDK from git".into(),
            ),
        }
    }

    /// The `[patch.crates-io]` section that takes the SDK crate, required
    /// by version, from this source instead of crates.io.
    fn patch(&self) -> String {
        let (source, from) = match self {
            Sdk::Path(path) => (
                format!("{{ path = {:?} }}", path.display().to_string()),
                "a keel checkout".to_string(),
            ),
            Sdk::Git { url, rev } => (
                match rev {
                    Some(rev) => format!("{{ git = {url:?}, rev = {rev:?} }}"),
                    None => format!("{{ git = {url:?} }}"),
                },
                "git".to_string(),
            ),
        };
        format!(
            "# keel-sdk {version} is taken from {from} instead of crates.io. To use
# the published crate, delete this section; to develop against another
# copy, point it at `{{ path = \"...\" }}` or `{{ git = \"URL\" }}`.
[patch.crates-io]
keel-sdk = {source}
",
            version = SDK_VERSION
        )
    }
}

/// The version of the SDK crate this keel speaks to (they are released
/// together).
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Fills `{{key}}` placeholders.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    values
        .iter()
        .fold(template.to_string(), |text, (key, value)| {
            text.replace(&format!("{{{{{key}}}}}"), value)
        })
}

/// Creates the project `name` in `parent` (a crate, or a Python project);
/// returns its directory.
pub fn new_project(name: &str, parent: &Path, sdk: &Sdk, lang: Lang) -> anyhow::Result<PathBuf> {
    match lang {
        Lang::Rust => new_crate(name, parent, sdk),
        Lang::Python => new_python(name, parent, sdk),
    }
}

/// Creates the Python project `name` in `parent`; returns its directory.
fn new_python(name: &str, parent: &Path, sdk: &Sdk) -> anyhow::Result<PathBuf> {
    let dir = new_dir(name, parent)?;
    let lib = name.replace('-', "_");
    let (requirement, comment) = sdk.python_requirement();
    let values = [
        ("name", name),
        ("lib", lib.as_str()),
        ("sdk", requirement.as_str()),
        ("sdk_comment", comment.as_str()),
    ];
    let files: [(&str, &str); 5] = [
        ("app.py", PY_APP),
        ("requirements.txt", PY_REQUIREMENTS),
        (".gitignore", PY_GITIGNORE),
        ("tests/runs/greet.json", RUN_JSON),
        ("README.md", PY_README),
    ];
    write_files(&dir, &files, &values)?;
    Ok(dir)
}

/// The new project's directory `parent/name`, refused when the name is
/// not one or the directory exists.
fn new_dir(name: &str, parent: &Path) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_alphabetic());
    anyhow::ensure!(
        valid,
        "`{name}` is not a crate name: use letters, digits, `-` and `_`, starting with a letter"
    );
    let dir = parent.join(name);
    anyhow::ensure!(
        !dir.exists(),
        "{} already exists; pick another name or remove it",
        dir.display()
    );
    Ok(dir)
}

/// Writes the templates `files` under `dir`, filled with `values`, with a
/// `journals/` folder, and makes it a git repository.
fn write_files(dir: &Path, files: &[(&str, &str)], values: &[(&str, &str)]) -> anyhow::Result<()> {
    for (path, template) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in the project"))?;
        std::fs::write(&path, fill(template, values))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    std::fs::create_dir_all(dir.join("journals"))?;
    git_init(dir);
    Ok(())
}

/// Creates the crate `name` in `parent`; returns its directory.
fn new_crate(name: &str, parent: &Path, sdk: &Sdk) -> anyhow::Result<PathBuf> {
    let dir = new_dir(name, parent)?;
    let lib = name.replace('-', "_");
    let patch = sdk.patch();
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide.md");
    let guide = guide.canonicalize().unwrap_or(guide).display().to_string();
    let values = [
        ("name", name),
        ("lib", lib.as_str()),
        ("sdk_version", SDK_VERSION),
        ("sdk_patch", patch.as_str()),
        ("toolchain", TOOLCHAIN_CHANNEL),
        ("guide", guide.as_str()),
    ];
    let files: [(&str, &str); 7] = [
        ("Cargo.toml", CARGO_TOML),
        (".cargo/config.toml", CARGO_CONFIG),
        ("rust-toolchain.toml", TOOLCHAIN),
        (".gitignore", GITIGNORE),
        ("src/lib.rs", LIB_RS),
        ("tests/runs/greet.json", RUN_JSON),
        ("README.md", README),
    ];
    write_files(&dir, &files, &values)?;
    Ok(dir)
}

/// Makes `dir` a git repository, as `cargo new` does, unless it is inside
/// one already or git is not installed (then it stays a plain folder).
fn git_init(dir: &Path) {
    let quiet = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !quiet(&["rev-parse", "--is-inside-work-tree"]) {
        quiet(&["init", "-q"]);
    }
}

/// A scenario of `tests/runs/`: a workflow run, what it is given on the
/// way, and what it must give.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub workflow: String,
    #[serde(default)]
    pub input: Value,
    /// The output expected of a completed run.
    output: Option<Value>,
    /// The error kind expected of a failed run.
    error_kind: Option<String>,
    /// For a workflow that continues as new: the input each run that
    /// continues the chain must be started with, in order. `output` and
    /// `error_kind` are then the last run's.
    #[serde(default)]
    continues: Option<Vec<Value>>,
    /// What its steps may reach, besides the command line's `--allow-*`.
    #[serde(default)]
    pub grants: GrantSpec,
    /// Payloads resumed into its hooks, in order, each once the run waits
    /// on its token.
    #[serde(default)]
    hooks: Vec<ScriptedPayload>,
    /// Steps, by name, that do not run: each gives this output instead (a
    /// recorded answer of a service the test cannot reach).
    #[serde(default)]
    stubs: std::collections::BTreeMap<String, Value>,
    /// The run's clock when it starts, in RFC 3339 UTC
    /// (`"2026-12-24T23:00:00Z"`), so an output that depends on the date
    /// can be asserted; by default the time the test runs.
    #[serde(default, deserialize_with = "utc_time")]
    pub start_at: Option<u64>,
}

/// An RFC 3339 UTC time, as milliseconds since the epoch.
fn utc_time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = String::deserialize(d)?;
    let at = humantime::parse_rfc3339(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "`start_at` {text:?} is not an RFC 3339 time in UTC like \"2026-12-24T23:00:00Z\" ({e})"
        ))
    })?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| serde::de::Error::custom("`start_at` is before 1970"))?
        .as_millis();
    Ok(Some(ms as u64))
}

impl Scenario {
    /// Its stubbed steps' outputs, as JSON, by step name.
    pub fn stubs(&self) -> std::sync::Arc<std::collections::BTreeMap<String, String>> {
        std::sync::Arc::new(
            self.stubs
                .iter()
                .map(|(name, output)| (name.clone(), output.to_string()))
                .collect(),
        )
    }

    /// Fails, naming the ones it has, unless `manifest` exports the
    /// scenario's workflow and every step it stubs.
    pub fn check(&self, manifest: &keel_host::core::manifest::Manifest) -> anyhow::Result<()> {
        let list = |names: Vec<String>| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        anyhow::ensure!(
            manifest.workflow(&self.workflow).is_some(),
            "the crate exports no workflow `{}`; name one of {} in the scenario's `workflow`",
            self.workflow,
            list(manifest.workflow_names())
        );
        if let Some(unknown) = self.stubs.keys().find(|s| manifest.step(s).is_none()) {
            anyhow::bail!(
                "the scenario stubs step `{unknown}`, which the crate does not export; its steps are {}",
                list(manifest.step_names())
            );
        }
        Ok(())
    }

    /// Reads the scenario file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the scenario {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a scenario ({{workflow, input, output | error_kind, continues: [INPUT], grants, hooks: [{{token, payload, after}}], stubs: {{STEP: OUTPUT}}, start_at}})",
                path.display()
            )
        })
    }

    /// Its hook payloads as a script.
    pub fn script(&self) -> Vec<Scripted> {
        self.hooks
            .iter()
            .map(|p| Scripted::Resume {
                token: p.token.clone(),
                payload: p.payload.to_string(),
                after: p.after,
            })
            .collect()
    }

    /// The run's clock: at `start_at`, else now.
    pub fn clock(&self) -> std::sync::Arc<ManualClock> {
        ManualClock::at(
            self.start_at
                .unwrap_or_else(|| keel_host::SystemClock.now_ms()),
        )
    }

    /// Fails, naming the link, unless the runs of `links` (the chain of
    /// continuations its run made, the first first) continued with the
    /// inputs `continues` lists; a scenario without `continues` takes any.
    pub fn check_chain(&self, links: &[RunRecord]) -> anyhow::Result<()> {
        let Some(inputs) = &self.continues else {
            return Ok(());
        };
        let later = links.get(1..).unwrap_or_default();
        for (n, (expected, link)) in inputs.iter().zip(later).enumerate() {
            let got: Value = serde_json::from_str(&link.input)?;
            anyhow::ensure!(
                &got == expected,
                "link {} of the chain (run {}) was started with input {got}, the scenario expects {expected}",
                n + 2,
                link.run_id
            );
        }
        anyhow::ensure!(
            later.len() == inputs.len(),
            "the chain has {} link(s) after the first, the scenario's `continues` lists {}",
            later.len(),
            inputs.len()
        );
        Ok(())
    }

    /// How its run must end.
    pub fn expected(&self) -> Expected {
        match (&self.output, &self.error_kind) {
            (Some(output), _) => Expected::Output(output.clone()),
            (None, Some(kind)) => Expected::ErrorKind(kind.clone()),
            (None, None) => Expected::Completed,
        }
    }
}

/// How a scenario's run must end.
pub enum Expected {
    /// Completed with this output.
    Output(Value),
    /// Failed with an error of this kind.
    ErrorKind(String),
    /// Completed, whatever its output.
    Completed,
}

impl Expected {
    /// The error kind of the failure it expects, if it expects one.
    pub fn failure_kind(&self) -> Option<&str> {
        match self {
            Expected::ErrorKind(kind) => Some(kind),
            _ => None,
        }
    }

    /// Fails, saying how, unless a run that ended `status` with `output`
    /// (JSON) and `error` is what it expects.
    pub fn check(
        &self,
        status: RunStatus,
        output: Option<&str>,
        error: Option<&RunError>,
    ) -> anyhow::Result<()> {
        let output = output.map(serde_json::from_str::<Value>).transpose()?;
        let how = || {
            error.map_or(status.as_str().to_string(), |e| {
                format!("{}: {}", e.kind, e.message)
            })
        };
        match self {
            Expected::Output(expected) => anyhow::ensure!(
                output.as_ref() == Some(expected),
                "expected output {expected}, got {} ({})",
                output.map_or("none".into(), |o| o.to_string()),
                how()
            ),
            Expected::ErrorKind(kind) => anyhow::ensure!(
                error.is_some_and(|e| &e.kind == kind),
                "expected a failure of kind {kind}, got {}",
                how()
            ),
            Expected::Completed => anyhow::ensure!(
                status == RunStatus::Completed,
                "the run did not complete: {}",
                how()
            ),
        }
        Ok(())
    }
}

/// A payload a scenario resumes into a hook.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedPayload {
    token: String,
    #[serde(default)]
    payload: Value,
    /// How long after the run starts waiting on the token the payload
    /// comes, on the scenario's clock (`10m`, `2 days`): a timer due
    /// before then fires first.
    #[serde(default, deserialize_with = "duration")]
    after: Option<std::time::Duration>,
}

/// A duration as the CLI writes them (`30s`, `10m`, `2 days`, `250ms`).
fn duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    text.map(|t| crate::parse_duration(&t).map_err(serde::de::Error::custom))
        .transpose()
}

/// Builds the project in `dir` (a guest crate, or a Python project with
/// `app.py`) and returns its component's path.
pub fn build(dir: &Path) -> anyhow::Result<PathBuf> {
    if !dir.join("Cargo.toml").is_file() && dir.join(format!("{PY_MODULE}.py")).is_file() {
        return build_python(dir);
    }
    build_crate(dir)
}

/// The Python that builds a Python project: the project's `.venv`, else
/// `$KEEL_PYTHON`, else `python3`.
fn project_python(dir: &Path) -> PathBuf {
    let venv = dir.join(".venv/bin/python");
    if venv.is_file() {
        return venv;
    }
    std::env::var_os("KEEL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Builds the Python project in `dir` into `build/NAME.wasm` with the SDK's
/// `python -m keel build`.
fn build_python(dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = dir.canonicalize()?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().replace('-', "_"))
        .unwrap_or_else(|| PY_MODULE.into());
    let wasm = dir.join("build").join(format!("{name}.wasm"));
    std::fs::create_dir_all(dir.join("build"))?;
    let python = project_python(&dir);
    let status = Command::new(&python)
        .args(["-m", "keel", "build", PY_MODULE, "-o"])
        .arg(&wasm)
        .arg("-p")
        .arg(&dir)
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {}", python.display()))?;
    anyhow::ensure!(
        status.success(),
        "`{} -m keel build {PY_MODULE}` failed in {}",
        python.display(),
        dir.display()
    );
    Ok(wasm)
}

/// Builds the guest crate in `dir` and returns its component's path.
fn build_crate(dir: &Path) -> anyhow::Result<PathBuf> {
    let status = Command::new("cargo")
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .context("running cargo")?;
    anyhow::ensure!(
        status.success(),
        "`cargo build` failed in {}",
        dir.display()
    );
    let metadata = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(dir)
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        metadata.status.success(),
        "`cargo metadata` failed in {}",
        dir.display()
    );
    let metadata: Value = serde_json::from_slice(&metadata.stdout)?;
    let target = metadata["target_directory"].as_str().unwrap_or("target");
    let manifest = dir.canonicalize()?.join("Cargo.toml");
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path()))
        .with_context(|| format!("no package at {}", manifest.display()))?;
    let lib = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| {
            t["crate_types"]
                .as_array()
                .is_some_and(|c| c.iter().any(|k| k == "cdylib"))
        })
        .and_then(|t| t["name"].as_str())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} builds no component: add `crate-type = [\"cdylib\"]` under `[lib]` in its Cargo.toml",
                manifest.display()
            )
        })?;
    let wasm = Path::new(target)
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", lib.replace('-', "_")));
    anyhow::ensure!(wasm.is_file(), "the build produced no {}", wasm.display());
    Ok(wasm)
}

/// Files of `dir` with extension `ext`, sorted; none if `dir` is missing.
fn files(dir: &Path, ext: &str) -> anyhow::Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    found.retain(|p| p.extension().is_some_and(|e| e == ext));
    found.sort();
    Ok(found)
}

/// `keel test`: builds the crate in `dir`, runs its scenarios (recording the
/// journal of each that has none), then replays every journal.
pub async fn test(
    dir: &Path,
    cache_dir: &Path,
    grants: &GrantSpec,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let wasm = build(dir)?;
    let mut failures = 0;
    let journals = dir.join("journals");
    for scenario in files(&dir.join("tests/runs"), "json")? {
        let name = scenario
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        match run_scenario(
            &wasm,
            &scenario,
            &journals.join(format!("{name}.journal")),
            cache_dir,
            grants,
        )
        .await
        {
            Ok(note) => eprintln!("scenario {name}: ok{note}"),
            Err(e) => {
                failures += 1;
                eprintln!("scenario {name}: FAILED: {e:#}");
            }
        }
    }
    let recorded = files(&journals, "journal")?;
    if !recorded.is_empty() {
        let replayer = Replayer::new(&wasm, cache_dir).await?;
        for report in replayer.replay_paths(&recorded).await? {
            if !report.is_ok() {
                failures += 1;
            }
            if json {
                println!("{}", serde_json::to_value(&report)?);
            } else {
                eprintln!("{}", report.render());
            }
        }
    }
    eprintln!(
        "{} failure(s); {} journal(s) replayed against {}",
        failures,
        recorded.len(),
        wasm.display()
    );
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Drives `run` to its end, and each run that continues it as new to
/// its own: while one waits, resumes the next scripted payload once it
/// waits on its token (`after` it, on `clock`), and fires timers by moving
/// `clock` to when they are due. Returns every link of the chain, the
/// first first (one, for a run that does not continue).
async fn play(
    keel: &Keel,
    clock: &ManualClock,
    run: RunRecord,
    script: &[Scripted],
) -> anyhow::Result<Vec<RunRecord>> {
    let taken = std::sync::atomic::AtomicUsize::new(0);
    let (driven, links) = drive_chain(keel, clock, &run.run_id, script, &taken).await?;
    let run = match driven {
        Driven::Ended(run) => run,
        Driven::Stuck { waits, run } => {
            let next = script.get(taken.load(std::sync::atomic::Ordering::SeqCst));
            let link = match links.len() {
                0 => String::new(),
                n => format!(" (link {} of the chain, run {})", n + 1, run.run_id),
            };
            anyhow::bail!(
                "the run{link} waits on {} and the scenario resumes nothing there{}; add a payload to its `hooks`",
                describe_waits(&waits),
                match next {
                    Some(Scripted::Resume { token, .. }) =>
                        format!(" (its next payload is for `{token}`)"),
                    _ => String::new(),
                }
            )
        }
    };
    if let Some(Scripted::Resume { token, .. }) =
        script.get(taken.load(std::sync::atomic::Ordering::SeqCst))
    {
        anyhow::bail!(
            "the run ended ({}) before it waited on hook `{token}`, which the scenario resumes",
            run.status.as_str()
        );
    }
    Ok(links)
}

/// Runs one scenario on a scratch store; records its journal at `journal`
/// if there is none.
async fn run_scenario(
    wasm: &Path,
    scenario: &Path,
    journal: &Path,
    cache_dir: &Path,
    grants: &GrantSpec,
) -> anyhow::Result<String> {
    let s = Scenario::read(scenario)?;
    let store = std::env::temp_dir().join(format!(
        "keel-test-{}-{}",
        std::process::id(),
        scenario.file_stem().unwrap_or_default().to_string_lossy()
    ));
    let _ = std::fs::remove_dir_all(&store);
    let mut config = Config::caching_in(cache_dir);
    config.grants = keel_host::Grants::of(&grants.with(&s.grants));
    config.step_stubs = s.stubs();
    // The scenario's own clock: time it skips passes at once.
    let clock = s.clock();
    config.clock = clock.clone();
    // Every wait comes back to the scenario, which moves its clock.
    config.park_limit = std::time::Duration::ZERO;
    let result = async {
        let keel = Keel::open_sled(config, &keel_host::store::sled::SledOptions::new(&store))?;
        let loaded = keel.load(wasm).await?;
        s.check(&loaded.manifest)?;
        let run = keel.run(&loaded, &s.workflow, &s.input.to_string()).await?;
        let links = play(&keel, &clock, run, &s.script()).await?;
        let last = links.last().expect("a chain has a link");
        s.check_chain(&links)?;
        s.expected()
            .check(last.status, last.output.as_deref(), last.error.as_ref())
            .map_err(|e| match links.len() {
                1 => e,
                n => e.context(format!(
                    "the chain's last run (link {n} of {n}, run {})",
                    last.run_id
                )),
            })?;
        if journal.exists() {
            return Ok(String::new());
        }
        // Every link's journal: each replays on its own (the first's
        // continuation checked against the input the second started with).
        std::fs::create_dir_all(journal.parent().expect("journals/"))?;
        for (n, link) in links.iter().enumerate() {
            let file =
                keel_host::core::file::JournalFile::new(link, keel.journal(&link.run_id).await?);
            let path = match n {
                0 => journal.to_path_buf(),
                n => journal.with_extension(format!("link{}.journal", n + 1)),
            };
            std::fs::write(path, file.to_bytes())?;
        }
        Ok(format!(
            " (journal recorded in {}: commit it)",
            journal.display()
        ))
    }
    .await;
    let _ = std::fs::remove_dir_all(&store);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs scenario `scenario` (JSON) of the testbed guest, its journals
    /// recorded in `dir`.
    async fn scenario(dir: &Path, scenario: Value) -> anyhow::Result<String> {
        let path = dir.join("countdown.json");
        std::fs::write(&path, scenario.to_string())?;
        run_scenario(
            Path::new(keel_tests::TESTBED),
            &path,
            &dir.join("journals/countdown.journal"),
            &keel_tests::compiled_cache(),
            &GrantSpec::default(),
        )
        .await
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_scenario_tests_a_chain_of_continuations_and_names_the_link_that_differs() {
        let dir = tempfile::tempdir().unwrap();
        // 2, then 1, then 0: three runs, the last returns how many.
        let chain = serde_json::json!({
            "workflow": "countdown",
            "input": [2, 0],
            "continues": [[1, 1], [0, 2]],
            "output": 3,
        });
        scenario(dir.path(), chain.clone()).await.unwrap();
        for journal in ["countdown", "countdown.link2", "countdown.link3"] {
            let path = dir.path().join(format!("journals/{journal}.journal"));
            assert!(path.is_file(), "{} recorded", path.display());
        }
        let mut wrong_input = chain.clone();
        wrong_input["continues"] = serde_json::json!([[1, 1], [0, 9]]);
        let e = scenario(dir.path(), wrong_input).await.unwrap_err();
        assert!(format!("{e:#}").contains("link 3 of the chain"), "{e:#}");
        let mut wrong_output = chain;
        wrong_output["output"] = 7.into();
        let e = format!(
            "{:#}",
            scenario(dir.path(), wrong_output).await.unwrap_err()
        );
        assert!(
            e.contains("link 3 of 3") && e.contains("expected output 7, got 3"),
            "{e}"
        );
    }
}
