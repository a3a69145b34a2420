"""A faint change coherent in colour is an edit, not drift (beyond the paper): a tint shifts the
colours of an area one way, where a blurred edge, re-rendered texture or noise changes sign and
cancels out. The Drift Guard keeps such an area in or next to the change mask (`coherent_residual`,
`coherent_level`, `coherent_join`) when it stands out of the drift around the change."""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import ndimage

from ..colour_fit import ColourFit
from ..masks import dilate, erode
from .arrays import bbox, dot3, float_rgb, open_square, sq_sum
from .params import GuardParams
from .tiles import tiles_near

COHERENT_OVER_DRIFT = 4.0     # a coherent change stands out of the drift around the change by this factor
COHERENT_AWAY = 8             # the drift around the change is read this many px away from it (not its own rim)
COHERENT_MIN_PX = 64          # with fewer pixels away from the change its drift is not known: the rule keeps out
COHERENT_ROUNDS = 6           # coherent_join grows the tiles it reads this many times at most
SUPPORT_EDGE = 2              # an area within this many px of the warped image's edge is not read (resampling)
GROW_STEP = 8                 # an area reaching beyond the tiles read grows them by those within this many px of it


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
    amp = np.sqrt(sq_sum(Rs))
    mag = ndimage.gaussian_filter(np.sqrt(sq_sum(R)), sigma, mode="nearest")
    own = ndimage.uniform_filter(R, (3, 3, 1), mode="nearest")     # the pixel's own change, not its neighbours'
    oamp = np.sqrt(sq_sum(own))
    along = dot3(own, Rs) >= ratio * oamp * amp
    return (amp > level) & (amp >= ratio * mag) & (oamp > level) & along


def coherent_level(prev3: np.ndarray, E_all: np.ndarray, seed: np.ndarray, tiles: set, info: dict,
                   params: GuardParams) -> float:
    """The level a coherent change must pass on this turn: `coherent_level`, or COHERENT_OVER_DRIFT
    times the median smoothed residual (after the colour fit) on `tiles` beyond COHERENT_AWAY px
    of the change mask `seed`, whichever is larger; 0 (the rule is off) with under COHERENT_MIN_PX such pixels."""
    away = ~dilate(seed, COHERENT_AWAY)
    fit = ColourFit.from_info(info)
    amps = []
    for y0, y1, x0, x1 in tiles:
        R = E_all[y0:y1, x0:x1] - fit.apply(float_rgb(prev3[y0:y1, x0:x1]))
        a = np.sqrt(sq_sum(ndimage.gaussian_filter(R, (params.coherent_sigma, params.coherent_sigma, 0),
                                                   mode="nearest")))
        amps.append(a[away[y0:y1, x0:x1]])
    a = np.concatenate(amps) if amps else np.zeros(0)
    return max(params.coherent_level, COHERENT_OVER_DRIFT * float(np.median(a))) if a.size >= COHERENT_MIN_PX else 0.0


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
    readable = erode(src_all, SUPPORT_EDGE) & ~anchor       # the same every round
    for _ in range(COHERENT_ROUNDS):
        have = np.zeros(shape, bool)
        for y0, y1, x0, x1 in done:
            have[y0:y1, x0:x1] = True
        sl = bbox(have, 0)
        f = np.zeros(shape, bool)
        f[sl] = coherent_residual(float_rgb(prev3[sl]), E_all[sl], info, level, params.coherent_ratio,
                                  params.coherent_sigma)
        f &= have & readable
        f = open_square(f, params.coherent_open)
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
        edge = dilate(comp, SUPPORT_EDGE) & ~have      # the area reaches the tiles' edge
        if not edge.any():
            return comp, ""
        warp_tiles(tiles_near(comp, GROW_STEP))
    return None, f"a coherent change reaching beyond {COHERENT_ROUNDS} rounds of tiles: drift, not joined"
