//! A chat model stand-in on 127.0.0.1, for the `chat-agent` example guest
//! and its tests: it answers as a chat model's streaming API does, token by
//! token, and asks for a tool when the conversation calls for one.
//!
//! - `POST /v1/chat` takes `{"messages": [{"role", "content"}, ...]}` and
//!   answers `application/x-ndjson`: a line `{"token": "..."}` per token,
//!   then `{"tool_call": {"name": "refund", "arguments": {"order": "A-17"}}}`
//!   if the last user message asks for a refund of an order, then
//!   `{"done": true}`. The answer depends only on the messages.
//! - With [`Options::cut_first_answer`], the first answer under each
//!   `Idempotency-Key` is cut off halfway (the connection drops, as a
//!   model's does when it is overloaded); the next is whole.
//! - [`ModelApi::hold`] stops every answer after its first tokens until
//!   [`ModelApi::release`], so a test can look at a half-answered stream.
//! - `POST /v1/tools/refund` refunds `{"order"}` once per `Idempotency-Key`
//!   and answers `{"refund_id"}`; a repeated key answers the same refund.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How the stand-in behaves.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The pause before each token, as a model's generation takes.
    pub token_delay: Duration,
    /// Cut off the first answer under each `Idempotency-Key` halfway.
    pub cut_first_answer: bool,
}

/// One message of a conversation, as chat APIs take them.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Message {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
}

/// The body of `POST /v1/chat`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
}

/// A tool the model asks the caller to run.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: serde_json::Value,
}

/// What the stand-in has seen and done.
#[derive(Default)]
struct Ledger {
    /// Chat requests received, by `Idempotency-Key` (or `""`).
    answers_begun: HashMap<String, u32>,
    /// Refund ID by idempotency key: every refund actually made.
    refunds: HashMap<String, String>,
}

#[derive(Clone)]
struct Shared {
    options: Options,
    ledger: Arc<Mutex<Ledger>>,
    /// While true, answers stop after their first [`HELD_AFTER`] tokens.
    held: watch::Sender<bool>,
}

/// Tokens an answer streams before [`ModelApi::hold`] stops it.
pub const HELD_AFTER: usize = 3;

/// A running model stand-in; stops when dropped.
pub struct ModelApi {
    pub addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelApi {
    /// Starts the stand-in on an ephemeral port of 127.0.0.1.
    pub async fn start(options: Options) -> std::io::Result<ModelApi> {
        Self::bind("127.0.0.1:0".parse().expect("an address"), options).await
    }

    /// Starts the stand-in on `addr`.
    pub async fn bind(addr: SocketAddr, options: Options) -> std::io::Result<ModelApi> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Shared {
            options,
            ledger: Arc::default(),
            held: watch::channel(false).0,
        };
        let app = axum::Router::new()
            .route("/v1/chat", post(chat))
            .route("/v1/tools/refund", post(refund))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ModelApi { addr, shared, task })
    }

    /// The URL of `path` on this stand-in.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops every answer after its first [`HELD_AFTER`] tokens.
    pub fn hold(&self) {
        self.shared.held.send_replace(true);
    }

    /// Lets held answers go on.
    pub fn release(&self) {
        self.shared.held.send_replace(false);
    }

    /// Refunds actually made, as (idempotency key, refund ID), sorted.
    pub fn refunds(&self) -> Vec<(String, String)> {
        let ledger = self.shared.ledger.lock().expect("ledger");
        let mut refunds: Vec<_> = ledger
            .refunds
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        refunds.sort();
        refunds
    }

    /// How many answers were begun, over every key.
    pub fn answers_begun(&self) -> u32 {
        let ledger = self.shared.ledger.lock().expect("ledger");
        ledger.answers_begun.values().sum()
    }
}

