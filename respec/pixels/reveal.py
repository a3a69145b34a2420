"""Exact reveal (Reveal Composite): put the hidden content back pixel for pixel (beyond the paper).

On a restoration turn t the editor returns I_t. Turn k (its change mask C_k) covered the content
that is now being revealed, and I_{k-1}, the latest image before it, still shows that content.
Where the scene's geometry has not moved, I_{k-1}'s own pixels are a better answer than anything
an editor re-invents. `reveal_composite` does this in four steps:

1. **Colour match.** Two robust per-channel colour fits (respec/pixels/colour_fit.py): T_src maps I_{k-1}
   onto I_t, fitted on the pixels no turn from k to t changed (`stable`) outside C_k and C_t;
   T_prev maps I_{t-1} onto I_t on the whole image. C_t is the change mask of I_{t-1} -> I_t.
2. **Revealed region R.** Pixels covered by turn k (C_k) that I_t no longer shows the occluder
   in: I_t differs from I_{t-1} there (C_t) and agrees better with I_{k-1} than with I_{t-1}
   (local mean colours over `compare_size`² pixels: |mean(I_t - T_src(I_{k-1}))| <
   |mean(I_t - T_prev(I_{t-1}))|, so that re-invented texture is compared by its colour), cleaned
   up like a change mask, its small enclosed holes within C_k & C_t filled (`hole_frac`).
3. **Geometry check.** A ring around R (from `gap` px out, where an occluder's blurred rim has
   faded, to `gap` + `ring` px), on pixels no turn since k-1 changed (and 2 px away from this
   edit's other changes): if the scene did not move, I_t and T_src(I_{k-1})
   differ there only by the editor's noise and blur. That is measured on the rest of the stable
   image: the residual (3×3 mean, as for change masks) exceeds tau = median + K · 1.4826 · MAD
   (K = 4, at least `min_delta`) on some share of it; an editor's blur leaves more residual on
   sharp texture, so the expected share p for the ring is the background's share per texture
   decile (gradient magnitude of I_{k-1}), averaged over the ring's pixels by their decile.
   Neighbouring residuals are correlated by the 3×3 mean, so the ring holds about
   n_eff = n_ring / 9 independent samples, and an exceedance rate in the ring above
   p + 3 · sqrt(p (1 - p) / n_eff) + `allowance` (allowance = 0.05: an occluder's soft edge or
   shadow, a mask a pixel too tight) is not noise: the check refuses. It also refuses when the
   ring matches best at a shifted position: the ring's median residual after a colour fit, for
   integer shifts up to `max_shift` px, is lowest away from (0, 0) and `shift_ratio` (1.5) times
   lower than at (0, 0) — the scene moved there after alignment (the search runs on the ring's
   grey values only: the turn's alignment already undid the whole frame's motion, so the old
   whole-image search is gone). (Noise alone gives ratios near 1; the editor's blur is symmetric
   and keeps (0, 0) best.) Too few ring pixels (< `min_ring`) also refuses: nothing to check
   against. Before these tests the source is blurred by the sigma that best explains I_t on the
   ring (an editor that blurs on every call), and the absolute checks follow (`absolute_check`),
   then the block-wise residual motion around R (`local_motion`: a local, non-rigid warp).
   Local alignment (issue 32): when the blocks around R moved by more than FLOW_TRIGGER_PX after
   the global alignment, the dense local field (respec/pixels/flow.py) is measured on R's quiet
   neighbourhood (`align_locally`); consistent and within FLOW_MAX_PX, the source is warped by it
   (composed with the global alignment) before the ring tests, and every check runs on the
   locally aligned source (the local-motion limit included); otherwise a motion above
   MAX_LOCAL_MOTION is refused with the field's reason (a re-render, more than 2 px).

Cost (issue 20): the source is warped only on a box around C_k & C_t and on an even grid of
samples (with their 3×3 neighbours) for the colour fit and the background's noise; C_t and the
turn's alignment are computed once (reveal_for) and reused by History Append / run_turn; images
above WORK_PIXELS are analysed at the working resolution and only the paste is made at full size,
on the pasted pixels' box. scripts/bench/bench_provenance.py --turn measures it.
4. **Paste.** Inside R the composite is exactly T_src(I_{k-1}) (I_{k-1}'s pixels in I_t's
   colours, Keys-cubic warped; plus the seam colour correction when it reaches SEAM_MIN); a
   multi-band blend (respec/pixels/blend.py) carries it into I_t across a plateau of `feather` px of
   quiet pixels outside R (fine detail switches at the plateau's edge, coarse colour over
   ~`blend_frac` of the side); this edit's other changes and unstable pixels keep I_t's pixels;
   I_t is kept everywhere else. On refusal I_t is returned unchanged with the reason.

The result records which pixels came from where: `source_weight` (1 = I_{k-1}'s pixel, 0 = the
editor's; in between, the coarsest band's share at the seam), stored with the turn as the
`reveal_source` mask.

A removal (issue 32): when the request removes what turn k added (`removes_addition`), R also
holds the part of C_k no later turn changed (`whole`), so the parts of the object the editor left
are pasted too (`editor_left_fraction`). A move or a replace pastes only what was revealed.

Inside a guarded chain (issue 32): the Drift Guard puts the picture back into I_{t-1}'s frame and
keeps I_{t-1}'s own pixels around the edit, so the colour fit and the seam correction towards the
editor's drifted ring would only tint the paste; `exact_patch` gives the guard I_{k-1}'s own
pixels aligned into that frame for the pasted core, with the seam band's weights
(respec/pixels/guard/change.py `with_exact_paste`).

Where it fails (by construction): when R is wrong (an occluder whose colour matches the
background leaves C_k incomplete, so part of the revealed area is not pasted; a "replace" whose
new object happens to look more like the old background than like the occluder is pasted over,
and so is a new object inside the revealed area smaller than `hole_frac` of R whose colours are
nearer the occluder's than the background's),
and when the ring cannot see a shift (a textureless ring: then the scene's shift is invisible at
the seam too, but content inside R may be misplaced).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..errors import InputError
from ..history import REVEAL_SOURCE, History, StoredImage, TurnMask
from ..images import as_array, check_image_size, finite_pixels, image_id_arg, to_uint8
from .alignment import IDENTITY, Alignment, alignment_for, remember_alignment, residual_flow, support, warp, warp_float
from . import work_images
from .blend import levels_for, multiband_blend
from .flow import LocalFlow, estimate_flow, warp_by_flow
from .change_mask import DEFAULT_PARAMS, ChangeResult, change_of, full_size_result, remember_change
from .colour_fit import FIT_SAMPLES, ColourFit, fit_colour, grey_of, residual, robust_scale, sample_grid, smooth
from .masks import clean_mask, dilate, history_size, mask_at
from .provenance import provenance_of
from .seam import spread_difference
from .verify import Composite, verify
from .work_images import as_float_rgb, work_float, working_size

METHOD = "reveal-composite-v2"
# Absolute checks (v2): the relative ring test compares the ring with the rest of the image, so a
# source unrelated everywhere (black, flat, another picture) passes it; these do not.
MAX_GAIN_DEV = 0.5      # the source's colour fit must have gains in [1/1.5, 1.5] ...
MAX_BIAS = 0.25         # ... and offsets within this (0..1 units)
MIN_RING_NCC = 0.5      # a textured ring must correlate at least this with the warped source
MAX_RING_RESIDUAL = 0.045  # the ring's median residual (0..1) after the colour fit (a re-render field of the real
                           # removals leaves 0.06-0.07 after three calls; JPEG, blur, gain, zoom, shift <= 0.036)
MAX_LOCAL_MOTION = 0.5      # px: the median residual motion of the blocks around R after alignment (local_motion)
FLOW_TRIGGER_PX = 0.25      # px: above this block motion around R, the dense local field (flow.py) is measured ...
FLOW_MAX_PX = 2.0           # ... and the source warped by it when it is consistent and within this many px
MOTION_BLOCK_FRAC = 1 / 32  # local_motion's blocks: this share of the shorter side ...
MOTION_BLOCK_MIN = 8        # ... at least this many pixels
MOTION_REACH = 2            # ... within this many blocks of R
MIN_MOTION_BLOCKS = 3       # fewer textured blocks than this around R: no local motion measured
MOTION_QUIET_SHARE = 0.5    # a block is used when at least this share of it is quiet pixels outside R
MOTION_GREY_SIGMA = 1.0     # px: both greys are blurred by this before the blocks' Lucas-Kanade step (noise)
RING_NCC_SIGMA = 1.0    # px: the ring's greys are blurred by this before the correlation (noise, JPEG)
RING_TEXTURE = 0.02     # a ring whose grey std in I_t is below this is flat (no NCC test) ...
FLAT_SOURCE = 0.33      # ... and a source ring with less than this share of I_t's texture is flat
CUMULATIVE_STABLE = 0.5   # turns k..t together must have kept this share of the scene (product of stable fractions)
REVEAL_WORK_PIXELS = 2_097_152   # a restoration turn above 2 MP is analysed at 2 MP (C_t, R, the checks; cost:
                                 # 2048² with a zoom-out every call, 1.40 -> ~0.9 s CPU); the paste stays full size
SEAM_MIN = 0.03          # a seam colour correction smaller than this (0..1) everywhere is not applied: the
                         # default sim drift leaves up to 0.021, a clipped 5 % gain per call 0.046-0.062
BLEND_METHOD = "multiband"   # respec/pixels/blend.py: Burt & Adelson's Laplacian-pyramid blend
BLEND_REACH = 3              # a blend of L levels is computed on a box grown by BLEND_REACH * 2^L px (at 3 the
                             # change it leaves at the box edge is below 0.5/255: under the output's rounding)
SHIFT_SAMPLES = 1024    # ring pixels the shift search compares (an even subsample of the ring; grey)
MIN_GAP_PX = 3          # the ring starts at least this far out from R (px) ...
MIN_RING_WIDTH_PX = 3   # ... and is at least this wide
MIN_SHIFT_PX = 4        # the shift search reaches at least this far (px) ...
MAX_SHIFT_PX = 12       # ... and at most this far (it compares (2 * 12 + 1)² shifts)
MIN_BLEND_PX = 4        # the blend's coarse colour spreads over at least this many px
PASTE_WEIGHT_EPS = 1e-3  # a paste weight within this of 0 is no paste, within this of 1 the pasted core
RING_SIGMAS = 3.0       # the ring's exceedance rate may pass the background's by this many binomial standard errors
OTHER_CHANGE_MARGIN = 2  # px: this edit's other changes are left out of the ring with this margin (their soft rims)
VERIFY_REACH_FRAC = 0.06  # the verification reads I_{k-1} this share of the shorter side around the paste (an
VERIFY_MIN_REACH_PX = 16  # island, a rim, a speck beside it), at least this many px; beyond, nothing was written


@dataclass(frozen=True)
class RevealParams:
    """Settings of `reveal_composite` (fractions are of the image's shorter side)."""

    k: float = 4.0                 # noise threshold tau = median + k robust sigmas (as change masks)
    compare_size: int = 5          # averaging window for "agrees better with I_{k-1}" (px)
    agree_ratio: float = 1.0       # revealed where |I_t - I_{k-1}| < agree_ratio * |I_t - I_{t-1}|
    ring_frac: float = 0.03        # ring width around R for the geometry check
    gap_frac: float = 0.01         # ... starting this far out (at least 3 px): an occluder's blurred rim
                                   # outlives it by a few pixels and is no evidence about the geometry
    min_ring: int = 32             # fewer ring pixels than this: refuse (nothing to check)
    allowance: float = 0.05        # extra exceedance rate tolerated in the ring
    shift_frac: float = 0.02       # largest shift searched in the ring (at least 4 px, at most 12)
    shift_ratio: float = 1.5       # a shift must fit this many times better than (0, 0)
    feather_frac: float = 0.008    # the blend's plateau of quiet pixels outside R (at least 1 px)
    hole_frac: float = 0.02        # R's enclosed holes up to this share of R are filled (_fill_small_holes)
    blend_frac: float = 0.02       # the multi-band blend spreads coarse colour over about this width (at least 4 px)
    seam_colour: bool = True       # seam_correction: the boundary's colour difference spread over R (when >= SEAM_MIN)
    paste_blur_px: float = 1.5     # the paste too is blurred to I_t's softness when the source needs at least
                                   # this much blur to match I_t (an editor that blurs ~1 px per call: a sharp
                                   # patch in a soft picture); below it the paste is I_{k-1}'s exact pixels

    def pixels(self, shape: tuple[int, int]) -> dict[str, int]:
        """Ring width, largest shift and feather width in pixels for an image of `shape`."""
        side = min(shape)
        gap = max(MIN_GAP_PX, round(self.gap_frac * side))
        return {"gap": gap, "ring": gap + max(MIN_RING_WIDTH_PX, round(self.ring_frac * side)),
                "max_shift": int(min(MAX_SHIFT_PX, max(MIN_SHIFT_PX, round(self.shift_frac * side)))),
                "feather": max(1, round(self.feather_frac * side)),
                "blend": max(MIN_BLEND_PX, round(self.blend_frac * side))}


DEFAULT_REVEAL = RevealParams()


@dataclass(frozen=True, eq=False)
class RevealResult:
    """What Reveal Composite did: the output image (I_t itself when it refused), whether it pasted,
    why, the revealed region R and the weight of I_{k-1}'s pixels per pixel (I_t's size)."""

    image: np.ndarray
    applied: bool
    reason: str
    source_id: int | None
    region: np.ndarray
    source_weight: np.ndarray
    checks: dict = field(default_factory=dict)

    def record(self) -> dict:
        """JSON-able summary (for the turn's meta, the node's report and the mask's info)."""
        return {"method": METHOD, "applied": self.applied, "reason": self.reason,
                "source_id": self.source_id, "region_fraction": round(float(self.region.mean()), 6),
                "pasted_fraction": round(float((self.source_weight > 0).mean()), 6), **self.checks}

    def turn_mask(self) -> TurnMask | None:
        """The `reveal_source` mask to store with the turn (None when nothing was pasted)."""
        return TurnMask.from_mask(self.source_weight, self.record()) if self.applied else None


def _refuse(edited: np.ndarray, reason: str, source_id, region, checks) -> RevealResult:
    out = edited.copy()
    out.flags.writeable = False
    return RevealResult(out, False, reason, source_id, region, np.zeros(region.shape, np.float32), checks)


def _best_shift(a: np.ndarray, b: np.ndarray, ring: np.ndarray, max_shift: int) -> tuple[tuple[int, int], float, float]:
    """The integer shift (dy, dx) of `a` that best matches `b` on the ring (grey H×W images), with
    the ring's median per-pixel residual at that shift and at (0, 0). At every shift a gain and
    offset are fitted on the ring first (a fit made at the wrong alignment flattens the gain and
    hides the shift), and the median is taken so that a new object over part of the ring does not
    decide. The alignment has already undone the whole frame's motion: this looks for a local one."""
    ys, xs = np.nonzero(ring)
    step = max(1, len(ys) // SHIFT_SAMPLES)      # an even subsample: the median needs no more
    ys, xs = ys[::step], xs[::step]
    bb = b[ys, xs].astype(np.float32)                                  # n
    ym = bb.mean()
    pa = np.pad(a, max_shift, mode="edge")
    d = np.arange(-max_shift, max_shift + 1)
    x = pa[(ys + max_shift)[None, None, :] + d[:, None, None], (xs + max_shift)[None, None, :] + d[None, :, None]]
    xc = x - x.mean(axis=2, keepdims=True)                             # shifts × shifts × n
    var = (xc ** 2).mean(axis=2, keepdims=True)
    gain = np.where(var > 1e-8, (xc * (bb - ym)).mean(axis=2, keepdims=True) / np.maximum(var, 1e-8), 1.0)
    errs = np.median(np.abs(xc * gain + ym - bb), axis=2)
    zero = float(errs[max_shift, max_shift])
    iy, ix = np.unravel_index(int(np.argmin(errs)), errs.shape)
    if errs[iy, ix] >= zero - 1e-12:        # ties keep (0, 0)
        return (0, 0), zero, zero
    return (int(d[iy]), int(d[ix])), float(errs[iy, ix]), zero


TEXTURE_BINS = 10       # the background's exceedance rate is measured per texture decile


def _sobel_at(grey: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """The Sobel gradient magnitude of `grey` at the points (ys, xs) only (the border repeats)."""
    h, w = grey.shape
    ym, yp = np.maximum(ys - 1, 0), np.minimum(ys + 1, h - 1)
    xm, xp = np.maximum(xs - 1, 0), np.minimum(xs + 1, w - 1)
    g = grey
    gx = (g[ym, xp] + 2 * g[ys, xp] + g[yp, xp]) - (g[ym, xm] + 2 * g[ys, xm] + g[yp, xm])
    gy = (g[yp, xm] + 2 * g[yp, xs] + g[yp, xp]) - (g[ym, xm] + 2 * g[ym, xs] + g[ym, xp])
    return np.hypot(gx, gy)


def _expected_exceedance(src: np.ndarray, bg_residual: tuple, tau: float, bg: np.ndarray, ring: np.ndarray) -> float:
    """How often a ring pixel would exceed tau if the geometry held: the background's exceedance
    rate per texture decile (gradient magnitude of I_{k-1}: an editor's blur leaves more residual
    on sharp texture), averaged over the ring's pixels by their decile. bg_residual = (gradient
    magnitude, 3×3-mean residual) at an even sample of the background; the ring's gradient is
    taken on the ring's box of `src` only."""
    y0, y1, x0, x1 = _box(ring, 2)
    grey = grey_of(src[y0:y1, x0:x1])
    gb, r = bg_residual
    eb = r > tau
    ry, rx = np.nonzero(ring[y0:y1, x0:x1])
    gr = _sobel_at(grey, ry, rx)
    edges = np.quantile(gb, np.linspace(0, 1, TEXTURE_BINS + 1)[1:-1])
    bins_b, bins_r = np.digitize(gb, edges), np.digitize(gr, edges)
    nb = np.bincount(bins_b, minlength=TEXTURE_BINS).astype(np.float64)
    ne = np.bincount(bins_b, weights=eb.astype(np.float64), minlength=TEXTURE_BINS)
    overall = ne.sum() / max(1.0, nb.sum())
    rate = np.where(nb > 0, ne / np.maximum(nb, 1.0), overall)
    return float(rate[bins_r].mean())


BLUR_CANDIDATES = (0.0, 0.5, 0.75, 1.0, 1.5, 2.0)   # px; 3 sigma stays inside the box B's margin
RING_BLUR_SAMPLES = 256      # ring pixels the blur match compares (spread evenly) ...
RING_BLUR_PATCH_RADIUS = 8   # ... each blurred on its own (2r+1)² patch: 3 sigma of the widest candidate fits in it
RING_BLUR_MIN_POINTS = 16    # fewer ring pixels than this with a whole patch inside B: no blur measured
RING_BLUR_GAIN = 0.95        # a blur is taken only when it lowers the ring's residual to this share (5 % better)


def _match_blur(src: np.ndarray, cur: np.ndarray, fit, ring: np.ndarray, B: tuple[int, int, int, int],
                samples: int = RING_BLUR_SAMPLES) -> float:
    """The Gaussian sigma (of BLUR_CANDIDATES) that, applied to the colour-fitted source, best
    matches I_t on the ring (mean residual at up to `samples` ring pixels spread evenly, each
    blurred on its own 17×17 patch); 0 unless it beats the unblurred source by 5 %."""
    ys, xs = np.nonzero(ring)
    r = RING_BLUR_PATCH_RADIUS
    ok = (ys >= B[0] + r) & (ys < B[1] - r) & (xs >= B[2] + r) & (xs < B[3] - r)
    ys, xs = ys[ok], xs[ok]
    if len(ys) < RING_BLUR_MIN_POINTS:
        return 0.0
    step = max(1, len(ys) // samples)
    ys, xs = ys[::step], xs[::step]
    off = np.arange(-r, r + 1)
    py, px = ys[:, None, None] + off[None, :, None], xs[:, None, None] + off[None, None, :]
    patches = src[py, px]                                   # n × 17 × 17 × 3
    target = cur[ys, xs]
    errs = []
    for sg in BLUR_CANDIDATES:
        g = ndimage.gaussian_filter(patches, (0, sg, sg, 0), mode="nearest")[:, r, r] if sg else patches[:, r, r]
        d = fit.apply(g) - target
        errs.append(float(np.sqrt(np.einsum("nc,nc->n", d, d) / 3.0).mean()))
    i = int(np.argmin(errs))
    return float(BLUR_CANDIDATES[i]) if i and errs[i] < RING_BLUR_GAIN * errs[0] else 0.0


def _sobel_grid(g: dict) -> np.ndarray:
    """The Sobel gradient magnitude on a sample grid from the grey values at its 3×3 neighbours
    (g[(dy, dx)], each rows × cols)."""
    gx = (g[-1, 1] + 2 * g[0, 1] + g[1, 1]) - (g[-1, -1] + 2 * g[0, -1] + g[1, -1])
    gy = (g[1, -1] + 2 * g[1, 0] + g[1, 1]) - (g[-1, -1] + 2 * g[-1, 0] + g[-1, 1])
    return np.hypot(gx, gy)


def _rms(d: np.ndarray) -> np.ndarray:
    """Per-pixel RMS over the channels of an H×W×3 difference (float32 H×W)."""
    return np.sqrt(np.einsum("...c,...c->...", d, d) / np.float32(d.shape[-1]))


def _fill_small_holes(region: np.ndarray, allowed: np.ndarray, frac: float) -> np.ndarray:
    """`region` with its enclosed holes filled where they lie in `allowed` (C_k & C_t) and are
    at most `frac` of the region's area each: inside a revealed area, a speck that agrees better
    with the occluder is a leftover fragment of it or re-invented content that happens to share
    its colour far more often than a new object (which is larger, and is left alone)."""
    if not region.any() or frac <= 0:
        return region
    holes = ndimage.binary_fill_holes(region) & ~region
    if not holes.any():
        return region
    labels, n = ndimage.label(holes)
    sizes = np.bincount(labels.ravel(), minlength=n + 1)
    inside = np.bincount(labels.ravel(), weights=allowed.ravel().astype(np.float64), minlength=n + 1)
    ok = (sizes <= frac * float(region.sum())) & (inside >= sizes)
    ok[0] = False
    return region | ok[labels]


def _box(mask: np.ndarray, pad: int) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the bounding box of a non-empty mask grown by pad (clipped)."""
    ys, xs = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    h, w = mask.shape
    return max(0, ys[0] - pad), min(h, ys[-1] + 1 + pad), max(0, xs[0] - pad), min(w, xs[-1] + 1 + pad)


def _dilate_near(region: np.ndarray, radius: int, pad: int = 0) -> np.ndarray:
    """dilate(region, radius), computed on the region's bounding box grown by radius + pad."""
    y0, y1, x0, x1 = _box(region, radius + pad + 1)
    out = np.zeros(region.shape, bool)
    out[y0:y1, x0:x1] = dilate(region[y0:y1, x0:x1], radius)
    return out


def absolute_check(src: np.ndarray, cur: np.ndarray, fit, ring: np.ndarray, checks: dict) -> str:
    """The checks that do not compare the ring with the rest of the image: the source's colour fit
    is plausible, the ring's structure correlates with the warped source, its residual is small in
    absolute terms, and its blocks show no residual motion. Returns the reason to refuse ('' = ok);
    the figures go into `checks`."""
    gains = np.asarray(fit.gain)
    if np.any(gains < 1.0 / (1.0 + MAX_GAIN_DEV)) or np.any(gains > 1.0 + MAX_GAIN_DEV) \
            or np.any(np.abs(np.asarray(fit.bias)) > MAX_BIAS):
        return (f"the source is unrelated to I_t: its colours map onto I_t's only with gains "
                f"{[round(g, 2) for g in fit.gain]} and offsets {[round(b, 2) for b in fit.bias]}")
    y0, y1, x0, x1 = _box(ring, 0)
    gs = ndimage.gaussian_filter(fit.apply(src[y0:y1, x0:x1]).mean(axis=2), RING_NCC_SIGMA)
    gc = ndimage.gaussian_filter(cur[y0:y1, x0:x1].mean(axis=2), RING_NCC_SIGMA)
    rm = ring[y0:y1, x0:x1]
    a, b = gs[rm] - gs[rm].mean(), gc[rm] - gc[rm].mean()
    sa, sb = float(a.std()), float(b.std())
    ncc = float((a * b).mean() / max(sa * sb, 1e-12))
    med = float(np.median(np.sqrt(((fit.apply(src[y0:y1, x0:x1]) - cur[y0:y1, x0:x1]) ** 2).mean(axis=2))[rm]))
    checks.update({"ring_ncc": round(ncc, 4), "ring_std_source": round(sa, 4), "ring_std_edited": round(sb, 4),
                   "ring_residual_median": round(med, 5)})
    if sb >= RING_TEXTURE:
        if sa < FLAT_SOURCE * sb:
            return f"the source is flat where I_t is textured around the revealed region (std {sa:.3f} vs {sb:.3f})"
        if ncc < MIN_RING_NCC:
            return (f"the source does not match I_t around the revealed region (structure correlation "
                    f"{ncc:.2f} < {MIN_RING_NCC})")
    if med > MAX_RING_RESIDUAL:
        return f"the source differs from I_t around the revealed region by {med:.3f} (limit {MAX_RING_RESIDUAL})"
    return ""


def block_motion_px(src: np.ndarray, cur: np.ndarray, fit, region: np.ndarray, quiet: np.ndarray,
                    checks: dict) -> float | None:
    """The block-wise residual motion around R after alignment (a non-rigid warp moves R and its
    surroundings while the frame as a whole holds): blocks of ~1/32 of the shorter side (at least
    8 px) within two blocks of R and mostly on its quiet pixels, each with one Lucas-Kanade step
    (respec.pixels.alignment.residual_flow) of I_t against the colour-fitted (and blur-matched)
    source; the median displacement length (None: fewer than MIN_MOTION_BLOCKS textured blocks).
    (Blocks on R itself are not used: there I_t is the editor's re-invention, whose softness biases
    the step by up to a pixel where the geometry held. The median length, not the median vector: a
    non-rigid field's directions vary around R and cancel.) The figures go into `checks`."""
    shape = region.shape
    blk = max(MOTION_BLOCK_MIN, round(min(shape) * MOTION_BLOCK_FRAC))
    near = _dilate_near(region, MOTION_REACH * blk)
    y0, y1, x0, x1 = _box(near, 0)
    gs = ndimage.gaussian_filter(fit.apply(src[y0:y1, x0:x1]) @ np.full(3, 1.0 / 3.0, np.float32),
                                 MOTION_GREY_SIGMA)
    gc = ndimage.gaussian_filter(grey_of(cur[y0:y1, x0:x1]), MOTION_GREY_SIGMA)
    ux, uy, tex = residual_flow(gs, gc, blk)
    nby, nbx = gs.shape[0] // blk, gs.shape[1] // blk
    if not (nby and nbx):
        return None
    on = (quiet & ~region)[y0:y0 + nby * blk, x0:x0 + nbx * blk].astype(np.float32)
    use = tex & (on.reshape(nby, blk, nbx, blk).mean(axis=(1, 3)).ravel() >= MOTION_QUIET_SHARE)
    checks["local_motion_blocks"] = int(use.sum())
    if use.sum() < MIN_MOTION_BLOCKS:
        return None
    motion = float(np.median(np.hypot(ux[use], uy[use])))
    checks["local_motion_px"] = round(motion, 3)
    return motion


def local_motion(src: np.ndarray, cur: np.ndarray, fit, region: np.ndarray, quiet: np.ndarray,
                 checks: dict) -> str:
    """`block_motion_px` as a check: the reason to refuse when the median exceeds MAX_LOCAL_MOTION
    ('' = ok). Run on the source after the local field (`align_locally`) warped it, it says whether
    the scene still moved."""
    motion = block_motion_px(src, cur, fit, region, quiet, checks)
    if motion is not None and motion > MAX_LOCAL_MOTION:
        return (f"the scene moved by {motion:.1f} px around the revealed region after alignment (median of "
                f"{checks['local_motion_blocks']} blocks; limit {MAX_LOCAL_MOTION} px): a local warp")
    return ""


def align_locally(src: np.ndarray, cur: np.ndarray, fit, region: np.ndarray, quiet: np.ndarray,
                  box: tuple[int, int, int, int], checks: dict) -> tuple[LocalFlow | None, str]:
    """The local motion around R after the global alignment, when the blocks around R moved by
    more than FLOW_TRIGGER_PX: the dense field (respec/pixels/flow.py) of I_t against the
    colour-fitted source on `box` (R's neighbourhood, where the source was warped), measured on the
    quiet pixels outside R and carried across R. (the field, '') when it is consistent and within
    FLOW_MAX_PX; (None, '') when the blocks did not move; (None, the reason to refuse) when no such
    field explains a motion beyond MAX_LOCAL_MOTION (a re-render, more than FLOW_MAX_PX, too little
    texture; below it the unaligned checks decide, as they did before the field existed)."""
    motion = block_motion_px(src, cur, fit, region, quiet, checks)
    if motion is None or motion <= FLOW_TRIGGER_PX:
        return None, ""
    checks["local_motion_unaligned_px"] = round(motion, 3)
    y0, y1, x0, x1 = box
    valid = np.zeros(region.shape, bool)
    valid[y0:y1, x0:x1] = (quiet & ~region)[y0:y1, x0:x1]
    ref = np.zeros_like(cur)
    ref[y0:y1, x0:x1] = fit.apply(src[y0:y1, x0:x1])
    flow = estimate_flow(ref, cur, valid=valid, box=box, max_px=FLOW_MAX_PX)
    checks["local_flow"] = flow.record()
    ok, why = flow.usable(FLOW_MAX_PX)
    if not ok:
        if motion <= MAX_LOCAL_MOTION:     # within what the unaligned checks accept: they decide, as before
            checks["local_flow_not_used"] = why
            return None, ""
        return None, (f"the scene moved by {motion:.1f} px around the revealed region after alignment (median of "
                      f"{checks['local_motion_blocks']} blocks) and no local motion field explains it: {why}")
    return flow, ""


def _gauss_small(x: np.ndarray, sig: float) -> tuple[np.ndarray, int]:
    """x (H×W float) blurred by a Gaussian of `sig` px, computed at 1/q of the size (q ~ sig / 3;
    a wide Gaussian has nothing finer to keep): (the blurred image at the small size, q)."""
    q = max(1, int(sig // 3))
    if q == 1:
        return ndimage.gaussian_filter(x, sig), 1
    h, w = x.shape
    small = np.asarray(Image.fromarray(x.astype(np.float32)).resize((max(1, w // q), max(1, h // q)), Image.BOX),
                       np.float32)
    return ndimage.gaussian_filter(small, sig / q), q


def _up(x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if x.shape == tuple(shape):
        return x
    return np.array(Image.fromarray(x.astype(np.float32)).resize((shape[1], shape[0]), Image.BILINEAR), np.float32)


def seam_correction(pasted: np.ndarray, cur: np.ndarray, region: np.ndarray, quiet: np.ndarray, feather: int,
                    checks: dict) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """Seam-aware colour matching: the difference I_t - pasted on a band of quiet pixels just
    outside R is spread smoothly over R (normalised convolution, a membrane-like correction), so a
    local colour or shading drift the global fit missed leaves no seam. Only R's bounding box is
    touched; the correction is bounded to ±SPREAD_CLIP (respec/pixels/seam.py). Returns (the
    correction over R's bounding box, float32 h×w×3, and that box (y0, y1, x0, x1)), or None when
    there is no band. The wide blur runs at a reduced size (it keeps nothing finer than its sigma)."""
    width = max(2, 2 * feather)
    band = _dilate_near(region, width) & ~region & quiet
    if band.sum() < 16:
        return None
    ry0, ry1, rx0, rx1 = _box(region, 0)
    y0, y1, x0, x1 = _box(region, 4 * width)
    b = band[y0:y1, x0:x1]
    sig = max(3.0, (ry1 - ry0 - 1 + rx1 - rx0 - 1) / 8.0)
    corr = spread_difference(cur[y0:y1, x0:x1] - pasted[y0:y1, x0:x1], b, lambda x: _gauss_small(x, sig)[0],
                             up=lambda x: _up(x, b.shape))
    checks["seam_correction_max"] = round(float(np.abs(corr[region[y0:y1, x0:x1]]).max()) if region.any() else 0.0, 4)
    return corr, (int(y0), int(y1), int(x0), int(x1))


def reveal_composite(source: Any, previous: Any, edited: Any, covered: Any, stable: Any = None,
                     source_id: int | None = None, params: RevealParams = DEFAULT_REVEAL,
                     change: ChangeResult | None = None, source_alignment: Alignment | None = None,
                     whole: Any = None) -> RevealResult:
    """Paste I_{k-1}'s pixels (`source`) into the region of I_t (`edited`) that turn k covered
    (`covered` = C_k) and that the edit revealed, colour-matched to I_t and feathered at the seam,
    if the geometry held around it; otherwise return I_t unchanged and say why. In four steps (the
    module docstring says what each measures), each returning a frozen value the next ones read:

        1. colour match      the inputs at the analysis size; C_t once; T_src on quiet pixels
                             (_reveal_inputs -> _Inputs, _colour_match -> _ColourMatch)
        2. revealed region   R in C_k & C_t, plus a removed object's whole region (_revealed -> _Revealed)
        3. geometry check    the ring around R (_ring -> _Ring), the source blur-matched and locally
                             aligned (_sharpness_and_flow -> _Aligned), then _ring_exceedance, _ring_shift
        4. paste             I_{k-1}'s pixels colour-fitted, seam-corrected, blended into I_t (_paste_step)

    Steps 2 and 3 may refuse (I_t unchanged, with the reason and the checks so far). `checks` is
    the result's record: each step adds the figures it measured, in this order.

    previous: I_{t-1} (in I_t's frame). stable: optional H×W mask of the pixels no turn from k to
    t-1 changed (provenance's `unchanged_since(k-1)`); None = every pixel outside C_k. Masks of
    another size are resized (nearest) to I_t's size, images bilinearly. change: this edit's
    change record C_t (I_{t-1} -> I_t, at the analysis size) when the caller already has it.
    source_alignment: the source is in I_{k-1}'s frame and is warped with this (only the crop the
    paste needs is warped at full size). whole: on a request to remove the object turn k added,
    the part of C_k no later turn changed (I_t's frame): pasted whole, the pixels the editor left
    of the object too (`editor_left_fraction` in the checks). Above WORK_PIXELS the analysis runs
    at the working resolution and only the paste is made at I_t's size."""
    inp = _reveal_inputs(source, previous, edited, covered, stable, source_id, params, source_alignment)
    if not inp.cov.any():
        return _refuse(inp.e_arr, "turn k's change mask is empty: nothing was covered", source_id,
                       _full(np.zeros(inp.shape, bool), inp.size), {})
    checks: dict = {}

    # 1. Colour match: C_t (once per turn) and T_src, fitted on the quiet pixels
    colour = _colour_match(inp, change, checks)

    # 2. Revealed region R, with the source warped on the box B around it
    found = _revealed(inp, colour, whole, checks)
    if not found.region.any():
        return _refused(inp, found.region, checks, "nothing revealed: where turn k covered the scene, I_t still "
                        "shows what I_{t-1} showed (or agrees better with it than with I_{k-1})")

    # 3. Geometry check: the ring around R; the source blur-matched and locally aligned; the ring's
    #    exceedance, its best shift, the absolute checks and the local motion. The first reason refuses.
    ring, why = _ring(inp, colour, found.region, checks)
    aligned = None
    if not why:
        aligned, why = _sharpness_and_flow(inp, colour, found, ring, checks)
    if not why:
        why = (_ring_exceedance(inp, colour, ring, aligned.src, checks)
               or _ring_shift(inp, colour, found.region, ring, aligned.src, checks))
    if why:
        return _refused(inp, found.region, checks, why)

    # 4. Paste: I_{k-1}'s pixels colour-fitted, seam-corrected, blended into I_t
    return _paste_step(inp, colour, found, aligned, checks)


@dataclass(frozen=True, eq=False)
class _Inputs:
    """One reveal_composite call's inputs, I_{k-1}, I_{t-1}, I_t and the masks at the analysis size
    (`work`, H×W `shape`; `big` when that is below I_t's size), and the params' pixel sizes there."""

    source: Any                  # I_{k-1} as given (the full-size paste reads it again)
    e_arr: np.ndarray            # I_t as given (uint8)
    size: tuple[int, int]        # I_t's (w, h)
    work: tuple[int, int]        # the analysis size (w, h)
    a_src: Alignment             # I_{k-1} -> I_t at I_t's size, and at the analysis size
    a_src_w: Alignment
    src_arr: np.ndarray          # I_{k-1} at the analysis size (in its own frame)
    prev: np.ndarray             # I_{t-1} and I_t at the analysis size (float RGB)
    cur: np.ndarray
    cov: np.ndarray              # C_k, and the pixels no turn since k-1 changed outside it
    stab: np.ndarray
    source_id: int | None
    params: RevealParams
    big: bool
    shape: tuple[int, int]       # (H, W) of the analysis
    px: dict                     # params.pixels(shape)


@dataclass(frozen=True, eq=False)
class _ColourMatch:
    """Step 1's result: C_t's mask (`changed_now`), the quiet pixels (stable and unchanged now), the
    fit grid's rows and columns with their 3×3 neighbours (`nbr`), the warped source (`s_grid`) and
    I_t (`c_grid`) sampled there (the background's noise in step 3 reads them again), and the
    colour fits T_src (I_{k-1} -> I_t) and T_prev (I_{t-1} -> I_t)."""

    changed_now: np.ndarray
    quiet_now: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    nbr: dict
    s_grid: dict
    c_grid: dict
    fit_src: ColourFit
    fit_prev: ColourFit


@dataclass(frozen=True, eq=False)
class _Revealed:
    """Step 2's result: R, and the box B around what can be revealed with the source warped on it
    (`src`, zero elsewhere; None with B = () when nothing can be)."""

    region: np.ndarray
    B: tuple
    src: np.ndarray | None


@dataclass(frozen=True, eq=False)
class _Ring:
    """Step 3a's result: the quiet pixels (stable, away from this edit's other changes), R's
    neighbourhood out to the ring's outer edge (`near`) and to its gap (`inner`), the background
    beyond it (`bg`) and the ring of quiet pixels between (`ring`, `n_ring` pixels)."""

    quiet: np.ndarray
    near: np.ndarray
    inner: np.ndarray
    bg: np.ndarray
    ring: np.ndarray
    n_ring: int


@dataclass(frozen=True, eq=False)
class _Aligned:
    """Step 3b's result: the source on B as the ring checks see it (`src`: blur-matched, locally
    aligned), the same before that blur (`sharp`; None when not blurred or when it is `src`'s own
    crop), the blur `sig_b` (px) and the local field `flow` (None: not aligned locally)."""

    src: np.ndarray
    sharp: np.ndarray | None
    sig_b: float
    flow: LocalFlow | None


def _refused(inp: _Inputs, region: np.ndarray, checks: dict, reason: str) -> RevealResult:
    """I_t unchanged, with R (at I_t's size) and the checks so far."""
    return _refuse(inp.e_arr, reason, inp.source_id, _full(region, inp.size), checks)


def _reveal_inputs(source: Any, previous: Any, edited: Any, covered: Any, stable: Any, source_id: int | None,
                   params: RevealParams, source_alignment: Alignment | None) -> _Inputs:
    """The inputs at the analysis size. The source is warped only where it is needed (later): an
    even grid of samples (with their 3×3 neighbours) for the colour fit and the background's noise,
    and R's neighbourhood."""
    e_arr = as_array(edited.array if isinstance(edited, StoredImage) else edited)
    check_image_size(e_arr.shape, "the edited image")
    size = (e_arr.shape[1], e_arr.shape[0])
    work = reveal_working_size(size)
    big = work != size
    a_src = source_alignment if source_alignment is not None else IDENTITY
    fw = work[0] / float(size[0])
    a_src_w = a_src if not big else Alignment(a_src.dx * fw, a_src.dy * fw, a_src.scale)
    src_arr = source.array if isinstance(source, StoredImage) else np.asarray(source)
    if big or src_arr.ndim != 3 or src_arr.shape[2] != 3 or (src_arr.shape[1], src_arr.shape[0]) != tuple(work):
        src_arr = work_float(source, work) if isinstance(source, StoredImage) else as_float_rgb(src_arr, work)
    prev = as_float_rgb(previous, work)
    cur = work_float(edited, work) if isinstance(edited, StoredImage) else as_float_rgb(e_arr, work)
    shape = (work[1], work[0])
    cov = mask_at(covered, shape, "covered (turn k's change mask)")
    stab = ~cov if stable is None else mask_at(stable, shape, "stable") & ~cov
    return _Inputs(source, e_arr, size, work, a_src, a_src_w, src_arr, prev, cur, cov, stab, source_id, params,
                   big, shape, params.pixels(shape))


def _colour_match(inp: _Inputs, change: ChangeResult | None, checks: dict) -> _ColourMatch:
    """Step 1: C_t (what this edit changed, drift ignored; computed once per turn), and T_src fitted
    on an even grid of the quiet pixels (the source warped there with its 3×3 neighbours, which the
    background's noise in step 3 reads again)."""
    shape = inp.shape
    c_t = change if change is not None and change.mask.shape == shape else change_of(inp.prev, inp.cur)
    quiet_now = inp.stab & ~c_t.mask
    gy, gx = sample_grid(shape, FIT_SAMPLES)
    rows, cols = np.arange(shape[0])[gy], np.arange(shape[1])[gx]
    nbr = {(dy, dx): (np.clip(rows + dy, 0, shape[0] - 1), np.clip(cols + dx, 0, shape[1] - 1))
           for dy in (-1, 0, 1) for dx in (-1, 0, 1)}
    s_grid = {d: warp_float(inp.src_arr, inp.a_src_w, rows=r, cols=c_) for d, (r, c_) in nbr.items()}
    c_grid = {d: inp.cur[r][:, c_] for d, (r, c_) in nbr.items()}
    fit_src = fit_colour(s_grid[0, 0], c_grid[0, 0], use=quiet_now[rows][:, cols], sampled=True)
    checks.update({"colour_fit": fit_src.info(), **{f"{k}_px": v for k, v in inp.px.items()}})
    if inp.big:
        checks["working_size"] = list(inp.work)
    if c_t.stability is not None:
        checks["turn_stability"] = {"stable_fraction": round(c_t.stability.stable_fraction, 4),
                                    "rerendered": c_t.stability.rerendered}
    return _ColourMatch(c_t.mask, quiet_now, rows, cols, nbr, s_grid, c_grid, fit_src, c_t.fit)


def _revealed(inp: _Inputs, colour: _ColourMatch, whole: Any, checks: dict) -> _Revealed:
    """Step 2: R, computed on the bounding box of C_k & C_t (nothing else can be revealed); on a
    removal, also the removed object's whole region. The source is warped once on the box B around
    them, where everything below happens (R, its ring, the shift search, the seam)."""
    shape, px, cov = inp.shape, inp.px, inp.cov
    o, c = DEFAULT_PARAMS.radii(shape)
    cand = cov & colour.changed_now
    checks["covered_fraction"] = round(float(cov.mean()), 6)
    region = np.zeros(shape, bool)
    full = None
    if whole is not None:
        full = clean_mask(mask_at(whole, shape, "whole (the removed object's region)") & cov, o, c,
                          DEFAULT_PARAMS.min_area)
    anchor = cand | full if full is not None else cand
    B, src = (), None
    if anchor.any():
        pad = max(2 * (o + c) + inp.params.compare_size + 2, px["ring"] + px["max_shift"] + 3,
                  _seam_reach(px["feather"]) + 2,
                  MOTION_REACH * max(MOTION_BLOCK_MIN, round(min(shape) * MOTION_BLOCK_FRAC)) + 2)
        B = _box(anchor, pad)
        src = np.zeros(shape + (3,), np.float32)   # the warped source, filled on B only
        src[B[0]:B[1], B[2]:B[3]] = warp_float(inp.src_arr, inp.a_src_w, box=B)
    if cand.any():
        region = _agrees_with_source(inp, colour, src, cand, (o, c))
    if full is not None:
        # A removal: the object's whole region comes back, the parts the editor left of it too.
        left = full & ~region
        checks["editor_left_fraction"] = round(float(left.sum()) / max(1, int(full.sum())), 4)
        checks["editor_left_px"] = int(left.sum())
        region = region | full
    return _Revealed(region, B, src)


def _agrees_with_source(inp: _Inputs, colour: _ColourMatch, src: np.ndarray, cand: np.ndarray,
                        radii: tuple[int, int]) -> np.ndarray:
    """R within C_k & C_t (`cand`): where I_t agrees better with I_{k-1} (`src`, warped) than with
    I_{t-1}, cleaned up like a change mask (`radii` o, c), small enclosed holes filled. "Agrees better"
    compares local mean colours (compare_size² windows): a re-invented region has the right colours but
    not the texture, and the mean of |texture differences| would call it closer to whatever occluder is
    nearest in colour."""
    params, cur = inp.params, inp.cur
    o, c = radii
    by = _box(cand, 2 * (o + c) + params.compare_size + 2)
    sl = (slice(by[0], by[1]), slice(by[2], by[3]))
    cs = (params.compare_size, params.compare_size, 0)      # (the mean of a difference is the difference of the means)
    d_src = _rms(ndimage.uniform_filter(cur[sl] - colour.fit_src.apply(src[sl]), cs, mode="nearest"))
    d_occ = _rms(ndimage.uniform_filter(cur[sl] - colour.fit_prev.apply(inp.prev[sl]), cs, mode="nearest"))
    region = np.zeros(inp.shape, bool)
    region[sl] = _fill_small_holes(clean_mask(cand[sl] & (d_src < params.agree_ratio * d_occ), o, c,
                                              DEFAULT_PARAMS.min_area * cand.size / float(cand[sl].size)),
                                   cand[sl], params.hole_frac)
    return region


def _ring(inp: _Inputs, colour: _ColourMatch, region: np.ndarray, checks: dict) -> tuple[_Ring, str]:
    """Step 3a: the ring of stable pixels around R and the background beyond it, and the reason to
    refuse when either is too small to check ('' = ok). This edit's other changes (a replacing
    object, the occluder's new place) and their soft rims are no evidence about the geometry: they
    are left out with a margin of OTHER_CHANGE_MARGIN px."""
    quiet = inp.stab & ~dilate(colour.changed_now & ~region, OTHER_CHANGE_MARGIN)
    near = _dilate_near(region, inp.px["ring"])
    inner = _dilate_near(region, inp.px["gap"])
    bg = quiet & ~near
    ring = near & ~inner & quiet
    n_ring = int(ring.sum())
    checks["ring_pixels"] = n_ring
    why = ""
    if n_ring < inp.params.min_ring or bg.sum() < inp.params.min_ring:
        why = (f"geometry not checkable: only {n_ring} unchanged pixels around the revealed "
               "region (later turns changed its surroundings)")
    return _Ring(quiet, near, inner, bg, ring, n_ring), why


def _on_box(plane: np.ndarray, box: tuple, pixels: np.ndarray) -> np.ndarray:
    """A copy of `plane` with its crop `box` (y0, y1, x0, x1) replaced by `pixels`."""
    out = plane.copy()
    out[box[0]:box[1], box[2]:box[3]] = pixels
    return out


def _sharpness_and_flow(inp: _Inputs, colour: _ColourMatch, found: _Revealed, ring: _Ring,
                        checks: dict) -> tuple[_Aligned | None, str]:
    """Step 3b. Sharpness match: an editor that blurs on every call leaves I_t softer than I_{k-1};
    for the ring checks the source is blurred (within the box B) by the sigma that best explains I_t
    on the ring, so they compare like with like. The paste stays sharp: it is I_{k-1}'s own pixels
    (the restoration the paper's S_restore asks for) unless I_t is much softer (paste_blur_px).
    Local alignment: a residual warp around R after the global one (a face warped by a pixel) is
    measured as a dense field and the source is warped by it (from I_{k-1} itself: one resampling);
    a motion no consistent field within FLOW_MAX_PX explains is refused (None, the reason). Every
    check below then runs on the locally aligned source (none of them is loosened)."""
    B, src = found.B, found.src
    sig_b = _match_blur(src, inp.cur, colour.fit_src, ring.ring, B)
    checks["source_blur_px"] = sig_b
    sharp = None
    if sig_b > 0:
        sharp = src[B[0]:B[1], B[2]:B[3]].copy()
        src = _on_box(src, B, ndimage.gaussian_filter(sharp, (sig_b, sig_b, 0), mode="nearest"))
    flow, why = align_locally(src, inp.cur, colour.fit_src, found.region, ring.quiet, B, checks)
    if why:
        return None, why
    if flow is not None:
        moved = warp_by_flow(inp.src_arr, flow, inp.a_src_w, box=B)
        sharp = moved if sig_b > 0 else None
        src = _on_box(src, B, ndimage.gaussian_filter(moved, (sig_b, sig_b, 0), mode="nearest")
                      if sig_b > 0 else moved)
    checks["local_flow_applied"] = flow is not None
    return _Aligned(src, sharp, sig_b, flow), ""


def _ring_exceedance(inp: _Inputs, colour: _ColourMatch, ring: _Ring, src: np.ndarray, checks: dict) -> str:
    """Step 3c: the ring's residual exceeds the background's noise level tau no more often than the
    background's texture predicts (the reason to refuse, '' = ok). The residual (3×3 mean) is needed
    on R's neighbourhood (the ring) and on an even sample of the background only."""
    params, cur, fit_src = inp.params, inp.cur, colour.fit_src
    nb = _box(ring.near, 2)
    sl = (slice(nb[0], nb[1]), slice(nb[2], nb[3]))
    r3_ring = smooth(residual(src[sl], cur[sl], fit_src), 3)[ring.ring[sl]]
    bgs = ring.bg[colour.rows][:, colour.cols]
    if bgs.sum() < params.min_ring:
        return "geometry not checkable: too little unchanged background to measure the noise"
    r3_bg = sum(residual(colour.s_grid[d], colour.c_grid[d], fit_src) for d in colour.nbr)[bgs] / 9.0
    med, sig = robust_scale(r3_bg)
    tau = max(med + params.k * sig, DEFAULT_PARAMS.min_delta)
    g_grid = {d: grey_of(v) for d, v in colour.s_grid.items()}
    grad_bg = _sobel_grid(g_grid)[bgs]
    p_bg = _expected_exceedance(src, (grad_bg, r3_bg), tau, ring.bg, ring.ring)
    p_ring = float((r3_ring > tau).mean())
    limit = p_bg + RING_SIGMAS * np.sqrt(max(p_bg * (1 - p_bg), 1e-12) / max(1.0, ring.n_ring / 9.0)) \
        + params.allowance
    checks.update({"tau": round(tau, 6), "ring_exceed": round(p_ring, 4), "background_exceed": round(p_bg, 4),
                   "ring_limit": round(float(limit), 4)})
    if p_ring > limit:
        return (f"geometry moved: {p_ring:.0%} of the pixels around the revealed region differ "
                f"from I_{{k-1}} beyond the noise (limit {limit:.0%})")
    return ""


def _ring_shift(inp: _Inputs, colour: _ColourMatch, region: np.ndarray, ring: _Ring, src: np.ndarray,
                checks: dict) -> str:
    """Step 3d: a local shift around R (the alignment undid the frame's): the ring's best integer
    shift, this edit's changes included (a scene that moved is all "changed": leaving C_t out, as
    the exceedance test must for new objects, would hide it), on R's neighbourhood only; then the
    absolute checks and the block-wise local motion. The reason to refuse ('' = ok)."""
    cur = inp.cur
    wide_ring = ring.near & ~ring.inner & inp.stab
    mshift = inp.px["max_shift"]
    y0, y1, x0, x1 = _box(ring.near, mshift)
    shift, err_best, err_zero = _best_shift(src[y0:y1, x0:x1].mean(axis=2), cur[y0:y1, x0:x1].mean(axis=2),
                                            wide_ring[y0:y1, x0:x1], mshift)
    checks.update({"scene_shift": [-int(shift[1]), -int(shift[0])],
                   "ring_residual_zero": round(err_zero, 6), "ring_residual_best": round(err_best, 6)})
    if shift != (0, 0) and err_zero > inp.params.shift_ratio * err_best:
        return (f"geometry moved: around the revealed region the scene moved by dx={-shift[1]}, "
                f"dy={-shift[0]} px after alignment")
    return absolute_check(src, cur, colour.fit_src, ring.ring, checks) or local_motion(
        src, cur, colour.fit_src, region, ring.quiet, checks)


def _paste_step(inp: _Inputs, colour: _ColourMatch, found: _Revealed, aligned: _Aligned,
                checks: dict) -> RevealResult:
    """Step 4: I_{k-1}'s pixels (sharp, Keys-cubic warped; blurred only when I_t is much softer),
    colour-fitted, seam-corrected, multi-band blended into I_t across quiet pixels just outside R
    (at I_t's size from the analysis size when it is big: _paste_full)."""
    params, px, region, size, sig_b = inp.params, inp.px, found.region, inp.size, aligned.sig_b
    blurred = sig_b >= params.paste_blur_px
    checks["paste_blur_px"] = sig_b if blurred else 0.0
    levels = levels_for(px["blend"], inp.shape)
    core = region | (_dilate_near(region, px["feather"]) & colour.quiet_now)
    keep_t = ~core & ~colour.quiet_now      # I_t's own pixels the paste must not reach (other changes, unstable)
    seam = _seam(inp, colour, found, aligned, blurred, checks) if params.seam_colour else None
    if inp.big:
        f = size[0] / float(inp.work[0])
        top = PasteSource(inp.source, inp.a_src, colour.fit_src, sig_b * f if blurred else 0.0,
                          aligned.flow.scaled(f, (size[1], size[0])) if aligned.flow is not None else None)
        region_f, weight_f, out, levels = _paste_full(inp.e_arr, top, region, core, keep_t, seam, size, params)
    else:
        region_f = region
        out, weight_f = _paste_at_work_size(inp, colour.fit_src, region, aligned, blurred,
                                            (levels, core, keep_t), seam)
    checks["blend"] = {"method": BLEND_METHOD, "levels": int(levels), "plateau_px": px["feather"],
                       "seam_colour": seam is not None}
    # 5. Verification (respec/pixels/verify): the result, read against I_t and I_{k-1}; a failure refuses
    verdict = verify(reveal_composite_of(inp, colour.fit_src, aligned, out, weight_f))
    checks["verify"] = verdict.record()
    if not verdict.passed:
        return _refuse(inp.e_arr, verdict.reason(), inp.source_id, region_f, checks)
    if verdict.mended:
        out = np.array(inp.e_arr, copy=True)
        out[..., :3] = verdict.image
        weight_f = (weight_f * (verdict.written > 0)).astype(np.float32)
        region_f = region_f & (weight_f > 0)
    out.flags.writeable = False
    mended = f"; {verdict.findings[0].check} mended" if verdict.mended else ""
    return RevealResult(out, True, f"pasted I_{inp.source_id if inp.source_id is not None else 'k-1'} into "
                                   f"{region.mean():.1%} of the image; the geometry held{mended}",
                        inp.source_id, region_f, weight_f, checks)


def reveal_composite_of(inp: _Inputs, fit_src: ColourFit, aligned: _Aligned, out: np.ndarray,
                        weight: np.ndarray) -> Composite:
    """The paste as the verification reads it (I_t's frame and size): kept = the output, fallback =
    I_t, old = I_{k-1} warped (bilinear, with the local field when the analysis aligned locally) and
    colour-fitted into I_t's colours on the box around the pasted pixels grown by VERIFY_REACH_FRAC
    (I_t elsewhere: no content differs there), old_valid = where I_{k-1}'s warped frame has pixels."""
    w, h = inp.size
    e3 = _rgb3(inp.e_arr)
    reach = max(VERIFY_MIN_REACH_PX, round(VERIFY_REACH_FRAC * min(h, w)))
    box = _box(weight > 0, reach)
    y0, y1, x0, x1 = box
    src = as_array(inp.source.array if isinstance(inp.source, StoredImage) else inp.source)
    src = _rgb3(src) if (src.shape[1], src.shape[0]) == tuple(inp.size) else \
        np.clip(np.round(np.asarray(as_float_rgb(src, inp.size)) * 255.0), 0, 255).astype(np.uint8)
    if aligned.flow is not None:
        flow = aligned.flow if not inp.big else aligned.flow.scaled(w / float(inp.work[0]), (h, w))
        top = warp_by_flow(src, flow, inp.a_src, box=box)
    else:
        top = warp_float(src, inp.a_src, box=box)
    old = e3.copy()
    old[y0:y1, x0:x1] = np.clip(np.round(fit_src.apply(top) * 255.0), 0, 255).astype(np.uint8)
    valid = None if inp.a_src.is_identity else support(inp.a_src, (h, w))
    return Composite("reveal", _rgb3(out), e3, old, np.asarray(weight, np.float32), valid)


def _rgb3(a: np.ndarray) -> np.ndarray:
    """uint8 H×W×3 of an H×W×C picture (grey repeated, alpha dropped)."""
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[..., None]
    return np.ascontiguousarray(a[..., :3] if a.shape[2] >= 3 else np.repeat(a[..., :1], 3, axis=2))


def _seam(inp: _Inputs, colour: _ColourMatch, found: _Revealed, aligned: _Aligned, blurred: bool,
          checks: dict) -> Any:
    """The seam colour correction on the box around R (seam_correction's), or None when it is
    within the drift's own noise (below SEAM_MIN: R keeps I_{k-1}'s colour-fitted pixels exactly)."""
    B, src, sharp, px = found.B, aligned.src, aligned.sharp, inp.px
    py0, py1, px0, px1 = _box(found.region, _seam_reach(px["feather"]) + 1)    # seam_correction's box around R
    pasted_w = np.zeros_like(inp.cur)
    pasted_w[py0:py1, px0:px1] = np.clip(colour.fit_src.apply(src[py0:py1, px0:px1] if blurred or sharp is None
                                                              else sharp[py0 - B[0]:py1 - B[0], px0 - B[2]:px1 - B[2]]),
                                         0.0, 1.0)
    seam = seam_correction(pasted_w, inp.cur, found.region, colour.quiet_now, px["feather"], checks)
    if seam is not None and checks.get("seam_correction_max", 0.0) < SEAM_MIN:
        return None
    return seam


def _seam_reach(feather: int) -> int:
    """How far (px) seam_correction reads around R for a plateau of `feather` px: its box is four
    band widths, its band two plateaus wide (at least 2 px)."""
    return 4 * max(2, 2 * feather)


def _paste_at_work_size(inp: _Inputs, fit_src: ColourFit, region: np.ndarray, aligned: _Aligned, blurred: bool,
                        blend: tuple[int, np.ndarray, np.ndarray], seam: Any) -> tuple[np.ndarray, np.ndarray]:
    """The paste when I_t is analysed at its own size: the source warped on the blend's box P (which
    reaches beyond B, where it was warped for the checks), colour-fitted, the seam added. blend: the
    blend's (levels, core, pixels to keep)."""
    src_arr, a_src_w, flow, sig_b, cur = inp.src_arr, inp.a_src_w, aligned.flow, aligned.sig_b, inp.cur
    levels, core, keep_t = blend
    P = _box(core, blend_reach(levels))
    if blurred:
        top = (warp_by_flow(src_arr, flow, a_src_w, box=P) if flow is not None
               else warp_float(src_arr, a_src_w, box=P))
        top = ndimage.gaussian_filter(top, (sig_b, sig_b, 0), mode="nearest")
    else:
        top = (warp_by_flow(src_arr, flow, a_src_w, box=P, order=3) if flow is not None
               else warp_float(src_arr, a_src_w, box=P, order=3))
    top = fit_src.apply(top)
    if seam is not None:
        _add_box(top, seam, P)
    return _paste(inp.e_arr, cur[P[0]:P[1], P[2]:P[3]], top, region[P[0]:P[1], P[2]:P[3]],
                  core[P[0]:P[1], P[2]:P[3]], keep_t[P[0]:P[1], P[2]:P[3]], levels, P)


def reveal_working_size(size: tuple[int, int]) -> tuple[int, int]:
    """(w, h) a restoration turn of `size` is analysed at (its C_t, R and every check): at most
    REVEAL_WORK_PIXELS (and at most the change masks' working resolution); the paste is made at
    full size on its box."""
    return working_size(size, min(REVEAL_WORK_PIXELS, work_images.WORK_PIXELS))


def _full(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A bool mask of the analysis size at I_t's size (nearest)."""
    if (mask.shape[1], mask.shape[0]) == tuple(size):
        return mask
    return np.asarray(Image.fromarray(mask).resize(tuple(size), Image.NEAREST), bool)


def blend_reach(levels: int) -> int:
    """How far (px) a multi-band blend of `levels` levels reaches beyond its weight's edge: the
    box it is computed on is grown by this (beyond it the base is kept: measured, the blend
    changes the base by less than 0.25/255 at that distance, and a box that size differs from the
    whole image's blend by less than 0.5/255, under the output's rounding)."""
    return BLEND_REACH * 2 ** int(levels) + 2


def _add_box(top: np.ndarray, seam, box: tuple[int, int, int, int]) -> None:
    """Add seam_correction's correction (its own box, same pixel grid) to `top` (the crop `box`)."""
    corr, (sy0, sy1, sx0, sx1) = seam
    y0, y1, x0, x1 = box
    ay0, ay1, ax0, ax1 = max(y0, sy0), min(y1, sy1), max(x0, sx0), min(x1, sx1)
    if ay0 < ay1 and ax0 < ax1:
        top[ay0 - y0:ay1 - y0, ax0 - x0:ax1 - x0] += corr[ay0 - sy0:ay1 - sy0, ax0 - sx0:ax1 - sx0]


def _paste(e_arr: np.ndarray, cur: np.ndarray, top: np.ndarray, region: np.ndarray, core: np.ndarray,
           keep_t: np.ndarray, levels: int, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The paste on the crop `box` of I_t (every array is that crop): inside R the base is the
    paste itself, so the blend only spreads what differs on the quiet pixels outside R (a drift
    the colour fit left) and imports nothing of the editor's re-invented pixels into R; the
    multi-band blend switches fine detail at the core's edge (R plus a plateau of quiet pixels)
    and coarse colour over ~2^levels px; I_t's pixels the paste must not reach (`keep_t`) are
    kept exactly. (I_t with the paste as uint8, the weight of the pasted pixels at I_t's size:
    1 on the core, then the coarsest band's share, 0 on keep_t.)"""
    top = np.clip(top, 0.0, 1.0)
    base = cur.copy()
    base[region] = top[region]
    rgb = multiband_blend(base, top, core.astype(np.float32), levels)
    rgb[region] = top[region]      # R is I_{k-1}'s (colour-fitted) pixels exactly: the coarse bands' pull is outside
    rgb[keep_t] = cur[keep_t]
    out = e_arr.copy()
    y0, y1, x0, x1 = box
    out_rgb = np.clip(np.round(rgb * 255.0), 0, 255).astype(np.uint8)
    if out.shape[2] >= 3:
        out[y0:y1, x0:x1, :3] = out_rgb
    else:   # a grey I_t stays grey
        out[y0:y1, x0:x1, 0] = np.round(out_rgb.mean(axis=2)).astype(np.uint8)
    wb, q = _gauss_small(core.astype(np.float32), 2.0 ** max(0, levels - 1))
    wb = _up(wb, core.shape)
    wb[core] = 1.0
    wb[keep_t] = 0.0
    weight = np.zeros(e_arr.shape[:2], np.float32)
    weight[y0:y1, x0:x1] = np.where(wb > PASTE_WEIGHT_EPS, wb, 0.0)
    return out, weight


def _up_box(x: np.ndarray, full: tuple[int, int], box: tuple[int, int, int, int], resample=Image.BILINEAR) -> np.ndarray:
    """The crop `box` (y0, y1, x0, x1, full-size pixels) of `x` (a work-size H×W plane) upsampled
    to `full` (h, w): what resizing the whole plane and cropping would give, at the crop's cost."""
    h, w = full
    fy, fx = x.shape[0] / float(h), x.shape[1] / float(w)
    y0, y1, x0, x1 = box
    im = Image.fromarray(x)
    return np.array(im.resize((x1 - x0, y1 - y0), resample, box=(x0 * fx, y0 * fy, x1 * fx, y1 * fy)))


@dataclass(frozen=True, eq=False)
class PasteSource:
    """What a full-size paste is made of (_paste_full): I_{k-1} as given, its alignment into I_t's
    frame at I_t's size, the colour fit T_src, the blur of a soft paste (px at I_t's size; 0: sharp)
    and the local field at I_t's size when the analysis aligned locally."""

    source: Any
    alignment: Alignment
    fit: ColourFit
    blur_px: float = 0.0
    flow: LocalFlow | None = None


def _paste_full(e_arr: np.ndarray, paste: PasteSource, region: np.ndarray, core: np.ndarray, keep_t: np.ndarray,
                seam: Any, size: tuple[int, int],
                params: RevealParams) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The paste at I_t's full size from an analysis at the working size: R, the core and the
    pixels to keep (nearest) and the seam correction (bilinear) upsampled on the pasted box only,
    and only that box of the source read, warped (Keys cubic), blurred by `paste.blur_px` when the
    analysis chose a soft paste, and blended at full resolution (levels for the full size); with
    `paste.flow` when the analysis aligned locally.
    (R, weight, output image, levels), the first two at I_t's size."""
    source, a_src, fit, blur_px, flow = paste.source, paste.alignment, paste.fit, paste.blur_px, paste.flow
    w, h = size
    levels = levels_for(params.pixels((h, w))["blend"], (h, w))
    fy, fx = h / float(core.shape[0]), w / float(core.shape[1])
    reach = blend_reach(levels)
    wy0, wy1, wx0, wx1 = _box(core, 1)
    y0, y1 = max(0, int(np.floor(wy0 * fy)) - reach), min(h, int(np.ceil(wy1 * fy)) + reach)
    x0, x1 = max(0, int(np.floor(wx0 * fx)) - reach), min(w, int(np.ceil(wx1 * fx)) + reach)
    box = (y0, y1, x0, x1)
    reg = _up_box(region.astype(np.uint8) * 255, (h, w), box, Image.NEAREST) >= 128
    cor = _up_box(core.astype(np.uint8) * 255, (h, w), box, Image.NEAREST) >= 128
    keep = _up_box(keep_t.astype(np.uint8) * 255, (h, w), box, Image.NEAREST) >= 128
    src_arr = as_array(source.array if isinstance(source, StoredImage) else source)
    if (src_arr.shape[1], src_arr.shape[0]) != tuple(size):
        src_arr = np.asarray(as_float_rgb(src_arr, size))
    rgb = src_arr[:, :, :3] if src_arr.ndim == 3 else src_arr
    top = warp_by_flow(rgb, flow, a_src, box=box, order=3) if flow is not None else warp_float(rgb, a_src, box=box, order=3)
    if top.ndim == 2:
        top = np.repeat(top[:, :, None], 3, axis=2)
    if blur_px > 0:
        top = ndimage.gaussian_filter(top, (blur_px, blur_px, 0), mode="nearest")
    top = fit.apply(top)
    if seam is not None:
        corr, (sy0, sy1, sx0, sx1) = seam
        plane = np.zeros(core.shape, np.float32)
        up = []
        for c in range(3):
            plane[sy0:sy1, sx0:sx1] = corr[..., c]
            up.append(_up_box(plane, (h, w), box))
        top = top + np.stack(up, axis=2)
    cur = as_float_rgb(e_arr[y0:y1, x0:x1])
    out, weight_f = _paste(e_arr, cur, top, reg, cor, keep, levels, box)
    region_f = np.zeros((h, w), bool)
    region_f[y0:y1, x0:x1] = reg
    return region_f, weight_f, out, levels


def reveal_for(history: History, edited: Any, covering_turn: int,
               params: RevealParams = DEFAULT_REVEAL, complete: bool = False) -> RevealResult:
    """Reveal Composite for the turn about to be appended to `history`: turn `covering_turn` = k
    covered the content, I_{k-1} is the source, the history's provenance gives C_k and the pixels
    no turn since k-1 changed. complete: the request removes what turn k added, so the part of
    C_k no later turn changed is pasted whole (`reveal_composite`'s `whole`), the parts the editor
    left too. The turn's alignment and its change record C_t are computed once here and cached,
    so History Append / run_turn reuse them for the output. In four steps:

        1. turn k and the images; an earlier turn since k that re-rendered the scene refuses
        2. C_k, the stable pixels (and on a removal the whole region) in I_t's frame (_masks_now)
        3. C_t once, at the analysis size, kept for the append (_turn_change)
        4. reveal_composite; a re-render in this edit, or over turns k..t together, refuses (_rerender_refusal)
    """
    t = history.next_turn
    k = image_id_arg(covering_turn, "reveal_for's covering_turn")
    if not 1 <= k < t:
        raise InputError(f"the covering turn must be one of 1..{t - 1} (an earlier edit), got {k}")
    prov = provenance_of(history)
    size = history_size(history)
    edited_img = edited if isinstance(edited, StoredImage) else StoredImage.of(
        to_uint8(finite_pixels(edited, "the edited image")) if np.asarray(edited).dtype.kind == "f" else edited)
    check_image_size(edited_img.array.shape, "the edited image")
    prev_img = history.current.image
    for j in range(k, t):
        if prov.rerendered(j):
            return _refuse(edited_img.array, f"the editor re-rendered the scene at turn {j} (stable fraction "
                           f"{prov.stable_fraction(j):.2f}): I_{k - 1}'s pixels no longer line up",
                           k - 1, np.zeros(edited_img.array.shape[:2], bool), {"rerendered_turn": j})
    same = edited_img.size == tuple(size)
    al_t = alignment_for(prev_img, edited_img, size) if same else IDENTITY   # another size: unaligned
    untrusted = [(j, a.untrusted_reason) for j, a in [(j, prov.alignment(j - 1, j)) for j in range(k, t)] + [(t, al_t)]
                 if a.untrusted_reason]
    if untrusted:       # I_{k-1}'s pixels cannot be placed in I_t's frame (alignment.py, step 6)
        j, why = untrusted[0]
        return _refuse(edited_img.array, f"the alignment of turn {j} is not trusted: {why}", k - 1,
                       np.zeros(edited_img.array.shape[:2], bool), {"untrusted_turn": j})
    a_src = prov.alignment(k - 1, t - 1).compose(al_t)
    covered, stable, whole = _masks_now(prov, k, t, al_t, size, complete)
    if same:
        prev, change, change_tm = _turn_change(prev_img, edited_img, al_t, size)
    else:
        prev, change, change_tm = as_float_rgb(prev_img, size), None, None
    res = reveal_composite(history.image(k - 1), prev, edited_img, covered, stable=stable,
                           source_id=k - 1, params=params, change=change, source_alignment=a_src, whole=whole)
    res = _rerender_refusal(res, prov, k, t, edited_img, {"alignment": a_src.record(), "turn_alignment": al_t.record()})
    if res.applied and same:
        out_img = StoredImage(res.image)
        remember_alignment(prev_img, out_img, size, al_t)
        remember_change(prev_img, out_img, size, change_tm)
    return res


def _masks_now(prov: Any, k: int, t: int, al_t: Alignment, size: tuple[int, int],
               complete: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(C_k, the pixels no turn since k-1 changed, on a removal (`complete`) the part of C_k no turn
    since k changed, else None), carried from I_{t-1}'s frame into I_t's by the turn's alignment."""
    w, h = size
    covered = prov.in_frame(prov.changes[k], k, t - 1)
    stable = prov.unchanged_since(k - 1)
    whole = covered & prov.unchanged_since(k) if complete else None
    if not al_t.is_identity:
        covered = warp(covered, al_t, order=0)
        stable = warp(stable, al_t, order=0) & support(al_t, (h, w))
        whole = warp(whole, al_t, order=0) & support(al_t, (h, w)) if whole is not None else None
    return covered, stable, whole


def _turn_change(prev_img: StoredImage, edited_img: StoredImage, al_t: Alignment,
                 size: tuple[int, int]) -> tuple[np.ndarray, ChangeResult, TurnMask]:
    """C_t once: I_{t-1} warped into I_t's frame at the analysis size (returned for the checks),
    the change record there, and at full size as a TurnMask, remembered for the append."""
    w, _ = size
    work = reveal_working_size(size)
    f = work[0] / float(w)
    al_w = al_t if work == tuple(size) else Alignment(al_t.dx * f, al_t.dy * f, al_t.scale, al_t.residual_px * f,
                                                      al_t.method, al_t.inliers, work)
    pa = prev_img.array
    if work == tuple(size) and pa.ndim == 3 and pa.shape[2] == 3:
        prev = warp_float(pa, al_w)       # straight from uint8: no float copy before the warp
    else:
        prev = warp(work_float(prev_img, work), al_w)
    change = change_of(prev, work_float(edited_img, work), DEFAULT_PARAMS, al_w, warped=True)
    change_tm = full_size_result(change, size).turn_mask()
    remember_change(prev_img, edited_img, size, change_tm)
    return prev, change, change_tm


def _rerender_refusal(res: RevealResult, prov: Any, k: int, t: int, edited_img: StoredImage,
                      extra: dict) -> RevealResult:
    """The result with `extra` in its checks, refused when this edit re-rendered the scene (the
    re-render is the reason even when a ring check refused too: it says why) or when turns k..t
    together kept less than CUMULATIVE_STABLE of it: re-renders accumulate (each turn alone may look
    mild; what all of them kept is about the product of their stable fractions)."""
    c_now = res.checks.get("turn_stability")
    cumulative = float(np.prod([prov.stable_fraction(j) for j in range(k, t)]))
    if c_now is not None:
        cumulative *= float(c_now.get("stable_fraction", 1.0))
    extra = {**extra, "cumulative_stable_fraction": round(cumulative, 4)}
    if c_now is not None and c_now.get("rerendered"):
        res = _refuse(edited_img.array, f"the editor re-rendered the scene in this edit (stable fraction "
                      f"{c_now['stable_fraction']:.2f})", k - 1, res.region, res.checks)
    elif cumulative < CUMULATIVE_STABLE:
        res = _refuse(edited_img.array, f"the editor re-rendered the scene over turns {k}..{t}: together they kept "
                      f"{cumulative:.0%} of it (limit {CUMULATIVE_STABLE:.0%})", k - 1, res.region, res.checks)
    return RevealResult(res.image, res.applied, res.reason, res.source_id, res.region, res.source_weight,
                        {**res.checks, **extra})


@dataclass(frozen=True, eq=False)
class ExactPatch:
    """In a guarded chain, what Reveal Composite's paste is made of once the Drift Guard has put
    the picture back into I_{t-1}'s frame: I_{k-1}'s own pixels, aligned into that frame (no colour
    fit, no seam correction: around them the guard keeps I_{t-1}'s pixels, which are I_{k-1}'s where
    nothing changed since), on `box` (y0, y1, x0, x1) of I_{t-1}'s frame; `weight` 1 on the pasted
    core (R and its plateau), the paste's seam weight around it (the seam band)."""

    box: tuple[int, int, int, int]
    pixels: np.ndarray
    weight: np.ndarray
    source_id: int
    alignment: Alignment
    shape: tuple[int, int]        # (H, W) of I_{t-1}'s frame it was made for

    def apply(self, image: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """`image` (uint8 H×W×C in I_{t-1}'s frame: the guard's output) with the patch: exactly its
        pixels where the weight is 1, blended by the weight on the seam band; only where `allowed`
        (bool H×W: the pixels the guard kept the edit in; None: everywhere). A new array (a copy of
        `image` when it is not of the frame's size: nothing to line up with)."""
        out = np.array(image, copy=True)
        if out.shape[:2] != tuple(self.shape):
            return out
        y0, y1, x0, x1 = self.box
        w = self.weight if allowed is None else np.where(allowed[y0:y1, x0:x1], self.weight, 0.0)
        view = out[y0:y1, x0:x1, :3].astype(np.float32)
        mixed = w[..., None] * self.pixels[..., :3].astype(np.float32) + (1.0 - w[..., None]) * view
        core = w >= 1.0
        mixed[core] = self.pixels[..., :3][core]
        out[y0:y1, x0:x1, :3] = np.clip(np.round(mixed), 0, 255).astype(np.uint8)
        return out

    def record(self) -> dict:
        """JSON-able: the source, the box, the core's and the seam band's pixel counts, the alignment."""
        return {"source_id": self.source_id, "box": [int(v) for v in self.box],
                "core_px": int((self.weight >= 1.0).sum()), "seam_px": int(((self.weight > 0) & (self.weight < 1)).sum()),
                "alignment": self.alignment.record()}


def exact_patch(history: History, weight: Any, info: dict) -> ExactPatch | None:
    """The ExactPatch of an applied Reveal Composite of the turn about to be appended to `history`:
    its `reveal_source` weights (I_t's frame; a TurnMask or float H×W) and record `info` (source_id,
    turn_alignment). None when it pasted nothing or I_t has another size than the history."""
    w_t = weight.weights if isinstance(weight, TurnMask) else np.asarray(weight, np.float32)
    size = history_size(history)
    if not isinstance(info, dict) or info.get("source_id") is None or (w_t.shape[1], w_t.shape[0]) != tuple(size) \
            or history.current.image.size != tuple(size) or not (w_t > 0).any():
        return None
    source_id = int(info["source_id"])
    src = history.image(source_id).array
    if src.ndim != 3 or src.shape[2] < 3:
        return None
    back = Alignment.from_record(info.get("turn_alignment")).inverse()
    core = w_t >= 1.0 - PASTE_WEIGHT_EPS
    if not back.is_identity:    # into I_{t-1}'s frame, where the guard's output is
        w_t, core = warp(w_t, back), warp(core, back, order=0)
    w = np.where(core, 1.0, np.clip(w_t, 0.0, 1.0)).astype(np.float32)
    box = _box(w > PASTE_WEIGHT_EPS, 0)
    y0, y1, x0, x1 = box
    a = provenance_of(history).alignment(source_id, history.next_turn - 1)
    if a.is_identity:
        pixels = src[y0:y1, x0:x1, :3].copy()
    else:
        pixels = np.clip(np.round(warp_float(src[:, :, :3], a, box=box, order=3) * 255.0), 0, 255).astype(np.uint8)
    return ExactPatch(box, pixels, w[y0:y1, x0:x1], source_id, a, (w.shape[0], w.shape[1]))


def reveal_masks(result: RevealResult) -> dict:
    """{REVEAL_SOURCE: mask} to append with the turn when something was pasted, else {}."""
    tm = result.turn_mask()
    return {REVEAL_SOURCE: tm} if tm is not None else {}


