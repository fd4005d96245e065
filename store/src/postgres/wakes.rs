//! Wakes across processes: `NOTIFY` on the schema's channel, committed with
//! the change it announces, and one connection per process that `LISTEN`s
//! and reconnects with backoff; cancel requests (`cancel_requests`),
//! which wake the run they ask to cancel; and pauses (`pauses`).

use keel_core::lifecycle::{CancelRequest, PauseRequest};

use super::*;

#[async_trait]
impl CancelStore for PgStore {
    async fn request_cancel(
        &self,
        run_id: &str,
        request: &CancelRequest,
    ) -> Result<Option<CancelRequest>> {
        let record = codec::encode(request);
        transact!(self, |tx| {
            if !lock_live(tx, run_id).await? {
                return Ok(Attempt::Done(None));
            }
            let first =
                first_or_insert(tx, "cancel_requests", run_id, &record, "cancel request").await?;
            if first.is_none() {
                super::runs::wake(tx, run_id).await?;
                self.notify(tx, &Wake::Cancel(run_id.into())).await?;
            }
            Ok(Attempt::Done(first.or_else(|| Some(request.clone()))))
        })
    }

    async fn cancel_request(&self, run_id: &str) -> Result<Option<CancelRequest>> {
        let mut found = self
            .records(
                "SELECT record FROM cancel_requests WHERE run_id = $1",
                &[&run_id],
                "cancel request",
            )
            .await?;
        Ok(found.pop())
    }
}

#[async_trait]
impl PauseStore for PgStore {
    async fn request_pause(
        &self,
        run_id: &str,
        request: &PauseRequest,
    ) -> Result<Option<PauseRequest>> {
        let record = codec::encode(request);
        transact!(self, |tx| {
            if !lock_live(tx, run_id).await? {
                return Ok(Attempt::Done(None));
            }
            let first = first_or_insert(tx, "pauses", run_id, &record, "pause").await?;
            if first.is_none() {
                super::runs::wake(tx, run_id).await?;
                self.notify(tx, &Wake::Pause(run_id.into())).await?;
            }
            Ok(Attempt::Done(first.or_else(|| Some(request.clone()))))
        })
    }

    async fn lift_pause(&self, run_id: &str) -> Result<Option<PauseRequest>> {
        transact!(self, |tx| {
            lock_live(tx, run_id).await?;
            let lifted = tx
                .row(
                    "DELETE FROM pauses WHERE run_id = $1 RETURNING record",
                    &[&run_id],
                )
                .await
                .map_err(pg)?
                .map(|r| codec::decode::<PauseRequest>(r.get(0), "pause"))
                .transpose()?;
            if lifted.is_some() {
                super::runs::wake(tx, run_id).await?;
                self.notify(tx, &Wake::Run(run_id.into())).await?;
            }
            Ok(Attempt::Done(lifted))
        })
    }

    async fn pause_request(&self, run_id: &str) -> Result<Option<PauseRequest>> {
        let mut found = self
            .records(
                "SELECT record FROM pauses WHERE run_id = $1",
                &[&run_id],
                "pause",
            )
            .await?;
        Ok(found.pop())
    }
}

/// Whether `run_id` has not ended, with its row locked (it cannot end
/// until the transaction does); [`StoreError::RunNotFound`] without one.
/// The lock is the one the transaction's update of the row (its wake)
/// takes, taken first: two requests at once queue on it, where shared
/// locks each upgraded to update the row deadlock each other.
async fn lock_live(tx: &Transaction<'_>, run_id: &str) -> Result<bool> {
    let live = tx
        .row(
            "SELECT live FROM runs WHERE run_id = $1 FOR NO KEY UPDATE",
            &[&run_id],
        )
        .await
        .map_err(pg)?;
    match live {
        None => Err(StoreError::RunNotFound {
            run_id: run_id.into(),
        }),
        Some(row) => Ok(row.get::<_, bool>(0)),
    }
}

