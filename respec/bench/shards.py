"""Splitting one benchmark run over independent jobs, and putting the pieces back together.

`--shard i/N` gives job i a deterministic share of the work: whole scenarios, chosen by a hash of
(dataset, scenario id), so that all configs of a scenario stay in one job (they share their
prefix turns, see `respec.bench.prefix`) and the shards of one run never overlap. The union of
shards 1..N is the whole run.

`merge` joins results folders into one: rows are deduplicated by key; two rows with the same key
that disagree on anything but timings are a conflict and nothing is written; folders made with
different settings (run.json's identity) are refused, since their rows are not comparable.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .results import ResultsFile

# Row fields that measure time or place, not the result: they may differ between two runs of
# the same key (and between a shared-prefix run and separate runs) without the rows disagreeing.
# (`images` holds paths relative to the results folder, which differ only between folder layouts.)
VOLATILE_FIELDS = frozenset({"seconds", "finished_at", "seconds_per_step", "schema", "images"})

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Job `index` (1-based) of `count`."""
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, dataset: str, scenario_id: str) -> bool:
        """Whether this shard runs the scenario (every config of it)."""
        return zlib.crc32(f"{dataset}|{scenario_id}".encode("utf-8")) % self.count == self.index - 1


def parse_shard(spec: str | None) -> Shard | None:
    """'2/8' -> Shard(2, 8); None or '' -> None (the whole run)."""
    if spec is None or spec == "":
        return None
    m = _SHARD.match(str(spec))
    if not m:
        raise InputError(f"--shard takes i/N with 1 <= i <= N (e.g. 2/8), got {spec!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if not 1 <= i <= n:
        raise InputError(f"--shard {spec}: i must be between 1 and N (got i={i}, N={n})")
    return Shard(i, n)


def comparable(value):
    """A row (or part of one) without its volatile fields, at every depth: what two runs of the
    same key must agree on."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in VOLATILE_FIELDS}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def differences(a, b, where: str = "") -> list[str]:
    """Where two comparable values differ: one line per differing leaf, its path and both values
    (NaN equals NaN here)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'second' if k in b else 'first'}")
            else:
                out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items in the first, {len(b)} in the second"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if a != b and not (a != a and b != b):
        return [f"{where or '(row)'}: {a!r} in the first, {b!r} in the second"]
    return []


@dataclass
class MergeSummary:
    """What merge_results wrote."""
    into: str
    rows: int
    duplicates: int
    per_source: dict
    errors: int


def _identity(folder: Path) -> dict | None:
    path = folder / "run.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("identity")
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path} is damaged ({e}); it records the settings the rows were made with. "
                         f"Restore it or leave that folder out of the merge.") from None


def _results_folder(path: str | Path) -> Path:
    p = Path(path)
    if p.is_file() and p.name == "results.jsonl":
        p = p.parent
    if not any((p / name).is_file() for name in ("results.jsonl", "errors.jsonl")):
        raise InputError(f"{p} holds no results.jsonl (nor errors.jsonl); give the output folders of "
                         f"`python -m respec bench` runs")
    return p


def merge_results(sources: list[str | Path], into: str | Path) -> MergeSummary:
    """Merge the results folders `sources` into `into` (rows, errors of keys that have no row,
    images, run.json). Refuses mixed settings and conflicting rows before writing anything."""
    if not sources:
        raise InputError("merge needs at least one results folder")
    folders = [_results_folder(s) for s in sources]
    into = Path(into)
    if any(f.resolve() == into.resolve() for f in folders):
        raise InputError(f"--into {into} is also one of the folders to merge; choose a new folder")

    identities = {str(f): _identity(f) for f in folders}
    known = {json.dumps(i, sort_keys=True) for i in identities.values() if i is not None}
    if len(known) > 1:
        lines = "; ".join(f"{f}: {json.dumps(i, sort_keys=True)}" for f, i in identities.items())
        raise InputError(f"these folders were made with different settings, so their rows are not comparable: "
                         f"{lines}. Merge only shards of one run.")

    rows: dict[str, dict] = {}
    origin: dict[str, Path] = {}
    per_source: dict[str, int] = {}
    duplicates = 0
    for f in folders:
        found = ResultsFile(f / "results.jsonl").rows()
        per_source[str(f)] = len(found)
        for row in found:
            key = row.get("key")
            if not key:
                continue
            if key in rows:
                diff = differences(comparable(rows[key]), comparable(row))
                if diff:
                    raise InputError(f"row {key!r} differs between {origin[key]} (first) and {f} (second): "
                                     f"{'; '.join(diff[:5])}{' ...' if len(diff) > 5 else ''}; "
                                     f"nothing was merged. Re-run that scenario in one place, or leave one "
                                     f"folder out.")
                duplicates += 1
                continue
            rows[key] = row
            origin[key] = f

    existing = into / "results.jsonl"
    if existing.exists() and existing.stat().st_size:
        raise InputError(f"{existing} already has rows; merge into a new, empty folder")
    into.mkdir(parents=True, exist_ok=True)
    for key, row in rows.items():
        for rel in row.get("images") or []:
            src, dst = origin[key] / rel, into / rel
            if src.is_file() and not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    out = ResultsFile(existing)
    for row in rows.values():
        out.append(row)
    errors = 0
    err_out = ResultsFile(into / "errors.jsonl")
    for f in folders:
        for err in ResultsFile(f / "errors.jsonl").rows():
            base_key = str(err.get("key", "")).rsplit("|", 1)[0]
            if base_key not in rows and err_out.append(err):
                errors += 1
    first_manifest = next((f / "run.json" for f in folders if (f / "run.json").exists()), None)
    if first_manifest is not None:
        manifest = json.loads(first_manifest.read_text(encoding="utf-8"))
        manifest["merged_from"] = [str(f) for f in folders]
        manifest.get("settings", {}).pop("shard", None)
        tmp = into / "run.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, into / "run.json")
    return MergeSummary(into=str(into), rows=len(rows), duplicates=duplicates, per_source=per_source,
                        errors=errors)
