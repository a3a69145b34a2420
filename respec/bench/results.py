"""The benchmark's results file: one JSON object per line, appended as each scenario finishes.

Every append is one `write` of a whole line on a file opened with O_APPEND, followed by fsync,
under an exclusive lock (where the OS has one), so a crash, a SIGKILL or Ctrl-C loses at most
the scenario that was running and never leaves half a row in the middle of the file. A torn
last line (power loss during the write) is cut off on the next append and ignored by readers.
Rows are keyed by scenario x config x editor (`row_key`); an append whose key is already in the
file is dropped, so a resumed run never duplicates a row. The keys are read once and then kept in
memory; under the lock an append reads only the bytes other processes added since, so its cost
does not grow with the file.
"""
from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .. import paths
from ..errors import InputError
from ..records import json_safe

ROW_SCHEMA = 1


def results_path(results_file: str) -> Path:
    """Where a workflow's results file goes: a relative .jsonl path confined to the results folder
    (inside ComfyUI's output folder); a workflow value never names a file anywhere else."""
    rel = results_file.strip() or "bench/results.jsonl"
    if not rel.endswith(".jsonl"):
        raise InputError(f"results_file {results_file!r} must end in .jsonl and lie inside ComfyUI's output "
                         f"folder (e.g. bench/results.jsonl)")
    return paths.confine(rel, paths.results_dir(), "results_file")


def row_key(row: dict) -> str:
    """The identity of a result: dataset / scenario / config / editor."""
    try:
        return "|".join(str(row[k]) for k in ("dataset", "scenario_id", "config", "editor"))
    except KeyError as e:
        raise InputError(f"a results row needs dataset, scenario_id, config and editor; missing {e}") from None


@contextmanager
def _locked(fd: int, shared: bool = False) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: one writer per results file is the documented rule there
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
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


def _key_of(row: dict) -> str | None:
    try:
        return row.get("key") or row_key(row)
    except InputError:
        return None


class ResultsFile:
    """An append-only JSONL results file (see the module docstring for the guarantees).

    The keys of the rows in the file are kept in memory together with how many bytes of the file
    they cover: an append reads only what another process added since (the file grew under the
    lock) and so costs the same at 10 rows as at 10,000. A file that shrank or was replaced is
    read again from the start.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.skipped_lines = 0
        self._keys: set[str] = set()
        self._covered = 0          # bytes of the file (whole lines) whose keys are in _keys
        self._file_id: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def rows(self) -> list[dict]:
        """Every complete row, in file order (a torn or unparseable line is skipped and counted)."""
        if not self.path.exists():
            return []
        rows, self.skipped_lines = _read_lines(self.path.read_bytes())
        return rows

    def done_keys(self) -> set[str]:
        """Keys of the rows already written (what a resumed run skips)."""
        if not self.path.exists():
            return set()
        with self._lock:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                with _locked(fd, shared=True):
                    self._catch_up(fd, cut_torn_tail=False)
            finally:
                os.close(fd)
            return set(self._keys)

    def _catch_up(self, fd: int, cut_torn_tail: bool) -> None:
        """Bring the in-memory keys up to the file's current end (call under the file lock)."""
        st = os.fstat(fd)
        file_id = (st.st_dev, st.st_ino)
        if file_id != self._file_id or st.st_size < self._covered:
            self._keys, self._covered, self._file_id = set(), 0, file_id   # replaced or cut: start over
        if st.st_size == self._covered:
            return
        os.lseek(fd, self._covered, os.SEEK_SET)
        chunks, want = [], st.st_size - self._covered
        while want > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            want -= len(chunk)
        data = b"".join(chunks)
        whole = data.rfind(b"\n") + 1
        if whole < len(data) and cut_torn_tail:
            # A crash tore the last line: cut it so the next row starts on its own line.
            os.ftruncate(fd, self._covered + whole)
        rows, _ = _read_lines(data[:whole])
        self._keys.update(k for k in map(_key_of, rows) if k is not None)
        self._covered += whole

    def append(self, row: dict) -> bool:
        """Write `row` as one line; False (and nothing written) when its key is already there."""
        row = json_safe(dict(row))
        row.setdefault("schema", ROW_SCHEMA)
        row["key"] = row.get("key") or row_key(row)
        line = (json.dumps(row, ensure_ascii=False, sort_keys=False, allow_nan=False) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                with _locked(fd):
                    self._catch_up(fd, cut_torn_tail=True)
                    if row["key"] in self._keys:
                        return False
                    view = memoryview(line)
                    while view:
                        view = view[os.write(fd, view):]
                    os.fsync(fd)
                    self._keys.add(row["key"])
                    self._covered += len(line)
                    return True
            finally:
                os.close(fd)


_OPEN: dict[str, ResultsFile] = {}
_OPEN_LOCK = threading.Lock()


def open_results(path: str | Path) -> ResultsFile:
    """The process-wide ResultsFile of `path`, so repeated appends (one per queued prompt in a
    ComfyUI server) reuse its in-memory keys instead of reading the file each time."""
    resolved = str(Path(path).expanduser().resolve())
    with _OPEN_LOCK:
        rf = _OPEN.get(resolved)
        if rf is None:
            rf = _OPEN[resolved] = ResultsFile(resolved)
        return rf


def check_run_identity(out_dir: str | Path, identity: dict, record: dict | None = None, *,
                       write: bool = True) -> None:
    """Refuse to add rows to `out_dir` when its run.json records other values for the settings in
    `identity` (the ones that change the numbers), then (unless write=False: only the check)
    record them there (merged with the ones another kind of run recorded) with `record` beside them."""
    path = Path(out_dir) / "run.json"
    old: dict = {}
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8")).get("identity", {})
        except (OSError, json.JSONDecodeError, AttributeError):
            old = {}
    diff = {k: (old.get(k), v) for k, v in identity.items() if k in old and old.get(k) != v}
    if diff:
        lines = "; ".join(f"{k}: {_plain(a)} there, {_plain(b)} now" for k, (a, b) in diff.items())
        raise InputError(f"{out_dir} holds results made with other settings ({lines}); resuming would mix "
                         f"incomparable rows. Use another --out folder (or the same settings).")
    if not write:
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".run.{os.getpid()}.json.tmp")
    tmp.write_text(json.dumps({**(record or {}), "identity": {**old, **identity}}, indent=2, default=str),
                   encoding="utf-8")
    os.replace(tmp, path)


def _plain(v) -> str:
    """A setting as a person writes it: 512, flux2, none, a, b (not 'flux2' or ['a', 'b'])."""
    if v is None:
        return "none"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(_plain, v)) or "none"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_plain(x)}" for k, x in v.items()) or "none"
    return str(v)
