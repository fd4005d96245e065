//! What the tests that run keel processes on PostgreSQL share: the test
//! database (`KEEL_TEST_POSTGRES`, which `scripts/test.sh` sets; without it
//! they fail, never skip), a schema per test, and `keel` commands on it.

use std::process::{Command, Output};

use serde_json::Value;

/// The test database's URL; panics naming scripts/test.sh without it.
pub fn url() -> String {
    std::env::var("KEEL_TEST_POSTGRES").unwrap_or_else(|_| {
        panic!(
            "KEEL_TEST_POSTGRES is not set: these tests need a PostgreSQL database. \
             Run scripts/test.sh, which starts PostgreSQL and sets it"
        )
    })
}

/// A schema of its own for one test.
pub fn schema(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("keel_workers_{test}_{}_{nanos}", std::process::id())
}

/// `keel --db URL --pg-schema SCHEMA --json ARGS...` on the test
/// database, with the tests' cache.
pub fn cli(schema: &str, args: &[&str]) -> Command {
    cli_on(&url(), schema, args)
}

/// [`cli`] on the database at `url`.
pub fn cli_on(url: &str, schema: &str, args: &[&str]) -> Command {
    let mut cmd = super::keel_command();
    cmd.args([
        "--db",
        url,
        "--pg-schema",
        schema,
        "--pg-pool-size",
        "4",
        "--json",
    ])
    .args(args)
    .env("RUST_BACKTRACE", "0")
    .env("KEEL_LOG", "warn");
    cmd
}

/// What a command printed on stdout, as JSON.
pub fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
