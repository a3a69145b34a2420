"""The Drift Guard's two other routes, where the change mask cannot give the edit region: a new
background (`background_route`: the region is everything but the subject the editor kept) and a
re-render that is pixel by pixel one with the edit (`coarse_route`: the region is the change of
content at a coarse scale, respec/pixels/edit_region.py)."""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..alignment import IDENTITY, Alignment, support, warp_float
from ..edit_region import coarse_change, coarse_size, hulls, kept_subject, main_change
from ..grade import GRADE_FROM, colour_shift, grade_record, into_grade, invertible
from ..masks import dilate
from ..structure import StructureWarp, plain_warp
from .arrays import bbox, float_rgb, rgb3
from .beyond_request import largest_groups
from .compose import compose, seam_reach
from .params import NEAR_FRAC, NO_MOTION_FOUND, GuardParams
from .result import GuardResult, applied_result
from .trust import reframed

MAIN_SHARE = 0.35         # in a re-render, a second change of content counts as one of the request's from this
                          # share of the first's mass
COARSE_MARGIN = 0.04      # ... and the edit region reaches this share of the shorter side beyond it (the subject's
                          # re-drawn rim)
GROW_LEVEL = 0.5          # the change of content grows over its surroundings whose residual is above this share of
GROW_OVER_MEDIAN = 2.0    # the level, and this many times the median residual (above the re-render's own change)
RING_GAP = 2              # the pose test's ring around the change of content starts this many coarse px out ...
RING_OUTER = 6            # ... and ends here (a ring of the subject the edit is part of, not the edit's own rim)


def background_route(prev: np.ndarray, cur: np.ndarray, al: Alignment, base: dict, params: GuardParams,
                     aside: Any, words: str) -> GuardResult:
    """The guard on a request for a new background (`words`: what the keyword rule read): the edit
    region is everything but the subject the editor kept (edit_region.kept_subject, in I_(t-1)'s
    frame after the turn's alignment or none, whichever holds more of it); the subject comes back as
    I_(t-1)'s own pixels, its edge
    blended into the new background by the seam (which corrects the background's band next to it).
    Steps aside when the alignment is a re-framing or not trusted, or when no subject held (the
    editor re-drew it too)."""
    shape = prev.shape[:2]
    px = params.pixels(shape)
    extra = {"route": "background", "background_request": words}
    framing = reframed(al, shape, params)
    if framing:
        return aside(framing, why="alignment", **extra)
    if al.residual_px > params.max_residual_px or al.method.startswith(NO_MOTION_FOUND):
        return aside(f"a new background, but the subject's alignment is not trusted "
                     f"({al.residual_px:.2f} px of residual motion)", why="alignment", **extra)
    prev3, cur3 = rgb3(prev), rgb3(cur)
    # The turn's alignment was measured on the whole picture, most of which is the new background:
    # it and no motion are tried on the coarse grid, and the one under which more of a subject held wins.
    cshape, _ = coarse_size(shape)
    small = np.asarray(Image.fromarray(np.ascontiguousarray(prev3)).resize(cshape[::-1], Image.BOX), np.float32) / 255.0
    tried = [(float(kept_subject(small, *plain_warp(a, shape).sample_coarse(cur3, cshape))[0].mean()), i, a)
             for i, a in enumerate((al, IDENTITY))]
    al = max(tried)[2]
    inv = al.inverse()
    P = float_rgb(prev3)
    E = warp_float(cur3, inv)
    src = support(inv, shape)
    subject, fit = kept_subject(P, E, src)
    if not subject.any():
        return aside("a new background, but no subject held: the editor re-drew what the request kept "
                     "(nothing of it agrees with the previous image)", why="rerender", **extra)
    K = ~subject & src
    checks: dict = {"subject_fraction": round(float(subject.mean()), 6)}
    # the new background is the editor's pixels; the seam lies in its band next to the subject, so
    # only the crop around the subject is composed
    out = np.where(K[..., None], np.clip(np.round(E * 255.0), 0, 255), prev3).astype(np.uint8)
    w = K.astype(np.float32)
    sl = bbox(subject, px["margin"] + seam_reach(px))
    comp, w[sl] = compose(P[sl], E[sl], K[sl], src[sl], params.seam, px, checks)
    view = out[sl]
    sel = w[sl] > 0
    view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
    return applied_result(prev, out, w, {**base, **extra, "alignment": al.record(),
                                         "region_from": "everything but the subject the editor kept",
                                         "edit_fraction": round(float(K.mean()), 6), **checks}, al)


