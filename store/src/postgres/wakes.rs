//! Wakes across processes: `NOTIFY` on the schema's channel, committed with
//! the change it announces, and one connection per process that `LISTEN`s
//! and reconnects with backoff; and cancel requests (`cancel_requests`),
//! which wake the run they ask to cancel.

use keel_core::lifecycle::CancelRequest;

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
            // Shared: the run cannot end until the request is in.
            let live = tx
                .row(
                    "SELECT live FROM runs WHERE run_id = $1 FOR SHARE",
                    &[&run_id],
                )
                .await
                .map_err(pg)?;
            match live.map(|r| r.get::<_, bool>(0)) {
                None => {
                    return Err(StoreError::RunNotFound {
                        run_id: run_id.into(),
                    });
                }
                Some(false) => return Ok(Attempt::Done(None)),
                Some(true) => {}
            }
            let inserted = tx
                .run(
                    "INSERT INTO cancel_requests (run_id, record) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                    &[&run_id, &record],
                )
                .await
                .map_err(pg)?;
            if inserted == 0 {
                let first = tx
                    .row(
                        "SELECT record FROM cancel_requests WHERE run_id = $1",
                        &[&run_id],
                    )
                    .await
                    .map_err(pg)?
                    .map(|r| codec::decode(r.get(0), "cancel request"))
                    .transpose()?;
                return Ok(Attempt::Done(first));
            }
            super::runs::wake(tx, run_id).await?;
            self.notify(tx, &Wake::Cancel(run_id.into())).await?;
            Ok(Attempt::Done(Some(request.clone())))
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

/// A wake as a notification's payload: empty for an admission, the run ID
/// for a run moved on, `cancel:` (`terminate:`) and the run ID for a
/// cancel (terminate) request.
pub(super) fn payload_of(wake: &Wake) -> String {
    match wake {
        Wake::Admitted => String::new(),
        Wake::Run(run_id) => run_id.to_string(),
        Wake::Cancel(run_id) => format!("cancel:{run_id}"),
        Wake::Terminate(run_id) => format!("terminate:{run_id}"),
        Wake::Deployed => DEPLOYED.into(),
    }
}

/// The payload of [`Wake::Deployed`] (no run ID starts with a colon).
pub(super) const DEPLOYED: &str = ":deployed";

pub(super) fn wake_of(payload: &str) -> Wake {
    match payload {
        "" => Wake::Admitted,
        DEPLOYED => Wake::Deployed,
        p => match (p.strip_prefix("cancel:"), p.strip_prefix("terminate:")) {
            (Some(run_id), _) => Wake::Cancel(run_id.into()),
            (_, Some(run_id)) => Wake::Terminate(run_id.into()),
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
