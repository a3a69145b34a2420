"""Persistent editing sessions: an artist's conversation that spans many ComfyUI prompts.

Layout of a store directory (default: <ComfyUI user dir>/respec/sessions, standalone
<RESPEC_HOME>/sessions, or RESPEC_SESSIONS_DIR):

    sessions.sqlite3            SQLite in WAL mode: sessions and turns (text, plan, meta, digests)
    images/ab/<sha256>.png      every image once, named by its content hash (respec.images.content_hash)

Guarantees (tests/test_history_store.py checks each one):
- An image file is complete (temp file + fsync + rename) before the transaction that refers to
  it commits, so a committed turn never points at a half-written PNG. A process killed in the
  middle of an append leaves at most an unreferenced PNG behind (harmless; `gc` removes it).
- Every change runs in one `BEGIN IMMEDIATE` transaction that also assigns the turn index, so
  concurrent appends from several processes serialise: nothing is lost, nothing interleaves.
- Each change bumps the session's version (never decreasing); together with a lineage id (new on
  creation and on rewind) it is the cache key for ComfyUI (IS_CHANGED) and for this process's history cache.
- A new store file appears complete: it is built under a temporary name (schema, WAL mode) and
  hard-linked into place, so several processes opening a store that does not exist yet all
  succeed, and no process ever sees a half-made store. Its identity (tables and schema version)
  is read in one statement; busy states are retried within the store's timeout.
- A file that is not a ReSpec store (random bytes, another program's database, a newer schema,
  an empty 0-byte file) raises StoreError saying so; the file is never modified.
- Loading a session decodes no image: turns carry LazyStoredImage values that decode their PNG
  (and verify its hash) the first time their pixels are read. A cold load reads only the latest
  turn's row; the earlier rows are read together when one of them is first asked for
  (StoredTurns), so opening a long session costs what opening a short one does.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from contextlib import contextmanager
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from PIL import Image

from . import paths
from .errors import InputError, StoreError
from .history import History, StoredImage, Turn, TurnMask, check_masks
from .images import as_array, as_pil, content_hash, open_image
from .plan import Plan

SCHEMA_VERSION = 2   # 1: sessions and turns; 2: + turn_masks (per-turn change / reveal masks)
APP_ID = "respec-session-store"
DB_NAME = "sessions.sqlite3"
MAX_KEY_LEN = 256

_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_BASE_ARRAY = StoredImage.__dict__["array"]   # the slot that holds a decoded array


def _checkpoint(point: str) -> None:
    """No-op. Crash-safety tests replace it to stop a process at a named point of a write
    ("image_written": PNG on disk, no transaction yet; "before_commit": turn inserted, not committed)."""


def turn_number(k: Any) -> int:
    """`k` if it is a real integer (Python or numpy, not bool); InputError otherwise. Text and
    floats are refused rather than guessed at ("1", 1.7)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputError(f"turn must be a whole number (an integer like 2), got {repr(k)[:40]}")
    return int(k)


def validate_session_id(s: Any) -> str:
    """Return `s` if it is a safe session id ([A-Za-z0-9_-], 1 to 64 characters); InputError otherwise."""
    if not isinstance(s, str) or not _SESSION_ID.fullmatch(s):
        shown = repr(s) if not isinstance(s, str) or len(s) <= 80 else repr(s[:80] + "...")
        raise InputError(
            f"session id {shown} is not allowed: use 1 to 64 characters, each a letter A-Z or a-z, "
            "a digit 0-9, '_' or '-' (no spaces, dots, slashes or other path characters), "
            "e.g. 'portrait-2' or 'kitchen_edit'")
    return s


def _root_path(root: str | os.PathLike) -> Path:
    """A store folder given by the caller, resolved; a NUL or unencodable character is an InputError."""
    text = os.fspath(root)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise InputError(f"the session store folder {text!r} contains a NUL character; give a folder path without it")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise InputError(f"the session store folder {text!r} holds characters this system cannot use in a path; "
                         f"give another folder") from None
    return Path(text).expanduser().resolve()


def default_root() -> Path:
    """Where sessions live unless told otherwise: RESPEC_SESSIONS_DIR, else <user dir>/sessions."""
    return paths.sessions_dir()


# ------------------------------------------------------------------------------- image files

