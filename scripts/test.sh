#!/usr/bin/env bash
# The test command: installs the pinned toolchain and the wasm target,
# makes sure PostgreSQL runs with a test database (scripts/postgres.sh),
# runs every test of the workspace (the PostgreSQL ones included), the
# engine's end-to-end suite and the API tests once more on PostgreSQL, then
# checks a real `keel serve` from outside, on sled and on PostgreSQL: its
# OpenAPI document with schemathesis and its console in headless Chromium
# (scripts/e2e-server.sh, which installs Chromium, playwright-core and
# schemathesis if missing), and the TypeScript and Python clients' suites
# against a real server (scripts/clients.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install >&2
# The Python guests are built by tests/build.rs with the pinned componentize-py.
eval "$(scripts/python-sdk.sh)"
PYTHONDONTWRITEBYTECODE=1 "$KEEL_PYTHON" -m unittest discover -s sdk/python/tests -t sdk/python
settings=$(scripts/postgres.sh)
eval "$settings"
export KEEL_TEST_POSTGRES KEEL_TEST_POSTGRES_TLS KEEL_TEST_POSTGRES_CA KEEL_TEST_POSTGRES_RESTART
cargo test --workspace "$@"
# The engine's end-to-end suite and the API tests again, on PostgreSQL
# (the workspace's test targets, so nothing is built again).
KEEL_TEST_STORE=postgres cargo test --workspace --test engine --test api "$@"
scripts/e2e-server.sh
KEEL_E2E_STORE=postgres scripts/e2e-server.sh
scripts/clients.sh
