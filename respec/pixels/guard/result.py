"""What the Drift Guard returns: GuardResult, made by one of two functions (`applied_result` when it
kept I_{t-1} outside the edit region, `stepped_aside` when it kept the editor's image)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...history import TurnMask
from ..alignment import Alignment


@dataclass(frozen=True, eq=False)
class GuardResult:
    """What the guard did: the output image (the editor's when it stepped aside), the kept-edit
    weights in the output's frame (1 = the editor's pixel, 0 = I_{t-1}'s; all 1 when it stepped
    aside), the record for meta.post_edit, and the change record C_t of I_{t-1} -> this output
    (`change`: derived from the edit's, change.guarded_change, when it applied; the edit's own when
    it stepped aside; None where it has none): History Append keeps it with the turn instead of
    measuring it again (respec/post_edit/guard_step.py hands it over)."""

    image: np.ndarray
    weight: np.ndarray
    applied: bool
    reason: str
    record: dict = field(default_factory=dict)
    change: TurnMask | None = None

    def turn_mask(self) -> TurnMask | None:
        """The `guard_edit` mask to keep with the turn (None when it stepped aside)."""
        return TurnMask.from_mask(self.weight, self.record) if self.applied else None

    def line(self) -> str:
        """One line of what it did (the node's text output)."""
        if not self.applied:
            return f"Drift Guard stepped aside: {self.reason} (the editor's image is kept)"
        r = self.record
        return (f"Drift Guard kept the edit in {r['edit_fraction']:.1%} of the picture and the previous image "
                f"elsewhere ({r['alignment_undone']}; band {r['band_px']} px)")


def stepped_aside(cur: np.ndarray, base: dict, reason: str, **extra: Any) -> GuardResult:
    """The guard steps aside: the editor's image `cur` (uint8 H×W×C), all weights 1, and the record
    (`base`, the record every result starts from) says why."""
    out = cur.copy()
    out.flags.writeable = False
    return GuardResult(out, np.ones(cur.shape[:2], np.float32), False, reason,
                       {**base, "applied": False, "stepped_aside": True, "reason": reason, **extra})


def applied_result(prev: np.ndarray, out: np.ndarray, weight: np.ndarray, rec: dict, al: Alignment,
                   undone: str | None = None) -> GuardResult:
    """The applied result: `out` (H×W×3) with I_(t-1)'s alpha or grey layout, and its record."""
    if prev.shape[2] == 4:
        out = np.concatenate([out, prev[:, :, 3:]], axis=2)
    elif prev.shape[2] == 1:
        out = np.round(out.mean(axis=2, keepdims=True)).astype(np.uint8)
    out.flags.writeable = False
    rec = {**rec, "applied": True, "stepped_aside": False, "reason": "kept the edit region, restored the rest",
           "kept_fraction": round(float((weight > 0).mean()), 6),
           "alignment_undone": undone or ("no motion" if al.is_identity else
                                          f"undid dx={al.dx:+.2f}, dy={al.dy:+.2f} px, scale {al.scale:.4f}")}
    return GuardResult(out, weight, True, rec["reason"], rec)


def mended_result(res: GuardResult, verdict: Any) -> GuardResult:
    """The applied result `res` with the verification's mended picture (verdict.image, RGB) and
    its weights (1 - verdict.written: the mended pixels are the editor's), the record saying so."""
    out = np.array(res.image, copy=True)
    if out.shape[2] >= 3:
        out[:, :, :3] = verdict.image
    else:   # a grey picture stays grey
        out[:, :, 0] = np.round(verdict.image.mean(axis=2)).astype(np.uint8)
    out.flags.writeable = False
    weight = (1.0 - verdict.written).astype(np.float32)
    found = verdict.findings[0]
    reason = f"{res.reason}; {found.check} mended"
    rec = {**res.record, "reason": reason, "kept_fraction": round(float((weight > 0).mean()), 6),
           "verify": verdict.record()}
    return GuardResult(out, weight, True, reason, rec, res.change)
