//! Streams a run writes: each stream's state in `streams` (its row lock
//! orders the stream's writers) and its chunks in `chunks`, written in the
//! transaction of whatever records them (a workflow's journal entries, or
//! nothing for a step's write).

use keel_core::stream::{
    Chunk, ChunkBody, MAX_STREAMS_PER_RUN, Origin, StreamInfo, StreamRefusal, StreamState,
};

use super::*;
use crate::StreamStore;

/// Applies one write to `run_id`'s stream `stream` under its row lock
/// (`StreamState::accept`); `body` `None` marks a step attempt's
/// beginning. Returns the chunks stored.
async fn apply(
    tx: &Transaction<'_>,
    run_id: &str,
    stream: &str,
    origin: &Origin,
    body: Option<ChunkBody>,
    at_ms: u64,
    max_run_bytes: u64,
) -> Result<Vec<Chunk>> {
    if body.is_some() {
        // The row exists before it is locked, so that the first writers of
        // a stream queue on its lock instead of racing to create it.
        tx.run(
            "INSERT INTO streams (run_id, stream, state, bytes) VALUES ($1, $2, $3, 0)
             ON CONFLICT DO NOTHING",
            &[&run_id, &stream, &codec::encode(&StreamState::default())],
        )
        .await
        .map_err(pg)?;
    }
    let Some(row) = tx
        .row(
            "SELECT state FROM streams WHERE run_id = $1 AND stream = $2 FOR UPDATE",
            &[&run_id, &stream],
        )
        .await
        .map_err(pg)?
    else {
        return Ok(Vec::new());
    };
    let mut state: StreamState = codec::decode(row.get(0), "stream")?;
    let run_bytes = if max_run_bytes == u64::MAX {
        0
    } else {
        let row = tx
            .row(
                "SELECT coalesce(sum(bytes), 0)::bigint FROM streams
                 WHERE run_id = $1 AND stream <> $2",
                &[&run_id, &stream],
            )
            .await
            .map_err(pg)?;
        row.map_or(0, |r| u(r.get(0)))
    };
    let accepted = state
        .accept(
            stream,
            origin.clone(),
            body,
            at_ms,
            run_bytes,
            max_run_bytes,
        )
        .map_err(|refusal| StoreError::StreamRefused {
            run_id: run_id.into(),
            refusal,
        })?;
    if accepted.is_empty() {
        return Ok(accepted);
    }
    let indexes: Vec<i64> = accepted.iter().map(|c| i(c.index)).collect();
    let bytes: Vec<Vec<u8>> = accepted.iter().map(codec::encode).collect();
    tx.run(
        "INSERT INTO chunks (run_id, stream, idx, chunk)
         SELECT $1, $2, idx, chunk FROM unnest($3::bigint[], $4::bytea[]) AS t(idx, chunk)",
        &[&run_id, &stream, &indexes, &bytes],
    )
    .await
    .map_err(pg)?;
    tx.run(
        "UPDATE streams SET state = $3, bytes = $4 WHERE run_id = $1 AND stream = $2",
        &[&run_id, &stream, &codec::encode(&state), &i(state.bytes)],
    )
    .await
    .map_err(pg)?;
    Ok(accepted)
}

/// Stores the chunks that `entries` (being appended in `tx`) write.
pub(super) async fn write_journaled(
    tx: &Transaction<'_>,
    run_id: &str,
    entries: &[Entry],
) -> Result<()> {
    for (stream, origin, body, at_ms) in keel_core::stream::journaled_writes(entries) {
        apply(tx, run_id, stream, &origin, Some(body), at_ms, u64::MAX).await?;
    }
    Ok(())
}

#[async_trait]
impl StreamStore for PgStore {
    async fn write_stream(
        &self,
        run_id: &str,
        stream: &str,
        origin: &Origin,
        body: ChunkBody,
        now_ms: u64,
        max_run_bytes: u64,
    ) -> Result<Vec<Chunk>> {
        transact!(self, |tx| {
            let row = tx
                .row(
                    "SELECT count(*) FILTER (WHERE stream <> $2), count(*) FILTER (WHERE stream = $2)
                     FROM streams WHERE run_id = $1",
                    &[&run_id, &stream],
                )
                .await
                .map_err(pg)?;
            let (others, own): (i64, i64) = row.map_or((0, 0), |r| (r.get(0), r.get(1)));
            if own == 0 && others as usize >= MAX_STREAMS_PER_RUN {
                return Err(StoreError::StreamRefused {
                    run_id: run_id.into(),
                    refusal: StreamRefusal::TooMany,
                });
            }
            let stored = apply(
                tx,
                run_id,
                stream,
                origin,
                Some(body.clone()),
                now_ms,
                max_run_bytes,
            )
            .await?;
            Ok(Attempt::Done(stored))
        })
    }

    async fn begin_attempt(
        &self,
        run_id: &str,
        step_id: &str,
        attempt: u32,
        now_ms: u64,
    ) -> Result<Vec<Chunk>> {
        let names: Vec<String> = self
            .select(
                "SELECT stream FROM streams WHERE run_id = $1 ORDER BY stream",
                &[&run_id],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let origin = Origin::Step {
            step_id: step_id.into(),
            attempt,
        };
        transact!(self, |tx| {
            let mut stored = Vec::new();
            for name in &names {
                stored.extend(apply(tx, run_id, name, &origin, None, now_ms, u64::MAX).await?);
            }
            Ok(Attempt::Done(stored))
        })
    }

    async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Chunk>> {
        self.select(
            "SELECT chunk FROM chunks WHERE run_id = $1 AND stream = $2 AND idx >= $3
             ORDER BY idx LIMIT $4",
            &[&run_id, &stream, &i(from), &(limit as i64)],
        )
        .await?
        .iter()
        .map(|r| Ok(codec::decode(r.get(0), "stream chunk")?))
        .collect()
    }

    async fn streams(&self, run_id: &str) -> Result<Vec<StreamInfo>> {
        self.select(
            "SELECT stream, state FROM streams WHERE run_id = $1 ORDER BY stream",
            &[&run_id],
        )
        .await?
        .iter()
        .map(|r| {
            let state: StreamState = codec::decode(r.get(1), "stream")?;
            Ok(StreamInfo {
                name: r.get(0),
                chunks: state.next_index,
                closed: state.closed,
                bytes: state.bytes,
            })
        })
        .collect()
    }
}
