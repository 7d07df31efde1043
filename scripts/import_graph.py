"""Print the package's import graph and check its shape.

    python scripts/import_graph.py            # module → imports, rooms, sizes, problems
    python scripts/import_graph.py --check    # only the problems (exit 1 if any)

The source folders install under one namespace (pyproject's package-dir): ``as2d_cli/`` is
``as2d``, ``runtime/`` is ``as2d.runtime``, ``models/`` is ``as2d.models``. Imports are read
with ``ast`` (nothing is imported), function-local ones included, since a cycle hidden in a
function is still a cycle. The rules checked are the layout's promises:

- no cycle between modules, and none between rooms (sub-packages);
- the engine (``as2d.runtime``) imports neither the face (``as2d.cli``, the public API), nor
  ``as2d.models`` (it reads the bundles that models writes), nor a terminal library;
- ``as2d.models`` imports nothing of the engine or the face;
- no module over ``--max-lines`` lines (a size is a smell, not a verdict: listed, not failed).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"as2d": ROOT / "as2d_cli", "as2d.runtime": ROOT / "runtime",
           "as2d.models": ROOT / "models"}
TERMINAL = ("typer", "rich", "click")


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found: dict[str, Path] = {}
    for prefix, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(package modules, outside top-level packages) that ``path`` imports."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    inside: set[str] = set()
    outside: set[str] = set()

    def add(target: str) -> None:
        if target.split(".")[0] != "as2d":
            outside.add(target.split(".")[0])
            return
        while target and target not in known:  # `from pkg import module` or a name in it
            target = target.rpartition(".")[0]
        if target and target != name:
            inside.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                add(full if full in known else mod)
    return inside, outside


def room(name: str) -> str:
    """The sub-package a module belongs to (``as2d.runtime.whisper.model`` → its room)."""
    parts = name.split(".")
    if parts[:2] == ["as2d", "runtime"] and len(parts) > 3:
        return ".".join(parts[:3])
    if parts[:2] == ["as2d", "runtime"]:
        return "as2d.runtime"
    if parts[:2] in (["as2d", "models"], ["as2d", "cli"]):
        return ".".join(parts[:2])
    return "as2d"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def problems(graph: dict[str, set[str]], outside: dict[str, set[str]]) -> list[str]:
    found = [f"module cycle: {' ⇄ '.join(c)}" for c in cycles(graph)]
    rooms: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        for dep in deps:
            # A package's own modules may import each other; rooms are compared across.
            if room(dep) != room(mod) and not room(mod).startswith(room(dep) + "."):
                rooms.setdefault(room(mod), set()).add(room(dep))
    found += [f"room cycle: {' ⇄ '.join(c)}" for c in cycles(rooms)]
    for mod, deps in graph.items():
        if mod.startswith("as2d.runtime"):
            bad = sorted(d for d in deps if not d.startswith("as2d.runtime"))
            bad += sorted(t for t in outside[mod] if t in TERMINAL)
            found += [f"{mod} (engine) imports {b}" for b in bad]
        if mod.startswith("as2d.models"):
            found += [f"{mod} (models) imports {d}" for d in sorted(deps)
                      if not d.startswith("as2d.models")]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print only the problems")
    ap.add_argument("--max-lines", type=int, default=400)
    args = ap.parse_args()
    mods = modules()
    known = set(mods)
    graph: dict[str, set[str]] = {}
    outside: dict[str, set[str]] = {}
    for name, path in mods.items():
        graph[name], outside[name] = imports_of(name, path, known)
    found = problems(graph, outside)
    if not args.check:
        for name in sorted(graph):
            lines = len(mods[name].read_text().splitlines())
            deps = ", ".join(d.removeprefix("as2d.") for d in sorted(graph[name])) or "-"
            print(f"{name.removeprefix('as2d.') or 'as2d'} ({lines}) → {deps}")
        big = sorted((len(p.read_text().splitlines()), n) for n, p in mods.items())
        big = [f"{n} ({k})" for k, n in big if k > args.max_lines]
        print(f"\n{len(mods)} modules; over {args.max_lines} lines: {', '.join(big) or 'none'}")
    for p in found:
        print(f"problem: {p}")
    if not args.check:
        print("no problems" if not found else f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
