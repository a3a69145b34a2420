"""Compare two benchmark results files key by key, leaving out what differs between any two runs.

    python scripts/bench/compare_rows.py runs/before/results.jsonl runs/after/results.jsonl

Rows are matched by their `key` (dataset|scenario|config|editor). Every other field is compared
recursively (scores to the last bit), except timings and run-specific paths
(respec.bench.shards.VOLATILE_FIELDS, at any depth). Exit status 0 when every row matches.

Compare runs made with the same `--threads` (e.g. both `bash scripts/bench.sh --threads 1`): LPIPS's
float sums depend on torch's thread count, so a 1-thread and a 2-thread run of the same code differ
in LPIPS (and the scores built on it) by about 1e-10 while every image is byte-identical.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from respec.bench.shards import VOLATILE_FIELDS, comparable, differences  # noqa: E402


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="results.jsonl (or its folder) of the earlier run")
    ap.add_argument("after", type=Path, help="results.jsonl (or its folder) of the later run")
    args = ap.parse_args(argv)
    before, after = load(args.before), load(args.after)
    missing, extra = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    diffs = {k: differences(comparable(before[k]), comparable(after[k])) for k in sorted(set(before) & set(after))}
    changed = {k: d for k, d in diffs.items() if d}
    print(f"rows: {len(before)} before, {len(after)} after; compared {len(diffs)} by key "
          f"(ignoring {', '.join(sorted(VOLATILE_FIELDS))} at any depth; first = before)")
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
