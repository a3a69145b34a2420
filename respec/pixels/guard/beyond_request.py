"""Re-drawn detail away from what the request changes (beyond the paper): when the request names
what it changes, the parts of the edit's change mask far from its change that are re-rendered
texture, not the edit, go back to I_{t-1} (`beyond_request`, over respec/pixels/edit_region.py's
`rerendered_components`); when it says how many places it changes, the groups of changes beyond
that many that look re-drawn go too."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..colour_fit import ColourFit
from ..edit_region import CoarseChange, main_change, rerendered_components
from ..masks import dilate
from .arrays import bbox, float_rgb, sq_mean
from .params import NEAR_FRAC

UNNAMED_NEAR = 4          # a request that names nothing: re-drawn detail is judged this many times farther out


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
    sl = bbox(c_all, 1)
    fine = np.zeros(shape, np.float32)
    R = E_all[sl] - ColourFit.from_info(info).apply(float_rgb(prev3[sl]))
    fine[sl] = ndimage.uniform_filter(np.sqrt(sq_mean(R)), 3, mode="nearest")    # a 3x3 mean: not noise
    near = round(NEAR_FRAC * min(shape))
    # a request that names nothing may have asked for the re-drawn detail (an expression): only
    # what lies far from its change is judged
    out = rerendered_components(c_all, fine, cc, main_change(cc), near if named else UNNAMED_NEAR * near)
    if places:          # on the crop that holds the change (the dilations cost what the crop costs)
        box = bbox(c_all, near + 1)
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
