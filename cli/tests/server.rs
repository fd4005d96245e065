//! `keel serve` and the CLI as its client (`--server`): grants recorded
//! with a deployment reach the steps of runs started without them; the
//! seed scenarios (a start token twice, resume, a TTL key collision)
//! through a server; a token that keeps clients out; refusals.

mod common;

use common::{keel, printed_json};

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A `keel serve` process on a fresh store, killed when dropped.
struct Served {
    child: Child,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `keel serve` on a free loopback port with `args` and `envs`;
/// returns once it announced its address.
fn serve(args: &[&str], envs: &[(&str, &str)]) -> Served {
    serve_under(None, args, envs)
}

/// [`serve`], with the process's descriptor limit (soft and hard) lowered
/// to `max_fds` if given.
fn serve_under(max_fds: Option<u32>, args: &[&str], envs: &[(&str, &str)]) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve_in(dir.path(), max_fds, args, envs);
    served._dir = Some(dir);
    served
}

/// [`serve_under`] on the store in `dir` (kept when the server goes), so
/// another server can open it after this one is killed.
fn serve_in(
    dir: &std::path::Path,
    max_fds: Option<u32>,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Served {
    let keel = env!("CARGO_BIN_EXE_keel");
    let mut command = match max_fds {
        None => Command::new(keel),
        Some(n) => {
            let mut sh = Command::new("sh");
            sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), keel]);
            sh
        }
    };
    let mut child = command
        .arg("--db")
        .arg(dir.join("db"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(args)
        .envs(envs.iter().copied())
        .env("KEEL_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting keel serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving the API and console on ").nth(1) {
                let _ = tx.send(rest.trim_end_matches('/').to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("keel serve announces its address");
    Served {
        child,
        url,
        _dir: None,
    }
}

/// `keel --server URL --json ARGS`.
fn client(url: &str, args: &[&str]) -> (Output, Value) {
    client_with(url, args, &[])
}

fn client_with(url: &str, args: &[&str], envs: &[(&str, &str)]) -> (Output, Value) {
    let out = common::keel_command()
        .args(["--server", url, "--json"])
        .args(args)
        .env_remove("KEEL_API_TOKEN")
        .envs(envs.iter().copied())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running keel");
    let json = printed_json(args, &out);
    (out, json)
}

#[test]
fn grants_recorded_with_a_deployment_reach_steps_of_runs_started_without_them() {
    let files = tempfile::tempdir().unwrap();
    let secret_file = files.path().join("secret.txt");
    std::fs::write(&secret_file, "from the granted dir").unwrap();
    let server = serve(&[], &[("KEEL_TEST_GRANT", "worker-value")]);
    let dir = files.path().to_str().unwrap();
    let (out, deployment) = client(
        &server.url,
        &[
            "deploy",
            keel_tests::TESTBED,
            "--allow-env",
            "KEEL_TEST_GRANT",
            "--allow-dir",
            dir,
        ],
    );
    assert!(out.status.success(), "{deployment}");
    assert_eq!(deployment["name"], "testbed");
    assert_eq!(deployment["grants"]["env"], json!(["KEEL_TEST_GRANT"]));
    let input = json!(["KEEL_TEST_GRANT", secret_file]).to_string();

    // Started by name, with no grant on the command line.
    let (out, run) = client(
        &server.url,
        &["run", "testbed", "grants", "--input", &input],
    );
    assert!(out.status.success(), "{run}");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"]["env"], "worker-value");
    assert_eq!(run["output"]["file"], "from the granted dir");

    // Redeployed without grant flags: the name's grants are kept.
    let (out, kept) = client(&server.url, &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success(), "{kept}");
    assert_eq!(kept["grants"]["env"], json!(["KEEL_TEST_GRANT"]));
    // Redeployed with nothing granted: the next run's steps get nothing.
    let (out, _) = client(&server.url, &["deploy", keel_tests::TESTBED, "--no-grants"]);
    assert!(out.status.success());
    let (_, run) = client(
        &server.url,
        &["run", "testbed", "grants", "--input", &input],
    );
    assert_eq!(run["output"]["env"], Value::Null, "{run}");
    assert_eq!(run["output"]["file"], Value::Null, "{run}");
    // Granted where it stands, without a deploy: the next run gets it.
    let (out, changed) = client(
        &server.url,
        &[
            "deployments",
            "grant",
            "testbed",
            "--allow-env",
            "KEEL_TEST_GRANT",
        ],
    );
    assert!(out.status.success(), "{changed}");
    assert_eq!(changed[0]["grants"]["env"], json!(["KEEL_TEST_GRANT"]));
    let (_, run) = client(
        &server.url,
        &["run", "testbed", "grants", "--input", &input],
    );
    assert_eq!(run["output"]["env"], "worker-value", "{run}");
    assert_eq!(run["output"]["file"], Value::Null, "{run}");
    let (out, refused) = client(
        &server.url,
        &[
            "deploy",
            keel_tests::TESTBED,
            "--no-grants",
            "--allow-env",
            "X",
        ],
    );
    assert!(!out.status.success(), "{refused}");
    let (out, replaced) = client(
        &server.url,
        &["deployments", "grant", "testbed", "--replace"],
    );
    assert!(out.status.success(), "{replaced}");

    let (_, listed) = client(&server.url, &["deployments", "list"]);
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "one deployment per hash: {listed}"
    );
    let (_, shown) = client(&server.url, &["deployments", "show", "testbed"]);
    assert_eq!(shown["grants"]["env"], json!([]));
}

#[test]
fn the_seed_scenarios_work_through_a_server() {
    let server = serve(&[], &[]);
    let url = server.url.as_str();
    let order = json!({"order_id": "o-7", "note": "placed"}).to_string();
    // A start from a .wasm path uploads it.
    let (out, first) = client(
        url,
        &[
            "start",
            keel_tests::ORDER_HOOKS,
            "order_updates",
            "--input",
            &order,
            "--token",
            "order:o-7",
        ],
    );
    assert!(out.status.success(), "{first}");
    assert_eq!(first["status"], "waiting");
    let run_id = first["run_id"].as_str().unwrap();

    // The same token again: refused, naming the run that holds it.
    let (out, refused) = client(
        url,
        &[
            "start",
            "order-hooks",
            "order_updates",
            "--input",
            &order,
            "--token",
            "order:o-7",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "hook_conflict");
    assert_eq!(refused["error"]["conflicting_run_id"], run_id);
    assert!(refused["error"]["hint"].as_str().is_some(), "{refused}");

    let (_, hook) = client(url, &["hooks", "get", "order:o-7"]);
    assert_eq!(hook["run_id"], run_id);
    let payload = json!({"note": "paid", "done": true}).to_string();
    let (out, resumed) = client(
        url,
        &["hooks", "resume", "order:o-7", "--payload", &payload],
    );
    assert!(out.status.success(), "{resumed}");
    assert_eq!(resumed["status"], "completed");
    assert_eq!(resumed["output"], json!(["placed", "paid"]));
    let (_, result) = client(url, &["runs", "result", run_id, "--wait"]);
    assert_eq!(result["output"], json!(["placed", "paid"]));

    // A TTL key admits one run per window.
    let task = json!({"id": "x"}).to_string();
    let (out, admitted) = client(
        url,
        &[
            "start",
            keel_tests::TESTBED,
            "idempotent_task",
            "--input",
            &task,
        ],
    );
    assert!(out.status.success(), "{admitted}");
    let (out, collided) = client(
        url,
        &["start", "testbed", "idempotent_task", "--input", &task],
    );
    assert!(!out.status.success());
    assert_eq!(collided["error"]["kind"], "idempotency_collision");
    assert_eq!(collided["error"]["existing_run_id"], admitted["run_id"]);

    let (_, completed) = client(url, &["runs", "list", "--status", "completed"]);
    let completed = completed["runs"].as_array().unwrap();
    assert_eq!(completed.len(), 2);
    assert_eq!(completed[0]["run_id"], admitted["run_id"], "newest first");
    let (_, shown) = client(url, &["runs", "show", run_id]);
    let kinds: Vec<&str> = shown["journal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_completed"));
    let (_, missing) = client(url, &["runs", "get", "nope"]);
    assert_eq!(missing["error"]["kind"], "run_not_found");
}

#[test]
fn a_server_with_a_token_refuses_clients_without_it() {
    let server = serve(&["--api-token", "s3cret"], &[]);
    let (out, refused) = client(&server.url, &["runs", "list"]);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "unauthorized");
    let (out, runs) = client_with(
        &server.url,
        &["runs", "list"],
        &[("KEEL_API_TOKEN", "s3cret")],
    );
    assert!(out.status.success(), "{runs}");
    assert_eq!(runs, json!({"runs": [], "next_cursor": null}));
}

#[test]
fn serving_beyond_loopback_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args(["serve", "--http", "0.0.0.0:0"])
        .env_remove("KEEL_API_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without an API token"), "{stderr}");
    assert!(
        stderr.contains("--api-token"),
        "the CLI names the flag: {stderr}"
    );
}

