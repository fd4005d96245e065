//! Connections to PostgreSQL cut at the worst moment: a proxy between a
//! `keel start` process and the database forwards the process's n-th
//! commit and then cuts the connection before the database's answer
//! reaches it, so that write has landed and keel never heard. A commit is a
//! `COMMIT` or the execution of a statement that commits on its own (keel
//! marks those `/* keel:commits */`; the proxy reads the wire protocol to
//! see which prepared statement each execution runs). One start per n, for
//! every commit a start makes (opening the store, admission, each journal
//! append, the run's end): each answer must stay true afterwards.
//! An acknowledged run exists and completes, a refusal left no run, and an
//! unknown outcome names the run to look up.
//!
//! Needs `KEEL_TEST_POSTGRES_TLS` (set by `scripts/test.sh`) for the
//! database's TCP address and password; fails, never skips, without it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::Value;

mod common;
use common::pg::{json_of, schema};

/// The database's TCP URL (user and password of the TLS test's), as
/// `(host:port, user:password, database)`.
fn tcp_database() -> (String, String, String) {
    let url = std::env::var("KEEL_TEST_POSTGRES_TLS").unwrap_or_else(|_| {
        panic!(
            "KEEL_TEST_POSTGRES_TLS is not set: this test reaches the test database over TCP. \
             Run scripts/test.sh, which sets it"
        )
    });
    let rest = url.split_once("://").expect("a URL").1;
    let (credentials, rest) = rest.split_once('@').expect("a user and password");
    let (address, rest) = rest.split_once('/').expect("a database");
    let database = rest.split('?').next().unwrap();
    let address = address.replace("localhost", "127.0.0.1");
    (address, credentials.to_string(), database.to_string())
}

/// A proxy to the database that cuts the connection carrying its
/// `cut_at`-th `COMMIT` right after forwarding it, before the answer.
struct Proxy {
    port: u16,
    seen: Arc<Seen>,
}

/// The commits a proxy has forwarded, and how many of them were marked
/// statements rather than `COMMIT`s.
#[derive(Default)]
struct Seen {
    commits: AtomicUsize,
    by_statement: AtomicUsize,
}

impl Proxy {
    fn start(database: &str, cut_at: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Seen::default());
        let (database, counts) = (database.to_string(), seen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&database) else {
                    return;
                };
                let cut = Arc::new(AtomicBool::new(false));
                pump_to_server(&client, &server, cut.clone(), counts.clone(), cut_at);
                pump_to_client(&server, &client, cut);
            }
        });
        Proxy { port, seen }
    }
}

/// The mark keel puts on a statement that commits on its own.
const COMMITS_MARK: &[u8] = b"/* keel:commits */";

/// Reads the messages a client sends on one connection (PostgreSQL's
/// frontend protocol: an untyped startup message, then a type byte and a
/// length per message) and counts the commits among them: a simple query
/// `COMMIT`, or a `Bind` of a prepared statement whose text bears
/// [`COMMITS_MARK`].
#[derive(Default)]
struct CommitCounter {
    pending: Vec<u8>,
    started: bool,
    marked: std::collections::HashSet<Vec<u8>>,
}

impl CommitCounter {
    /// The commits among the messages that `chunk` completes: `COMMIT`s
    /// and marked statements.
    fn feed(&mut self, chunk: &[u8]) -> (usize, usize) {
        self.pending.extend_from_slice(chunk);
        let mut commits = (0, 0);
        loop {
            let header = if self.started { 5 } else { 4 };
            if self.pending.len() < header {
                return commits;
            }
            let at = header - 4;
            let length = u32::from_be_bytes(self.pending[at..at + 4].try_into().unwrap()) as usize;
            let whole = at + length;
            if self.pending.len() < whole {
                return commits;
            }
            let message: Vec<u8> = self.pending.drain(..whole).collect();
            if self.started {
                match self.read(message[0], &message[5..]) {
                    Some(Commit::Query) => commits.0 += 1,
                    Some(Commit::Statement) => commits.1 += 1,
                    None => {}
                }
            }
            self.started = true;
        }
    }

    /// Reads one typed message: whether, and how, it commits.
    fn read(&mut self, kind: u8, body: &[u8]) -> Option<Commit> {
        let mut strings = body.split(|b| *b == 0);
        match kind {
            b'Q' => (strings.next() == Some(b"COMMIT")).then_some(Commit::Query),
            b'P' => {
                let (name, text) = (strings.next().unwrap_or_default(), strings.next());
                if text.is_some_and(|t| t.starts_with(COMMITS_MARK)) {
                    self.marked.insert(name.to_vec());
                } else {
                    self.marked.remove(name);
                }
                None
            }
            b'B' => {
                let _portal = strings.next();
                let statement = strings.next().unwrap_or_default();
                self.marked.contains(statement).then_some(Commit::Statement)
            }
            b'C' if body.first() == Some(&b'S') => {
                self.marked.remove(&body[1..body.len().saturating_sub(1)]);
                None
            }
            _ => None,
        }
    }
}

/// How a message commits.
enum Commit {
    /// A simple query `COMMIT`.
    Query,
    /// The execution of a statement marked as committing on its own.
    Statement,
}