def coarse_route(prev: np.ndarray, cur3: np.ndarray, sw: StructureWarp, user: np.ndarray | None, base: dict,
                 params: GuardParams, aside: Any, why: str, places: int | None) -> GuardResult:
    """The guard on a local request whose editor re-rendered the scene so that, pixel by pixel, the
    re-render and the edit are one (`why`: what the turn's record said). The scene's structure held
    (sw, the structure warp). The edit region is the change of content at the coarse scale
    (edit_region.main_change, grown over its surroundings that changed less but still clearly: the
    subject the hat sits on; the largest `places` ones when the request says how many) or the user's
    mask; the editor's pixels there are mapped into the previous image's grade; the rest is I_(t-1).
    Steps aside when no change of content stands out or when the picture around the edit moved.
    prev: I_{t-1} as given; cur3: I_t's RGB."""
    prev3 = rgb3(prev)
    shape = prev3.shape[:2]
    px = params.pixels(shape)
    cshape, _ = coarse_size(shape)
    cc = coarse_change(prev3, *sw.sample_coarse(cur3, cshape))
    grade = {"gain": list(cc.fit.gain), "bias": list(cc.fit.bias)}
    extra = {"route": "coarse", "route_why": why}
    if user is not None:
        K_all = user.copy()
    else:
        main = main_change(cc)
        near = max(1, round(NEAR_FRAC * min(cshape)))     # at least one coarse pixel
        if places:
            main = largest_groups(main, np.maximum(cc.residual - cc.level, 0.0), places, near, MAIN_SHARE)
        if not main.any():
            return aside(f"{why}, and no change of content stands out of the re-render: the edit cannot be told "
                         "apart", why="rerender", **extra)
        main = grown(main, cc)
        moved = ring_changed(cc, main)
        if moved > params.max_moved_around:
            return aside(f"the editor moved the picture around the edit ({moved:.0%} of the pixels around it changed "
                         f"their content): pasting the edit into the previous image would break what it is part of",
                         why="moved", moved_around=round(moved, 4), **extra)
        K_all = dilate(cc.at(shape, hulls(main, near)), round(COARSE_MARGIN * min(shape)))
    edit_fraction = float(K_all.mean())
    if user is None and edit_fraction > params.global_share:
        return aside(f"a global edit: the edit region covers {edit_fraction:.0%} of the picture "
                     f"(limit {params.global_share:.0%})", why="global", edit_fraction=round(edit_fraction, 6), **extra)
    checks: dict = {}
    out = prev3.copy()
    weight = np.zeros(shape, np.float32)
    sl = bbox(K_all, px["margin"] + seam_reach(px))
    box = (sl[0].start, sl[0].stop, sl[1].start, sl[1].stop)
    src = sw.support(box)
    K = K_all[sl] & src
    E = sw.sample(cur3, box)
    if colour_shift(grade) > GRADE_FROM and invertible(grade):
        E = into_grade(E, grade)
        checks.update(graded=f"the edit mapped into the previous image's colours (a shift of "
                             f"{colour_shift(grade) * 255:.0f}/255)", grade=grade_record(grade))
    if K.any():
        comp, w = compose(float_rgb(prev3[sl]), E, K, src, params.seam, px, checks)
        view = out[sl]
        sel = w > 0
        view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
        weight[sl] = w
    al = sw.alignment
    undone = (f"undid dx={al.dx:+.2f}, dy={al.dy:+.2f} px, scale {al.scale:.4f} and a structure field of up to "
              f"{sw.field_px:.1f} px")
    region_from = "the user's mask" if user is not None else "the change of content (coarse)"
    return applied_result(prev, out, weight, {**base, **extra, "region_from": region_from,
                                              "edit_fraction": round(edit_fraction, 6), **checks}, al, undone)


def grown(main: np.ndarray, cc) -> np.ndarray:
    """`main` grown (hysteresis) over the connected coarse pixels whose residual is above GROW_LEVEL
    of the change level and twice the median: the rest of the subject the edit changed less
    (the beaver under its new hat, re-drawn in a new pose), not the re-rendered background."""
    low = (cc.residual > max(GROW_LEVEL * cc.level, GROW_OVER_MEDIAN * float(np.median(cc.residual[cc.valid])))) \
        & cc.valid
    low = ndimage.binary_opening(low, np.ones((3, 3), bool)) | main     # a 3x3 opening: no single coarse pixel
    labels, _ = ndimage.label(low)
    ids = np.unique(labels[main])
    return np.isin(labels, ids[ids > 0])


def ring_changed(cc, main: np.ndarray) -> float:
    """The share of a ring around the main change (coarse: from RING_GAP to RING_OUTER coarse px out) whose content
    changed: high when the editor changed the pose of what the edit is part of."""
    ring = dilate(main, RING_OUTER) & ~dilate(main, RING_GAP) & cc.valid
    return float(cc.changed()[ring].mean()) if ring.any() else 0.0
