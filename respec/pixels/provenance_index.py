"""The provenance index: what a long conversation's change masks say, kept incrementally.

`provenance_of(history)` (respec/pixels/provenance.py) used to read every turn's change mask C_t on
every call, and the covering-turn search then took the mean of each: O(T·H·W) per restoration
turn, and past the 64-entry mask cache every missing mask was computed again. The index keeps,
per history (one conversation, one branch of it):

- per turn, a summary of its change mask: the share of the image it changed, a GRID×GRID
  block grid of where (for cheap overlap tests), and for a turn without a stored mask the mask
  itself, bit-packed (computed once, by the function respec/pixels/provenance.py passes in);
- the per-pixel map "last turn that changed this pixel" (int32 H×W at the history's size),
  stamped once per new turn: extending the index by one turn costs O(H·W), so does
  `unchanged_since(k)` (pixels whose last change is at most k).

Guarantees:
- The same answers as reading every mask: shares are `float(mask.mean())` of the mask at the
  history's size, the map is the loop "out[C_t] = t" over t = 1..T, masks are the stored ones
  (resized nearest to the history's size) or the computed ones.
- Content-addressed: a turn is known by its stored mask's digest, or by its two images' digests
  and the mask settings when it has none. A history rebuilt from the same turns (a session loaded
  again, a benchmark config repeating a prefix) finds its summaries; a rewind-and-branch reuses
  every summary of the common turns and restamps only the map.
- Bounded memory: everything is kept in the analysis cache (respec/pixels/analysis_cache.py,
  passed in; its bounds are set there): summaries of stored masks are a few hundred bytes and are
  all kept (up to MAX_SUMMARIES, far above any conversation); computed masks are kept bit-packed
  up to MAX_PACKED_BYTES (least recently used go first and would be computed again); the maps of
  the MAX_HEADS most recently used histories are kept, within MAX_HEAD_BYTES.
- Thread-safe (the cache's tables are; the work happens outside their locks).

Beyond respec/pixels/provenance.py's own alignments and stability records (a later change), a turn's
contribution to the map is whatever `stamp_mask` returns for it: C_t, or C_t united with the
pixels it destabilised; a non-identity alignment would carry the map into the new frame with
`carry` before stamping. Neither is used yet.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..history import CHANGE, History, TurnMask
from ..lru import LRU
from .analysis_cache import CACHE, AnalysisCache
from .masks import history_size, mask_at

GRID = 32                       # block grid of a mask summary (GRID x GRID blocks)

# compute(prev StoredImage, cur StoredImage, size (w, h), params) -> TurnMask: the change mask of a
# turn that has none stored (respec/pixels/provenance.py passes change_mask.change_between, cached).
Compute = Callable[[Any, Any, tuple, Any], TurnMask]


@dataclass(frozen=True, eq=False)
class MaskSummary:
    """One turn's change mask, summarised: the share of the image it changed, the GRID×GRID
    blocks it touches, and the mask itself (bit-packed) when the index computed it."""

    fraction: float
    grid: np.ndarray                 # bool g×g (g = min(GRID, H, W)): blocks holding a changed pixel
    shape: tuple[int, int]           # (H, W): the history's size
    packed: np.ndarray | None = None # np.packbits of a computed mask (None: read the stored one)
    info: dict | None = None         # the computed TurnMask's info (a stored one's is with its turn)

    @property
    def nbytes(self) -> int:
        """Bytes it holds (the grid and the packed mask), counted against the index's memory bounds."""
        return int(self.grid.nbytes + (self.packed.nbytes if self.packed is not None else 0))

    def overlaps(self, other: "MaskSummary") -> bool:
        """Whether the two masks touch a common block (a superset of touching a common pixel)."""
        return self.grid.shape == other.grid.shape and bool((self.grid & other.grid).any())


def block_grid(mask: np.ndarray, grid: int = GRID) -> np.ndarray:
    """bool g×g: the blocks (g = min(grid, H, W) per side, edges by rounding) holding a True pixel."""
    m = np.asarray(mask, np.uint8)
    h, w = m.shape
    g = max(1, min(grid, h, w))
    ys = np.linspace(0, h, g + 1).astype(int)[:-1]
    xs = np.linspace(0, w, g + 1).astype(int)[:-1]
    return np.maximum.reduceat(np.maximum.reduceat(m, ys, axis=0), xs, axis=1) > 0


