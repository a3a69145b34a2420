"""Splitting one benchmark run over independent jobs, and putting the pieces back together.

`--shard i/N` gives job i a deterministic share of the work: whole scenarios, chosen by a hash of
(dataset, scenario id), so that all configs of a scenario stay in one job (they share their
prefix turns, see `respec.bench.prefix`) and the shards of one run never overlap. The union of
shards 1..N is the whole run.

`merge` joins results folders into one: rows are deduplicated by key; two rows with the same key
that disagree on anything but timings are a conflict and nothing is written; folders made with
different settings (run.json's identity) are refused, since their rows are not comparable.
Every input is checked before anything is written (UTF-8, JSON types, string keys, image paths
confined to their folder); merge reads and copies only regular files, never through a symbolic
link (lstat first, then O_NOFOLLOW | O_NONBLOCK, so a FIFO cannot block it), and builds the result
in a private folder beside --into that is renamed into place (--into must be new or empty).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .results import ResultsFile, row_key

# Row fields that measure time or place, not the result: they may differ between two runs of
# the same key (and between a shared-prefix run and separate runs) without the rows disagreeing.
# (`images` holds paths relative to the results folder, which differ only between folder layouts.)
VOLATILE_FIELDS = frozenset({"seconds", "finished_at", "seconds_per_step", "schema", "images",
                             "scores_shared_with"})   # how the work was shared, not what it found

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


def differences(a, b, where: str = "", tol: float = 0.0) -> list[str]:
    """Where two comparable values differ: one line per differing leaf, its path and both values
    (NaN equals NaN here). `tol`: floats this close (absolute, or relative to the larger) count as
    equal, for rows computed in other processes or on other CPUs, whose float rounding differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'second' if k in b else 'first'}")
            else:
                out += differences(a[k], b[k], f"{where}.{k}", tol)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items in the first, {len(b)} in the second"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]", tol)]
    if (tol and isinstance(a, float) and isinstance(b, float)
            and math.isclose(a, b, rel_tol=tol, abs_tol=tol)):
        return []
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


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a plain file"


def _check_regular(path: Path) -> bool:
    """Whether `path` is there (False: absent); a link, FIFO, folder or device is refused by lstat,
    before anything opens it (a FIFO would block, a link would lead outside the folder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise InputError(f"{path} cannot be read ({e.strerror}); fix its permissions or leave that folder out") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{path} is a symbolic link; merge reads only regular files inside the folders it merges "
                         f"(replace the link with the file itself, or leave that folder out)")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path} is not a regular file ({_kind(st.st_mode)}); merge reads only regular files "
                         f"(remove it, or leave that folder out)")
    return True


def _read_bytes(path: Path) -> bytes | None:
    """The bytes of a regular file `path` (None when absent), opened without following a link and
    without blocking, and checked again once open (it may have been swapped since the lstat)."""
    if not _check_regular(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _BINARY)
    except OSError as e:
        raise InputError(f"{path} cannot be opened ({e.strerror}); it changed while merging, or is not a "
                         f"regular file") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{path} is not a regular file; merge reads only regular files")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_text(path: Path) -> str | None:
    data = _read_bytes(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not valid UTF-8 (byte {e.start}: {data[e.start:e.start + 4]!r}); results "
                         f"files are UTF-8 JSON. Restore it or leave that folder out.") from None


def _json_lines(path: Path) -> list[dict]:
    """The rows of a results/errors file: complete lines that parse to an object (a torn or foreign
    line is skipped, as ResultsFile.rows does; one nested too deep to parse counts as foreign)."""
    text = _read_text(path)
    if text is None:
        return []
    rows = []
    complete = text[: text.rfind("\n") + 1]
    for line in complete.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            rows.append(obj)
    return rows


def _key(row: dict, path: Path) -> str | None:
    key = row.get("key")
    if key is None or key == "":
        try:
            return row_key(row)     # a row written without its key (by hand, or an old version)
        except InputError:
            return None
    if not isinstance(key, str):
        raise InputError(f"{path}: a row's key must be a string, got {type(key).__name__} "
                         f"{_short(key)}; the file is damaged. Restore it or leave that folder out.")
    return key


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _image_parts(rel, path: Path, key: str) -> tuple[str, ...]:
    """A row's image path as components confined to its results folder: relative, no '..', no NUL."""
    if not isinstance(rel, str):
        raise InputError(f"{path}: row {key!r} has images entry {_short(rel)}, not a path; images must be a list "
                         f"of paths relative to the results folder")
    parts = tuple(p for p in re.split(r"[\\/]+", rel) if p not in ("", "."))
    if (not parts or rel.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts or "\x00" in rel):
        raise InputError(f"{path}: row {key!r} names the image path {_short(rel)}, which is not a path inside its "
                         f"results folder; merge copies only files inside the folders it merges")
    return parts


