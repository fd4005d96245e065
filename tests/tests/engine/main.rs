//! The engine's end-to-end suite, one test binary: real guests through the
//! real host, on sled, or on PostgreSQL with `KEEL_TEST_STORE=postgres`.
//! Each module is one concern; `common` opens engines on either store.

mod common;

mod attributes;
mod bad_input;
mod bulk;
mod capacity;
mod composed;
mod continuation;
mod deployments;
mod durability;
mod flow;
mod hooks;
mod idempotency;
mod lifecycle;
mod pauses;
mod python;
mod queries;
mod replay;
mod restarts;
mod retention;
mod schedules;
mod simulation;
mod streams;
mod upgrades;