def summarise(mask: np.ndarray, keep_mask: bool, info: dict | None = None) -> MaskSummary:
    """The summary of a bool H×W mask (keep_mask: also keep the mask, bit-packed, and `info`)."""
    m = np.asarray(mask, bool)
    grid = block_grid(m)
    grid.flags.writeable = False
    packed = np.packbits(m, axis=None) if keep_mask else None
    if packed is not None:
        packed.flags.writeable = False
    return MaskSummary(float(m.mean()) if m.size else 0.0, grid, m.shape, packed, dict(info or {}) if keep_mask else None)


def stored_mask_at(tm: TurnMask, size: tuple[int, int]) -> np.ndarray:
    """A stored TurnMask as bool H×W at the history's size (w, h) (nearest when resized)."""
    return mask_at(tm, (size[1], size[0]), "a stored change mask")


# --------------------------------------------------------------------------- what is kept

@dataclass(frozen=True, eq=False)
class _Head:
    """The index of one history: turn keys, summaries and the "last change" map after turn T."""

    chain: tuple[str, ...]                     # chain key after each turn 0..T
    keys: tuple[tuple | None, ...]             # turn key of each turn (None for turn 0)
    summaries: tuple[MaskSummary | None, ...]
    last: np.ndarray                           # int32 H×W, read-only


def _summaries_of(cache: AnalysisCache, key: tuple) -> LRU:
    """The table a turn key's summary lives in: stored masks' (all kept) or computed ones' (bit-packed, by bytes)."""
    return cache.summaries if key[0] == "stored" else cache.packed


def stats(cache: AnalysisCache = CACHE) -> dict:
    """The index's work counters since the process started (summaries made, masks computed, turns
    stamped): what the index saved is what they do not grow by."""
    counts = cache.counts.snapshot()
    return {name: counts.get(name, 0) for name in ("summaries_made", "masks_computed", "turns_stamped")}


def clear(cache: AnalysisCache = CACHE) -> None:
    """Forget every summary and map (tests; the next call rebuilds what it needs)."""
    for lru in (cache.summaries, cache.packed, cache.heads):
        lru.clear()


# --------------------------------------------------------------------------- the index of a history

def _turn_key(history: History, t: int, size: tuple[int, int], params: Any) -> tuple:
    tm = history.turns[t].masks.get(CHANGE)
    if tm is not None:
        return ("stored", tm.image.digest, tuple(size))
    return ("computed", history.turns[t - 1].image.digest, history.turns[t].image.digest, tuple(size), params)


def _chain(prev: str, key: tuple) -> str:
    return hashlib.blake2b(f"{prev}|{key!r}".encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, eq=False)
class ProvenanceIndex:
    """The index of one history at its latest turn T (an immutable view). Turn t's mask,
    share and block grid; the "last turn that changed each pixel" map; the turns whose mask was
    not stored (`computed`)."""

    history: History
    size: tuple[int, int]                       # (w, h): the history's size
    summaries: tuple[MaskSummary | None, ...]   # index 0: None (I_0)
    last: np.ndarray                            # int32 H×W, read-only
    computed: tuple[int, ...]

    @property
    def turns(self) -> int:
        """T, the latest turn covered."""
        return len(self.summaries) - 1

    def share(self, t: int) -> float:
        """The share of the image turn t changed (0.0 for turn 0)."""
        return 0.0 if t == 0 else self.summaries[t].fraction

    def summary(self, t: int) -> MaskSummary | None:
        """Turn t's mask summary (None for turn 0, I_0)."""
        return self.summaries[t]

    def mask(self, t: int) -> np.ndarray:
        """C_t as bool H×W at the history's size (all False for turn 0); read-only."""
        w, h = self.size
        if t == 0:
            m = np.zeros((h, w), bool)
        else:
            s = self.summaries[t]
            if s.packed is not None:
                m = np.unpackbits(s.packed, count=h * w).reshape(h, w).astype(bool)
            else:
                tm = self.history.turns[t].masks.get(CHANGE)
                m = stored_mask_at(tm, self.size)
        m.flags.writeable = False
        return m

    def turns_touching(self, t: int) -> list[int]:
        """The turns j in 1..T (j != t) whose change mask touches a block turn t's mask touches."""
        s = self.summaries[t]
        if s is None:
            return []
        return [j for j in range(1, self.turns + 1) if j != t and self.summaries[j].overlaps(s)]

    def info(self, t: int) -> dict:
        """Turn t's change-mask info (the stored mask's, or the computed one's); {} for turn 0."""
        if t == 0:
            return {}
        s = self.summaries[t]
        if s.packed is not None:
            return dict(s.info or {})
        return dict(self.history.turns[t].masks[CHANGE].info)

    def masks(self) -> "IndexedMasks":
        """C_0..C_T as a sequence that reads each mask when it is asked for."""
        return IndexedMasks(self)

    def last_change(self) -> np.ndarray:
        """int32 H×W: the latest turn that changed each pixel (0 = never changed); a copy."""
        return self.last.copy()

    def unchanged_since(self, k: int) -> np.ndarray:
        """bool H×W: the pixels no turn after k changed."""
        return self.last <= k


