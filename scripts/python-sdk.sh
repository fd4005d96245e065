#!/usr/bin/env bash
# Makes (or reuses) a virtualenv with the Python SDK's pinned build
# requirements (componentize-py, sdk/python/requirements.txt) and prints
# the setting that points the build at it:
#   eval "$(scripts/python-sdk.sh)"
# The venv lives in the checkout (.python-sdk/, ignored by git).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.python-sdk"
if ! "$venv/bin/python" -c 'import componentize_py' 2>/dev/null \
    || ! cmp -s "$here/sdk/python/requirements.txt" "$venv/requirements.txt"; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/sdk/python/requirements.txt" >&2
    cp "$here/sdk/python/requirements.txt" "$venv/requirements.txt"
fi
echo "export KEEL_PYTHON=$venv/bin/python"
