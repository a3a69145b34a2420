"""Exact reveal (Reveal Composite): put the hidden content back pixel for pixel (beyond the paper).

On a restoration turn t the editor returns I_t. Turn k (its change mask C_k) covered the content
that is now being revealed, and I_{k-1}, the latest image before it, still shows that content.
Where the scene's geometry has not moved, I_{k-1}'s own pixels are a better answer than anything
an editor re-invents. `reveal_composite` does this in four steps:

1. **Colour match.** Two robust per-channel colour fits (respec/provenance.py): T_src maps I_{k-1}
   onto I_t, fitted on the pixels no turn from k to t changed (`stable`) outside C_k and C_t;
   T_prev maps I_{t-1} onto I_t on the whole image. C_t is the change mask of I_{t-1} -> I_t.
2. **Revealed region R.** Pixels covered by turn k (C_k) that I_t no longer shows the occluder
   in: I_t differs from I_{t-1} there (C_t) and agrees better with I_{k-1} than with I_{t-1}
   (residuals |I_t - T_src(I_{k-1})| < |I_t - T_prev(I_{t-1})|, both averaged over
   `compare_size`² pixels so that re-invented texture is compared by its colour), cleaned up
   like a change mask.
3. **Geometry check.** A ring around R (from `gap` px out, where an occluder's blurred rim has
   faded, to `gap` + `ring` px), on pixels no turn since k-1 changed (and 2 px away from this
   edit's other changes): if the scene did not move, I_t and T_src(I_{k-1})
   differ there only by the editor's noise and blur. That is measured on the rest of the stable
   image: the residual (3×3 mean, as for change masks) exceeds τ = median + K · 1.4826 · MAD
   (K = 4, at least `min_delta`) on some share of it; an editor's blur leaves more residual on
   sharp texture, so the expected share p for the ring is the background's share per texture
   decile (gradient magnitude of I_{k-1}), averaged over the ring's pixels by their decile.
   Neighbouring residuals are correlated by the 3×3 mean, so the ring holds about
   n_eff = n_ring / 9 independent samples, and an exceedance rate in the ring above
   p + 3 · sqrt(p (1 - p) / n_eff) + `allowance` (allowance = 0.05: an occluder's soft edge or
   shadow, a mask a pixel too tight) is not noise: the check refuses. It also refuses when the
   ring matches best at a shifted position: the ring's median residual after a colour fit, for
   integer shifts up to `max_shift` px, is lowest away from (0, 0) and `shift_ratio` (1.5) times
   lower than at (0, 0) — the scene moved by that shift; the same search then runs on the whole
   stable image (a ring on flat ground cannot see a shift the rest of the picture shows). (Noise
   alone gives ratios near 1; the editor's blur is symmetric and keeps (0, 0) best.) Too few ring pixels (< `min_ring`) also
   refuses: nothing to check against.
4. **Paste.** Inside R the composite is T_src(I_{k-1}) (I_{k-1}'s pixels in I_t's colours);
   outside, the weight falls linearly to 0 over `feather` px on stable pixels (the seam), and
   I_t is kept everywhere else. On refusal I_t is returned unchanged with the reason.

The result records which pixels came from where: `source_weight` (1 = I_{k-1}'s pixel, 0 = the
editor's; in between, a blend at the seam), stored with the turn as the `reveal_source` mask.

Where it fails (by construction): when R is wrong (an occluder whose colour matches the
background leaves C_k incomplete, so part of the revealed area is not pasted; a "replace" whose
new object happens to look more like the old background than like the occluder is pasted over),
and when the ring cannot see a shift (a textureless ring: then the scene's shift is invisible at
the seam too, but content inside R may be misplaced).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from .errors import InputError
from .history import REVEAL_SOURCE, History, StoredImage, TurnMask
from .images import as_array, to_uint8
from .alignment import IDENTITY, Alignment, residual_motion, support, warp
from .provenance import (DEFAULT_PARAMS, alignment_for, as_float_rgb, change_of, clean_mask, dilate,
                         fit_colour, history_size, provenance_of, remember_alignment, residual, robust_scale,
                         smooth)

METHOD = "reveal-composite-v2"
# Absolute checks (v2): the relative ring test compares the ring with the rest of the image, so a
# source unrelated everywhere (black, flat, another picture) passes it; these do not.
MAX_GAIN_DEV = 0.5      # the source's colour fit must have gains in [1/1.5, 1.5] ...
MAX_BIAS = 0.25         # ... and offsets within this (0..1 units)
MIN_RING_NCC = 0.5      # a textured ring must correlate at least this with the warped source
MAX_RING_RESIDUAL = 0.08   # the ring's median residual (0..1) after the colour fit
MAX_RING_MOTION = 0.5   # the ring blocks' median residual motion after alignment (px)
RING_TEXTURE = 0.02     # a ring whose grey std in I_t is below this is flat (no NCC test) ...
FLAT_SOURCE = 0.33      # ... and a source ring with less than this share of I_t's texture is flat
SHIFT_SAMPLES = 4096    # ring pixels the shift search compares (an even subsample of the ring)


@dataclass(frozen=True)
class RevealParams:
    """Settings of `reveal_composite` (fractions are of the image's shorter side)."""

    k: float = 4.0                 # noise threshold τ = median + k robust sigmas (as change masks)
    compare_size: int = 5          # averaging window for "agrees better with I_{k-1}" (px)
    agree_ratio: float = 1.0       # revealed where |I_t - I_{k-1}| < agree_ratio * |I_t - I_{t-1}|
    ring_frac: float = 0.03        # ring width around R for the geometry check
    gap_frac: float = 0.01         # ... starting this far out (at least 3 px): an occluder's blurred rim
                                   # outlives it by a few pixels and is no evidence about the geometry
    min_ring: int = 32             # fewer ring pixels than this: refuse (nothing to check)
    allowance: float = 0.05        # extra exceedance rate tolerated in the ring
    shift_frac: float = 0.02       # largest shift searched in the ring (at least 4 px, at most 12)
    shift_ratio: float = 1.5       # a shift must fit this many times better than (0, 0)
    feather_frac: float = 0.008    # seam width outside R (at least 1 px)

    def pixels(self, shape: tuple[int, int]) -> dict[str, int]:
        """Ring width, largest shift and feather width in pixels for an image of `shape`."""
        side = min(shape)
        gap = max(3, round(self.gap_frac * side))
        return {"gap": gap, "ring": gap + max(3, round(self.ring_frac * side)),
                "max_shift": int(min(12, max(4, round(self.shift_frac * side)))),
                "feather": max(1, round(self.feather_frac * side))}


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


def _bool_at(mask: Any, size: tuple[int, int], what: str) -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[:, :, 0]
    if m.ndim != 2:
        raise InputError(f"{what} must be an H×W mask, got shape {m.shape}")
    m = m >= 128 if m.dtype == np.uint8 else m.astype(bool)
    if (m.shape[1], m.shape[0]) != tuple(size):
        m = np.asarray(Image.fromarray(m).resize(tuple(size), Image.NEAREST), bool)
    return m


def _refuse(edited: np.ndarray, reason: str, source_id, region, checks) -> RevealResult:
    out = edited.copy()
    out.flags.writeable = False
    return RevealResult(out, False, reason, source_id, region, np.zeros(region.shape, np.float32), checks)


def _best_shift(a: np.ndarray, b: np.ndarray, ring: np.ndarray, max_shift: int) -> tuple[tuple[int, int], float, float]:
    """The integer shift (dy, dx) of `a` that best matches `b` on the ring, with the ring's median
    per-pixel residual at that shift and at (0, 0). At every shift a per-channel colour fit is made
    on the ring first (a fit made at the wrong alignment flattens the gains and hides the shift),
    and the median is taken so that a new object over part of the ring does not decide."""
    ys, xs = np.nonzero(ring)
    step = max(1, len(ys) // SHIFT_SAMPLES)      # an even subsample: the median needs no more
    ys, xs = ys[::step], xs[::step]
    bb = b[ys, xs].astype(np.float32)                                  # n×3
    ym = bb.mean(axis=0)
    pa = np.pad(a, ((max_shift, max_shift), (max_shift, max_shift), (0, 0)), mode="edge")
    dxs = np.arange(-max_shift, max_shift + 1)
    errs = np.empty((len(dxs), len(dxs)), np.float64)
    for i, dy in enumerate(dxs):            # one row of shifts at a time: (shifts, n, 3) arrays
        x = pa[(ys + max_shift + dy)[None, :], xs[None, :] + max_shift + dxs[:, None]]
        xc = x - x.mean(axis=1, keepdims=True)
        var = (xc ** 2).mean(axis=1, keepdims=True)
        gain = np.where(var > 1e-8, (xc * (bb - ym)).mean(axis=1, keepdims=True) / np.maximum(var, 1e-8), 1.0)
        res = np.sqrt(((xc * gain + ym - bb) ** 2).mean(axis=2))       # shifts × n
        errs[i] = np.median(res, axis=1)
    zero = float(errs[max_shift, max_shift])
    iy, ix = np.unravel_index(int(np.argmin(errs)), errs.shape)
    if errs[iy, ix] >= zero - 1e-12:        # ties keep (0, 0)
        return (0, 0), zero, zero
    return (int(dxs[iy]), int(dxs[ix])), float(errs[iy, ix]), zero


TEXTURE_BINS = 10


def _expected_exceedance(src: np.ndarray, exceeds: np.ndarray, bg: np.ndarray, ring: np.ndarray) -> float:
    """How often a ring pixel would exceed τ if the geometry held: the background's exceedance
    rate per texture decile (gradient magnitude of I_{k-1}: an editor's blur leaves more residual
    on sharp texture), averaged over the ring's pixels by their decile."""
    grey = src.mean(axis=2)
    g = np.hypot(ndimage.sobel(grey, 0), ndimage.sobel(grey, 1))
    edges = np.quantile(g[bg], np.linspace(0, 1, TEXTURE_BINS + 1)[1:-1])
    bins = np.digitize(g, edges)
    rate = np.array([exceeds[bg & (bins == b)].mean() if (bg & (bins == b)).any() else exceeds[bg].mean()
                     for b in range(TEXTURE_BINS)])
    return float(rate[bins[ring]].mean())


def _feather(region: np.ndarray, width: int) -> np.ndarray:
    """1 inside the region, falling linearly to 0 over `width` px outside it (float32). The
    distance transform runs on the region's bounding box only."""
    ys, xs = np.nonzero(region)
    h, w = region.shape
    m = width + 2
    y0, y1, x0, x1 = max(0, ys.min() - m), min(h, ys.max() + 1 + m), max(0, xs.min() - m), min(w, xs.max() + 1 + m)
    weight = np.zeros(region.shape, np.float32)
    dist = ndimage.distance_transform_edt(~region[y0:y1, x0:x1])
    weight[y0:y1, x0:x1] = np.clip(1.0 - dist / (width + 1.0), 0.0, 1.0)
    return weight


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
    ys, xs = np.nonzero(ring)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    gs = ndimage.gaussian_filter(fit.apply(src[y0:y1, x0:x1]).mean(axis=2), 1.0)
    gc = ndimage.gaussian_filter(cur[y0:y1, x0:x1].mean(axis=2), 1.0)
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
    # Residual motion, block by block, on the ring's bounding box (blocks mostly on the ring).
    blk = 16
    d, tex = residual_motion(gs, gc, blk)
    nby, nbx = gs.shape[0] // blk, gs.shape[1] // blk
    if nby and nbx:
        on = rm[:nby * blk, :nbx * blk].reshape(nby, blk, nbx, blk).mean(axis=(1, 3)).ravel() > 0.5
        use = tex & on
        if use.sum() >= 3:
            motion = float(np.median(d[use]))
            checks["ring_motion_px"] = round(motion, 3)
            if motion > MAX_RING_MOTION:
                return (f"the scene moved by {motion:.1f} px around the revealed region after alignment "
                        f"(limit {MAX_RING_MOTION} px)")
    return ""


def seam_match(pasted: np.ndarray, cur: np.ndarray, region: np.ndarray, quiet: np.ndarray, feather: int,
               checks: dict) -> np.ndarray:
    """Seam-aware colour matching: the difference I_t - pasted on a band of quiet pixels just
    outside R is spread smoothly over R (normalised convolution, a membrane-like correction), so a
    local colour or shading drift the global fit missed leaves no seam. Only R's bounding box is
    touched; the correction is bounded to ±0.1."""
    width = max(2, 2 * feather)
    band = dilate(region, width) & ~region & quiet
    if band.sum() < 16:
        return pasted
    ys, xs = np.nonzero(region)
    h, w = region.shape
    m = 4 * width
    y0, y1, x0, x1 = max(0, ys.min() - m), min(h, ys.max() + 1 + m), max(0, xs.min() - m), min(w, xs.max() + 1 + m)
    b = band[y0:y1, x0:x1].astype(np.float32)
    diff = (cur[y0:y1, x0:x1] - pasted[y0:y1, x0:x1]) * b[..., None]
    sig = max(3.0, (ys.max() - ys.min() + xs.max() - xs.min()) / 8.0)
    den = ndimage.gaussian_filter(b, sig)
    num = np.stack([ndimage.gaussian_filter(diff[..., c], sig) for c in range(3)], axis=2)
    corr = np.where(den[..., None] > 1e-3, num / np.maximum(den[..., None], 1e-3), 0.0)
    corr = np.clip(corr, -0.1, 0.1)
    out = pasted.copy()
    out[y0:y1, x0:x1] = np.clip(pasted[y0:y1, x0:x1] + corr, 0.0, 1.0)
    checks["seam_correction_max"] = round(float(np.abs(corr[region[y0:y1, x0:x1]]).max()) if region.any() else 0.0, 4)
    return out


def reveal_composite(source: Any, previous: Any, edited: Any, covered: Any, stable: Any = None,
                     source_id: int | None = None, params: RevealParams = DEFAULT_REVEAL) -> RevealResult:
    """Paste I_{k-1}'s pixels (`source`) into the region of I_t (`edited`) that turn k covered
    (`covered` = C_k) and that the edit revealed, colour-matched to I_t and feathered at the seam,
    if the geometry held around it; otherwise return I_t unchanged and say why.

    previous: I_{t-1}. stable: optional H×W mask of the pixels no turn from k to t-1 changed
    (provenance's `unchanged_since(k-1)`); None = every pixel outside C_k. Masks of another size
    are resized (nearest) to I_t's size, images bilinearly. See the module docstring."""
    e_arr = as_array(edited.array if isinstance(edited, StoredImage) else edited)
    size = (e_arr.shape[1], e_arr.shape[0])
    shape = (e_arr.shape[0], e_arr.shape[1])
    src = as_float_rgb(source, size)
    prev = as_float_rgb(previous, size)
    cur = as_float_rgb(e_arr)
    cov = _bool_at(covered, size, "covered (turn k's change mask)")
    stab = ~cov if stable is None else _bool_at(stable, size, "stable") & ~cov
    px = params.pixels(shape)
    empty = np.zeros(shape, bool)
    if not cov.any():
        return _refuse(e_arr, "turn k's change mask is empty: nothing was covered", source_id, empty, {})

    # 1. colour match (C_t: what this edit changed, drift ignored)
    c_t = change_of(prev, cur)
    changed_now = c_t.mask
    if c_t.stability is not None:
        stab_rec = {"stable_fraction": round(c_t.stability.stable_fraction, 4), "rerendered": c_t.stability.rerendered}
    else:
        stab_rec = None
    fit_src = fit_colour(src, cur, use=stab & ~changed_now)
    fit_prev = c_t.fit
    checks: dict = {"colour_fit": fit_src.info(), **{f"{k}_px": v for k, v in px.items()}}
    if stab_rec is not None:
        checks["turn_stability"] = stab_rec

    # 2. revealed region
    raw_src = residual(src, cur, fit_src)
    d_src = smooth(raw_src, params.compare_size)
    d_occ = smooth(residual(prev, cur, fit_prev), params.compare_size)
    o, c = DEFAULT_PARAMS.radii(shape)
    region = clean_mask(cov & changed_now & (d_src < params.agree_ratio * d_occ), o, c, DEFAULT_PARAMS.min_area)
    checks["covered_fraction"] = round(float(cov.mean()), 6)
    if not region.any():
        return _refuse(e_arr, "nothing revealed: where turn k covered the scene, I_t still shows "
                              "what I_{t-1} showed (or agrees better with it than with I_{k-1})",
                       source_id, region, checks)

    # 3. geometry check in a ring of stable pixels around R
    r3 = smooth(raw_src, 3)
    # This edit's other changes (a replacing object, the occluder's new place) and their soft
    # rims are no evidence about the geometry: they are left out with a 2 px margin.
    quiet = stab & ~dilate(changed_now & ~region, 2)
    bg = quiet & ~dilate(region, px["ring"])
    ring = dilate(region, px["ring"]) & ~dilate(region, px["gap"]) & quiet
    n_ring = int(ring.sum())
    checks["ring_pixels"] = n_ring
    if n_ring < params.min_ring or bg.sum() < params.min_ring:
        return _refuse(e_arr, f"geometry not checkable: only {n_ring} unchanged pixels around the revealed "
                              "region (later turns changed its surroundings)", source_id, region, checks)
    med, sig = robust_scale(r3[bg])
    tau = max(med + params.k * sig, DEFAULT_PARAMS.min_delta)
    p_bg = _expected_exceedance(src, r3 > tau, bg, ring)
    p_ring = float((r3[ring] > tau).mean())
    limit = p_bg + 3.0 * np.sqrt(max(p_bg * (1 - p_bg), 1e-12) / max(1.0, n_ring / 9.0)) + params.allowance
    # The shift search looks at the whole ring, this edit's changes included: a scene that moved is
    # all "changed", so leaving C_t out (as the exceedance test must, for new objects) would hide it.
    wide_ring = dilate(region, px["ring"]) & ~dilate(region, px["gap"]) & stab
    shift, err_best, err_zero = _best_shift(src, cur, wide_ring, px["max_shift"])
    if shift == (0, 0) or err_zero <= params.shift_ratio * err_best:
        # The same search on the whole stable image: a ring on flat ground cannot see a shift
        # that the rest of the picture shows.
        shift, err_best, err_zero = _best_shift(src, cur, stab & ~dilate(region, px["ring"]), px["max_shift"])
    checks.update({"tau": round(tau, 6), "ring_exceed": round(p_ring, 4), "background_exceed": round(p_bg, 4),
                   "ring_limit": round(float(limit), 4), "scene_shift": [-int(shift[1]), -int(shift[0])],
                   "ring_residual_zero": round(err_zero, 6), "ring_residual_best": round(err_best, 6)})
    if shift != (0, 0) and err_zero > params.shift_ratio * err_best:
        return _refuse(e_arr, f"geometry moved: around the revealed region the scene moved by dx={-shift[1]}, "
                              f"dy={-shift[0]} px since I_{{k-1}}", source_id, region, checks)
    if p_ring > limit:
        return _refuse(e_arr, f"geometry moved: {p_ring:.0%} of the pixels around the revealed region differ "
                              f"from I_{{k-1}} beyond the noise (limit {limit:.0%})", source_id, region, checks)
    why = absolute_check(src, cur, fit_src, ring, checks)
    if why:
        return _refuse(e_arr, why, source_id, region, checks)

    # 4. paste, feathered outwards over stable pixels
    weight = _feather(region, px["feather"])
    weight[~region & ~(stab & ~changed_now)] = 0.0
    weight[region] = 1.0
    pasted = np.clip(fit_src.apply(src), 0.0, 1.0)
    pasted = seam_match(pasted, cur, region, stab & ~changed_now, px["feather"], checks)
    rgb = cur * (1.0 - weight[..., None]) + pasted * weight[..., None]
    out = e_arr.copy()
    out_rgb = np.clip(np.round(rgb * 255.0), 0, 255).astype(np.uint8)
    if out.shape[2] >= 3:
        out[:, :, :3] = out_rgb
    else:   # a grey I_t stays grey
        out[:, :, 0] = np.round(out_rgb.mean(axis=2)).astype(np.uint8)
    out.flags.writeable = False
    return RevealResult(out, True, f"pasted I_{source_id if source_id is not None else 'k-1'} into "
                                   f"{region.mean():.1%} of the image; the geometry held",
                        source_id, region, weight, checks)


def reveal_for(history: History, edited: Any, covering_turn: int,
               params: RevealParams = DEFAULT_REVEAL) -> RevealResult:
    """Reveal Composite for the turn about to be appended to `history`: turn `covering_turn` = k
    covered the content, I_{k-1} is the source, the history's provenance gives C_k and the pixels
    no turn since k-1 changed."""
    if not isinstance(history, History):
        raise InputError(f"reveal_for needs a History, got {type(history).__name__}")
    t = history.next_turn
    k = int(covering_turn)
    if not 1 <= k < t:
        raise InputError(f"the covering turn must be one of 1..{t - 1} (an earlier edit), got {k}")
    prov = provenance_of(history)
    size = history_size(history)
    edited_img = edited if isinstance(edited, StoredImage) else StoredImage.of(
        to_uint8(edited) if np.asarray(edited).dtype.kind == "f" else edited)
    prev_img = history.current.image
    for j in range(k, t):
        if prov.rerendered(j):
            res = _refuse(edited_img.array, f"the editor re-rendered the scene at turn {j} (stable fraction "
                          f"{prov.stable_fraction(j):.2f}): I_{k - 1}'s pixels no longer line up",
                          k - 1, np.zeros(edited_img.array.shape[:2], bool), {"rerendered_turn": j})
            return res
    if edited_img.size != tuple(size):
        al_t = IDENTITY     # a turn of another size: compared after resizing, unaligned
    else:
        al_t = alignment_for(prev_img, edited_img, size)
    a_src = prov.alignment(k - 1, t - 1).compose(al_t)
    w, h = size
    src = as_float_rgb(history.image(k - 1), size)
    prev = as_float_rgb(prev_img, size)
    covered = prov.in_frame(prov.changes[k], k, t - 1)
    stable = prov.unchanged_since(k - 1)
    if not al_t.is_identity:
        covered = warp(covered, al_t, order=0)
        stable = warp(stable, al_t, order=0) & support(al_t, (h, w))
        prev = warp(prev, al_t)
    if not a_src.is_identity:
        src = warp(src, a_src)
    res = reveal_composite(src, prev, edited_img.array, covered, stable=stable, source_id=k - 1, params=params)
    c_now = res.checks.get("turn_stability")
    extra = {"alignment": a_src.record(), "turn_alignment": al_t.record()}
    if c_now is not None and c_now.get("rerendered") and res.applied:
        res = _refuse(edited_img.array, f"the editor re-rendered the scene in this edit (stable fraction "
                      f"{c_now['stable_fraction']:.2f})", k - 1, res.region, res.checks)
    res = RevealResult(res.image, res.applied, res.reason, res.source_id, res.region, res.source_weight,
                       {**res.checks, **extra})
    if res.applied and edited_img.size == tuple(size):
        remember_alignment(prev_img, StoredImage.of(res.image), size, al_t)
    return res


def reveal_masks(result: RevealResult) -> dict:
    """{REVEAL_SOURCE: mask} to append with the turn when something was pasted, else {}."""
    tm = result.turn_mask()
    return {REVEAL_SOURCE: tm} if tm is not None else {}


class RevealStep:
    """Reveal Composite as a post-edit step of respec.turn.run_turn (`--reveal-composite`).

    On a restoration turn it finds the covering turn k (from the plan when the provenance or
    hybrid planner located it, else from provenance now), pastes I_{k-1}'s pixels where the
    geometry held, keeps the `reveal_source` mask with the turn, and records what it did; other
    turns pass through untouched."""

    name = "reveal_composite"

    def __init__(self, params: RevealParams = DEFAULT_REVEAL):
        self.params = params

    def __call__(self, history: History, record: Any) -> tuple[Any, dict]:
        res, entry = reveal_turn(history, record.image, record.plan, record.request, record.is_restoration,
                                 self.params)
        if res is None or not res.applied:
            return record.image, entry
        record.masks.update(reveal_masks(res))
        return res.image, entry


def reveal_turn(history: History, edited: Any, plan: Any, request: str, is_restoration: bool,
                params: RevealParams = DEFAULT_REVEAL) -> tuple[RevealResult | None, dict]:
    """Reveal Composite for one turn (the post-edit step and the node): (the result, or None when
    it did not run, and the record entry saying what happened and why)."""
    if not is_restoration or history.next_turn < 2:
        return None, {"applied": False, "reason": "not a restoration turn"}
    k, found_by = covering_turn_for(history, plan, request)
    if k is None:
        return None, {"applied": False, "reason": f"no covering turn found ({found_by})"}
    res = reveal_for(history, edited, k, params)
    return res, {**res.record(), "covering_turn": k, "covering_turn_from": found_by}


def reveal_for_append(reveal: Any) -> tuple[dict, dict]:
    """What History Append keeps for a Reveal Composite value ({entry..., "result": RevealResult}):
    (the turn's masks, the turn's meta entries)."""
    if not isinstance(reveal, dict):
        raise InputError(f"'reveal' must come from a Reveal Composite node, got {type(reveal).__name__}")
    entry = {k: v for k, v in reveal.items() if k != "result"}
    res = reveal.get("result")
    masks = reveal_masks(res) if isinstance(res, RevealResult) else {}
    return masks, {"post_edit": [{"step": RevealStep.name, **entry}]}


def covering_turn_for(history: History, plan: Any, request: str) -> tuple[int | None, str]:
    """(k, where it came from): the plan's provenance record when a provenance or hybrid planner
    made one, else provenance located now (the plan's restoration_source_id + 1 breaks a tie)."""
    from .controller.provenance import locate_covering_turn
    rec = getattr(plan, "meta", {}).get("provenance") if plan is not None else None
    if isinstance(rec, dict) and rec.get("turn") is not None and not rec.get("ambiguous"):
        return int(rec["turn"]), "plan (provenance)"
    found = locate_covering_turn(history, request)
    src = getattr(plan, "restoration_source_id", None) if plan is not None else None
    if found.ambiguous and src is not None and (src + 1) in found.candidates:
        return src + 1, "provenance candidates, the plan's restoration source chose"
    return found.turn, f"provenance ({found.reason})"
