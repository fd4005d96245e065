//! Streams a run writes: named, append-only sequences of JSON chunks that
//! readers follow while the run goes on (tokens of a model's answer,
//! progress), each chunk at an index from 0 that a reader resumes from.
//!
//! A workflow's writes are journaled ([`crate::Fact::StreamWritten`],
//! [`crate::Fact::StreamClosed`]) and stored with the journal entries that
//! record them, in one write: exactly once, and replay writes nothing. A
//! step's writes are not journaled: they are stored as the attempt makes
//! them, each tagged with its step ID and attempt. When a later attempt of
//! a step begins (a retry, or the step run again after a crash), every
//! stream an earlier attempt of that step wrote gets a
//! [`ChunkBody::Restart`] marker first: a reader drops that step's chunks of
//! earlier attempts there. [`StreamState::accept`] is that rule, which
//! every store applies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest stream name, in bytes.
pub const MAX_STREAM_NAME: usize = 128;

/// Most streams one run may have.
pub const MAX_STREAMS_PER_RUN: usize = 64;

/// Refuses a stream name that is empty, too long, or holds a character
/// other than ASCII letters, digits, `_`, `-`, `.` and `:`.
pub fn check_stream_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_STREAM_NAME {
        return Err(format!(
            "a stream name is 1 to {MAX_STREAM_NAME} bytes, not {}",
            name.len()
        ));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        Some(c) => Err(format!(
            "stream name `{}` holds {c:?}; use ASCII letters, digits, `_`, `-`, `.` and `:`",
            name.escape_debug()
        )),
        None => Ok(()),
    }
}

/// Who wrote a chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    /// The workflow, by its journaled command.
    Workflow { command: u32 },
    /// An attempt of a step.
    Step { step_id: String, attempt: u32 },
}

/// What a chunk holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkBody {
    /// A value, as JSON.
    Data(String),
    /// Attempt `attempt` of step `step_id` begins: the chunks that step's
    /// earlier attempts wrote to this stream no longer count.
    Restart { step_id: String, attempt: u32 },
    /// The stream is closed: no chunk comes after this one.
    Closed,
}

/// One chunk of a stream, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Its place in the stream, from 0.
    pub index: u64,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub origin: Origin,
    pub body: ChunkBody,
}

impl Chunk {
    /// The size it counts for against a run's stream bound: its data.
    pub fn size(&self) -> u64 {
        match &self.body {
            ChunkBody::Data(json) => json.len() as u64,
            _ => 0,
        }
    }
}

impl crate::codec::Stored for Chunk {}

/// Why a stream refused a chunk.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamRefusal {
    #[error("stream `{stream}` is closed")]
    Closed { stream: String },
    #[error(
        "the run's streams would hold {would_hold} bytes, over max_stream_bytes ({limit} bytes)"
    )]
    TooLarge { would_hold: u64, limit: u64 },
    #[error("the run has {MAX_STREAMS_PER_RUN} streams, the most it may")]
    TooMany,
    /// A step attempt wrote after a later attempt of its step began (a
    /// worker that lost the run and had not heard yet).
    #[error("attempt {attempt} of step `{step_id}` was superseded by attempt {current}")]
    Superseded {
        step_id: String,
        attempt: u32,
        current: u32,
    },
}

/// What a store keeps about one stream besides its chunks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamState {
    /// The index the next chunk gets (how many the stream holds).
    pub next_index: u64,
    /// A [`ChunkBody::Closed`] chunk was stored.
    pub closed: bool,
    /// Bytes of data the stream holds.
    pub bytes: u64,
    /// The latest attempt of each step that wrote to the stream.
    pub writers: BTreeMap<String, u32>,
}

impl crate::codec::Stored for StreamState {}

impl StreamState {
    /// The chunks to store for a write of `body` by `origin` at `now_ms`
    /// (a restart marker first when `origin` is a later attempt of a step
    /// that wrote before), updating the state; or why the write is refused.
    /// `None` for `body` marks a step attempt's beginning: the marker
    /// alone, if one is due. `run_bytes` is what the run's other streams
    /// hold; a step's data may not take the run past `max_run_bytes` (a
    /// workflow's is bounded by its journal instead).
    pub fn accept(
        &mut self,
        stream: &str,
        origin: Origin,
        body: Option<ChunkBody>,
        now_ms: u64,
        run_bytes: u64,
        max_run_bytes: u64,
    ) -> Result<Vec<Chunk>, StreamRefusal> {
        if self.closed && body.is_some() {
            return Err(StreamRefusal::Closed {
                stream: stream.into(),
            });
        }
        let mut chunks = Vec::new();
        if let Origin::Step { step_id, attempt } = &origin {
            if let Some(ChunkBody::Data(json)) = &body {
                let would_hold = run_bytes + self.bytes + json.len() as u64;
                if would_hold > max_run_bytes {
                    return Err(StreamRefusal::TooLarge {
                        would_hold,
                        limit: max_run_bytes,
                    });
                }
            }
            if let Some(&current) = self.writers.get(step_id)
                && current > *attempt
            {
                return Err(StreamRefusal::Superseded {
                    step_id: step_id.clone(),
                    attempt: *attempt,
                    current,
                });
            }
            let earlier = self.writers.get(step_id).is_some_and(|a| a < attempt);
            if earlier && !self.closed {
                chunks.push(self.chunk(
                    now_ms,
                    origin.clone(),
                    ChunkBody::Restart {
                        step_id: step_id.clone(),
                        attempt: *attempt,
                    },
                ));
            }
            if earlier || body.is_some() {
                self.writers.insert(step_id.clone(), *attempt);
            }
        }
        if let Some(body) = body {
            self.closed = body == ChunkBody::Closed;
            let chunk = self.chunk(now_ms, origin, body);
            self.bytes += chunk.size();
            chunks.push(chunk);
        }
        Ok(chunks)
    }

