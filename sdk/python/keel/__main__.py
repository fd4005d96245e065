"""``python -m keel build MODULE [-o OUT.wasm] [-p PATH]...``: builds the
workflows and steps that MODULE (and what it imports) declares into a keel
component with componentize-py."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORLD = "python-component"


def componentize_py() -> str:
    """The componentize-py executable beside this Python, or on PATH."""
    beside = Path(sys.executable).parent / "componentize-py"
    found = str(beside) if beside.exists() else shutil.which("componentize-py")
    if not found:
        sys.exit(
            "error: componentize-py is not installed; install the pinned build requirements: "
            "pip install -r requirements.txt (they pin componentize-py)"
        )
    return found


def _ignored(directory: str, names: list) -> set:
    """What a staged copy leaves out: hidden entries, virtualenvs,
    bytecode caches, builds and components."""
    return {
        n
        for n in names
        if n.startswith(".") or n in ("__pycache__", "build", "node_modules") or n.endswith(".wasm")
    }


def stage(paths: list, staging: Path) -> list:
    """Copies the module directories ``paths`` and the ``keel`` package
    under ``staging``; returns the copies' paths. componentize-py writes
    bytecode caches beside what it imports, so it is given copies: the
    sources stay untouched (a build tool watching them sees no change)."""
    copies = []
    for i, p in enumerate(paths):
        copy = staging / f"path{i}"
        shutil.copytree(p, copy, ignore=_ignored)
        copies.append(str(copy))
    sdk = staging / "sdk"
    shutil.copytree(Path(__file__).resolve().parent, sdk / "keel", ignore=_ignored)
    copies.append(str(sdk))
    return copies


def build(module: str, out: Path, paths: list) -> None:
    wit = Path(__file__).resolve().parent / "wit"
    with tempfile.TemporaryDirectory(prefix="keel-build-") as staging:
        entry_dir = Path(staging, "entry")
        entry_dir.mkdir()
        (entry_dir / "keel_component.py").write_text(
            f"import {module}  # registers its workflows and steps\n"
            "from keel._guest import Guest\n"
        )
        command = [componentize_py(), "-d", str(wit), "-w", WORLD, "componentize", "keel_component"]
        for p in [str(entry_dir), *stage(paths, Path(staging))]:
            command += ["-p", p]
        command += ["-o", str(out)]
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run(command, env=env)
        if done.returncode != 0:
            sys.exit(f"error: componentize-py failed ({done.returncode}) building `{module}`")
    print(f"built {out} ({out.stat().st_size // 1024} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m keel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build MODULE into a keel component")
    b.add_argument("module", help="the module that declares the workflows and steps (e.g. app)")
    b.add_argument("-o", "--output", default=None, help="the .wasm to write (default: MODULE.wasm)")
    b.add_argument("-p", "--path", action="append", default=None,
                   help="a directory to find modules in (default: the current directory)")
    args = parser.parse_args()
    out = Path(args.output or f"{args.module}.wasm").resolve()
    build(args.module, out, args.path or [os.getcwd()])


if __name__ == "__main__":
    main()
