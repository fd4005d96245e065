#!/usr/bin/env bash
# keel's MCP endpoint (`/mcp`) against the official MCP SDKs: starts the
# chat model stand-in and a `keel serve` that requires a token, with the
# testbed and the chat agent deployed (the agent granted the model), then
# runs tests/mcp's suites against it: Python with `mcp` from PyPI (on the
# stateless 2026-07-28 protocol) and TypeScript with
# @modelcontextprotocol/sdk from npm (on 2025-11-25, with a session), both
# pinned. Fails if any check fails or cannot run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

echo "== installing the MCP SDKs (at $SECONDS s)" >&2
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q -r tests/mcp/requirements.txt
(cd tests/mcp && npm ci --no-audit --no-fund --ignore-scripts --silent)

# keel and the model stand-in as this checkout's build makes them.
cargo build -q -p keel-cli -p keel-model-api \
    --message-format=json-render-diagnostics >"${KEEL_BUILD_LISTINGS:-$work}/mcp.json"
bin=${CARGO_TARGET_DIR:-$here/target}/debug
export KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-${CARGO_TARGET_DIR:-$here/target}/tmp/keel-compiled}"
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# up NAME URL PID LOG: waits until URL answers (any HTTP status).
up() {
    local deadline=$((SECONDS + 30))
    until curl -s -o /dev/null "$2"; do
        if [ $SECONDS -ge $deadline ] || ! kill -0 "$3" 2>/dev/null; then
            echo "$1 did not come up:" >&2; cat "$4" >&2; exit 1
        fi
        sleep 0.2
    done
}

model_port=$(free_port)
export MODEL_URL="http://127.0.0.1:$model_port"
"$bin/keel-model-api" --listen "127.0.0.1:$model_port" --token-delay-ms 5 >"$work/model.log" 2>&1 &
pids+=($!)
up "the model stand-in" "$MODEL_URL/" "${pids[-1]}" "$work/model.log"

keel() { "$bin/keel" --db "$work/db" "$@"; }
read -r testbed chat <<<"$(cargo run -q -p keel-tests --bin guests -- testbed chat-agent | tr '\n' ' ')"
keel deploy "$testbed" >/dev/null
keel deploy "$chat" --allow-http "127.0.0.1:$model_port" >/dev/null

port=$(free_port)
export KEEL_URL="http://127.0.0.1:$port"
KEEL_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export KEEL_TOKEN
# Started as itself, not through the function: the PID kept is then the
# server's, and the trap's kill reaches it (a backgrounded function is a
# subshell, whose kill left the server running).
KEEL_API_TOKEN=$KEEL_TOKEN "$bin/keel" --db "$work/db" serve --http "127.0.0.1:$port" >"$work/server.log" 2>&1 &
pids+=($!)
up "keel serve" "$KEEL_URL/healthz" "${pids[-1]}" "$work/server.log"

status=0
echo "== MCP: the Python SDK (at $SECONDS s)" >&2
(cd "$work" && "$work/venv/bin/python" "$here/tests/mcp/test_mcp.py" -v) || status=$?
echo "== MCP: the TypeScript SDK (at $SECONDS s)" >&2
(cd tests/mcp && npm test --silent) || status=$?
if [ $status -ne 0 ]; then
    echo "== the server's log (at $SECONDS s)" >&2
    tail -50 "$work/server.log" >&2
fi
exit $status
