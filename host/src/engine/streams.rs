//! What a client reads of a run beyond its result: its streams, page by
//! page or followed as they grow, and the replies its workflow journals to
//! payloads delivered with an ID (request/reply on hooks).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use futures::Stream;
use keel_core::journal::Fact;
use keel_core::stream::{Chunk, ChunkBody, StreamInfo};
use keel_core::{HookToken, RunId};
use keel_store::Resumed;

use super::Keel;
use super::watch::Changes;
use crate::{Error, Result};

/// How many chunks one read of a stream takes.
pub const CHUNK_PAGE: usize = 100;

/// Longest payload ID, in bytes.
pub const MAX_PAYLOAD_ID: usize = 128;

/// A reply to a payload delivered with an ID, as far as it has come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The run whose hook received the payload.
    pub run_id: RunId,
    pub token: HookToken,
    pub payload_id: String,
    /// The payload's place among the hook's payloads.
    pub index: u64,
    /// The workflow's reply (JSON), once journaled.
    pub reply: Option<String>,
}

/// Where a follower stands in what a run writes: reads on from there.
trait Place: Send + 'static {
    type Item: Send + 'static;

    /// Queues what is new onto `pending`; whether nothing more can come.
    fn look<'a>(
        &'a mut self,
        keel: &'a Keel,
        run_id: &'a RunId,
        pending: &'a mut VecDeque<Self::Item>,
    ) -> impl Future<Output = Result<bool>> + Send + 'a;
}

/// The items of `place` in `run_id`, each once stored, until nothing more
/// can come; an error (the run unknown, the store failing) is the last.
fn follow<P: Place>(
    keel: &Keel,
    run_id: &RunId,
    place: P,
) -> impl Stream<Item = Result<P::Item>> + Send + use<P> {
    struct Follower<P: Place> {
        keel: Keel,
        run_id: RunId,
        place: P,
        pending: VecDeque<P::Item>,
        done: bool,
        changes: Changes,
    }
    let follower = Follower {
        keel: keel.clone(),
        run_id: run_id.clone(),
        place,
        pending: VecDeque::new(),
        done: false,
        changes: Changes::of(keel, run_id),
    };
    futures::stream::unfold(follower, |mut f| async move {
        loop {
            if let Some(item) = f.pending.pop_front() {
                return Some((Ok(item), f));
            }
            if f.done {
                return None;
            }
            match f.place.look(&f.keel, &f.run_id, &mut f.pending).await {
                Ok(done) => f.done = done,
                Err(e) => {
                    f.done = true;
                    return Some((Err(e), f));
                }
            }
            if f.pending.is_empty() && !f.done {
                f.changes.next().await;
            }
        }
    })
}

/// A place in one stream: the next index to read. Done at the stream's
/// close, or when the run ended with nothing more written.
struct StreamPlace {
    stream: String,
    next: u64,
}

impl Place for StreamPlace {
    type Item = Chunk;

    async fn look(
        &mut self,
        keel: &Keel,
        run_id: &RunId,
        pending: &mut VecDeque<Chunk>,
    ) -> Result<bool> {
        let store = keel.store();
        let mut chunks = store
            .chunks(run_id, &self.stream, self.next, CHUNK_PAGE)
            .await?;
        let mut done = false;
        if chunks.is_empty() {
            // The run's end comes after its last write: a write before
            // the end read here is found by the second read.
            if !keel.get_run(run_id).await?.status.is_final() {
                return Ok(false);
            }
            chunks = store
                .chunks(run_id, &self.stream, self.next, CHUNK_PAGE)
                .await?;
            done = chunks.is_empty();
        }
        if let Some(last) = chunks.last() {
            self.next = last.index + 1;
            done = last.body == ChunkBody::Closed;
        }
        pending.extend(chunks);
        Ok(done)
    }
}

/// A place in every stream of a run: the next index to read, by stream
/// (a stream not named from 0). Done when the run ended with nothing more
/// written.
struct RunPlace {
    next: BTreeMap<String, u64>,
}

impl Place for RunPlace {
    type Item = (String, Chunk);

    async fn look(
        &mut self,
        keel: &Keel,
        run_id: &RunId,
        pending: &mut VecDeque<(String, Chunk)>,
    ) -> Result<bool> {
        if self.read_new(keel, run_id, pending).await? > 0 {
            return Ok(false);
        }
        // As for one stream: the end comes after the last write.
        if !keel.get_run(run_id).await?.status.is_final() {
            return Ok(false);
        }
        Ok(self.read_new(keel, run_id, pending).await? == 0)
    }
}

impl RunPlace {
    /// Queues the chunks written since the last read; how many.
    async fn read_new(
        &mut self,
        keel: &Keel,
        run_id: &RunId,
        pending: &mut VecDeque<(String, Chunk)>,
    ) -> Result<usize> {
        let chunks = keel.new_chunks(run_id, &mut self.next).await?;
        let read = chunks.len();
        pending.extend(chunks);
        Ok(read)
    }
}

