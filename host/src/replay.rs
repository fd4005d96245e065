//! Offline replay: portable journal files, structured divergence reports,
//! and the [`Replayer`] that checks a new build against recorded runs.
//!
//! ```no_run
//! # async fn check() -> keel_host::Result<()> {
//! let replayer = keel_host::Replayer::new("target/wasm32-wasip2/release/order.wasm").await?;
//! for report in replayer.replay_paths(&["tests/journals".into()]).await? {
//!     assert!(report.is_ok(), "{}", report.render());
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::engine::{Ended, Trace};
use crate::journal::{Entry, Event, FORMAT_VERSION, excerpt};
use crate::store::RunRecord;
use crate::{Config, Error, Keel, Loaded, Result};

/// A command as a replay report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandView {
    /// `step`, `timer` or `patch_marker`.
    pub kind: String,
    pub step_name: Option<String>,
    /// Digest of the step's name and input.
    pub input_digest: Option<String>,
    /// A readable excerpt of the input (or the timer's due time, the patch's ID).
    pub excerpt: String,
}

impl CommandView {
    pub fn of(event: &Event) -> CommandView {
        let (kind, step_name, input_digest, text) = match event {
            Event::StepScheduled {
                name,
                input,
                digest,
                ..
            } => (
                "step",
                Some(name.clone()),
                Some(digest.clone()),
                excerpt(input, 120),
            ),
            Event::TimerScheduled { fire_at_ms, .. } => {
                ("timer", None, None, format!("due at {fire_at_ms} ms"))
            }
            Event::PatchMarker { change_id, .. } => ("patch_marker", None, None, change_id.clone()),
            other => (other.kind(), None, None, other.describe()),
        };
        CommandView {
            kind: kind.into(),
            step_name,
            input_digest,
            excerpt: text,
        }
    }

    fn line(&self) -> String {
        match &self.step_name {
            Some(name) => format!(
                "step `{name}` input {} (digest {})",
                self.excerpt,
                self.input_digest.as_deref().unwrap_or("-")
            ),
            None => format!("{} {}", self.kind, self.excerpt),
        }
    }
}

/// Where and how the code left the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The command's position: the n-th call the workflow made, from 0.
    pub position: u32,
    /// The sequence number of the journal entry at that position.
    pub journal_seq: u64,
    pub recorded: CommandView,
    pub requested: CommandView,
    /// Recorded commands around the position.
    pub journal_context: Vec<(u32, CommandView)>,
    /// The commands the code issued just before (they matched the journal).
    pub code_context: Vec<(u32, CommandView)>,
}

/// The outcome of replaying one journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The code asked for exactly what the journal holds; `output` is its
    /// output when the journal reaches the run's end.
    Ok { output: Option<String> },
    /// At some position the code asked for something else.
    Diverged(Divergence),
    /// The workflow ended (or failed) where the journal goes on.
    EndedEarly {
        issued: u32,
        recorded: u32,
        outcome: String,
        next: Vec<(u32, CommandView)>,
    },
    /// The journal records the run's end, but the code asks for more.
    WentFurther { issued: u32, recorded: u32 },
    /// Same commands, another final output.
    OutputDiffers { recorded: String, replayed: String },
    /// The workflow failed in a way the journal does not record.
    Failed { kind: String, message: String },
}

impl Verdict {
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok { .. })
    }
}

