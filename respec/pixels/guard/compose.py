"""How the edit meets I_{t-1}: the seam (`compose`, on the crop around the edit region; membrane,
multiband or feather) and step 5 of drift_guard (`compose_edit`: the editor's pixels into the
output on that crop)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..blend import levels_for, multiband_blend, push_pull
from ..grade import grade_record, into_grade
from ..masks import dilate
from ..seam import spread_difference
from .arrays import float_rgb, psnr
from .values import Frame, GuardInputs
from .tiles import Tiles

RIM_PX = 2              # the seam's colour difference is read on this many pixels just outside the region ...
SEAM_CLIP = 0.06        # ... and corrected by at most this (15/255: an editor's colour drift, not content)
MIN_RIM_PX = 8          # with fewer rim pixels read, the membrane has nothing to carry: no correction
MEMBRANE_COARSER = 6    # the membrane's field is computed on a grid this many times coarser than its reach
MIN_BAND_PX = 16        # feather: with fewer background pixels around the region, no colour match
FEATHER_MIN_SIGMA = 2.0  # feather: the colour match is spread over at least this many px


def seam_reach(px: dict) -> int:
    """How far beyond the edit region the seam reads (px): the band, the rim on both sides of the
    region's edge, and a pixel each side for the interpolation."""
    return px["band"] + 2 * RIM_PX + 2


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
        d = np.abs(P - E)       # its largest channel (np.maximum: the same as max(axis=2), far faster)
        rim = dilate(K, RIM_PX) & ~K & src & (np.maximum(np.maximum(d[..., 0], d[..., 1]), d[..., 2]) <= SEAM_CLIP)
        if rim.sum() < MIN_RIM_PX:
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
    taper_px // MEMBRANE_COARSER (the field is smooth: at 1024² the membrane costs a sixteenth), then
    upsampled."""
    f = max(1, taper_px // MEMBRANE_COARSER)
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
    # channel by channel: the same numbers as one zoom by (f, f, 1), whose third axis costs twice the work
    return np.stack([ndimage.zoom(small[..., c], (f, f), order=1, grid_mode=True, mode="nearest")[:h, :w]
                     for c in range(small.shape[2])], axis=2)


def _seam_colour(P: np.ndarray, E: np.ndarray, core: np.ndarray, reach: np.ndarray, band: int, margin: int,
                 checks: dict) -> np.ndarray:
    """`feather`'s colour match (drift-guard-v1): the difference P - E on the background just
    inside and outside the edit region is spread smoothly (normalised convolution) and added to E
    with a weight that is 1 at the region's edge and beyond, fading to 0 `margin` px inside it.
    Bounded to ±SPREAD_CLIP (respec/pixels/seam.py, the rule Reveal Composite's seam uses too)."""
    dist_in = ndimage.distance_transform_edt(core)
    taper = np.clip(1.0 - dist_in / (margin + 1.0), 0.0, 1.0).astype(np.float32)
    bg = reach & (taper > 0)
    if bg.sum() < MIN_BAND_PX:
        return E
    sig = max(FEATHER_MIN_SIGMA, float(band))
    corr = spread_difference(P - E, bg, lambda x: ndimage.gaussian_filter(x, sig)) * taper[..., None]
    checks["seam_correction_max"] = round(float(np.abs(corr).max()), 4)
    return np.clip(E + corr, 0.0, 1.0)


def compose_edit(inputs: GuardInputs, frame: Frame, tiles: Tiles, K: np.ndarray, sl: tuple[slice, slice],
                 checks: dict) -> tuple[np.ndarray, np.ndarray]:
    """Step 5: (the output's RGB, uint8 H×W×3; the weight of the editor's pixels, H×W): I_{t-1}
    outside K, the editor's (aligned, on a local edit mapped into I_{t-1}'s grade) pixels inside K,
    on the crop `sl`, a seam without a step."""
    out, weight = inputs.prev3.copy(), np.zeros(inputs.shape, np.float32)
    E = tiles.E[sl]
    if frame.graded:
        E = into_grade(E, frame.info)
        checks.update(graded=f"the edit mapped into the previous image's colours (a shift of "
                              f"{inputs.shift * 255:.0f}/255)", grade=grade_record(frame.info))
    if not K.any():
        return out, weight
    comp, w = compose(float_rgb(inputs.prev3[sl]), E, K, tiles.src[sl], inputs.params.seam, inputs.px, checks)
    sel = w > 0
    view = out[sl]
    view[sel] = np.clip(np.round(comp[sel] * 255.0), 0, 255).astype(np.uint8)
    weight[sl] = w
    kept = w >= 1.0
    if kept.any():
        err = (view[kept].astype(np.float64) - E[kept] * 255.0) ** 2
        checks["edit_region_psnr"] = round(psnr(float(err.mean())), 2)
    return out, weight
