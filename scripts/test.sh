#!/usr/bin/env bash
# The test command: installs the pinned toolchain and the wasm target,
# makes sure PostgreSQL runs with a test database (scripts/postgres.sh),
# and runs every test of the workspace, the PostgreSQL ones included.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install >&2
settings=$(scripts/postgres.sh)
eval "$settings"
export KEEL_TEST_POSTGRES KEEL_TEST_POSTGRES_TLS KEEL_TEST_POSTGRES_CA
cargo test --workspace "$@"