#[test]
fn a_url_is_not_an_http_grant() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args([
            "--json",
            "deploy",
            keel_tests::TESTBED,
            "--allow-http",
            "http://127.0.0.1:9000",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["error"]["kind"], "invalid_grant");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("host:port")
    );
    assert!(
        error["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("HOST:PORT")
    );
}

/// Sends one HTTP/1.1 request on a new connection and reads the answer
/// until the server closes it, waiting at most `patience` for each read.
fn http(addr: &str, request: &str, patience: Duration) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(patience))?;
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[test]
fn connections_that_never_finish_their_headers_cannot_starve_the_server() {
    use std::io::{Read, Write};
    // 256 descriptors: the server keeps at most 128 connections open.
    let served = serve_under(
        Some(256),
        &["--api-token", "t", "--header-timeout", "5s"],
        &[],
    );
    let (out, deployed) = client_with(
        &served.url,
        &["deploy", keel_tests::TESTBED],
        &[("KEEL_API_TOKEN", "t")],
    );
    assert!(out.status.success(), "{deployed}");
    let addr = served.url.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .write_all(b"GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t\r\n")
            .unwrap();
        held.push(stream);
    }
    // Answered at once: a new connection closes the longest-idle held one
    // (well within the 5 s header timeout, which would free them anyway).
    let patience = Duration::from_secs(1);
    let health = http(
        &addr,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        patience,
    )
    .expect("the health check is answered while 300 connections are held");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let body = r#"{"input": 3}"#;
    let start = http(
        &addr,
        &format!(
            "POST /v1/workflows/two_steps/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
        patience,
    )
    .expect("an authenticated start is answered while 300 connections are held");
    assert!(start.starts_with("HTTP/1.1 201"), "{start}");
    // Every held connection is closed by the server: evicted, or at its
    // header timeout. A read sees the end (or an answer, then the end).
    for stream in &mut held {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut rest = Vec::new();
        let read = stream.read_to_end(&mut rest);
        assert!(
            read.is_ok()
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "a held connection stayed open: {read:?}"
        );
    }
}