/// Refuses a payload ID that is empty, too long, or not printable ASCII.
pub(super) fn check_payload_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_PAYLOAD_ID || !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Error::InvalidRequest {
            reason: format!(
                "a payload ID is 1 to {MAX_PAYLOAD_ID} printable ASCII characters, not {:?}",
                id.escape_debug().to_string()
            ),
        });
    }
    Ok(())
}

impl Keel {
    /// The streams `run_id` wrote, by name; `RunNotFound` for an unknown run.
    pub async fn streams(&self, run_id: &str) -> Result<Vec<StreamInfo>> {
        self.get_run(run_id).await?;
        Ok(self.store().streams(run_id).await?)
    }

    /// Up to `limit` chunks of `run_id`'s stream `stream` from index `from`.
    pub async fn chunks(
        &self,
        run_id: &str,
        stream: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Chunk>> {
        Ok(self.store().chunks(run_id, stream, from, limit).await?)
    }

    /// The chunks of `run_id`'s stream `stream` from index `from`, each
    /// once it is stored, until the stream is closed or the run has ended
    /// (a stream not written yet is awaited too). An error (the run
    /// unknown, the store failing) is the stream's last item.
    pub fn follow_stream(
        &self,
        run_id: &RunId,
        stream: &str,
        from: u64,
    ) -> impl Stream<Item = Result<Chunk>> + Send + use<> {
        let place = StreamPlace {
            stream: stream.to_string(),
            next: from,
        };
        follow(self, run_id, place)
    }

    /// The chunks of every stream of `run_id`, each with its stream's name,
    /// once stored, from the index `from` gives for its stream (0 for a
    /// stream it does not name, or that is new), until the run has ended
    /// and all it wrote is read. Chunks of one stream come in order; an
    /// error is the last item.
    pub fn follow_streams(
        &self,
        run_id: &RunId,
        from: BTreeMap<String, u64>,
    ) -> impl Stream<Item = Result<(String, Chunk)>> + Send + use<> {
        follow(self, run_id, RunPlace { next: from })
    }

    /// The chunks of `run_id`'s streams from the indexes `next` gives (0
    /// for a stream it does not name), at most a page of each stream, each
    /// with its stream's name; `next` moves past them. Called until it
    /// returns none, it has read all the run has written so far.
    pub async fn new_chunks(
        &self,
        run_id: &RunId,
        next: &mut BTreeMap<String, u64>,
    ) -> Result<Vec<(String, Chunk)>> {
        let store = self.store();
        let mut read = Vec::new();
        for info in store.streams(run_id).await? {
            let from = next.get(&info.name).copied().unwrap_or(0);
            if from >= info.chunks {
                continue;
            }
            let chunks = store.chunks(run_id, &info.name, from, CHUNK_PAGE).await?;
            if let Some(last) = chunks.last() {
                next.insert(info.name.clone(), last.index + 1);
            }
            read.extend(chunks.into_iter().map(|c| (info.name.clone(), c)));
        }
        Ok(read)
    }

    /// Delivers `payload` to the active hook holding `token`, as
    /// [`Keel::resume_hook`] does, and says where it went. With
    /// `payload_id`, a payload of that ID delivered on `token` before is
    /// not delivered again (`duplicate`), even after the run it went to has
    /// ended, for [`RetentionConfig::payload_ids_ms`]: a client that retries
    /// a resume whose answer it lost, or a webhook sender that retries a
    /// delivery, delivers it once.
    ///
    /// [`RetentionConfig::payload_ids_ms`]: crate::RetentionConfig::payload_ids_ms
    pub async fn deliver(
        &self,
        token: &str,
        payload: &str,
        payload_id: Option<&str>,
    ) -> Result<Resumed> {
        if let Some(id) = payload_id {
            check_payload_id(id)?;
        }
        self.inner.config.limits.payload(
            payload.len(),
            || format!("the payload for hook `{token}`"),
            None,
        )?;
        let value = super::admission::parse_json(payload, "the payload")?;
        self.check_payload(token, &value).await?;
        let now_ms = self.now_ms();
        let remembered = payload_id.map(|id| keel_store::PayloadId {
            id,
            now_ms,
            remembered_until_ms: now_ms.saturating_add(self.inner.config.retention.payload_ids_ms),
        });
        let resumed = self
            .store()
            .deliver(token, &value.to_string(), remembered)
            .await
            .map_err(|e| match Error::from(e) {
                e if e.outcome_unknown() => Error::ResumeOutcomeUnknown {
                    token: token.into(),
                    reason: e.to_string(),
                },
                e => e,
            })?;
        let run_id = &resumed.run_id;
        if resumed.duplicate {
            tracing::info!(%run_id, token, payload_id, "payload delivered before; not again");
            // Payload IDs are remembered past their run, which may be gone.
            if let Err(keel_store::StoreError::RunNotFound { .. }) =
                self.store().get_run(run_id).await
            {
                return Err(Error::DeliveredToDeletedRun {
                    token: token.into(),
                    payload_id: payload_id.unwrap_or_default().into(),
                    run_id: run_id.clone(),
                });
            }
        } else {
            tracing::info!(%run_id, token, "hook resumed");
            self.poke(run_id);
        }
        Ok(resumed)
    }

    /// Fails with `PayloadMismatch`, naming each place, when the hook
    /// holding `token` has a payload schema that `payload` does not fit. A
    /// token no hook holds is left to the delivery to refuse.
    async fn check_payload(&self, token: &str, payload: &serde_json::Value) -> Result<()> {
        let hook = match self.store().get_hook(token, self.now_ms()).await {
            Ok(hook) => hook,
            Err(keel_store::StoreError::HookNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let Some(schema) = hook.payload_schema.as_deref().filter(|_| hook.active) else {
            return Ok(());
        };
        let problems = self.inner.payload_schemas.problems(schema, payload);
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::PayloadMismatch {
            token: token.into(),
            run_id: hook.run_id,
            problems,
        })
    }

    /// The reply to the payload of ID `payload_id` delivered to the hook
    /// holding `token` (`reply` `None` until the workflow journals it).
    /// `HookNotFound` once no run holds the token; `PayloadNotFound` if its
    /// run was delivered no payload of that ID.
    pub async fn reply(&self, token: &str, payload_id: &str) -> Result<Reply> {
        check_payload_id(payload_id)?;
        let hook = self.store().get_hook(token, self.now_ms()).await?;
        self.reply_in(&hook.run_id, token, payload_id).await
    }

    /// [`Keel::reply`] in run `run_id`, looking up which of the hook's
    /// payloads has the ID (the store forgets that once the run ends).
    pub async fn reply_in(&self, run_id: &RunId, token: &str, payload_id: &str) -> Result<Reply> {
        check_payload_id(payload_id)?;
        let not_found = || Error::PayloadNotFound {
            token: token.into(),
            payload_id: payload_id.into(),
        };
        let index = self
            .store()
            .delivered(run_id, token, payload_id)
            .await?
            .ok_or_else(not_found)?;
        self.reply_at(run_id, token, payload_id, index).await
    }

    /// The reply to payload `index` of the hook `token` in run `run_id`,
    /// read from its journal: found even after the run has ended.
    async fn reply_at(
        &self,
        run_id: &RunId,
        token: &str,
        payload_id: &str,
        index: u64,
    ) -> Result<Reply> {
        let reply = self
            .journal(run_id)
            .await?
            .into_iter()
            .find_map(|e| match e.fact {
                Fact::HookReplied {
                    token: t,
                    index: i,
                    reply,
                    ..
                } if t == token && i == index => Some(reply),
                _ => None,
            });
        Ok(Reply {
            run_id: run_id.clone(),
            token: token.into(),
            payload_id: payload_id.into(),
            index,
            reply,
        })
    }

    /// [`Keel::reply`], waiting up to `wait` for the workflow to reply;
    /// the reply may still be `None` when the wait passes.
    pub async fn wait_reply(&self, token: &str, payload_id: &str, wait: Duration) -> Result<Reply> {
        let first = self.reply(token, payload_id).await?;
        let delivered = Resumed {
            run_id: first.run_id.clone(),
            index: first.index,
            duplicate: true,
        };
        self.wait_reply_to(&delivered, token, payload_id, wait)
            .await
    }

    /// [`Keel::wait_reply`] for the payload [`Keel::deliver`] delivered
    /// as `delivered`: read in its run, so a run that ends without
    /// replying (and lets go of the token) ends the wait with none.
    pub async fn wait_reply_to(
        &self,
        delivered: &Resumed,
        token: &str,
        payload_id: &str,
        wait: Duration,
    ) -> Result<Reply> {
        let run_id = &delivered.run_id;
        let read = || self.reply_at(run_id, token, payload_id, delivered.index);
        let first = read().await?;
        if first.reply.is_some() || wait.is_zero() {
            return Ok(first);
        }
        let mut changes = Changes::of(self, run_id);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Subscribed before the reads: a reply journaled after them is heard.
            let reply = read().await?;
            if reply.reply.is_some() || self.get_run(run_id).await?.status.is_final() {
                return Ok(reply);
            }
            if tokio::time::timeout_at(deadline, changes.next())
                .await
                .is_err()
            {
                return Ok(reply);
            }
        }
    }
}