class LazyStoredImage(StoredImage):
    """A StoredImage whose pixels stay in their PNG until first read (then kept, read-only).

    Loading a long session therefore costs no decoding; the size is known without decoding.
    Pickling or deep-copying yields a plain StoredImage with the pixels.
    """

    __slots__ = ("_files", "_shape", "__weakref__")

    def __init__(self, files: "ImageFiles", digest: str, shape: tuple[int, int, int],
                 array: np.ndarray | None = None):
        self.digest = digest
        self._files = files
        self._shape = tuple(int(x) for x in shape)
        if array is not None:
            _BASE_ARRAY.__set__(self, array)

    @property
    def array(self) -> np.ndarray:  # type: ignore[override]
        try:
            return _BASE_ARRAY.__get__(self, StoredImage)
        except AttributeError:
            arr = self._files.get(self.digest)
            _BASE_ARRAY.__set__(self, arr)
            return arr

    @property
    def decoded(self) -> bool:
        """True once the pixels are in memory."""
        try:
            _BASE_ARRAY.__get__(self, StoredImage)
            return True
        except AttributeError:
            return False

    @property
    def shape(self) -> tuple[int, int, int]:
        """(height, width, channels) without decoding."""
        return self._shape

    @property
    def size(self) -> tuple[int, int]:
        return (self._shape[1], self._shape[0])

    def __reduce__(self):
        return (StoredImage, (self.array, self.digest))

    def __repr__(self) -> str:
        return f"LazyStoredImage({self._shape}, {self.digest[:10]}, decoded={self.decoded})"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ImageFiles:
    """Content-addressed, lossless PNG files: `<dir>/<d[:2]>/<digest>.png`, one per distinct image.

    L, RGB and RGBA uint8 images (H×W×C, C = 1, 3, 4) of any size round-trip bit-identically;
    a (B,H,W,C) stack is stored as one file per frame (`put_frames` / `get_frames`).
    """

    def __init__(self, directory: Path, compress_level: int = 4):
        self.dir = Path(directory)
        self.compress_level = int(compress_level)
        self._live: "weakref.WeakValueDictionary[str, LazyStoredImage]" = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def path(self, digest: str) -> Path:
        """Where the PNG of `digest` lives (whether or not it exists)."""
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise InputError(f"{digest!r} is not an image digest (64 lowercase hex characters)")
        return self.dir / digest[:2] / f"{digest}.png"

    def put(self, image: Any) -> LazyStoredImage:
        """Store an image (array, PIL or StoredImage) once; return it as a shared stored image."""
        src = StoredImage.of(image)
        arr = src.array
        path = self.path(src.digest)
        if path.exists():
            # Fresh mtime: `gc` only removes unreferenced files older than its age limit, so a
            # file about to be referenced by a transaction in progress is never collected.
            try:
                os.utime(path)
            except OSError:
                pass
        else:
            buf = BytesIO()
            as_pil(arr).save(buf, format="PNG", compress_level=self.compress_level)
            self._write_atomic(path, buf.getvalue())
        return self._share(src.digest, arr.shape, arr)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise StoreError(f"could not write image file {path}: {e}. Check free disk space and "
                             f"that the store directory {self.dir.parent} is writable.") from e
        _fsync_dir(path.parent)

    def _share(self, digest: str, shape, array: np.ndarray | None = None) -> LazyStoredImage:
        with self._lock:
            img = self._live.get(digest)
            if img is None:
                img = LazyStoredImage(self, digest, shape, array)
                self._live[digest] = img
            elif array is not None and not img.decoded:
                _BASE_ARRAY.__set__(img, array)
            return img

    def lazy(self, digest: str, shape) -> LazyStoredImage:
        """The stored image `digest` without decoding it (shared with every other holder)."""
        return self._share(digest, shape)

    def get(self, digest: str) -> np.ndarray:
        """Decode the PNG of `digest` into a read-only uint8 H×W×C array, checking its hash. A file
        that is a link leading outside the store is refused, whatever it holds."""
        path = self.path(digest)
        if path.is_symlink():
            try:
                inside = path.resolve().is_relative_to(self.dir.resolve())
            except OSError:
                inside = False
            if not inside:
                raise StoreError(f"image file {path} is a link to a file outside the store; ReSpec "
                                 "reads only the store's own files. Replace the link with the file.")
        try:
            # The pack's one opener; the store's own images are not held to the photo size limit.
            arr = as_array(open_image(path, "image file", max_pixels=None))
        except InputError as e:
            if not os.path.lexists(path):
                raise StoreError(f"image file {path} is missing: the store directory {self.dir.parent} "
                                 "was changed outside ReSpec. Restore the file or rewind the session "
                                 "before the turn that uses it.") from e
            raise StoreError(f"image file {path} is damaged ({e}); restore it from a backup or "
                             "rewind the session before the turn that uses it.") from e
        except (OSError, ValueError) as e:
            raise StoreError(f"image file {path} is damaged ({e}); restore it from a backup or "
                             "rewind the session before the turn that uses it.") from e
        if arr.flags.writeable:
            arr.flags.writeable = False
        if content_hash(arr) != digest:
            raise StoreError(f"image file {path} does not hold the image it is named after "
                             "(damaged or replaced); restore it or rewind the session.")
        return arr

    def put_frames(self, images: Any) -> list[str]:
        """Store a (B,H,W,C) uint8 stack (or a list of images), one PNG per frame; return digests."""
        if isinstance(images, np.ndarray):
            if images.ndim != 4:
                raise InputError(f"expected a (B,H,W,C) stack, got shape {images.shape}")
            frames = list(images)
        else:
            frames = list(images)
        if not frames:
            raise InputError("no frames to store")
        return [self.put(f).digest for f in frames]

    def get_frames(self, digests: list[str]) -> np.ndarray:
        """The (B,H,W,C) stack stored by `put_frames` (frames must share a shape)."""
        arrs = [self.get(d) for d in digests]
        if not arrs:
            raise InputError("no frames to load")
        if len({a.shape for a in arrs}) != 1:
            raise InputError(f"frames differ in shape: {sorted({a.shape for a in arrs})}")
        return np.stack(arrs)


# ------------------------------------------------------------------------------- helpers

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str, what: str) -> str:
    """`text` if SQLite can store it as UTF-8; a lone surrogate (which a JSON string such as
    "\\ud800" can carry, but no UTF-8 text can) is refused with an InputError naming `what`, the
    same for requests, instructions, plans and meta keys or values."""
    m = _SURROGATE.search(text)
    if m:
        raise InputError(f"{what} holds a lone surrogate (U+{ord(m.group(0)):04X}) at character {m.start()}, "
                         f"which is not valid Unicode text and cannot be stored; remove that character (it "
                         f"usually comes from text cut in the middle of an emoji)")
    return text


