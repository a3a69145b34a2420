"""The kept edit's boundary follows where the two pictures agree (beyond the paper, step 4d of
drift_guard after edit_region): a seam between the editor's pixels and I_{t-1}'s is invisible
only where the two show the same thing. Where the edit region's edge runs through content one
picture has and the other lacks (an object the editor re-drew beside the edit, a face it re-drew
around new sunglasses, an old box it removed next to a new object), the kept picture shows a cut:
half a chair rail, old jeans on new legs, a straight seam across a cheek, a fragment of the box.

So the region takes each piece of disagreement connected to it that ends within GROW_FRAC of
the shorter side (`grow_to_agreement`): a whole object the editor changed next to the edit joins
it, and the region's new edge lies where the pictures agree. A piece that runs on beyond that
reach is not taken (cutting it at the reach would move the cut, not close it): there the edge
stays where the change mask put it, and the verification reads it. Stepping aside on such pieces
was measured and is not done: their length does not tell the damaged results from the clean ones
(docs/drift-guard.md, "The kept edit ends where the pictures agree").
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..colour_fit import ColourFit
from ..masks import dilate
from .arrays import bbox, float_rgb
from .compose import seam_reach
from .tiles import Tiles, tiles_near
from .values import Frame, GuardInputs

GROW_FRAC = 0.04        # a piece of disagreement joins the region when it ends within this share of the shorter side
LEVEL_MIN = 20 / 255    # fine disagreement, not drift: above this (an editor's drift and JPEG stay under ~15/255) ...
NOISE_K = 4.0           # ... and above median + 4 robust sigmas of it around the region (as the change mask's tau)
COARSE_SIGMA = 2.0      # px: the coarse reading smooths both pictures by this ...
COARSE_MIN = 10 / 255   # ... and a tone step above this is content (the grain no longer hides it)
MIN_RING_PX = 64        # with fewer pixels around the region its drift is not known: LEVEL_MIN alone
EIGHT = np.ones((3, 3), bool)


def disagreement(P: np.ndarray, E: np.ndarray, fit: ColourFit) -> tuple[np.ndarray, np.ndarray]:
    """(fine, coarse), float H×W each: how far the two pictures disagree at each pixel, both ways.
    fine: the editor's pixel E outside the range I_(t-1) (after the turn's colour fit) takes over
    its 3×3 neighbourhood, or I_(t-1)'s outside the editor's (a thin old line the editor dropped
    lies inside the old picture's range, not inside the new one's); the largest channel, a 3×3
    mean. coarse: the same on both pictures smoothed by COARSE_SIGMA px, over 5×5 ranges (a tone
    step across a re-drawn cheek that the grain hides from the fine reading). A shift or blur of
    at most a pixel (fine) or two (coarse) along an edge stays inside the ranges: drift, not content."""
    Pf = fit.apply(P)
    fine = np.maximum(_out_of_range(E, Pf, 3), _out_of_range(Pf, E, 3))
    Ps, Es = (ndimage.gaussian_filter(a, (COARSE_SIGMA, COARSE_SIGMA, 0), mode="nearest") for a in (Pf, E))
    coarse = np.maximum(_out_of_range(Es, Ps, 5), _out_of_range(Ps, Es, 5))
    return ndimage.uniform_filter(fine, 3, mode="nearest"), coarse


def _out_of_range(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """The largest channel of how far `a` lies outside the range `b` takes over k×k."""
    lo = ndimage.minimum_filter(b, (k, k, 1), mode="nearest")
    hi = ndimage.maximum_filter(b, (k, k, 1), mode="nearest")
    out = np.maximum(lo - a, a - hi)
    return np.maximum(np.maximum(np.maximum(out[..., 0], out[..., 1]), out[..., 2]), 0.0)


def agreement_level(D: np.ndarray, ring: np.ndarray, floor: float) -> float:
    """The level above which D is content, not drift: `floor`, or median + NOISE_K robust sigmas
    of D on `ring` (around the region: the editor's drift there), whichever is larger."""
    if ring.sum() < MIN_RING_PX:
        return floor
    v = D[ring]
    med = float(np.median(v))
    return max(floor, med + NOISE_K * 1.4826 * float(np.median(np.abs(v - med))))


def grow_to_agreement(apart: np.ndarray, K: np.ndarray, src: np.ndarray, reach: int) -> tuple[np.ndarray, int]:
    """(K grown, open px): K joined with the pieces of disagreement (`apart`, gaps of a pixel
    closed, 8-connected) that touch it and end within `reach` px of it, holes filled; open px: the
    pixels on the reach's limit of the pieces that touch it and run on (not taken)."""
    dist = ndimage.distance_transform_edt(~K)
    zone = (dist <= reach) & src
    cand = apart
    cand = ndimage.minimum_filter(ndimage.maximum_filter(cand, 3, mode="nearest"), 3, mode="nearest") & zone & ~K
    labels, n = ndimage.label(cand, EIGHT)
    if not n:
        return K, 0
    touch = np.zeros(n + 1, bool)
    touch[labels[dilate(K, 1) & cand]] = True
    touch[0] = False
    limit = dist > reach - 1
    runs_on = np.zeros(n + 1, bool)
    runs_on[labels[limit & cand]] = True
    open_px = int((touch[labels] & limit).sum())
    return ndimage.binary_fill_holes(K | (touch & ~runs_on)[labels]) & src, open_px


def agreed_region(P: np.ndarray, E: np.ndarray, K: np.ndarray, src: np.ndarray, fit: ColourFit, px: dict,
                  side: int, checks: dict) -> np.ndarray:
    """K grown to where the pictures agree (grow_to_agreement), on a crop that reaches reach_px
    beyond K: P I_(t-1), E the editor's pixels, src where E has them, fit the turn's colour fit,
    side the picture's shorter side. What it measured goes into `checks`."""
    reach = reach_px(px, side)
    fine, coarse = disagreement(P, E, fit)
    ring = dilate(K, reach) & ~dilate(K, px["margin"]) & src
    level, level_c = agreement_level(fine, ring, LEVEL_MIN), agreement_level(coarse, ring, COARSE_MIN)
    grown, open_px = grow_to_agreement((fine > level) | (coarse > level_c), K, src, reach)
    checks.update(boundary_level=round(level * 255.0, 2), boundary_coarse_level=round(level_c * 255.0, 2),
                  boundary_grown_px=int(grown.sum() - K.sum()), boundary_open_px=open_px)
    return grown


def reach_px(px: dict, side: int) -> int:
    """How far (px) the edit region may grow through disagreement."""
    return max(px["margin"], round(GROW_FRAC * side))


def follow_agreement(inputs: GuardInputs, frame: Frame, tiles: Tiles, sl: tuple[slice, slice], K: np.ndarray,
                     region: np.ndarray, checks: dict) -> tuple[tuple[slice, slice], np.ndarray, np.ndarray]:
    """Step 4d, after edit_region: (the crop, K, the region) with K grown to where the pictures agree
    (agreed_region) on a crop that holds it and its seam. The user's mask is what may change: it is
    not grown."""
    if inputs.user is not None or not K.any():
        return sl, K, region
    shape, px = inputs.shape, inputs.px
    reach = reach_px(px, min(shape))
    k_all = np.zeros(shape, bool)
    k_all[sl] = K
    tiles.warp(tiles_near(k_all, reach + 2))
    g = bbox(k_all, reach + 2)
    k_all[g] = agreed_region(float_rgb(inputs.prev3[g]), tiles.E[g], k_all[g], tiles.src[g],
                             ColourFit.from_info(frame.info), px, min(shape), checks)
    whole = k_all.copy()
    whole[sl] |= region
    sl2 = bbox(whole, seam_reach(px))
    tiles.warp(tiles_near(k_all, seam_reach(px)))
    return sl2, k_all[sl2], whole[sl2]
