//! Example guest: `chat` is a small chat agent, one run per conversation.
//!
//! - A question is a request on hook `chat:CONVERSATION`; the run replies
//!   with the model's answer (`keel hooks resume ... --wait-reply`, or
//!   `wait_reply_ms` over HTTP, gets it in the same request).
//! - The answer comes from a model over HTTP (the `keel-model-api`
//!   stand-in), in step `complete`, which writes each token to stream
//!   `tokens` as the model sends it: a reader sees the answer grow. If the
//!   model drops the connection midway, the step is retried, and readers get
//!   a restart marker telling them to drop the cut-off attempt's tokens.
//! - When the model asks for a tool (a refund), the run waits for a person
//!   on hook `approve:CONVERSATION` (request/reply again: the approver is
//!   answered with the outcome), and only then runs the refund, a step
//!   whose step ID is the refund's idempotency key.
//! - The question `bye` ends the conversation; the run returns it.
#![cfg(target_arch = "wasm32")]

use http_body_util::BodyExt;
use keel_sdk::http::{Body, Client, Request};
use keel_sdk::{Error, StepError, create_hook, step, workflow};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The run's input.
#[derive(Deserialize, JsonSchema)]
struct Chat {
    /// Names the hooks: `chat:CONVERSATION` and `approve:CONVERSATION`.
    conversation: String,
    /// The model API's base URL, such as `http://127.0.0.1:8099`.
    model_url: String,
}

/// One message of the conversation, as chat APIs take them.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Message {
    /// `user`, `assistant` or `tool`.
    role: String,
    content: String,
}

impl Message {
    fn new(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A tool the model asks to run.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct ToolCall {
    name: String,
    arguments: serde_json::Value,
}

/// The model's whole answer.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Answer {
    text: String,
    tool_call: Option<ToolCall>,
}

/// A chunk of stream `tokens`: one token of the answer to question `turn`.
#[derive(Serialize)]
struct Token {
    turn: u32,
    token: String,
}

/// The reply to a question.
#[derive(Serialize)]
struct ChatReply {
    answer: String,
    /// The tool waiting for a person's approval on `approve:CONVERSATION`.
    awaiting_approval: Option<ToolCall>,
}

/// A person's decision on a tool call.
#[derive(Deserialize, JsonSchema)]
struct Approval {
    approved: bool,
}

/// One line of the model API's streamed answer.
#[derive(Deserialize)]
#[serde(untagged)]
enum Line {
    Token { token: String },
    ToolCall { tool_call: ToolCall },
    Done { done: bool },
}

/// Holds the conversation: answers each question, and runs a tool only
/// once a person approves it. Returns the conversation.
#[workflow]
async fn chat(chat: Chat) -> Result<Vec<Message>, Error> {
    let mut questions = create_hook::<String>(format!("chat:{}", chat.conversation))?.keep();
    let mut approvals = create_hook::<Approval>(format!("approve:{}", chat.conversation))?.keep();
    let tokens = keel_sdk::stream::<Token>("tokens");
    let mut messages = Vec::new();
    for turn in 1.. {
        let (question, reply) = questions.next_request().await?;
        if question.trim() == "bye" {
            reply.send(&ChatReply {
                answer: "Goodbye.".into(),
                awaiting_approval: None,
            })?;
            break;
        }
        messages.push(Message::new("user", question));
        let answer = complete(chat.model_url.clone(), messages.clone(), turn).await?;
        messages.push(Message::new("assistant", answer.text.clone()));
        reply.send(&ChatReply {
            answer: answer.text,
            awaiting_approval: answer.tool_call.clone(),
        })?;
        if let Some(call) = answer.tool_call {
            let (approval, answered) = approvals.next_request().await?;
            let outcome = if !approval.approved {
                "declined".to_string()
            } else if call.name == "refund" {
                let id = refund(chat.model_url.clone(), call.arguments).await?;
                format!("refunded as {id}")
            } else {
                format!("no tool is named `{}`", call.name)
            };
            messages.push(Message::new("tool", outcome.clone()));
            answered.send(&outcome)?;
        }
    }
    tokens.close()?;
    Ok(messages)
}

/// Asks the model for the next answer, writing each token to stream
/// `tokens` as it arrives. An answer cut off midway is retried.
#[step(max_retries = 4, initial_backoff = "200ms")]
async fn complete(
    model_url: String,
    messages: Vec<Message>,
    turn: u32,
) -> Result<Answer, StepError> {
    let meta = keel_sdk::step_metadata();
    let body = serde_json::json!({ "messages": messages });
    let request = Request::post(format!("{model_url}/v1/chat"))
        .header("Idempotency-Key", &meta.step_id)
        .header("Content-Type", "application/json")
        .body(Body::from(body.to_string()))
        .map_err(StepError::fatal)?;
    let response = Client::new()
        .send(request)
        .await
        .map_err(StepError::retryable)?;
    let status = response.status();
    if !status.is_success() {
        let message = format!("the model answered {status}");
        return Err(if status.is_server_error() {
            StepError::retryable(message)
        } else {
            StepError::fatal(message)
        });
    }
    let tokens = keel_sdk::stream::<Token>("tokens");
    let mut answer = Answer {
        text: String::new(),
        tool_call: None,
    };
    let mut body = response.into_body().into_boxed_body();
    let mut pending = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| StepError::retryable(format!("the answer was cut off: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line: Line = serde_json::from_slice(&line).map_err(|e| {
                StepError::fatal(format!("the model sent a line keel cannot read: {e}"))
            })?;
            match line {
                Line::Token { token } => {
                    answer.text.push_str(&token);
                    tokens.write(&Token { turn, token })?;
                }
                Line::ToolCall { tool_call } => answer.tool_call = Some(tool_call),
                Line::Done { done: true } => return Ok(answer),
                Line::Done { done: false } => {}
            }
        }
    }
    Err(StepError::retryable(
        "the answer ended before the model said it was done",
    ))
}

/// Refunds an order through the model API's tool endpoint; the step ID is
/// the refund's idempotency key, so a retried refund is made once.
#[step(max_retries = 5, initial_backoff = "200ms")]
async fn refund(model_url: String, arguments: serde_json::Value) -> Result<String, StepError> {
    let meta = keel_sdk::step_metadata();
    let request = Request::post(format!("{model_url}/v1/tools/refund"))
        .header("Idempotency-Key", &meta.step_id)
        .header("Content-Type", "application/json")
        .body(Body::from(arguments.to_string()))
        .map_err(StepError::fatal)?;
    let mut response = Client::new()
        .send(request)
        .await
        .map_err(StepError::retryable)?;
    let status = response.status();
    if status.is_server_error() {
        return Err(StepError::retryable(format!(
            "the refund answered {status}"
        )));
    }
    if !status.is_success() {
        return Err(StepError::fatal(format!(
            "the refund was refused ({status})"
        )));
    }
    #[derive(Deserialize)]
    struct Refunded {
        refund_id: String,
    }
    let refunded: Refunded = response
        .body_mut()
        .json()
        .await
        .map_err(StepError::retryable)?;
    Ok(refunded.refund_id)
}

keel_sdk::component!(workflows = [chat], steps = [complete, refund]);
