#!/bin/bash
# The client libraries against a real `keel serve`: checks that their types
# are what their pinned generators make of clients/openapi.json (itself
# checked against the server by a Rust test), then runs the TypeScript and
# the Python suites with KEEL_URL set. `scripts/clients.sh generate` makes
# the types anew instead. Installs what it needs (npm packages pinned by the
# lock file; the Python client and its generator in a venv); fails if any
# check fails or cannot run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

echo "== installing the clients' tools (at $SECONDS s)" >&2
(cd clients/typescript && npm ci --no-audit --no-fund --ignore-scripts --silent)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q -r clients/python/requirements-generate.txt
"$work/venv/bin/pip" install -q ./clients/python

# The types as the generators make them, into $1 (the TypeScript) and $2
# (the Python).
generate() {
    (cd clients/typescript && npx openapi-typescript ../openapi.json --default-non-nullable false -o "$1" >/dev/null 2>&1 && node scripts/header.mjs "$1")
    "$work/venv/bin/datamodel-codegen" --input clients/openapi.json --input-file-type openapi \
        --output-model-type typing.TypedDict --target-python-version 3.10 \
        --use-standard-collections --use-union-operator --disable-timestamp \
        --formatters black isort --output "$2" 2>/dev/null
}
if [ "${1:-}" = generate ]; then
    generate "$here/clients/typescript/src/schema.ts" "$here/clients/python/keel_client/models.py"
    echo "generated clients/typescript/src/schema.ts and clients/python/keel_client/models.py" >&2
    exit 0
fi
echo "== the clients' types are current (at $SECONDS s)" >&2
generate "$work/schema.ts" "$work/models.py"
cmp clients/typescript/src/schema.ts "$work/schema.ts" \
    || { echo "clients/typescript/src/schema.ts is stale: run scripts/clients.sh generate" >&2; exit 1; }
cmp clients/python/keel_client/models.py "$work/models.py" \
    || { echo "clients/python/keel_client/models.py is stale: run scripts/clients.sh generate" >&2; exit 1; }

# The TypeScript client ships its compiled dist/ (so `npm install
# ./clients/typescript` needs no compiler): it must be what tsc makes of src/.
(cd clients/typescript && npx tsc -p . --outDir "$work/dist")
diff -r clients/typescript/dist "$work/dist" >/dev/null \
    || { echo "clients/typescript/dist is stale: run npm run build in clients/typescript" >&2; exit 1; }

# keel as the README installs it, into a directory of its own; --debug
# (the tests' profile, so the dependencies the tests built serve it) where
# the README's command builds in release.
echo "== installing keel (cargo install --path cli --locked --debug) (at $SECONDS s)" >&2
# Its build is listed for .ci/run's prune when it asks (KEEL_BUILD_LISTINGS).
cargo install -q --path cli --locked --debug --root "$work/keel" \
    --message-format=json-render-diagnostics >"${KEEL_BUILD_LISTINGS:-$work}/install.json"
KEEL=$work/keel/bin/keel
# The guests, as this checkout's build makes them.
guests() {
    cargo run -q -p keel-tests --bin guests -- "$@"
}
# Compiled guests are shared with the tests of this build.
export KEEL_CACHE_DIR="${KEEL_CACHE_DIR:-${CARGO_TARGET_DIR:-$here/target}/tmp/keel-compiled}"

echo "== the demo, by the installed keel in an empty directory (at $SECONDS s)" >&2
order=$(guests order)
mkdir "$work/demo"
demo=$(cd "$work/demo" && "$KEEL" --db .keel-demo demo --json --component "$order")
python3 -c 'import json,sys
d = json.loads(sys.argv[1])
keys = {r["idempotency_key"] for r in d["requests"]}
assert d["status"] == "completed" and len(d["requests"]) == 2 and len(keys) == 1 and d["charges"] == 1, d
print("the demo charged once across", len(d["requests"]), "attempts with one idempotency key")' "$demo"

while read -r guest; do
    "$KEEL" --db "$work/db" deploy "$guest" >/dev/null
