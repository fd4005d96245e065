//! Helpers shared by the CLI's tests.

#![allow(dead_code)]

pub mod pg;

use std::process::{Command, Output};

use serde_json::Value;

/// A `keel` command of this build, with the tests' shared cache of
/// compiled components.
pub fn keel_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
    command.env("KEEL_CACHE_DIR", keel_tests::compiled_cache());
    command
}

/// What keel printed on stdout, as JSON (`--json`); panics with both
/// streams when it is not.
pub fn printed_json(args: &[&str], out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "keel {args:?} printed no JSON ({e}): {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `keel --db DB --json ARGS`, with no server: its output and JSON.
pub fn keel(db: &std::path::Path, args: &[&str]) -> (Output, Value) {
    let out = keel_command()
        .arg("--db")
        .arg(db)
        .arg("--json")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running keel");
    let json = printed_json(args, &out);
    (out, json)
}

/// `keel --db DB ARGS` as a person reads it: its text output, which must
/// come with success.
pub fn keel_text(db: &std::path::Path, args: &[&str]) -> String {
    let out = keel_command()
        .arg("--db")
        .arg(db)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running keel");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "keel {args:?}: {text} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A child process that is killed and reaped when dropped, so that a test
/// that fails leaves nothing running behind it.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// Starts `keel --db DB worker` and waits until it answers on its socket.
pub fn socket_worker(db: &std::path::Path) -> Reaped {
    let worker = Reaped(
        keel_command()
            .arg("--db")
            .arg(db)
            .arg("worker")
            .env("KEEL_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let socket = db.join("control/control.sock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never listened"
        );
        std::thread::yield_now();
    }
    worker
}
