//! The commands that are calls of keel's API, one module per resource:
//! each turns its arguments into the API's requests, makes them through
//! one [`Client`](crate::remote::Client) (a server's, a worker's socket or
//! this process's own router, as [`connect`](crate::connect::connect)
//! chooses) and prints the answers.

mod deployments;
mod hooks;
mod operations;
mod runs;
mod schedules;

pub use deployments::{deploy, deployments, inspect};
pub use hooks::{events, hooks, tokens, webhooks};
pub use operations::{jobs, limits, store, workers};
pub use runs::{export, run, runs, start};
pub use schedules::schedules;
