#!/bin/bash
# Checks a real `keel serve` from outside, as clients see it: schemathesis
# fuzzes every endpoint against /openapi.json (responses must match the
# document, no 5xx), the console test drives the web console in headless
# Chromium, the webhooks test sends deliveries signed by Stripe's and
# GitHub's own libraries, and Prometheus's promtool lints /metrics. The keel binary and the guests are the ones cargo
# builds from this checkout now (it rebuilds what is stale, and the guests
# are checked against the digests their build recorded), never files an
# earlier build left behind. Fails if any check fails or cannot run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/e2e-tools.sh"
cd "$here"
# The workspace's binaries, as the test command's build resolved them (so
# nothing is built again): keel, and guests, which knows the guests' paths.
artifacts=$(cargo build -q --workspace --bins --message-format=json)
# Listed for .ci/run's prune of the target directory when it asks.
[ -z "${KEEL_BUILD_LISTINGS:-}" ] || printf '%s\n' "$artifacts" >"$KEEL_BUILD_LISTINGS/bins.json"
binary() {
    python3 -c 'import json,sys
name = sys.argv[1]
paths = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == name]
print(paths[-1])' "$1" <<<"$artifacts"
}
KEEL=$(binary keel)
# Compiled guests are shared with the tests of this build (the target
# directory's tmp/), so each is compiled once, not once per server.
export KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-$(dirname "$KEEL")/../tmp/keel-compiled}"
# One path a line, in the order asked; fails naming a missing or stale guest.
GUEST_PATHS=$("$(binary guests)" testbed order-hooks)
# A build of the testbed whose step_then_sleep differs: the console test
# judges an upgrade to it.
REORDERED=$("$(binary guests)" testbed_reordered)
work=$(mktemp -d)
# The embedded store by default; KEEL_E2E_STORE=postgres serves from a
# fresh schema of the test database (KEEL_TEST_POSTGRES) instead.
case "${KEEL_E2E_STORE:-sled}" in
    sled) store=(--db "$work/db") ;;
    postgres)
        : "${KEEL_TEST_POSTGRES:?KEEL_E2E_STORE=postgres needs KEEL_TEST_POSTGRES (scripts/postgres.sh)}"
        store=(--db "$KEEL_TEST_POSTGRES" --pg-schema "keel_e2e_$$_$(date +%s)") ;;
    *) echo "KEEL_E2E_STORE is sled or postgres, not $KEEL_E2E_STORE" >&2; exit 2 ;;
esac
echo "== keel serve on ${KEEL_E2E_STORE:-sled} (at $SECONDS s)" >&2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
while read -r guest; do
    "$KEEL" "${store[@]}" deploy "$guest" >/dev/null
done <<<"$GUEST_PATHS"
trap 'rm -rf "$work"' EXIT
# A run whose worker is killed in the middle of a step: the server takes it
# over once the dead worker's lease has expired, and the console shows the
# attempt the loss cost (KEEL_LOST_RUN). The step spins on its first
# attempt (however long the kill takes to come) and succeeds on the next.
lost=$("$KEEL" "${store[@]}" start --detach --json testbed spinning_step \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
"$KEEL" "${store[@]}" worker --lease-ttl 1 >"$work/worker.log" 2>&1 &
worker=$!
# Whatever happens, the worker does not outlive the script (it would hold
# the test database's connections).
trap 'kill -9 $worker 2>/dev/null; rm -rf "$work"' EXIT
deadline=$((SECONDS + 30))
# On sled, asked only once the worker serves its socket (before, the CLI
# would open the store itself and keep the worker from it).
until { [ "${KEEL_E2E_STORE:-sled}" != sled ] || [ -S "$work/db/control/control.sock" ]; } &&
    "$KEEL" "${store[@]}" runs show "$lost" --json 2>/dev/null | grep -q step_attempt_started; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 $worker 2>/dev/null; then
        echo "the worker did not start the run's step:" >&2; cat "$work/worker.log" >&2; exit 1
    fi
    sleep 0.1
done
kill -9 $worker
wait $worker 2>/dev/null || true
"$KEEL" "${store[@]}" serve --http "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
deadline=$((SECONDS + 30))
until curl -fsS "$url/healthz" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 $server 2>/dev/null; then
        echo "keel serve did not come up:" >&2; cat "$work/server.log" >&2; exit 1
    fi
    sleep 0.2
done

echo "== console in headless Chromium (at $SECONDS s)" >&2
KEEL_URL="$url" KEEL_LOST_RUN="$lost" KEEL_REORDERED="$REORDERED" SCREENSHOT="${SCREENSHOT:-$work/console.png}" node "$here/tests/browser/console.test.mjs"

echo "== webhooks signed by stripe and @octokit/webhooks-methods (at $SECONDS s)" >&2
KEEL_URL="$url" node "$here/tests/browser/webhooks.test.mjs"

echo "== promtool check metrics on /metrics, in both formats (at $SECONDS s)" >&2
curl -fsS "$url/metrics" | promtool check metrics
curl -fsS -H 'Accept: application/openmetrics-text; version=1.0.0' "$url/metrics" | grep -q '^# EOF$'

echo "== schemathesis against /openapi.json (at $SECONDS s)" >&2
# Every check, but as tests/schemathesis.toml says. Deploying is left out:
# random bytes are never a component, so its positive cases cannot pass;
# tests/api.rs covers it.
schemathesis --config-file "$here/tests/schemathesis.toml" run "$url/openapi.json" \
    --exclude-operation-id deploy \
    --max-examples "${SCHEMATHESIS_EXAMPLES:-25}" --seed 1 \
    --no-color