/// Forwards client bytes, counting commits; after the one to cut, marks
/// the connection to be cut when the database answers.
fn pump_to_server(
    client: &TcpStream,
    server: &TcpStream,
    cut: Arc<AtomicBool>,
    seen: Arc<Seen>,
    cut_at: usize,
) {
    let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut counter = CommitCounter::default();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            let (queries, statements) = counter.feed(chunk);
            let commits = queries + statements;
            seen.by_statement.fetch_add(statements, Ordering::SeqCst);
            let before = seen.commits.fetch_add(commits, Ordering::SeqCst);
            if commits > 0 && before < cut_at && cut_at <= before + commits {
                cut.store(true, Ordering::SeqCst);
            }
            if to.write_all(chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Relays the database's answers, unless the connection is to be cut:
/// then the answer is dropped and both sides are closed.
fn pump_to_client(server: &TcpStream, client: &TcpStream, cut: Arc<AtomicBool>) {
    let (mut from, mut to) = (server.try_clone().unwrap(), client.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// `keel --db URL --pg-schema SCHEMA --json ARGS` against `url`.
fn keel(url: &str, schema: &str, args: &[&str]) -> std::process::Output {
    common::keel_command()
        .args(["--db", url, "--pg-schema", schema, "--pg-pool-size", "2"])
        .args(["--pg-statement-timeout", "10", "--json"])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env("KEEL_LOG", "error")
        .output()
        .expect("running keel")
}

#[test]
fn a_commit_that_lands_unheard_never_gives_a_false_answer() {
    let (address, credentials, database) = tcp_database();
    let direct = format!("postgres://{credentials}@{address}/{database}?sslmode=disable");
    let schema = schema("cut");
    let deployed = keel(
        &direct,
        &schema,
        &["deploy", keel_tests::TESTBED, "--name", "testbed"],
    );
    assert!(deployed.status.success(), "{}", json_of(&deployed));

    // A clean start through a proxy that cuts nothing counts the commits.
    let counting = Proxy::start(&address, usize::MAX);
    let through =
        |port: u16| format!("postgres://{credentials}@127.0.0.1:{port}/{database}?sslmode=disable");
    let clean = keel(
        &through(counting.port),
        &schema,
        &["start", "testbed", "two_steps_strict", "--input", "1000"],
    );
    assert_eq!(
        json_of(&clean)["status"],
        "completed",
        "{}",
        json_of(&clean)
    );
    let commits = counting.seen.commits.load(Ordering::SeqCst);
    assert!(
        commits >= 4,
        "a start commits its admission, steps and end: {commits}"
    );
    let by_statement = counting.seen.by_statement.load(Ordering::SeqCst);
    assert!(
        by_statement >= 2,
        "each step's journal append is a marked statement of its own: {by_statement} of {commits}"
    );

    let mut answers = Vec::new();
    for cut_at in 1..=commits {
        let proxy = Proxy::start(&address, cut_at);
        let out = keel(
            &through(proxy.port),
            &schema,
            &[
                "start",
                "testbed",
                "two_steps_strict",
                "--input",
                &cut_at.to_string(),
            ],
        );
        answers.push((cut_at as i64, json_of(&out)));
    }
    let worked = keel(&direct, &schema, &["worker", "--until-idle"]);
    assert!(worked.status.success(), "{}", json_of(&worked));
    let listed = json_of(&keel(
        &direct,
        &schema,
        &["runs", "list", "--limit", "1000"],
    ));
    let runs: Vec<&Value> = listed["runs"].as_array().expect("runs").iter().collect();
    let mut kinds = Vec::new();
    for (input, answer) in &answers {
        let made: Vec<&&Value> = runs.iter().filter(|r| r["input"] == *input).collect();
        assert!(made.len() <= 1, "start {input} made {} runs", made.len());
        let completed = |run_id: &Value| {
            made.first().is_some_and(|r| {
                r["run_id"] == *run_id
                    && r["status"] == "completed"
                    && r["output"] == serde_json::json!([input + 1, input * 2])
            })
        };
        let kind = answer["error"]["kind"].as_str().unwrap_or("admitted");
        kinds.push(format!("commit {input}: {kind}"));
        match kind {
            "admitted" => assert!(completed(&answer["run_id"]), "commit {input}: {answer}"),
            "drive_interrupted" => {
                assert!(
                    completed(&answer["error"]["run_id"]),
                    "commit {input}: {answer}"
                )
            }
            "start_outcome_unknown" => assert!(
                made.is_empty() || completed(&answer["error"]["run_id"]),
                "commit {input}: {answer} / {made:?}"
            ),
            _ => {
                assert!(
                    answer["error"]["run_id"].is_null(),
                    "commit {input}: a refusal naming a run: {answer}"
                );
                assert!(
                    made.is_empty(),
                    "commit {input}: refused ({answer}) but made {made:?}"
                );
            }
        }
    }
    eprintln!("{} commits cut: {}", answers.len(), kinds.join(", "));
    // The cut that hits admission left a run and said its outcome is unknown.
    assert!(
        kinds.iter().any(|k| k.ends_with("start_outcome_unknown")),
        "no cut struck the admission: {kinds:?}"
    );
}
