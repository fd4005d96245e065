#!/bin/bash
# Installs what the console and OpenAPI checks need and this machine lacks:
# Debian's Chromium, playwright-core, stripe and @octokit/webhooks-methods
# (npm, pinned in tests/browser), Debian's prometheus (for promtool) and
# schemathesis (PyPI). Idempotent; quiet when everything is there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v chromium >/dev/null; then
    echo "installing Debian's chromium" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq chromium >/dev/null
fi
modules="$here/tests/browser/node_modules"
if [ ! -d "$modules/playwright-core" ] || [ ! -d "$modules/stripe" ] || [ ! -d "$modules/@octokit/webhooks-methods" ]; then
    echo "installing playwright-core, stripe and @octokit/webhooks-methods" >&2
    (cd "$here/tests/browser" && npm install --no-audit --no-fund --silent)
fi
if ! command -v promtool >/dev/null; then
    echo "installing Debian's prometheus (for promtool)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v schemathesis >/dev/null; then
    echo "installing schemathesis" >&2
    pip install -q --root-user-action=ignore "schemathesis==4.32.5"
fi
