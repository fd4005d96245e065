#!/bin/bash
# Checks a real `keel serve` from outside, as clients see it: schemathesis
# fuzzes every endpoint against /openapi.json (responses must match the
# document, no 5xx), and the console test drives the web console in
# headless Chromium. Needs KEEL (the keel binary) and GUESTS (the folder
# holding testbed.wasm and order_hooks.wasm). Fails if any check fails or
# cannot run.
set -euo pipefail
: "${KEEL:?set KEEL to the keel binary}" "${GUESTS:?set GUESTS to the folder of the built guests}"
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/e2e-tools.sh"
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
for guest in testbed order_hooks; do
    "$KEEL" --db "$work/db" deploy "$GUESTS/$guest.wasm" >/dev/null
done
"$KEEL" --db "$work/db" serve --http "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
deadline=$((SECONDS + 30))
until curl -fsS "$url/healthz" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 $server 2>/dev/null; then
        echo "keel serve did not come up:" >&2; cat "$work/server.log" >&2; exit 1
    fi
    sleep 0.2
done

echo "== console in headless Chromium" >&2
KEEL_URL="$url" SCREENSHOT="${SCREENSHOT:-$work/console.png}" node "$here/tests/browser/console.test.mjs"

echo "== schemathesis against /openapi.json" >&2
# Every check, but as tests/schemathesis.toml says. Deploying is left out:
# random bytes are never a component, so its positive cases cannot pass;
# tests/api.rs covers it.
schemathesis --config-file "$here/tests/schemathesis.toml" run "$url/openapi.json" \
    --exclude-operation-id deploy \
    --max-examples "${SCHEMATHESIS_EXAMPLES:-25}" --seed 1 \
    --request-timeout 70 --no-color
