#!/usr/bin/env bash
# The fast tier, for a developer between changes: the unit tests of every
# crate, the store conformance suite on sled and the engine's end-to-end
# suite on sled (tests named postgres:: skipped). No PostgreSQL, browser or clients (scripts/test.sh runs
# those too). Extra arguments go to every cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
# The Python guests are built by tests/build.rs with the pinned componentize-py.
eval "$(scripts/python-sdk.sh)"
cargo test --workspace --lib --bins "$@" -- --skip postgres::
cargo test -p keel-store --test conformance "$@" -- --skip postgres::
cargo test -p keel-tests --test engine "$@"
