//! A downstream service that records how it is called, for flow-control
//! tests: `POST /call/TENANT?hold_ms=N` counts the calls of `TENANT` in
//! flight (and the most it saw at once), takes `N` ms to answer, and
//! records when each call arrived and in which order calls finished.
//! Made with [`Recorder::meeting`], it holds each tenant's first calls
//! until that many are in flight at once, so a test sees a limit reached
//! whatever the machine's speed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

#[derive(Default)]
struct Calls {
    in_flight: HashMap<String, usize>,
    most_at_once: HashMap<String, usize>,
    /// (tenant, ms since the recorder started) of each arrival.
    arrivals: Vec<(String, u64)>,
    /// Tenants in the order their calls finished.
    finished: Vec<String>,
    /// Calls of a tenant held until this many were in flight at once.
    meet: Option<usize>,
}

/// How long a call waits for the others of its meeting before it answers
/// anyway (the test then sees fewer at once than it asked for).
const MEETING_BOUND: Duration = Duration::from_secs(10);

/// A running recorder; stops when dropped.
pub struct Recorder {
    pub addr: SocketAddr,
    started: Instant,
    calls: Arc<Mutex<Calls>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Starts the recorder on an ephemeral port of 127.0.0.1.
    pub async fn start() -> std::io::Result<Recorder> {
        Self::with(Calls::default()).await
    }

    /// Starts a recorder that holds the calls of each tenant, before their
    /// own latency, until `at_once` of them have been in flight together
    /// (or ten seconds have passed); after that, calls of the tenant are
    /// answered as they come.
    pub async fn meeting(at_once: usize) -> std::io::Result<Recorder> {
        Self::with(Calls {
            meet: Some(at_once),
            ..Calls::default()
        })
        .await
    }

    async fn with(calls: Calls) -> std::io::Result<Recorder> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let calls = Arc::new(Mutex::new(calls));
        let met = Arc::new(tokio::sync::Notify::new());
        let started = Instant::now();
        let (c, m) = (calls.clone(), met);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (c, m) = (c.clone(), m.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        call(req, c.clone(), m.clone(), started)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Recorder {
            addr,
            started,
            calls,
            task,
        })
    }

    /// Milliseconds since the recorder started, the clock of
    /// [`Recorder::arrivals`].
    pub fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The URL calls go to (`URL/TENANT?hold_ms=N`).
    pub fn url(&self) -> String {
        format!("http://{}/call", self.addr)
    }

    /// The most calls of each tenant that were in flight at once.
    pub fn most_at_once(&self) -> HashMap<String, usize> {
        self.lock().most_at_once.clone()
    }

    /// Each call's tenant and arrival, in ms since the recorder started.
    pub fn arrivals(&self) -> Vec<(String, u64)> {
        self.lock().arrivals.clone()
    }

    /// The tenants of the calls in the order they finished.
    pub fn finished(&self) -> Vec<String> {
        self.lock().finished.clone()
    }

    /// How many calls of `tenant` finished.
    pub fn finished_of(&self, tenant: &str) -> usize {
        self.lock().finished.iter().filter(|t| *t == tenant).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().expect("calls")
    }
}

/// A call in flight; counted out of its tenant's calls when dropped.
struct InFlight {
    calls: Arc<Mutex<Calls>>,
    tenant: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut c = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = c.in_flight.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
    }
}

async fn call(
    req: Request<Incoming>,
    calls: Arc<Mutex<Calls>>,
    met: Arc<tokio::sync::Notify>,
    started: Instant,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let tenant = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let hold_ms: u64 = req
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("hold_ms="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    {
        let mut c = calls.lock().expect("calls");
        let now = started.elapsed().as_millis() as u64;
        c.arrivals.push((tenant.clone(), now));
        let n = c.in_flight.entry(tenant.clone()).or_default();
        *n += 1;
        let n = *n;
        let most = c.most_at_once.entry(tenant.clone()).or_default();
        *most = (*most).max(n);
    }
    met.notify_waiters();
    // A call whose client goes away (its connection closed) is no longer
    // in flight: the guard counts it out however the handler ends.
    let in_flight = InFlight {
        calls: calls.clone(),
        tenant: tenant.clone(),
    };
    meet(&calls, &met, &tenant).await;
    // The service's own latency: what makes overlapping calls visible.
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    drop(in_flight);
    calls.lock().expect("calls").finished.push(tenant);
    Ok(Response::builder()
        .status(200)
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("a valid response"))
}

/// Waits, if the recorder holds meetings, until `tenant` has had as many
/// calls in flight at once as it asks (or [`MEETING_BOUND`] has passed).
async fn meet(calls: &Mutex<Calls>, met: &tokio::sync::Notify, tenant: &str) {
    let bound = tokio::time::Instant::now() + MEETING_BOUND;
    loop {
        let woken = met.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        {
            let c = calls.lock().expect("calls");
            let most = c.most_at_once.get(tenant).copied().unwrap_or(0);
            if c.meet.is_none_or(|n| most >= n) {
                return;
            }
        }
        if tokio::time::timeout_at(bound, woken).await.is_err() {
            return;
        }
    }
}
