#!/usr/bin/env python3
"""Checks the shape of the code, as CI does: no import circle between the
modules of a crate, and no production source file over 1,000 lines.

A module is a source file (`a/b.rs` or `a/b/mod.rs` is module `a::b`). A
module depends on another when it names it, or an item in it, by a path
(`crate::a::b::Item`, `super::b`, `self::c` or a `use` of one). A module
may name its ancestors (a parent module is the facade its children build
on); any other circle of modules naming each other is reported with the
path that closes it. Test code (from a file's `#[cfg(test)]` on) is left
out of both checks.

Usage: scripts/structure.py [CRATE_DIR...] (default: every workspace crate
with production code).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["core", "store", "host", "server", "cli", "bench", "guest-sdk", "guest-sdk/macros"]
MAX_LINES = 1000
# Generated or test-only sources, exempt from the line limit.
EXEMPT = {"store/src/conformance"}

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def production(text):
    """The text before the file's test module."""
    cut = text.find("#[cfg(test)]")
    text = text if cut < 0 else text[:cut]
    # Comments name paths in prose; they are not dependencies.
    return re.sub(r"//[^\n]*", "", text)


def modules(src):
    """Maps each module path (a tuple) to its file."""
    found = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod":
            parts.pop()
        if parts in (["lib"], ["main"]):
            parts = []
        if "bin" in parts[:1]:
            continue
        found[tuple(parts)] = f
    return found


def resolve(base, here, tail, known):
    """The module a path names: the longest known module prefix."""
    if base == "crate":
        path = []
    elif base == "self":
        path = list(here)
    else:
        path = list(here[:-1])
    parts = [p for p in tail.split("::") if p]
    while parts and parts[0] == "super":
        path = path[:-1]
        parts.pop(0)
    full = path + parts
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in known:
            return tuple(full[:n])
    return None


def dependencies(mods):
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        text = production(f.read_text())
        paths = [(b, t) for b, t in PATH.findall(text)]
        for base, prefix, group in USE_GROUP.findall(text):
            for item in re.split(r"[,\s]+", group):
                item = item.split("::{")[0].strip("{} ")
                if item and item not in ("self", "*"):
                    paths.append((base, prefix + "::" + item))
        for base, tail in paths:
            target = resolve(base, m, tail, mods)
            if target is None or target == m:
                continue
            # Naming an ancestor (the facade) is allowed.
            if m[: len(target)] == target:
                continue
            graph[m].add(target)
    return graph


def circles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def name(crate, m):
    return f"{crate}::" + "::".join(m) if m else crate


def main(args):
    crates = args or CRATES
    problems = []
    for crate in crates:
        src = ROOT / crate / "src"
        if not src.is_dir():
            continue
        mods = modules(src)
        graph = dependencies(mods)
        for comp in circles(graph):
            members = ", ".join(name(crate, m) for m in comp)
            edges = [
                f"{name(crate, a)} -> {name(crate, b)}"
                for a in comp
                for b in sorted(graph[a])
                if b in comp
            ]
            problems.append(
                f"import circle in {crate}: {members}\n    " + "\n    ".join(edges)
            )
        for m, f in mods.items():
            rel = f.relative_to(ROOT).as_posix()
            if any(rel.startswith(e) for e in EXEMPT):
                continue
            lines = production(f.read_text()).count("\n")
            if lines > MAX_LINES:
                problems.append(
                    f"{rel}: {lines} lines of production code; split it by concept (at most {MAX_LINES})"
                )
    for p in problems:
        print(p)
    if problems:
        print(f"structure.py: {len(problems)} problem(s)")
        return 1
    print(f"structure.py: no import circle, no file over {MAX_LINES} lines in {', '.join(crates)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
