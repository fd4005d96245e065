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


def build(module: str, out: Path, paths: list) -> None:
    package_root = Path(__file__).resolve().parent.parent
    wit = Path(__file__).resolve().parent / "wit"
    with tempfile.TemporaryDirectory(prefix="keel-build-") as entry_dir:
        Path(entry_dir, "keel_component.py").write_text(
            f"import {module}  # registers its workflows and steps\n"
            "from keel._guest import Guest\n"
        )
        command = [componentize_py(), "-d", str(wit), "-w", WORLD, "componentize", "keel_component"]
        for p in [entry_dir, *paths, str(package_root)]:
            command += ["-p", p]
        command += ["-o", str(out)]
        env = dict(os.environ, PYTHONHASHSEED="0")
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
