//! The `keel` binary's contract: `--json` shapes, exit codes and errors.

mod common;

use common::{keel, keel_text, socket_worker};

use std::process::Output;

use serde_json::Value;

#[test]
fn run_show_and_list_print_the_documented_json() {
    let db = tempfile::tempdir().unwrap();
    let (out, run) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "3"],
    );
    assert!(out.status.success());
    assert_eq!(run["workflow"], "ten_steps");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"], 3);
    assert_eq!(run["error"], Value::Null);
    let run_id = run["run_id"].as_str().unwrap();

    let (_, shown) = keel(db.path(), &["runs", "show", run_id]);
    assert_eq!(shown["run"]["run_id"], run_id);
    let journal = shown["journal"].as_array().unwrap();
    let steps: Vec<_> = journal
        .iter()
        .filter(|e| e["kind"] == "step_scheduled")
        .collect();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[1]["step_name"], "noop");
    assert_eq!(steps[1]["step_id"], format!("{run_id}-noop-1"));
    assert_eq!(journal.last().unwrap()["kind"], "run_completed");

    let (_, list) = keel(db.path(), &["runs", "list"]);
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
    assert!(list["next_cursor"].is_null(), "{list}");

    let (out, worker) = keel(db.path(), &["worker", "--until-idle"]);
    assert!(out.status.success());
    // The ended run is not driven again; the only runs a worker may drive
    // are fires of the testbed's hourly schedule, declared by the deploy,
    // when the test crosses the top of an hour.
    let (_, list) = keel(db.path(), &["runs", "list"]);
    let others: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["run_id"].as_str())
        .filter(|id| *id != run_id)
        .collect();
    assert!(
        others.iter().all(|id| id.starts_with("testbed.hourly:")),
        "{others:?}"
    );
    assert_eq!(worker["driven"], others.len());
}

#[test]
fn failures_print_a_kind_and_exit_non_zero() {
    let db = tempfile::tempdir().unwrap();
    let (out, err) = keel(db.path(), &["run", keel_tests::TESTBED, "nope"]);
    assert!(!out.status.success());
    assert_eq!(err["error"]["kind"], "unknown_workflow");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ten_steps")
    );

    let (out, err) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "{oops"],
    );
    assert!(!out.status.success());
    assert_eq!(err["error"]["kind"], "invalid_input");
    // The library says what is wrong; the CLI adds what to type.
    assert!(
        !err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--input")
    );
    assert!(
        err["error"]["hint"].as_str().unwrap().contains("--input"),
        "{err}"
    );

    let (out, err) = keel(db.path(), &["runs", "show", "no-such-run"]);
    assert!(!out.status.success());
    assert_eq!(err["error"]["kind"], "run_not_found");
    assert!(
        err["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("keel runs list"),
        "{err}"
    );

    let (out, run) = keel(db.path(), &["run", keel_tests::TESTBED, "trap"]);
    assert!(!out.status.success());
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"]["kind"], "guest_trap");
}

#[test]
fn inspect_lists_workflows_steps_and_stubbed_imports() {
    let db = tempfile::tempdir().unwrap();
    let (_, info) = keel(db.path(), &["inspect", keel_tests::ORDER]);
    assert_eq!(info["workflows"][0]["name"], "process_order");
    assert_eq!(info["workflows"][0]["idempotency"], Value::Null);
    assert_eq!(info["steps"][1]["name"], "charge_user");
    assert_eq!(info["steps"][1]["retry"]["max_retries"], 3);
    assert_eq!(info["steps"][1]["retry"]["initial_backoff_ms"], 100);
    let stubbed = info["stubbed_in_workflows"].as_array().unwrap();
    assert!(stubbed.iter().any(|s| {
        s.as_str()
            .unwrap()
            .starts_with("wasi:http/outgoing-handler")
    }));
}

