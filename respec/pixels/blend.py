"""Seam-aware blending: a multi-band (Laplacian pyramid) blend of two aligned images.

A linear feather blends every frequency over the same width: a wide feather ghosts texture (two
copies of an edge half visible), a narrow one leaves a step where the two images' colours or
shading differ. Burt & Adelson's multi-band blend splits both images into frequency bands and
blends each band over a transition as wide as its wavelength: a colour or shading difference (low
frequencies) is spread over ~2^levels px, fine texture changes within a pixel or two. Where the
weight is 1 over the whole support of every level, the result is the top image exactly (to float
rounding), so a paste keeps its own pixels away from the seam; where it is 0, the base image.

Used by Reveal Composite (respec/pixels/reveal.py: I_{k-1}'s pixels into I_t) and the drift guard
(respec/pixels/guard/: the editor's pixels into I_{t-1}). Callers pass the crop around the seam: the
cost is that of a few Gaussian filters on the crop.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from ..errors import InputError

REDUCE_SIGMA = 1.0   # the pyramid's low-pass (close to Burt & Adelson's 5-tap binomial kernel)
MIN_TOP_SIDE = 4     # the coarsest level keeps at least this many pixels per side
PULL_TRUST = 2.0     # push_pull: above level 0, a pixel whose known density reaches 1 / this keeps its own estimate


def levels_for(transition_px: float, shape: tuple[int, int]) -> int:
    """Pyramid levels whose coarsest band is blended over about `transition_px` pixels
    (level L's weight is the mask blurred by ~2^L px), limited so that the coarsest level of an
    image of `shape` still has MIN_TOP_SIDE pixels per side. At least 1."""
    want = max(1, int(round(math.log2(max(2.0, float(transition_px))))))
    side = max(1, min(int(shape[0]), int(shape[1])))
    most = max(1, int(math.floor(math.log2(max(1.0, side / MIN_TOP_SIDE)))))
    return min(want, most)


def _reduce(x: np.ndarray) -> np.ndarray:
    """The level below: low-passed and subsampled 2× (each axis filtered, then subsampled, before
    the other: the same values as filtering both first, for half of the second pass)."""
    x = ndimage.gaussian_filter1d(x, REDUCE_SIGMA, axis=0, mode="nearest")[::2]
    return ndimage.gaussian_filter1d(x, REDUCE_SIGMA, axis=1, mode="nearest")[:, ::2]


def expand(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Burt & Adelson's EXPAND, the inverse of the pyramid's reduction (the blend's bands and
    respec/pixels/flow.py's coarse-to-fine fields use it): `x` (a reduced level, H×W or H×W×C)
    back at `shape` (h, w) as float32, by linear interpolation between its samples, which sit on
    the even rows and columns (the last odd row / column, when `shape` is even, repeats the last
    sample). Any expand reconstructs exactly (each band is defined with the same one); this
    one is a few array passes where a Gaussian on a zero-inserted grid costs two filters."""
    return _up_axis(_up_axis(np.asarray(x, np.float32), shape[0], 0), shape[1], 1)


def _up_axis(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """`x` upsampled 2× along `axis` to length n (samples at the even positions)."""
    x = np.moveaxis(x, axis, 0)
    out = np.empty((n,) + x.shape[1:], np.float32)
    m = (n + 1) // 2                      # even positions
    out[0::2] = x[:m]
    k = n // 2                            # odd positions: between samples i and i + 1
    if k:
        nxt = x[1:k + 1] if x.shape[0] > k else np.concatenate([x[1:], x[-1:]], axis=0)[:k]
        out[1::2] = 0.5 * (x[:k] + nxt)
    return np.moveaxis(out, 0, axis)


def multiband_blend(base: np.ndarray, top: np.ndarray, weight: np.ndarray, levels: int) -> np.ndarray:
    """`top` blended into `base` by `weight` (H×W in 0..1, 1 = top), band by band.

    base, top: float H×W×C (0..1) of one shape. levels: the number of band-pass levels
    (`levels_for`); 0 is a plain per-pixel blend. Returns float32 H×W×C clipped to 0..1."""
    base = np.asarray(base, np.float32)
    top = np.asarray(top, np.float32)
    w = np.clip(np.asarray(weight, np.float32), 0.0, 1.0)
    if base.shape != top.shape or base.ndim != 3 or w.shape != base.shape[:2]:
        raise InputError(f"multiband_blend needs two H×W×C images of one shape and an H×W weight, got "
                         f"{base.shape}, {top.shape} and {w.shape}")
    if levels < 0:
        raise InputError(f"multiband_blend's levels must be 0 or more, got {levels}")
    if not (w > 0).any():
        return np.clip(base, 0.0, 1.0)
    if (w >= 1).all():
        return np.clip(top, 0.0, 1.0)
    # The pyramids are linear and collapse exactly, so blending base's and top's bands by the
    # weight's pyramid is base plus the difference's bands weighted alone: one pyramid, not two.
    gd, gw = top - base, w
    bands: list[np.ndarray] = []
    shapes: list[tuple[int, int]] = []
    for _ in range(levels):
        if min(gd.shape[:2]) < 2:
            break
        nd = _reduce(gd)
        shp = gd.shape[:2]
        bands.append((gd - expand(nd, shp)) * gw[..., None])
        shapes.append(shp)
        gd, gw = nd, _reduce(gw)
    out = gd * gw[..., None]
    for band, shp in zip(reversed(bands), reversed(shapes)):
        out = band + expand(out, shp)
    return np.clip(base + out, 0.0, 1.0).astype(np.float32)


def push_pull(values: np.ndarray, known: np.ndarray, levels: int) -> np.ndarray:
    """A smooth field equal to `values` where `known` and interpolated elsewhere (push-pull: a
    pyramid of normalised convolutions, Gortler et al. 1996; close to the membrane that
    gradient-domain cloning solves for, Farbman et al. 2011). values: float H×W×C; known: bool
    H×W; levels: pyramid levels (the field reaches about 2^levels px from the known pixels; beyond
    that the coarsest estimate, or 0 where nothing is known). Returns float32 H×W×C."""
    v = np.asarray(values, np.float32)
    k = np.asarray(known, bool)
    if v.ndim != 3 or k.shape != v.shape[:2]:
        raise InputError(f"push_pull needs H×W×C values and an H×W mask, got {v.shape} and {k.shape}")
    den = k.astype(np.float32)
    num = v * den[..., None]
    nums, dens, shapes = [num], [den], [den.shape]
    for _ in range(max(0, int(levels))):
        if min(dens[-1].shape) < 2:
            break
        nums.append(_reduce(nums[-1]))
        dens.append(_reduce(dens[-1]))
        shapes.append(dens[-1].shape)
    est = np.where(dens[-1][..., None] > 1e-6, nums[-1] / np.maximum(dens[-1], 1e-6)[..., None], 0.0)
    for lvl in range(len(nums) - 2, -1, -1):
        up = expand(est, shapes[lvl])
        d = dens[lvl]
        local = nums[lvl] / np.maximum(d, 1e-6)[..., None]
        a = np.clip(d * (PULL_TRUST if lvl else 1.0), 0.0, 1.0)[..., None]   # level 0: exactly the known values
        est = a * local + (1.0 - a) * up
    return est.astype(np.float32)
