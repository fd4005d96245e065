//! `keel new` end to end: a crate created outside the workspace builds
//! with a plain `cargo build`, its workflow runs with `keel run`, and
//! `keel test` records its scenario's journal, replays it, and fails once
//! the workflow changes in a way that breaks recorded runs.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn keel(dir: &Path, args: &[&str]) -> Output {
    common::keel_command()
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running keel")
}

/// The workspace's target directory: the new crate's dependencies are
/// already built there.
fn target_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_new_crate_builds_runs_and_passes_its_replay_test() {
    let parent = tempfile::tempdir().unwrap();
    let out = keel(parent.path(), &["new", "hello-keel"]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = parent.path().join("hello-keel");
    for file in [
        "Cargo.toml",
        ".cargo/config.toml",
        "rust-toolchain.toml",
        "src/lib.rs",
        "tests/runs/greet.json",
        "README.md",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not created");
    }
    // The SDK is required by version, as a published crate would be, and
    // taken from this checkout by a patch the author can delete.
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let required = format!("keel-sdk = \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(manifest.contains(&required), "{manifest}");
    let patch = manifest
        .split("\n[patch.crates-io]\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{manifest}"));
    assert!(patch.contains("keel-sdk = { path = "), "{manifest}");
    let again = keel(parent.path(), &["new", "hello-keel"]);
    assert!(!again.status.success(), "an existing folder is refused");
    assert!(
        dir.join(".git").is_dir(),
        "a git repository, as cargo new makes"
    );

    // The crate's files are made as the user's umask says, not private
    // like the store.
    let shared = parent.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"umask 022 && exec "$0" new shared-keel"#)
        .arg(env!("CARGO_BIN_EXE_keel"))
        .current_dir(&shared)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(shared.join("shared-keel").join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("Cargo.toml"), 0o644);
    assert_eq!(mode("src"), 0o755);

    // A plain `cargo build` produces the component.
    let build = Command::new("cargo")
        .arg("build")
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .unwrap();
    assert!(build.status.success(), "{}", text(&build));
    let wasm = target_dir().join("wasm32-wasip2/debug/hello_keel.wasm");
    assert!(wasm.is_file());

    let db = parent.path().join("db");
    let run = keel(
        &dir,
        &[
            "--db",
            db.to_str().unwrap(),
            "--json",
            "run",
            wasm.to_str().unwrap(),
            "greet",
            "--input",
            r#"{"name": "Ada"}"#,
        ],
    );
    assert!(run.status.success(), "{}", text(&run));
    let run: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(run["output"], "HELLO, ADA!");

    // Its workflow survives a crash at every journal write.
    let crashed = keel(
        &dir,
        &[
            "--json",
            "crashtest",
            wasm.to_str().unwrap(),
            "greet",
            "--input",
            r#"{"name": "Ada"}"#,
        ],
    );
    assert!(crashed.status.success(), "{}", text(&crashed));
    let report: serde_json::Value = serde_json::from_slice(&crashed.stdout).unwrap();
    assert_eq!(report["passed"], true);
    assert_eq!(report["clean"]["output"], "\"HELLO, ADA!\"");
    // Its two steps make no effect: journaled with the run's end, which
    // the crash loses (both run again, with the same step IDs) or keeps.
    assert_eq!(report["clean"]["journal_writes"], 1, "{report}");
    assert_eq!(report["points"].as_array().unwrap().len(), 2, "{report}");

    // The first `keel test` records the scenario's journal; the next replays it.
    let component = target_dir().join("wasm32-wasip2/release/hello_keel.wasm");
    records_then_replays(&dir, Some(&component));

    // A scenario naming a workflow the crate does not export is told so.
    let typo = dir.join("tests/runs/typo.json");
    std::fs::write(&typo, r#"{"workflow": "greett", "input": null}"#).unwrap();
    let wrong = keel(&dir, &["test"]);
    assert!(!wrong.status.success());
    let report = text(&wrong);
    assert!(
        report.contains("the crate exports no workflow `greett`; name one of `greet`"),
        "{report}"
    );
    assert!(!report.contains("deploy"), "no deployment advice: {report}");
    std::fs::remove_file(&typo).unwrap();

    // Steps called in another order: recorded runs would break.
    let lib = dir.join("src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap().replace(
        "    let text = compose(greeting).await?;\n    let loud = shout(text).await?;\n    Ok(loud)",
        "    let loud = shout(greeting.name.clone()).await?;\n    let text = compose(greeting).await?;\n    Ok(format!(\"{loud} {text}\"))",
    );
    std::fs::write(&lib, code).unwrap();
    diverges_naming_both_steps(&dir);
}

/// The first `keel test` in `dir` records the `greet` scenario's journal;
/// the next replays it.
/// With `component` (the build's output), the second `keel test` finds it
/// up to date and does not write it again.
fn records_then_replays(dir: &Path, component: Option<&Path>) {
    let first = keel(dir, &["test"]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("journal recorded"),
        "{}",
        text(&first)
    );
    assert!(dir.join("journals/greet.journal").is_file());
    let modified = |c: &Path| std::fs::metadata(c).and_then(|m| m.modified()).unwrap();
    let built = component.map(modified);
    let second = keel(dir, &["test"]);
    assert_eq!(
        component.map(modified),
        built,
        "an unchanged project is not built again"
    );
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("ok    ./journals/greet.journal"),
        "{}",
        text(&second)
    );
}

/// `keel test` in `dir`, whose workflow now calls `shout` before
/// `compose`, fails naming both.
fn diverges_naming_both_steps(dir: &Path) {
    let broken = keel(dir, &["test"]);
    assert!(!broken.status.success());
    let report = text(&broken);
    assert!(report.contains("DIVERGED"), "{report}");
    assert!(
        report.contains("step `compose`") && report.contains("step `shout`"),
        "{report}"
    );
}

/// A signup workflow as a user writes one: an HTTP step keyed by its step
/// ID, a day's durable sleep, then a person's approval on a hook.
const SIGNUP: &str = r#"
use std::time::Duration;

use keel_sdk::http::{Body, Client, Request};
use keel_sdk::{Error, StepError, create_hook, step, workflow};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Signup {
    pub email: String,
    pub api: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Approval {
    pub approved: bool,
}

#[step(max_retries = 2, initial_backoff = "100ms")]
async fn register(signup: Signup) -> Result<String, StepError> {
    let meta = keel_sdk::step_metadata();
    let body = serde_json::json!({"user_id": signup.email, "amount": 0});
    let request = Request::post(format!("{}/charge", signup.api))
        .header("Idempotency-Key", &meta.step_id)
        .header("Content-Type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(StepError::fatal)?;
    let mut response = Client::new().send(request).await.map_err(StepError::retryable)?;
    let answer: serde_json::Value = response.body_mut().json().await.map_err(StepError::retryable)?;
    Ok(answer["charge_id"].as_str().unwrap_or("?").to_string())
}

#[workflow]
async fn signup(signup: Signup) -> Result<String, Error> {
    let account = register(signup.clone()).await?;
    keel_sdk::sleep(Duration::from_secs(24 * 3600)).await;
    let mut approval = create_hook::<Approval>(format!("approve:{}", signup.email))?;
    let decision = approval.next().await?;
    let account = if account.starts_with("ch_") { "registered" } else { "unregistered" };
    Ok(format!("{account}:{}", if decision.approved { "approved" } else { "declined" }))
}

keel_sdk::component!(workflows = [signup], steps = [register]);
"#;

#[test]
fn a_scenario_grants_http_skips_a_days_sleep_and_scripts_a_hook_payload() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(false))
        .unwrap();
    let parent = tempfile::tempdir().unwrap();
    let out = keel(parent.path(), &["new", "signup-flow"]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = parent.path().join("signup-flow");
    std::fs::write(dir.join("src/lib.rs"), SIGNUP).unwrap();
    std::fs::remove_file(dir.join("tests/runs/greet.json")).unwrap();
    let scenario = |hooks: serde_json::Value| {
        serde_json::json!({
            "workflow": "signup",
            "input": {"email": "ada@example.com", "api": api.url("")},
            "grants": {"http": [api.addr.to_string()]},
            "hooks": hooks,
            "output": "registered:approved",
        })
        .to_string()
    };
    let approve = serde_json::json!([
        {"token": "approve:ada@example.com", "payload": {"approved": true}, "after": "2 days"}
    ]);
    std::fs::write(dir.join("tests/runs/signup.json"), scenario(approve)).unwrap();

    // The step reaches the granted API, the day passes on the scenario's
    // clock, the payload comes when the run waits for it.
    let first = keel(&dir, &["test"]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("scenario signup: ok"),
        "{}",
        text(&first)
    );
    let charges = api.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert!(
        charges[0].0.ends_with("-0"),
        "keyed by the step ID: {charges:?}"
    );
    // Its recorded journal replays.
    assert!(dir.join("journals/signup.journal").is_file());
    let second = keel(&dir, &["test"]);
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("ok    ./journals/signup.journal"),
        "{}",
        text(&second)
    );

    // The same scenario crash-tested: at every journal write, the run
    // recovers to the same output, its charge made once per step ID.
    let charged = api.charges().len();
    let crashed = keel(
        &dir,
        &[
            "crashtest",
            ".",
            "--scenario",
            "tests/runs/signup.json",
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_slice(&crashed.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&crashed)));
    assert!(crashed.status.success(), "{report}");
    assert_eq!(
        report["clean"]["output"], "\"registered:approved\"",
        "{report}"
    );
    let points = report["points"].as_array().unwrap();
    assert!(points.len() >= 8, "{report}");
    let ends: Vec<&str> = points
        .iter()
        .map(|p| p["journal_ends_with"].as_str().unwrap())
        .collect();
    for kind in ["step_attempt_started", "timer_fired", "hook_received"] {
        assert!(ends.contains(&kind), "a crash after {kind}: {ends:?}");
    }
    // Every trial is the same run (the same step IDs): all of them made
    // one charge between them.
    let after = api.charges();
    assert_eq!(after.len(), charged + 1, "{after:?}");
    // A scenario that expects another output fails the crash test too.
    let mut wrong: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tests/runs/signup.json")).unwrap())
            .unwrap();
    wrong["output"] = "registered:declined".into();
    std::fs::write(dir.join("tests/runs/wrong.json"), wrong.to_string()).unwrap();
    let refused = keel(
        &dir,
        &[
            "crashtest",
            ".",
            "--scenario",
            "tests/runs/wrong.json",
            "--json",
        ],
    );
    assert!(!refused.status.success());
    let report: serde_json::Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert!(
        report["unexpected"]
            .as_str()
            .is_some_and(|u| u.contains("registered:declined")),
        "{report}"
    );
    std::fs::remove_file(dir.join("tests/runs/wrong.json")).unwrap();

    // A step stubbed with a recorded output does not run: with no grant and
    // no API at its address, it would fail.
    let stubbed = serde_json::json!({
        "workflow": "signup",
        "input": {"email": "bob@example.com", "api": "http://127.0.0.1:9"},
        "stubs": {"register": "ch_recorded"},
        "hooks": [{"token": "approve:bob@example.com", "payload": {"approved": true}}],
        "output": "registered:approved",
    });
    std::fs::write(dir.join("tests/runs/stubbed.json"), stubbed.to_string()).unwrap();
    let charged = api.charges().len();
    let out = keel(&dir, &["test"]);
    assert!(
        out.status.success() && text(&out).contains("scenario stubbed: ok"),
        "{}",
        text(&out)
    );
    assert_eq!(
        api.charges().len(),
        charged + 1,
        "the signup scenario charged again, the stubbed one did not"
    );
    let mut unknown = stubbed.clone();
    unknown["stubs"] = serde_json::json!({"charge": "x"});
    std::fs::write(dir.join("tests/runs/stubbed.json"), unknown.to_string()).unwrap();
    let out = keel(&dir, &["test"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains(
            "stubs step `charge`, which the crate does not export; its steps are `register`"
        ),
        "{}",
        text(&out)
    );
    std::fs::remove_file(dir.join("tests/runs/stubbed.json")).unwrap();
    let _ = std::fs::remove_file(dir.join("journals/stubbed.journal"));

    // Without the payload, the scenario says what the run waits on.
    std::fs::remove_file(dir.join("journals/signup.journal")).unwrap();
    std::fs::write(
        dir.join("tests/runs/signup.json"),
        scenario(serde_json::json!([])),
    )
    .unwrap();
    let stuck = keel(&dir, &["test"]);
    assert!(!stuck.status.success());
    assert!(
        text(&stuck).contains("waits on hook `approve:ada@example.com`"),
        "{}",
        text(&stuck)
    );
}

/// `keel new --lang python`, installed as its README says (a venv with
/// the pinned componentize-py and the SDK), then `keel test`: the scenario
/// records its journal, replays, and a change that calls the steps in
/// another order fails naming both.
#[test]
fn a_new_python_project_passes_keel_test_and_catches_a_breaking_change() {
    let parent = tempfile::tempdir().unwrap();
    let out = keel(parent.path(), &["new", "hello-py", "--lang", "python"]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = parent.path().join("hello-py");
    for file in [
        "app.py",
        "requirements.txt",
        "tests/runs/greet.json",
        "README.md",
    ] {
        assert!(dir.join(file).is_file(), "{file} was not created");
    }
    let venv = Command::new("python3")
        .args(["-m", "venv", ".venv"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(venv.status.success(), "{}", text(&venv));
    let pip = Command::new(dir.join(".venv/bin/pip"))
        .args([
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            "requirements.txt",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(pip.status.success(), "{}", text(&pip));

    let component = dir.join("build/hello_py.wasm");
    records_then_replays(&dir, Some(&component));
    assert!(dir.join("build/hello_py.wasm.inputs").is_file());

    let app = dir.join("app.py");
    let code = std::fs::read_to_string(&app).unwrap().replace(
        "    return await shout(await compose(person))",
        "    loud = await shout(person.name)\n    return await compose(Person(loud))",
    );
    std::fs::write(&app, code).unwrap();
    diverges_naming_both_steps(&dir);
}