done <<<"$(guests testbed order-hooks)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export KEEL_URL="http://127.0.0.1:$port"
"$KEEL" --db "$work/db" serve --http "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server=$!
deadline=$((SECONDS + 30))
until curl -fsS "$KEEL_URL/healthz" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 $server 2>/dev/null; then
        echo "keel serve did not come up:" >&2; cat "$work/server.log" >&2; exit 1
    fi
    sleep 0.2
done

echo "== the TypeScript client (at $SECONDS s)" >&2
(cd clients/typescript && npm test --silent)
echo "== the Python client (at $SECONDS s)" >&2
# From outside the checkout, so the installed package is what is tested.
(cd "$work" && "$work/venv/bin/python" -m unittest discover -s "$here/clients/python/tests" -t "$here/clients/python/tests")

# What users install: each package built as it would be published, then
# installed from that file alone in a directory of its own, and used.
echo "== the packages, installed from their files in clean directories (at $SECONDS s)" >&2
mkdir -p "$work/packages"
(cd clients/typescript && npm pack --silent --pack-destination "$work/packages" >/dev/null)
"$work/venv/bin/pip" install -q build
for project in clients/python sdk/python; do
    "$work/venv/bin/python" -m build -q --outdir "$work/packages" "$project" >/dev/null
done
ls "$work/packages" >&2

mkdir -p "$work/ts-app"
(cd "$work/ts-app" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "$work"/packages/keel-client-*.tgz)
cat >"$work/ts-app/app.mjs" <<'JS'
import assert from "node:assert/strict";
import { Keel } from "@keel/client";
const run = await new Keel({ url: process.env.KEEL_URL }).start("ten_steps", 3);
assert.equal(await run.result(), 3);
console.log(`the packaged TypeScript client ran ${run.id}`);
JS
(cd "$work/ts-app" && node app.mjs)

python3 -m venv "$work/py-app"
"$work/py-app/bin/pip" install -q "$work"/packages/keel_client-*.whl "$work"/packages/keel_sdk-*.whl
(cd "$work" && "$work/py-app/bin/python" - <<'PY'
import asyncio, importlib.resources
from keel_client import AsyncKeel
import keel

async def main():
    async with AsyncKeel(__import__("os").environ["KEEL_URL"]) as client:
        run = await client.start("ten_steps", 3)
        assert await run.result() == 3
        print(f"the packaged Python client ran {run.id}")

asyncio.run(main())
# The SDK's package carries the WIT contract a component is built against.
wit = importlib.resources.files(keel) / "wit" / "deps" / "keel.wit"
assert "package keel:workflow" in wit.read_text(), wit
assert callable(keel.workflow) and callable(keel.step)
print("the packaged Python SDK imports, with its WIT")
PY
)

# The READMEs' install commands, as a newcomer runs them: from a fresh
# clone of this checkout (its commits alone, no build output but what is
# committed), each into a clean directory.
echo "== the README install commands, from a fresh clone (at $SECONDS s)" >&2
git clone -q "$here" "$work/clone"
mkdir -p "$work/readme-ts"
(cd "$work/readme-ts" && npm init -y >/dev/null \
    && npm install --silent --no-audit --no-fund "$work/clone/clients/typescript" \
    && sed 's/the packaged TypeScript client/the TypeScript client installed from a fresh clone/' \
        "$work/ts-app/app.mjs" >app.mjs && node app.mjs)
python3 -m venv "$work/readme-py"
"$work/readme-py/bin/pip" install -q "$work/clone/clients/python"
(cd "$work/readme-ts" && "$work/readme-py/bin/python" - <<'PY'
import asyncio, os
from keel_client import AsyncKeel

async def main():
    async with AsyncKeel(os.environ["KEEL_URL"]) as client:
        run = await client.start("ten_steps", 3)
        assert await run.result() == 3
        print(f"the Python client installed from a fresh clone ran {run.id}")

asyncio.run(main())
PY
)

# The Rust SDK crates as `cargo publish` would upload them, built from
# those packages alone, in a target directory of their own: the build
# lists nothing for .ci/run's prune, which would delete its artifacts,
# and it does not hold the lock of the one the other lanes build in.
echo "== the Rust SDK crates package and build as published (at $SECONDS s)" >&2
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}/publish" \
    cargo publish --dry-run --quiet -p keel-sdk-macros -p keel-sdk --allow-dirty
