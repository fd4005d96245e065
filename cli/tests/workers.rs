//! Many `keel` processes on one PostgreSQL database: workers sharing runs,
//! a worker killed mid-step, a paused worker whose lease was taken over,
//! start tokens and keys raced from many processes, a payload resumed
//! in one process waking a run another drives, and concurrency limits
//! that hold across workers, even one killed while it holds the slots.
//!
//! The database is `KEEL_TEST_POSTGRES` (`scripts/test.sh` starts one and
//! sets it); without it these tests fail, never skip. Each test works in a
//! schema of its own.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_host::core::RunStatus;
use keel_host::core::journal::Fact;
use keel_host::store::postgres::{PgOptions, PgStore};
use keel_host::{Config, Keel, Replayer};
use keel_payment_api::PaymentApi;
use keel_payment_api::recorder::Recorder;
use serde_json::{Value, json};

mod common;
use common::pg::{cli, json_of, schema, url};

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to the process `pid`.
fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// A long-running worker with a short lease, its stderr in `log`.
fn worker(schema: &str, log: &Path) -> Running {
    let log = std::fs::File::create(log).unwrap();
    Running(
        cli(schema, &["--lease-ttl", "2", "worker"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting a worker"),
    )
}

/// An engine in this process over the test's schema, for admitting runs
/// and reading journals.
async fn engine(schema: &str) -> Keel {
    let mut options = PgOptions::new(url());
    options.schema = schema.into();
    options.pool_size = 4;
    let store = PgStore::open(options).await.expect("opening the store");
    let mut config = Config::caching_in(keel_tests::compiled_cache());
    config.max_instances = 50;
    Keel::open(config, Arc::new(store)).expect("opening the engine")
}

/// Waits (polling the store, up to a minute) until `run_id` has ended.
async fn ended(keel: &Keel, run_id: &str) -> keel_host::core::RunRecord {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = keel.get_run(run_id).await.unwrap();
        if run.status.is_final() {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} never ended: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every journal of the schema replays offline against `component`.
async fn all_replay(keel: &Keel, component: &str) {
    let replayer = Replayer::new(component, keel_tests::compiled_cache())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for run in keel.list_runs().await.unwrap() {
        let file =
            keel_host::core::file::JournalFile::new(&run, keel.journal(&run.run_id).await.unwrap());
        let path = dir.path().join(format!("{}.journal", run.run_id));
        std::fs::write(&path, file.to_bytes()).unwrap();
        let report = replayer.replay_file(&path).await.unwrap();
        assert!(report.is_ok(), "{}", report.render());
    }
}

/// How many times each command's completion is journaled.
fn completions(journal: &[keel_host::core::Entry]) -> HashMap<u32, usize> {
    let mut counts = HashMap::new();
    for e in journal {
        if let Fact::StepCompleted { command, .. } = e.fact {
            *counts.entry(command).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_share_200_runs_and_each_completes_once() {
    let schema = schema("share");
    let keel = engine(&schema).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..200 {
        runs.push(keel.start(&testbed, "ten_steps", "3").await.unwrap().run_id);
    }
    let workers: Vec<Child> = (0..2)
        .map(|_| {
            cli(
                &schema,
                &["--max-concurrent-runs", "4", "worker", "--until-idle"],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let driven: Vec<u64> = workers
        .into_iter()
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            json_of(&out)["driven"].as_u64().unwrap()
        })
        .collect();
    assert!(
        driven.iter().all(|&d| d > 0),
        "work was not shared: {driven:?}"
    );
    for run_id in &runs {
        let run = keel.get_run(run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        let journal = keel.journal(run_id).await.unwrap();
        let ends = journal.iter().filter(|e| e.fact.is_end()).count();
        assert_eq!(ends, 1, "run {run_id} ended {ends} times");
        assert!(completions(&journal).values().all(|&n| n == 1));
    }
    all_replay(&keel, keel_tests::TESTBED).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_two_processes_race_one_token_and_one_key() {
    let schema = schema("race");
    let keel = engine(&schema).await;
    keel.load(keel_tests::ORDER_HOOKS).await.unwrap();
    keel.load(keel_tests::TESTBED).await.unwrap();
    let race = |args: Vec<String>| {
        let children: Vec<Child> = (0..32)
            .map(|_| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                cli(&schema, &args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                (out.status.success(), json_of(&out))
            })
            .collect::<Vec<_>>()
    };
    let input = json!({"order_id": "race", "note": "n"}).to_string();
    let token = race(
        [
            "start",
            keel_tests::ORDER_HOOKS,
            "order_updates",
            "--input",
            &input,
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--token", "order:race", "--detach"].map(String::from))
        .collect(),
    );
    let admitted: Vec<&Value> = token.iter().filter(|(ok, _)| *ok).map(|(_, v)| v).collect();
    assert_eq!(admitted.len(), 1, "{token:?}");
    let owner = admitted[0]["run_id"].as_str().unwrap();
    for (_, refused) in token.iter().filter(|(ok, _)| !ok) {
        assert_eq!(refused["error"]["kind"], "hook_conflict", "{refused}");
        assert_eq!(refused["error"]["conflicting_run_id"], owner);
    }

    let key = race(
        [
            "start",
            keel_tests::TESTBED,
            "idempotent_task",
            "--input",
            r#"{"id": "k"}"#,
            "--detach",
        ]
        .map(String::from)
        .to_vec(),
    );
    let admitted: Vec<&Value> = key.iter().filter(|(ok, _)| *ok).map(|(_, v)| v).collect();
    assert_eq!(admitted.len(), 1, "{key:?}");
    let holder = admitted[0]["run_id"].as_str().unwrap();
    for (_, refused) in key.iter().filter(|(ok, _)| !ok) {
        assert_eq!(
            refused["error"]["kind"], "idempotency_collision",
            "{refused}"
        );
        assert_eq!(refused["error"]["existing_run_id"], holder);
    }
    assert_eq!(keel.list_runs().await.unwrap().len(), 2);
}

/// Starts `note_or_timeout` with token `order:ORDER` (it waits for a payload
/// or a 30 s timer) and waits until a worker holds it parked in memory.
async fn parked(schema: &str, keel: &Keel, order: &str) -> String {
    let input = json!({"order_id": order, "note": "a"}).to_string();
    let token = format!("order:{order}");
    let out = cli(
        schema,
        &[
            "start",
            keel_tests::ORDER_HOOKS,
            "note_or_timeout",
            "--input",
            &input,
            "--token",
            &token,
            "--detach",
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = json_of(&out)["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !keel
        .journal(&run_id)
        .await
        .unwrap()
        .iter()
        .any(|e| e.fact.name() == "hook_next")
    {
        assert!(Instant::now() < deadline, "the worker never drove the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run_id
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_resumed_in_one_process_wakes_a_run_another_drives() {
    let schema = schema("wake");
    let keel = engine(&schema).await;
    keel.load(keel_tests::ORDER_HOOKS).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _worker = worker(&schema, &logs.path().join("worker.log"));
    let run_id = parked(&schema, &keel, "wake").await;
    let out = cli(&schema, &["workers", "list"]).output().unwrap();
    let workers = json_of(&out);
    assert_eq!(workers.as_array().unwrap().len(), 1, "{workers}");
    assert_eq!(workers[0]["runs_held"], 1, "{workers}");
    assert_eq!(workers[0]["pid"], _worker.0.id(), "{workers}");
    let resumed = Instant::now();
    let out = cli(
        &schema,
        &[
            "hooks",
            "resume",
            "order:wake",
            "--payload",
            r#"{"note": "live"}"#,
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = ended(&keel, &run_id).await;
    let took = resumed.elapsed();
    assert_eq!(run.output.as_deref(), Some("\"live\""), "{run:?}");
    assert!(took < Duration::from_secs(10), "the wake took {took:?}");
}

/// A payload acknowledged to a waiting run whose driving worker is killed
/// before its activation writes anything: the dead worker took the run's
/// wake with its lease, and another worker takes the run over when that
/// lease expires.
#[tokio::test(flavor = "multi_thread")]
async fn a_woken_run_whose_worker_dies_before_writing_is_taken_over() {
    use keel_host::store::LeaseStore;
    let schema = schema("woken");
    let keel = engine(&schema).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = worker(&schema, &logs.path().join("first.log"));
    let run = keel
        .start(&testbed, "hook_then_compute", r#""rounds""#)
        .await
        .unwrap();
    let mut options = PgOptions::new(url());
    options.schema = schema.clone();
    let store = PgStore::open(options).await.unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    // The worker drives it to its wait on the hook and lets it go.
    loop {
        let got = keel.get_run(&run.run_id).await.unwrap();
        let held = store.held_leases(now()).await.unwrap();
        if got.status == RunStatus::Waiting && held.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the run never waited: {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = keel.journal(&run.run_id).await.unwrap().len();
    // A payload after which the run computes for seconds before it writes.
    keel.resume_hook("rounds", "1500000000").await.unwrap();
    while store.held_leases(now()).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the worker never took the run");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let killed = Instant::now();
    let after = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(
        after.len(),
        before,
        "the killed worker wrote before it died: {after:?}"
    );
    let _second = worker(&schema, &logs.path().join("second.log"));
    let ended = ended(&keel, &run.run_id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:?}");
    assert_eq!(ended.output.as_deref(), Some("1500000000"));
    // The lease (2 s), then the computation again.
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(30), "the takeover took {took:?}");
    let journal = keel.journal(&run.run_id).await.unwrap();
    let received = journal
        .iter()
        .filter(|e| matches!(e.fact, Fact::HookReceived { .. }))
        .count();
    assert_eq!(received, 1, "{journal:?}");
}

/// Starts `crashable` (three probes; the second hangs on its first attempt)
/// under `worker`, and waits until the hanging attempt has reported in.
async fn crashable_in_flight(schema: &str, api: &PaymentApi) -> String {
    let input = Value::String(api.url("/probe")).to_string();
    let out = cli(
        schema,
        &[
            "--allow-http",
            &api.addr.to_string(),
            "start",
            keel_tests::TESTBED,
            "crashable",
            "--input",
            &input,
            "--detach",
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    api.wait_for(|r| r.body.contains("\"label\":\"b\"")).await;
    json_of(&out)["run_id"].as_str().unwrap().to_string()
}

/// The probes the API received: `(label, step_id, attempt)`.
fn probes(api: &PaymentApi) -> Vec<(String, String, u64)> {
    api.requests()
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_str(&r.body).unwrap();
            (
                v["label"].as_str().unwrap().to_string(),
                v["step_id"].as_str().unwrap().to_string(),
                v["attempt"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn worker_with_grants(schema: &str, api: &PaymentApi, log: &Path) -> Running {
    worker_allowed(schema, &api.addr.to_string(), "2", log)
}

/// A worker whose steps may reach `addr`, with a lease of `lease_ttl`
/// seconds.
fn worker_allowed(schema: &str, addr: &str, lease_ttl: &str, log: &Path) -> Running {
    let log = std::fs::File::create(log).unwrap();
    Running(
        cli(
            schema,
            &["--allow-http", addr, "--lease-ttl", lease_ttl, "worker"],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_step_loses_its_run_to_another() {
    let schema = schema("kill");
    let api = PaymentApi::start(false).await.unwrap();
    let keel = engine(&schema).await;
    keel.load(keel_tests::TESTBED).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = worker_with_grants(&schema, &api, &logs.path().join("first.log"));
    let run_id = crashable_in_flight(&schema, &api).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();

    // The survivor's lease is long: on a loaded machine a 2 s lease can
    // lapse between renewals, and a lapsed lease rightly runs an
    // unfinished step again, which is not what this test is about.
    let second = worker_allowed(
        &schema,
        &api.addr.to_string(),
        "10",
        &logs.path().join("second.log"),
    );
    let run = ended(&keel, &run_id).await;
    drop(second);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let probes = probes(&api);
    let of = |label: &str| probes.iter().filter(|p| p.0 == label).collect::<Vec<_>>();
    assert_eq!(of("a").len(), 1, "a completed step ran again: {probes:?}");
    let b = of("b");
    assert_eq!(
        b.iter().map(|p| p.2).collect::<Vec<_>>(),
        [1, 2],
        "{probes:?}"
    );
    assert_eq!(b[0].1, b[1].1, "the retried attempt has another step ID");
    assert_eq!(of("c").len(), 1, "{probes:?}");
    let journal = keel.journal(&run_id).await.unwrap();
    assert!(completions(&journal).values().all(|&n| n == 1));
    // The journal says which worker was lost and which took over, before
    // the attempt the loss cost ran again; `runs show` says so of it.
    let taken: Vec<_> = journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::TakenOver {
                from_worker,
                by_worker,
                ..
            } => Some((e.seq, from_worker.clone(), by_worker.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(taken.len(), 1, "{journal:?}");
    let (seq, lost, by) = &taken[0];
    assert_ne!(lost, by);
    let retried = journal
        .iter()
        .find(|e| matches!(e.fact, Fact::StepAttemptStarted { attempt: 2, .. }));
    assert!(retried.is_some_and(|e| e.seq > *seq), "{journal:?}");
    let shown = common::keel_command()
        .args([
            "--db",
            &url(),
            "--pg-schema",
            &schema,
            "runs",
            "show",
            &run_id,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("attempt 1 was lost after")
            && text.contains(&format!("worker {by} took the run over")),
        "{text}"
    );
    all_replay(&keel, keel_tests::TESTBED).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_worker_s_writes_are_refused_after_its_lease_is_taken() {
    let schema = schema("zombie");
    let api = PaymentApi::start(false).await.unwrap();
    let keel = engine(&schema).await;
    keel.load(keel_tests::TESTBED).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let zombie_log = logs.path().join("zombie.log");
    let zombie = worker_with_grants(&schema, &api, &zombie_log);
    let run_id = crashable_in_flight(&schema, &api).await;
    let pid = zombie.0.id();
    signal(pid, "STOP");

    let second = worker_with_grants(&schema, &api, &logs.path().join("second.log"));
    let run = ended(&keel, &run_id).await;
    drop(second);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let journal = keel.journal(&run_id).await.unwrap();

    signal(pid, "CONT");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(&zombie_log).unwrap_or_default();
        if log.contains("was taken over") {
            break;
        }
        assert!(Instant::now() < deadline, "the zombie never noticed: {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(zombie);
    let after = keel.journal(&run_id).await.unwrap();
    assert_eq!(after, journal, "the zombie wrote to the journal");
    assert_eq!(after.iter().filter(|e| e.fact.is_end()).count(), 1);
    assert!(completions(&after).values().all(|&n| n == 1));
    all_replay(&keel, keel_tests::TESTBED).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_releases_a_worker_s_runs_to_another_at_once() {
    let schema = schema("sigterm");
    let api = PaymentApi::start(false).await.unwrap();
    let keel = engine(&schema).await;
    keel.load(keel_tests::TESTBED).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let long_lease = |log: &str| {
        let log = std::fs::File::create(logs.path().join(log)).unwrap();
        Running(
            cli(
                &schema,
                &[
                    "--allow-http",
                    &api.addr.to_string(),
                    "--lease-ttl",
                    "60",
                    "worker",
                ],
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
        )
    };
    let mut first = long_lease("first.log");
    let run_id = crashable_in_flight(&schema, &api).await;
    let stopped = Instant::now();
    let pid = first.0.id();
    signal(pid, "TERM");
    let status = first.0.wait().unwrap();
    assert!(
        status.success(),
        "the worker did not exit cleanly: {status:?}"
    );
    let out = cli(&schema, &["workers", "list"]).output().unwrap();
    assert_eq!(json_of(&out), json!([]), "the worker did not sign off");
    // The lease was released, not left to expire (it would last a minute).
    let second = long_lease("second.log");
    let run = ended(&keel, &run_id).await;
    drop(second);
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "took {:?}",
        stopped.elapsed()
    );
    let b: Vec<_> = probes(&api).into_iter().filter(|p| p.0 == "b").collect();
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0].1, b[1].1, "the rerun attempt has another step ID");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_from_one_process_stops_a_run_another_drives() {
    let schema = schema("cancel");
    let keel = engine(&schema).await;
    keel.load(keel_tests::ORDER_HOOKS).await.unwrap();
    let logs = tempfile::tempdir().unwrap();
    let _worker = worker(&schema, &logs.path().join("worker.log"));
    let run_id = parked(&schema, &keel, "c").await;
    let asked = Instant::now();
    let out = cli(
        &schema,
        &["runs", "cancel", &run_id, "--reason", "from the cli"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&out)["status"], "cancelled");
    assert_eq!(
        json_of(&out)["error"]["message"],
        "cancelled by cli: from the cli"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "took {:?}",
        asked.elapsed()
    );
    let journal = keel.journal(&run_id).await.unwrap();
    let names: Vec<&str> = journal.iter().map(|e| e.fact.name()).collect();
    assert!(names.contains(&"cancel_requested"), "{names:?}");
    assert_eq!(names.last(), Some(&"run_ended_cancelled"));
    let out = cli(&schema, &["hooks", "resume", "order:c", "--payload", "{}"])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["error"]["kind"], "hook_not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_fire_each_second_once_and_a_worker_killed_loses_no_fire() {
    use keel_host::core::schedule::{FireOutcome, Overlap, ScheduleSpec, Spec, parse_fire_run_id};
    let schema = schema("schedule");
    let keel = engine(&schema).await;
    keel.deploy_file(Path::new(keel_tests::TESTBED), None)
        .await
        .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut a = worker(&schema, &logs.path().join("a.log"));
    let _b = worker(&schema, &logs.path().join("b.log"));
    keel.create_schedule(ScheduleSpec {
        name: "tick".into(),
        workflow: "ten_steps".into(),
        deployment: None,
        input: "2".into(),
        additional_metadata: None,
        spec: Spec::every(1000, 0).unwrap(),
        overlap: Overlap::AllowAll,
        catchup_window_ms: 60_000,
        paused: false,
        note: None,
        start_at_ms: None,
        end_at_ms: None,
        declared_by: None,
    })
    .await
    .unwrap();
    let started = |s: &keel_host::core::schedule::ScheduleRecord| {
        s.recent
            .iter()
            .filter(|f| matches!(f.outcome, FireOutcome::Started | FireOutcome::AlreadyFired))
            .count()
    };
    let until = |n: usize| {
        let keel = keel.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let s = keel.schedule("tick").await.unwrap();
                if started(&s) >= n {
                    return s;
                }
                assert!(Instant::now() < deadline, "{} fires: {s:?}", started(&s));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    until(4).await;
    // kill -9 one worker mid-way; the other fires on.
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    until(12).await;
    let s = keel.pause_schedule("tick", None).await.unwrap();

    let mut nominal: Vec<u64> = Vec::new();
    for f in &s.recent {
        // A fire the killed worker admitted but did not record is decided
        // again by the other once its claim expires, and found: already
        // fired, not started twice.
        assert!(
            matches!(f.outcome, FireOutcome::Started | FireOutcome::AlreadyFired),
            "every fire started (once), none missed or skipped: {f:?}"
        );
        let run_id = f.run_id.as_ref().unwrap();
        assert_eq!(parse_fire_run_id(run_id.as_str()).unwrap().1, f.nominal_ms);
        nominal.push(f.nominal_ms);
    }
    assert!(
        nominal.windows(2).all(|w| w[1] == w[0] + 1000),
        "each second fired once, no gap: {nominal:?}"
    );
    // The runs: one per nominal time, each ending once.
    let runs: Vec<_> = keel
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.run_id.as_str().starts_with("tick:"))
        .collect();
    assert_eq!(
        runs.len(),
        nominal.len(),
        "no run the schedule does not know"
    );
    for run in &runs {
        let run = ended(&keel, run.run_id.as_str()).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        let journal = keel.journal(run.run_id.as_str()).await.unwrap();
        assert_eq!(journal.iter().filter(|e| e.fact.is_end()).count(), 1);
    }
}

/// A `per_tenant` run's input.
fn call(recorder: &Recorder, tenant: &str, hold_ms: u64, hang: bool) -> String {
    json!({"url": recorder.url(), "tenant": tenant, "hold_ms": hold_ms, "hang_first_attempt": hang})
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_hold_each_tenant_to_its_limit_of_two() {
    let schema = schema("flow");
    let recorder = Recorder::start().await.unwrap();
    let keel = engine(&schema).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let addr = recorder.addr.to_string();
    let logs = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for tenant in ["a", "b", "c"] {
        for _ in 0..20 {
            let input = call(&recorder, tenant, 150, false);
            runs.push(keel.start(&testbed, "per_tenant", &input).await.unwrap());
        }
    }
    // Started once the runs are admitted, so that the first worker ready
    // finds every tenant's first slots (a worker still starting takes no
    // run it then sits on). Leases long enough that a worker slowed by a
    // loaded machine keeps its runs: a lease taken over lets a step run
    // twice at once, which is the lease's business (tested above), not
    // the limit's.
    let workers = [
        worker_allowed(&schema, &addr, "30", &logs.path().join("a.log")),
        worker_allowed(&schema, &addr, "30", &logs.path().join("b.log")),
    ];
    for run in &runs {
        assert_eq!(ended(&keel, &run.run_id).await.status, RunStatus::Completed);
    }
    drop(workers);
    // Never over the limit; reached by some tenant (each reaches it on an
    // idle machine, but on a loaded one a tenant's calls may happen never
    // to overlap, which is no fault of the limit).
    let most = recorder.most_at_once();
    assert_eq!(most.len(), 3, "{most:?}");
    assert!(
        most.values().all(|&n| n <= 2),
        "two workers together held each tenant to two calls at once: {most:?}"
    );
    assert!(
        most.values().any(|&n| n == 2),
        "the limit is reached, not one at a time: {most:?}"
    );
    let finished = recorder.finished();
    for x in ["a", "b", "c"] {
        let last_x = finished.iter().rposition(|t| t == x).unwrap();
        for y in ["a", "b", "c"].into_iter().filter(|y| *y != x) {
            let first_y = finished.iter().position(|t| t == y).unwrap();
            assert!(
                first_y < last_x,
                "{x} finished before {y} began: {finished:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_holding_both_slots_gives_them_up_when_its_lease_expires() {
    let schema = schema("flowkill");
    let recorder = Recorder::start().await.unwrap();
    let keel = engine(&schema).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let addr = recorder.addr.to_string();
    let logs = tempfile::tempdir().unwrap();
    let mut first = worker_allowed(&schema, &addr, "2", &logs.path().join("first.log"));
    let mut holders = Vec::new();
    for _ in 0..2 {
        let input = call(&recorder, "k", 10, true);
        holders.push(keel.start(&testbed, "per_tenant", &input).await.unwrap());
    }
    let mut queued = Vec::new();
    for _ in 0..2 {
        let input = call(&recorder, "k", 10, false);
        let run = keel.start(&testbed, "per_tenant", &input).await.unwrap();
        assert_eq!(run.status, RunStatus::Queued);
        queued.push(run);
    }
    // Both holders are in their hanging first attempt.
    let deadline = Instant::now() + Duration::from_secs(60);
    while recorder.arrivals().len() < 2 {
        assert!(Instant::now() < deadline, "the holders never called");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let killed_at = recorder.elapsed_ms();
    // When the dead worker's leases on the holders expire, on the
    // recorder's clock.
    let expiry = {
        use keel_host::store::LeaseStore;
        let mut options = PgOptions::new(url());
        options.schema = schema.clone();
        let store = PgStore::open(options).await.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let leases = store.held_leases(now).await.unwrap();
        let held: Vec<_> = leases
            .iter()
            .filter(|l| holders.iter().any(|h| h.run_id == l.run_id))
            .collect();
        // A lease that has expired already is not listed: it bounds nothing.
        let last = held.iter().map(|l| l.expires_at_ms).max().unwrap_or(now);
        (last + recorder.elapsed_ms()).saturating_sub(now)
    };
    for run in &queued {
        assert_eq!(
            keel.get_run(&run.run_id).await.unwrap().status,
            RunStatus::Queued,
            "the dead worker's runs still hold the slots"
        );
    }
    let second = worker_allowed(&schema, &addr, "2", &logs.path().join("second.log"));
    for run in holders.iter().chain(&queued) {
        assert_eq!(ended(&keel, &run.run_id).await.status, RunStatus::Completed);
    }
    drop(second);
    let arrivals = recorder.arrivals();
    assert_eq!(
        arrivals.len(),
        6,
        "2 hung, 2 retried, 2 queued: {arrivals:?}"
    );
    // Nothing called for the key until the dead worker's leases expired
    // (a few ms of slack for reading two clocks).
    assert!(
        arrivals[2..]
            .iter()
            .all(|(_, at)| *at + 5 >= expiry && *at > killed_at),
        "killed at {killed_at} ms, leases expired at {expiry} ms: {arrivals:?}"
    );
    let rows = keel.limits().await.unwrap();
    assert!(
        rows.iter().all(|r| r.in_progress == 0 && r.queued == 0),
        "{rows:?}"
    );
}

/// Two workers on one schema whose steps may reach a recorder, with long
/// leases, and an engine in this process with the testbed loaded.
struct Fleet {
    recorder: Recorder,
    keel: Keel,
    testbed: Arc<keel_host::Loaded>,
    workers: [Running; 2],
    _logs: tempfile::TempDir,
}

impl Fleet {
    async fn start(name: &str) -> Fleet {
        let schema = schema(name);
        let recorder = Recorder::start().await.unwrap();
        let keel = engine(&schema).await;
        let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
        let addr = recorder.addr.to_string();
        let logs = tempfile::tempdir().unwrap();
        let workers = [
            worker_allowed(&schema, &addr, "30", &logs.path().join("a.log")),
            worker_allowed(&schema, &addr, "30", &logs.path().join("b.log")),
        ];
        Fleet {
            recorder,
            keel,
            testbed,
            workers,
            _logs: logs,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_rate_limit_holds_across_two_workers() {
    let Fleet {
        recorder,
        keel,
        testbed,
        workers,
        _logs,
    } = Fleet::start("rate").await;
    let call = json!({"url": recorder.url(), "tenant": "t", "hold_ms": 0});
    let mut runs = Vec::new();
    for _ in 0..5 {
        let input = json!([call, 10]).to_string();
        runs.push(keel.start(&testbed, "burst", &input).await.unwrap());
    }
    for run in &runs {
        let run = ended(&keel, &run.run_id).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    }
    drop(workers);
    let mut arrivals: Vec<u64> = recorder.arrivals().into_iter().map(|(_, at)| at).collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 50);
    for (i, start) in arrivals.iter().enumerate() {
        let within = arrivals[i..]
            .iter()
            .take_while(|at| **at < start + 1000)
            .count();
        assert!(
            within <= 10,
            "{within} calls in the second from {start} ms: {arrivals:?}"
        );
    }
    let took = arrivals[49] - arrivals[0];
    assert!(took >= 4000, "fifty calls at ten a second took {took} ms");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_concurrency_limit_holds_across_two_workers() {
    let Fleet {
        recorder,
        keel,
        testbed,
        workers,
        _logs,
    } = Fleet::start("permits").await;
    // Four runs of one tenant, four calls each at once, on either worker:
    // at most two calls of the tenant overlap anywhere.
    let call = json!({"url": recorder.url(), "tenant": "a", "hold_ms": 80});
    let mut runs = Vec::new();
    for _ in 0..4 {
        let input = json!([call, 4]).to_string();
        runs.push(keel.start(&testbed, "guarded_burst", &input).await.unwrap());
    }
    for run in &runs {
        let run = ended(&keel, &run.run_id).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.output.as_deref(), Some("4"));
    }
    drop(workers);
    assert_eq!(recorder.finished().len(), 16);
    let most = recorder.most_at_once();
    assert_eq!(most.get("a"), Some(&2), "{most:?}");
}

/// Waits (polling the store, up to a minute) until `run_id` exists and
/// has `status`.
async fn until_status(keel: &Keel, run_id: &str, status: RunStatus) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run = keel.get_run(run_id).await;
        if run.as_ref().is_ok_and(|r| r.status == status) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} never reached {status:?}: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The step of `run_id` that calls the downstream as `tenant` completed
/// once, and the downstream counted a call for at least one and at most
/// each of its attempts. A step runs at least once: on a loaded machine an
/// attempt may fail after the downstream took its call and be retried,
/// but no call happens that no journaled attempt accounts for.
async fn calls_within_attempts(keel: &Keel, recorder: &Recorder, run_id: &str, tenant: &str) {
    let journal = keel.journal(run_id).await.unwrap();
    let step = journal
        .iter()
        .find_map(|e| match &e.fact {
            Fact::StepScheduled { command, input, .. } if input.contains(tenant) => Some(*command),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no step calls `{tenant}`: {journal:?}"));
    let started = journal
        .iter()
        .filter(|e| matches!(e.fact, Fact::StepAttemptStarted { command, .. } if command == step))
        .count();
    assert_eq!(completions(&journal).get(&step), Some(&1), "{journal:?}");
    let calls = recorder.finished_of(tenant);
    assert!(
        (1..=started).contains(&calls),
        "`{tenant}`: {calls} calls for {started} attempts: {journal:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_cancelled_across_two_workers_closes_each_child_by_its_policy() {
    let Fleet {
        recorder,
        keel,
        testbed,
        workers,
        _logs,
    } = Fleet::start("family").await;
    let input = json!({"url": recorder.url(), "id": "pg", "charge_ms": 1500}).to_string();
    let parent = keel.start(&testbed, "family", &input).await.unwrap();
    let [cancel, abandon, wait] = [0, 1, 2].map(|c| parent.run_id.child(c).to_string());
    for child in [&cancel, &abandon, &wait] {
        until_status(&keel, child, RunStatus::Waiting).await;
    }
    until_status(&keel, &parent.run_id, RunStatus::Waiting).await;
    keel.resume_hook("go:pg", "true").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !recorder.arrivals().iter().any(|(t, _)| t == "charge-pg") {
        assert!(Instant::now() < deadline, "the parent's charge never began");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Asked from this process while a worker runs the parent's charge.
    keel.cancel(&parent.run_id, "trip called off", "test")
        .await
        .unwrap();
    let child_end = ended(&keel, &cancel).await;
    assert_eq!(child_end.status, RunStatus::Cancelled);
    let message = child_end.error.unwrap().message;
    assert!(message.contains("was cancelled"), "{message}");
    // Its own cleanup, completed once.
    calls_within_attempts(&keel, &recorder, &cancel, "refund-pg-cancel").await;
    // The parent's charge finished and was refunded; its end waits for the
    // `wait` child, and the `abandon` child goes on.
    until_status(&keel, &parent.run_id, RunStatus::Waiting).await;
    calls_within_attempts(&keel, &recorder, &parent.run_id, "charge-pg").await;
    calls_within_attempts(&keel, &recorder, &parent.run_id, "refund-pg").await;
    keel.resume_hook("confirm:pg-abandon", "true")
        .await
        .unwrap();
    assert_eq!(ended(&keel, &abandon).await.status, RunStatus::Completed);
    let held = keel.get_run(&parent.run_id).await.unwrap();
    assert!(!held.status.is_final(), "held by `wait`: {held:?}");
    keel.resume_hook("confirm:pg-wait", "true").await.unwrap();
    assert_eq!(ended(&keel, &wait).await.status, RunStatus::Completed);
    // The `wait` child's end, in a worker, wakes the parent in a worker.
    let parent_end = ended(&keel, &parent.run_id).await;
    drop(workers);
    assert_eq!(parent_end.status, RunStatus::Cancelled);
    assert_eq!(
        parent_end.error.unwrap().message,
        "cancelled by test: trip called off"
    );
    for (run_id, tenant) in [
        (parent.run_id.as_str(), "refund-pg"),
        (cancel.as_str(), "refund-pg-cancel"),
        (abandon.as_str(), "ship-pg-abandon"),
        (wait.as_str(), "ship-pg-wait"),
    ] {
        calls_within_attempts(&keel, &recorder, run_id, tenant).await;
    }
    for tenant in ["refund-pg-abandon", "refund-pg-wait"] {
        assert_eq!(recorder.finished_of(tenant), 0, "{tenant}");
    }
    all_replay(&keel, keel_tests::TESTBED).await;
}

/// Polls job `job_id` (up to two minutes) until `done` says it is far
/// enough.
async fn job_until(
    keel: &Keel,
    job_id: &str,
    done: impl Fn(&keel_host::core::bulk::JobRecord) -> bool,
) -> keel_host::core::bulk::JobRecord {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let job = keel.job(job_id).await.unwrap();
        if done(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "job {job_id} stalled: {job:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_whose_worker_is_killed_is_finished_by_another_moving_each_run_once() {
    use keel_host::core::bulk::JobState;
    let schema = schema("upgrade");
    let keel = engine(&schema).await;
    let deploy = |path: &'static str| {
        let keel = keel.clone();
        async move {
            let bytes = std::fs::read(path).unwrap();
            let spec = keel_host::DeploySpec {
                name: Some("testbed".into()),
                ..keel_host::DeploySpec::default()
            };
            keel.deploy(Path::new(path), &bytes, spec).await.unwrap().1
        }
    };
    let old = deploy(keel_tests::TESTBED).await;
    // Runs asleep for an hour, each of which replays on the new build.
    const RUNS: usize = 600;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(keel.start(&old, "sleeper", "3600000").await.unwrap().run_id);
    }
    keel.work(true).await.unwrap();
    let new = deploy(keel_tests::TESTBED_REORDERED).await;
    let job = keel
        .submit_upgrade("testbed", "testbed", false, None)
        .await
        .unwrap();

    // The first worker moves some, and is killed -9 in the middle.
    let logs = tempfile::tempdir().unwrap();
    let first = worker(&schema, &logs.path().join("first.log"));
    let midway = job_until(&keel, &job.job_id, |j| j.counts.done >= 20).await;
    drop(first);
    assert_eq!(
        midway.state,
        JobState::Running,
        "the job ended before the kill: {midway:?}"
    );
    // Another finishes it once the dead one's claim has lapsed.
    let second = worker(&schema, &logs.path().join("second.log"));
    let finished = job_until(&keel, &job.job_id, |j| j.state != JobState::Running).await;
    drop(second);
    assert_eq!(finished.state, JobState::Completed, "{finished:?}");
    // Exact counts: a run the first moved but did not record is found
    // moved by this job, and counts once. A run whose lease the dead
    // worker still held when the second reached it is reported as being
    // driven (on a loaded machine the lease can outlive the job's claim);
    // the same upgrade again moves it, as the documentation says.
    let counts = &finished.counts;
    assert_eq!(
        (counts.matched, counts.done + counts.failed, counts.skipped),
        (RUNS as u64, RUNS as u64, 0),
        "{finished:?}"
    );
    assert!(
        finished
            .errors
            .iter()
            .all(|e| e.error.contains("being driven")),
        "{finished:?}"
    );
    if counts.failed > 0 {
        let again = keel
            .submit_upgrade("testbed", "testbed", false, None)
            .await
            .unwrap();
        let again = keel.run_job(&again.job_id).await.unwrap();
        assert_eq!(
            (again.counts.done, again.counts.failed),
            (counts.failed, 0),
            "{again:?}"
        );
    }
    for run_id in &runs {
        let run = keel.get_run(run_id).await.unwrap();
        assert_eq!(run.component_hash, new.hash, "{run:?}");
        let moves = keel
            .journal(run_id)
            .await
            .unwrap()
            .iter()
            .filter(|e| matches!(e.fact, Fact::RunMoved { .. }))
            .count();
        assert_eq!(moves, 1, "run {run_id} moved {moves} times");
    }
}
