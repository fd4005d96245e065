//! Accepting connections so that clients who open connections and never
//! finish a request cannot starve those who do: each connection must send
//! a request's headers within the header timeout (also between requests on
//! a kept-alive connection), at most a bounded number are open at once
//! (below the process's descriptor limit, which is raised to its hard limit
//! first), and at that bound a new connection closes the one that has
//! waited longest with no request in flight. Only when every open
//! connection is busy with a request is a new one turned away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

/// How connections are bounded.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// The most connections open at once (lowered to fit the descriptor
    /// limit).
    pub max_connections: usize,
    /// How long a client has to send a request's headers, on a new
    /// connection or between requests on a kept-alive one.
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Descriptors kept for everything but connections: the store's files,
/// database connections, compiled components, step sockets.
const RESERVED_DESCRIPTORS: u64 = 128;

/// How long shutting down waits for requests in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Raises the soft descriptor limit to the hard one and returns how many
/// connections fit under it beside [`RESERVED_DESCRIPTORS`].
fn connections_that_fit(wanted: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let soft = limit.current.unwrap_or(u64::MAX);
    let room = soft.saturating_sub(RESERVED_DESCRIPTORS).max(8);
    wanted
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// One open connection, as the accept loop sees it.
struct Connection {
    /// Requests in flight (a response's body counts until it is sent).
    busy: AtomicUsize,
    /// When it last became idle.
    idle_since: Mutex<Instant>,
    /// Tells it to close at once.
    close: Notify,
}

impl Connection {
    fn idle_since(&self) -> Option<Instant> {
        (self.busy.load(Ordering::SeqCst) == 0).then(|| *lock(&self.idle_since))
    }
}

/// Marks a connection busy until dropped (with the response's body).
struct InFlight(Arc<Connection>);

impl InFlight {
    fn begin(conn: &Arc<Connection>) -> InFlight {
        conn.busy.fetch_add(1, Ordering::SeqCst);
        InFlight(conn.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *lock(&self.0.idle_since) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The open connections.
#[derive(Default)]
struct Open {
    conns: Mutex<HashMap<u64, Arc<Connection>>>,
    next: AtomicU64,
}

impl Open {
    /// Registers a new connection if there is room, closing the
    /// longest-idle one at the bound; `None` if every one is busy.
    fn admit(&self, max: usize) -> Option<(u64, Arc<Connection>)> {
        let mut conns = lock(&self.conns);
        if conns.len() >= max {
            let idlest = conns
                .iter()
                .filter_map(|(id, c)| c.idle_since().map(|t| (t, *id)))
                .min()?;
            if let Some(evicted) = conns.remove(&idlest.1) {
                evicted.close.notify_one();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Connection {
            busy: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            close: Notify::new(),
        });
        conns.insert(id, conn.clone());
        Some((id, conn))
    }

    fn remove(&self, id: u64) {
        lock(&self.conns).remove(&id);
    }

    fn len(&self) -> usize {
        lock(&self.conns).len()
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves,
/// then lets requests in flight finish (for a few seconds).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = connections_that_fit(limits.max_connections);
    tracing::info!(max_connections = max, "accepting connections");
    let open = Arc::new(Open::default());
    let (stop, stopped) = watch::channel(false);
    tokio::pin!(shutdown);
    // When a refusal was last logged (at most one every 10 s); `None` yet.
    let mut refused_logged: Option<Instant> = None;
    let quiet =
        |logged: &Option<Instant>| logged.is_some_and(|t| t.elapsed() < Duration::from_secs(10));
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or memory for a moment: back off
                // instead of spinning.
                if !quiet(&refused_logged) {
                    tracing::warn!("accepting a connection failed: {e}");
                    refused_logged = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((id, conn)) = open.admit(max) else {
            if !quiet(&refused_logged) {
                tracing::warn!(
                    open = max,
                    "turning a connection away: every open connection has a request in flight"
                );
                refused_logged = Some(Instant::now());
            }
            continue;
        };
        let (app, open, stopped) = (app.clone(), open.clone(), stopped.clone());
        tokio::spawn(async move {
            connection(stream, app, conn, limits.header_timeout, stopped).await;
            open.remove(id);
        });
    }
    let _ = stop.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while open.len() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Serves one connection until it ends, is told to close, or the server
/// stops (then gracefully).
async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    conn: Arc<Connection>,
    header_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let in_flight = InFlight::begin(&conn);
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(Body::new)).await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _held = &in_flight;
                        frame
                    }))
                }))
            }
        })
    };
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    loop {
        tokio::select! {
            _ = served.as_mut() => return,
            () = conn.close.notified() => return,
            changed = stopped.changed() => {
                if changed.is_err() || *stopped.borrow() {
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, served.as_mut()).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_bound_the_longest_idle_connection_makes_room() {
        let open = Open::default();
        let (first, a) = open.admit(2).unwrap();
        let (_, b) = open.admit(2).unwrap();
        // `a` is idle longest; `b` has a request in flight.
        let _busy = InFlight::begin(&b);
        let (_, c) = open.admit(2).unwrap();
        assert_eq!(open.len(), 2);
        assert!(!lock(&open.conns).contains_key(&first));
        // `a` was told to close.
        let notified = a.close.notified();
        futures::pin_mut!(notified);
        assert!(futures::FutureExt::now_or_never(notified).is_some());
        // With every connection busy, a new one is turned away.
        let _busy_c = InFlight::begin(&c);
        assert!(open.admit(2).is_none());
        drop(_busy_c);
        assert!(open.admit(2).is_some());
    }
}