def _image_source(folder: Path, parts: tuple[str, ...]) -> Path | None:
    """The regular file `folder/parts` (None when absent); no component may be a link."""
    p = folder
    for i, part in enumerate(parts):
        p = p / part
        if i == len(parts) - 1:
            break
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{p} is a symbolic link; merge copies only files inside the folders it merges "
                             f"(replace the link with the folder itself)")
        if not stat.S_ISDIR(st.st_mode):
            return None
    if not _check_regular(p):
        return None
    if folder.resolve() not in p.resolve().parents:
        raise InputError(f"{p} lies outside {folder}; merge copies only files inside the folders it merges")
    return p


def _copy(src: Path, dst: Path) -> None:
    data = _read_bytes(src)
    if data is None:
        raise InputError(f"{src} disappeared while merging; run merge again")
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _BINARY, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    st = os.stat(src, follow_symlinks=False)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _manifest(folder: Path) -> dict | None:
    """run.json of `folder`, checked: an object whose identity and settings are objects."""
    path = folder / "run.json"
    text = _read_text(path)
    if text is None:
        return None
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise InputError(f"{path} is damaged ({str(e)[:200]}); it records the settings the rows were made with. "
                         f"Restore it or leave that folder out of the merge.") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{path} holds {type(manifest).__name__} {_short(manifest)}, not an object; it records the "
                         f"settings the rows were made with. Restore it or leave that folder out of the merge.")
    for part in ("identity", "settings"):
        if manifest.get(part) is not None and not isinstance(manifest[part], dict):
            raise InputError(f"{path}: {part} must be an object, got {type(manifest[part]).__name__} "
                             f"{_short(manifest[part])}. Restore it or leave that folder out of the merge.")
    return manifest


def _results_folder(path: str | Path) -> Path:
    p = Path(path)
    if p.name == "results.jsonl" and not p.is_dir():
        p = p.parent
    if not p.is_dir():
        raise InputError(f"{p} is not a folder; give the output folders of `python -m respec bench` runs")
    if not any(os.path.lexists(p / name) for name in ("results.jsonl", "errors.jsonl")):
        raise InputError(f"{p} holds no results.jsonl (nor errors.jsonl); give the output folders of "
                         f"`python -m respec bench` runs")
    return p


def _check_target(into: Path) -> None:
    """--into must be absent or an empty real folder: never a link, a file, or a used folder."""
    try:
        st = os.lstat(into)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"--into {into} is a symbolic link; merge writes only into a new folder of its own "
                         f"(give a new folder's path)")
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"--into {into} exists and is not a folder ({_kind(st.st_mode)}); give a new folder's path")
    entries = sorted(os.listdir(into))
    if not entries:
        return
    existing = into / "results.jsonl"
    if "results.jsonl" in entries and existing.is_file() and not existing.is_symlink() and existing.stat().st_size:
        raise InputError(f"{existing} already has rows; merge into a new, empty folder")
    raise InputError(f"--into {into} is not empty (it holds {', '.join(map(repr, entries[:5]))}"
                     f"{' ...' if len(entries) > 5 else ''}); merge into a new, empty folder")


@dataclass
class _Rows:
    """The rows read from the folders to merge: one per key, where each came from, the images to copy."""
    rows: dict = field(default_factory=dict)          # key -> row (the first folder's)
    origin: dict = field(default_factory=dict)        # key -> the folder it came from
    per_source: dict = field(default_factory=dict)    # folder -> rows in its results.jsonl
    copies: dict = field(default_factory=dict)        # image path parts -> the file to copy
    duplicates: int = 0


def merge_results(sources: list[str | Path], into: str | Path) -> MergeSummary:
    """Merge the results folders `sources` into `into` (rows, errors of keys that have no row,
    images, run.json). Every input is read and checked first (types, encodings, keys, image paths
    confined to their folder, no links, only regular files); the result is built in a private
    folder beside `into` and renamed into place, so a refusal or a crash leaves nothing half-merged."""
    if not sources:
        raise InputError("merge needs at least one results folder")
    folders = [_results_folder(s) for s in sources]
    into = Path(into)
    if any(f.resolve() == into.resolve() for f in folders):
        raise InputError(f"--into {into} is also one of the folders to merge; choose a new folder")
    _check_target(into)
    manifest = _one_manifest(folders)             # 1. one run's settings
    merged = _read_rows(folders)                  # 2. the rows (the same key must mean the same row)
    errors_in = _read_errors(folders, merged.rows)   # 3. errors of keys that have no row
    errors = _write_merged(into, folders, merged, errors_in, manifest)   # 4. built aside, renamed into place
    return MergeSummary(into=str(into), rows=len(merged.rows), duplicates=merged.duplicates,
                        per_source=merged.per_source, errors=errors)