class IndexedMasks(Sequence):
    """C_0..C_T of an index, each read (or unpacked) when asked for: what Provenance.changes holds,
    without T masks in memory."""

    def __init__(self, index: ProvenanceIndex):
        self._index = index

    def __len__(self) -> int:
        return self._index.turns + 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._index.mask(t) for t in range(*i.indices(len(self))))
        n = len(self)
        t = i + n if i < 0 else i
        if not 0 <= t < n:
            raise IndexError(f"turn {i} is not in 0..{n - 1}")
        return self._index.mask(t)


def index_for(history: History, params: Any, compute: Compute,
              stamp_mask: Callable[[History, int, np.ndarray, dict], np.ndarray] | None = None,
              carry: Callable[[History, int, np.ndarray], np.ndarray] | None = None,
              cache: AnalysisCache = CACHE) -> ProvenanceIndex:
    """The provenance index of `history` at its latest turn (see the module docstring): found, or
    extended from the longest indexed prefix of it, or built. `compute` makes a missing mask
    (once); `params` is part of a computed mask's key. stamp_mask(history, t, C_t, info) -> the
    pixels turn t counts as changed in the map (default C_t; info: the mask's info dict); carry(history, t, last) -> the map carried
    into turn t's frame (default: unchanged). The summaries and maps are kept in `cache`."""
    size = history_size(history)
    w, h = size
    n = len(history.turns)
    keys: list[tuple | None] = [None]
    chain = [f"{size}"]
    for t in range(1, n):
        keys.append(_turn_key(history, t, size, params))
        chain.append(_chain(chain[-1], keys[-1]))
    j, head = n - 1, None
    while j >= 0:
        head = cache.heads.get(chain[j])
        if head is not None:
            break
        j -= 1
    summaries = list(head.summaries) if head is not None else [None]
    for t in range(len(summaries), n):
        summaries.append(_summaries_of(cache, keys[t]).get(keys[t]))
    if head is not None and j == n - 1:
        return _view(history, size, keys, head.summaries, head.last)
    last = head.last.copy() if head is not None else np.zeros((h, w), np.int32)
    start = (j + 1) if head is not None else 1
    for t in range(start, n):
        m = None
        s = summaries[t]
        if s is None:
            m, s = _summarise_turn(history, t, size, params, keys[t], compute, cache)
            summaries[t] = s
        if carry is not None:
            last = carry(history, t, last)
        if m is None:
            m = (np.unpackbits(s.packed, count=h * w).reshape(h, w).astype(bool) if s.packed is not None
                 else stored_mask_at(history.turns[t].masks[CHANGE], size))
        if stamp_mask is not None:
            info = s.info if s.packed is not None else history.turns[t].masks[CHANGE].info
            m = stamp_mask(history, t, m, dict(info or {}))
        last[m] = t
    last.flags.writeable = False
    new = _Head(tuple(chain), tuple(keys), tuple(summaries), last)
    cache.heads.put(chain[-1], new)
    cache.counts.add("turns_stamped", n - start)
    return _view(history, size, keys, new.summaries, last)


def _summarise_turn(history: History, t: int, size: tuple[int, int], params: Any, key: tuple,
                    compute: Compute, cache: AnalysisCache) -> tuple[np.ndarray, MaskSummary]:
    tm = history.turns[t].masks.get(CHANGE)
    stored = tm is not None
    if not stored:
        tm = compute(history.turns[t - 1].image, history.turns[t].image, size, params)
    m = stored_mask_at(tm, size)
    s = summarise(m, keep_mask=not stored, info=tm.info)
    _summaries_of(cache, key).put(key, s)
    cache.counts.add("summaries_made")
    cache.counts.add("masks_computed", 0 if stored else 1)
    return m, s


def _view(history: History, size, keys, summaries, last) -> ProvenanceIndex:
    computed = tuple(t for t in range(1, len(keys)) if keys[t][0] == "computed")
    return ProvenanceIndex(history, tuple(size), tuple(summaries), last, computed)
