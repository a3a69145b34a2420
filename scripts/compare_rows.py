"""Compare two benchmark results files key by key, leaving out what differs between any two runs.

    python scripts/compare_rows.py runs/before/results.jsonl runs/after/results.jsonl

Rows are matched by their `key` (dataset|scenario|config|editor). Every other field is compared
recursively (scores to the last bit), except timings and run-specific paths: `seconds` at any
depth, `finished_at`, `images`, and a plan's own `seconds`. Exit status 0 when every row matches.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IGNORED = {"seconds", "finished_at", "images"}


def load(path: Path) -> dict[str, dict]:
    if path.is_dir():
        path = path / "results.jsonl"
    rows = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            if row.get("key") in rows:
                raise SystemExit(f"{path}:{n}: key {row['key']!r} appears twice")
            rows[row["key"]] = row
    return rows


def differences(a, b, where: str = "") -> list[str]:
    """Paths (a.b[2].c) at which a and b differ, ignoring the IGNORED keys at any depth."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in IGNORED:
                continue
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'after' if k not in a else 'before'}")
            else:
                out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if a != b and not (a != a and b != b):       # NaN == NaN here
        return [f"{where}: {a!r} before, {b!r} after"]
    return []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="results.jsonl (or its folder) of the earlier run")
    ap.add_argument("after", type=Path, help="results.jsonl (or its folder) of the later run")
    args = ap.parse_args(argv)
    before, after = load(args.before), load(args.after)
    missing, extra = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    diffs = {k: differences(before[k], after[k]) for k in sorted(set(before) & set(after))}
    changed = {k: d for k, d in diffs.items() if d}
    print(f"rows: {len(before)} before, {len(after)} after; compared {len(diffs)} by key "
          f"(ignoring {', '.join(sorted(IGNORED))} at any depth)")
    for k in missing:
        print(f"  only before: {k}")
    for k in extra:
        print(f"  only after:  {k}")
    for k, d in changed.items():
        print(f"  {k}: {len(d)} difference(s)")
        for line in d[:20]:
            print(f"    {line}")
    same = len(diffs) - len(changed)
    print(f"identical rows: {same} of {len(diffs)}; differing: {len(changed)}; "
          f"missing: {len(missing)}; extra: {len(extra)}")
    return 0 if not (changed or missing or extra) else 1


if __name__ == "__main__":
    sys.exit(main())
