"""Sessions of editing turns: create, load, append (once per queued prompt), rewind, branch,
delete, and gc of the image files no turn refers to any more. The guarantees are stated in
respec/store/__init__.py; the file and the images are database.py's and files.py's.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import paths
from ..errors import InputError, SessionExists, StoreError
from ..history import History, StoredImage, Turn, TurnMask, check_masks
from ..plan import Plan
from ..text import clip
from .database import Database
from .files import ImageFiles
from .turns import StoredTurns, json_dict, plan_json, storable_text, stored_json

MAX_KEY_LEN = 256
RUN_META = "_respec_run"   # turn meta key: which queued prompt and node appended the turn

_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TURN_COLS = "idx, instruction, sent_instruction, plan, meta, image, height, width, channels"


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
        raise InputError(
            f"session id {clip(s, 60)} is not allowed: use 1 to 64 characters, each a letter A-Z or a-z, "
            "a digit 0-9, '_' or '-' (no spaces, dots, slashes or other path characters), "
            "e.g. 'portrait-2' or 'kitchen_edit'")
    return s


def _root_path(root: str | os.PathLike) -> Path:
    """A store folder given by the caller, resolved; a NUL or unencodable character is an InputError."""
    text = os.fspath(root)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise InputError(f"the session store folder {clip(text)} contains a NUL character; give a folder path without it")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise InputError(f"the session store folder {clip(text)} holds characters this system cannot use in a path; "
                         f"give another folder") from None
    return Path(text).expanduser().resolve()


def branch_ids(session_id: str, turn: int, count: int = 999) -> list[str]:
    """The ids a branch of `session_id` at `turn` takes, in order of preference: "<id>-b<turn>",
    then "-2", "-3", ... (the id cut so that each stays a valid id of at most 64 characters)."""
    tail = f"-b{turn}"
    base = session_id[: 64 - len(tail) - len(f"-{count}")] + tail
    return [base] + [f"{base}-{n}" for n in range(2, count + 1)]


def pending(history: History) -> bool:
    """True for a session history that is not in its store yet (History Store's 'new' mode leaves
    the session to its first History Append, so a prompt that fails before it leaves nothing)."""
    return history.session_id is not None and history.version == 0 and len(history) == 1


def default_root() -> Path:
    """Where sessions live unless told otherwise: RESPEC_SESSIONS_DIR, else <user dir>/sessions."""
    return paths.sessions_dir()


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
        self.db = Database(self.root, timeout)
        self.db_path = self.db.path
        self.files = ImageFiles(self.root / "images", png_compress_level)
        self._cache: dict[str, tuple[str, History]] = {}   # id -> (lineage, latest History seen here)
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SessionStore({str(self.root)!r})"

    def close(self) -> None:
        """Close this thread's connection to the store file (others close when their threads end)."""
        self.db.close()

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

    @staticmethod
    def _missing(sid: str) -> StoreError:
        # No server path in a message: it may reach an HTTP client (respec/web.py).
        return StoreError(f"there is no session {sid!r} in this store; start it with "
                          "mode 'new' (or check the id and the store directory)")

    def _turn(self, row, masks: dict | None = None) -> Turn:
        idx, instruction, sent, plan_text, meta_text, digest, h, w, c = row
        try:
            plan = Plan.from_dict(stored_json(plan_text, "the plan")) if plan_text else None
            meta = stored_json(meta_text, "the meta")
        except (ValueError, TypeError) as e:
            raise StoreError(f"turn {idx} has an unreadable plan or meta ({str(e)[:120]}); the store was "
                             "written by another version or edited by hand: rewind the session before it") from e
        return Turn(idx, self.files.lazy(digest, (h, w, c)), instruction, sent, plan, meta, masks or {})

    def _masks(self, conn, sid: str, first: int, stop: int | None = None) -> dict[int, dict]:
        """The stored masks of the session's turns first..stop-1 (default: to the end):
        {idx: {name: TurnMask}} (lazy)."""
        out: dict[int, dict] = {}
        for idx, name, digest, h, w, info in conn.execute(
                "SELECT idx, name, image, height, width, info FROM turn_masks "
                "WHERE session_id = ? AND idx >= ? AND idx < ?", (sid, first, 2 ** 62 if stop is None else stop)):
            try:
                info_d = stored_json(info, "the mask's info")
            except ValueError as e:
                raise StoreError(f"mask {name!r} of turn {idx} has unreadable info ({str(e)[:120]}); the store "
                                 "was edited by hand: rewind the session before it") from e
            out.setdefault(idx, {})[name] = TurnMask(self.files.lazy(digest, (h, w, 1)), info_d)
        return out

    @staticmethod
    def _checked_masks(masks: dict | None) -> list[tuple[str, Any, str]]:
        """The masks checked, nothing written yet: (name, image, info JSON) (the caller writes the
        PNGs with files.put before the transaction that refers to them)."""
        out = []
        for name, m in check_masks(masks).items():
            storable_text(name, "a mask name")
            _, info_text = json_dict(m.info, f"mask {name!r} info")
            out.append((name, m.image, info_text))
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
        with self.db.tx(False) as conn:
            return self._session_row(conn, sid) is not None

    def token(self, session_id: str) -> str:
        """A string that changes whenever the session changes, is re-created or deleted
        (ComfyUI's IS_CHANGED value); cheap: one row read. (Session version + lineage id, so a
        deleted and re-created session never repeats an earlier token.)"""
        sid = validate_session_id(session_id)
        with self.db.tx(False) as conn:
            row = self._session_row(conn, sid)
        return f"{self.root}|{sid}|absent" if row is None else f"{self.root}|{sid}|{row[0]}|v{row[1]}"

    def load(self, session_id: str) -> History:
        """The session's current History. Decodes no image. An unchanged session comes from this
        process's cache; one that only grew since (appends by anyone) reads just the new rows."""
        sid = validate_session_id(session_id)
        with self.db.tx(False) as conn:
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
            raise StoreError(f"session {sid!r} is inconsistent (expected turns {first}..{stop - 1}, found "
                             f"{len(rows)} rows); it was edited by hand: branch or rewind it")

    def _read_turns(self, sid: str, lineage: str, stop: int) -> tuple[Turn, ...]:
        """Turns 0..stop-1 of a session, provided it still has the lineage they were loaded under."""
        with self.db.tx(False) as conn:
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
        with self.db.tx(False) as conn:
            rows = conn.execute(
                "SELECT s.id, s.version, s.n_turns, s.created, s.updated, s.parent_id, s.parent_turn, t.image "
                "FROM sessions s LEFT JOIN turns t ON t.session_id = s.id AND t.idx = s.n_turns - 1 "
                "ORDER BY s.updated DESC, s.id").fetchall()
        return [{"session_id": r[0], "version": r[1], "turns": r[2], "created": r[3], "updated": r[4],
                 "parent_id": r[5], "parent_turn": r[6], "current_image": r[7]} for r in rows]

    # -- writing -----------------------------------------------------------------------
    def create(self, session_id: str, image: Any, meta: dict | None = None,
               exist_ok: bool = False) -> History:
        """Start a session whose turn 0 is `image`. With exist_ok, an existing session with the same
        original image is loaded instead (a different original image is refused)."""
        sid = validate_session_id(session_id)
        meta, meta_text = json_dict(meta, "meta")
        img = StoredImage.of(image)
        if self.exists(sid):     # nothing is written for a session that exists (loaded or refused)
            with self.db.tx(False) as conn:
                if not exist_ok:
                    raise SessionExists(f"session {sid!r} already exists; load it, branch it, or choose another id")
                self._check_original(conn, sid, img)
            return self.load(sid)
        img = self.files.put(img)
        _checkpoint("image_written")
        with self.db.tx(True) as conn:
            row = self._session_row(conn, sid)
            if row is not None:
                if not exist_ok:
                    raise SessionExists(f"session {sid!r} already exists; load it, branch it, or choose another id")
                self._check_original(conn, sid, img)
            else:
                lineage = self._insert_session(conn, sid, img, meta_text)[0]
                _checkpoint("before_commit")
        if row is not None:
            return self.load(sid)
        hist = History((Turn(0, img, meta=meta),), sid, 1, str(self.root))
        self._remember(sid, lineage, hist)
        return hist

    @staticmethod
    def _insert_session(conn, sid: str, first: StoredImage, meta_text: str) -> tuple:
        """Insert a new session whose turn 0 is `first` (inside the caller's transaction); its row
        as _session_row gives it."""
        now = time.time()
        lineage = uuid.uuid4().hex
        conn.execute("INSERT INTO sessions VALUES (?, ?, 1, 1, ?, ?, NULL, NULL)", (sid, lineage, now, now))
        h, w, c = first.shape
        conn.execute("INSERT INTO turns VALUES (?, 0, '', '', NULL, ?, ?, ?, ?, ?, NULL, ?)",
                     (sid, meta_text, first.digest, h, w, c, now))
        return (lineage, 1, 1, now, now, None, None)

    @staticmethod
    def _check_original(conn, sid: str, first: StoredImage) -> None:
        got = conn.execute("SELECT image FROM turns WHERE session_id = ? AND idx = 0", (sid,)).fetchone()
        if got is None or got[0] != first.digest:
            raise SessionExists(f"session {sid!r} already exists with a different original image; "
                                "choose another session id or load the existing one")

    def append(self, session_id: str, image: Any, instruction: str, sent_instruction: str | None = None,
               plan: Plan | None = None, meta: dict | None = None, idempotency_key: str | None = None,
               expected_version: int | None = None, masks: dict | None = None,
               original: Turn | None = None) -> History:
        """Add turn t (index assigned atomically) and return the session's new History.

        `masks`: the turn's per-pixel records by name (TurnMask), stored beside it.
        `idempotency_key`: if a live turn of this session already carries it, nothing is added and
        the current History is returned (re-running the same append is harmless).
        `expected_version`: refuse (StoreError) if the session changed since that version.
        `original`: turn 0 (its image and meta) of a session that may not exist yet: it is then
        created in the same transaction as this turn, after every check of this turn passed (a
        refused first turn leaves no session behind); an existing session must have that original.
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
        plan, plan_text = plan_json(plan)
        meta, meta_text = json_dict(meta, "meta")
        first_meta = json_dict(original.meta, "turn 0's meta")[1] if original is not None else None
        put_masks = self._checked_masks(masks)
        first = None
        if original is not None:
            first = StoredImage.of(original.image)
            if self.exists(sid):    # an existing session must have that original: refused before writing
                with self.db.tx(False) as conn:
                    self._check_original(conn, sid, first)
            first = self.files.put(first)
        img = self.files.put(image)          # complete on disk before any row refers to it
        put_masks = [(name, self.files.put(im), info) for name, im, info in put_masks]
        _checkpoint("image_written")
        duplicate = False
        with self.db.tx(True) as conn:
            row = self._session_row(conn, sid) if first is not None else self._existing(conn, sid)
            if row is None:
                row = self._insert_session(conn, sid, first, first_meta)
            elif first is not None:
                self._check_original(conn, sid, first)
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

        A history of version 0 (History Store's 'new' before its session exists: `pending`) stands
        for the session as created (version 1, turn 0 only): the session is created with this turn,
        in its transaction (SessionStore.append's `original`).
        """
        sid = validate_session_id(history.session_id)
        meta = dict(meta or {})
        if RUN_META in meta:
            raise InputError(f"meta key {RUN_META!r} is reserved; use another name")
        stored = not pending(history)
        version = history.version if stored else 1
        run = _run_mark(sid, prompt, node_id)
        if run is not None:
            current = self.load(sid) if stored or self.exists(sid) else None   # a pending session has no turn yet
            for t in reversed(current.turns[1:] if current is not None else ()):
                mark = t.meta.get(RUN_META) if isinstance(t.meta, dict) else None
                if not isinstance(mark, dict) or mark.get("prompt") != run["prompt"]:
                    break
                if mark.get("node") == run["node"]:
                    return current.with_turns(current.turns[: t.index + 1])
            meta[RUN_META] = run
        image = StoredImage.of(image)
        key = hashlib.sha256(json.dumps(
            {"session": sid, "version": version, "turns": len(history), "instruction": instruction,
             "sent": sent_instruction, "image": image.digest, "plan": plan.to_dict() if plan is not None else None},
            sort_keys=True, default=str).encode()).hexdigest()
        return self.append(sid, image, instruction, sent_instruction, plan, meta, idempotency_key=key,
                           expected_version=version, masks=masks, original=None if stored else history.turns[0])

    def rewind(self, session_id: str, k: int) -> History:
        """Undo the turns after k (keep 0..k; the later rows are deleted, the version still grows).
        Rewinding to the current last turn changes nothing."""
        sid = validate_session_id(session_id)
        k = turn_number(k)
        with self.db.tx(True) as conn:
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

    def branch(self, session_id: str, new_id: str | None, at_turn: int | None = None,
               exist_ok: bool = False) -> History:
        """A new session `new_id` holding turns 0..at_turn (default: all) of `session_id`.
        Image files are shared, not copied. With exist_ok, a `new_id` that is already the branch of
        `session_id` at `at_turn` (any turn when None) is loaded instead: queueing the same branch
        again gives the branch made last time. Any other existing `new_id` is refused (SessionExists).
        new_id None: the first free id of "<id>-b<turn>", "<id>-b<turn>-2", ... (`branch_ids`),
        chosen inside the transaction that creates the branch, so branches made at the same time
        (several clients, several processes) each get their own id."""
        sid = validate_session_id(session_id)
        nid = None if new_id is None else validate_session_id(new_id)
        if nid == sid:
            raise InputError("a branch needs a new session id different from the source's; choose another one")
        if at_turn is not None:
            at_turn = turn_number(at_turn)
        now = time.time()
        with self.db.tx(True) as conn:
            existing = self._session_row(conn, nid) if nid is not None else None
            if existing is not None:
                parent, parent_turn = existing[5], existing[6]
                if not exist_ok:
                    raise SessionExists(f"session {nid!r} already exists; choose another id for the branch")
                if parent != sid or (at_turn is not None and parent_turn != at_turn):
                    raise SessionExists(f"session {nid!r} already exists and is not the branch of {sid!r} at "
                                        f"turn {'latest' if at_turn is None else at_turn}; choose another new id")
            else:
                row = self._existing(conn, sid)
                n = row[2]
                at = n - 1 if at_turn is None else at_turn
                if not 0 <= at < n:
                    raise InputError(f"cannot branch session {sid!r} at turn {at}: it has turns 0..{n - 1}")
                if nid is None:
                    taken = {r[0] for r in conn.execute("SELECT id FROM sessions WHERE id GLOB ?",
                                                        (branch_ids(sid, at)[0] + "*",))}
                    nid = next((c for c in branch_ids(sid, at) if c not in taken), None)
                    if nid is None:
                        raise InputError(f"no free branch id left for {sid!r} at turn {at}; choose one (new_session_id)")
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
        with self.db.tx(True) as conn:
            gone = conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount
            conn.execute("DELETE FROM turns WHERE session_id = ?", (sid,))
            conn.execute("DELETE FROM turn_masks WHERE session_id = ?", (sid,))
        with self._cache_lock:
            self._cache.pop(sid, None)
        return bool(gone)

    def gc(self, min_age_s: float = 3600.0, *, dry_run: bool = False, limit: int | None = None,
           seen: Callable[[Path, int], None] | None = None) -> int:
        """Delete image files (and leftover temp files) no turn refers to and older than min_age_s;
        return how many. The age limit protects appends in flight, whose PNG is written before their
        transaction. `dry_run`: delete nothing, count what would go. `limit`: stop after that many
        files. `seen(path, bytes)` is told of each file removed (or, with dry_run, that would be).
        A folder without a store file is left alone: its images may belong to a file moved away."""
        if not self.db_path.is_file():
            return 0
        with self.db.tx(False) as conn:
            used = {r[0] for r in conn.execute("SELECT image FROM turns UNION SELECT image FROM turn_masks")}
        removed = 0
        for path, size in itertools.islice(self.files.unreferenced(used, time.time() - float(min_age_s)), limit):
            if not dry_run:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
            removed += 1
            if seen is not None:
                seen(path, size)
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
        raise InputError(f"store_dir {clip(store_dir)} is inside the default store's image folder; choose another name")
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
