//! A small payment API on 127.0.0.1, for `keel demo` and the tests.
//!
//! `POST /charge` takes a charge under its `Idempotency-Key` and answers the
//! charge ID; a repeated key answers the recorded charge without charging
//! again. With `lose_first_confirmation`, the first request of every key is
//! charged but answered 500, as if the confirmation was lost; while set
//! refusing, every charge is answered 503. `POST /held` is recorded and
//! answered 200 only once the test lets it go ([`PaymentApi::release_held`]):
//! a step whose call is in flight for as long as the test needs. Any other
//! path records the request (a probe) and answers 200. Like many servers and proxies (and
//! Python's `http.server`), it does not take chunked request bodies: a
//! request without `Content-Length` whose body is chunked is recorded and
//! answered 411 Length Required. [`recorder::Recorder`] is a
//! downstream service that records how many calls reach it at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub mod recorder;

/// One request the API received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub path: String,
    pub idempotency_key: Option<String>,
    /// The `Keel-Attempt` header, if sent.
    pub attempt: Option<String>,
    /// The `Content-Length` header, if sent (else the body was chunked).
    pub content_length: Option<String>,
    /// The W3C `traceparent` header, if sent.
    pub traceparent: Option<String>,
    pub body: String,
}

#[derive(Default)]
struct Ledger {
    /// Charge ID by idempotency key: every charge actually taken.
    charges: HashMap<String, String>,
    requests: Vec<Received>,
    /// Every charge is refused with 503 (the service is down) until cleared.
    refusing: bool,
}

/// A running payment API; stops when dropped.
pub struct PaymentApi {
    pub addr: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
    received: Arc<Notify>,
    /// One permit per `/held` request the test let go.
    held: Arc<tokio::sync::Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PaymentApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PaymentApi {
    /// Starts the API on an ephemeral port of 127.0.0.1.
    pub async fn start(lose_first_confirmation: bool) -> std::io::Result<PaymentApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let received = Arc::new(Notify::new());
        let held = Arc::new(tokio::sync::Semaphore::new(0));
        let (l, r, h) = (ledger.clone(), received.clone(), held.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (l, r, h) = (l.clone(), r.clone(), h.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        handle(
                            req,
                            l.clone(),
                            r.clone(),
                            h.clone(),
                            lose_first_confirmation,
                        )
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(PaymentApi {
            addr,
            ledger,
            received,
            held,
            task,
        })
    }

    /// The URL of `path` on this API.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Charges actually taken, as (idempotency key, charge ID), sorted.
    pub fn charges(&self) -> Vec<(String, String)> {
        let ledger = self.ledger.lock().expect("ledger");
        let mut charges: Vec<_> = ledger
            .charges
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        charges.sort();
        charges
    }

    /// Refuses every charge with 503 (as a service that is down), or
    /// accepts them again.
    pub fn set_refusing(&self, refusing: bool) {
        self.ledger.lock().expect("ledger").refusing = refusing;
    }

    /// Lets `n` requests to `/held` be answered (those waiting first).
    pub fn release_held(&self, n: usize) {
        self.held.add_permits(n);
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Received> {
        self.ledger.lock().expect("ledger").requests.clone()
    }

    /// Waits until a received request satisfies `pred`, and returns it.
    pub async fn wait_for(&self, pred: impl Fn(&Received) -> bool) -> Received {
        loop {
            let notified = self.received.notified();
            if let Some(r) = self.requests().into_iter().find(|r| pred(r)) {
                return r;
            }
            notified.await;
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    ledger: Arc<Mutex<Ledger>>,
    received: Arc<Notify>,
    held: Arc<tokio::sync::Semaphore>,
    lose_first: bool,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let key = header("idempotency-key");
    let attempt = header("keel-attempt");
    let content_length = header("content-length");
    let traceparent = header("traceparent");
    let chunked = header("transfer-encoding").is_some_and(|t| t.contains("chunked"));
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await?.to_bytes();
    let (status, answer) = {
        let mut ledger = ledger.lock().expect("ledger");
        ledger.requests.push(Received {
            path: path.clone(),
            idempotency_key: key.clone(),
            attempt,
            content_length,
            traceparent,
            body: String::from_utf8_lossy(&body).to_string(),
        });
        match chunked {
            true => (
                StatusCode::LENGTH_REQUIRED,
                r#"{"error":"chunked request bodies are not accepted: send Content-Length"}"#
                    .into(),
            ),
            false => charge(&mut ledger, &path, key, lose_first),
        }
    };
    received.notify_waiters();
    if path == "/held"
        && let Ok(permit) = held.acquire().await
    {
        permit.forget();
    }
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(answer)))
        .expect("a valid response"))
}

fn charge(
    ledger: &mut Ledger,
    path: &str,
    key: Option<String>,
    lose_first: bool,
) -> (StatusCode, String) {
    if path != "/charge" {
        return (StatusCode::OK, "{}".into());
    }
    if ledger.refusing {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"the payment service is down"}"#.into(),
        );
    }
    let Some(key) = key else {
        return (
            StatusCode::BAD_REQUEST,
            r#"{"error":"Idempotency-Key required"}"#.into(),
        );
    };
    if let Some(id) = ledger.charges.get(&key) {
        return (
            StatusCode::OK,
            format!(r#"{{"charge_id":"{id}","replayed":true}}"#),
        );
    }
    let id = format!("ch_{}", ledger.charges.len() + 1);
    ledger.charges.insert(key, id.clone());
    if lose_first {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error":"confirmation lost"}"#.into(),
        )
    } else {
        (StatusCode::OK, format!(r#"{{"charge_id":"{id}"}}"#))
    }
}
