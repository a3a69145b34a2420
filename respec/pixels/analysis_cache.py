"""The analysis cache: what the pixel steps of one turn (and of a whole conversation) would
otherwise compute again, in one object (beyond the paper).

A turn's change record C_t is asked for by Reveal Composite, the Drift Guard, run_turn and History
Append; the provenance selector reads the same few figures of every image and turn of a long
conversation again on each new turn; the controller shows the same history images, downscaled,
on every turn. Everything is kept by content (the images' digests), so a cache can never hand
one history's figures to another picture, and in bounded LRUs (respec/lru.py), so a long session
cannot grow them without end.

One object holds them all (`CACHE`, the default of every entry that reads one; run_turn and the
nodes pass it on), so what is kept, and how much, is read here and nowhere else:

    changes       change records C_t (typed ChangeRecords) by the two images' digests, size, params
    alignments    the alignment I_{t-1} -> I_t by the two images' digests and size
    work          float RGB images at a working size
    small, grey   the stability figures per image and per turn; each image's blurred grey
    summaries     the provenance index's summaries of stored change masks (respec/pixels/provenance_index.py)
    packed        ... and of the masks it computed, with the mask bit-packed
    heads         ... and its "last change" map per history
    object_turns  the additions after each turn of a history (respec/controller/object_turns.py)
    downscaled    history images shrunk to a controller's pixel budget (respec/controller/prompts.py)
    request_words the object words a request added, by its text (respec/controller/restoration.py)
    pngs          stored images encoded as PNG for the panel, by digest and box (respec/web.py)
    undo_answers  history first's answer to a graph's turn (respec/post_edit/undo_step.py history_answer)

`stats()` says how full each table is and how often it answered; `counts` keeps the provenance
index's work counters (summaries made, masks computed, turns stamped). The model cache
(respec/models.py) is the only other cache of the core.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

from ..lru import LRU

MAX_SUMMARIES = 200_000         # stored-mask summaries kept (a few hundred bytes each)
MAX_PACKED_BYTES = 256 << 20    # bit-packed computed masks kept (256 MiB: 2,000 masks at 1024²)
MAX_HEADS = 16                  # histories whose "last change" map is kept ...
MAX_HEAD_BYTES = 256 << 20      # ... within this many bytes of maps (16 at 1024², 1 at 8192²)
MAX_DOWNSCALED_BYTES = 256 << 20   # downscaled controller images (RGB bytes)
MAX_PNG_BYTES = 32 << 20        # encoded images kept for the panel


def _nbytes(a) -> int:
    return a.nbytes


def _head_bytes(head) -> int:
    return head.last.nbytes


def _pil_bytes(im) -> int:
    return im.size[0] * im.size[1] * len(im.getbands())


class Counters:
    """Named work counters (thread-safe): what a cache saved is what they do not grow by."""

    def __init__(self):
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        """Count `n` more of `name`."""
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + int(n)

    def snapshot(self) -> dict[str, int]:
        """The counts so far (a copy)."""
        with self._lock:
            return dict(self._counts)

    def clear(self) -> None:
        """Start every count again from zero."""
        with self._lock:
            self._counts.clear()


@dataclass(frozen=True, eq=False)
class AnalysisCache:
    """The per-image analysis kept across a turn's steps and a conversation's turns (module docstring)."""

    # Change records (ChangeRecord) by (I_{t-1} digest, I_t digest, size, ChangeParams): masks of
    # in-memory histories are recomputed on demand, and one graph (or one benchmark turn) must not
    # compute the same mask twice; Reveal Composite records the one it made (remember_change).
    changes: LRU = field(default_factory=lambda: LRU(64))
    # Alignments by (I_{t-1} digest, I_t digest, size): Reveal Composite, the Drift Guard, the change
    # record and History Append ask for one turn's alignment, estimated once.
    alignments: LRU = field(default_factory=lambda: LRU(64))
    # Float RGB images resized to a working size, by (digest, size): the turn's alignment, its change
    # record and Reveal Composite read the same few large images (a few hundred MB each at most).
    work: LRU = field(default_factory=lambda: LRU(4))
    # The stability figures per image and per turn, by content (block stds, a turn's change share
    # per block): a few KB each.
    small: LRU = field(default_factory=lambda: LRU(max_items=65_536))
    # Each image's blurred grey at the stability size (float32, at most 512 px a side: 1 MB at 512²),
    # for the blocks a change cuts through; 256 MB keep a conversation of 256 images (more: the
    # oldest are made again).
    grey: LRU = field(default_factory=lambda: LRU(max_bytes=256 << 20, size_of=_nbytes))
    # The scenario generator's photos, decoded, by (ref, base folder), and the shipped photos'
    # content hashes (respec/sim/generate.py): a set's scenarios share about ten photos.
    decoded: LRU = field(default_factory=lambda: LRU(32))
    # The simulated world's drawings (respec/sim: sprites by label and size, objects with their tint
    # and styles): a SIMULATION's pictures are drawn from a few shapes, again on every turn.
    sprites: LRU = field(default_factory=lambda: LRU(1536))
    # The provenance index (respec/pixels/provenance_index.py): every stored mask's summary (far
    # above any conversation), the computed masks' bit-packed up to a byte budget (the oldest would
    # be computed again), and the "last change" maps of the most recently used histories.
    summaries: LRU = field(default_factory=lambda: LRU(max_items=MAX_SUMMARIES))
    packed: LRU = field(default_factory=lambda: LRU(max_items=MAX_SUMMARIES, max_bytes=MAX_PACKED_BYTES,
                                                    size_of=_nbytes))
    heads: LRU = field(default_factory=lambda: LRU(max_items=MAX_HEADS, max_bytes=MAX_HEAD_BYTES,
                                                   size_of=_head_bytes))
    # The additions after turn t of a history, by the history's chain key after turn t
    # (respec/controller/object_turns.py): a history extending one already read costs its new turns.
    object_turns: LRU = field(default_factory=lambda: LRU(4096))
    # History images shrunk to a controller's pixel budget, by (digest, budget): a conversation's
    # earlier images are shrunk once, not on every turn (the PIL images are shared, not copied).
    downscaled: LRU = field(default_factory=lambda: LRU(max_bytes=MAX_DOWNSCALED_BYTES, size_of=_pil_bytes))
    # The object words each request added, by the request's text (respec/controller/restoration.py):
    # every later turn of a conversation asks again about every earlier request.
    request_words: LRU = field(default_factory=lambda: LRU(8192))
    # Stored images encoded as PNG for the panel, by (digest, box) (respec/web.py): a verified
    # image is not decoded and encoded again on every request.
    pngs: LRU = field(default_factory=lambda: LRU(max_bytes=MAX_PNG_BYTES, size_of=len))
    # History first's StepResult for one turn of a graph, by (the history's fingerprint, the plan,
    # the request, UndoParams) (respec/post_edit/undo_step.py history_answer): ComfyUI asks the Drift
    # Guard node twice, whether it needs the editor's image (check_lazy_status) and then its outputs.
    undo_answers: LRU = field(default_factory=lambda: LRU(8))
    # Work counters of the provenance index (summaries_made, masks_computed, turns_stamped).
    counts: Counters = field(default_factory=Counters)

    # The change record a post-edit step made for the image it leaves, by (I_{t-1} digest, that
    # image's digest, size): the Drift Guard node writes it (respec/post_edit/guard_step.py
    # guard_images), History Append's change lookup reads it (respec/turn.py keep_turn). In a graph
    # the guard's image reaches History Append through another node; run_turn needs no cache (the
    # record comes with the step's StepResult).
    step_records: LRU = field(default_factory=lambda: LRU(64))

    def remember_step_change(self, previous, image, size: tuple[int, int], change) -> None:
        """Keep `change` (a TurnMask), the change record of `previous` -> `image` (StoredImages) at
        `size` that a post-edit step derived, for History Append (`step_change`)."""
        self.step_records.put((previous.digest, image.digest, tuple(size)), change)

    def step_change(self, previous, image, size: tuple[int, int]):
        """The change record a post-edit step left for `previous` -> `image` at `size`
        (remember_step_change), or None: then the change is measured (change_mask.change_for)."""
        return self.step_records.get((previous.digest, image.digest, tuple(size)))

    def tables(self) -> dict[str, LRU]:
        """The tables by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "counts"}

    def clear(self) -> None:
        """Forget everything (a benchmark's cold start; tests); the work counters go on."""
        for lru in self.tables().values():
            lru.clear()

    def stats(self) -> dict:
        """Per table: items kept, bytes (tables bounded by bytes), hits and misses of `get`; and the
        work counters."""
        out: dict = {name: lru.stats() for name, lru in self.tables().items()}
        out["counts"] = self.counts.snapshot()
        return out


CACHE = AnalysisCache()
