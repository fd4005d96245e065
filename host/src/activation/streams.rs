//! A workflow's streams and replies: writes to the run's named streams and
//! replies to the payloads its hooks received, each a journaled command
//! (the store keeps a stream's chunks with the entries that write them, so
//! replay writes nothing new).

use std::collections::HashSet;

use keel_core::journal::Fact;
use keel_core::stream::check_stream_name;

use super::Activation;
use crate::effects::Effect;

/// What the workflow's streams and replies have done so far in this
/// activation (rebuilt by replay, which issues the same commands).
#[derive(Default)]
pub(super) struct Written {
    /// Streams the workflow closed.
    closed: HashSet<String>,
    /// `hook-next` commands whose payload the workflow replied to.
    replied: HashSet<u32>,
}

impl Activation {
    /// Whether the command about to be issued is new (not in the journal).
    fn is_new_command(&self) -> bool {
        self.next_command >= self.journal.command_count()
    }

    /// Writes `value` (JSON) to the run's stream `stream`, journaled.
    /// Refused, without a command, on a bad name, a closed stream or a
    /// value over the payload bound.
    pub(super) fn stream_write(
        &mut self,
        stream: String,
        value: String,
    ) -> wasmtime::Result<Result<(), String>> {
        if let Err(e) = self.writable(&stream, Some(&value)) {
            return Ok(Err(e));
        }
        self.command(
            |f| matches!(f, Fact::StreamWritten { stream: s, value: v, .. } if *s == stream && *v == value).then_some(()),
            |command| Fact::StreamWritten {
                command,
                stream: stream.clone(),
                value: value.clone(),
            },
        )?;
        Ok(Ok(()))
    }

    /// Closes the run's stream `stream`, journaled.
    pub(super) fn stream_close(&mut self, stream: String) -> wasmtime::Result<Result<(), String>> {
        if let Err(e) = self.writable(&stream, None) {
            return Ok(Err(e));
        }
        self.command(
            |f| matches!(f, Fact::StreamClosed { stream: s, .. } if *s == stream).then_some(()),
            |command| Fact::StreamClosed {
                command,
                stream: stream.clone(),
            },
        )?;
        self.written.closed.insert(stream);
        Ok(Ok(()))
    }

    /// Why a write of `value` (a close if `None`) to `stream` is refused.
    fn writable(&self, stream: &str, value: Option<&str>) -> Result<(), String> {
        check_stream_name(stream)?;
        if self.written.closed.contains(stream) {
            return Err(format!("stream `{stream}` is closed"));
        }
        if let Some(value) = value
            && self.is_new_command()
        {
            let limit = self.outside.limits().max_payload_bytes;
            if value.len() > limit {
                return Err(format!(
                    "a chunk of {} bytes is over max_payload_bytes ({limit} bytes)",
                    value.len()
                ));
            }
        }
        Ok(())
    }

    /// Replies `reply` (JSON) to the payload the `hook-next` command
    /// `request` received, journaled and made durable at once, so that the
    /// resume waiting for it is answered. Refused, without a command, when
    /// that command received no payload or was replied to.
    pub(super) async fn hook_reply(
        &mut self,
        request: u32,
        reply: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let Some(asked) = self.journal.command(request) else {
            return Ok(Err(format!("command {request} is not a hook's request")));
        };
        let Fact::HookNext { token, index, .. } = asked.fact else {
            return Ok(Err(format!("command {request} is not a hook's request")));
        };
        if !self.journal.is_completed(request) {
            return Ok(Err(format!(
                "payload {index} of hook `{token}` has not been received"
            )));
        }
        if self.written.replied.contains(&request) {
            return Ok(Err(format!(
                "payload {index} of hook `{token}` was replied to already"
            )));
        }
        if self.is_new_command() {
            let limit = self.outside.limits().max_payload_bytes;
            if reply.len() > limit {
                return Ok(Err(format!(
                    "a reply of {} bytes is over max_payload_bytes ({limit} bytes)",
                    reply.len()
                )));
            }
        }
        let (_, replayed) = self.command(
            |f| matches!(f, Fact::HookReplied { request: r, reply: v, .. } if *r == request && *v == reply).then_some(()),
            |command| Fact::HookReplied {
                command,
                request,
                token: token.clone(),
                index,
                reply: reply.clone(),
            },
        )?;
        self.written.replied.insert(request);
        if replayed.is_none() && !self.offline {
            self.journal.gate(Effect::HookReply).await?;
        }
        Ok(Ok(()))
    }
}