    fn chunk(&mut self, at_ms: u64, origin: Origin, body: ChunkBody) -> Chunk {
        let index = self.next_index;
        self.next_index += 1;
        Chunk {
            index,
            at_ms,
            origin,
            body,
        }
    }
}

/// A stream as listings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub name: String,
    /// How many chunks it holds.
    pub chunks: u64,
    pub closed: bool,
    /// Bytes of data it holds.
    pub bytes: u64,
}

/// The writes a run's journal entries record, in order: `(stream, origin,
/// body)` for each [`crate::Fact::StreamWritten`] and
/// [`crate::Fact::StreamClosed`], which a store stores with the entries.
pub fn journaled_writes(
    entries: &[crate::Entry],
) -> impl Iterator<Item = (&str, Origin, ChunkBody, u64)> {
    entries.iter().filter_map(|e| match &e.fact {
        crate::Fact::StreamWritten {
            command,
            stream,
            value,
        } => Some((
            stream.as_str(),
            Origin::Workflow { command: *command },
            ChunkBody::Data(value.clone()),
            e.at_ms,
        )),
        crate::Fact::StreamClosed { command, stream } => Some((
            stream.as_str(),
            Origin::Workflow { command: *command },
            ChunkBody::Closed,
            e.at_ms,
        )),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(attempt: u32) -> Origin {
        Origin::Step {
            step_id: "r-0".into(),
            attempt,
        }
    }

    fn data(s: &str) -> Option<ChunkBody> {
        Some(ChunkBody::Data(s.into()))
    }

    #[test]
    fn names_are_checked() {
        assert!(check_stream_name("tokens").is_ok());
        assert!(check_stream_name("chat:7.events-v2_x").is_ok());
        assert!(check_stream_name("").is_err());
        assert!(check_stream_name(&"a".repeat(129)).is_err());
        let e = check_stream_name("a b").unwrap_err();
        assert!(e.contains("' '"), "{e}");
    }

    #[test]
    fn chunks_are_numbered_from_zero_and_a_close_ends_the_stream() {
        let mut s = StreamState::default();
        let w = Origin::Workflow { command: 3 };
        let a = s.accept("t", w.clone(), data("1"), 10, 0, 100).unwrap();
        let b = s.accept("t", w.clone(), data("22"), 11, 0, 100).unwrap();
        assert_eq!((a[0].index, b[0].index), (0, 1));
        assert_eq!(s.bytes, 3);
        let c = s.accept("t", w.clone(), Some(ChunkBody::Closed), 12, 0, 100);
        assert_eq!(c.unwrap()[0].index, 2);
        let refused = s.accept("t", w, data("3"), 13, 0, 100).unwrap_err();
        assert_eq!(refused, StreamRefusal::Closed { stream: "t".into() });
        assert_eq!(s.next_index, 3);
    }

    #[test]
    fn a_later_attempt_of_a_step_that_wrote_is_preceded_by_a_marker_once() {
        let mut s = StreamState::default();
        s.accept("t", step(1), data("a"), 1, 0, 100).unwrap();
        // The second attempt begins: the marker, at its beginning.
        let begun = s.accept("t", step(2), None, 2, 0, 100).unwrap();
        assert_eq!(
            begun.iter().map(|c| &c.body).collect::<Vec<_>>(),
            [&ChunkBody::Restart {
                step_id: "r-0".into(),
                attempt: 2
            }]
        );
        // Its writes need no second marker.
        let written = s.accept("t", step(2), data("b"), 3, 0, 100).unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].index, 2);
        // The first attempt, still running on a worker that lost the run,
        // writes late: refused, and nothing changes.
        let late = s.accept("t", step(1), data("z"), 3, 0, 100).unwrap_err();
        assert_eq!(
            late,
            StreamRefusal::Superseded {
                step_id: "r-0".into(),
                attempt: 1,
                current: 2
            }
        );
        assert_eq!((s.next_index, s.writers["r-0"]), (3, 2));
        // A third attempt whose beginning was not marked gets one at its
        // first write.
        let third = s.accept("t", step(3), data("c"), 4, 0, 100).unwrap();
        assert_eq!(third.len(), 2);
        assert!(matches!(
            third[0].body,
            ChunkBody::Restart { attempt: 3, .. }
        ));
    }

    #[test]
    fn a_step_that_never_wrote_gets_no_marker() {
        let mut s = StreamState::default();
        assert!(s.accept("t", step(2), None, 1, 0, 100).unwrap().is_empty());
        assert!(s.writers.is_empty());
        let first = s.accept("t", step(2), data("x"), 2, 0, 100).unwrap();
        assert_eq!(first.len(), 1);
    }

    #[test]
    fn a_step_may_not_take_the_run_past_its_bound() {
        let mut s = StreamState::default();
        let refused = s
            .accept("t", step(1), data("12345"), 1, 96, 100)
            .unwrap_err();
        assert_eq!(
            refused,
            StreamRefusal::TooLarge {
                would_hold: 101,
                limit: 100
            }
        );
        assert_eq!(s.next_index, 0, "nothing was taken");
        assert!(s.accept("t", step(1), data("1234"), 1, 96, 100).is_ok());
    }
}