/// The model's answer to `messages`: its tokens and the tool it asks for.
pub fn answer(messages: &[Message]) -> (Vec<String>, Option<ToolCall>) {
    let question = messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| m.content.as_str())
        .unwrap_or("");
    let refund_of = question
        .to_lowercase()
        .contains("refund")
        .then(|| {
            question
                .split(|c: char| c.is_whitespace() || c == '?' || c == '.' || c == ',')
                .find(|w| w.contains('-') && w.chars().any(|c| c.is_ascii_digit()))
        })
        .flatten();
    let (text, tool) = match refund_of {
        Some(order) => (
            format!("I can refund order {order}. A person must approve it first."),
            Some(ToolCall {
                name: "refund".into(),
                arguments: serde_json::json!({ "order": order }),
            }),
        ),
        None => (
            format!(
                "You said: {question}. I am a stand-in for a model, so I say it back to you, word by word."
            ),
            None,
        ),
    };
    (tokens(&text), tool)
}

/// `text` as tokens: each word with the space before it.
fn tokens(text: &str) -> Vec<String> {
    text.split(' ')
        .enumerate()
        .map(|(i, w)| {
            if i == 0 {
                w.to_string()
            } else {
                format!(" {w}")
            }
        })
        .collect()
}

fn key(headers: &HeaderMap) -> String {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

async fn chat(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<ChatRequest>,
) -> Response {
    let key = key(&headers);
    let begun = {
        let mut ledger = shared.ledger.lock().expect("ledger");
        let n = ledger.answers_begun.entry(key.clone()).or_default();
        *n += 1;
        *n
    };
    let (tokens, tool) = answer(&request.messages);
    let cut_at = (shared.options.cut_first_answer && !key.is_empty() && begun == 1)
        .then_some(tokens.len() / 2);
    let mut lines: Vec<serde_json::Value> = tokens
        .into_iter()
        .map(|t| serde_json::json!({ "token": t }))
        .collect();
    if let Some(tool) = tool {
        lines.push(serde_json::json!({ "tool_call": tool }));
    }
    lines.push(serde_json::json!({ "done": true }));
    let delay = shared.options.token_delay;
    let held = shared.held.subscribe();
    let body = futures::stream::unfold(
        (lines.into_iter().enumerate(), held),
        move |(mut lines, mut held)| async move {
            let (i, line) = lines.next()?;
            if Some(i) == cut_at {
                let cut = std::io::Error::other("the model went away mid-answer");
                return Some((Err(cut), (lines, held)));
            }
            if i == HELD_AFTER {
                let _ = held.wait_for(|h| !*h).await;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Some((Ok(Bytes::from(format!("{line}\n"))), (lines, held)))
        },
    );
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

#[derive(Deserialize)]
struct RefundRequest {
    order: String,
}

async fn refund(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Json(request): Json<RefundRequest>,
) -> Response {
    let key = key(&headers);
    if key.is_empty() {
        let error = serde_json::json!({ "error": "Idempotency-Key required" });
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let mut ledger = shared.ledger.lock().expect("ledger");
    let next = ledger.refunds.len() + 1;
    let id = ledger
        .refunds
        .entry(key)
        .or_insert_with(|| format!("rf_{next}_{}", request.order))
        .clone();
    Json(serde_json::json!({ "refund_id": id })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(content: &str) -> Message {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }

    #[test]
    fn a_refund_question_asks_for_the_refund_tool_with_the_order() {
        let (tokens, tool) = answer(&[user("hi"), user("Please refund order A-17?")]);
        assert_eq!(
            tool,
            Some(ToolCall {
                name: "refund".into(),
                arguments: serde_json::json!({"order": "A-17"}),
            })
        );
        assert_eq!(
            tokens.concat(),
            "I can refund order A-17. A person must approve it first."
        );
    }

    #[test]
    fn other_questions_are_said_back_word_by_word_without_a_tool() {
        let (tokens, tool) = answer(&[user("hello there")]);
        assert_eq!(tool, None);
        assert_eq!(tokens[..3], ["You", " said:", " hello"]);
        assert!(tokens.concat().starts_with("You said: hello there."));
    }
}
