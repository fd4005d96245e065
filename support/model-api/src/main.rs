//! `keel-model-api`: the chat model stand-in of the `chat-agent` example,
//! served until interrupted.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use keel_model_api::{ModelApi, Options};

/// A chat model stand-in that streams its answers token by token.
#[derive(Parser)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8099")]
    listen: SocketAddr,
    /// Milliseconds before each token, as a model takes to generate it.
    #[arg(long, default_value_t = 80)]
    token_delay_ms: u64,
    /// Cut off the first answer under each Idempotency-Key halfway.
    #[arg(long)]
    cut_first_answer: bool,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let options = Options {
        token_delay: Duration::from_millis(args.token_delay_ms),
        cut_first_answer: args.cut_first_answer,
    };
    let api = ModelApi::bind(args.listen, options).await?;
    println!("model stand-in on {}", api.url("/v1/chat"));
    tokio::signal::ctrl_c().await?;
    Ok(())
}