#[test]
fn journal_export_then_replay_reports_ok_or_the_divergence() {
    let db = tempfile::tempdir().unwrap();
    let (_, run) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "two_steps", "--input", "4"],
    );
    let run_id = run["run_id"].as_str().unwrap();
    let file = db.path().join("two_steps.journal");
    let out = common::keel_command()
        .args([
            "--db",
            db.path().to_str().unwrap(),
            "journal",
            "export",
            run_id,
            "-o",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!("exported run {run_id}: ")) && said.contains("journal entries"),
        "an export says what it wrote: {said}"
    );
    let (_, exported) = keel(
        db.path(),
        &["journal", "export", run_id, "-o", file.to_str().unwrap()],
    );
    assert_eq!(exported["run_id"], run_id, "{exported}");
    assert!(exported["entries"].as_u64().unwrap() > 4, "{exported}");

    let (out, reports) = keel(
        db.path(),
        &["replay", keel_tests::TESTBED, file.to_str().unwrap()],
    );
    assert!(out.status.success());
    assert_eq!(reports[0]["verdict"], "ok");
    assert_eq!(reports[0]["output"], "[5,8]");

    let (out, reports) = keel(
        db.path(),
        &[
            "replay",
            keel_tests::TESTBED_REORDERED,
            file.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert_eq!(reports[0]["verdict"], "diverged");
    assert_eq!(reports[0]["position"], 0);
    assert_eq!(reports[0]["recorded"]["step_name"], "add");
    assert_eq!(reports[0]["requested"]["step_name"], "mul");

    let other = tempfile::tempdir().unwrap();
    let (out, imported) = keel(other.path(), &["journal", "import", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(imported["run_id"], run_id);
    let (_, shown) = keel(other.path(), &["runs", "show", run_id]);
    assert_eq!(
        shown["journal"].as_array().unwrap().len(),
        run_journal_len(db.path(), run_id)
    );
}

fn run_journal_len(db: &std::path::Path, run_id: &str) -> usize {
    let (_, shown) = keel(db, &["runs", "show", run_id]);
    shown["journal"].as_array().unwrap().len()
}

#[test]
fn events_keys_and_results_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let (_, info) = keel(db.path(), &["inspect", keel_tests::TESTBED]);
    let task = info["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "idempotent_task")
        .unwrap()
        .clone();
    assert_eq!(task["idempotency"]["key"], "input.id");
    assert_eq!(task["idempotency"]["ttl_ms"], 60_000);
    assert_eq!(task["on_events"][0], "idempotency:example");
    // Inspecting reads the file and stores nothing: a deploy subscribes
    // the workflows to their events.
    let (_, events) = keel(db.path(), &["events", "push", "idempotency:example"]);
    assert_eq!(events["outcomes"], serde_json::json!([]), "{events}");
    let (out, _) = keel(db.path(), &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success());

    let push = [
        "events",
        "push",
        "idempotency:example",
        "--payload",
        r#"{"id": "cli"}"#,
    ];
    let (out, first) = keel(db.path(), &push);
    assert!(out.status.success());
    let run_id = first["outcomes"][0]["run_id"].as_str().unwrap().to_string();
    let (_, second) = keel(db.path(), &push);
    assert_eq!(second["outcomes"][0]["deduplicated"], true);
    assert_eq!(second["outcomes"][0]["run_id"], run_id.as_str());
    let (_, events) = keel(db.path(), &["events", "list"]);
    assert_eq!(
        events.as_array().unwrap().len(),
        3,
        "the first, with no subscriber, too"
    );

    let (out, result) = keel(db.path(), &["runs", "result", &run_id, "--wait"]);
    assert!(out.status.success());
    assert_eq!(result["output"]["result"], "Hello, world from task cli");

    let args = [
        "run",
        keel_tests::TESTBED,
        "idempotent_task",
        "--input",
        r#"{"id": "cli"}"#,
    ];
    let (out, err) = keel(db.path(), &args);
    assert!(!out.status.success());
    assert_eq!(err["error"]["kind"], "idempotency_collision");
    assert_eq!(err["error"]["existing_run_id"], run_id.as_str());
}

#[test]
fn start_tokens_hooks_and_cancel_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let guest = keel_tests::ORDER_HOOKS;
    let input = r#"{"order_id": "c1", "note": "first"}"#;
    let start = |input: &str, extra: &[&str]| {
        let mut args = vec!["start", guest, "order_updates", "--input", input];
        args.extend_from_slice(extra);
        keel(db.path(), &args)
    };
    let (out, owner) = start(
        input,
        &[
            "--token",
            "order:c1",
            "--retention",
            "30 days",
            "--metadata",
            r#"{"order_id": "c1"}"#,
        ],
    );
    assert!(out.status.success());
    assert_eq!(owner["status"], "waiting");
    let owner_id = owner["run_id"].as_str().unwrap();

    let (out, dup) = start(input, &["--token", "order:c1"]);
    assert!(!out.status.success());
    assert_eq!(dup["error"]["kind"], "hook_conflict");
    assert_eq!(dup["error"]["conflicting_run_id"], owner_id);

    let (_, hook) = keel(db.path(), &["hooks", "get", "order:c1"]);
    assert_eq!(hook["run_id"], owner_id);
    assert_eq!(hook["active"], true);
    assert_eq!(hook["metadata"]["order_id"], "c1");
    assert!(hook["retain_until_ms"].as_u64().unwrap() > hook["created_at_ms"].as_u64().unwrap());

    let (out, resumed) = keel(
        db.path(),
        &[
            "hooks",
            "resume",
            "order:c1",
            "--payload",
            r#"{"note": "second", "done": true}"#,
        ],
    );
    assert!(out.status.success());
    assert_eq!(resumed["run_id"], owner_id);
    assert_eq!(resumed["status"], "completed");
    assert_eq!(resumed["output"], serde_json::json!(["first", "second"]));

    let (_, got) = keel(db.path(), &["runs", "get", owner_id]);
    assert_eq!(got["status"], "completed");
    let (_, held) = keel(db.path(), &["hooks", "list"]);
    assert_eq!(held[0]["token"], "order:c1");
    assert_eq!(held.as_array().unwrap().len(), 1);
    let (_, kept) = keel(db.path(), &["hooks", "get", "order:c1"]);
    assert_eq!(kept["active"], false, "kept for its retention");
    let (out, gone) = keel(db.path(), &["hooks", "resume", "order:c1"]);
    assert!(!out.status.success());
    assert_eq!(gone["error"]["kind"], "hook_not_found");

    let input = r#"{"order_id": "c2", "note": "first"}"#;
    let (_, other) = start(input, &["--token", "order:c2"]);
    assert_eq!(other["status"], "waiting");
    let other_id = other["run_id"].as_str().unwrap();
    let (out, cancelled) = keel(db.path(), &["runs", "cancel", other_id]);
    assert!(out.status.success());
    assert_eq!(cancelled["status"], "cancelled");
    let (out, _) = start(input, &["--token", "order:c2"]);
    assert!(out.status.success(), "cancelling released the token");
}

/// A `keel worker` process, killed when dropped.
#[test]
fn commands_reach_a_running_worker_through_its_socket() {
    let db = tempfile::tempdir().unwrap();
    let guest = keel_tests::ORDER_HOOKS;
    // Load the component once, so the worker's store holds it.
    let (out, _) = keel(db.path(), &["inspect", guest]);
    assert!(out.status.success());
    let _worker = socket_worker(db.path());
    let socket = db.path().join("control/control.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Only the store's owner can reach the socket, from its creation on: it
    // is bound inside a 0700 directory (and made 0600 right after).
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode();
    let dir_mode = mode(socket.parent().unwrap());
    assert_eq!(dir_mode & 0o777, 0o700, "{dir_mode:o}");
    while mode(&socket) & 0o077 != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the socket stayed open to others: {:o}",
            mode(&socket)
        );
        std::thread::yield_now();
    }

    let input = r#"{"order_id": "w1", "note": "first"}"#;
    let start = [
        "start",
        guest,
        "order_updates",
        "--input",
        input,
        "--token",
        "order:w1",
    ];
    let (out, owner) = keel(db.path(), &start);
    assert!(out.status.success(), "{owner}");
    assert_eq!(owner["status"], "waiting");
    let owner_id = owner["run_id"].as_str().unwrap();

    let (out, dup) = keel(db.path(), &start);
    assert!(!out.status.success());
    assert_eq!(dup["error"]["kind"], "hook_conflict");
    assert_eq!(dup["error"]["conflicting_run_id"], owner_id);

    let (_, hook) = keel(db.path(), &["hooks", "get", "order:w1"]);
    assert_eq!(hook["run_id"], owner_id);
    let payload = r#"{"note": "second", "done": true}"#;
    let (out, done) = keel(
        db.path(),
        &["hooks", "resume", "order:w1", "--payload", payload],
    );
    assert!(out.status.success(), "{done}");
    assert_eq!(done["output"], serde_json::json!(["first", "second"]));
    let (_, got) = keel(db.path(), &["runs", "get", owner_id]);
    assert_eq!(got["status"], "completed");
    let (_, list) = keel(db.path(), &["runs", "list"]);
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
    let (_, shown) = keel(db.path(), &["runs", "show", owner_id]);
    let journal = shown["journal"].as_array().unwrap();
    assert!(journal.iter().any(|e| e["kind"] == "hook_received"));
    let (_, result) = keel(db.path(), &["runs", "result", owner_id, "--wait"]);
    assert_eq!(result["output"], serde_json::json!(["first", "second"]));
}

#[test]
fn a_worker_until_idle_gives_up_on_a_run_it_cannot_drive() {
    let db = tempfile::tempdir().unwrap();
    // A live run whose component this store does not hold.
    let file = db.path().join("orphan.json");
    let journal = serde_json::json!({
        "header": {"format_version": 1, "run": {
            "run_id": "orphan", "workflow": "w", "component_hash": "0000",
            "input": "null", "status": "pending", "output": null, "error": null,
            "created_at_ms": 1, "updated_at_ms": 1, "wake_at_ms": null}},
        "entries": [{"seq": 0, "at_ms": 1, "kind": "run_started", "workflow": "w", "input": "null"}]
    });
    std::fs::write(&file, journal.to_string()).unwrap();
    let (out, imported) = keel(db.path(), &["journal", "import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{imported}");
    let mut worker = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args(["--json", "worker", "--until-idle"])
        .env("RUST_BACKTRACE", "0")
        .env("KEEL_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while worker.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            worker.kill().unwrap();
            panic!("the worker never became idle");
        }
        std::thread::yield_now();
    }
    let out = worker.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "a run it could not drive fails the worker"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(summary["undriven"][0]["run_id"], "orphan", "{stdout}");
    assert!(
        summary["undriven"][0]["error"]
            .as_str()
            .unwrap()
            .contains("0000"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let attempts = stderr.matches("could not drive").count();
    assert!(attempts >= 1, "{stderr}");
    assert!(attempts <= 8, "{attempts} attempts: {stderr}");
    assert!(stderr.contains("no component with hash 0000"), "{stderr}");
}

#[test]
fn a_stale_worker_socket_is_removed_and_the_lock_reported() {
    let db = tempfile::tempdir().unwrap();
    // Another process holds the store: this one.
    let _held = keel_host::store::sled::SledStore::open(db.path()).unwrap();
    // A worker that is gone left its socket behind.
    let socket = db.path().join("control/control.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let (out, listed) = keel(db.path(), &["runs", "list"]);
    assert!(!out.status.success());
    assert_eq!(listed["error"]["kind"], "store_locked", "{listed}");
    assert!(
        listed["error"]["hint"].as_str().unwrap().contains("--db"),
        "{listed}"
    );
    assert!(!socket.exists(), "the stale socket is still there");
}

#[test]
fn result_wait_without_a_worker_refuses_a_run_that_waits_for_a_hook() {
    let db = tempfile::tempdir().unwrap();
    let order = r#"{"order_id": "o-1", "note": "placed"}"#;
    let (out, run) = keel(
        db.path(),
        &[
            "start",
            keel_tests::ORDER_HOOKS,
            "order_updates",
            "--input",
            order,
            "--token",
            "order:o-1",
        ],
    );
    assert!(out.status.success(), "{run}");
    assert_eq!(run["status"], "waiting");
    let run_id = run["run_id"].as_str().unwrap();
    let (out, refused) = keel(db.path(), &["runs", "result", run_id, "--wait"]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "needs_worker");
    assert!(
        refused["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("keel hooks resume")
    );
    // The store was released: the resume that moves the run on is accepted.
    let (out, resumed) = keel(
        db.path(),
        &[
            "hooks",
            "resume",
            "order:o-1",
            "--payload",
            r#"{"note": "paid", "done": true}"#,
        ],
    );
    assert!(out.status.success(), "{resumed}");
    let (out, result) = keel(db.path(), &["runs", "result", run_id, "--wait"]);
    assert!(out.status.success());
    assert_eq!(result["output"], serde_json::json!(["placed", "paid"]));
}

#[test]
fn cancelling_a_run_that_already_ended_fails() {
    let db = tempfile::tempdir().unwrap();
    let (_, run) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "2"],
    );
    let run_id = run["run_id"].as_str().unwrap();
    let (out, refused) = keel(db.path(), &["runs", "cancel", run_id]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "run_ended");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("completed")
    );
    // Cancelled once, a second cancel is refused too.
    let (_, asleep) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "sleeper", "--input", "36000000"],
    );
    let asleep_id = asleep["run_id"].as_str().unwrap();
    let (out, cancelled) = keel(db.path(), &["runs", "cancel", asleep_id]);
    assert!(out.status.success(), "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let (out, again) = keel(db.path(), &["runs", "cancel", asleep_id]);
    assert!(!out.status.success(), "{again}");
    assert_eq!(again["error"]["kind"], "run_ended", "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("(cancelled)"),
        "{again}"
    );
}

#[test]
fn runs_list_filters_by_status_and_workflow() {
    let db = tempfile::tempdir().unwrap();
    keel(
        db.path(),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "1"],
    );
    let (_, trapped) = keel(db.path(), &["run", "testbed", "trap"]);
    assert_eq!(trapped["status"], "failed");
    let (_, failed) = keel(db.path(), &["runs", "list", "--status", "failed"]);
    let failed = failed["runs"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["run_id"], trapped["run_id"]);
    let (_, by_workflow) = keel(db.path(), &["runs", "list", "--workflow", "ten_steps"]);
    assert_eq!(by_workflow["runs"].as_array().unwrap().len(), 1);
    let (_, recent) = keel(
        db.path(),
        &["runs", "list", "--since", "1h", "--limit", "1"],
    );
    assert_eq!(recent["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        recent["runs"][0]["run_id"], trapped["run_id"],
        "newest first"
    );
    // More than a page asks: the rest is named by its cursor, and lists.
    let cursor = recent["next_cursor"]
        .as_str()
        .expect("a cursor to the rest");
    let (_, rest) = keel(db.path(), &["runs", "list", "--before", cursor]);
    let rest = rest["runs"].as_array().unwrap();
    assert_eq!(rest.len(), 1);
    assert_ne!(rest[0]["run_id"], trapped["run_id"]);
    let out = common::keel_command()
        .args([
            "--db",
            db.path().to_str().unwrap(),
            "--json",
            "runs",
            "list",
            "--all",
        ])
        .output()
        .unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one JSON line per run");
    assert_eq!(lines[0]["run_id"], trapped["run_id"]);
    // Attributes from `--attr` and from the workflow, filtered together.
    for tenant in ["acme", "globex"] {
        let input = format!("\"{tenant}\"");
        let (out, run) = keel(
            db.path(),
            &[
                "run", "testbed", "tagged", "--input", &input, "--attr", "plan=pro",
            ],
        );
        assert!(out.status.success(), "{run}");
        assert_eq!(run["attributes"]["plan"], "pro", "{run}");
    }
    let (_, acme) = keel(
        db.path(),
        &[
            "runs",
            "list",
            "--attr",
            "tenant=acme",
            "--attr",
            "plan=pro",
        ],
    );
    let acme = acme["runs"].as_array().unwrap();
    assert_eq!(acme.len(), 1, "{acme:?}");
    assert_eq!(acme[0]["attributes"]["stage"], "done");
    let (out, refused) = keel(db.path(), &["runs", "list", "--attr", "tenant"]);
    assert!(!out.status.success());
    assert!(refused.to_string().contains("not KEY=VALUE"), "{refused}");
    let out = common::keel_command()
        .args([
            "--db",
            db.path().to_str().unwrap(),
            "runs",
            "list",
            "--status",
            "done",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains("invalid value 'done' for '--status <STATUS>'"),
        "{error}"
    );
    // Every status, the two that once went unlisted included.
    assert!(
        error.contains(
            "possible values: pending, running, waiting, completed, failed, cancelled, scheduled, queued"
        ),
        "{error}"
    );
}

#[test]
fn runs_show_prints_a_timeline_with_step_names_and_durations() {
    let db = tempfile::tempdir().unwrap();
    let (_, run) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "3"],
    );
    let run_id = run["run_id"].as_str().unwrap();
    let out = common::keel_command()
        .args(["--db", db.path().to_str().unwrap(), "runs", "show", run_id])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("step"))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for (i, row) in rows.iter().enumerate() {
        assert!(row.contains("noop") && row.contains("completed"), "{row}");
        assert!(row.contains(&format!("{run_id}-noop-{i}")), "{row}");
        assert!(row.contains("ms"), "a duration: {row}");
    }
    assert!(text.contains("started 20"), "a readable start time: {text}");
}

