//! Request bodies with a size limit that a client is sure to hear about.
//!
//! A server that answers 413 and closes the connection while the client is
//! still sending makes the client's kernel see a reset, which can destroy
//! the answer before the client reads it: the client reports a broken
//! connection instead of "too large". So, like a web server's lingering
//! close, a body over its limit is read on and discarded (up to
//! [`DRAIN_BYTES`] more, for at most [`DRAIN_TIME`]) before the refusal is
//! sent; a body beyond that is cut off.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use futures::StreamExt;

use crate::error::ApiError;

/// How much of an oversized body is read and discarded so that the client
/// hears the refusal.
pub const DRAIN_BYTES: usize = 64 << 20;
/// How long an oversized body is read on before the connection is cut.
pub const DRAIN_TIME: Duration = Duration::from_secs(10);

/// A request body of at most `MAX` bytes.
#[derive(Debug)]
pub struct Body<const MAX: usize>(pub Bytes);

impl<S: Send + Sync, const MAX: usize> FromRequest<S> for Body<MAX> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, ApiError> {
        let mut stream = request.into_body().into_data_stream();
        let mut body = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(unreadable)?;
            if body.len() + chunk.len() > MAX {
                drain(stream).await;
                return Err(too_large(MAX));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Body(body.into()))
    }
}

/// Reads and discards the rest of a body, within [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`], so that the client hears a refusal sent before its body
/// was read.
pub(crate) async fn drain(mut stream: axum::body::BodyDataStream) {
    let rest = async {
        let mut discarded = 0;
        while let Some(Ok(chunk)) = stream.next().await {
            discarded += chunk.len();
            if discarded > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, rest).await;
}

fn too_large(max: usize) -> ApiError {
    ApiError::new(
        keel_core::ErrorKind::PayloadTooLarge,
        format!("the request body is larger than {max} bytes"),
    )
}

fn unreadable(e: axum::Error) -> ApiError {
    ApiError::invalid(format!("the request body could not be read: {e}"))
}