#[test]
fn a_schedule_fires_on_a_server_each_second_once_and_is_managed_from_the_cli() {
    let server = serve(&[], &[]);
    let (out, _) = client(&server.url, &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success());
    let (out, created) = client(
        &server.url,
        &[
            "schedules",
            "create",
            "tick",
            "ten_steps",
            "--every",
            "1s",
            "--input",
            "1",
            "--overlap",
            "allow-all",
        ],
    );
    assert!(out.status.success(), "{created}");
    assert_eq!(created["description"], "every 1s");
    // The server's worker fires it: wait (up to 30 s) for three fires.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let (_, shown) = client(&server.url, &["schedules", "show", "tick"]);
        let completed = shown["recent"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["outcome"] == "started" && f["run_status"] == "completed")
            .count();
        if completed >= 3 {
            break shown;
        }
        assert!(std::time::Instant::now() < deadline, "{shown}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let fires = shown["recent"].as_array().unwrap();
    let nominal: Vec<u64> = fires
        .iter()
        .map(|f| f["nominal_ms"].as_u64().unwrap())
        .collect();
    assert!(
        nominal.windows(2).all(|w| w[1] == w[0] + 1000),
        "one fire per second, none twice, none skipped: {nominal:?}"
    );
    // (How late each fire is decided is a benchmark figure, `keel bench`,
    // not something a test on a loaded machine can promise.)
    assert!(
        fires
            .iter()
            .all(|f| f["at_ms"].as_u64() >= f["nominal_ms"].as_u64()),
        "no fire is decided before its time: {shown}"
    );

    let (out, paused) = client(
        &server.url,
        &["schedules", "pause", "tick", "--note", "enough"],
    );
    assert!(out.status.success(), "{paused}");
    assert_eq!(paused["paused"], true);
    let (_, listed) = client(&server.url, &["schedules", "list"]);
    let tick = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tick")
        .unwrap();
    assert_eq!(tick["paused"], true);
    let (out, fires) = client(&server.url, &["schedules", "trigger", "tick"]);
    assert!(out.status.success(), "{fires}");
    assert_eq!(fires[0]["outcome"], "started");
    let (out, _) = client(&server.url, &["schedules", "delete", "tick"]);
    assert!(out.status.success());
    let (out, gone) = client(&server.url, &["schedules", "show", "tick"]);
    assert!(!out.status.success());
    assert_eq!(gone["error"]["kind"], "schedule_not_found", "{gone}");
    assert!(
        gone["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("schedules list"),
        "{gone}"
    );
}

/// Kills `server` with SIGKILL and waits for it to be gone.
fn kill_9(mut server: Served) {
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("the server is gone");
}

/// `keel --server URL --json runs stream RUN NAME --from FROM`, read to
/// the stream's end: one JSON value per chunk.
fn read_stream(url: &str, run_id: &str, name: &str, from: u64) -> Vec<Value> {
    let out = common::keel_command()
        .args(["--server", url, "--json", "runs", "stream", run_id, name])
        .args(["--from", &from.to_string()])
        .env_remove("KEEL_API_TOKEN")
        .output()
        .expect("running keel runs stream");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn a_stream_half_written_when_the_server_is_killed_goes_on_after_the_same_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_in(dir.path(), None, &[], &[]);
    let (out, _) = client(&server.url, &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success());
    let plan = r#"{"count": 10, "pause_at": 5, "token": "go:k9"}"#;
    let (out, run) = client(
        &server.url,
        &["run", "testbed", "streamer", "--input", plan],
    );
    assert!(out.status.success(), "{run}");
    assert_eq!(run["status"], "waiting", "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    // A reader follows the stream; it has the first half when the server
    // is killed.
    let mut reader = common::keel_command()
        .args(["--server", &server.url, "--json", "runs", "stream"])
        .args([run_id.as_str(), "progress"])
        .env_remove("KEEL_API_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(reader.stdout.take().unwrap()).lines();
    let before: Vec<Value> = (0..5)
        .map(|_| serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap())
        .collect();
    kill_9(server);
    // The reader is told its server went away: it ends, and not as a
    // stream that ended well.
    assert!(!reader.wait().unwrap().success());

    let server = serve_in(dir.path(), None, &[], &[]);
    let (out, resumed) = client(
        &server.url,
        &["hooks", "resume", "go:k9", "--payload", "true"],
    );
    assert!(out.status.success(), "{resumed}");
    let (out, result) = client(&server.url, &["runs", "result", &run_id, "--wait"]);
    assert!(out.status.success(), "{result}");
    assert_eq!(
        (&result["status"], &result["output"]),
        (&json!("completed"), &json!(10))
    );
    // Read again from the start: the chunks before the kill are the same
    // chunks, and the stream goes on after them to its close.
    let after = read_stream(&server.url, &run_id, "progress", 0);
    assert_eq!(after.len(), 11, "{after:?}");
    assert_eq!(after[..5], before[..]);
    let values: Vec<&Value> = after[..10].iter().map(|c| &c["value"]).collect();
    let expected: Vec<Value> = (0..10).map(|i| json!({ "i": i })).collect();
    assert_eq!(values, expected.iter().collect::<Vec<_>>());
    assert_eq!(after[10]["kind"], "closed");
    // A reader that had the first five resumes after them.
    let rest = read_stream(&server.url, &run_id, "progress", 5);
    assert_eq!(rest[..], after[5..]);
}

#[test]
fn a_reply_journaled_before_the_server_is_killed_is_the_answer_to_the_retried_resume() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_in(dir.path(), None, &[], &[]);
    let (out, _) = client(&server.url, &["deploy", keel_tests::TESTBED]);
    assert!(out.status.success());
    let (out, run) = client(
        &server.url,
        &["run", "testbed", "replier", "--input", "\"ask:k9\""],
    );
    assert_eq!(run["status"], "waiting", "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    assert!(out.status.success());
    // The resumer's payload is acknowledged; its answer never reaches it.
    let resume = [
        "hooks",
        "resume",
        "ask:k9",
        "--payload",
        r#"{"q": "k9"}"#,
        "--payload-id",
        "p-k9",
    ];
    let (out, acknowledged) = client(&server.url, &resume);
    assert!(out.status.success(), "{acknowledged}");
    // The worker journals the reply (seen through the API), then dies
    // before anyone answers the resumer with it.
    let (out, journaled) = client(
        &server.url,
        &["hooks", "reply", "ask:k9", "p-k9", "--wait", "30s"],
    );
    assert!(out.status.success(), "{journaled}");
    let expected = json!({"echo": {"q": "k9"}, "n": 1});
    assert_eq!(journaled["reply"], expected);
    kill_9(server);

    // The resumer retries with the same payload ID: the same reply, and
    // the workflow saw the payload once.
    let server = serve_in(dir.path(), None, &[], &[]);
    let mut retried = resume.to_vec();
    retried.extend(["--wait-reply", "30s"]);
    let (out, again) = client(&server.url, &retried);
    assert!(out.status.success(), "{again}");
    assert_eq!(again["payload_id"], "p-k9");
    assert_eq!(again["reply"], expected);
    drop(server);
    let exported = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args(["journal", "export", &run_id, "--format", "json"])
        .output()
        .unwrap();
    assert!(exported.status.success());
    let journal = String::from_utf8_lossy(&exported.stdout);
    let received = journal.matches(r#""kind": "hook_received""#).count();
    assert_eq!(received, 1, "the payload was applied once: {journal}");
}

#[test]
fn a_journal_is_exported_while_a_server_holds_the_store_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_in(dir.path(), None, &[], &[]);
    let (out, run) = client(
        &server.url,
        &["run", keel_tests::TESTBED, "two_steps", "--input", "4"],
    );
    assert!(out.status.success(), "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    // Through the server.
    let file = dir.path().join("run.journal");
    let (out, exported) = client(
        &server.url,
        &["journal", "export", run_id, "-o", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{exported}");
    assert_eq!(exported["run_id"], run_id);
    // Where the store is, which the server holds: through its socket.
    let local = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args(["journal", "export", run_id, "--format", "json"])
        .output()
        .unwrap();
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    let local_file = dir.path().join("run.json");
    std::fs::write(&local_file, &local.stdout).unwrap();
    for exported in [&file, &local_file] {
        let out = common::keel_command()
            .args(["--json", "replay", keel_tests::TESTBED])
            .arg(exported)
            .output()
            .unwrap();
        let reports = printed_json(&["replay"], &out);
        assert!(out.status.success(), "{reports}");
        assert_eq!(reports[0]["verdict"], "ok", "{reports}");
        assert_eq!(reports[0]["output"], "[5,8]");
    }
    // What a deployment exports, schemas included: through the server, and
    // where the store is (through its socket); a .wasm file needs no store.
    let (out, inspected) = client(&server.url, &["inspect", "testbed"]);
    assert!(out.status.success(), "{inspected}");
    let decide = |view: &Value| {
        view["workflows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "decide")
            .cloned()
            .unwrap_or_else(|| panic!("{view}"))
    };
    assert_eq!(
        decide(&inspected)["input_schema"]["type"],
        "string",
        "{inspected}"
    );
    for target in ["testbed", keel_tests::TESTBED] {
        let local = common::keel_command()
            .arg("--db")
            .arg(dir.path().join("db"))
            .args(["--json", "inspect", target])
            .output()
            .unwrap();
        let view: Value = serde_json::from_slice(&local.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&local.stderr)));
        assert_eq!(view["hash"], inspected["hash"], "{target}");
        assert_eq!(decide(&view), decide(&inspected), "{target}");
    }
    let (out, unknown) = client(&server.url, &["inspect", "nope"]);
    assert!(!out.status.success());
    assert_eq!(
        unknown["error"]["kind"], "deployment_not_found",
        "{unknown}"
    );
}

#[test]
fn tokens_and_webhooks_made_on_the_store_hold_on_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let (out, run) = keel(
        &dir.path().join("db"),
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "2"],
    );
    assert!(out.status.success(), "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    // Minted with the store's secret, with no server running.
    let (out, minted) = keel(
        &dir.path().join("db"),
        &["tokens", "create", "--read-run", run_id],
    );
    assert!(out.status.success(), "{minted}");
    let token = minted["token"].as_str().unwrap();
    assert!(token.starts_with("ks1."), "{minted}");
    let (out, refused) = keel(
        &dir.path().join("db"),
        &["tokens", "create", "--read-run", run_id, "--start", "x"],
    );
    assert!(!out.status.success());
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exactly one"),
        "{refused}"
    );
    let (out, created) = keel(
        &dir.path().join("db"),
        &[
            "webhooks",
            "create",
            "gh",
            "--hook",
            "ship:{/order}",
            "--scheme",
            "github",
            "--secret",
            "a-github-secret",
        ],
    );
    assert!(out.status.success(), "{created}");
    assert_eq!(created["path"], "/v1/webhooks/gh");

    let server = serve_in(dir.path(), None, &["--api-token", "s3cret"], &[]);
    let as_scoped = [("KEEL_API_TOKEN", token)];
    let (out, got) = client_with(&server.url, &["runs", "get", run_id], &as_scoped);
    assert!(
        out.status.success(),
        "the server takes the store's token: {got}"
    );
    assert_eq!(got["run_id"], run_id);
    let (out, refused) = client_with(&server.url, &["runs", "list"], &as_scoped);
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "forbidden", "{refused}");
    let master = [("KEEL_API_TOKEN", "s3cret")];
    let (_, listed) = client_with(&server.url, &["webhooks", "list"], &master);
    assert_eq!(listed[0]["id"], "gh", "{listed}");
    assert_eq!(listed[0]["scheme"], "github", "{listed}");
    let (out, minted) = client_with(
        &server.url,
        &[
            "tokens",
            "create",
            "--resume-hook",
            "ship:o-1",
            "--ttl",
            "5m",
        ],
        &master,
    );
    assert!(out.status.success(), "{minted}");
    let ttl = minted["expires_at_ms"].as_u64().unwrap() - minted["issued_at_ms"].as_u64().unwrap();
    assert_eq!(ttl, 300_000);
    let (out, deleted) = client_with(&server.url, &["webhooks", "delete", "gh"], &master);
    assert!(out.status.success(), "{deleted}");
    let (out, gone) = client_with(&server.url, &["webhooks", "show", "gh"], &master);
    assert!(!out.status.success());
    assert_eq!(gone["error"]["kind"], "webhook_not_found", "{gone}");
}

/// An OTLP/HTTP JSON collector on a loopback port: every export's spans,
/// sent on `spans` as they arrive (each answered 200 before it is sent).
fn collector() -> (String, std::sync::mpsc::Receiver<Value>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            );
            let export: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            for rs in export["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        let _ = tx.send(span.clone());
                    }
                }
            }
        }
    });
    (url, rx)
}

