"""A stored session's turns: what a turn's fields become in the store (checked JSON text), and
the lazy sequence a loaded session holds (the latest turns in memory, the earlier ones read on
first use).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import InputError
from ..plan import Plan
from ..text import check_json, check_text, message, read_json

MAX_META_BYTES = 256 * 1024   # a turn's meta as JSON text (the pack's own records are a few kB)


def storable_text(text: str, what: str) -> str:
    """`text` if it passes the pack's text rule (respec/text.py: SQLite stores UTF-8, and a lone
    surrogate, which a JSON string such as "\\ud800" can carry, has none; no NUL); InputError naming
    `what` otherwise, the same for requests, instructions, plans and meta keys or values."""
    return check_text(text, what)


def json_dict(value: Any, what: str) -> tuple[dict, str]:
    """(normalised dict, JSON text): what a reload would give, so cached and loaded agree. The value
    must be a dict nested at most MAX_JSON_DEPTH deep (so every reader can serve it) whose JSON text
    is at most MAX_META_BYTES and passes the text rule."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a JSON object (dict), got {type(value).__name__}")
    check_json(value, what)
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InputError(message(f"{what} must be JSON-serialisable: {e}")) from e
    check_text(text, f"{what} (a key or a value)")
    check_text(text, f"{what} as JSON", MAX_META_BYTES, shorten="keep large data in files and store their names")
    return json.loads(text), text


def stored_json(text: str, what: str) -> Any:
    """A JSON value the store wrote (a turn's meta, a mask's info), read back with the same bounds
    it was written under: ValueError (which the store reports as a damaged row) otherwise."""
    try:
        return read_json(text, what, max_bytes=None, example="JSON")
    except InputError as e:
        raise ValueError(str(e)) from None


def plan_json(plan: Plan | None) -> tuple[Plan | None, str | None]:
    """(normalised plan, JSON text) of a turn's plan, as json_dict does for a dict; (None, None) for none."""
    if plan is None:
        return None, None
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a respec Plan (RESPEC_PLAN), got {type(plan).__name__}")
    check_json([plan.reasoning, plan.meta], "the plan's reasoning or meta")
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
