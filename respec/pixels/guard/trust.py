"""Whether the turn's alignment I_{t-1} -> I_t can be undone: a re-framing (a zoom or a shift larger
than an editor's drift) cannot, and an alignment that explains the motion badly is not trusted."""
from __future__ import annotations

from ..alignment import Alignment
from .params import NO_MOTION_FOUND, GuardParams


def reframed(al: Alignment, shape: tuple[int, int], p: GuardParams) -> str:
    """Why the alignment is a re-framing, not an editor's drift ('' = it is not)."""
    if al.is_identity:
        return ""
    if abs(al.scale - 1.0) > p.max_scale_dev:
        return f"a zoom of {(al.scale - 1.0):+.1%} is a reframing, not an editor's drift"
    if al.max_motion((shape[1], shape[0])) > p.max_motion_frac * min(shape):
        return f"a motion of {al.max_motion((shape[1], shape[0])):.1f} px is a reframing, not an editor's drift"
    return ""


def untrusted(al: Alignment, shape: tuple[int, int], p: GuardParams) -> str:
    """Why the alignment is not trusted ('' = trusted; a re-framing: `reframed`)."""
    if al.untrusted_reason:     # the fit did not beat the null model (alignment.py, step 6): nothing to undo
        return f"the alignment is not trusted: {al.untrusted_reason}"
    if al.method.startswith(NO_MOTION_FOUND):
        return "the editor re-rendered the scene: no consistent motion to undo"
    if al.is_identity:
        return ""
    if al.residual_px > p.max_residual_px:
        return f"the alignment leaves {al.residual_px:.2f} px of residual motion (limit {p.max_residual_px})"
    if al.inliers < p.min_inliers:
        return f"only {al.inliers:.0%} of the picture agrees with the alignment (limit {p.min_inliers:.0%})"
    return ""
