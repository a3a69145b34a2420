#!/usr/bin/env python
"""Three rules of the code's layout (refactor 3, docs/STYLE in ../shared), checked on the source text:

    private imports   a module's private names (`_name`) stay in it: no `from x import _name`
    module caches     no module-level memo (functools.lru_cache / cache) and no module-level LRU:
                      state that outlives a call has one owner that is passed in (the analysis
                      cache, respec/pixels/analysis_cache.py; the model cache, respec/models.py)
    alignment reads   a change record's or a turn's stored alignment (`info["alignment"]`,
                      `.get("alignment")`) is read in respec/pixels/change_record.py only

    python scripts/dev/code_rules.py [ROOT ...]     (default: respec/ and nodes/); exit 1 on a finding
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

# The one owner of each kind of lasting state: they may hold an LRU at module level.
CACHE_OWNERS = ("respec/pixels/analysis_cache.py", "respec/models.py")
ALIGNMENT_READER = "respec/pixels/change_record.py"
MEMO_DECORATORS = {"lru_cache", "cache"}


def _files(roots: list[Path]) -> list[Path]:
    return sorted(p for r in roots for p in (r.rglob("*.py") if r.is_dir() else [r]))


def _rel(p: Path, base: Path) -> str:
    try:
        return p.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def _decorator_name(d: ast.expr) -> str:
    d = d.func if isinstance(d, ast.Call) else d
    return d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else ""


def _is_lru_call(v: ast.expr | None) -> bool:
    return isinstance(v, ast.Call) and _decorator_name(v) == "LRU"


def findings(roots: list[Path], base: Path) -> list[str]:
    """Every breach of the three rules under `roots` (paths shown relative to `base`)."""
    out = []
    for p in _files(roots):
        rel = _rel(p, base)
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                priv = [a.name for a in n.names if a.name.startswith("_") and not a.name.startswith("__")]
                if priv:
                    out.append(f"{rel}:{n.lineno}: private import of {', '.join(priv)} from {n.module or '.'}")
            elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "alignment" \
                    and isinstance(n.ctx, ast.Load) and rel != ALIGNMENT_READER:
                out.append(f"{rel}:{n.lineno}: reads [\"alignment\"] (read it through {ALIGNMENT_READER})")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
                    and isinstance(n.args[0], ast.Constant) and n.args[0].value == "alignment" \
                    and rel != ALIGNMENT_READER:
                out.append(f"{rel}:{n.lineno}: reads .get(\"alignment\") (read it through {ALIGNMENT_READER})")
        for n in tree.body:     # module level only: a function's own memo is not module state
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                memo = [d for d in n.decorator_list if _decorator_name(d) in MEMO_DECORATORS]
                if memo:
                    out.append(f"{rel}:{n.lineno}: module-level memo on {n.name} (keep it in the analysis cache)")
            elif isinstance(n, (ast.Assign, ast.AnnAssign)) and _is_lru_call(n.value) and rel not in CACHE_OWNERS:
                out.append(f"{rel}:{n.lineno}: module-level cache (keep it in the analysis cache)")
    return out


def main(argv: list[str]) -> int:
    base = Path(__file__).resolve().parents[2]
    roots = [Path(a) for a in argv] or [base / "respec", base / "nodes"]
    found = findings(roots, base)
    for line in found:
        print(line)
    print(f"{len(found)} finding(s) in {len(_files(roots))} files")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
