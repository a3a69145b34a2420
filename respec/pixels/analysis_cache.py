"""The per-turn analysis cache: what the pixel steps of one turn (and of a whole conversation)
would otherwise compute again (beyond the paper).

A turn's change record C_t is asked for by Reveal Composite, the Drift Guard, run_turn and History
Append; the provenance selector reads the same few figures of every image and turn of a long
conversation again on each new turn. Everything is kept by content (the images' digests), so a
cache can never hand one history's figures to another picture, and in bounded LRUs
(respec/lru.py), so a long session cannot grow them without end. One object holds them all
(`CACHE`), so what is kept, and how much, is read in one place; the alignment of a pair of images
is kept beside its estimate (respec/pixels/alignment.py `alignment_for`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lru import LRU


def _nbytes(a) -> int:
    return a.nbytes


@dataclass(frozen=True, eq=False)
class AnalysisCache:
    """The pixel analysis kept across a turn's steps and a conversation's turns (module docstring)."""

    # Change records (TurnMask) by (I_{t-1} digest, I_t digest, size, ChangeParams): masks of
    # in-memory histories are recomputed on demand, and one graph (or one benchmark turn) must not
    # compute the same mask twice; Reveal Composite records the one it made (remember_change).
    changes: LRU = field(default_factory=lambda: LRU(64))
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

    def clear(self) -> None:
        """Forget everything (a benchmark's cold start; tests)."""
        for lru in (self.changes, self.work, self.small, self.grey, self.step_records):
            lru.clear()


CACHE = AnalysisCache()
