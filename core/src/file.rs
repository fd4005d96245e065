//! The portable journal file: a run and its journal, self-describing and
//! versioned, in a binary (postcard) or a JSON form.

use serde::{Deserialize, Serialize};

use crate::index::JournalIndex;
use crate::journal::Entry;
use crate::records::{RunRecord, RunRecordV1, RunStatus};

/// The version of the journal file format: 2 since the run record in its
/// header gained `parent_run_id` and `attributes`; files of version 1 are
/// still read.
pub const FILE_VERSION: u16 = 2;

/// Why bytes are not a journal file keel can read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

/// The first bytes of a journal file in its binary format.
pub const FILE_MAGIC: &[u8; 8] = b"KEELJRNL";

/// A run and its journal, self-describing and versioned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalFile {
    pub header: FileHeader,
    pub entries: Vec<Entry>,
}

/// What a journal file says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileHeader {
    pub format_version: u16,
    /// The run as recorded: workflow, input, component hash, status, output.
    pub run: RunRecord,
}

impl JournalFile {
    /// The file of `run` with its journal.
    pub fn new(run: &RunRecord, entries: Vec<Entry>) -> JournalFile {
        JournalFile {
            header: FileHeader {
                format_version: FILE_VERSION,
                run: run.clone(),
            },
            entries,
        }
    }

    /// The binary form: magic, format version (u16, little endian), postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = FILE_MAGIC.to_vec();
        out.extend_from_slice(&FILE_VERSION.to_le_bytes());
        out.extend(postcard::to_stdvec(self).expect("journal files always encode"));
        out
    }

    /// The JSON form.
    pub fn to_json(&self) -> String {
        let entries: Vec<serde_json::Value> = self
            .entries
            .iter()
            .map(crate::journal::entry_to_json)
            .collect();
        let value = serde_json::json!({ "header": self.header, "entries": entries });
        serde_json::to_string_pretty(&value).expect("journal files always encode")
    }

    /// Reads either form.
    pub fn parse(bytes: &[u8]) -> Result<JournalFile, FileError> {
        let bad = FileError;
        if let Some(rest) = bytes.strip_prefix(FILE_MAGIC) {
            let version = rest
                .get(..2)
                .map(|v| u16::from_le_bytes([v[0], v[1]]))
                .ok_or_else(|| bad("it is truncated after its magic bytes".into()))?;
            check_version(version).map_err(bad)?;
            let body = &rest[2..];
            let file = if version == 1 {
                postcard::from_bytes::<JournalFileV1>(body).map(JournalFile::from)
            } else {
                postcard::from_bytes::<JournalFile>(body)
            };
            let file = file.map_err(|e| bad(format!("it is truncated or corrupted ({e})")))?;
            return file.checked();
        }
        if bytes.trim_ascii_start().starts_with(b"{") {
            let value: serde_json::Value = serde_json::from_slice(bytes)
                .map_err(|e| bad(format!("its JSON is malformed ({e})")))?;
            let version = value["header"]["format_version"]
                .as_u64()
                .ok_or_else(|| bad("its JSON has no header.format_version".into()))?;
            let version = u16::try_from(version).map_err(|_| {
                bad(format!(
                    "its format version {version} is not one keel has written"
                ))
            })?;
            check_version(version).map_err(bad)?;
            let shape = |e: String| bad(format!("its JSON does not match the format ({e})"));
            let header: FileHeader = serde_json::from_value(value["header"].clone())
                .map_err(|e| shape(e.to_string()))?;
            let entries = value["entries"]
                .as_array()
                .ok_or_else(|| shape("it has no `entries` array".into()))?
                .iter()
                .map(crate::journal::entry_from_json)
                .collect::<Result<Vec<_>, _>>()
                .map_err(shape)?;
            return JournalFile { header, entries }.checked();
        }
        if bytes.trim_ascii_start().starts_with(b"[") {
            let values: Vec<serde_json::Value> = serde_json::from_slice(bytes)
                .map_err(|e| bad(format!("its JSON is malformed ({e})")))?;
            let entries = values
                .iter()
                .map(crate::journal::entry_from_json)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("an entry does not match the journal's shape ({e})")))?;
            return JournalFile::of_entries(entries)?.checked();
        }
        Err(bad(
            "it is not a keel journal file (no KEELJRNL magic, not JSON)".into(),
        ))
    }

    /// The file itself if its entries form a journal (in sequence, commands
    /// in order).
    fn checked(self) -> Result<JournalFile, FileError> {
        JournalIndex::new(self.entries.clone())
            .map_err(|e| FileError(format!("its entries do not form a journal: {e}")))?;
        Ok(self)
    }

    /// The run record the header describes.
    /// The file of a journal's entries alone, as `GET /v1/runs/{run_id}/journal`
    /// answers them: the run is read back from them (its workflow and
    /// input from its start, its ID from its steps' IDs, how it ended from
    /// its last entry); what they do not hold (its component, attributes)
    /// is left empty, which replay does not need.
    pub fn of_entries(entries: Vec<Entry>) -> Result<JournalFile, FileError> {
        use crate::journal::Fact;
        let Some(Fact::RunStarted { workflow, input }) = entries.first().map(|e| &e.fact) else {
            return Err(FileError(
                "its entries do not begin with the run's start (`run_started`): pass a run's whole journal".into(),
            ));
        };
        // The first step's ID is `RUN-NAME-0` (`RunId::step_id`), or in a
        // run from before step IDs were named, `RUN-COMMAND`.
        let run_id = entries
            .iter()
            .find_map(|e| match &e.fact {
                Fact::StepScheduled {
                    command,
                    name,
                    step_id,
                    ..
                } => step_id
                    .strip_suffix(&format!("-{name}-0"))
                    .or_else(|| step_id.strip_suffix(&format!("-{command}")))
                    .map(str::to_string),
                _ => None,
            })
            .unwrap_or_else(|| "unknown-run".into());
        let (status, output, error) = match entries.last().map(|e| &e.fact) {
            Some(Fact::RunCompleted { output }) => {
                (RunStatus::Completed, Some(output.clone()), None)
            }
            Some(Fact::RunFailed { kind, error }) => (
                RunStatus::Failed,
                None,
                Some(crate::RunError {
                    kind: kind.clone(),
                    message: error.clone(),
                }),
            ),
            Some(Fact::RunCancelled | Fact::RunEndedCancelled { .. }) => {
                (RunStatus::Cancelled, None, None)
            }
            Some(Fact::RunContinued { .. }) => (RunStatus::Continued, None, None),
            _ => (RunStatus::Waiting, None, None),
        };
        let at = |e: Option<&Entry>| e.map_or(0, |e| e.at_ms);
        let run = RunRecord {
            run_id: run_id.into(),
            workflow: workflow.clone(),
            component_hash: String::new().into(),
            input: input.clone(),
            status,
            output,
            error,
            created_at_ms: at(entries.first()),
            updated_at_ms: at(entries.last()),
            wake_at_ms: None,
            parent_run_id: None,
            attributes: Default::default(),
        };
        Ok(JournalFile::new(&run, entries))
    }

    pub fn run_record(&self) -> RunRecord {
        self.header.run.clone()
    }
}