#[test]
fn a_delayed_run_shows_when_it_starts_not_a_running_time() {
    let db = tempfile::tempdir().unwrap();
    let (_, run) = keel(
        db.path(),
        &[
            "start",
            keel_tests::TESTBED,
            "ten_steps",
            "--input",
            "3",
            "--delay",
            "2h",
            "--run-id",
            "a-run-id-longer-than-a-uuid-as-schedule-fires-have",
        ],
    );
    assert_eq!(run["status"], "scheduled", "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let text = keel_text(db.path(), &["runs", "show", run_id]);
    assert!(
        text.contains("admitted 20") && text.contains(", starts 20") && text.contains("(in 1h"),
        "when it was admitted and when it starts: {text}"
    );
    assert!(!text.contains("running for"), "it is not running: {text}");
    assert!(
        text.contains("timeline: empty: the run has not started"),
        "{text}"
    );
    // The list keeps its columns for a long ID, and says when it starts.
    let text = keel_text(db.path(), &["runs", "list"]);
    let mut lines = text.lines();
    let (header, row) = (lines.next().unwrap(), lines.next().unwrap());
    assert_eq!(header.find("STATUS"), row.find("scheduled"), "{text}");
    assert!(
        row.trim_end()
            .ends_with(&row[row.rfind("in 1h").unwrap()..]),
        "{text}"
    );
}

#[test]
fn a_deployments_retention_is_shown() {
    let db = tempfile::tempdir().unwrap();
    let show = |db: &std::path::Path| keel_text(db, &["deployments", "show", "testbed"]);
    let (out, _) = keel(db.path(), &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success());
    let text = show(db.path());
    assert!(text.contains("retention: the worker's"), "{text}");
    let (out, _) = keel(
        db.path(),
        &["deploy", keel_tests::TESTBED, "--retention", "7days"],
    );
    assert!(out.status.success());
    let text = show(db.path());
    assert!(
        text.contains("retention: ended runs are kept 7days"),
        "{text}"
    );
}

#[test]
fn completions_are_printed_and_a_closed_pipe_ends_quietly() {
    let out = common::keel_command()
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("_keel()") && script.contains("deployments"),
        "{script}"
    );

    // The reader goes away before keel writes: no panic, nothing on stderr.
    let mut child = common::keel_command()
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn every_argument_has_help_text() {
    use std::collections::VecDeque;
    let mut commands = VecDeque::from([vec![]]);
    while let Some(path) = commands.pop_front() {
        let out = common::keel_command()
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout).to_string();
        let mut section = "";
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.ends_with(':') && !line.starts_with(' ') {
                section = line;
                continue;
            }
            let entry = line.trim_start();
            if entry.is_empty() || !line.starts_with("  ") || line.starts_with("          ") {
                continue;
            }
            // Help follows the name on its line, or on the next, indented.
            let same_line = entry.split("  ").filter(|p| !p.trim().is_empty()).count() > 1;
            let next_line = lines
                .get(i + 1)
                .is_some_and(|l| l.starts_with("          ") && !l.trim().is_empty());
            assert!(
                same_line || next_line,
                "keel {} --help: `{entry}` has no help text ({section})\n{help}",
                path.join(" ")
            );
            if section == "Commands:" {
                let name = entry.split_whitespace().next().unwrap();
                if name != "help" {
                    let mut next = path.clone();
                    next.push(name.to_string());
                    commands.push_back(next);
                }
            }
        }
    }
}

