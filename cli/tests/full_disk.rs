//! A full disk, on a small tmpfs: a start is refused with `storage_full`
//! at once, a worker whose run meets the full disk backs off and carries
//! on by itself once space is freed, and nothing committed is lost; with
//! no worker, what the store holds can still be read, and the store opens
//! again once space is freed.
//! Mounting needs root (CI runs as root); the test fails without it.

mod common;

use common::printed_json;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The reserve the store keeps free, in MiB.
const RESERVE_MIB: u64 = 24;

/// A tmpfs of `size_mib`, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size_mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "this test mounts a tmpfs and needs root (CI runs as root)"
        );
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes a file that leaves `leave_mib` free.
    fn fill(&self, leave_mib: u64) -> PathBuf {
        let stat = rustix::fs::statvfs(self.path()).unwrap();
        let free = stat.f_bavail * stat.f_frsize;
        let filler = self.path().join("filler");
        let size = free.saturating_sub(leave_mib << 20);
        std::fs::write(&filler, vec![0u8; size as usize]).unwrap();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn keel_command(db: &Path, args: &[&str]) -> Command {
    let mut command = common::keel_command();
    command
        .arg("--db")
        .arg(db)
        .arg("--min-free-mib")
        .arg(RESERVE_MIB.to_string())
        .arg("--json")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env("KEEL_LOG", "warn");
    command
}

/// Runs keel to its end, which must come within a minute.
fn keel(db: &Path, args: &[&str]) -> (Output, Value) {
    let mut child = keel_command(db, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("keel {args:?} did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let json = printed_json(args, &out);
    (out, json)
}

fn journal_kinds(db: &Path, run_id: &str) -> Vec<String> {
    let (_, shown) = keel(db, &["runs", "show", run_id]);
    shown["journal"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_full_disk_refuses_new_work_and_a_worker_carries_on_once_space_is_freed() {
    let disk = Tmpfs::mount(64);
    let db = disk.path().join("db");
    let (out, first) = keel(
        &db,
        &["run", keel_tests::TESTBED, "ten_steps", "--input", "3"],
    );
    assert!(out.status.success(), "{first}");
    let first_id = first["run_id"].as_str().unwrap().to_string();

    let mut worker = keel_command(&db, &["worker"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(Worker)
        .unwrap();
    let socket = db.join("control/control.sock");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the worker never listened");
        std::thread::yield_now();
    }

    // A run that sleeps, parked in the worker; the disk fills meanwhile.
    let (out, run) = keel(
        &db,
        &[
            "start",
            keel_tests::TESTBED,
            "sleeper",
            "--input",
            "5000",
            "--detach",
        ],
    );
    assert!(out.status.success(), "{run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    while !journal_kinds(&db, &run_id).contains(&"timer_scheduled".to_string()) {
        assert!(Instant::now() < deadline, "the run never slept");
    }
    let filler = disk.fill(RESERVE_MIB / 2);

    // New work is refused at once, naming the problem.
    let (out, refused) = keel(
        &db,
        &["start", keel_tests::TESTBED, "ten_steps", "--input", "2"],
    );
    assert!(!out.status.success());
    assert_eq!(refused["error"]["kind"], "storage_full", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("reserve"), "{message}");

    // The sleeping run wakes, cannot record it, and the worker says so.
    let stderr = BufReader::new(worker.0.stderr.take().unwrap());
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("disk holding the store is full") {
                let _ = said.send(line);
            }
        }
    });
    heard
        .recv_timeout(Duration::from_secs(60))
        .expect("the worker never reported the full disk");

    std::fs::remove_file(filler).unwrap();
    let (out, ended) = keel(&db, &["runs", "result", &run_id, "--wait"]);
    assert!(out.status.success(), "{ended}");
    assert_eq!(ended["status"], "completed", "{ended}");
    let kinds = journal_kinds(&db, &run_id);
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("timer_fired"), 1, "{kinds:?}");
    assert_eq!(count("step_completed"), 1, "{kinds:?}");

    // What was committed before the disk filled is intact.
    let (_, first_again) = keel(&db, &["runs", "get", &first_id]);
    assert_eq!(first_again["status"], "completed", "{first_again}");
    assert_eq!(first_again["output"], 3);

    // With the disk full to the last byte and no worker, what the store
    // holds can still be read: opening it for a read needs no space.
    drop(worker);
    let filler = disk.fill(0);
    let (out, listed) = keel(&db, &["runs", "list"]);
    assert!(out.status.success(), "runs list on a full disk: {listed}");
    let listed = listed["runs"].as_array().expect("a page of runs");
    assert!(listed.iter().any(|r| r["run_id"] == first_id.as_str()));
    assert_eq!(
        journal_kinds(&db, &first_id).last().map(String::as_str),
        Some("run_completed")
    );
    let exported = std::env::temp_dir().join(format!("{first_id}.keel"));
    let out = keel_command(&db, &["journal", "export", &first_id, "--output"])
        .arg(&exported)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "journal export on a full disk: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::metadata(&exported).unwrap().len() > 0);
    let _ = std::fs::remove_file(exported);
    // The opens that met the full disk left the store as it was: with
    // space again it opens (sled's unfinished snapshots are cleared).
    std::fs::remove_file(filler).unwrap();
    let (out, again) = keel(&db, &["runs", "get", &first_id]);
    assert!(
        out.status.success(),
        "the store opens once space is freed: {again}"
    );
    assert_eq!(again["output"], 3);
}
