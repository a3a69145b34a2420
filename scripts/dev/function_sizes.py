"""Long functions and long parameter lists in the core (issue 37's measure of readable steps).

    python scripts/dev/function_sizes.py                the core's functions over the limits (exit 1 when any)
    python scripts/dev/function_sizes.py --lines 60     another line limit (default 80)

A function's length is its lines from `def` to its last line, docstring and comments included (what
a reader scrolls through). Its parameters are every name it takes (positional, keyword-only,
*args, **kwargs), `self` / `cls` not counted. The project's rule: at most MAX_LONG functions over
the line limit (a step that reads best whole), none over MAX_PARAMS parameters (a settings object
instead, like TurnSwitches).
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINES = 80
MAX_LONG = 3
MAX_PARAMS = 10


@dataclass(frozen=True)
class Function:
    """One function: where it is, its length in lines and its parameter count."""

    path: str
    name: str
    line: int
    lines: int
    params: int


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Every name the function takes, `self` / `cls` of a method not counted."""
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return n - 1 if names and names[0].arg in ("self", "cls") else n


def functions(package_dir: Path) -> list[Function]:
    """Every function and method in the package's .py files."""
    out = []
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(package_dir.parent))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(Function(rel, node.name, node.lineno, node.end_lineno - node.lineno + 1,
                                    parameter_count(node)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=LINES, help=f"the line limit (default {LINES})")
    ap.add_argument("--package", type=Path, default=ROOT / "respec", help="the package to read (default: respec/)")
    args = ap.parse_args(argv)
    found = functions(args.package)
    long = sorted((f for f in found if f.lines > args.lines), key=lambda f: -f.lines)
    many = sorted((f for f in found if f.params > MAX_PARAMS), key=lambda f: -f.params)
    print(f"{len(found)} functions; over {args.lines} lines: {len(long)} (at most {MAX_LONG}); "
          f"over {MAX_PARAMS} parameters: {len(many)} (none)")
    for f in long:
        print(f"  {f.lines:4d} lines  {f.path}:{f.line} {f.name}")
    for f in many:
        print(f"  {f.params:4d} params {f.path}:{f.line} {f.name}")
    return 1 if len(long) > MAX_LONG or many else 0


if __name__ == "__main__":
    sys.exit(main())