#[test]
fn inputs_come_from_files_and_stdin() {
    use std::io::Write;
    let db = tempfile::tempdir().unwrap();
    let file = db.path().join("input.json");
    std::fs::write(&file, "4").unwrap();
    let (out, run) = keel(
        db.path(),
        &[
            "run",
            keel_tests::TESTBED,
            "ten_steps",
            "--input",
            &format!("@{}", file.display()),
        ],
    );
    assert!(out.status.success(), "{run}");
    assert_eq!(run["output"], 6);
    let mut child = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args(["--json", "run", "testbed", "ten_steps", "--input", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"5").unwrap();
    let out = child.wait_with_output().unwrap();
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["output"], 10);
    let (out, missing) = keel(
        db.path(),
        &[
            "run",
            "testbed",
            "ten_steps",
            "--input",
            "@/nonexistent.json",
        ],
    );
    assert!(!out.status.success());
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent.json")
    );
}

#[test]
fn read_commands_refuse_a_store_that_does_not_exist() {
    let parent = tempfile::tempdir().unwrap();
    let typo = parent.path().join("kee1");
    let (out, refused) = keel(&typo, &["runs", "list"]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "store_not_found");
    assert!(!typo.exists(), "no empty store was created");
}

#[test]
fn a_store_path_that_is_a_file_is_named_as_such() {
    let parent = tempfile::tempdir().unwrap();
    let file = parent.path().join("notes.txt");
    std::fs::write(&file, "not a store").unwrap();
    let (out, refused) = keel(
        &file,
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "1"],
    );
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "store_not_found", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("is a file"), "{message}");
    assert!(
        refused["error"]["hint"].as_str().unwrap().contains("--db"),
        "{refused}"
    );
}

