"""``python -m keel build MODULE [-o OUT.wasm] [-p PATH]... [--force]``:
builds the workflows and steps that MODULE (and what it imports) declares
into a keel component with componentize-py.

A build is skipped when its inputs are those of the component already at
OUT: the files under each PATH and of this SDK (as they would be staged),
the module's name and the distributions installed beside this Python
(componentize-py's version among them). Their digest is kept beside the
component, in ``OUT.inputs``. ``--force`` builds regardless, for inputs the
digest cannot see (a package installed in editable mode from elsewhere)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
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
    bytecode caches, builds, components and their inputs' digests, and
    the journals ``keel test`` records."""
    return {
        n
        for n in names
        if n.startswith(".")
        or n in ("__pycache__", "build", "node_modules")
        or n.endswith((".wasm", ".wasm.inputs", ".journal"))
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


def _staged_files(root: Path):
    """The files under ``root`` that a staged copy holds, in a fixed order."""
    for directory, dirs, files in os.walk(root, followlinks=True):
        skip = _ignored(directory, dirs + files)
        dirs[:] = sorted(d for d in dirs if d not in skip)
        for name in sorted(files):
            if name not in skip:
                yield Path(directory, name)


def inputs_digest(module: str, paths: list) -> str:
    """The digest of what a build of ``module`` from ``paths`` reads: the
    staged files of each path and of this SDK, by place and content, the
    module's name, and the installed distributions with their versions."""
    digest = hashlib.sha256(f"keel build 1\0{WORLD}\0{module}\0".encode())
    installed = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
    )
    for line in installed:
        digest.update(line.encode() + b"\0")
    roots = [Path(p) for p in paths] + [Path(__file__).resolve().parent]
    for i, root in enumerate(roots):
        for file in _staged_files(root):
            place = f"{i}/{file.relative_to(root).as_posix()}"
            digest.update(place.encode() + b"\0")
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _stamp(out: Path) -> Path:
    """Where the digest of the inputs of the component at ``out`` is kept."""
    return out.with_name(out.name + ".inputs")


def up_to_date(out: Path, digest: str) -> bool:
    """Whether the component at ``out`` was built from inputs of ``digest``."""
    stamp = _stamp(out)
    return out.is_file() and stamp.is_file() and stamp.read_text().strip() == digest


def build(module: str, out: Path, paths: list, force: bool = False) -> None:
    digest = inputs_digest(module, paths)
    if not force and up_to_date(out, digest):
        print(f"{out} is up to date")
        return
    _stamp(out).unlink(missing_ok=True)
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
    _stamp(out).write_text(digest + "\n")
    print(f"built {out} ({out.stat().st_size // 1024} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m keel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build MODULE into a keel component")
    b.add_argument("module", help="the module that declares the workflows and steps (e.g. app)")
    b.add_argument("-o", "--output", default=None, help="the .wasm to write (default: MODULE.wasm)")
    b.add_argument("-p", "--path", action="append", default=None,
                   help="a directory to find modules in (default: the current directory)")
    b.add_argument("--force", action="store_true",
                   help="build even if the component's inputs are unchanged")
    args = parser.parse_args()
    out = Path(args.output or f"{args.module}.wasm").resolve()
    build(args.module, out, args.path or [os.getcwd()], args.force)


if __name__ == "__main__":
    main()
