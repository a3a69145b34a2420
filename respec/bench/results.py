"""The benchmark's results file: one JSON object per line, appended as each scenario finishes.

Every append is one `write` of a whole line on a file opened with O_APPEND, followed by fsync,
under an exclusive lock (where the OS has one), so a crash, a SIGKILL or Ctrl-C loses at most
the scenario that was running and never leaves half a row in the middle of the file. A torn
last line (power loss during the write) is cut off on the next append and ignored by readers.
Rows are keyed by scenario x config x editor (`row_key`); an append whose key is already in the
file is dropped, so a resumed run never duplicates a row.
"""
from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..errors import InputError

ROW_SCHEMA = 1


def row_key(row: dict) -> str:
    """The identity of a result: dataset / scenario / config / editor."""
    try:
        return "|".join(str(row[k]) for k in ("dataset", "scenario_id", "config", "editor"))
    except KeyError as e:
        raise InputError(f"a results row needs dataset, scenario_id, config and editor; missing {e}") from None


def json_safe(v: Any) -> Any:
    """NaN/inf -> None (strict JSON has no NaN); numpy scalars -> Python numbers."""
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if hasattr(v, "item") and callable(v.item) and getattr(v, "shape", None) == ():
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: one writer per results file is the documented rule there
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _read_lines(data: bytes) -> tuple[list[dict], int]:
    """Complete, parseable rows and the count of lines that were not (torn or foreign)."""
    rows, bad = [], 0
    complete = data[: data.rfind(b"\n") + 1] if b"\n" in data else b""
    if len(complete) < len(data):
        bad += 1   # a torn tail without its newline
    for line in complete.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            bad += 1
    return rows, bad


class ResultsFile:
    """An append-only JSONL results file (see the module docstring for the guarantees)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.skipped_lines = 0

    def rows(self) -> list[dict]:
        """Every complete row, in file order (a torn or unparseable line is skipped and counted)."""
        if not self.path.exists():
            return []
        rows, self.skipped_lines = _read_lines(self.path.read_bytes())
        return rows

    def done_keys(self) -> set[str]:
        """Keys of the rows already written (what a resumed run skips)."""
        keys = set()
        for r in self.rows():
            try:
                keys.add(r.get("key") or row_key(r))
            except InputError:
                continue
        return keys

    def append(self, row: dict) -> bool:
        """Write `row` as one line; False (and nothing written) when its key is already there."""
        row = json_safe(dict(row))
        row.setdefault("schema", ROW_SCHEMA)
        row["key"] = row.get("key") or row_key(row)
        line = (json.dumps(row, ensure_ascii=False, sort_keys=False, allow_nan=False) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with _locked(fd):
                size = os.fstat(fd).st_size
                data = b""
                if size:
                    os.lseek(fd, 0, os.SEEK_SET)
                    data = os.read(fd, size)
                    while len(data) < size:
                        chunk = os.read(fd, size - len(data))
                        if not chunk:
                            break
                        data += chunk
                if data and not data.endswith(b"\n"):
                    # A crash tore the last line: cut it so the new row starts on its own line.
                    os.ftruncate(fd, data.rfind(b"\n") + 1)
                    data = data[: data.rfind(b"\n") + 1]
                existing, _ = _read_lines(data)
                if any((r.get("key") or "") == row["key"] for r in existing):
                    return False
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                return True
        finally:
            os.close(fd)