#[test]
fn a_run_over_its_fuel_names_the_flag_to_raise() {
    let db = tempfile::tempdir().unwrap();
    let (out, run) = keel(
        db.path(),
        &[
            "--workflow-fuel",
            "200000",
            "run",
            keel_tests::TESTBED,
            "spin",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(run["status"], "failed");
    assert_eq!(run["error"]["kind"], "fuel_exhausted");
    let hint = run["error"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("--workflow-fuel"), "{run}");
    // The failure is printed once: no log line repeats it.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("fuel"), "{stderr}");
}

#[test]
fn usage_errors_honour_json() {
    let out = common::keel_command()
        .args(["--json", "runs", "lst"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["error"]["kind"], "usage");
    assert!(error["error"]["message"].as_str().unwrap().contains("lst"));
    let out = common::keel_command()
        .args(["runs", "lst"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

#[test]
fn the_store_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let db = tempfile::tempdir().unwrap();
    let store = db.path().join("store");
    // Made readable by others, as a permissive umask would.
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(store.join("notes"), "x").unwrap();
    std::fs::set_permissions(store.join("notes"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (out, _) = keel(
        &store,
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "1"],
    );
    assert!(out.status.success());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&store), 0o700);
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}

#[test]
fn a_start_whose_worker_dies_names_the_run_it_may_have_admitted() {
    let db = tempfile::tempdir().unwrap();
    let mut worker = socket_worker(db.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // A run that computes for seconds: the forwarded start waits for it.
    let start = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args(["--json", "start", keel_tests::TESTBED, "spin"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the worker has admitted it, the worker dies.
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the run was never admitted"
        );
        let (_, runs) = keel(db.path(), &["runs", "list"]);
        if runs["runs"].as_array().is_some_and(|r| !r.is_empty()) {
            break;
        }
    }
    worker.kill().unwrap();
    worker.wait().unwrap();
    let out = start.wait_with_output().unwrap();
    assert!(!out.status.success());
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["error"]["kind"], "start_outcome_unknown", "{error}");
    let run_id = error["error"]["run_id"].as_str().unwrap().to_string();
    // The store is free again: the run named is there.
    let (out, run) = keel(db.path(), &["runs", "get", &run_id]);
    assert!(out.status.success(), "{run}");
    assert_eq!(run["workflow"], "spin");
}

#[test]
fn a_woken_run_whose_worker_dies_before_writing_is_driven_after_a_restart() {
    let db = tempfile::tempdir().unwrap();
    let mut worker = socket_worker(db.path());
    let start = [
        "start",
        keel_tests::TESTBED,
        "hook_then_compute",
        "--input",
        r#""rounds""#,
    ];
    let (out, run) = keel(db.path(), &start);
    assert!(out.status.success(), "{run}");
    assert_eq!(run["status"], "waiting", "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    // A payload after which the run computes for seconds before it writes
    // again; the resume waits on the worker, which dies meanwhile.
    let resume = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args([
            "--json",
            "hooks",
            "resume",
            "rounds",
            "--payload",
            "1500000000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never took the woken run"
        );
        let (_, workers) = keel(db.path(), &["workers", "list"]);
        if workers[0]["runs_held"] == 1 {
            break;
        }
    }
    let (_, shown) = keel(db.path(), &["runs", "show", &run_id]);
    let before = shown["journal"].as_array().unwrap().len();
    worker.0.kill().unwrap();
    worker.0.wait().unwrap();
    drop(resume);
    // The payload was acknowledged to the store; the run took it in memory
    // only. A worker started after finds the run due and drives it.
    let (out, summary) = keel(db.path(), &["worker", "--until-idle"]);
    assert!(out.status.success(), "{summary}");
    let (_, run) = keel(db.path(), &["runs", "get", &run_id]);
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], 1500000000u64, "{run}");
    let (_, shown) = keel(db.path(), &["runs", "show", &run_id]);
    let journal = shown["journal"].as_array().unwrap();
    let received = journal
        .iter()
        .filter(|e| e["kind"] == "hook_received")
        .count();
    assert_eq!(received, 1, "{journal:?}");
    assert!(
        journal.len() > before,
        "the dead worker wrote its end: {journal:?}"
    );
}

/// The crash points of a crashtest report where recovery broke something.
fn violated(report: &Value) -> Vec<&Value> {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["violations"].as_array().unwrap().is_empty())
        .collect()
}

/// `keel crashtest`, with grants, on the runtime of the test.
/// What the journal ended with at each crash point of a crash test's
/// report.
fn journal_ends(report: &Value) -> Vec<&str> {
    report["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["journal_ends_with"].as_str().unwrap())
        .collect()
}

fn crashtest(args: &[&str]) -> (Output, Value) {
    let db = tempfile::tempdir().unwrap();
    keel(db.path(), args)
}

/// A scenario's `start_at` is the run's clock when it starts: a workflow
/// that sleeps until an hour after it wakes at exactly that time, at every
/// crash point; a time that is not RFC 3339 UTC is refused, naming the form.
#[test]
fn a_scenarios_start_at_sets_the_runs_clock() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("new_year.json");
    let write = |start_at: &str| {
        // 2025-01-01T01:00:00Z: an hour after the scenario starts.
        let an_hour_on = 1_735_693_200_000u64;
        let text = serde_json::json!({
            "workflow": "sleep_until_ms", "input": an_hour_on, "output": an_hour_on,
            "start_at": start_at,
        });
        std::fs::write(&scenario, text.to_string()).unwrap();
    };
    let path = scenario.to_str().unwrap();
    write("2025-01-01T00:00:00Z");
    let (out, report) = crashtest(&["crashtest", keel_tests::TESTBED, "--scenario", path]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["passed"], true, "{report}");
    write("new year's day");
    let (out, report) = crashtest(&["crashtest", keel_tests::TESTBED, "--scenario", path]);
    assert!(!out.status.success());
    let error = report["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains("`start_at` \"new year's day\" is not an RFC 3339 time in UTC like \"2026-12-24T23:00:00Z\""),
        "{report}"
    );
}

#[test]
fn crashtest_passes_idempotent_workflows() {
    // sum_of_squares journals its steps' waits for their concurrency limit.
    for (workflow, input) in [
        ("ten_steps", "3"),
        ("ten_steps_strict", "3"),
        ("two_steps", "4"),
        ("two_steps_strict", "4"),
        ("sum_of_squares", "3"),
        // Sets attributes (journaled) between its steps and timer.
        ("tagged", "\"acme\""),
        // Writes and closes a stream from the workflow (journaled).
        ("streamer", r#"{"count": 3, "pause_at": 1}"#),
    ] {
        let (out, report) =
            crashtest(&["crashtest", keel_tests::TESTBED, workflow, "--input", input]);
        assert!(out.status.success(), "{workflow}: {report}");
        assert_eq!(report["passed"], true);
        let points = report["points"].as_array().unwrap();
        assert_eq!(
            points.len() as u64,
            2 * report["clean"]["journal_writes"].as_u64().unwrap()
        );
        // Strict: a write per step attempt; effect-gated steps that make
        // no effect are journaled with the run's next gate or its end.
        let least = if workflow.ends_with("_strict") { 6 } else { 2 };
        assert!(points.len() >= least, "{report}");
        assert!(points.iter().all(|p| p["reached"] == true), "{report}");
    }
    // The example guest, whose charge is keyed by its step ID.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(false))
        .unwrap();
    let input = serde_json::json!({
        "order_id": "o-1", "user_id": "u-1", "amount": 1250, "payment_url": api.url("/charge"),
    })
    .to_string();
    let host = api.addr.to_string();
    let (out, report) = crashtest(&[
        "--allow-http",
        &host,
        "crashtest",
        keel_tests::ORDER,
        "process_order",
        "--input",
        &input,
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    // A workflow that starts a child run: its start is journaled once and
    // the child admitted once, whatever write the crash takes.
    let (out, report) = crashtest(&[
        "crashtest",
        keel_tests::ORDER_HOOKS,
        "start_order",
        "--input",
        r#"{"order_id": "o-2", "note": "placed"}"#,
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(
        report["clean"]["output"], r#"{"started":"{run_id}.0"}"#,
        "{report}"
    );
}

#[test]
fn crashtest_passes_the_python_order_example() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(true))
        .unwrap();
    let input = serde_json::json!({
        "order_id": "py-c", "user_id": "u-1", "amount": 1250, "payment_url": api.url("/charge"),
    })
    .to_string();
    let host = api.addr.to_string();
    let (out, report) = crashtest(&[
        "--allow-http",
        &host,
        "crashtest",
        keel_tests::PYTHON_ORDER,
        "process_order",
        "--input",
        &input,
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["passed"], true, "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    assert!(report["points"].as_array().unwrap().len() >= 4, "{report}");
}

/// A workflow of pure steps, effect-gated (the default) or relaxed, is
/// journaled with its end: the crash points are that write (lost: every
/// step runs again, under the same step IDs; landed unheard: the run is
/// over) and recovery keeps what the crashtest checks at both. Strict
/// makes a write before each attempt.
#[test]
fn crashtest_passes_each_durability_at_its_crash_points() {
    let crashtest_of = |workflow: &str| {
        let (out, report) =
            crashtest(&["crashtest", keel_tests::TESTBED, workflow, "--input", "3"]);
        assert!(out.status.success(), "{workflow}: {report}");
        assert_eq!(report["passed"], true, "{workflow}: {report}");
        report
    };
    let strict = crashtest_of("ten_steps_strict");
    assert!(
        strict["clean"]["journal_writes"].as_u64().unwrap() >= 4,
        "{strict}"
    );
    for workflow in ["ten_steps", "ten_steps_relaxed"] {
        let report = crashtest_of(workflow);
        assert_eq!(report["clean"]["journal_writes"], 1, "{report}");
        let points = report["points"].as_array().unwrap();
        assert_eq!(points.len(), 2, "{report}");
        assert!(points.iter().all(|p| p["reached"] == true), "{report}");
    }
}

#[test]
fn crashtest_covers_the_cancel_path_and_scripted_hooks() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(false))
        .unwrap();
    let recorder = runtime
        .block_on(keel_payment_api::recorder::Recorder::start())
        .unwrap();
    // The order cancelled as it starts: its first step runs to its end and
    // is compensated (the items released), once, at every crash point.
    let order = serde_json::json!({
        "order_id": "o-c", "user_id": "u-1", "amount": 1250, "payment_url": api.url("/charge"),
    })
    .to_string();
    let host = api.addr.to_string();
    let (out, report) = crashtest(&[
        "--allow-http",
        &host,
        "crashtest",
        keel_tests::ORDER,
        "process_order",
        "--input",
        &order,
        "--cancel",
        "changed their mind",
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["status"], "cancelled", "{report}");
    let steps: Vec<&str> = report["clean"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        ["reserve_inventory", "release_inventory"],
        "{report}"
    );
    // Its steps make no effect keel sees: they are journaled with the
    // run's end, lost with it (both run again) or kept, at its 2 points.
    assert!(report["points"].as_array().unwrap().len() >= 2, "{report}");
    // A booking that waits on a hook: confirmed by the script, it ships; a
    // cancel while it waits refunds its charge.
    let booking =
        serde_json::json!({"url": recorder.url(), "id": "c1", "charge_ms": 0}).to_string();
    let host = recorder.addr.to_string();
    for (script, status, last) in [
        (
            &["--resume", "confirm:c1=true"][..],
            "completed",
            "call_downstream",
        ),
        (
            &["--cancel-when-waiting", "no answer"][..],
            "cancelled",
            "call_downstream",
        ),
    ] {
        let mut args = vec![
            "--allow-http",
            &host,
            "crashtest",
            keel_tests::TESTBED,
            "refundable",
            "--input",
            &booking,
        ];
        args.extend_from_slice(script);
        let (out, report) = crashtest(&args);
        assert!(out.status.success(), "{script:?}: {report}");
        assert_eq!(report["clean"]["status"], status, "{report}");
        let steps = report["clean"]["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 2, "charge, then ship or refund: {report}");
        assert_eq!(steps[1][0], last);
    }
    // Paused and resumed while it waits, it ships all the same, whichever
    // write of the pause or the resume a crash takes.
    let (out, report) = crashtest(&[
        "--allow-http",
        &host,
        "crashtest",
        keel_tests::TESTBED,
        "refundable",
        "--input",
        &booking,
        "--pause-when-waiting",
        "--resume",
        "confirm:c1=true",
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    let ends = journal_ends(&report);
    for written in ["run_paused", "run_resumed"] {
        assert!(
            ends.contains(&written),
            "a crash at the {written} write: {ends:?}"
        );
    }
    // A payload the workflow refuses (journaled) before the one it takes.
    let (out, report) = crashtest(&[
        "crashtest",
        keel_tests::TESTBED,
        "decide_patiently",
        "--input",
        r#""p""#,
        "--resume",
        r#"decide:p={"approved": true, "note": ""}"#,
        "--resume",
        r#"decide:p={"approved": true, "note": "ok"}"#,
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(
        report["clean"]["output"], r#"{"approved":true,"note":"ok"}"#,
        "{report}"
    );
    // The refusal is written with the next payload's request: a crash
    // before that write loses both, and the recovered run refuses again.
    let ends = journal_ends(&report);
    assert!(
        ends.iter().filter(|e| **e == "hook_received").count() >= 2,
        "crashes after each payload: {ends:?}"
    );
}

#[test]
fn crashtest_covers_a_restart_a_fork_and_an_upgrade() {
    // Restarted from its second step once it ended, it ends as the clean
    // run did whichever write of the restart (or of the steps it runs
    // again) a crash takes, and no step counts twice.
    let (out, report) = crashtest(&[
        "crashtest",
        keel_tests::TESTBED,
        "two_steps",
        "--input",
        "5",
        "--restart-from-step",
        "mul",
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["output"], "[6,10]", "{report}");
    let ends = journal_ends(&report);
    assert!(
        ends.contains(&"run_restarted"),
        "a crash at the restart's write: {ends:?}"
    );
    // Forked from its second step, the fork (what is compared) ends as
    // the clean run's fork did whichever write a crash takes, the fork's
    // admission with its carried journal among them.
    let (out, report) = crashtest(&[
        "crashtest",
        keel_tests::TESTBED,
        "two_steps",
        "--input",
        "5",
        "--fork-from-step",
        "mul",
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["output"], "[6,10]", "{report}");
    let steps = report["clean"]["steps"].as_array().unwrap();
    assert!(
        steps
            .iter()
            .all(|s| s[1].as_str().unwrap().starts_with("{fork_id}")),
        "the fork's own step IDs: {report}"
    );
}

/// A crash test whose clean run fails for a reason it did not ask for
/// checks nothing and fails, naming why; one that declares the failure
/// passes; and `--upgrade-to` moves the run with the test's grants, so a
/// run that charges through a payment API ends on the new build, with the
/// move among the writes a crash takes.
#[test]
fn crashtest_fails_a_clean_run_it_did_not_expect_and_upgrades_with_its_grants() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(false))
        .unwrap();
    let input = serde_json::json!([api.url("/charge"), "bill:c"]).to_string();
    let host = api.addr.to_string();
    let billing = |grant: bool, extra: &[&str]| {
        let mut args = Vec::new();
        if grant {
            args.extend(["--allow-http", host.as_str()]);
        }
        args.extend([
            "crashtest",
            keel_tests::TESTBED,
            "billing",
            "--input",
            input.as_str(),
            "--resume",
            r#"bill:c="paid""#,
        ]);
        args.extend(extra);
        crashtest(&args)
    };
    // No grant: the charge is denied, the clean run fails, nothing is tried.
    let (out, report) = billing(false, &[]);
    assert!(!out.status.success(), "{report}");
    assert_eq!(report["passed"], false, "{report}");
    assert_eq!(report["clean"]["status"], "failed", "{report}");
    let why = report["clean_unexpected"].as_str().unwrap();
    assert!(why.contains("does not expect"), "{why}");
    assert!(report["points"].as_array().unwrap().is_empty(), "{report}");
    // Declared, the same failure is what the test checks at every point.
    let kind = report["clean"]["error"]["kind"]
        .as_str()
        .unwrap()
        .to_string();
    let (out, report) = billing(false, &["--expect-failure", &kind]);
    assert!(out.status.success(), "{report}");
    assert!(!report["points"].as_array().unwrap().is_empty(), "{report}");
    // A failure of another kind than the one declared fails it.
    let (out, report) = billing(true, &["--expect-failure", &kind]);
    assert!(!out.status.success(), "{report}");
    assert!(
        report["clean_unexpected"]
            .as_str()
            .unwrap()
            .contains("expects a failure"),
        "{report}"
    );
    // Upgraded to the next build (a patch marker before the charge) when
    // it first waits, with the grants: it completes there, charged once.
    let (out, report) = billing(true, &["--upgrade-to", keel_tests::TESTBED_REORDERED]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    let next = keel_tests::ALL
        .iter()
        .find(|(name, _, _)| *name == "testbed_reordered")
        .map(|(_, _, sha)| *sha)
        .unwrap();
    assert_eq!(report["clean"]["build"], next, "ended on the next build");
    let ends = journal_ends(&report);
    assert!(ends.contains(&"run_moved"), "a crash at the move: {ends:?}");
    assert!(violated(&report).is_empty(), "{report}");
    // Two crash tests charged (the one whose clean run completed against
    // its declared failure, and this one): every trial of one charges
    // under its run's one step ID, moved or not.
    assert_eq!(api.charges().len(), 2, "{:?}", api.charges());
}

/// Writes `scenario` to a file in `dir`; returns its path.
fn scenario_file(dir: &std::path::Path, name: &str, scenario: Value) -> String {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, scenario.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// `keel simulate` finds the planted bug: a workflow that records a note
/// as often as it is sent, under a sender that resends; it names the seed
/// and the shrunk schedule, and the same seed finds it again. Its fix,
/// which records a note once by its ID, passes every schedule.
#[test]
fn simulate_finds_a_workflow_that_acts_twice_on_a_resent_payload_and_passes_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = |workflow: &str| {
        scenario_file(
            dir.path(),
            workflow,
            serde_json::json!({
                "workflow": workflow,
                "input": "notes:1",
                "hooks": [
                    {"token": "notes:1", "payload": {"id": "a", "text": "first"}},
                    {"token": "notes:1", "payload": {"id": "b", "text": "second"}},
                ],
                "output": ["first", "second"],
            }),
        )
    };
    let buggy = scenario("tally_notes");
    let (out, report) = crashtest(&["simulate", keel_tests::TESTBED, "--scenario", &buggy]);
    assert!(!out.status.success(), "{report}");
    assert_eq!(report["passed"], false, "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    let failure = &report["failure"];
    let schedule = failure["schedule"].as_array().unwrap();
    assert!(
        schedule.iter().any(|p| p["kind"] == "resend"),
        "a resend breaks it: {report}"
    );
    assert!(schedule.len() <= 2, "shrunk: {report}");
    assert!(
        !failure["violations"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert!(
        !failure["journal_diff"].as_array().unwrap().is_empty(),
        "{report}"
    );
    // The same seed finds the same failure.
    let seed = report["seed"].as_u64().unwrap().to_string();
    let (_, again) = crashtest(&[
        "simulate",
        keel_tests::TESTBED,
        "--scenario",
        &buggy,
        "--seed",
        &seed,
    ]);
    assert_eq!(again["failure"]["schedule"], report["failure"]["schedule"]);

    let fixed = scenario("tally_notes_once");
    let (out, report) = crashtest(&["simulate", keel_tests::TESTBED, "--scenario", &fixed]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["failure"], Value::Null, "{report}");
    assert!(report["tried"].as_u64().unwrap() >= 64, "{report}");
}

/// The demo's saga (reserve, charge, compensate on failure), in Rust and
/// in Python, keeps its ending and step IDs under every schedule of
/// crashes `keel simulate` tries.
#[test]
fn simulate_passes_the_demo_saga_in_rust_and_python() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(true))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let order = scenario_file(
        dir.path(),
        "order",
        serde_json::json!({
            "workflow": "process_order",
            "input": {"order_id": "o-sim", "user_id": "u-1", "amount": 1250, "payment_url": api.url("/charge")},
            "grants": {"http": [api.addr.to_string()]},
        }),
    );
    for (component, seeds) in [(keel_tests::ORDER, "32"), (keel_tests::PYTHON_ORDER, "8")] {
        let (out, report) = crashtest(&[
            "simulate",
            component,
            "--scenario",
            &order,
            "--seeds",
            seeds,
        ]);
        assert!(out.status.success(), "{component}: {report}");
        assert_eq!(report["clean"]["status"], "completed", "{report}");
    }
    // Every schedule of one simulation charges under its run's one step
    // ID: two simulations, two charges.
    assert_eq!(api.charges().len(), 2, "{:?}", api.charges());
}

#[test]
fn crashtest_covers_a_workflow_that_continues_as_new() {
    // Two continuations, then an end: whichever write a crash takes (a
    // continuation's admission with its token's handover, the old run's
    // end, a step), the chain ends as the clean one did, each run once.
    let (out, report) = crashtest(&[
        "crashtest",
        keel_tests::TESTBED,
        "countdown",
        "--input",
        "[2,0]",
    ]);
    assert!(out.status.success(), "{report}");
    assert_eq!(report["clean"]["status"], "completed", "{report}");
    assert_eq!(report["clean"]["output"], "3", "three runs: {report}");
    let ends = journal_ends(&report);
    assert!(
        ends.contains(&"run_continued"),
        "a crash at a continuation's end: {ends:?}"
    );
    // Every run's writes are crash points, and each continuation's
    // admission is one more: three runs have more than three times the
    // points of one.
    let (out, single) = crashtest(&[
        "crashtest",
        keel_tests::TESTBED,
        "countdown",
        "--input",
        "[0,0]",
    ]);
    assert!(out.status.success(), "{single}");
    let points = |r: &Value| r["points"].as_array().unwrap().len();
    assert!(
        points(&report) > 3 * points(&single),
        "{} crash points for three runs, {} for one",
        points(&report),
        points(&single)
    );
}

#[test]
fn crashtest_names_the_crash_point_where_a_step_repeats_its_effect() {
    let files = tempfile::tempdir().unwrap();
    let dir = files.path().to_str().unwrap();
    let input = serde_json::to_string(dir).unwrap();
    let (out, report) = crashtest(&[
        "--allow-dir",
        dir,
        "crashtest",
        keel_tests::TESTBED,
        "tally",
        "--input",
        &input,
    ]);
    assert!(!out.status.success(), "{report}");
    assert_eq!(report["passed"], false);
    assert_eq!(report["clean"]["output"], "1");
    let violated = violated(&report);
    // Reported once, at the first point that breaks it: the file the step
    // appends to keeps the extra line, so every later point breaks the
    // same thing again and says so.
    assert_eq!(violated.len(), 1, "{report}");
    let point = &violated[0];
    // The append ran twice: once before the crash, once on recovery.
    let said = point["violations"][0].as_str().unwrap();
    assert!(said.contains("output 2"), "{said}");
    assert_eq!(point["crash"], "before", "{point}");
    let again: Vec<&Value> = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["repeated"].as_array().unwrap().is_empty())
        .collect();
    assert!(!again.is_empty(), "{report}");
    assert!(
        again[0]["repeated"][0]
            .as_str()
            .unwrap()
            .contains(&format!("first at write {}", point["write"])),
        "{report}"
    );
}

#[test]
fn crashtest_names_a_compensation_that_is_not_idempotent() {
    let files = tempfile::tempdir().unwrap();
    let dir = files.path().to_str().unwrap();
    let input = serde_json::to_string(dir).unwrap();
    let (out, report) = crashtest(&[
        "--allow-dir",
        dir,
        "crashtest",
        keel_tests::TESTBED,
        "careless_refund",
        "--input",
        &input,
        "--cancel",
        "called off",
    ]);
    assert!(!out.status.success(), "{report}");
    assert_eq!(report["passed"], false);
    assert_eq!(report["clean"]["status"], "cancelled", "{report}");
    let steps: Vec<&str> = report["clean"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["noop", "append_line"], "{report}");
    let violated = violated(&report);
    assert!(!violated.is_empty(), "{report}");
    for point in &violated {
        // The ending is the same (cancelled): the compensation's own
        // output names it.
        let said: Vec<&str> = point["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(said.len(), 1, "{point}");
        assert!(
            said[0].starts_with("step `append_line` ({run_id}-")
                && said[0].contains("completed with output 2, in the clean run with 1")
                && said[0].contains("not idempotent"),
            "{said:?}"
        );
        assert_eq!(point["crash"], "before", "{point}");
    }
}

#[test]
fn a_run_asleep_under_the_park_limit_is_waiting_on_its_timer() {
    let db = tempfile::tempdir().unwrap();
    // 30 s: kept in memory rather than parked, and still waiting, at once.
    let (_, napping) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "sleeper", "--input", "30000"],
    );
    assert_eq!(napping["status"], "waiting", "{napping}");
    assert_eq!(napping["waiting_on"][0]["kind"], "timer", "{napping}");
    let napping_id = napping["run_id"].as_str().unwrap();
    let (_, read) = keel(db.path(), &["runs", "get", napping_id]);
    assert_eq!(read["status"], "waiting", "{read}");
}

#[test]
fn runs_are_deleted_archived_purged_and_counted_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let archive = db.path().join("archive");
    let (_, ended) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "two_steps", "--input", "4"],
    );
    let ended_id = ended["run_id"].as_str().unwrap().to_string();
    let (_, asleep) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "sleeper", "--input", "36000000"],
    );
    assert_eq!(asleep["status"], "waiting");
    let asleep_id = asleep["run_id"].as_str().unwrap();

    let (_, stats) = keel(db.path(), &["store", "stats"]);
    assert_eq!(stats["runs_by_status"]["completed"], 1, "{stats}");
    assert_eq!(stats["runs_by_status"]["waiting"], 1, "{stats}");
    assert!(stats["journal_entries"].as_u64().unwrap() > 4, "{stats}");
    assert!(stats["size_bytes"].as_u64().unwrap() > 0, "{stats}");

    let (out, refused) = keel(db.path(), &["runs", "delete", &ended_id, asleep_id]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "run_live", "{refused}");
    assert!(
        refused["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("--cancel"),
        "{refused}"
    );
    let (out, _) = keel(db.path(), &["runs", "get", &ended_id]);
    assert!(out.status.success(), "a refused deletion deletes nothing");

    // No retention anywhere: a purge keeps everything.
    let (_, kept) = keel(db.path(), &["store", "purge"]);
    assert_eq!(kept["deleted"]["runs"], serde_json::json!([]), "{kept}");

    let (out, deleted) = keel(
        db.path(),
        &[
            "--archive",
            archive.to_str().unwrap(),
            "runs",
            "delete",
            &ended_id,
        ],
    );
    assert!(out.status.success(), "{deleted}");
    assert_eq!(deleted["runs"], serde_json::json!([ended_id]));
    let (out, _) = keel(db.path(), &["runs", "get", &ended_id]);
    assert!(!out.status.success(), "the deleted run is gone");
    let file = archive.join(format!("{ended_id}.keel"));
    let (out, reports) = keel(
        db.path(),
        &["replay", keel_tests::TESTBED, file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{reports}");
    assert_eq!(reports[0]["verdict"], "ok");
    let (out, imported) = keel(db.path(), &["journal", "import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{imported}");
    let (_, back) = keel(db.path(), &["runs", "get", &ended_id]);
    assert_eq!(back["output"], ended["output"]);

    // A retention of zero: every ended run is due at once.
    let (_, purged) = keel(db.path(), &["--run-retention", "0s", "store", "purge"]);
    assert_eq!(
        purged["deleted"]["runs"],
        serde_json::json!([ended_id]),
        "{purged}"
    );
    let (out, cancelled) = keel(db.path(), &["runs", "delete", asleep_id, "--cancel"]);
    assert!(out.status.success(), "{cancelled}");
    let (_, stats) = keel(db.path(), &["store", "stats"]);
    assert_eq!(stats["runs_by_status"], serde_json::json!({}), "{stats}");
    assert_eq!(stats["journal_entries"], 0, "{stats}");
}

#[test]
fn failed_runs_are_retried_and_deleted_in_bulk_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let mut acme = Vec::new();
    for tenant in ["tenant=acme", "tenant=acme", "tenant=other"] {
        let (_, run) = keel(
            db.path(),
            &["run", keel_tests::TESTBED, "trap", "--attr", tenant],
        );
        assert_eq!(run["status"], "failed", "{run}");
        if tenant.ends_with("acme") {
            acme.push(run["run_id"].as_str().unwrap().to_string());
        }
    }
    let filter = ["--status", "failed", "--attr", "tenant=acme"];
    let bulk = |action: &str, extra: &[&str]| {
        let mut args = vec!["runs", "bulk", action];
        args.extend(filter);
        args.extend(extra);
        keel(db.path(), &args)
    };
    let (out, preview) = bulk("retry", &["--dry-run"]);
    assert!(out.status.success(), "{preview}");
    assert_eq!(preview["acted_on"], 2, "{preview}");
    let (_, jobs) = keel(db.path(), &["jobs", "list"]);
    assert_eq!(jobs, serde_json::json!([]), "a dry run submits nothing");

    let (out, job) = bulk("retry", &[]);
    assert!(out.status.success(), "{job}");
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["counts"]["done"], 2, "{job}");
    let job_id = job["job_id"].as_str().unwrap();
    for run_id in &acme {
        let (_, run) = keel(db.path(), &["runs", "get", run_id]);
        assert_eq!(run["status"], "pending", "retried, for a worker: {run}");
    }
    let (_, listed) = keel(db.path(), &["jobs", "list"]);
    assert_eq!(listed[0]["job_id"], job_id, "{listed}");
    let (_, shown) = keel(db.path(), &["jobs", "show", job_id]);
    assert_eq!(shown["filter"]["attributes"]["tenant"], "acme", "{shown}");

    // The trap fails again once driven; the failed runs are deleted in bulk.
    let (out, _) = keel(db.path(), &["worker", "--until-idle"]);
    assert!(out.status.success());
    let (out, deleted) = bulk("delete", &[]);
    assert!(out.status.success(), "{deleted}");
    assert_eq!(deleted["counts"]["done"], 2, "{deleted}");
    for run_id in &acme {
        let (out, _) = keel(db.path(), &["runs", "get", run_id]);
        assert!(!out.status.success(), "{run_id} is deleted");
    }
    let (_, left) = keel(db.path(), &["runs", "list"]);
    assert_eq!(left["runs"].as_array().unwrap().len(), 1, "{left}");

    let (out, refused) = keel(db.path(), &["runs", "bulk", "delete"]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "invalid_request", "{refused}");
    let (out, missing) = keel(db.path(), &["jobs", "show", "nope"]);
    assert!(!out.status.success());
    assert_eq!(missing["error"]["kind"], "job_not_found", "{missing}");
    assert!(
        missing["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("keel jobs list"),
        "{missing}"
    );
}

#[test]
fn superseded_builds_nothing_names_are_pruned_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let (out, _) = keel(db.path(), &["deploy", keel_tests::TESTBED, "--name", "app"]);
    assert!(out.status.success());
    let (_, run) = keel(db.path(), &["run", "app", "two_steps", "--input", "4"]);
    let run_id = run["run_id"].as_str().unwrap();
    // A new build of `app`: the first is superseded, but its run names it.
    let (out, _) = keel(
        db.path(),
        &["deploy", keel_tests::ORDER_HOOKS, "--name", "app"],
    );
    assert!(out.status.success());
    let (_, kept) = keel(db.path(), &["deployments", "prune", "--grace", "0s"]);
    assert_eq!(
        kept["components"],
        serde_json::json!([]),
        "its run names it: {kept}"
    );
    assert_eq!(kept["referenced"], 2, "{kept}");
    let (out, _) = keel(db.path(), &["runs", "delete", run_id]);
    assert!(out.status.success());
    let (_, recent) = keel(db.path(), &["deployments", "prune"]);
    assert_eq!(
        recent["recent"], 1,
        "stored within the default hour: {recent}"
    );
    let (_, dry) = keel(
        db.path(),
        &["deployments", "prune", "--grace", "0s", "--dry-run"],
    );
    assert_eq!(dry["components"].as_array().unwrap().len(), 1, "{dry}");
    assert!(
        dry["deployments"][0].as_str().unwrap().starts_with("app@"),
        "{dry}"
    );
    let (_, pruned) = keel(db.path(), &["deployments", "prune", "--grace", "0s"]);
    assert_eq!(pruned["components"], dry["components"], "{pruned}");
    assert_eq!(pruned["deployments"], dry["deployments"], "{pruned}");
    let (_, listed) = keel(db.path(), &["deployments", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let (_, stats) = keel(db.path(), &["store", "stats"]);
    assert_eq!(stats["components"], 1, "{stats}");
}

#[test]
fn a_waiting_run_says_what_it_waits_on() {
    let db = tempfile::tempdir().unwrap();
    let input = r#"{"order_id": "w1", "note": "placed"}"#;
    let (out, started) = keel(
        db.path(),
        &[
            "start",
            keel_tests::ORDER_HOOKS,
            "order_updates",
            "--input",
            input,
            "--token",
            "order:w1",
        ],
    );
    assert!(out.status.success(), "{started}");
    assert_eq!(started["status"], "waiting");
    let hook = serde_json::json!([{"kind": "hook", "token": "order:w1"}]);
    assert_eq!(started["waiting_on"], hook, "the start says so: {started}");
    let run_id = started["run_id"].as_str().unwrap();
    let (_, got) = keel(db.path(), &["runs", "get", run_id]);
    assert_eq!(got["waiting_on"], hook, "{got}");
    let text = common::keel_command()
        .args(["--db", db.path().to_str().unwrap(), "runs", "get", run_id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("waiting on hook order:w1: `keel hooks resume order:w1 --payload JSON`"),
        "{text}"
    );

    let (_, asleep) = keel(
        db.path(),
        &["run", keel_tests::TESTBED, "sleeper", "--input", "36000000"],
    );
    assert_eq!(asleep["status"], "waiting");
    let due = asleep["waiting_on"][0]["due_at_ms"].as_u64().unwrap();
    assert_eq!(asleep["waiting_on"][0]["kind"], "timer", "{asleep}");
    assert_eq!(Some(due), asleep["wake_at_ms"].as_u64(), "{asleep}");
}

#[test]
fn streams_are_listed_and_printed_and_a_resume_prints_the_workflows_reply() {
    let db = tempfile::tempdir().unwrap();
    let (out, run) = keel(
        db.path(),
        &[
            "run",
            keel_tests::TESTBED,
            "streamer",
            "--input",
            r#"{"count": 3}"#,
        ],
    );
    assert!(out.status.success(), "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let (out, streams) = keel(db.path(), &["runs", "streams", run_id]);
    assert!(out.status.success());
    assert_eq!(
        streams,
        serde_json::json!([{"name": "progress", "chunks": 4, "closed": true, "bytes": 21}])
    );
    let printed = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args([
            "--json", "runs", "stream", run_id, "progress", "--from", "1",
        ])
        .output()
        .unwrap();
    assert!(printed.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&printed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<(u64, &str)> = lines
        .iter()
        .map(|l| (l["index"].as_u64().unwrap(), l["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [(1, "data"), (2, "data"), (3, "closed")]);
    assert_eq!(lines[0]["value"], serde_json::json!({"i": 1}));

    let (out, waiting) = keel(
        db.path(),
        &[
            "start",
            keel_tests::TESTBED,
            "replier",
            "--input",
            "\"ask:cli\"",
        ],
    );
    assert!(out.status.success());
    assert_eq!(waiting["status"], "waiting");
    let resume = [
        "hooks",
        "resume",
        "ask:cli",
        "--payload",
        r#"{"q": 1}"#,
        "--payload-id",
        "p-1",
        "--wait-reply",
        "10s",
    ];
    let (out, replied) = keel(db.path(), &resume);
    assert!(out.status.success(), "{replied}");
    assert_eq!(replied["payload_id"], "p-1");
    assert_eq!(
        replied["reply"],
        serde_json::json!({"echo": {"q": 1}, "n": 1})
    );
    // Retried with the same ID: the same reply, delivered once.
    let (out, again) = keel(db.path(), &resume);
    assert!(out.status.success(), "{again}");
    assert_eq!(again["reply"], replied["reply"]);
}

#[test]
fn the_demo_charges_once_and_says_what_to_do_next() {
    let db = tempfile::tempdir().unwrap();
    let out = common::keel_command()
        .arg("--db")
        .arg(db.path())
        .args(["demo", "--component", keel_tests::ORDER])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("charges taken by the API: 1"), "{text}");
    let next = text
        .lines()
        .find(|l| l.starts_with("next: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        next.contains("runs show") && next.contains("keel new"),
        "{next}"
    );
    // The demo's store is one a checkout ignores.
    let ignored =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.gitignore")).unwrap();
    assert!(ignored.lines().any(|l| l == ".keel-demo/"), "{ignored}");
}