def _json_dict(value: Any, what: str) -> tuple[dict, str]:
    """(normalised dict, JSON text): what a reload would give, so cached and loaded agree."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object (dict), got {type(value).__name__}")
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InputError(f"{what} must be JSON-serialisable: {e}") from e
    return json.loads(text), storable_text(text, f"{what} (a key or a value)")


def _plan_json(plan: Plan | None) -> tuple[Plan | None, str | None]:
    if plan is None:
        return None, None
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a respec Plan (RESPEC_PLAN), got {type(plan).__name__}")
    try:
        text = json.dumps(plan.to_dict(), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InputError(f"the plan holds a value that cannot be stored as JSON: {e}") from e
    return Plan.from_dict(json.loads(text)), storable_text(text, "the plan")


class StoredTurns(Sequence):
    """Turns 0..n-1 of a stored session, of which only the latest ones are in memory.

    The earlier turns (0..start-1) are read from the store, all at once, the first time one of
    them is asked for, so loading the latest turn costs the same whatever the session's length.
    They are read under the lineage the session had when loaded: if it was rewound or re-created
    since, reading them raises StoreError instead of mixing turns of two lineages.
    Pickling or deep-copying gives a plain tuple of turns.
    """

    __slots__ = ("_read", "_lineage", "_start", "_tail", "_head", "_lock")

    def __init__(self, read, lineage: str, start: int, tail: tuple, head: tuple | None = None):
        self._read = read              # read(lineage, stop) -> turns 0..stop-1
        self._lineage = lineage
        self._start = int(start)
        self._tail = tuple(tail)       # turns start..n-1
        self._head = head              # turns 0..start-1, once read
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """True once every turn is in memory."""
        return self._start == 0 or self._head is not None

    def _prefix(self) -> tuple:
        with self._lock:
            if self._head is None:
                self._head = self._read(self._lineage, self._start) if self._start else ()
            return self._head

    def __len__(self) -> int:
        return self._start + len(self._tail)

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1 and start >= self._start:
                return self._tail[start - self._start: max(start, stop) - self._start]
            return (self._prefix() + self._tail)[i]
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"turn index {i} out of range 0..{n - 1}")
        return self._tail[i - self._start] if i >= self._start else self._prefix()[i]

    def __iter__(self):
        if self._start:
            yield from self._prefix()
        yield from self._tail

    def __add__(self, more) -> "StoredTurns":
        return StoredTurns(self._read, self._lineage, self._start, self._tail + tuple(more), self._head)

    def head(self, m: int, lineage: str) -> "StoredTurns":
        """Turns 0..m-1, still lazy, read under `lineage` (a rewind to m-1 keeps those rows)."""
        if m > self._start:
            return StoredTurns(self._read, lineage, self._start, self._tail[: m - self._start], self._head)
        return StoredTurns(self._read, lineage, m, (), None if self._head is None else self._head[:m])

    def __eq__(self, other) -> bool:
        if isinstance(other, (StoredTurns, tuple)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __reduce__(self):
        return (tuple, (tuple(self),))

    def __repr__(self) -> str:
        return f"StoredTurns({len(self)} turns, {len(self._tail)} in memory{', all read' if self.loaded else ''})"


# What upgrades a store of version v-1 to version v (run in one transaction on first open).
_MIGRATIONS = {
    2: [
        # Per-pixel records of a turn (respec.history.TurnMask): an L PNG in images/ plus JSON info.
        """CREATE TABLE turn_masks (
            session_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            name TEXT NOT NULL,         -- "change" (C_t), "reveal_source", ...
            image TEXT NOT NULL,        -- content hash of the mask's PNG
            height INTEGER NOT NULL,
            width INTEGER NOT NULL,
            info TEXT NOT NULL,         -- JSON object: how the mask was made
            PRIMARY KEY (session_id, idx, name)
        )""",
        "CREATE INDEX turn_masks_image ON turn_masks (image)",
    ],
}

_SCHEMA = """
CREATE TABLE store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    lineage TEXT NOT NULL,          -- new on creation and on every rewind: while it stays the
                                    -- same, turns were only appended (lets a cache read new rows only)
    version INTEGER NOT NULL,       -- bumped by every change, never decreases
    n_turns INTEGER NOT NULL,       -- turns 0..n_turns-1 are live
    created REAL NOT NULL,
    updated REAL NOT NULL,
    parent_id TEXT,                 -- set by branch
    parent_turn INTEGER
);
CREATE TABLE turns (
    session_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    instruction TEXT NOT NULL,
    sent_instruction TEXT NOT NULL,
    plan TEXT,                      -- Plan.to_dict() as JSON, or NULL
    meta TEXT NOT NULL,             -- JSON object
    image TEXT NOT NULL,            -- content hash, the PNG is images/<image[:2]>/<image>.png
    height INTEGER NOT NULL,
    width INTEGER NOT NULL,
    channels INTEGER NOT NULL,
    idem_key TEXT,                  -- idempotency key of the append that made this turn
    created REAL NOT NULL,
    PRIMARY KEY (session_id, idx)
);
CREATE UNIQUE INDEX turns_idem ON turns (session_id, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX turns_image ON turns (image);
""" + "".join(f"{stmt};" for stmt in _MIGRATIONS[2])

_TURN_COLS = "idx, instruction, sent_instruction, plan, meta, image, height, width, channels"


# ------------------------------------------------------------------------------- the store

@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT on a raw connection; ROLLBACK if the body raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


RUN_META = "_respec_run"   # turn meta key: which queued prompt and node appended the turn


def _run_mark(session_id: str, prompt: Any, node_id: Any) -> dict | None:
    """Which queued prompt (a digest of its whole API graph) and node is appending, if known."""
    if prompt is None or node_id is None:
        return None
    # Only what the user queued: ComfyUI writes each node's IS_CHANGED result into the prompt it
    # hands to hidden PROMPT inputs, and the History Store's changes with every append.
    if isinstance(prompt, dict):
        prompt = {nid: {"class_type": n.get("class_type"), "inputs": n.get("inputs")} if isinstance(n, dict) else n
                  for nid, n in prompt.items()}
    digest = hashlib.sha256(json.dumps({"session": session_id, "prompt": prompt}, sort_keys=True,
                                       default=str).encode()).hexdigest()[:32]
    return {"prompt": digest, "node": str(node_id)}


class SessionStore:
    """Sessions of editing turns on disk. Safe to use from several threads and processes at once.

    `root`: the store directory (created on first use). `timeout`: seconds to wait for another
    writer before giving up. `png_compress_level`: zlib level of new PNG files (lossless at any level).
    """

    def __init__(self, root: str | os.PathLike | None = None, *, timeout: float = 30.0,
                 png_compress_level: int = 4):
        self.root = _root_path(root) if root else default_root().resolve()
        self.db_path = self.root / DB_NAME
        self.timeout = float(timeout)
        self.files = ImageFiles(self.root / "images", png_compress_level)
        self._local = threading.local()
        self._schema_checked = False
        self._cache: dict[str, tuple[str, History]] = {}   # id -> (lineage, latest History seen here)
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SessionStore({str(self.root)!r})"

    # -- database plumbing -------------------------------------------------------------
    def _error(self, e: sqlite3.Error) -> StoreError:
        msg = str(e)
        if isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg):
            return StoreError(f"the session store {self.db_path} stayed busy for more than {self.timeout:g} s "
                              "(another process is writing to it); try again")
        if isinstance(e, sqlite3.OperationalError) and "unable to open" in msg:
            return StoreError(f"cannot open the session store {self.db_path} ({msg}); check that "
                              "the directory exists and is writable, or choose another store directory")
        return StoreError(f"the session store {self.db_path} is unreadable ({msg}): it is damaged or "
                          "not a ReSpec session store. Move the file away (a new store is created "
                          "in its place) or choose another store directory.")

    @contextmanager
    def _db_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise self._error(e) from e

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the session store directory {self.root}: {e}") from e
        if self.db_path.is_dir():
            raise StoreError(f"{self.db_path} is a directory, not a session database; "
                             "choose another store directory")
        in_place = False
        if not self.db_path.exists():
            in_place = not self._create_aside()
        if not in_place and self.db_path.stat().st_size == 0:
            raise StoreError(
                f"the session store {self.db_path} is an empty file (0 bytes): no session was ever "
                "stored in it, but ReSpec does not overwrite a file it did not make. Delete it (a new "
                "store is then created in its place) or choose another store directory.")
        with self._db_errors():
            # mode=rw: never creates the file (sqlite3.connect would leave a 0-byte one behind).
            # Autocommit mode: every transaction below is opened explicitly (BEGIN IMMEDIATE).
            conn = sqlite3.connect(f"{self.db_path.as_uri()}?mode={'rwc' if in_place else 'rw'}", uri=True,
                                   timeout=self.timeout, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                if not self._schema_checked:
                    self._retry_busy(lambda: self._check_schema(conn))
                    self._schema_checked = True
                conn.execute("PRAGMA synchronous = FULL")
            except BaseException:
                conn.close()
                raise
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _retry_busy(self, fn):
        """fn(), retried while the database is locked, for up to the store's timeout (some steps,
        like changing the journal mode, fail at once instead of waiting)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not ("locked" in str(e) or "busy" in str(e)) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _create_aside(self) -> bool:
        """Build a new store under a temporary name and hard-link it into place (atomic, and
        never over an existing file: a process that loses the race uses the winner's store).
        False when the file system has no hard links (the store is then created in place)."""
        tmp = self.root / f".{DB_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with self._db_errors():
                conn = sqlite3.connect(str(tmp), isolation_level=None)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")   # kept in the file's header
                    with _immediate(conn):
                        self._create_schema(conn)
                finally:
                    conn.close()   # the last connection folds the WAL back into the file
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.db_path)
            except FileExistsError:
                pass               # another process made it first
            except OSError:
                return False
            _fsync_dir(self.root)
            return True
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                try:
                    leftover.unlink()
                except OSError:
                    pass

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        # executescript() would commit on its own: run the statements one by one
        for stmt in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(stmt)
        conn.execute("INSERT INTO store_info VALUES ('app', ?), ('schema', ?)", (APP_ID, str(SCHEMA_VERSION)))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _identity(conn: sqlite3.Connection) -> tuple[set[str], int]:
        """(table names, user_version) read in ONE statement, so both come from the same state
        of the file even while another process is changing it."""
        names, uv = conn.execute(
            "SELECT (SELECT group_concat(name, char(31)) FROM sqlite_master WHERE type = 'table'), "
            "(SELECT user_version FROM pragma_user_version)").fetchone()
        return (set(names.split(chr(31))) if names else set()), int(uv)

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Accept our own schema (upgrading an older one), refuse anything else untouched. (Only
        where hard links are missing is an empty file given the schema here, in one transaction.)"""
        tables, uv = self._identity(conn)   # "file is not a database" surfaces here for random bytes
        if not tables and uv == 0 and self.db_path.stat().st_size == 0:
            with _immediate(conn):
                tables, uv = self._identity(conn)   # another process may have created it meanwhile
                if not tables and uv == 0:
                    self._create_schema(conn)
            tables, uv = self._identity(conn)
        app = None
        if "store_info" in tables:
            row = conn.execute("SELECT value FROM store_info WHERE key='app'").fetchone()
            app = row[0] if row else None
        if app != APP_ID:
            raise StoreError(
                f"{self.db_path} is an SQLite database of another program (tables: "
                f"{', '.join(sorted(tables)) or 'none'}), not a ReSpec session store. It was left "
                "untouched: choose another store directory or move the file away.")
        if 1 <= uv < SCHEMA_VERSION:
            uv = self._migrate(conn, uv)
        if uv != SCHEMA_VERSION:
            newer = uv > SCHEMA_VERSION
            raise StoreError(
                f"the session store {self.db_path} has schema version {uv}, but this ReSpec reads "
                f"version {SCHEMA_VERSION}" + (": it was written by a newer ReSpec; update the pack."
                                               if newer else "; it cannot be read by this version."))
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")

    def _migrate(self, conn: sqlite3.Connection, uv: int) -> int:
        """Upgrade a store written by an older ReSpec to SCHEMA_VERSION, in one transaction (a
        crash leaves it at its old version, still readable; another process may have upgraded it
        meanwhile). Existing sessions and images are kept as they are. Returns the new version."""
        with _immediate(conn):
            uv = conn.execute("PRAGMA user_version").fetchone()[0]
            while 1 <= uv < SCHEMA_VERSION:
                uv += 1
                for stmt in _MIGRATIONS[uv]:
                    conn.execute(stmt)
                conn.execute("UPDATE store_info SET value = ? WHERE key = 'schema'", (str(uv),))
                conn.execute(f"PRAGMA user_version = {uv}")
        return uv

    @contextmanager
    def _tx(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: IMMEDIATE (takes the write lock at once) for writes, deferred for reads."""
        conn = self._conn()
        with self._db_errors():
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- reading -----------------------------------------------------------------------
    @staticmethod
    def _session_row(conn, sid: str):
        return conn.execute("SELECT lineage, version, n_turns, created, updated, parent_id, parent_turn "
                            "FROM sessions WHERE id = ?", (sid,)).fetchone()

    def _existing(self, conn, sid: str):
        """The session's row (as _session_row); StoreError saying how to start it when it does not exist."""
        row = self._session_row(conn, sid)
        if row is None:
            raise self._missing(sid)
        return row

    def _missing(self, sid: str) -> StoreError:
        return StoreError(f"there is no session {sid!r} in the store {self.root}; start it with "
                          "mode 'new' (or check the id and the store directory)")

    def _turn(self, row, masks: dict | None = None) -> Turn:
        idx, instruction, sent, plan_text, meta_text, digest, h, w, c = row
        try:
            plan = Plan.from_dict(json.loads(plan_text)) if plan_text else None
            meta = json.loads(meta_text)
        except (ValueError, TypeError) as e:
            raise StoreError(f"turn {idx} in {self.db_path} has an unreadable plan or meta ({e}); "
                             "the store was written by another version or edited by hand") from e
        return Turn(idx, self.files.lazy(digest, (h, w, c)), instruction, sent, plan, meta, masks or {})

    def _masks(self, conn, sid: str, first: int, stop: int | None = None) -> dict[int, dict]:
        """The stored masks of the session's turns first..stop-1 (default: to the end):
        {idx: {name: TurnMask}} (lazy)."""
        out: dict[int, dict] = {}
        for idx, name, digest, h, w, info in conn.execute(
                "SELECT idx, name, image, height, width, info FROM turn_masks "
                "WHERE session_id = ? AND idx >= ? AND idx < ?", (sid, first, 2 ** 62 if stop is None else stop)):
            try:
                info_d = json.loads(info)
            except ValueError as e:
                raise StoreError(f"mask {name!r} of turn {idx} in {self.db_path} has unreadable info "
                                 f"({e}); the store was edited by hand") from e
            out.setdefault(idx, {})[name] = TurnMask(self.files.lazy(digest, (h, w, 1)), info_d)
        return out

    def _put_masks(self, masks: dict | None) -> list[tuple[str, Any, str]]:
        """Write the masks' PNGs (before the transaction that refers to them); (name, image, info JSON)."""
        out = []
        for name, m in check_masks(masks).items():
            storable_text(name, "a mask name")
            _, info_text = _json_dict(m.info, f"mask {name!r} info")
            out.append((name, self.files.put(m.image), info_text))
        return out

    @staticmethod
    def _insert_masks(conn, sid: str, idx: int, put: list) -> None:
        for name, img, info_text in put:
            h, w, _ = img.shape
            conn.execute("INSERT INTO turn_masks VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (sid, idx, name, img.digest, h, w, info_text))

    def exists(self, session_id: str) -> bool:
        """Whether the session exists."""
        sid = validate_session_id(session_id)
        with self._tx(False) as conn:
            return self._session_row(conn, sid) is not None

    def version(self, session_id: str) -> int:
        """The session's version: it grows with every change (append, rewind)."""
        sid = validate_session_id(session_id)
        with self._tx(False) as conn:
            row = self._existing(conn, sid)
        return int(row[1])

    def token(self, session_id: str) -> str:
        """A string that changes whenever the session changes, is re-created or deleted
        (ComfyUI's IS_CHANGED value); cheap: one row read. (Session version + lineage id, so a
        deleted and re-created session never repeats an earlier token.)"""
        sid = validate_session_id(session_id)
        with self._tx(False) as conn:
            row = self._session_row(conn, sid)
        return f"{self.root}|{sid}|absent" if row is None else f"{self.root}|{sid}|{row[0]}|v{row[1]}"

    def info(self, session_id: str) -> dict:
        """Session metadata: id, version, turns (count including turn 0), times, parent."""
        sid = validate_session_id(session_id)
        with self._tx(False) as conn:
            row = self._existing(conn, sid)
        lineage, version, n, created, updated, parent, parent_turn = row
        return {"session_id": sid, "lineage": lineage, "version": version, "turns": n, "created": created,
                "updated": updated, "parent_id": parent, "parent_turn": parent_turn,
                "store": str(self.root)}

    def load(self, session_id: str) -> History:
        """The session's current History. Decodes no image. An unchanged session comes from this
        process's cache; one that only grew since (appends by anyone) reads just the new rows."""
        sid = validate_session_id(session_id)
        with self._tx(False) as conn:
            row = self._existing(conn, sid)
            lineage, version, n = row[0], row[1], row[2]
            with self._cache_lock:
                entry = self._cache.get(sid)
            known: tuple[Turn, ...] = ()
            if entry is not None and entry[0] == lineage and len(entry[1]) <= n:
                if entry[1].version == version:
                    return entry[1]
                known = entry[1].turns
            # Turns already known here and the new ones; on a cold load only the latest turn:
            # the earlier ones are read when first asked for (StoredTurns).
            first = len(known) if known else n - 1
            rows = conn.execute(f"SELECT {_TURN_COLS} FROM turns WHERE session_id = ? AND idx >= ? "
                                "ORDER BY idx", (sid, first)).fetchall()
            masks = self._masks(conn, sid, first)
        self._check_rows(sid, rows, first, n)
        new = tuple(self._turn(r, masks.get(r[0])) for r in rows)
        turns = known + new if known else StoredTurns(partial(self._read_turns, sid), lineage, first, new)
        hist = History(turns, sid, int(version), str(self.root))
        self._remember(sid, lineage, hist)
        return hist

    def _check_rows(self, sid: str, rows: list, first: int, stop: int) -> None:
        if len(rows) != stop - first or any(r[0] != first + i for i, r in enumerate(rows)):
            raise StoreError(f"session {sid!r} in {self.db_path} is inconsistent (expected turns "
                             f"{first}..{stop - 1}, found {len(rows)} rows); it was edited by hand")

    def _read_turns(self, sid: str, lineage: str, stop: int) -> tuple[Turn, ...]:
        """Turns 0..stop-1 of a session, provided it still has the lineage they were loaded under."""
        with self._tx(False) as conn:
            row = self._session_row(conn, sid)
            if row is None or row[0] != lineage or row[2] < stop:
                raise StoreError(f"session {sid!r} was rewound, deleted or re-created after this history "
                                 "was loaded, so its earlier turns are gone; load the session again")
            rows = conn.execute(f"SELECT {_TURN_COLS} FROM turns WHERE session_id = ? AND idx < ? ORDER BY idx",
                                (sid, stop)).fetchall()
            masks = self._masks(conn, sid, 0, stop)
        self._check_rows(sid, rows, 0, stop)
        return tuple(self._turn(r, masks.get(r[0])) for r in rows)

    def _cached(self, sid: str, lineage: str, version: int) -> History | None:
        with self._cache_lock:
            entry = self._cache.get(sid)
        if entry is not None and entry[0] == lineage and entry[1].version == version:
            return entry[1]
        return None

    def _remember(self, sid: str, lineage: str, hist: History) -> None:
        with self._cache_lock:
            self._cache[sid] = (lineage, hist)

    def list_sessions(self) -> list[dict]:
        """Every session (newest change first): id, version, turns, times, parent, current image digest."""
        with self._tx(False) as conn:
            rows = conn.execute(
                "SELECT s.id, s.version, s.n_turns, s.created, s.updated, s.parent_id, s.parent_turn, t.image "
                "FROM sessions s LEFT JOIN turns t ON t.session_id = s.id AND t.idx = s.n_turns - 1 "
                "ORDER BY s.updated DESC, s.id").fetchall()
        return [{"session_id": r[0], "version": r[1], "turns": r[2], "created": r[3], "updated": r[4],
                 "parent_id": r[5], "parent_turn": r[6], "current_image": r[7]} for r in rows]

    def list_turns(self, session_id: str) -> list[dict]:
        """Each turn's summary for a timeline (Turn.summary: index, instructions, image digest,
        width and height, plan summary, meta, mask records). No pixels."""
        return [t.summary() for t in self.load(session_id).turns]

    def image_path(self, session_id: str, digest: str) -> Path:
        """The PNG of an image of this session (InputError/StoreError if it is not one of its images)."""
        sid = validate_session_id(session_id)
        path = self.files.path(digest)
        with self._tx(False) as conn:
            self._existing(conn, sid)
            used = conn.execute("SELECT 1 FROM turns WHERE session_id = ? AND image = ? UNION ALL "
                                "SELECT 1 FROM turn_masks WHERE session_id = ? AND image = ? LIMIT 1",
                                (sid, digest, sid, digest)).fetchone()
        if used is None:
            raise StoreError(f"image {digest[:12]}... is not part of session {sid!r}")
        if not path.is_file():
            raise StoreError(f"image file {path} is missing from the store")
        return path

    # -- writing -----------------------------------------------------------------------
    def create(self, session_id: str, image: Any, meta: dict | None = None,
               exist_ok: bool = False) -> History:
        """Start a session whose turn 0 is `image`. With exist_ok, an existing session with the same
        original image is loaded instead (a different original image is refused)."""
        sid = validate_session_id(session_id)
        meta, meta_text = _json_dict(meta, "meta")
        img = self.files.put(image)
        _checkpoint("image_written")
        now = time.time()
        lineage = uuid.uuid4().hex
        with self._tx(True) as conn:
            row = self._session_row(conn, sid)
            if row is not None:
                if not exist_ok:
                    raise StoreError(f"session {sid!r} already exists in {self.root}; load it, "
                                     "branch it, or choose another id")
                first = conn.execute("SELECT image FROM turns WHERE session_id = ? AND idx = 0",
                                     (sid,)).fetchone()
                if first is None or first[0] != img.digest:
                    raise StoreError(f"session {sid!r} already exists with a different original image; "
                                     "choose another session id or load the existing one")
            else:
                conn.execute("INSERT INTO sessions VALUES (?, ?, 1, 1, ?, ?, NULL, NULL)", (sid, lineage, now, now))
                h, w, c = img.shape
                conn.execute("INSERT INTO turns VALUES (?, 0, '', '', NULL, ?, ?, ?, ?, ?, NULL, ?)",
                             (sid, meta_text, img.digest, h, w, c, now))
                _checkpoint("before_commit")
        if row is not None:
            return self.load(sid)
        hist = History((Turn(0, img, meta=meta),), sid, 1, str(self.root))
        self._remember(sid, lineage, hist)
        return hist

    def append(self, session_id: str, image: Any, instruction: str, sent_instruction: str | None = None,
               plan: Plan | None = None, meta: dict | None = None, idempotency_key: str | None = None,
               expected_version: int | None = None, masks: dict | None = None) -> History:
        """Add turn t (index assigned atomically) and return the session's new History.

        `masks`: the turn's per-pixel records by name (TurnMask), stored beside it.
        `idempotency_key`: if a live turn of this session already carries it, nothing is added and
        the current History is returned (re-running the same append is harmless).
        `expected_version`: refuse (StoreError) if the session changed since that version.
        """
        sid = validate_session_id(session_id)
        if not isinstance(instruction, str):
            raise InputError(f"instruction must be text, got {type(instruction).__name__}")
        sent = instruction if sent_instruction is None else sent_instruction
        if not isinstance(sent, str):
            raise InputError(f"sent_instruction must be text, got {type(sent).__name__}")
        storable_text(instruction, "the instruction (request)")
        storable_text(sent, "the sent instruction")
        if idempotency_key is not None and (not isinstance(idempotency_key, str)
                                            or not 0 < len(idempotency_key) <= MAX_KEY_LEN):
            raise InputError(f"idempotency_key must be a non-empty string of at most {MAX_KEY_LEN} characters")
        plan, plan_text = _plan_json(plan)
        meta, meta_text = _json_dict(meta, "meta")
        img = self.files.put(image)          # complete on disk before any row refers to it
        put_masks = self._put_masks(masks)
        _checkpoint("image_written")
        duplicate = False
        with self._tx(True) as conn:
            row = self._existing(conn, sid)
            lineage, version, n = row[0], row[1], row[2]
            if idempotency_key is not None and conn.execute(
                    "SELECT 1 FROM turns WHERE session_id = ? AND idem_key = ?",
                    (sid, idempotency_key)).fetchone() is not None:
                duplicate = True
            else:
                if expected_version is not None and int(expected_version) != version:
                    raise StoreError(
                        f"session {sid!r} changed since this history was loaded (version "
                        f"{expected_version} -> {version}); load it again and redo this turn")
                h, w, c = img.shape
                now = time.time()
                conn.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (sid, n, instruction, sent, plan_text, meta_text, img.digest, h, w, c,
                              idempotency_key, now))
                self._insert_masks(conn, sid, n, put_masks)
                conn.execute("UPDATE sessions SET version = version + 1, n_turns = n_turns + 1, "
                             "updated = ? WHERE id = ?", (now, sid))
                _checkpoint("before_commit")
        if duplicate:
            return self.load(sid)
        prev = self._cached(sid, lineage, version)
        if prev is None or len(prev) != n:
            return self.load(sid)
        stored = {name: TurnMask(im, json.loads(info)) for name, im, info in put_masks}
        hist = History(prev.turns + (Turn(n, img, instruction, sent, plan, meta, stored),), sid, version + 1,
                       str(self.root))
        self._remember(sid, lineage, hist)
        return hist

    def append_once(self, history: History, image: Any, instruction: str, sent_instruction: str,
                    plan: Plan | None = None, meta: dict | None = None,
                    prompt: Any = None, node_id: Any = None, masks: dict | None = None) -> History:
        """Append turn t to the session `history` was loaded from, at most once per queued prompt.

        Two guards, because ComfyUI re-runs the graph when the same prompt is queued again: the
        turn's content key (same loaded version + same inputs = the same turn), and a mark of the
        queued prompt (`prompt`, its API graph) and appending node (`node_id`) kept in the turn's
        meta: a second queue of that prompt finds its own turn and gets the history as that node
        left it. Refuses (StoreError) when another client appended since `history` was loaded.
        """
        sid = validate_session_id(history.session_id)
        meta = dict(meta or {})
        if RUN_META in meta:
            raise InputError(f"meta key {RUN_META!r} is reserved")
        run = _run_mark(sid, prompt, node_id)
        if run is not None:
            current = self.load(sid)
            for t in reversed(current.turns[1:]):
                mark = t.meta.get(RUN_META) if isinstance(t.meta, dict) else None
                if not isinstance(mark, dict) or mark.get("prompt") != run["prompt"]:
                    break
                if mark.get("node") == run["node"]:
                    return current.with_turns(current.turns[: t.index + 1])
            meta[RUN_META] = run
        image = StoredImage.of(image)
        key = hashlib.sha256(json.dumps(
            {"session": sid, "version": history.version, "turns": len(history), "instruction": instruction,
             "sent": sent_instruction, "image": image.digest, "plan": plan.to_dict() if plan is not None else None},
            sort_keys=True, default=str).encode()).hexdigest()
        return self.append(sid, image, instruction, sent_instruction, plan, meta, idempotency_key=key,
                           expected_version=history.version, masks=masks)

    def rewind(self, session_id: str, k: int) -> History:
        """Undo the turns after k (keep 0..k; the later rows are deleted, the version still grows).
        Rewinding to the current last turn changes nothing."""
        sid = validate_session_id(session_id)
        k = turn_number(k)
        with self._tx(True) as conn:
            row = self._existing(conn, sid)
            lineage, version, n = row[0], row[1], row[2]
            if not 0 <= k < n:
                raise InputError(f"cannot rewind session {sid!r} to turn {k}: it has turns 0..{n - 1}")
            if k == n - 1:
                changed = False
            else:
                changed = True
                conn.execute("DELETE FROM turns WHERE session_id = ? AND idx > ?", (sid, k))
                conn.execute("DELETE FROM turn_masks WHERE session_id = ? AND idx > ?", (sid, k))
                new_lineage = uuid.uuid4().hex    # earlier turns may now be replaced
                conn.execute("UPDATE sessions SET version = version + 1, n_turns = ?, updated = ?, "
                             "lineage = ? WHERE id = ?", (k + 1, time.time(), new_lineage, sid))
                _checkpoint("before_commit")
        prev = self._cached(sid, lineage, version)
        if not changed or prev is None or len(prev) != n:
            return self.load(sid)
        kept = prev.turns.head(k + 1, new_lineage) if isinstance(prev.turns, StoredTurns) else prev.turns[: k + 1]
        hist = History(kept, sid, version + 1, str(self.root))
        self._remember(sid, new_lineage, hist)
        return hist

    def branch(self, session_id: str, new_id: str, at_turn: int | None = None,
               exist_ok: bool = False) -> History:
        """A new session `new_id` holding turns 0..at_turn (default: all) of `session_id`.
        Image files are shared, not copied. With exist_ok, a `new_id` that is already the branch of
        `session_id` at `at_turn` (any turn when None) is loaded instead: queueing the same branch
        again gives the branch made last time. Any other existing `new_id` is refused."""
        sid = validate_session_id(session_id)
        nid = validate_session_id(new_id)
        if nid == sid:
            raise InputError("a branch needs a new session id different from the source's")
        if at_turn is not None:
            at_turn = turn_number(at_turn)
        now = time.time()
        with self._tx(True) as conn:
            existing = self._session_row(conn, nid)
            if existing is not None:
                parent, parent_turn = existing[5], existing[6]
                if not exist_ok:
                    raise StoreError(f"session {nid!r} already exists in {self.root}; choose another id "
                                     "for the branch")
                if parent != sid or (at_turn is not None and parent_turn != at_turn):
                    raise StoreError(f"session {nid!r} already exists and is not the branch of {sid!r} at "
                                     f"turn {'latest' if at_turn is None else at_turn}; choose another new id")
            else:
                row = self._existing(conn, sid)
                n = row[2]
                at = n - 1 if at_turn is None else at_turn
                if not 0 <= at < n:
                    raise InputError(f"cannot branch session {sid!r} at turn {at}: it has turns 0..{n - 1}")
                conn.execute("INSERT INTO sessions VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                             (nid, uuid.uuid4().hex, at + 1, now, now, sid, at))
                conn.execute(f"INSERT INTO turns SELECT ?, {_TURN_COLS}, NULL, ? FROM turns "
                             "WHERE session_id = ? AND idx <= ?", (nid, now, sid, at))
                conn.execute("INSERT INTO turn_masks SELECT ?, idx, name, image, height, width, info "
                             "FROM turn_masks WHERE session_id = ? AND idx <= ?", (nid, sid, at))
                _checkpoint("before_commit")
        return self.load(nid)

    def delete_session(self, session_id: str) -> bool:
        """Remove a session's rows (its image files go with the next `gc`). False if it did not exist."""
        sid = validate_session_id(session_id)
        with self._tx(True) as conn:
            gone = conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount
            conn.execute("DELETE FROM turns WHERE session_id = ?", (sid,))
            conn.execute("DELETE FROM turn_masks WHERE session_id = ?", (sid,))
        with self._cache_lock:
            self._cache.pop(sid, None)
        return bool(gone)

    def gc(self, min_age_s: float = 3600.0) -> int:
        """Delete image files (and leftover temp files) no turn refers to and older than min_age_s.
        The age limit protects appends in flight, whose PNG is written before their transaction."""
        with self._tx(False) as conn:
            used = {r[0] for r in conn.execute("SELECT image FROM turns UNION SELECT image FROM turn_masks")}
        cutoff = time.time() - float(min_age_s)
        removed = 0
        if not self.files.dir.is_dir():
            return 0
        for path in self.files.dir.glob("*/*"):
            name = path.name
            digest = name[:-4] if name.endswith(".png") else None
            if digest in used or not (name.endswith(".tmp") or digest is not None):
                continue
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                pass
        return removed


# ------------------------------------------------------------------------------- shared stores

_STORES: dict[str, SessionStore] = {}
_STORES_LOCK = threading.Lock()


def workflow_store_root(store_dir: str) -> Path | None:
    """The store folder a workflow names: None (the default store) when empty, else a folder inside
    the sessions folder (relative names resolve there); anything outside is refused."""
    if not (store_dir or "").strip():
        return None
    root = paths.confine(store_dir, default_root(), "the session store folder (store_dir)")
    images = default_root().resolve() / "images"
    if root == images or images in root.parents:
        raise InputError(f"store_dir {store_dir!r} is inside the default store's image folder; choose another name")
    return root


def open_store(root: str | os.PathLike | None = None) -> SessionStore:
    """The process-wide SessionStore for `root` (default store when empty), so that every node
    shares one connection per thread and one history cache."""
    path = _root_path(root) if root else default_root().resolve()
    with _STORES_LOCK:
        store = _STORES.get(str(path))
        if store is None:
            store = _STORES[str(path)] = SessionStore(path)
        return store
