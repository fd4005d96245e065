#!/usr/bin/env python3
"""Bounds the target directory a warm CI keeps: deletes from debug/deps
and debug/build whatever the builds of this run did not use, and
debug/incremental, which no build of CI's uses.

`scripts/prune-target.py STAMP LIST...`: each LIST is the JSON that cargo
printed with `--message-format=json-render-diagnostics` for a build of
this run; its `compiler-artifact` messages name every artifact the build
used, fresh or rebuilt, and its `build-script-executed` messages the
build scripts' output folders. A file (or build folder) of the same unit
(name and hash) stays; so does anything changed after STAMP (a file
touched when the run began). The rest, left by builds of earlier
dependencies, profiles or sources, is deleted. Prints what it freed."""
import json
import os
import re
import shutil
import sys
from pathlib import Path

stamp, lists = sys.argv[1], sys.argv[2:]
started = os.stat(stamp).st_mtime
target = Path(os.environ.get("CARGO_TARGET_DIR") or Path(__file__).resolve().parent.parent / "target")
debug = target / "debug"
unit = re.compile(r"^(.+-[0-9a-f]{16})(?:\..*)?$")


def stems(name: str) -> set:
    """The unit a deps file belongs to, with and without the `lib` that
    libraries' file names begin with (`libfoo-HASH.rlib`, `foo-HASH.d`)."""
    m = unit.match(name)
    if not m:
        return set()
    stem = m.group(1)
    return {stem, stem[3:]} if stem.startswith("lib") else {stem}


kept_units, kept_builds = set(), set()
for listing in lists:
    for line in Path(listing).read_text().splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        paths = []
        if message.get("reason") == "compiler-artifact":
            paths = message.get("filenames", []) + [message.get("executable") or ""]
        elif message.get("reason") == "build-script-executed":
            paths = [message.get("out_dir") or ""]
        for path in filter(None, paths):
            p = Path(path)
            if p.parent.name == "deps":
                kept_units |= stems(p.name)
            # debug/build/NAME-HASH/...: the build script or its output.
            parts = p.parts
            if "build" in parts:
                i = len(parts) - 1 - parts[::-1].index("build")
                if i + 1 < len(parts):
                    kept_builds.add(parts[i + 1])

if not kept_units:
    sys.exit("prune-target: the build listings name no artifact; nothing deleted")


def size(p: Path) -> int:
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
    return p.stat().st_size


freed = 0
for entry in (debug / "deps").iterdir() if (debug / "deps").is_dir() else []:
    names = stems(entry.name)
    if not names or names & kept_units or entry.stat().st_mtime >= started:
        continue
    freed += size(entry)
    entry.unlink()
for entry in (debug / "build").iterdir() if (debug / "build").is_dir() else []:
    if entry.name in kept_builds or entry.stat().st_mtime >= started:
        continue
    freed += size(entry)
    shutil.rmtree(entry)
# Builds with CARGO_INCREMENTAL=0 (all of CI's) neither read nor write
# these; a build without it (the test command before it set it) left them.
if (debug / "incremental").is_dir():
    freed += size(debug / "incremental")
    shutil.rmtree(debug / "incremental")
print(f"pruned {freed / 2**30:.1f} GiB left by earlier builds")
