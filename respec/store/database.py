"""The session store's SQLite file: its schema, how it is created, recognised and upgraded, and
the one transaction helper every read and write goes through.

    sessions.sqlite3            SQLite in WAL mode: sessions, turns, turn masks (text, plan, meta, digests)

A new file is built under a temporary name and hard-linked into place (it appears complete); a file
that is not a ReSpec store of a version this code reads is refused untouched. Connections are per
thread (and per process: a forked child opens its own).
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ..errors import StoreError
from .files import fsync_dir

SCHEMA_VERSION = 2   # 1: sessions and turns; 2: + turn_masks (per-turn change / reveal masks)
APP_ID = "respec-session-store"
DB_NAME = "sessions.sqlite3"

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


class transaction:
    """One transaction on `conn` (opened in autocommit mode), as a `with` block: BEGIN IMMEDIATE
    for writes (takes the write lock at once, so concurrent writers serialise), a deferred BEGIN
    for reads; COMMIT when the block ends, ROLLBACK if the block or the COMMIT raises (the
    connection stays usable). `errors(e)`, when given, is raised in place of an sqlite3.Error.
    (A class rather than a generator: every read and write of the store goes through it.)"""

    __slots__ = ("conn", "write", "errors")

    def __init__(self, conn: sqlite3.Connection, write: bool = True,
                 errors: Callable[[sqlite3.Error], Exception] | None = None):
        self.conn, self.write, self.errors = conn, write, errors

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
        except sqlite3.Error as e:
            self._raise(e)
        return self.conn

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException as e:
                exc = e
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            self._raise(e)
        if isinstance(exc, sqlite3.Error):
            self._raise(exc)
        if kind is None:
            raise exc           # the COMMIT's own failure; otherwise the block's goes on as it was

    def _raise(self, e: sqlite3.Error):
        if self.errors is None:
            raise e
        raise self.errors(e) from e


def create_schema(conn: sqlite3.Connection) -> None:
    """Today's tables in an empty database, inside the caller's transaction."""
    # executescript() would commit on its own: run the statements one by one
    for stmt in filter(str.strip, _SCHEMA.split(";")):
        conn.execute(stmt)
    conn.execute("INSERT INTO store_info VALUES ('app', ?), ('schema', ?)", (APP_ID, str(SCHEMA_VERSION)))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def identity(conn: sqlite3.Connection) -> tuple[set[str], int]:
    """(table names, user_version) read in ONE statement, so both come from the same state
    of the file even while another process is changing it."""
    names, uv = conn.execute(
        "SELECT (SELECT group_concat(name, char(31)) FROM sqlite_master WHERE type = 'table'), "
        "(SELECT user_version FROM pragma_user_version)").fetchone()
    return (set(names.split(chr(31))) if names else set()), int(uv)


class Database:
    """The store file of the store folder `root` (its `path`): one connection per thread, created
    and checked on first use. `timeout`: seconds to wait for another writer before giving up."""

    __slots__ = ("root", "path", "timeout", "_local", "_schema_checked")

    def __init__(self, root: Path, timeout: float):
        self.root = root
        self.path = root / DB_NAME
        self.timeout = float(timeout)
        self._local = threading.local()
        self._schema_checked = False

    def _error(self, e: sqlite3.Error) -> StoreError:
        msg = str(e)
        if isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg):
            return StoreError(f"the session store {self.path} stayed busy for more than {self.timeout:g} s "
                              "(another process is writing to it); try again")
        if isinstance(e, sqlite3.OperationalError) and "unable to open" in msg:
            return StoreError(f"cannot open the session store {self.path} ({msg}); check that "
                              "the directory exists and is writable, or choose another store directory")
        return StoreError(f"the session store {self.path} is unreadable ({msg}): it is damaged or "
                          "not a ReSpec session store. Move the file away (a new store is created "
                          "in its place) or choose another store directory.")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise self._error(e) from e

    def connect(self) -> sqlite3.Connection:
        """This thread's connection; on first use the store file is created (aside, then linked
        into place) or checked (ours, of a version this code reads, upgraded when older)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the session store directory {self.root}: {e}") from e
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a session database; "
                             "choose another store directory")
        in_place = False
        if not self.path.exists():
            in_place = not self._create_aside()
        if not in_place and self.path.stat().st_size == 0:
            raise StoreError(
                f"the session store {self.path} is an empty file (0 bytes): no session was ever "
                "stored in it, but ReSpec does not overwrite a file it did not make. Delete it (a new "
                "store is then created in its place) or choose another store directory.")
        with self._errors():
            # mode=rw: never creates the file (sqlite3.connect would leave a 0-byte one behind).
            # Autocommit mode: every transaction below is opened explicitly (BEGIN IMMEDIATE).
            conn = sqlite3.connect(f"{self.path.as_uri()}?mode={'rwc' if in_place else 'rw'}", uri=True,
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
            with self._errors():
                conn = sqlite3.connect(str(tmp), isolation_level=None)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")   # kept in the file's header
                    with transaction(conn):
                        create_schema(conn)
                finally:
                    conn.close()   # the last connection folds the WAL back into the file
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass               # another process made it first
            except OSError:
                return False
            fsync_dir(self.root)
            return True
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                try:
                    leftover.unlink()
                except OSError:
                    pass

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Accept our own schema (upgrading an older one), refuse anything else untouched. (Only
        where hard links are missing is an empty file given the schema here, in one transaction.)"""
        tables, uv = identity(conn)   # "file is not a database" surfaces here for random bytes
        if not tables and uv == 0 and self.path.stat().st_size == 0:
            with transaction(conn):
                tables, uv = identity(conn)   # another process may have created it meanwhile
                if not tables and uv == 0:
                    create_schema(conn)
            tables, uv = identity(conn)
        app = None
        if "store_info" in tables:
            row = conn.execute("SELECT value FROM store_info WHERE key='app'").fetchone()
            app = row[0] if row else None
        if app != APP_ID:
            raise StoreError(
                f"{self.path} is an SQLite database of another program (tables: "
                f"{', '.join(sorted(tables)) or 'none'}), not a ReSpec session store. It was left "
                "untouched: choose another store directory or move the file away.")
        if 1 <= uv < SCHEMA_VERSION:
            uv = self._migrate(conn, uv)
        if uv != SCHEMA_VERSION:
            newer = uv > SCHEMA_VERSION
            raise StoreError(
                f"the session store {self.path} has schema version {uv}, but this ReSpec reads "
                f"version {SCHEMA_VERSION}" + (": it was written by a newer ReSpec; update the pack."
                                               if newer else "; it cannot be read by this version."))
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")

    def _migrate(self, conn: sqlite3.Connection, uv: int) -> int:
        """Upgrade a store written by an older ReSpec to SCHEMA_VERSION, in one transaction (a
        crash leaves it at its old version, still readable; another process may have upgraded it
        meanwhile). Existing sessions and images are kept as they are. Returns the new version."""
        with transaction(conn):
            uv = conn.execute("PRAGMA user_version").fetchone()[0]
            while 1 <= uv < SCHEMA_VERSION:
                uv += 1
                for stmt in _MIGRATIONS[uv]:
                    conn.execute(stmt)
                conn.execute("UPDATE store_info SET value = ? WHERE key = 'schema'", (str(uv),))
                conn.execute(f"PRAGMA user_version = {uv}")
        return uv

    def tx(self, write: bool) -> transaction:
        """A `transaction` on this thread's connection; SQLite errors become StoreErrors."""
        return transaction(self.connect(), write, self._error)

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

