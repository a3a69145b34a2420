"""The values drift_guard's steps pass on (run.py's driver): each step returns one of them, or the
GuardResult that ends the guard early, and no step fills in another's.

    GuardInputs   step 1: the two pictures, the turn's record, the user's mask, checked
    ScopeRead     step 2: how local the edit is (the user's mask, or the request's EditScope)
    Frame         step 3: how the editor's image is read in I_{t-1}'s frame
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..alignment import Alignment, support, warp_float
from ..change_record import ChangeRecord
from ..structure import StructureWarp
from .params import GuardParams
from .result import GuardResult, stepped_aside


@dataclass(frozen=True, eq=False)
class GuardInputs:
    """Step 1's value: what one drift_guard call was given, checked."""

    prev: np.ndarray             # I_{t-1} and I_t as given (uint8 H×W×C, one size)
    cur: np.ndarray
    prev3: np.ndarray            # their RGB (arrays.rgb3)
    cur3: np.ndarray
    change: ChangeRecord         # the turn's change record, I_{t-1} -> I_t
    user: np.ndarray | None      # the user's mask, in I_{t-1}'s frame (None: the change mask decides)
    params: GuardParams
    px: dict                     # margin and band in pixels (GuardParams.pixels)
    base: dict                   # the record every result starts from
    shift: float                 # the whole picture's colour shift (grade.colour_shift)

    @property
    def shape(self) -> tuple[int, int]:
        """(H, W) of both pictures."""
        return self.prev.shape[:2]

    @property
    def al(self) -> Alignment:
        """The turn's alignment I_{t-1} -> I_t."""
        return self.change.alignment

    @property
    def info(self) -> dict:
        """The turn's change record's figures (colour fit, stability grid) as the rules read them."""
        return dict(self.change.info)

    def aside(self, reason: str, **extra: Any) -> GuardResult:
        """The guard steps aside on the record it started from (result.stepped_aside)."""
        return stepped_aside(self.cur, self.base, reason, **extra)


@dataclass(frozen=True)
class ScopeRead:
    """Step 2's value: how local the edit is, as the user's mask or the request's words say."""

    local: bool                  # the edit is local (the user's mask or the request's words say so)
    places: int | None           # how many places the request changes (None: not read)
    named: bool                  # the request (or the user's mask) names what it changes


@dataclass(frozen=True, eq=False)
class Frame:
    """Step 3's value: how the editor's image is read in I_{t-1}'s frame. Without a structure warp
    the turn's alignment is undone and the turn's record holds; after one (a re-render) the change
    was measured again through it, in I_{t-1}'s frame: a new record, a new seed, no motion left."""

    info: dict                          # the change record's figures the rules read
    inv: Alignment                      # I_t's frame -> I_{t-1}'s (IDENTITY once the record is in I_{t-1}'s)
    sw: StructureWarp | None            # the structure warp, when the turn's alignment alone does not do
    seed: np.ndarray | None             # the change measured again through it (None: the turn's change mask)
    base: dict                          # the record every result starts from
    graded: bool                        # the edit is mapped into I_{t-1}'s grade (a local edit, an invertible shift)

    def sample(self, cur3: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
        """The editor's pixels (float RGB) on `box` (y0, y1, x0, x1) of I_{t-1}'s frame."""
        return warp_float(cur3, self.inv, box=box) if self.sw is None else self.sw.sample(cur3, box)

    def support(self, shape: tuple[int, int]) -> np.ndarray:
        """bool H×W: where the editor's image, read in I_{t-1}'s frame, has pixels."""
        return support(self.inv, shape) if self.sw is None else self.sw.support((0, shape[0], 0, shape[1]))
