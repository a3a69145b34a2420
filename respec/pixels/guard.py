"""Drift Guard: pixels the request did not touch stay the user's pixels, turn after turn (beyond
the paper).

Every call of an in-context editor re-encodes and re-renders the whole picture: colours shift,
detail softens, some editors zoom out or shift a little on every call. The history then keeps
whatever the editor returned, and over a conversation the untouched parts of the picture drift
away from the user's. The guard runs after the editor (and after Reveal Composite) and returns

    I_{t-1} outside the edit region, the editor's pixels inside it, in I_{t-1}'s frame

so a zoom-out or a shift is undone, not accumulated. What it guarantees:

- **It shares the turn's record.** The alignment I_{t-1} -> I_t and the change mask C_t are the
  ones History Append keeps with the turn (respec/pixels/analysis_cache.py, keyed by the two images'
  digests): the guard computes nothing a second time, and the change record of its own output is
  derived from the edit's (`remember_guarded`), not measured again.
- **The edit region** K is C_t carried into I_{t-1}'s frame without what the editor's drift
  explains (`drift_explained`: the aligned editor pixel agrees with I_{t-1} blurred, or lies within
  the range I_{t-1} takes around it; `drop_drift`: a change component with nothing else left is
  drift and goes whole, one with an edit in it keeps the inside of the hull of its edit; a faint
  area whose colour shifted one way, in the change or next to it, is an edit, not drift:
  `coherent_residual`, `coherent_join`), joined with what the turn says should change (Reveal
  Composite's pasted pixels), grown by `margin` px
  where the editor's pixels still differ beyond drift (a soft shadow the threshold missed), holes
  filled. A user's MASK replaces it all: the user's own mask wins over the change mask.
- **Outside K nothing is touched** (the default seam, `membrane`): the output there is I_{t-1}'s
  own pixels, so a long conversation does not accumulate anything around its edits. Inside K the
  editor's pixels, with the colour step at K's edge taken away by a smooth correction field in
  K's outermost `band` px only (the difference of the two images just outside K, carried inside
  by push-pull): the edit's interior is the editor's pixels. The `multiband` seam (blend.multiband_blend over `band` px outside K) and
  the first version's linear `feather` are there to be measured against (docs/drift-guard.md).
- **The request decides what is drift** (respec/controller/request_language.py, read clause by
  clause). On a local request a whole-picture colour shift is drift: the edit is mapped into the
  previous image's grade (respec/pixels/grade.py). A re-render, or a zoom one similarity does not
  follow, is read through the structure warp and the local motion field
  (respec/pixels/structure.py, flow.py); when the request names what it changes, re-drawn detail
  away from its change is restored (`beyond_request`, respec/pixels/edit_region.py), and where
  pixel by pixel the re-render and the edit are one, the edit region is the change of content at
  a coarse scale (`coarse_route`). A new background keeps the subject the editor kept
  (`background_route`).
- **It never removes an edit.** It steps aside (the editor's image is kept, and the record says
  why) on a global edit (the plan says so; the keyword rule, which reads the verb that governs each
  clause, not any word in it; on a request that names nothing, the colour map of the whole
  picture far from identity or the change over half the picture; any edit region over half the
  picture), on a re-framing (a zoom or shift larger than an editor's drift), on a re-render it
  cannot separate (the request names nothing, or no change of content stands out), and when the
  scene's structure moved or the picture right around the edit moved (a pose change: the edit
  pasted into the previous image would break what it is part of).
- **Only the tiles near the change are looked at** (the editor's image is warped and drift is told
  on 64-px tiles within reach of the change mask; the region on the crop around it).

Every result records in `meta.post_edit` what it kept (`edit_fraction`, the alignment it undid,
`band_px`, `margin_px`, `edit_region_psnr`: its output against the editor's on the kept pixels)
or why it stepped aside (`stepped_aside`, `reason`, `why`).

Where it fails (by construction): a change the change mask misses, that lies outside the hull
of what it found and is not a coherent colour shift over an area of 0.2 % of the picture next to
it, 3/255 or more and at least 4 times the drift around the change (its colour matches what it
covers; a tint of a near-black area; a global edit only a few per cent strong) is reverted to
I_{t-1}; the keyword rule reads a few verb patterns, not language ("add a lamp that lights the
whole picture" is local to it: the measured coverage and colour change decide); a re-render the
change record calls stable is kept only where it found a change; re-drawn detail is told from the
request's change by scale, not meaning (a sign re-drawn with its new text, an expression). The
measured steps are in docs/drift-guard.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..history import StoredImage, TurnMask
from .alignment import IDENTITY, Alignment, remember_alignment, support, warp, warp_float
from .structure import StructureWarp, plain_warp, structure_warp, with_local_flow
from .blend import levels_for, multiband_blend, push_pull
from .edit_region import (CoarseChange, coarse_change, coarse_size, convex_hull, hulls, kept_subject, main_change,
                          rerendered_components)
from .grade import GRADE_FROM, colour_shift, grade_record, into_grade, invertible
from .change_mask import DEFAULT_PARAMS, ChangeParams, Stability, change_between, remember_change, unstable_mask
from .colour_fit import ColourFit
from .masks import dilate, erode

METHOD = "drift-guard-v2"
GUARD_MASK = "guard_edit"          # the kept-edit weights stored with the turn (1 = the editor's pixel)


@dataclass(frozen=True)
class GuardParams:
    """Settings of the drift guard (pixel sizes are fractions of the image's shorter side)."""

    margin_frac: float = 0.012       # the change mask is grown by this (at least 2 px)
    band_frac: float = 0.012         # seam band beyond the edit region (at least 2 px)
    global_share: float = 0.5        # an edit region above this share of the picture is a global edit
    global_colour: float = 0.1       # the whole picture's colour map moves a grey level by more: global
    max_residual_px: float = 1.0     # an alignment explaining the motion worse than this is not trusted
    min_inliers: float = 0.5         # ... or one that fewer blocks than this share agree with
    max_scale_dev: float = 0.08      # a zoom beyond this is a reframing, not drift
    max_motion_frac: float = 0.06    # ... as is a corner motion beyond this share of the shorter side
    keywords: bool = True            # the keyword rule for global requests
    drift_residual: float = 10.0 / 255.0  # a change component the previous image, blurred, explains this well is drift
    max_moved_around: float = 0.25   # more of the ring around the edit in moved blocks: a pose change, left alone
    seam: str = "membrane"           # how the edit meets I_(t-1): one of SEAMS (see `compose`)
    coherent: bool = True            # a faint change coherent in colour, in or next to the edit, is kept (a tint)
    coherent_level: float = 3.0 / 255.0   # coherent: the residual smoothed over coherent_sigma px at least this
                                     # (and COHERENT_OVER_DRIFT x the drift around the change, coherent_level()),
    coherent_ratio: float = 0.7      # ... at least this share of the smoothed residual magnitude, and the
    coherent_sigma: float = 2.0      # ... pixel's own (3x3) residual as strong and in that direction
    coherent_open: int = 5           # opened by a square this wide: an area, not the band along an edge
    coherent_min_share: float = 0.002  # an area next to the change joins from this share of the picture ...
    coherent_max_share: float = 0.25  # ... up to this one (larger: drift the colour fit missed, not joined)

    def pixels(self, shape: tuple[int, int]) -> dict[str, int]:
        """Margin and band widths in pixels for an image of `shape` (H, W)."""
        side = min(shape)
        return {"margin": max(2, round(self.margin_frac * side)), "band": max(2, round(self.band_frac * side))}


DEFAULT_GUARD = GuardParams()
SEAMS = ("membrane", "multiband", "feather")

# The keyword rule (respec/controller/request_language.py): a request is global when a global word
# (lighting, night, style, painting, ...) governs one of its clauses, not when it describes an
# object the request adds, removes or changes; "keep / preserve / don't change / the same ..."
# clauses preserve. A global edit the words miss is still caught by what the change record
# measures (its coverage, the whole picture's colour map).


@dataclass(frozen=True, eq=False)
class GuardResult:
    """What the guard did: the output image (the editor's when it stepped aside), the kept-edit
    weights in the output's frame (1 = the editor's pixel, 0 = I_{t-1}'s; all 1 when it stepped
    aside), and the record for meta.post_edit."""

    image: np.ndarray
    weight: np.ndarray
    applied: bool
    reason: str
    record: dict = field(default_factory=dict)

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


def _untrusted(al: Alignment, shape: tuple[int, int], p: GuardParams) -> str:
    """Why the alignment is not trusted ('' = trusted; a re-framing: `_reframed`)."""
    if al.method.startswith("identity (no consistent"):
        return "the editor re-rendered the scene: no consistent motion to undo"
    if al.is_identity:
        return ""
    if al.residual_px > p.max_residual_px:
        return f"the alignment leaves {al.residual_px:.2f} px of residual motion (limit {p.max_residual_px})"
    if al.inliers < p.min_inliers:
        return f"only {al.inliers:.0%} of the picture agrees with the alignment (limit {p.min_inliers:.0%})"
    return ""


def _reframed(al: Alignment, shape: tuple[int, int], p: GuardParams) -> str:
    """Why the alignment is a re-framing, not an editor's drift ('' = it is not)."""
    if al.is_identity:
        return ""
    if abs(al.scale - 1.0) > p.max_scale_dev:
        return f"a zoom of {(al.scale - 1.0):+.1%} is a reframing, not an editor's drift"
    if al.max_motion((shape[1], shape[0])) > p.max_motion_frac * min(shape):
        return f"a motion of {al.max_motion((shape[1], shape[0])):.1f} px is a reframing, not an editor's drift"
    return ""


def _float(img: np.ndarray) -> np.ndarray:
    return np.asarray(img[:, :, :3], np.float32) / 255.0


def _bbox(mask: np.ndarray, pad: int) -> tuple[slice, slice]:
    ys, xs = np.nonzero(mask)
    h, w = mask.shape
    return (slice(max(0, ys.min() - pad), min(h, ys.max() + 1 + pad)),
            slice(max(0, xs.min() - pad), min(w, xs.max() + 1 + pad)))


def _finish(prev: np.ndarray, out: np.ndarray, weight: np.ndarray, rec: dict, al: Alignment,
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


UNNAMED_NEAR = 4          # a request that names nothing: re-drawn detail is judged this many times farther out
MIN_CHANGE = 0.002        # a change mask this small after a re-render found the re-render's noise, not the edit
NEAR_FRAC = 0.04          # a change within this share of the shorter side of the request's change is part of it
STRUCTURE_HELD = 0.7      # a re-rendered scene is guarded when this share of its textured structure held


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
    reframed = _reframed(al, shape, params)
    if reframed:
        return aside(reframed, why="alignment", **extra)
    if al.residual_px > params.max_residual_px or al.method.startswith("identity (no consistent"):
        return aside(f"a new background, but the subject's alignment is not trusted "
                     f"({al.residual_px:.2f} px of residual motion)", why="alignment", **extra)
    prev3 = prev[:, :, :3] if prev.shape[2] >= 3 else np.repeat(prev[:, :, :1], 3, axis=2)
    cur3 = cur[:, :, :3] if cur.shape[2] >= 3 else np.repeat(cur[:, :, :1], 3, axis=2)
    # The turn's alignment was measured on the whole picture, most of which is the new background:
    # it and no motion are tried on the coarse grid, and the one under which more of a subject held wins.
    cshape, _ = coarse_size(shape)
    small = np.asarray(Image.fromarray(np.ascontiguousarray(prev3)).resize(cshape[::-1], Image.BOX), np.float32) / 255.0
    tried = [(float(kept_subject(small, *plain_warp(a, shape).sample_coarse(cur3, cshape))[0].mean()), i, a)
             for i, a in enumerate((al, IDENTITY))]
    al = max(tried)[2]
    inv = al.inverse()
    P = _float(prev3)
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
    sl = _bbox(subject, px["margin"] + px["band"] + 2 * RIM_PX + 2)
    comp, w[sl] = compose(P[sl], E[sl], K[sl], src[sl], params.seam, px, checks)
    view = out[sl]
    sel = w[sl] > 0
    view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
    return _finish(prev, out, w, {**base, **extra, "alignment": al.record(),
                                  "region_from": "everything but the subject the editor kept",
                                  "edit_fraction": round(float(K.mean()), 6), **checks}, al)


def read_structure(prev3: np.ndarray, cur3: np.ndarray, al: Alignment, user: np.ndarray | None) -> StructureWarp:
    """The structure warp of the turn (respec/pixels/structure.py) refined by the dense local motion
    field (respec/pixels/flow.py, up to 2 px at its working size), neither measured where the
    content changed (the user's mask, or the coarse change of content under the turn's alignment: a
    sign's new text would move its blocks' correlation peaks)."""
    shape = prev3.shape[:2]
    if user is None:
        first = coarse_change(prev3, *plain_warp(al, shape).sample_coarse(cur3, coarse_size(shape, FIRST_SIDE)[0]))
        user = dilate(first.at(shape, main_change(first)), round(NEAR_FRAC * min(shape) / 2))
    return with_local_flow(structure_warp(prev3, cur3, al, edit=user), prev3, cur3, user)


FIRST_SIDE = 128          # where the content changed, for the structure warp not to measure there, is read this coarse
AGAIN_SIDE = 512          # after a structure warp the change is measured again with the longer side at most this


def spread_out(c: np.ndarray, near: int) -> bool:
    """Whether the change mask `c` reaches beyond its largest component's bounding box grown by `near`
    px (only then can part of it lie away from the request's change: a compact change is left as it is,
    at no cost)."""
    labels, n = ndimage.label(c)
    if n <= 1:
        return False
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    sl = ndimage.find_objects((labels == int(np.argmax(sizes))).astype(np.int32))[0]
    h, w = c.shape
    inner = np.zeros_like(c)
    inner[max(0, sl[0].start - near):min(h, sl[0].stop + near), max(0, sl[1].start - near):min(w, sl[1].stop + near)] = True
    return bool((c & ~inner).any())


def beyond_request(prev3: np.ndarray, E_all: np.ndarray, c_all: np.ndarray, info: dict, cc: CoarseChange,
                   places: int | None, named: bool) -> np.ndarray:
    """The parts of the edit's change mask `c_all` (I_(t-1)'s frame) that the request did not ask
    for: the pieces that are re-rendered detail away from the request's change
    (edit_region.rerendered_components: `cc` the change of content at the coarse scale, the
    pixel-level residual from E_all, the editor's pixels read on the tiles that hold c_all, after the
    turn's colour fit), and,
    when the request names how many `places` it changes, the groups of changes beyond the largest
    `places` ones that look re-drawn (`redrawn_like`: a sign's new text, not the cat's re-drawn ear).
    `named`: whether the request (or the user's mask) names what it changes; when it does not, only
    re-drawn detail UNNAMED_NEAR times farther away is judged."""
    shape = c_all.shape
    sl = _bbox(c_all, 1)
    fine = np.zeros(shape, np.float32)
    R = E_all[sl] - ColourFit.from_info(info).apply(_float(prev3[sl]))
    fine[sl] = ndimage.uniform_filter(np.sqrt((R ** 2).mean(axis=2)), 3, mode="nearest")
    near = round(NEAR_FRAC * min(shape))
    # a request that names nothing may have asked for the re-drawn detail (an expression): only
    # what lies far from its change is judged
    out = rerendered_components(c_all, fine, cc, main_change(cc), near if named else UNNAMED_NEAR * near)
    if places:          # on the crop that holds the change (the dilations cost what the crop costs)
        box = _bbox(c_all, near + 1)
        c = c_all[box] & ~out[box]
        kept = largest_groups(c, fine[box], places, near // 2)
        out[box] |= redrawn_like(c & ~dilate(kept, near), fine[box], cc, (box[0].start, box[1].start))
    return out


PLACES_RATIO = 0.6        # a change beyond the places a request names is restored when its coarse residual is below
                          # this share of its pixel-level one (re-drawn texture); a tint or a colour keeps it


def redrawn_like(m: np.ndarray, fine: np.ndarray, cc: CoarseChange, origin: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The components of `m` whose median coarse content change is below PLACES_RATIO of their median
    pixel-level residual `fine`: texture re-drawn (fur, an ear), not a tint, a recolour or a
    revealed background, which a blur does not make smaller. `origin`: where `m`'s crop lies in the
    picture (y, x)."""
    out = np.zeros(m.shape, bool)
    if not m.any():
        return out
    labels, _ = ndimage.label(m)
    for k, sl in enumerate(ndimage.find_objects(labels), start=1):
        comp = labels[sl] == k
        if cc.median_at(comp, (origin[0] + sl[0].start, origin[1] + sl[1].start)) < \
                PLACES_RATIO * float(np.median(fine[sl][comp])):
            out[sl] |= comp
    return out


def largest_groups(m: np.ndarray, weight: np.ndarray, n: int, reach: int, share: float = 0.0) -> np.ndarray:
    """bool mask: the `n` groups of `m`'s components (those within `reach` px of one another) with
    the largest mass (`weight` summed over their pixels), each beyond the largest with at least
    `share` of its mass; all of `m` when it has at most n groups and share is 0."""
    groups, k = ndimage.label(dilate(m, reach) if reach else m)
    if k <= n and not share:
        return m.copy()
    mass = ndimage.sum(np.where(m, weight, 0.0), groups, np.arange(1, k + 1))
    order = np.argsort(mass)[::-1][:n]
    keep = [i + 1 for i in order if mass[i] >= share * mass[order[0]]]
    return m & np.isin(groups, keep)


def coarse_route(prev3: np.ndarray, cur3: np.ndarray, prev: np.ndarray, sw: StructureWarp, user: np.ndarray | None,
                 base: dict, params: GuardParams, aside: Any, why: str, places: int | None) -> GuardResult:
    """The guard on a local request whose editor re-rendered the scene so that, pixel by pixel, the
    re-render and the edit are one (`why`: what the turn's record said). The scene's structure held
    (sw, the structure warp). The edit region is the change of content at the coarse scale
    (edit_region.main_change, grown over its surroundings that changed less but still clearly: the
    subject the hat sits on; the largest `places` ones when the request says how many) or the user's
    mask; the editor's pixels there are mapped into the previous image's grade; the rest is I_(t-1).
    Steps aside when no change of content stands out or when the picture around the edit moved."""
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
        near = max(1, round(NEAR_FRAC * min(cshape)))
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
    sl = _bbox(K_all, px["margin"] + px["band"] + 2 * RIM_PX + 2)
    box = (sl[0].start, sl[0].stop, sl[1].start, sl[1].stop)
    src = sw.support(box)
    K = K_all[sl] & src
    E = sw.sample(cur3, box)
    if colour_shift(grade) > GRADE_FROM and invertible(grade):
        E = into_grade(E, grade)
        checks.update(graded=f"the edit mapped into the previous image's colours (a shift of "
                             f"{colour_shift(grade) * 255:.0f}/255)", grade=grade_record(grade))
    if K.any():
        comp, w = compose(_float(prev3[sl]), E, K, src, params.seam, px, checks)
        view = out[sl]
        sel = w > 0
        view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
        weight[sl] = w
    al = sw.alignment
    undone = (f"undid dx={al.dx:+.2f}, dy={al.dy:+.2f} px, scale {al.scale:.4f} and a structure field of up to "
              f"{sw.field_px:.1f} px")
    region_from = "the user's mask" if user is not None else "the change of content (coarse)"
    return _finish(prev, out, weight, {**base, **extra, "region_from": region_from,
                                       "edit_fraction": round(edit_fraction, 6), **checks}, al, undone)


MAIN_SHARE = 0.35         # in a re-render, a second change of content counts as one of the request's from this share of the first's mass
COARSE_MARGIN = 0.04      # ... and the edit region reaches this share of the shorter side beyond it (the subject's re-drawn rim)
GROW_LEVEL = 0.5          # the change of content grows over its surroundings whose residual is above this share of the level


def grown(main: np.ndarray, cc) -> np.ndarray:
    """`main` grown (hysteresis) over the connected coarse pixels whose residual is above GROW_LEVEL
    of the change level and twice the median: the rest of the subject the edit changed less
    (the beaver under its new hat, re-drawn in a new pose), not the re-rendered background."""
    low = (cc.residual > max(GROW_LEVEL * cc.level, 2.0 * float(np.median(cc.residual[cc.valid])))) & cc.valid
    low = ndimage.binary_opening(low, np.ones((3, 3), bool)) | main
    labels, _ = ndimage.label(low)
    ids = np.unique(labels[main])
    return np.isin(labels, ids[ids > 0])


def ring_changed(cc, main: np.ndarray) -> float:
    """The share of a ring around the main change (coarse: from 2 to 6 coarse px out) whose content
    changed: high when the editor changed the pose of what the edit is part of."""
    ring = dilate(main, 6) & ~dilate(main, 2) & cc.valid
    return float(cc.changed()[ring].mean()) if ring.any() else 0.0


TILE = 64           # the editor's pixels are warped and drift is told on the tiles near the change ...
TILE_PAD = 8        # ... each read with this much context (the drift test's filters reach 5 px)


def _tiles(mask: np.ndarray, reach: int) -> set[tuple[int, int, int, int]]:
    """(y0, y1, x0, x1) of the TILE-px squares of the picture within `reach` px of a pixel of
    `mask` (the reach is taken on 8-px cells: at most 8 px more)."""
    h, w = mask.shape
    ny, nx = -(-h // TILE), -(-w // TILE)
    cell = 8
    padded = np.zeros((ny * TILE, nx * TILE), bool)
    padded[:h, :w] = mask
    k = TILE // cell
    cells = padded.reshape(ny * k, cell, nx * k, cell).any(axis=(1, 3))
    cells = dilate(cells, -(-int(reach) // cell))
    hit = cells.reshape(ny, k, nx, k).any(axis=(1, 3))
    return {(i * TILE, min(h, (i + 1) * TILE), j * TILE, min(w, (j + 1) * TILE)) for i, j in zip(*np.nonzero(hit))}


def moved_around(K: np.ndarray, sl: tuple[slice, slice], shape: tuple[int, int], info: dict,
                 inv: Alignment) -> float:
    """The share of a ring around the edit region (from `ring_gap` to `ring_gap` + 2 blocks of the
    change record's stability grid out) that lies in blocks whose structure moved or was redrawn
    after alignment (the record's `unstable_grid`, in I_(t-1)'s frame): high when the editor
    changed the pose of what the edit is part of (a cat whose head turned under its new hat)."""
    grid = Stability.grid_from_info(info)
    if grid is None or not grid.any():
        return 0.0
    block = max(shape[0] / grid.shape[0], shape[1] / grid.shape[1])
    gap, width = int(round(block / 2)), int(round(2 * block))
    y0, y1 = max(0, sl[0].start - gap - width), min(shape[0], sl[0].stop + gap + width)
    x0, x1 = max(0, sl[1].start - gap - width), min(shape[1], sl[1].stop + gap + width)
    k = np.zeros((y1 - y0, x1 - x0), bool)
    k[sl[0].start - y0:sl[0].stop - y0, sl[1].start - x0:sl[1].stop - x0] = K
    ring = dilate(k, gap + width) & ~dilate(k, gap)
    if not ring.any():
        return 0.0
    bad = unstable_mask(grid, shape)
    bad = (bad if inv.is_identity else warp(bad, inv, order=0))[y0:y1, x0:x1]
    return float((bad & ring).sum()) / float(ring.sum())


def coherent_residual(P: np.ndarray, E: np.ndarray, info: dict, level: float, ratio: float,
                      sigma: float) -> np.ndarray:
    """bool H×W: where the aligned editor image E differs from I_(t-1)'s P (after the turn's colour
    fit) by a change that may be faint but is coherent: the residual smoothed over `sigma` px is
    above `level` and at least `ratio` of the smoothed residual magnitude, and the pixel's own
    residual (3×3 mean) is above `level` and points the same way (a tint shifts the colours of an
    area one way; a blurred or shifted edge, a re-rendered texture or noise changes sign and cancels
    out; a strong change's smoothing leaks onto its neighbours, whose own residual is small)."""
    R = E - ColourFit.from_info(info).apply(P)
    Rs = ndimage.gaussian_filter(R, (sigma, sigma, 0), mode="nearest")
    amp = np.sqrt((Rs ** 2).sum(axis=2))
    mag = ndimage.gaussian_filter(np.sqrt((R ** 2).sum(axis=2)), sigma, mode="nearest")
    own = ndimage.uniform_filter(R, (3, 3, 1), mode="nearest")     # the pixel's own change, not its neighbours'
    oamp = np.sqrt((own ** 2).sum(axis=2))
    along = (own * Rs).sum(axis=2) >= ratio * oamp * amp
    return (amp > level) & (amp >= ratio * mag) & (oamp > level) & along


def coherent_level(prev3: np.ndarray, E_all: np.ndarray, seed: np.ndarray, tiles: set, info: dict,
                   params: GuardParams) -> float:
    """The level a coherent change must pass on this turn: `coherent_level`, or COHERENT_OVER_DRIFT
    times the median smoothed residual (after the colour fit) on `tiles` beyond COHERENT_AWAY px
    of the change mask `seed`, whichever is larger; 0 (the rule is off) with under 64 such pixels."""
    away = ~dilate(seed, COHERENT_AWAY)
    fit = ColourFit.from_info(info)
    amps = []
    for y0, y1, x0, x1 in tiles:
        R = E_all[y0:y1, x0:x1] - fit.apply(_float(prev3[y0:y1, x0:x1]))
        a = np.sqrt((ndimage.gaussian_filter(R, (params.coherent_sigma, params.coherent_sigma, 0),
                                             mode="nearest") ** 2).sum(axis=2))
        amps.append(a[away[y0:y1, x0:x1]])
    a = np.concatenate(amps) if amps else np.zeros(0)
    return max(params.coherent_level, COHERENT_OVER_DRIFT * float(np.median(a))) if a.size >= 64 else 0.0


COHERENT_OVER_DRIFT = 4.0     # a coherent change stands out of the drift around the change by this factor
COHERENT_AWAY = 8
COHERENT_ROUNDS = 6     # coherent_join grows the tiles it reads this many times at most


def coherent_join(prev3: np.ndarray, E_all: np.ndarray, anchor: np.ndarray, src_all: np.ndarray, info: dict,
                  done: set, warp_tiles: Any, params: GuardParams, px: dict,
                  level: float) -> tuple[np.ndarray | None, str]:
    """(mask or None, why not): the coherent areas (coherent_residual, outside the change mask
    `anchor`, opened by `coherent_open`) within margin + coherent_open px of it and of at least
    `coherent_min_share` of the picture: a tint whose dark part the change mask missed. The editor's
    image is warped on more tiles (`warp_tiles`; `done` holds those warped) until the areas end
    inside them. None with a reason when they do not within COHERENT_ROUNDS rounds or exceed
    `coherent_max_share` of the picture (drift the colour fit missed, not an edit next to it).
    `level`: coherent_level's."""
    shape = anchor.shape
    near = dilate(anchor, px["margin"] + params.coherent_open)
    for _ in range(COHERENT_ROUNDS):
        have = np.zeros(shape, bool)
        for y0, y1, x0, x1 in done:
            have[y0:y1, x0:x1] = True
        sl = _bbox(have, 0)
        f = np.zeros(shape, bool)
        f[sl] = coherent_residual(_float(prev3[sl]), E_all[sl], info, level, params.coherent_ratio,
                                  params.coherent_sigma)
        f &= have & erode(src_all, 2) & ~anchor
        f = ndimage.binary_opening(f, np.ones((params.coherent_open,) * 2, bool))
        labels, n = ndimage.label(f)
        if not n:
            return None, ""
        ids = np.unique(labels[near & f])
        ids = ids[ids > 0]
        if len(ids):
            sizes = np.bincount(labels.ravel())
            ids = ids[sizes[ids] >= params.coherent_min_share * f.size]
        if not len(ids):
            return None, ""
        comp = np.isin(labels, ids)
        if comp.sum() > params.coherent_max_share * comp.size:
            return None, f"a coherent change over {comp.mean():.0%} of the picture: drift, not joined"
        edge = dilate(comp, 2) & ~have
        if not edge.any():
            return comp, ""
        warp_tiles(_tiles(comp, 8))
    return None, f"a coherent change reaching beyond {COHERENT_ROUNDS} rounds of tiles: drift, not joined"


def _psnr(mse: float) -> float:
    return 100.0 if mse <= 0 else float(10.0 * np.log10(255.0 ** 2 / mse))


DRIFT_SIGMAS = (0.0, 0.75, 1.5)
FAINT = 0.5         # inside an edit's hull, a pixel differing by more than this share of the drift limit is the edit
RIM_PX = 2          # the seam's colour difference is read on this many pixels just outside the region
SEAM_CLIP = 0.06    # ... and corrected by at most this (15/255: an editor's colour drift, not content)


def drift_explained(P: np.ndarray, E: np.ndarray, info: dict, limit: float) -> tuple[np.ndarray, np.ndarray]:
    """(explained, faint), bool H×W each. explained: the aligned editor pixels E that I_{t-1}'s
    pixels P explain as drift, not an edit. faint: the pixels that differ from every blurred P by
    more than FAINT × `limit` (a change too faint to tell from drift on its own: a tint where the
    picture is dark).
    After alignment, resampling, an editor's blur and a sub-pixel misfit leave residuals along
    sharp edges (an emblem, text) that the change mask marks. A pixel is drift when, after the
    turn's colour fit, E agrees within `limit` (3×3-mean RMS) with P blurred by one of DRIFT_SIGMAS,
    or lies within `limit`/2 of the range P takes over its 3×3 neighbourhood (what any blur or
    shift of at most a pixel can produce, whatever the edge's contrast)."""
    Pf = ColourFit.from_info(info).apply(P)
    best = None
    for s in DRIFT_SIGMAS:
        bl = Pf if s == 0 else ndimage.gaussian_filter(Pf, (s, s, 0), mode="nearest")
        r = ndimage.uniform_filter(np.sqrt(((bl - E) ** 2).mean(axis=2)), 3, mode="nearest")
        best = r if best is None else np.minimum(best, r)
    lo = ndimage.minimum_filter(Pf, (3, 3, 1), mode="nearest")
    hi = ndimage.maximum_filter(Pf, (3, 3, 1), mode="nearest")
    out_of_range = np.maximum(np.maximum(lo - E, E - hi), 0.0)
    env = ndimage.uniform_filter(np.sqrt((out_of_range ** 2).mean(axis=2)), 3, mode="nearest")
    return (best <= limit) | (env <= 0.5 * limit), best > FAINT * limit


THIN_OPEN = 11             # a change drift does not explain that an opening this wide (px) removes almost whole ...
THIN_REACH = 0.06          # ... and that reaches this share of the shorter side away from the edit it touches joins it,
THIN_DELTA = 40.0 / 255.0  # ... unless the pixels beside it that have its colour (within this, largest channel) ...
THIN_ALIKE = 0.25          # ... are more than this share of them (the moved edge of an area, not a line)


def thin_lines(c: np.ndarray, explained: np.ndarray, E: np.ndarray) -> np.ndarray:
    """The lines the edit drew next to its change `c` that the change mask's threshold and opening
    missed (a necklace's chain next to its pendant): components of what drift does not explain
    (`explained` False) that touch `c`, that a THIN_OPEN px opening removes (at most a tenth of
    them survives it: a line, not a re-drawn area's rim), that reach THIN_REACH of the shorter
    side away from `c` (a line leading away from the edit, not a streak along its rim) and that
    stand out of what lies along them in the editor's image `E` (at most
    THIN_ALIKE of the pixels beside the line have its colour: a ridge, not the edge of an area that
    moved, whose one side is the line's own colour). A re-drawn area is not thin; a thin re-drawn
    strand away from the edit does not touch it."""
    out = np.zeros_like(c)
    if not c.any():
        return out
    sl = _bbox(c | ~explained, THIN_OPEN)
    u = ~explained[sl] & ~c[sl]
    if not u.any():
        return out
    labels, _ = ndimage.label(u, np.ones((3, 3), bool))
    touching = np.unique(labels[dilate(c[sl], 1) & u])
    reach = THIN_REACH * min(c.shape)
    boxes = ndimage.find_objects(labels)
    h, w = u.shape
    for k in touching[touching > 0]:
        bs = boxes[k - 1]
        if max(bs[0].stop - bs[0].start, bs[1].stop - bs[1].start) < reach:
            continue        # most touching pieces are small: nothing more is read for them
        comp = labels[bs] == k
        if comp.sum() < reach:
            continue
        # the opening by a square, as a separable minimum then maximum filter (a line: at most a
        # tenth of it survives)
        pad = np.pad(comp, THIN_OPEN)
        opened = ndimage.maximum_filter(ndimage.minimum_filter(pad, THIN_OPEN, mode="constant"), THIN_OPEN,
                                        mode="constant")[THIN_OPEN:-THIN_OPEN, THIN_OPEN:-THIN_OPEN] & comp
        if opened.sum() > 0.1 * comp.sum():
            continue
        # the distance to the change on the component's box grown by `reach` (exact for "reaches it")
        r = int(np.ceil(reach))
        ys = slice(max(0, bs[0].start - r), min(h, bs[0].stop + r))
        xs = slice(max(0, bs[1].start - r), min(w, bs[1].stop + r))
        away = ndimage.distance_transform_edt(~c[sl][ys, xs])
        inner = (slice(bs[0].start - ys.start, bs[0].stop - ys.start), slice(bs[1].start - xs.start, bs[1].stop - xs.start))
        if away[inner][comp].max() >= reach and _ridge(comp, E[sl], bs):
            out[sl][bs] |= comp
    return out


def _ridge(comp: np.ndarray, E: np.ndarray, bs: tuple[slice, slice]) -> bool:
    """Whether the line `comp` (on the crop `bs` of E's frame) stands out of the pixels beside it in
    E: at most THIN_ALIKE of those within THIN_OPEN px have its median colour (within THIN_DELTA)."""
    h, w = E.shape[:2]
    y0, x0 = max(0, bs[0].start - THIN_OPEN), max(0, bs[1].start - THIN_OPEN)
    y1, x1 = min(h, bs[0].stop + THIN_OPEN), min(w, bs[1].stop + THIN_OPEN)
    line = np.zeros((y1 - y0, x1 - x0), bool)
    line[bs[0].start - y0:bs[0].stop - y0, bs[1].start - x0:bs[1].stop - x0] = comp
    beside = dilate(line, THIN_OPEN) & ~dilate(line, 1)
    crop = E[y0:y1, x0:x1]
    alike = np.abs(crop[beside] - np.median(crop[line], axis=0)).max(axis=1) <= THIN_DELTA
    return bool(alike.mean() <= THIN_ALIKE) if beside.any() else False


def drop_drift(c: np.ndarray, explained: np.ndarray, min_px: float,
               faint: np.ndarray | None = None, joined: np.ndarray | None = None,
               reach: int = 0) -> tuple[np.ndarray, int]:
    """The change mask without what drift explains (`drift_explained`). The pixels drift does not
    explain are opened (1 px) and their components under `min_px` pixels go (a drifted edge, an
    emblem's re-sampled detail): a change component with none of them left is drift and goes
    whole. Of a component with an edit in it, the pixels inside the convex hull of what drift
    cannot explain stay, explained or not (inside an edit some pixels happen to resemble what was
    there: a moved object's stripes over its old stripes are still the edit), and the rest goes (a
    drifted edge or emblem that the change mask's closing joined to the edit). Within that hull,
    `faint` pixels outside the change mask join the edit too (a tint fades where the picture is
    dark, below the change mask's threshold). Each `joined` component (a coherent area next to the
    change mask, `coherent_join`) keeps, with the change components within `reach` px of it, the
    pixels of the convex hull of them all that are changed or faint (a tinted box whose bright part
    the change mask found and whose dark part only the coherence test did). Returns (mask, pixels
    dropped: negative when faint pixels joined)."""
    if not c.any():
        return c, 0
    m = ndimage.binary_opening(c & ~explained, np.ones((3, 3), bool))
    labels, n = ndimage.label(m)
    if n:
        sizes = np.bincount(labels.ravel())
        small = sizes < min_px
        small[0] = False
        m &= ~small[labels]
    kept = np.zeros_like(c)
    if m.any():
        comps, _ = ndimage.label(c)
        boxes = ndimage.find_objects(comps)
        for k in np.unique(comps[m]):
            sl = boxes[k - 1]
            comp = comps[sl] == k
            hull = convex_hull(m[sl] & comp)
            kept[sl] |= hull & (comp | faint[sl]) if faint is not None else comp & hull
    if joined is not None and joined.any():
        comps, _ = ndimage.label(c)
        jl, nj = ndimage.label(joined)
        for j in range(1, nj + 1):
            J = jl == j
            ids = np.unique(comps[dilate(J, reach) & c])
            group = np.isin(comps, ids[ids > 0]) | J
            sl = _bbox(group, 0)
            inside = convex_hull(group[sl]) & (c[sl] | faint[sl]) if faint is not None else group[sl]
            kept[sl] |= inside
    return kept, int(c.sum() - kept.sum())


def compose(P: np.ndarray, E: np.ndarray, K: np.ndarray, src: np.ndarray, seam: str, px: dict,
            checks: dict) -> tuple[np.ndarray, np.ndarray]:
    """The editor's pixels E over I_{t-1}'s P on the crop, the edit region K: (image, weight of E).

    membrane (the default): E exactly inside K and P exactly outside (no pixel outside the region
      is touched); the colour step at the region's edge is removed by a smooth correction field:
      the difference P - E read on the RIM_PX pixels just outside K (the editor's drift right
      there; a rim pixel that differs by more than SEAM_CLIP is content, a shadow's tail, not drift,
      and is not read), carried into K by push-pull (blend.push_pull, close to gradient-domain
      cloning's membrane) and faded to nothing `band` px inside: only K's outermost band is
      corrected, the edit's interior is the editor's pixels exactly. Bounded to ±SEAM_CLIP.
    multiband: blend.multiband_blend of E into P with the weight of `feather` (Burt & Adelson:
      low frequencies over ~2^levels px, fine detail over a pixel or two), P exactly beyond the
      band. Measured, not the default: on the real-photo chains its seam and the edit's fidelity
      are better, but every turn leaves a band of untouched pixels blended with the editor's
      drifted ones, and over a long chain these add up (docs/drift-guard.md).
    feather: the first version: the weight falls linearly over `band` px outside K and E is
      colour-matched there by a normalised convolution of P - E (drift-guard-v1)."""
    if seam == "membrane":
        taper_px = px["band"]
        w = K.astype(np.float32)
        rim = dilate(K, RIM_PX) & ~K & src & (np.abs(P - E).max(axis=2) <= SEAM_CLIP)
        if rim.sum() < 8:
            return np.where(K[..., None], E, P), w
        inside = ndimage.distance_transform_edt(K)
        taper = np.clip(1.0 - (inside - 1.0) / taper_px, 0.0, 1.0).astype(np.float32)
        near = taper > 0
        corr = np.zeros_like(E)
        field_ = _membrane(P - E, rim, taper_px)
        corr[near] = np.clip(field_[near], -SEAM_CLIP, SEAM_CLIP) * taper[near][:, None]
        checks["seam_correction_max"] = round(float(np.abs(corr).max()), 4)
        return np.where(K[..., None], np.clip(E + corr, 0.0, 1.0), P), w
    dist_out = ndimage.distance_transform_edt(~K)
    w = np.clip(1.0 - dist_out / (px["band"] + 1.0), 0.0, 1.0).astype(np.float32)
    w[~src] = 0.0
    if seam == "multiband":     # beyond the band I_(t-1) exactly: the pyramid's low frequencies reach further
        return np.where((w > 0)[..., None], multiband_blend(P, E, w, levels_for(px["band"] / 2, K.shape)), P), w
    Ec = _seam_colour(P, E, K, w > 0, px["band"], px["margin"], checks)
    return Ec * w[..., None] + P * (1.0 - w[..., None]), w


def _membrane(diff: np.ndarray, rim: np.ndarray, taper_px: int) -> np.ndarray:
    """push_pull of `diff` from the `rim` pixels, reaching `taper_px` px; on a grid coarser by
    taper_px // 6 (the field is smooth: at 1024² the membrane costs a sixteenth), then upsampled."""
    f = max(1, taper_px // 6)
    if f == 1:
        return push_pull(diff, rim, levels_for(2 * taper_px, rim.shape))
    h, w = rim.shape
    H, W = -(-h // f) * f, -(-w // f) * f
    r = np.zeros((H, W), np.float32)
    r[:h, :w] = rim
    d = np.zeros((H, W, diff.shape[2]), np.float32)
    d[:h, :w] = diff * rim[..., None]
    den = r.reshape(H // f, f, W // f, f).sum(axis=(1, 3))
    num = d.reshape(H // f, f, W // f, f, -1).sum(axis=(1, 3))
    known = den > 0
    small = push_pull(num / np.maximum(den, 1.0)[..., None], known, levels_for(2 * taper_px / f, known.shape))
    return ndimage.zoom(small, (f, f, 1), order=1, grid_mode=True, mode="nearest")[:h, :w]


def _seam_colour(P: np.ndarray, E: np.ndarray, core: np.ndarray, reach: np.ndarray, band: int, margin: int,
                 checks: dict) -> np.ndarray:
    """`feather`'s colour match (drift-guard-v1): the difference P - E on the background just
    inside and outside the edit region is spread smoothly (normalised convolution) and added to E
    with a weight that is 1 at the region's edge and beyond, fading to 0 `margin` px inside it.
    Bounded to ±0.1."""
    dist_in = ndimage.distance_transform_edt(core)
    taper = np.clip(1.0 - dist_in / (margin + 1.0), 0.0, 1.0).astype(np.float32)
    bg = reach & (taper > 0)
    if bg.sum() < 16:
        return E
    sig = max(2.0, float(band))
    b = bg.astype(np.float32)
    den = ndimage.gaussian_filter(b, sig)
    diff = (P - E) * b[..., None]
    num = np.stack([ndimage.gaussian_filter(diff[..., k], sig) for k in range(3)], axis=2)
    corr = np.where(den[..., None] > 1e-3, num / np.maximum(den[..., None], 1e-3), 0.0)
    corr = np.clip(corr, -0.1, 0.1) * taper[..., None]
    checks["seam_correction_max"] = round(float(np.abs(corr).max()), 4)
    return np.clip(E + corr, 0.0, 1.0)


def guard_change(previous: StoredImage, edited: StoredImage, size: tuple[int, int] | None = None,
                 params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """The change record of I_{t-1} -> I_t that History Append keeps (the same cache: computed
    once per turn, whoever asks first)."""
    return change_between(previous, edited, tuple(size or previous.size), params)


def remember_guarded(previous: StoredImage, guarded: StoredImage, res: GuardResult, change: TurnMask,
                     size: tuple[int, int] | None = None, params: ChangeParams = DEFAULT_PARAMS) -> None:
    """Record the change record of I_{t-1} -> the guard's output, derived from the edit's (not
    measured again): the edit's change carried into I_{t-1}'s frame and limited to the kept region,
    no motion (the output is in I_{t-1}'s frame), the scene outside it held exactly. History Append
    and run_turn's append then find it through change_mask.remember_change.)"""
    size = tuple(size or previous.size)
    al = Alignment.from_record(change.info.get("alignment"))
    if res.record.get("route") in ("coarse", "background"):    # the change record could not separate the edit: the kept region is it
        m = res.weight >= 0.5
    else:
        m = change.mask if al.is_identity else warp(change.mask, al.inverse(), order=0)
        m = m & (res.weight >= 0.5)
    ident = Alignment(method="identity (drift guard: in I_(t-1)'s frame)", size=size)
    grid = _stable_grid(change.info)
    info = {k: v for k, v in change.info.items() if k not in ("unstable_grid",)}
    info.update({"method": f"{change.info.get('method', '')}+{METHOD}", "fraction": round(float(m.mean()), 6),
                 "alignment": ident.record(), "edit_alignment": change.info.get("alignment"),
                 "stable_fraction": 1.0, "rerendered": False, "unstable_grid": grid,
                 "gain": [1.0, 1.0, 1.0], "bias": [0.0, 0.0, 0.0], "derived_by": METHOD})
    tm = TurnMask.from_mask(m, info)
    remember_change(previous, guarded, size, tm, params)
    remember_alignment(previous, guarded, size, ident)


def _stable_grid(info: dict) -> list[str]:
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
    return GuardResult(image, res.weight, res.applied, res.reason, {**res.record, "exact_inside": exact.record()})


def _full_size_change(change_w: TurnMask, size: tuple[int, int]) -> TurnMask:
    """A change record made at a working size as change_between gives it at `size`: the mask
    upsampled (nearest), the alignment in full-size pixels, the working size recorded."""
    w, h = change_w.image.size
    f = w / float(size[0])
    al = Alignment.from_record(change_w.info.get("alignment"))
    full = Alignment(al.dx / f, al.dy / f, al.scale, al.residual_px / f, al.method, al.inliers, tuple(size))
    mask = np.asarray(Image.fromarray(change_w.mask).resize(tuple(size), Image.NEAREST), bool)
    return TurnMask.from_mask(mask, {**change_w.info, "alignment": full.record(), "working_size": [w, h]})


def _three(img: np.ndarray) -> np.ndarray:
    return img[:, :, :3] if img.shape[2] >= 3 else np.repeat(img[:, :, :1], 3, axis=2)


def _compose_full(p: StoredImage, e: StoredImage, p_w: StoredImage, e_w: StoredImage, res_w: GuardResult,
                  change_w: TurnMask, params: GuardParams, refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The guard's output and weight at I_{t-1}'s full size from its working-size result. With w the
    working weight and g = out_w - P_w - w (E_w - P_w) what the seam added (the membrane's colour
    correction, zero wherever w is), both upsampled (bilinear) on the box around w > 0:

        out = P + w (E - P) + g        (E: the editor's full-size pixels, aligned; P: I_{t-1})

    so I_{t-1}'s pixels are kept exactly where w is 0 and the edit keeps its full-size detail. The
    working size rounds the region's outline by up to one working pixel, so (`refine`, not with the
    user's mask) the full-size pixels of that outline (within the reach outside the region, or on its
    interpolated edge) that the drift test (`drift_explained`) cannot explain are the edit (a sharp
    corner) and keep the editor's pixel exactly."""
    P_full = p.array
    H, W = P_full.shape[:2]
    out3 = _three(P_full).copy()
    weight = np.zeros((H, W), np.float32)
    ys, xs = np.nonzero(res_w.weight > 0)
    if ys.size:
        h, w = res_w.weight.shape
        fx, fy = w / float(W), h / float(H)
        reach = int(np.ceil(1.0 / min(fx, fy))) + 1      # one working pixel, in full-size pixels
        # The full-size box around the weight (the reach and a pixel for the interpolation), and
        # the working-size crop it reads.
        X0, X1 = max(0, int((xs.min() - 1) / fx) - reach), min(W, int(np.ceil((xs.max() + 2) / fx)) + reach)
        Y0, Y1 = max(0, int((ys.min() - 1) / fy) - reach), min(H, int(np.ceil((ys.max() + 2) / fy)) + reach)
        wx0, wx1 = max(0, int(X0 * fx) - 1), min(w, int(np.ceil(X1 * fx)) + 1)
        wy0, wy1 = max(0, int(Y0 * fy) - 1), min(h, int(np.ceil(Y1 * fy)) + 1)
        al_w = Alignment.from_record(change_w.info.get("alignment"))
        P_w = _float(_three(p_w.array)[wy0:wy1, wx0:wx1])
        E_w = warp_float(_three(e_w.array), al_w.inverse(), box=(wy0, wy1, wx0, wx1))
        w_w = res_w.weight[wy0:wy1, wx0:wx1]
        g_w = _float(_three(res_w.image)[wy0:wy1, wx0:wx1]) - P_w - w_w[..., None] * (E_w - P_w)
        box = (X0 * fx - wx0, Y0 * fy - wy0, X1 * fx - wx0, Y1 * fy - wy0)

        def up(a: np.ndarray) -> np.ndarray:
            return np.asarray(Image.fromarray(np.ascontiguousarray(a, np.float32), "F").resize(
                (X1 - X0, Y1 - Y0), Image.BILINEAR, box=box))
        wt = np.clip(up(w_w), 0.0, 1.0)
        al = Alignment(al_w.dx / fx, al_w.dy / fy, al_w.scale)
        E = warp_float(_three(e.array), al.inverse(), box=(Y0, Y1, X0, X1))
        P = _float(out3[Y0:Y1, X0:X1])
        if refine:   # the outline's zone: within the reach outside the region, and its soft edge
            zone = dilate(wt > 0, reach) & (wt < 1.0) & support(al.inverse(), (H, W))[Y0:Y1, X0:X1]
            if zone.any():
                explained, _ = drift_explained(P, E, change_w.info, params.drift_residual)
                wt = np.where(zone & ~explained, np.float32(1.0), wt)
        comp = P + wt[..., None] * (E - P) + np.stack([up(g_w[..., k]) for k in range(3)], axis=2)
        sel = wt > 0
        out3[Y0:Y1, X0:X1][sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
        weight[Y0:Y1, X0:X1] = wt
    if P_full.shape[2] == 4:
        out = np.concatenate([out3, P_full[:, :, 3:]], axis=2)
    elif P_full.shape[2] == 1:
        out = np.round(out3.mean(axis=2, keepdims=True)).astype(np.uint8)
    else:
        out = out3
    out.flags.writeable = False
    return out, weight