/// The verdict of an offline activation over `entries`.
pub(crate) fn verdict(entries: &[Entry], ended: Ended, trace: Trace) -> Verdict {
    if let Some(divergence) = trace.divergence {
        return Verdict::Diverged(divergence);
    }
    let (issued, recorded) = trace.progress;
    let recorded_end = entries.iter().rev().find_map(|e| match &e.event {
        Event::RunCompleted { output } => Some(Ok(output.clone())),
        Event::RunFailed { kind, error } => Some(Err((kind.clone(), error.clone()))),
        _ => None,
    });
    let ended_early = |outcome: String| Verdict::EndedEarly {
        issued,
        recorded,
        outcome,
        next: command_views(entries, issued..issued + 3),
    };
    match ended {
        Ended::Completed(_) if issued < recorded => ended_early("completed".into()),
        Ended::Completed(output) => match recorded_end {
            Some(Ok(r)) if r != output => Verdict::OutputDiffers {
                recorded: r,
                replayed: output,
            },
            _ => Verdict::Ok {
                output: Some(output),
            },
        },
        Ended::Suspended(_) if recorded_end.is_some() => Verdict::WentFurther { issued, recorded },
        Ended::Suspended(_) => Verdict::Ok { output: None },
        Ended::Failed(e) if issued < recorded => ended_early(format!("failed: {e}")),
        Ended::Failed(e) => match recorded_end {
            Some(Err((kind, _))) if kind == e.kind() => Verdict::Ok { output: None },
            _ => Verdict::Failed {
                kind: e.kind().into(),
                message: e.to_string(),
            },
        },
    }
}

fn command_views(entries: &[Entry], range: std::ops::Range<u32>) -> Vec<(u32, CommandView)> {
    entries
        .iter()
        .filter_map(|e| e.event.command().map(|c| (c, e)))
        .filter(|(c, _)| range.contains(c))
        .map(|(c, e)| (c, CommandView::of(&e.event)))
        .collect()
}

/// The first bytes of a journal file in its binary format.
pub const FILE_MAGIC: &[u8; 8] = b"KEELJRNL";

/// A run and its journal, self-describing and versioned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalFile {
    pub header: FileHeader,
    pub entries: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileHeader {
    pub format_version: u16,
    /// The run as recorded: workflow, input, component hash, status, output.
    pub run: RunRecord,
}

impl JournalFile {
    pub fn new(run: &RunRecord, entries: Vec<Entry>) -> JournalFile {
        JournalFile {
            header: FileHeader {
                format_version: FORMAT_VERSION,
                run: run.clone(),
            },
            entries,
        }
    }

    /// The binary form: magic, format version (u16, little endian), postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = FILE_MAGIC.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend(postcard::to_stdvec(self).expect("journal files always encode"));
        out
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("journal files always encode")
    }

    /// Reads either form; `origin` names the file in errors.
    pub fn parse(bytes: &[u8], origin: &Path) -> Result<JournalFile> {
        let bad = |reason: String| Error::JournalFile {
            path: origin.into(),
            reason,
        };
        if let Some(rest) = bytes.strip_prefix(FILE_MAGIC) {
            let version = rest
                .get(..2)
                .map(|v| u16::from_le_bytes([v[0], v[1]]))
                .ok_or_else(|| bad("it is truncated after its magic bytes".into()))?;
            check_version(version).map_err(bad)?;
            return postcard::from_bytes(&rest[2..])
                .map_err(|e| bad(format!("it is truncated or corrupted ({e})")));
        }
        if bytes.trim_ascii_start().starts_with(b"{") {
            let value: serde_json::Value = serde_json::from_slice(bytes)
                .map_err(|e| bad(format!("its JSON is malformed ({e})")))?;
            let version = value["header"]["format_version"]
                .as_u64()
                .ok_or_else(|| bad("its JSON has no header.format_version".into()))?;
            check_version(version as u16).map_err(bad)?;
            return serde_json::from_value(value)
                .map_err(|e| bad(format!("its JSON does not match the format ({e})")));
        }
        Err(bad(
            "it is not a keel journal file (no KEELJRNL magic, not JSON)".into(),
        ))
    }

    /// The run record the header describes.
    pub fn run_record(&self) -> RunRecord {
        self.header.run.clone()
    }
}

fn check_version(version: u16) -> std::result::Result<(), String> {
    if version == FORMAT_VERSION {
        Ok(())
    } else {
        Err(format!(
            "it was written in journal format version {version}, and this keel reads version {FORMAT_VERSION}; \
             export it again with a keel that reads both, or replay it with the keel that wrote it"
        ))
    }
}

