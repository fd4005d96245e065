//! Offline replay: checking a new build against recorded journal files,
//! and the reports it gives.
//!
//! ```no_run
//! # async fn check() -> keel_host::Result<()> {
//! let replayer = keel_host::Replayer::new(
//!     "target/wasm32-wasip2/release/order.wasm",
//!     "target/keel-compiled",
//! )
//! .await?;
//! for report in replayer.replay_paths(&["tests/journals".into()]).await? {
//!     assert!(report.is_ok(), "{}", report.render());
//! }
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_core::RunId;
use keel_core::divergence::Verdict;
use keel_core::file::JournalFile;
use keel_core::journal::excerpt;
use serde::Serialize;

use crate::component::Loaded;
use crate::runtime::Runtime;
use crate::{Config, Error, Result};

/// The replay of one journal file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub file: PathBuf,
    pub run_id: RunId,
    pub workflow: String,
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl ReplayReport {
    /// The build replayed the journal exactly.
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
                if !d.input_diff.is_empty() {
                    out += "\n  the step's input differs:";
                    for field in &d.input_diff {
                        out += &format!("\n    {}", field.line());
                    }
                    if d.input_diff.iter().any(|f| f.is_added_null()) {
                        out += "\n  a field absent from the recorded input is now null: an `Option` field added to the input type changes what the step receives; mark it `#[serde(default, skip_serializing_if = \"Option::is_none\")]` so recorded inputs keep their shape";
                    }
                }
                out += WAYS_THROUGH;
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
                out += WAYS_THROUGH;
                out
            }
            Verdict::WentFurther { issued, recorded } => format!(
                "DIVERGED {head}\n  the journal records the run's end after {recorded} command(s), but the code issues more (at least {issued}){WAYS_THROUGH}"
            ),
            Verdict::OutputDiffers { recorded, replayed } => {
                let mut out = format!(
                    "DIVERGED {head}\n  same commands, other output\n  - journal: {}\n  + code:    {}",
                    excerpt(recorded, 200),
                    excerpt(replayed, 200)
                );
                for field in
                    keel_core::json_diff::diff_texts(recorded, replayed).unwrap_or_default()
                {
                    out += &format!("\n    {}", field.line());
                }
                out
            }
            Verdict::Failed { kind, message } => format!("FAILED {head}\n  [{kind}] {message}"),
        }
    }
}

/// What a report of a change that breaks recorded runs ends with.
const WAYS_THROUGH: &str = "\n  ways through: branch on `keel_sdk::patched(\"change-id\")` so recorded runs keep the old path; or give the changed workflow a new name; or let the runs recorded before the change finish on the build they started on (runs stay pinned to it)";

/// Replays journal files against a component, offline: no step runs, no
/// capability is granted, nothing is written anywhere.
pub struct Replayer {
    runtime: Runtime,
    component: Arc<Loaded>,
}

impl Replayer {
    /// A replayer for the component at `path`, compiled with the default
    /// bounds (the compiled artifact is cached in `cache_dir`).
    pub async fn new(path: impl AsRef<Path>, cache_dir: impl Into<PathBuf>) -> Result<Replayer> {
        let path = path.as_ref();
        let mut config = Config::caching_in(cache_dir);
        config.max_instances = 16;
        let runtime = Runtime::new(config)?;
        let bytes = read(path).await?;
        let component = runtime.load(path, &bytes).await?;
        Ok(Replayer { runtime, component })
    }

    /// Replays one journal file.
    pub async fn replay_file(&self, path: &Path) -> Result<ReplayReport> {
        let bytes = read(path).await?;
        let file = JournalFile::parse(&bytes).map_err(|e| Error::JournalFile {
            path: path.into(),
            reason: e.0,
        })?;
        let run = file.run_record();
        self.component.check_workflow(&run.workflow)?;
        let verdict = self
            .runtime
            .replay(&self.component, &run, file.entries)
            .await?;
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

async fn read(path: &Path) -> Result<Vec<u8>> {
    tokio::fs::read(path).await.map_err(|source| Error::Io {
        path: path.into(),
        source,
    })
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

#[cfg(test)]
mod tests {
    use keel_core::divergence::Divergence;
    use keel_core::index::JournalIndex;
    use keel_core::journal::{Entry, Fact};

    use super::*;

    fn charge(input: &str) -> Fact {
        Fact::StepScheduled {
            command: 0,
            name: "charge".into(),
            input: input.into(),
            step_id: "r-0".into(),
            digest: "d".into(),
        }
    }

    #[test]
    fn a_changed_step_input_is_reported_field_by_field_with_the_ways_through() {
        let recorded = Entry {
            seq: 0,
            at_ms: 0,
            fact: charge(r#"{"amount": 5, "user": "u"}"#),
        };
        let index = JournalIndex::new(vec![recorded.clone()]).unwrap();
        let requested = charge(r#"{"amount": 7, "user": "u", "coupon": null}"#);
        let report = ReplayReport {
            file: "r.journal".into(),
            run_id: "r".into(),
            workflow: "w".into(),
            verdict: Verdict::Diverged(Box::new(Divergence::at(&index, 0, &recorded, &requested))),
        };
        let text = report.render();
        assert!(text.contains("the step's input differs:"), "{text}");
        assert!(text.contains("/amount: 5 -> 7"), "{text}");
        assert!(text.contains("/coupon: (absent) -> null"), "{text}");
        assert!(text.contains("skip_serializing_if"), "{text}");
        assert!(text.contains("keel_sdk::patched"), "{text}");
        assert!(
            !text.contains("/user"),
            "equal fields are not listed: {text}"
        );
    }
}
