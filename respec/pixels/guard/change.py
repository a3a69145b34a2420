"""The change records the Drift Guard reads and makes: the turn's C_t (`guard_change`, shared with
History Append through the analysis cache) and the record of its own output (`guarded_change`,
derived from the edit's, not measured again). The guard returns the derived record on its result
(GuardResult.change); the post-edit step hands it to History Append (respec/post_edit/guard_step.py)."""
from __future__ import annotations

from typing import Any

from ...history import StoredImage, TurnMask
from ..alignment import Alignment, warp
from ..change_mask import DEFAULT_PARAMS, ChangeParams, change_between
from ..change_record import ChangeRecord
from .params import METHOD
from .result import GuardResult

KEPT_FROM = 0.5     # an output pixel is the edit's where the kept-edit weight reaches this (half of the seam)


def guard_change(previous: StoredImage, edited: StoredImage, size: tuple[int, int] | None = None,
                 params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """The change record of I_{t-1} -> I_t that History Append keeps (the same cache: computed
    once per turn, whoever asks first)."""
    return change_between(previous, edited, tuple(size or previous.size), params)


def guarded_change(res: GuardResult, change: ChangeRecord, size: tuple[int, int]) -> TurnMask:
    """The change record of I_{t-1} -> the guard's output `res` (applied), derived from the edit's
    `change` (not measured again): the edit's change carried into I_{t-1}'s frame and limited to the
    kept region, no motion (the output is in I_{t-1}'s frame), the scene outside it held exactly."""
    size = tuple(size)
    al = change.alignment
    if res.record.get("route") in ("coarse", "background"):    # the change record could not separate the edit: the kept region is it
        m = res.weight >= KEPT_FROM
    else:
        m = change.mask if al.is_identity else warp(change.mask, al.inverse(), order=0)
        m = m & (res.weight >= KEPT_FROM)
    ident = Alignment(method="identity (drift guard: in I_(t-1)'s frame)", size=size)
    info = {k: v for k, v in change.info.items() if k not in ("unstable_grid",)}
    info.update({"method": f"{change.info.get('method', '')}+{METHOD}", "fraction": round(float(m.mean()), 6),
                 "alignment": ident.record(), "edit_alignment": change.alignment_record(),
                 "stable_fraction": 1.0, "rerendered": False, "unstable_grid": _stable_grid(change.info),
                 "gain": [1.0, 1.0, 1.0], "bias": [0.0, 0.0, 0.0], "derived_by": METHOD})
    return TurnMask.from_mask(m, info)


def _stable_grid(info: Any) -> list[str]:
    """An all-stable block grid of the same shape as the record's (outside the kept region the
    output is I_{t-1} itself)."""
    rows = info.get("unstable_grid") or ["0"]
    return ["0" * len(r) for r in rows]


def with_exact_paste(res: GuardResult, exact: Any) -> GuardResult:
    """The guard's result with Reveal Composite's paste made of I_{k-1}'s own pixels inside the
    kept region (`exact`: an ExactPatch, or None: unchanged); the record says so (`exact_inside`)."""
    if exact is None or not res.applied:
        return res
    image = exact.apply(res.image, allowed=res.weight > 0)
    image.flags.writeable = False
    return GuardResult(image, res.weight, res.applied, res.reason, {**res.record, "exact_inside": exact.record()},
                       res.change)
