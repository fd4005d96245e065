#!/usr/bin/env bash
# Bounds the target directory a warm CI keeps: of each test or binary
# executable in debug/deps, only the newest build stays (cargo relinks one
# it needs again), and the test binaries of suites that no longer exist go.
# Prints the directory's size after.
set -euo pipefail
target="${CARGO_TARGET_DIR:-$(dirname "$0")/../target}"
deps="$target/debug/deps"
[ -d "$deps" ] || exit 0
find "$deps" -maxdepth 1 -type f -perm -u+x ! -name '*.so' ! -name '*.rlib' ! -name '*.rmeta' ! -name '*.d' \
    -printf '%T@ %f\n' |
    sort -rn |
    awk '{ name = $2; sub(/-[0-9a-f]+$/, "", name); if (seen[name]++) print $2 }' |
    while read -r stale; do rm -f "$deps/$stale"; done
du -sh "$target" | sed 's/^/target directory: /'