/// The attribute `key` of `span`, as text.
fn attribute(span: &Value, key: &str) -> Option<String> {
    let value = span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]
        .clone();
    value
        .as_object()?
        .values()
        .next()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
}

#[test]
fn a_runs_spans_join_the_callers_trace_across_a_kill_and_replay_makes_none() {
    let (collector, spans) = collector();
    let dir = tempfile::tempdir().unwrap();
    let traced = ["--otlp-endpoint", collector.as_str()];
    let fast = [
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
    ];
    let server = serve_in(dir.path(), None, &traced, &fast);
    let (out, _) = client(&server.url, &["deploy", keel_tests::ORDER_HOOKS]);
    assert!(out.status.success());
    // Started by a caller in trace 4bf9..., under its span 00f0....
    let (trace, caller) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let body = r#"{"input": {"order_id": "t-1", "note": "placed"}, "hook": {"token": "order:t-1"}, "wait_ms": 10000, "return_on_wait": true}"#;
    let addr = server.url.trim_start_matches("http://");
    let request = format!(
        "POST /v1/workflows/order_updates/runs HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ntraceparent: 00-{trace}-{caller}-01\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = http(addr, &request, Duration::from_secs(30)).unwrap();
    assert!(answer.contains("\"status\":\"waiting\""), "{answer}");
    let run_id = answer
        .split("\"run_id\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    // Its first activation's span is exported before the worker dies.
    let first = spans.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut seen = vec![first];
    while !seen.iter().any(|s| s["name"] == "activation order_updates") {
        seen.push(spans.recv_timeout(Duration::from_secs(30)).unwrap());
    }
    kill_9(server);

    // Another worker resumes the run, long after: the same trace.
    let server = serve_in(dir.path(), None, &traced, &fast);
    let (out, resumed) = client(
        &server.url,
        &[
            "hooks",
            "resume",
            "order:t-1",
            "--payload",
            r#"{"note": "paid", "done": true}"#,
        ],
    );
    assert!(out.status.success(), "{resumed}");
    let (out, ended) = client(&server.url, &["runs", "result", &run_id]);
    assert!(out.status.success(), "{ended}");
    // The run's span, both steps' and every activation a step ran under
    // (the last ends after the run's span). After the kill the run may be
    // activated more than once: a worker that takes its lease over once it
    // expires replays it to its wait again before the payload comes.
    let named = |seen: &[Value], name: &str| -> Vec<Value> {
        seen.iter().filter(|s| s["name"] == name).cloned().collect()
    };
    let complete = |seen: &[Value]| {
        let activations = named(seen, "activation order_updates");
        let steps = named(seen, "step record_note");
        !named(seen, "run order_updates").is_empty()
            && activations.len() >= 2
            && steps.len() >= 2
            && steps
                .iter()
                .all(|s| activations.iter().any(|a| a["spanId"] == s["parentSpanId"]))
    };
    while !complete(&seen) {
        seen.push(spans.recv_timeout(Duration::from_secs(30)).unwrap());
    }
    let run = seen
        .iter()
        .find(|s| s["name"] == "run order_updates")
        .unwrap();
    assert_eq!(run["traceId"], trace, "{run}");
    assert_eq!(
        run["parentSpanId"], caller,
        "under the caller's span: {run}"
    );
    assert_eq!(
        attribute(run, "keel.run_id").as_deref(),
        Some(run_id.as_str())
    );
    assert_eq!(attribute(run, "keel.status").as_deref(), Some("completed"));
    let run_span = run["spanId"].as_str().unwrap();
    let activations: Vec<&Value> = seen
        .iter()
        .filter(|s| s["name"] == "activation order_updates")
        .collect();
    assert!(
        activations.len() >= 2,
        "one before the kill, one or more after: {seen:?}"
    );
    for a in &activations {
        assert_eq!(a["traceId"], trace, "{a}");
        assert_eq!(a["parentSpanId"], run_span, "{a}");
    }
    let waits = activations[0]["events"].to_string();
    assert!(
        waits.contains("run waits"),
        "the hook wait is an event: {waits}"
    );
    let activation_ids: Vec<&str> = activations
        .iter()
        .map(|a| a["spanId"].as_str().unwrap())
        .collect();
    let steps: Vec<&Value> = seen
        .iter()
        .filter(|s| s["name"] == "step record_note")
        .collect();
    assert_eq!(steps.len(), 2, "one attempt of each note: {seen:?}");
    for step in &steps {
        assert_eq!(step["traceId"], trace);
        assert!(activation_ids.contains(&step["parentSpanId"].as_str().unwrap()));
        assert_eq!(
            attribute(step, "keel.outcome").as_deref(),
            Some("completed")
        );
        assert_eq!(attribute(step, "keel.attempt").as_deref(), Some("1"));
    }
    drop(server);
    while spans.try_recv().is_ok() {}

    // Replaying the recorded journal (its export flushed when it exits)
    // emits no span.
    let file = dir.path().join("run.json");
    let exported = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args(["journal", "export", &run_id, "--output"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(exported.status.success(), "{exported:?}");
    let replayed = common::keel_command()
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .args(["--otlp-endpoint", collector.as_str(), "replay"])
        .arg(keel_tests::ORDER_HOOKS)
        .arg(&file)
        .output()
        .unwrap();
    assert!(replayed.status.success(), "{replayed:?}");
    assert_eq!(spans.try_recv().ok(), None, "replay exported a span");
}

#[test]
fn a_steps_http_request_carries_its_attempts_traceparent() {
    let (collector, spans) = collector();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let api = runtime
        .block_on(keel_payment_api::PaymentApi::start(false))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = json!({
        "order_id": "o-t", "user_id": "u-1", "amount": 100, "payment_url": api.url("/charge"),
    })
    .to_string();
    let host = api.addr.to_string();
    let out = common::keel_command()
        .arg("--db")
        .arg(dir.path().join("db"))
        .args([
            "--otlp-endpoint",
            collector.as_str(),
            "--allow-http",
            &host,
            "--json",
        ])
        .args(["run", keel_tests::ORDER, "process_order", "--input", &input])
        .env("OTEL_BSP_SCHEDULE_DELAY", "20")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let charge = api
        .requests()
        .into_iter()
        .find(|r| r.path == "/charge")
        .expect("the charge was sent");
    let traceparent = charge
        .traceparent
        .expect("the charge carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace, parent) = (parts[1], parts[2]);
    // The process flushed its spans before it exited.
    let exported: Vec<Value> = spans.try_iter().collect();
    let step = exported
        .iter()
        .find(|s| s["spanId"] == parent)
        .unwrap_or_else(|| panic!("no span {parent} among {exported:?}"));
    assert!(
        step["name"].as_str().unwrap().starts_with("step "),
        "{step}"
    );
    assert_eq!(step["traceId"], trace);
    assert!(
        exported
            .iter()
            .any(|s| s["name"] == "run process_order" && s["traceId"] == trace),
        "the run's span is in the same trace: {exported:?}"
    );
}

#[test]
fn a_cancelled_run_reads_through_a_server_and_its_api_file_replays() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_in(dir.path(), None, &[], &[]);
    let input = r#"{"order_id": "c9", "note": "first"}"#;
    let (out, run) = client(
        &server.url,
        &[
            "start",
            keel_tests::ORDER_HOOKS,
            "order_updates",
            "--input",
            input,
            "--token",
            "order:c9",
        ],
    );
    assert!(out.status.success(), "{run}");
    assert_eq!(run["status"], "waiting", "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let (out, cancelled) = client(
        &server.url,
        &["runs", "cancel", run_id, "--reason", "customer asked"],
    );
    assert!(out.status.success(), "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    let (out, shown) = client(&server.url, &["runs", "show", run_id]);
    assert!(out.status.success(), "{shown}");
    let kinds: Vec<&str> = shown["journal"]
        .as_array()
        .unwrap_or_else(|| panic!("{shown}"))
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.last(), Some(&"run_ended_cancelled"), "{shown}");
    let end = shown["journal"].as_array().unwrap().last().unwrap();
    assert_eq!(end["error_kind"], "cancelled", "{end}");
    let request = shown["journal"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "cancel_requested")
        .unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(request["reason"], "customer asked", "{request}");
    let text = common::keel_command()
        .args(["--server", &server.url, "runs", "show", run_id])
        .output()
        .unwrap();
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );

    // The file the API serves is one `keel replay` reads.
    let url = format!("{}/v1/runs/{run_id}/journal?format=file", server.url);
    let body = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async { reqwest::get(url).await?.error_for_status()?.text().await })
        .unwrap();
    let file = dir.path().join("cancelled.json");
    std::fs::write(&file, body).unwrap();
    let out = common::keel_command()
        .args(["--json", "replay", keel_tests::ORDER_HOOKS])
        .arg(&file)
        .output()
        .unwrap();
    let reports = printed_json(&["replay"], &out);
    assert!(out.status.success(), "{reports}");
    assert_eq!(reports[0]["verdict"], "ok", "{reports}");
}

/// An answer with what differs between two stores by nature (run IDs,
/// times, worker names) replaced, so that two doors' answers compare.
fn normalized(value: &Value) -> Value {
    let uuid = |s: &str| s.len() == 36 && s.matches('-').count() == 4;
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let varies = k.ends_with("_ms") || k.contains("worker") || k == "at";
                    let v = match (varies, v) {
                        (true, Value::Null) => Value::Null,
                        (true, _) => json!("<varies>"),
                        (false, v) => normalized(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::String(s) if uuid(s) => json!("<run id>"),
        Value::String(s) => {
            // IDs inside messages (`run 0190...`).
            let words: Vec<String> = s
                .split(' ')
                .map(|w| match uuid(w.trim_matches([',', '.', ':', ';', '`'])) {
                    true => "<run id>".to_string(),
                    false => w.to_string(),
                })
                .collect();
            json!(words.join(" "))
        }
        v => v.clone(),
    }
}

/// One way to reach a store: its command line's answer to `args`.
type Door<'a> = (&'a str, Box<dyn Fn(&[&str]) -> (Output, Value) + 'a>);

#[test]
fn the_same_commands_answer_the_same_in_process_through_a_worker_and_through_a_server() {
    let alone = tempfile::tempdir().unwrap();
    let held = tempfile::tempdir().unwrap();
    let _worker = common::socket_worker(held.path());
    let server = serve(&[], &[]);
    let doors: Vec<Door> = vec![
        ("in process", Box::new(|args| keel(alone.path(), args))),
        (
            "a worker's socket",
            Box::new(|args| keel(held.path(), args)),
        ),
        ("a server", Box::new(|args| client(&server.url, args))),
    ];
    // Each door's answers, step by step.
    let mut answers: Vec<Vec<(String, Value)>> = Vec::new();
    for (door, keel) in &doors {
        let mut said = Vec::new();
        let mut ask = |step: &str, args: &[&str]| -> Value {
            let (out, answer) = keel(args);
            // A refusal is an error alone (a run that failed has its own).
            let refused = answer
                .as_object()
                .is_some_and(|o| o.len() == 1 && o.contains_key("error"));
            assert_eq!(out.status.success(), !refused, "{door}: {step}: {answer}");
            let mut kept = normalized(&answer);
            if step.starts_with("resume") {
                // Compared apart (below): the run as the reply found it.
                kept["status"] = json!("<as it then is>");
            }
            said.push((step.to_string(), kept));
            answer
        };
        ask(
            "deploy",
            &["deploy", keel_tests::TESTBED, "--name", "testbed"],
        );
        let run = ask("run", &["run", "testbed", "two_steps", "--input", "5"]);
        assert_eq!(run["status"], "completed", "{door}: {run}");
        let run_id = run["run_id"].as_str().unwrap().to_string();
        let restarted = ask(
            "restart it from a step",
            &["runs", "restart", &run_id, "--from-step", "mul"],
        );
        assert_eq!(restarted["output"], json!([6, 10]), "{door}: {restarted}");
        let forked = ask(
            "fork it from a position",
            &["runs", "fork", &run_id, "--at", "1", "--input", "6"],
        );
        assert_eq!(forked["output"], json!([7, 12]), "{door}: {forked}");
        assert_eq!(forked["attributes"]["forked_from"], json!(run_id), "{door}");
        let waiting = ask(
            "start on a hook",
            &["start", "testbed", "replier", "--input", "\"ask:doors\""],
        );
        assert_eq!(waiting["status"], "waiting", "{door}: {waiting}");
        let replied = ask(
            "resume, waiting for the reply",
            &[
                "hooks",
                "resume",
                "ask:doors",
                "--payload",
                r#"{"q": 1}"#,
                "--payload-id",
                "p-1",
                "--wait-reply",
                "10s",
            ],
        );
        assert_eq!(
            replied["reply"],
            json!({"echo": {"q": 1}, "n": 1}),
            "{door}"
        );
        // The answer comes with the reply: a worker's run may still be on
        // its way to its next wait then. A CLI with no worker lets the run
        // settle first, since nothing drives it after the CLI exits.
        if *door == "in process" {
            assert_eq!(replied["status"], "waiting", "{replied}");
        }
        // Paused where it waits, and resumed.
        let waiting_id = waiting["run_id"].as_str().unwrap().to_string();
        let paused = ask("pause the waiting run", &["runs", "pause", &waiting_id]);
        assert_eq!(paused["status"], "paused", "{door}: {paused}");
        assert_eq!(paused["paused"]["by"], "cli", "{door}: {paused}");
        let listed = ask("the paused runs", &["runs", "list", "--status", "paused"]);
        assert_eq!(listed["runs"][0]["run_id"], json!(waiting_id), "{door}");
        let resumed = ask("resume it", &["runs", "resume", &waiting_id]);
        assert_eq!(resumed["status"], "waiting", "{door}: {resumed}");
        // Its state read through its queries: a replay, nothing written.
        let totalling = ask(
            "start a running total",
            &[
                "start",
                "testbed",
                "running_total",
                "--input",
                "\"total:doors\"",
            ],
        );
        let total_id = totalling["run_id"].as_str().unwrap().to_string();
        let added = ask(
            "add to it",
            &["hooks", "resume", "total:doors", "--payload", "5"],
        );
        assert_eq!(added["status"], "waiting", "{door}: {added}");
        let queries = ask("its queries", &["runs", "query", &total_id]);
        assert_eq!(
            queries["queries"],
            json!({"count": 1, "total": 5}),
            "{door}: {queries}"
        );
        let total = ask("its total", &["runs", "query", &total_id, "total"]);
        assert_eq!(total["value"], json!(5), "{door}: {total}");
        let unknown = ask(
            "a query it never set",
            &["runs", "query", &total_id, "balance"],
        );
        assert_eq!(
            unknown["error"]["kind"], "query_not_found",
            "{door}: {unknown}"
        );
        // Judged for an upgrade to the build it is on: nothing to move.
        let judged = ask(
            "an upgrade's dry run",
            &[
                "deployments",
                "upgrade",
                "testbed",
                "--to",
                "testbed",
                "--dry-run",
            ],
        );
        assert_eq!(judged["state"], "completed", "{door}: {judged}");
        assert_eq!(judged["upgrade"]["dry_run"], true, "{door}: {judged}");
        assert_eq!(judged["counts"]["failed"], 0, "{door}: {judged}");
        // A delay is read on the store's clock, whatever the door.
        let delayed = ask(
            "start in an hour",
            &[
                "start",
                "testbed",
                "two_steps",
                "--input",
                "7",
                "--delay",
                "1h",
            ],
        );
        assert_eq!(delayed["status"], "scheduled", "{door}: {delayed}");
        let delayed_id = delayed["run_id"].as_str().unwrap().to_string();
        let starts = delayed["wake_at_ms"].as_u64().unwrap();
        let admitted = delayed["created_at_ms"].as_u64().unwrap();
        assert_eq!(starts - admitted, 3_600_000, "{door}: {delayed}");
        let cancelled = ask(
            "cancel the delayed run",
            &["runs", "cancel", &delayed_id, "--reason", "not today"],
        );
        assert_eq!(cancelled["status"], "cancelled", "{door}: {cancelled}");
        let shown = ask("show it", &["runs", "show", &delayed_id]);
        let asked = shown["journal"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "cancel_requested")
            .unwrap_or_else(|| panic!("{door}: no cancel_requested in {shown}"));
        assert_eq!(
            (&asked["reason"], &asked["by"]),
            (&json!("not today"), &json!("cli"))
        );
        // An event's run: left to a worker, or driven by one, then awaited.
        let pushed = ask(
            "push an event",
            &[
                "events",
                "push",
                "idempotency:example",
                "--payload",
                r#"{"id": "doors"}"#,
            ],
        );
        let event_run = pushed["outcomes"][0]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let result = ask("its result", &["runs", "result", &event_run, "--wait"]);
        assert_eq!(
            result["output"]["result"], "Hello, world from task doors",
            "{door}"
        );
        let streamed = ask(
            "a run that streams",
            &["run", "testbed", "streamer", "--input", r#"{"count": 3}"#],
        );
        let streamer = streamed["run_id"].as_str().unwrap().to_string();
        ask("its streams", &["runs", "streams", &streamer]);
        ask(
            "an unknown run",
            &["runs", "get", "00000000-0000-7000-8000-000000000000"],
        );
        ask(
            "an invalid input",
            &["start", "testbed", "two_steps", "--input", "{"],
        );
        let listed = ask("the runs", &["runs", "list"]);
        assert_eq!(
            listed["runs"].as_array().unwrap().len(),
            7,
            "{door}: {listed}"
        );
        answers.push(said);
    }
    for (i, (door, _)) in doors.iter().enumerate().skip(1) {
        for ((step, first), (_, other)) in answers[0].iter().zip(&answers[i]) {
            assert_eq!(
                first, other,
                "{step}: in process vs {door}:\n{first}\n{other}"
            );
        }
    }
}
