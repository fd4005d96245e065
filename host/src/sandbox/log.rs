//! A guest's stdout and stderr, sent to `tracing` tagged with the run ID,
//! with the tail of stderr kept to explain a trap.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// A guest's stdout and stderr, sent to `tracing` tagged with the run ID.
/// The tail of stderr is kept to explain a trap.
#[derive(Clone)]
pub struct GuestLog {
    run_id: Arc<str>,
    tail: Arc<Mutex<String>>,
}

const TAIL_BYTES: usize = 2048;

impl GuestLog {
    /// The log of a guest of run `run_id`.
    pub fn new(run_id: &str) -> Self {
        GuestLog {
            run_id: run_id.into(),
            tail: Arc::default(),
        }
    }

    pub(super) fn stream(&self, name: &'static str) -> GuestStream {
        GuestStream {
            log: self.clone(),
            name,
        }
    }

    /// The last lines the guest wrote to stderr.
    pub fn tail(&self) -> String {
        self.tail.lock().expect("log tail").trim().to_string()
    }
}

pub(super) struct GuestStream {
    log: GuestLog,
    name: &'static str,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(GuestWriter {
            log: self.log.clone(),
            name: self.name,
        })
    }
}

struct GuestWriter {
    log: GuestLog,
    name: &'static str,
}

impl tokio::io::AsyncWrite for GuestWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let text = String::from_utf8_lossy(buf);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::info!(run_id = %self.log.run_id, stream = self.name, "guest: {line}");
        }
        if self.name == "stderr" {
            let mut tail = self.log.tail.lock().expect("log tail");
            tail.push_str(&text);
            if tail.len() > TAIL_BYTES {
                let cut = tail.len() - TAIL_BYTES;
                let cut = (cut..tail.len())
                    .find(|i| tail.is_char_boundary(*i))
                    .unwrap_or(0);
                tail.drain(..cut);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn the_stderr_tail_is_bounded_and_cut_on_characters() {
        let log = GuestLog::new("r");
        let mut err = Box::into_pin(log.stream("stderr").async_stream());
        let mut out = Box::into_pin(log.stream("stdout").async_stream());
        out.write_all(b"not kept").await.unwrap();
        for _ in 0..1000 {
            err.write_all("é panicked at x\n".as_bytes()).await.unwrap();
        }
        let tail = log.tail();
        assert!(
            tail.len() <= TAIL_BYTES && tail.ends_with("panicked at x"),
            "{tail}"
        );
        assert!(!tail.contains("not kept"));
    }
}