/// A binary journal file of version 1, whose run record had no parent.
#[derive(Serialize, Deserialize)]
struct JournalFileV1 {
    header: FileHeaderV1,
    entries: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
struct FileHeaderV1 {
    format_version: u16,
    run: RunRecordV1,
}

impl From<JournalFileV1> for JournalFile {
    fn from(v1: JournalFileV1) -> JournalFile {
        JournalFile {
            header: FileHeader {
                format_version: v1.header.format_version,
                run: v1.header.run.into(),
            },
            entries: v1.entries,
        }
    }
}

fn check_version(version: u16) -> std::result::Result<(), String> {
    if (1..=FILE_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(format!(
            "it was written in journal format version {version}, and this keel reads versions 1 to {FILE_VERSION}; \
             export it again with a keel that reads both, or replay it with the keel that wrote it"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Fact;
    use crate::records::RunStatus;

    fn file() -> JournalFile {
        let run = RunRecord {
            run_id: "r".into(),
            workflow: "w".into(),
            component_hash: "h".into(),
            input: "null".into(),
            status: RunStatus::Completed,
            output: Some("1".into()),
            error: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            wake_at_ms: None,
            parent_run_id: Some("p".into()),
            attributes: [("tenant".to_string(), "acme".to_string())].into(),
        };
        let entries = vec![Entry {
            seq: 0,
            at_ms: 1,
            fact: Fact::RunCompleted { output: "1".into() },
        }];
        JournalFile::new(&run, entries)
    }

    #[test]
    fn both_forms_round_trip() {
        let f = file();
        assert_eq!(JournalFile::parse(&f.to_bytes()).unwrap(), f);
        assert_eq!(JournalFile::parse(f.to_json().as_bytes()).unwrap(), f);
    }

    #[test]
    fn a_binary_file_of_version_1_is_read_without_a_parent() {
        let f = file();
        let v1 = JournalFileV1 {
            header: FileHeaderV1 {
                format_version: 1,
                run: RunRecordV1::of(&f.header.run),
            },
            entries: f.entries.clone(),
        };
        let mut bytes = FILE_MAGIC.to_vec();
        bytes.extend_from_slice(&1u16.to_le_bytes());
        bytes.extend(postcard::to_stdvec(&v1).unwrap());
        let read = JournalFile::parse(&bytes).unwrap();
        assert_eq!(read.header.run.parent_run_id, None);
        assert!(read.header.run.attributes.is_empty());
        assert_eq!(read.header.run.run_id, f.header.run.run_id);
        assert_eq!(read.entries, f.entries);
        let mut json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        json["header"]["format_version"] = serde_json::json!(1);
        json["header"]["run"]
            .as_object_mut()
            .unwrap()
            .remove("parent_run_id");
        let read = JournalFile::parse(json.to_string().as_bytes()).unwrap();
        assert_eq!(read.header.run.parent_run_id, None);
    }

    #[test]
    fn a_version_above_u16_is_refused_not_truncated() {
        let mut value: serde_json::Value = serde_json::from_str(&file().to_json()).unwrap();
        value["header"]["format_version"] = serde_json::json!(65537);
        let err = JournalFile::parse(value.to_string().as_bytes()).unwrap_err();
        assert!(err.0.contains("65537"), "{err}");
    }

    #[test]
    fn entries_out_of_sequence_are_refused() {
        let mut f = file();
        f.entries[0].seq = 4;
        let err = JournalFile::parse(&f.to_bytes()).unwrap_err();
        assert!(err.0.contains("out of sequence"), "{err}");
    }

    #[test]
    fn a_journals_entries_alone_are_read_with_the_run_they_hold() {
        let entries = crate::testing::JournalBuilder::started("greet", r#"{"name":"Ada"}"#)
            .facts(vec![
                crate::testing::step(0, "hello", "\"Ada\""),
                crate::testing::completed(0, "\"hi\""),
                Fact::RunCompleted {
                    output: "\"hi\"".into(),
                },
            ])
            .entries();
        let text = serde_json::to_string(
            &entries
                .iter()
                .map(crate::journal::entry_to_json)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let file = JournalFile::parse(text.as_bytes()).unwrap();
        let run = file.run_record();
        assert_eq!(
            (run.workflow.as_str(), run.input.as_str()),
            ("greet", r#"{"name":"Ada"}"#)
        );
        assert_eq!(run.run_id, "r", "read from its steps' IDs");
        // And from a step ID that names its step.
        let mut named = entries.clone();
        if let Fact::StepScheduled { step_id, name, .. } = &mut named[1].fact {
            *step_id = format!("run-7-{name}-0");
        }
        let text = serde_json::to_string(
            &named
                .iter()
                .map(crate::journal::entry_to_json)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let named = JournalFile::parse(text.as_bytes()).unwrap().run_record();
        assert_eq!(named.run_id, "run-7");
        assert_eq!(
            (run.status, run.output.as_deref()),
            (RunStatus::Completed, Some("\"hi\""))
        );
        assert_eq!(file.entries, entries);
        let started_late =
            JournalFile::parse(br#"[{"seq": 0, "at_ms": 1, "kind": "timer_fired", "command": 0}]"#)
                .unwrap_err()
                .0;
        assert!(started_late.contains("run_started"), "{started_late}");
    }

    #[test]
    fn other_bytes_are_refused_by_name() {
        assert!(
            JournalFile::parse(b"hello")
                .unwrap_err()
                .0
                .contains("not a keel journal")
        );
        assert!(
            JournalFile::parse(b"KEELJRNL")
                .unwrap_err()
                .0
                .contains("truncated")
        );
    }
}
