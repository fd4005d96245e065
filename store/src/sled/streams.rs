//! Streams a run writes: each stream's state in `streams` (`run \0
//! stream`) and its chunks in `chunks` (`run \0 stream \0 index`), written
//! in one sled transaction with whatever records them (a workflow's
//! journal entries, or nothing for a step's write).

use async_trait::async_trait;
use keel_core::codec;
use keel_core::stream::{
    Chunk, ChunkBody, MAX_STREAMS_PER_RUN, Origin, StreamInfo, StreamRefusal, StreamState,
};
use sled::Transactional;
use sled::transaction::TransactionalTree;

use crate::{Result, StoreError, StreamStore};

use super::*;

/// The key of a chunk: its stream's key, then its index (big-endian).
fn chunk_key(run_id: &str, stream: &str, index: u64) -> Vec<u8> {
    let mut key = key_of(run_id, stream);
    key.push(0);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// One write to apply: stream, origin, body (`None`: an attempt begins),
/// time.
pub(super) type Write<'a> = (&'a str, Origin, Option<ChunkBody>, u64);

/// Applies `writes` to `run_id`'s streams in a transaction: reads each
/// stream's state, decides the chunks (`StreamState::accept`), stores them
/// and the new state. `run_bytes` is what the run's streams hold besides
/// the one written, `max_run_bytes` the bound of a step's writes.
pub(super) fn apply(
    streams: &TransactionalTree,
    chunks: &TransactionalTree,
    run_id: &str,
    writes: &[Write<'_>],
    run_bytes: u64,
    max_run_bytes: u64,
) -> TxResult<Vec<Chunk>> {
    let mut stored = Vec::new();
    for (stream, origin, body, at_ms) in writes {
        let key = key_of(run_id, stream);
        let mut state: StreamState = match streams.get(&key)? {
            Some(bytes) => codec::decode(&bytes, "stream").map_err(|e| {
                sled::transaction::ConflictableTransactionError::Abort(StoreError::from(e))
            })?,
            None if body.is_none() => continue,
            None => StreamState::default(),
        };
        let own = state.bytes;
        let accepted = state
            .accept(
                stream,
                origin.clone(),
                body.clone(),
                *at_ms,
                run_bytes.saturating_sub(own),
                max_run_bytes,
            )
            .or_else(|refusal| {
                abort(StoreError::StreamRefused {
                    run_id: run_id.into(),
                    refusal,
                })
            })?;
        for chunk in &accepted {
            chunks.insert(chunk_key(run_id, stream, chunk.index), codec::encode(chunk))?;
        }
        streams.insert(key, codec::encode(&state))?;
        stored.extend(accepted);
    }
    Ok(stored)
}

impl SledStore {
    /// The states of `run_id`'s streams, by name.
    fn stream_states(&self, run_id: &str) -> Result<Vec<(String, StreamState)>> {
        let prefix = key_of(run_id, "");
        self.inner
            .streams
            .scan_prefix(&prefix)
            .map(|kv| {
                let (key, value) = kv.map_err(backend)?;
                let name = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                Ok((name, codec::decode(&value, "stream")?))
            })
            .collect()
    }

    /// Appends entries that record stream writes together with the chunks
    /// they write, in one transaction.
    pub(super) fn write_entries_and_chunks(&self, run_id: &str, entries: &[Entry]) -> Result<()> {
        let writes: Vec<Write<'_>> = keel_core::stream::journaled_writes(entries)
            .map(|(stream, origin, body, at)| (stream, origin, Some(body), at))
            .collect();
        let i = &self.inner;
        (&i.journal, &i.streams, &i.chunks).transaction(|(journal, streams, chunks)| {
            write_entries(journal, run_id, entries)?;
            apply(streams, chunks, run_id, &writes, 0, u64::MAX)?;
            Ok(())
        })?;
        Ok(())
    }

    /// Deletes `run_id`'s streams and chunks; the bytes they held.
    pub(super) fn drop_streams(&self, run_id: &str) -> Result<u64> {
        let prefix = key_of(run_id, "");
        let mut bytes = 0;
        for kv in self.inner.chunks.scan_prefix(&prefix) {
            let (key, value) = kv.map_err(backend)?;
            bytes += value.len() as u64;
            self.inner.chunks.remove(key).map_err(backend)?;
        }
        self.drop_prefix(&self.inner.streams, &prefix)?;
        Ok(bytes)
    }
}

#[async_trait]
impl StreamStore for SledStore {
    async fn write_stream(
        &self,
        run_id: &str,
        stream: &str,
        origin: &Origin,
        body: ChunkBody,
        now_ms: u64,
        max_run_bytes: u64,
    ) -> Result<Vec<Chunk>> {
        self.room()?;
        let states = self.stream_states(run_id)?;
        if states.len() >= MAX_STREAMS_PER_RUN && !states.iter().any(|(n, _)| n == stream) {
            return Err(StoreError::StreamRefused {
                run_id: run_id.into(),
                refusal: StreamRefusal::TooMany,
            });
        }
        let run_bytes = states.iter().map(|(_, s)| s.bytes).sum();
        let writes = [(stream, origin.clone(), Some(body), now_ms)];
        let i = &self.inner;
        let stored = (&i.streams, &i.chunks).transaction(|(streams, chunks)| {
            apply(streams, chunks, run_id, &writes, run_bytes, max_run_bytes)
        })?;
        self.sync().await?;
        Ok(stored)
    }

    async fn begin_attempt(
        &self,
        run_id: &str,
        step_id: &str,
        attempt: u32,
        now_ms: u64,
    ) -> Result<Vec<Chunk>> {
        let states = self.stream_states(run_id)?;
        let origin = Origin::Step {
            step_id: step_id.into(),
            attempt,
        };
        let writes: Vec<Write<'_>> = states
            .iter()
            .filter(|(_, s)| s.writers.get(step_id).is_some_and(|a| *a < attempt))
            .map(|(name, _)| (name.as_str(), origin.clone(), None, now_ms))
            .collect();
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let i = &self.inner;
        let stored = (&i.streams, &i.chunks).transaction(|(streams, chunks)| {
            apply(streams, chunks, run_id, &writes, 0, u64::MAX)
        })?;
        self.sync().await?;
        Ok(stored)
    }

    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Chunk>> {
        self.inner
            .chunks
            .range(chunk_key(run_id, stream, from)..=chunk_key(run_id, stream, u64::MAX))
            .take(limit)
            .map(|kv| Ok(codec::decode(&kv.map_err(backend)?.1, "stream chunk")?))
            .collect()
    }

    async fn streams(&self, run_id: &str) -> Result<Vec<StreamInfo>> {
        Ok(self
            .stream_states(run_id)?
            .into_iter()
            .map(|(name, s)| StreamInfo {
                name,
                chunks: s.next_index,
                closed: s.closed,
                bytes: s.bytes,
            })
            .collect())
    }
}