/// The request `table` holds for `run_id` (the first one made), or `None`
/// once `record` is stored there.
async fn first_or_insert<R: keel_core::codec::Stored>(
    tx: &Transaction<'_>,
    table: &str,
    run_id: &str,
    record: &[u8],
    what: &'static str,
) -> Result<Option<R>> {
    let inserted = tx
        .run(
            &format!("INSERT INTO {table} (run_id, record) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
            &[&run_id, &record],
        )
        .await
        .map_err(pg)?;
    if inserted == 1 {
        return Ok(None);
    }
    tx.row(
        &format!("SELECT record FROM {table} WHERE run_id = $1"),
        &[&run_id],
    )
    .await
    .map_err(pg)?
    .map(|r| codec::decode(r.get(0), what))
    .transpose()
    .map_err(Into::into)
}

/// A wake as a notification's payload: empty for an admission, the run ID
/// for a run moved on, `cancel:` (`terminate:`, `pause:`) and the run ID
/// for a cancel (terminate, pause) request.
pub(super) fn payload_of(wake: &Wake) -> String {
    match wake {
        Wake::Admitted => String::new(),
        Wake::Run(run_id) => run_id.to_string(),
        Wake::Cancel(run_id) => format!("cancel:{run_id}"),
        Wake::Terminate(run_id) => format!("terminate:{run_id}"),
        Wake::Pause(run_id) => format!("pause:{run_id}"),
        Wake::Deployed => DEPLOYED.into(),
    }
}

/// The payload of [`Wake::Deployed`] (no run ID starts with a colon).
pub(super) const DEPLOYED: &str = ":deployed";

pub(super) fn wake_of(payload: &str) -> Wake {
    match payload {
        "" => Wake::Admitted,
        DEPLOYED => Wake::Deployed,
        p => match p.split_once(':') {
            Some(("cancel", run_id)) => Wake::Cancel(run_id.into()),
            Some(("terminate", run_id)) => Wake::Terminate(run_id.into()),
            Some(("pause", run_id)) => Wake::Pause(run_id.into()),
            _ => Wake::Run(p.into()),
        },
    }
}

pub(super) fn channel(schema: &str) -> String {
    format!("keel_{schema}")
}

/// Listens for wakes on a connection of its own, reconnecting with backoff
/// (wakes missed meanwhile are made up for by a general wake and by the
/// engine's polling).
pub(super) async fn listen<T>(
    config: tokio_postgres::Config,
    tls: T,
    channel: String,
    wakes: broadcast::Sender<Wake>,
) where
    T: tls::Connector,
    T::Stream: Send + Sync,
    T::TlsConnect: Send + Sync,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    let mut backoff = Duration::from_millis(100);
    loop {
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                backoff = Duration::from_millis(100);
                let listening = async {
                    client
                        .batch_execute(&format!("LISTEN {channel}"))
                        .await
                        .map_err(|e| describe(&e))
                };
                let messages = async {
                    loop {
                        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                let _ = wakes.send(wake_of(n.payload()));
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return describe(&e),
                            None => return "the connection closed".to_string(),
                        }
                    }
                };
                tokio::pin!(messages);
                let reason = tokio::select! {
                    listened = listening => match listened {
                        Ok(()) => {
                            // A wake may have been missed while connecting.
                            let _ = wakes.send(Wake::Admitted);
                            messages.await
                        }
                        Err(e) => e,
                    },
                    reason = &mut messages => reason,
                };
                tracing::warn!(
                    channel,
                    "listening for wakes stopped ({reason}); reconnecting"
                );
            }
            Err(e) => {
                tracing::warn!(
                    channel,
                    ?backoff,
                    "cannot listen for wakes: {}",
                    describe(&e)
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[async_trait]
impl WakeStore for PgStore {
    async fn watch(&self, run_id: &str, watcher: &str) -> Result<()> {
        self.exec(
            "INSERT INTO watchers (run_id, watcher) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&run_id, &watcher],
        )
        .await?;
        Ok(())
    }

    async fn is_woken(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .select_one("SELECT woken FROM run_due WHERE run_id = $1", &[&run_id])
            .await?
            .is_some_and(|r| r.get::<_, bool>(0)))
    }

    fn wake_stream(&self) -> Option<broadcast::Receiver<Wake>> {
        Some(self.inner.wakes.subscribe())
    }

    async fn announce(&self, wake: &Wake) -> Result<()> {
        self.exec(
            "SELECT pg_notify($1, $2)",
            &[&channel(&self.inner.schema), &payload_of(wake)],
        )
        .await?;
        Ok(())
    }
}
