"""Import cycles among the core's modules, counting imports inside functions too.

    python scripts/dev/import_cycles.py            cycles in respec/ (exit status 1 when there are any)
    python scripts/dev/import_cycles.py --edges    also list every edge of each cycle, with its line
    python scripts/dev/import_cycles.py --folders  cycles between the package's folders instead, each
                                                   with the imports (file:line) that make it

A function-level import breaks a cycle at import time but not in the design: the two modules
still need each other. So every `import` / `from ... import` in a module counts, wherever it sits
(module level, function, class, `if TYPE_CHECKING:`). An edge goes to the module named, or to
the submodule when `from package import name` names one; a package's `__init__` is a module of
its own (importing `respec.a.b` runs `respec/a/__init__.py` too, but that is not an edge here:
it is the package's own import, counted where it is written). Cycles are the strongly connected
components of that graph with more than one module, or one module importing itself.

`--folders` lifts the same module graph to the package's folders: a folder is a subpackage directly
under the package (`respec.eval` holds `respec.eval.masks`), and each top-level module is a node of
its own (`respec.models`, `respec.turn`; the package's `__init__` is `respec`). An import between two
modules of one folder is not an edge; every other import is an edge between their folders. A
folder cycle means two parts of the core need each other even when no two modules do (a -> b.x,
b.y -> a), so the layout has no direction there. Exit status 1 when there is any.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `package_dir` (a package)."""
    base = package_dir.parent
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a relative import `from {'.' * level}{target} import ...` in `module`."""
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file that names a module in `known`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    edges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name:
                    edges.append((name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in known:
                    edges.append((sub, node.lineno))
                elif base in known:
                    edges.append((base, node.lineno))
    return edges


def graph(package_dir: Path) -> tuple[dict[str, dict[str, list[int]]], dict[str, Path]]:
    """module -> {imported module -> [lines]} over the package's own modules."""
    files = module_files(package_dir)
    known = set(files)
    g: dict[str, dict[str, list[int]]] = {m: {} for m in files}
    for m, path in files.items():
        for target, line in imports_of(m, path, known):
            g[m].setdefault(target, []).append(line)
    return g, files


def cycles(g: dict[str, dict]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan), each sorted, largest first.

    `g` maps every node to {node it imports -> anything}: the module graph or the folder graph."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g[v]:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found, key=lambda c: (-len(c), c))


def folder_of(module: str, package: str) -> str:
    """The folder node of `module`: the subpackage directly under `package`, or the top-level module itself."""
    parts = module.split(".")
    depth = len(package.split(".")) + 1
    return ".".join(parts[:depth])


def folder_graph(g: dict[str, dict[str, list[int]]], package: str) -> dict[str, dict[str, list[tuple[str, str, int]]]]:
    """folder -> {other folder -> [(module, imported module, line)]}: the module graph `g` lifted to folders.

    Imports inside one folder are dropped; every folder (and top-level module) is a key, edges or not."""
    out: dict[str, dict[str, list[tuple[str, str, int]]]] = {folder_of(m, package): {} for m in g}
    for m, targets in g.items():
        a = folder_of(m, package)
        for target, lines in targets.items():
            b = folder_of(target, package)
            if a != b:
                out[a].setdefault(b, []).extend((m, target, line) for line in sorted(set(lines)))
    return out


def _report_modules(g, files, package_dir: Path, show_edges: bool) -> int:
    found = cycles(g)
    n_edges = sum(len(t) for t in g.values())
    print(f"{len(files)} modules, {n_edges} import edges (function-level imports included): "
          f"{len(found)} cycle{'' if len(found) == 1 else 's'}")
    for comp in found:
        print("  cycle: " + " <-> ".join(comp))
        if show_edges:
            members = set(comp)
            for m in comp:
                for target, lines in sorted(g[m].items()):
                    if target in members:
                        rel = files[m].relative_to(package_dir.parent)
                        print(f"    {m} -> {target}  ({rel}:{','.join(map(str, sorted(set(lines))))})")
    return 1 if found else 0


def _report_folders(g, files, package_dir: Path) -> int:
    fg = folder_graph(g, package_dir.name)
    found = cycles(fg)
    n_edges = sum(len(t) for t in fg.values())
    print(f"{len(fg)} folders and top-level modules, {n_edges} folder edges (function-level imports included): "
          f"{len(found)} folder cycle{'' if len(found) == 1 else 's'}")
    for comp in found:
        print("  folder cycle: " + " <-> ".join(comp))
        members = set(comp)
        for a in comp:
            for b, via in sorted(fg[a].items()):
                if b in members:
                    print(f"    {a} -> {b}")
                    for m, target, line in via:
                        rel = files[m].relative_to(package_dir.parent)
                        print(f"      {m} -> {target}  ({rel}:{line})")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("package", nargs="?", default=str(ROOT / "respec"), help="the package folder (default: respec/)")
    ap.add_argument("--edges", action="store_true", help="list each cycle's edges with their lines")
    ap.add_argument("--folders", action="store_true",
                    help="cycles between the package's folders (and top-level modules), with the imports that make them")
    args = ap.parse_args(argv)
    package_dir = Path(args.package).resolve()
    g, files = graph(package_dir)
    if args.folders:
        return _report_folders(g, files, package_dir)
    return _report_modules(g, files, package_dir, args.edges)


if __name__ == "__main__":
    sys.exit(main())
