#!/usr/bin/env bash
# The test command: installs the pinned toolchain and the wasm target,
# makes sure PostgreSQL runs with a test database (scripts/postgres.sh),
# runs every test of the workspace with cargo-nextest (the PostgreSQL ones
# included) and the doc tests, the engine's end-to-end suite and the API
# tests once more on PostgreSQL, then
# checks a real `keel serve` from outside, on sled and on PostgreSQL: its
# OpenAPI document with schemathesis and its console in headless Chromium
# (scripts/e2e-server.sh, which installs Chromium, playwright-core and
# schemathesis if missing), the TypeScript and Python clients' suites
# against a real server (scripts/clients.sh), and its MCP endpoint with the
# official MCP SDKs (scripts/mcp.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Incremental artifacts are of no use to these one-shot builds and took
# 2.1 GB of a fresh clone's target directory.
export CARGO_INCREMENTAL=0
# timed NAME COMMAND...: runs COMMAND, then says on stderr how long it took.
timed() {
    local name=$1 start=$SECONDS status=0
    shift
    "$@" || status=$?
    echo "== stage $name: $((SECONDS - start)) s" >&2
    return $status
}
rustup toolchain install >&2
# The Python guests are built by tests/build.rs with the pinned componentize-py.
eval "$(scripts/python-sdk.sh)"
PYTHONDONTWRITEBYTECODE=1 timed python-sdk "$KEEL_PYTHON" -m unittest discover -s sdk/python/tests -t sdk/python
settings=$(scripts/postgres.sh)
eval "$settings"
export KEEL_TEST_POSTGRES KEEL_TEST_POSTGRES_TLS KEEL_TEST_POSTGRES_CA \
    KEEL_TEST_POSTGRES_RESTART_URL KEEL_TEST_POSTGRES_RESTART
# cargo-nextest runs each test in a process of its own and writes a JUnit
# report per pass; the slowest 20 tests of all passes are printed at the end.
cargo nextest --version >/dev/null 2>&1 || cargo install cargo-nextest --locked
reports=$(mktemp -d)
trap 'python3 scripts/slowest.py 20 "$reports"/*.xml 2>/dev/null; rm -rf "$reports"' EXIT
pass() { # pass NAME NEXTEST-ARGS...: one pass, its report kept as NAME
    local name=$1 status=0
    shift
    cargo nextest run --workspace --no-tests=fail "$@" || status=$?
    # nextest keeps its reports under the workspace's target/, whatever
    # CARGO_TARGET_DIR says.
    cp target/nextest/default/junit.xml "$reports/$name.xml" 2>/dev/null || true
    return $status
}
# The test build, as nextest makes it, listed for .ci/run's prune of the
# target directory when it asks (KEEL_BUILD_LISTINGS).
listing=/dev/null
[ -z "${KEEL_BUILD_LISTINGS:-}" ] || listing=$KEEL_BUILD_LISTINGS/test.json
timed build cargo test --workspace --no-run --message-format=json-render-diagnostics "$@" >"$listing"
timed "sled pass" pass sled "$@"
timed doc cargo test --workspace --doc "$@"
# The rest runs in lanes beside each other, each against a server (or a
# database) of its own, since the machine's cores are idle while a test
# waits on a server. Their tools are installed first, once; their output
# follows the pass's: the checks from outside on sled (schemathesis, the
# console, webhooks, metrics) then MCP, the clients, the checks from
# outside on PostgreSQL, and the pass on PostgreSQL.
scripts/e2e-tools.sh
lanes=$(mktemp -d)
(
    timed "outside, sled" scripts/e2e-server.sh
    timed mcp scripts/mcp.sh
) >"$lanes/sled" 2>&1 &
sled_lane=$!
timed clients scripts/clients.sh >"$lanes/clients" 2>&1 &
clients_lane=$!
KEEL_E2E_STORE=postgres timed "outside, postgres" scripts/e2e-server.sh >"$lanes/postgres" 2>&1 &
postgres_lane=$!
# The engine's end-to-end suite and the API tests again, on PostgreSQL
# (the workspace's test targets, so nothing is built again), with strict
# durability for workflows that declare none: the tests written for
# strict keep running under it, and PostgreSQL sees a write per step.
# The 300,000-event entity runs on sled only (three minutes of a debug
# build); what it relies on of a store, a continuation's handover, is a
# conformance case on both. Its tests wait on the database: three at a
# time rather than one per core.
status=0
KEEL_TEST_STORE=postgres KEEL_TEST_DURABILITY=strict \
    timed postgres pass postgres --test engine --test api -E 'not test(300_000)' \
    --test-threads 3 "$@" || status=$?
wait $sled_lane || status=$?
wait $clients_lane || status=$?
wait $postgres_lane || status=$?
echo "== the checks from outside on sled, then MCP (e2e-server.sh, mcp.sh)" >&2
cat "$lanes/sled" >&2
echo "== the clients (clients.sh)" >&2
cat "$lanes/clients" >&2
echo "== the checks from outside on PostgreSQL (KEEL_E2E_STORE=postgres e2e-server.sh)" >&2
cat "$lanes/postgres" >&2
rm -rf "$lanes"
exit $status
