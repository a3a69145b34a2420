"""The values the verification passes: what a step made (Composite), what one check found
(Finding), what all checks said (Verdict)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ...errors import InputError
from .content import ContentRead, read_content

STEPS = ("reveal", "guard", "undo")


@dataclass(frozen=True, eq=False)
class Composite:
    """One step's result as the verification reads it. Every array is in the kept picture's frame
    and size: pictures uint8 H×W×3, masks H×W.

    kept:      the picture the step would hand back.
    fallback:  what is handed back when the step steps aside. Reveal and the Drift Guard: the
               editor's picture (after Reveal, for the guard). The undo: I_{t-1} (the editor then runs).
    old:       the earlier picture the step wrote pixels from, warped into kept's frame. Reveal: the
               reference I_{k-1}; the Drift Guard: I_{t-1}; the undo: I_{k-1}.
    written:   float32 in [0, 1], how much of `old` kept holds at each pixel (kept ~ written·old +
               (1 - written)·fallback, up to the step's colour fit and seam correction).
    old_valid: bool, where `old`'s warped frame holds real pixels; None when the frames agree.
    fallback_valid: bool, where the fallback, read in kept's frame, holds real pixels (the Drift
               Guard: the editor's picture aligned into I_{t-1}'s frame); None everywhere.
    cutout:    the old pixels kept are a subject cut out whole and set on the editor's new picture (the
               Drift Guard's background route), not the scene around an edit.
    """

    step: str
    kept: np.ndarray
    fallback: np.ndarray
    old: np.ndarray
    written: np.ndarray
    old_valid: np.ndarray | None = None
    fallback_valid: np.ndarray | None = None
    cutout: bool = False

    def __post_init__(self):
        if self.step not in STEPS:
            raise InputError(f"Composite.step must be one of {STEPS}, got {self.step!r}")
        for name in ("kept", "fallback", "old", "written"):
            if not isinstance(getattr(self, name), np.ndarray):
                raise InputError(f"Composite.{name} must be a numpy array, got {type(getattr(self, name)).__name__}")
        shape = self.kept.shape
        if len(shape) != 3 or shape[2] != 3 or self.kept.dtype != np.uint8 or min(shape[:2]) < 1:
            raise InputError(f"Composite.kept must be uint8 H×W×3, got {self.kept.dtype} {shape}")
        for name in ("fallback", "old"):
            a = getattr(self, name)
            if a.shape != shape or a.dtype != np.uint8:
                raise InputError(f"Composite.{name} must be uint8 {shape} like kept, got {a.dtype} {a.shape}")
        for name in ("written", "old_valid", "fallback_valid"):
            a = getattr(self, name)
            if a is None:
                continue
            if not isinstance(a, np.ndarray) or a.shape != shape[:2]:
                raise InputError(f"Composite.{name} must be an array of {shape[:2]} (kept's H×W), got "
                                 f"{getattr(a, 'shape', type(a).__name__)}")
            if name != "written" and a.dtype != bool:
                raise InputError(f"Composite.{name} must be a bool mask, got {a.dtype}")
        if self.written.dtype.kind != "f" or not np.isfinite(self.written).all() \
                or float(self.written.min()) < 0.0 or float(self.written.max()) > 1.0:
            raise InputError(f"Composite.written must be float weights in [0, 1], got {self.written.dtype} "
                             f"(pass the step's source weight as float32)")

    @cached_property
    def content(self) -> ContentRead:
        """What the result shows, read once on the grid for the checks that look at content (content.py)."""
        return read_content(self)


@dataclass(frozen=True)
class Finding:
    """One failed check: its name (one of checks.CHECK_NAMES), the words for the record, and whether
    it is final: no mend can cure it (the editor re-drew the picture around the edit, a long rim along
    the edit's edge), so the verification fails at once and names it first."""

    check: str
    detail: str
    final: bool = False


@dataclass(frozen=True, eq=False)
class CheckRead:
    """What one check measured (JSON-able numbers for the record), the finding when it failed, and
    an optional mend: a bool H×W mask of pixels that should take the fallback's pixels instead
    (old content the kept edit surrounds or cuts "joins the edit"). A check that mends still
    reports its finding; the driver mends once and checks again."""

    measured: dict = field(default_factory=dict)
    finding: Finding | None = None
    mend: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Verdict:
    """What the verification said of one step's result: the picture to hand back (`image`, the
    mended one when a mend passed), whether it passed, the findings that made it fail, whether a
    mend was applied, the measurements per check, and the written weight of `image` (the
    Composite's, mended; None when it failed: the fallback holds no old pixel)."""

    image: np.ndarray
    passed: bool
    findings: tuple[Finding, ...] = ()
    mended: bool = False
    measured: dict = field(default_factory=dict)
    seconds: float = 0.0
    written: np.ndarray | None = None

    @property
    def failed_check(self) -> str | None:
        """The first check that failed (None when it passed, mended or not)."""
        return None if self.passed else self.findings[0].check

    def reason(self) -> str:
        """Words for the record when it failed: the check and what it saw."""
        if self.passed:
            return "verified"
        f = self.findings[0]
        return f"the result failed its verification ({f.check}: {f.detail})"

    def record(self) -> dict:
        """JSON-able: passed, mended, the failed checks and the measurements."""
        return {"passed": self.passed, "mended": self.mended,
                "failed": [{"check": f.check, "detail": f.detail} for f in self.findings],
                "measured": self.measured, "seconds": round(self.seconds, 4)}