def _one_manifest(folders: list[Path]) -> dict | None:
    """A copy of the first run.json among the folders; refuses folders made with different settings."""
    manifests = {str(f): _manifest(f) for f in folders}
    identities = {f: (m or {}).get("identity") for f, m in manifests.items()}
    known = {json.dumps(i, sort_keys=True) for i in identities.values() if i is not None}
    if len(known) > 1:
        lines = "; ".join(f"{f}: {json.dumps(i, sort_keys=True)}" for f, i in identities.items())
        raise InputError(f"these folders were made with different settings, so their rows are not comparable: "
                         f"{lines}. Merge only shards of one run.")
    return next((dict(m) for m in manifests.values() if m is not None), None)


def _read_rows(folders: list[Path]) -> _Rows:
    """Every folder's rows, checked; a key found twice must hold the same row (then it counts as a duplicate)."""
    got = _Rows()
    for f in folders:
        path = f / "results.jsonl"
        found = _json_lines(path)
        got.per_source[str(f)] = len(found)
        for row in found:
            key = _key(row, path)
            if key is None:
                continue
            images = row.get("images")
            if images is not None and not isinstance(images, list):
                raise InputError(f"{path}: row {key!r} has images {_short(images)}, not a list of paths relative to "
                                 f"the results folder; the file is damaged. Restore it or leave that folder out.")
            parts = [_image_parts(rel, path, key) for rel in images or []]
            if key in got.rows:
                diff = differences(comparable(got.rows[key]), comparable(row))
                if diff:
                    raise InputError(f"row {key!r} differs between {got.origin[key]} (first) and {f} (second): "
                                     f"{'; '.join(diff[:5])}{' ...' if len(diff) > 5 else ''}; "
                                     f"nothing was merged. Re-run that scenario in one place, or leave one "
                                     f"folder out.")
                got.duplicates += 1
                continue
            got.rows[key] = row
            got.origin[key] = f
            for p in parts:
                src = _image_source(f, p)
                if src is not None:
                    got.copies.setdefault(p, src)
    return got


def _read_errors(folders: list[Path], rows: dict) -> list[dict]:
    """The folders' errors.jsonl entries whose key has no row (a retry elsewhere may have made one)."""
    errors_in: list[dict] = []
    for f in folders:
        path = f / "errors.jsonl"
        for err in _json_lines(path):
            key = err.get("key", "")
            if not isinstance(key, str):
                raise InputError(f"{path}: an error's key must be a string, got {type(key).__name__} {_short(key)}; "
                                 f"the file is damaged. Restore it or leave that folder out.")
            if key.rsplit("|", 1)[0] not in rows:
                errors_in.append(err)
    return errors_in


def _write_merged(into: Path, folders: list[Path], merged: _Rows, errors_in: list[dict],
                  manifest: dict | None) -> int:
    """Write the merged folder beside `into`, then rename it into place; the number of errors written."""
    parent = into.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{into.name}.merging-", dir=parent))
    except OSError as e:
        raise InputError(f"cannot create the merged folder beside {into} ({e.strerror}); choose a folder you can "
                         f"write to") from None
    try:
        for p, src in merged.copies.items():
            _copy(src, tmp.joinpath(*p))
        out = ResultsFile(tmp / "results.jsonl")
        for row in merged.rows.values():
            out.append(row)
        err_out = ResultsFile(tmp / "errors.jsonl")
        errors = sum(1 for err in errors_in if err_out.append(err))
        if manifest is not None:
            manifest["merged_from"] = [str(f) for f in folders]
            manifest["settings"] = {k: v for k, v in (manifest.get("settings") or {}).items() if k != "shard"}
            (tmp / "run.json").write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        _place(tmp, into)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise InputError(f"merging into {into} failed ({e}); nothing was merged") from None
        raise
    return errors


def _place(tmp: Path, into: Path) -> None:
    """Rename the finished folder onto `into` (absent, or an empty folder that rename replaces)."""
    try:
        os.rename(tmp, into)
        return
    except OSError:
        if not into.is_dir() or into.is_symlink() or any(into.iterdir()):
            raise InputError(f"--into {into} changed while merging (it is no longer absent or empty); "
                             f"nothing was merged. Merge into a new, empty folder.") from None
    os.rmdir(into)      # Windows: rename does not replace an empty folder
    os.rename(tmp, into)