/// The replay of one journal file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub file: PathBuf,
    pub run_id: String,
    pub workflow: String,
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl ReplayReport {
    pub fn is_ok(&self) -> bool {
        self.verdict.is_ok()
    }

    /// The report in words, with a diff when the replay diverged.
    pub fn render(&self) -> String {
        let head = format!(
            "{} (run {}, workflow {})",
            self.file.display(),
            self.run_id,
            self.workflow
        );
        match &self.verdict {
            Verdict::Ok { .. } => format!("ok    {head}"),
            Verdict::Diverged(d) => {
                let mut out = format!(
                    "DIVERGED {head}\n  at position {} (journal entry {}):\n  - journal: {}\n  + code:    {}\n  context (journal):\n",
                    d.position,
                    d.journal_seq,
                    d.recorded.line(),
                    d.requested.line()
                );
                for (c, v) in &d.journal_context {
                    let mark = if *c == d.position { "-" } else { " " };
                    out += &format!("  {mark} {c:>4} {}\n", v.line());
                }
                out += "  context (code):\n";
                for (c, v) in &d.code_context {
                    out += &format!("    {c:>4} {}\n", v.line());
                }
                out += &format!("  + {:>4} {}", d.position, d.requested.line());
                out
            }
            Verdict::EndedEarly {
                issued,
                recorded,
                outcome,
                next,
            } => {
                let mut out = format!(
                    "DIVERGED {head}\n  the workflow {outcome} after {issued} command(s), but the journal holds {recorded}; next in the journal:"
                );
                for (c, v) in next {
                    out += &format!("\n  - {c:>4} {}", v.line());
                }
                out
            }
            Verdict::WentFurther { issued, recorded } => format!(
                "DIVERGED {head}\n  the journal records the run's end after {recorded} command(s), but the code issues more (at least {issued})"
            ),
            Verdict::OutputDiffers { recorded, replayed } => format!(
                "DIVERGED {head}\n  same commands, other output\n  - journal: {}\n  + code:    {}",
                excerpt(recorded, 200),
                excerpt(replayed, 200)
            ),
            Verdict::Failed { kind, message } => format!("FAILED {head}\n  [{kind}] {message}"),
        }
    }
}

/// Replays journal files against a component, offline: no step runs, no
/// capability is granted, nothing is written but a scratch store.
pub struct Replayer {
    keel: Keel,
    component: Arc<Loaded>,
    scratch: PathBuf,
}

impl Drop for Replayer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

impl Replayer {
    /// A replayer for the component at `path`.
    pub async fn new(path: impl AsRef<Path>) -> Result<Replayer> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "keel-replay-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let keel = Keel::open(Config::new(&scratch))?;
        let component = keel.load(path).await?;
        Ok(Replayer {
            keel,
            component,
            scratch,
        })
    }

    /// Replays one journal file.
    pub async fn replay_file(&self, path: &Path) -> Result<ReplayReport> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        let file = JournalFile::parse(&bytes, path)?;
        let run = file.run_record();
        self.component.check_workflow(&run.workflow)?;
        let verdict = self
            .keel
            .replay_entries(&self.component, &run, file.entries)
            .await;
        Ok(ReplayReport {
            file: path.into(),
            run_id: run.run_id,
            workflow: run.workflow,
            verdict,
        })
    }

    /// Replays every file given, and every `.journal` or `.json` file in
    /// the directories given, in name order.
    pub async fn replay_paths(&self, paths: &[PathBuf]) -> Result<Vec<ReplayReport>> {
        let mut reports = Vec::new();
        for file in journal_files(paths)? {
            reports.push(self.replay_file(&file).await?);
        }
        Ok(reports)
    }
}

fn journal_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "journal" || e == "json"))
            .collect();
        found.sort();
        files.extend(found);
    }
    Ok(files)
}
