"""Local motion: a dense, smooth, sub-pixel motion field between two images that a global
alignment has already brought together (beyond the paper).

The turn's alignment (respec/pixels/alignment.py) undoes what moves the whole frame: a zoom-out, a
shift. Real editors also warp parts of the picture a little on their own (a face by 0.6-1 px, the
wall behind it not at all), and a paste or a guard that takes the global alignment as the whole
truth either refuses or leaves a seam. `estimate_flow` measures that residual, local motion on a
region's neighbourhood; `warp_by_flow` resamples an image by it. Reveal Composite
(respec/pixels/reveal.py) and the Drift Guard (respec/pixels/guard/) share it.

The field. For every pixel p of the box, d(p) = (dx, dy) says where `ref` shows what `cur` shows:

    cur(p) ~ ref(p + d(p))

so `warp_by_flow(ref, flow)` is `ref` moved into `cur`'s geometry.

How `estimate_flow` finds it (pyramid Lucas-Kanade, dense, both ways):

1. Grey images of the box (grown by a margin), each minus its own local mean (a Gaussian of
   HIGHPASS_SIGMA px over the `valid` pixels only) and 0 on the invalid ones: a shading or colour
   difference that varies slowly is no motion, and an edit's pixels (`valid` False: where the two
   images need not show the same scene) reach no valid pixel, neither through the mean nor
   through the pyramid. The weights are `valid` eroded by 2 px.
2. A Gaussian pyramid with enough levels that MAX_FLOW_PX at the coarsest level is about half a
   pixel. Coarse to fine, at each level a few Gauss-Newton steps: `ref` is resampled at p + d,
   the structure tensor of the two images' mean gradient and its product with the difference
   are summed over a Gaussian window (WINDOW_SIGMA px; at full size computed at half size after a
   2×2 mean, the window being a low-pass), weighted by the valid pixels (at a coarse level only
   those whose footprint is all valid), and the 2×2 systems solved per pixel (a small Tikhonov
   term keeps flat pixels at no motion).
3. After each level the field is smoothed by a normalised convolution (SMOOTH_SIGMA px) weighted
   by each pixel's evidence (the smaller eigenvalue of its window's structure tensor, on mostly
   valid pixels), and carried across pixels without evidence (the revealed region, a flat sky) by
   push-pull (respec/pixels/blend.py), before the next finer level starts from it: the field is
   smooth, as the warps it models are, and an edit does not lead the finer levels astray.
4. Forward-backward consistency: the field is estimated from `cur` to `ref` too (down to half
   size: it only checks); a pixel is consistent where the two cancel, |d_f(p) + d_b(p + d_f(p))|
   <= FB_TOLERANCE_PX + FB_TOLERANCE_REL · |d_f(p)|. A re-render (texture redrawn, not moved)
   has no consistent field.

`LocalFlow.stats` (JSON-able) holds what a step needs to decide: the evidence pixels, the share of
them that is consistent, the median and 95th-percentile length on the consistent ones, the
median forward-backward error, and the mean residual |ref - cur| on the evidence before and
after the warp. `LocalFlow.usable(max_px)` turns them into a verdict with a reason.

Cost (`python scripts/bench/bench_flow.py`, one CPU core): a few Gaussian filters per step on the
box; a whole 1024² image about 1 s, 512² about 0.25 s, a region's neighbourhood a fraction of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import ndimage

from ..errors import InputError
from .alignment import IDENTITY, Alignment
from .blend import expand, levels_for, push_pull

METHOD = "pyramid-lk-fb-v1"
MAX_FLOW_PX = 2.0          # the residual local motion the field is built for (px); beyond it: a reframing or a re-render
HIGHPASS_SIGMA = 6.0       # px: each image minus its Gaussian local mean (slow shading is no motion)
WINDOW_SIGMA = 2.5         # px: the Lucas-Kanade window
SMOOTH_SIGMA = 4.0         # px: the field's smoothing (a normalised convolution weighted by evidence)
ITERATIONS = (2, 3)        # Gauss-Newton steps at the finest level, at every coarser one
TIKHONOV = 1e-6            # added to the structure tensor's diagonal: flat pixels stay at no motion
MIN_EIG = 5e-6             # a window whose smaller eigenvalue is below this has no texture to measure (about twice
                           # what 8-bit rounding and an editor's noise of 0.004 give a flat window)
FB_TOLERANCE_PX = 0.3      # forward-backward: |d_f(p) + d_b(p + d_f(p))| within this ...
FB_TOLERANCE_REL = 0.1     # ... plus this share of |d_f(p)|
MIN_EVIDENCE = 64          # fewer evidence pixels than this: nothing measured
MIN_CONSISTENT = 0.7       # usable: at least this share of the evidence pixels is consistent
MIN_SIDE = 16              # the pyramid's coarsest level keeps at least this many pixels per side
MIN_MEASURE_SIDE = 4       # a box to measure on must be at least this many pixels per side
COARSE_VALID = 0.95        # a coarse pixel is evidence only when at least this share of it is valid
LEVEL_LIMIT = 1.5          # a level's field is clipped to this many times max_px (at its scale), plus 1 px


@dataclass(frozen=True, eq=False)
class LocalFlow:
    """A dense motion field on `box` = (y0, y1, x0, x1) of the full image: cur(p) ~ ref(p + (dx, dy))
    for p in the box (full-image pixel coordinates). `evidence`: pixels whose window had texture
    on valid pixels; `consistent`: evidence pixels where the forward and backward fields cancel."""

    dx: np.ndarray
    dy: np.ndarray
    consistent: np.ndarray
    evidence: np.ndarray
    box: tuple[int, int, int, int]
    shape: tuple[int, int]           # (H, W) of the full image the box lies in
    stats: dict = field(default_factory=dict)

    def length(self) -> np.ndarray:
        """float32 h×w: |d(p)| on the box."""
        return np.hypot(self.dx, self.dy)

    def record(self) -> dict:
        """JSON-able: the method, the box and the stats."""
        return {"method": METHOD, "box": [int(v) for v in self.box], **self.stats}

    def usable(self, max_px: float = MAX_FLOW_PX, min_consistent: float = MIN_CONSISTENT) -> tuple[bool, str]:
        """(whether a step may warp by this field, why not). It may when enough pixels carried
        evidence, at least `min_consistent` of them are forward-backward consistent and the 95th
        percentile of the consistent pixels' motion stays within `max_px`."""
        s = self.stats
        if s.get("evidence_px", 0) < MIN_EVIDENCE:
            return False, f"too little texture to measure a local motion ({s.get('evidence_px', 0)} pixels)"
        if s.get("consistent_share", 0.0) < min_consistent:
            return False, (f"no consistent local motion: only {s.get('consistent_share', 0.0):.0%} of the textured "
                           f"pixels agree forward and backward (limit {min_consistent:.0%}; a re-render, not a warp)")
        if s.get("p95_px", 0.0) > max_px:
            return False, f"a local motion of {s.get('p95_px', 0.0):.1f} px (95th percentile; limit {max_px} px)"
        return True, ""

    def crop(self, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(dx, dy) on another `box` of the full image: the field where the boxes overlap, its
        nearest edge value beyond (the field is smooth; outside its box it is extended, not zero)."""
        y0, y1, x0, x1 = (int(v) for v in box)
        fy0, fy1, fx0, fx1 = self.box
        rows = np.clip(np.arange(y0, y1) - fy0, 0, fy1 - fy0 - 1)
        cols = np.clip(np.arange(x0, x1) - fx0, 0, fx1 - fx0 - 1)
        return self.dx[rows][:, cols], self.dy[rows][:, cols]

    def scaled(self, factor: float, shape: tuple[int, int]) -> "LocalFlow":
        """The field at an image `factor` times larger (shape = its (H, W)): box and motion scaled,
        the field resampled bilinearly (a working-size analysis pasted at full size)."""
        h, w = (int(v) for v in shape)
        y0, y1, x0, x1 = self.box
        box = (max(0, int(np.floor(y0 * factor))), min(h, int(np.ceil(y1 * factor))),
               max(0, int(np.floor(x0 * factor))), min(w, int(np.ceil(x1 * factor))))
        ry = (np.arange(box[0], box[1]) + 0.5) / factor - 0.5 - y0
        rx = (np.arange(box[2], box[3]) + 0.5) / factor - 0.5 - x0
        yy, xx = np.meshgrid(ry, rx, indexing="ij")
        coords = np.stack([yy, xx])

        def up(a: np.ndarray, order: int) -> np.ndarray:
            return ndimage.map_coordinates(np.asarray(a, np.float32), coords, order=order, mode="nearest")

        return LocalFlow(up(self.dx, 1) * np.float32(factor), up(self.dy, 1) * np.float32(factor),
                         up(self.consistent.astype(np.float32), 0) > 0.5, up(self.evidence.astype(np.float32), 0) > 0.5,
                         box, (h, w), dict(self.stats))


def _grey(img: Any) -> np.ndarray:
    """float32 H×W grey (channel mean) in 0..1 of a uint8 or float image (H×W or H×W×C)."""
    a = np.asarray(img)
    scale = np.float32(1.0 / 255.0) if a.dtype == np.uint8 else np.float32(1.0)
    if a.ndim == 3:
        if a.shape[2] >= 3:     # the channel mean as three adds (the same numbers as mean(axis=2), far faster)
            a = a[..., :3].astype(np.float32)
            a = (a[..., 0] + a[..., 1] + a[..., 2]) / np.float32(3)
        else:
            a = a[..., 0]
    return a.astype(np.float32) * scale


def _pad_box(box: tuple[int, int, int, int], pad: int, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    y0, y1, x0, x1 = box
    h, w = shape
    return max(0, y0 - pad), min(h, y1 + pad), max(0, x0 - pad), min(w, x1 + pad)


def _check_box(box, shape) -> tuple[int, int, int, int]:
    h, w = shape
    if box is None:
        return (0, h, 0, w)
    y0, y1, x0, x1 = (int(v) for v in box)
    y0, y1, x0, x1 = max(0, y0), min(h, y1), max(0, x0), min(w, x1)
    if y1 - y0 < MIN_MEASURE_SIDE or x1 - x0 < MIN_MEASURE_SIDE:
        raise InputError(f"the local motion box {tuple(box)} leaves less than {MIN_MEASURE_SIDE}×{MIN_MEASURE_SIDE} "
                         f"pixels of a {w}x{h} image")
    return (y0, y1, x0, x1)


def _sample(img: np.ndarray, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    """Bilinear samples of a float32 H×W image at (yy, xx) (same shape), the border repeated."""
    h, w = img.shape
    if h < 2 or w < 2:
        return np.full(np.shape(yy), float(img.mean()), np.float32)
    y = np.clip(yy, 0.0, h - 1.0001, dtype=np.float32)
    x = np.clip(xx, 0.0, w - 1.0001, dtype=np.float32)
    y0, x0 = y.astype(np.int32), x.astype(np.int32)
    fy, fx = y - y0, x - x0
    idx = y0 * np.int32(w) + x0          # flat gathers: far faster than two fancy indices
    flat = img.ravel()
    a, b = np.take(flat, idx), np.take(flat, idx + 1)
    c, d = np.take(flat, idx + w), np.take(flat, idx + (w + 1))
    top = a + (b - a) * fx
    return top + (c + (d - c) * fx - top) * fy


def _reduce(x: np.ndarray) -> np.ndarray:
    return ndimage.gaussian_filter(x, 1.0, mode="nearest")[::2, ::2]


def _upsample_field(d: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A coarse level's field at the next finer level's `shape` (its samples on the even rows and
    columns, linear in between; values doubled)."""
    return expand(d, shape) * np.float32(2.0)


def _levels(shape: tuple[int, int], max_px: float) -> int:
    want = 1 + max(0, int(np.ceil(np.log2(max(1.0, 2.0 * max_px)))))
    n = 1
    while n < want and min(shape) // 2 ** n >= MIN_SIDE:
        n += 1
    return n


def _half_filter(planes: list[np.ndarray], sigma: float) -> list[np.ndarray]:
    """A Gaussian of `sigma` px over each h×w plane, computed at half size after a 2×2 mean and
    brought back linearly: a wide window is a low-pass and loses nothing by it, for a quarter of
    the filtering. Small planes are filtered as they are."""
    h, w = planes[0].shape
    if min(h, w) < 4 * MIN_SIDE:
        return list(ndimage.gaussian_filter(np.stack(planes), (0, sigma, sigma), mode="nearest"))
    ph, pw = h % 2, w % 2       # an odd side repeats its last row / column: ceil(side / 2) samples
    small = np.stack([(np.pad(p, ((0, ph), (0, pw)), mode="edge") if ph or pw else p)
                      .reshape((h + ph) // 2, 2, (w + pw) // 2, 2).mean(axis=(1, 3)) for p in planes])
    small = ndimage.gaussian_filter(small, (0, sigma / 2, sigma / 2), mode="nearest")
    return [expand(p, (h, w)) for p in small]


def _highpass(g: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """g minus its local mean (a Gaussian of HIGHPASS_SIGMA px) taken over the valid pixels only,
    and 0 on the invalid ones: an edit's texture or colour then reaches no valid pixel, neither
    through the mean nor through the pyramid (both images are treated alike)."""
    if valid.all():
        return g - ndimage.gaussian_filter(g, HIGHPASS_SIGMA, mode="nearest")
    v = valid.astype(np.float32)
    mean = ndimage.gaussian_filter(g * v, HIGHPASS_SIGMA, mode="nearest") / np.maximum(
        ndimage.gaussian_filter(v, HIGHPASS_SIGMA, mode="nearest"), 1e-6)
    return np.where(valid, g - mean, 0.0).astype(np.float32)


def _pyramid(x: np.ndarray, n: int) -> list[np.ndarray]:
    out = [x]
    for _ in range(n - 1):
        out.append(_reduce(out[-1]))
    return out


def _lk(ref: list[np.ndarray], cur: list[np.ndarray], w: list[np.ndarray], max_px: float,
        finest: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense pyramid Lucas-Kanade of `cur` against `ref` (pyramids of high-passed grey), windows
    weighted by the pyramid `w`, coarse to level `finest`; each level's field is smoothed where
    it has evidence and carried across where it has none (`_regularise`) before the next finer
    level starts from it (so an edit's pixels do not lead the finer levels astray). Returns
    (dx, dy, evidence) at that level's size."""
    dx = dy = None
    for lvl in range(len(ref) - 1, finest - 1, -1):
        r, c, ww = ref[lvl], cur[lvl], w[lvl]
        if lvl:     # a coarse pixel that mixes invalid ones (an edit's texture) is no evidence at all
            ww = (ww >= COARSE_VALID).astype(np.float32)
        h, wd = r.shape
        if dx is None:
            dx, dy = np.zeros((h, wd), np.float32), np.zeros((h, wd), np.float32)
        else:
            dx, dy = _upsample_field(dx, (h, wd)), _upsample_field(dy, (h, wd))
        yy, xx = np.mgrid[0:h, 0:wd].astype(np.float32)
        gcy, gcx = np.gradient(c)
        limit = np.float32(LEVEL_LIMIT * max_px / 2 ** lvl + 1.0)
        for _ in range(ITERATIONS[0] if lvl == 0 else ITERATIONS[1]):
            warped = _sample(r, yy + dy, xx + dx)
            gy, gx = np.gradient(warped)
            gx, gy = 0.5 * (gx + gcx), 0.5 * (gy + gcy)      # the mean gradient: symmetric, less biased
            it = warped - c
            gxw, gyw = gx * ww, gy * ww
            prod = [gxw * gx, gyw * gy, gxw * gy, gxw * it, gyw * it]
            s = _half_filter(prod, WINDOW_SIGMA) if lvl == 0 else \
                ndimage.gaussian_filter(np.stack(prod), (0, WINDOW_SIGMA, WINDOW_SIGMA), mode="nearest")
            a11, a22, a12 = s[0] + TIKHONOV, s[1] + TIKHONOV, s[2]
            det = a11 * a22 - a12 * a12
            dx = np.clip(dx - (a22 * s[3] - a12 * s[4]) / det, -limit, limit).astype(np.float32)
            dy = np.clip(dy - (a11 * s[4] - a12 * s[3]) / det, -limit, limit).astype(np.float32)
        s11, s22 = a11 - TIKHONOV, a22 - TIKHONOV
        tr, det0 = s11 + s22, s11 * s22 - a12 * a12
        lam = (tr / 2 - np.sqrt(np.maximum(tr * tr / 4 - det0, 0.0))).astype(np.float32)
        dx, dy, evidence = _regularise(dx, dy, lam, ww, lvl)
    return dx, dy, evidence


def _regularise(dx: np.ndarray, dy: np.ndarray, lam: np.ndarray, v: np.ndarray,
                lvl: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One level's field made smooth: the evidence pixels are those whose window had texture in
    both directions (smaller eigenvalue `lam`) and lay mostly on valid pixels (`v`); the field is
    a normalised convolution of the solved one weighted by that evidence (SMOOTH_SIGMA px at full
    size), carried by push-pull across pixels with none nearby. (dx, dy, evidence)."""
    f = 2 ** lvl
    cover = ndimage.gaussian_filter(v, WINDOW_SIGMA / f, mode="nearest")
    evidence = (lam > MIN_EIG * np.maximum(cover, 1e-6)) & (cover > 0.5) & (v > 0.5)
    conf = np.where(evidence, lam, 0.0).astype(np.float32)
    sums = _half_filter([conf, dx * conf, dy * conf], max(1.0, SMOOTH_SIGMA / f))
    known = sums[0] > 1e-3 * max(float(sums[0].max()), 1e-12)
    est = np.where(known[..., None], np.stack([sums[1], sums[2]], axis=2) / np.maximum(sums[0], 1e-12)[..., None],
                   0.0).astype(np.float32)
    if not known.all() and known.any():
        est = push_pull(est, known, levels_for(max(est.shape[:2]), est.shape[:2]))
    return est[..., 0], est[..., 1], evidence


def _field(ref: list, cur: list, valid: list, max_px: float, finest: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The smooth field of `cur` against `ref` (pyramids), solved down to level `finest` and
    returned at full size, with the evidence pixels of that level."""
    sx, sy, evidence = _lk(ref, cur, valid, max_px, finest)
    for lvl in range(finest - 1, -1, -1):
        shape = ref[lvl].shape
        sx, sy = _upsample_field(sx, shape), _upsample_field(sy, shape)
    return sx, sy, evidence


def estimate_flow(ref: Any, cur: Any, *, valid: np.ndarray | None = None,
                  box: tuple[int, int, int, int] | None = None, max_px: float = MAX_FLOW_PX) -> LocalFlow:
    """The local motion field of `cur` against `ref` on `box` (see the module docstring).

    ref, cur: images of one size (H×W or H×W×C, uint8 or float 0..1), `ref` already globally
    aligned to `cur` (and best colour-matched to it). valid: optional bool H×W of the pixels where
    both should show the same scene (default: all); the field is measured there and carried
    across the rest. box: (y0, y1, x0, x1), the part of the image the field is wanted on (default:
    the whole image; a margin around it is read too). max_px: the largest motion measured."""
    g0, g1 = _grey(ref), _grey(cur)
    if g0.shape != g1.shape:
        raise InputError(f"a local motion field needs images of one size, got {g0.shape} and {g1.shape}; "
                         "align and resize the reference to the target first")
    shape = g0.shape
    box = _check_box(box, shape)
    v = np.ones(shape, bool) if valid is None else np.asarray(valid, bool)
    if v.shape != shape:
        raise InputError(f"the valid mask has shape {v.shape}, the images {shape}")
    pad = int(np.ceil(2 * max_px + 3 * max(WINDOW_SIGMA, SMOOTH_SIGMA) + HIGHPASS_SIGMA))
    outer = _pad_box(box, pad, shape)
    sl = (slice(outer[0], outer[1]), slice(outer[2], outer[3]))
    vv = v[sl]
    a, b = _highpass(g0[sl], vv), _highpass(g1[sl], vv)
    if not vv.all():    # (2 px in: a window's edge on the invalid pixels' step is no evidence either)
        vv = ndimage.binary_erosion(vv, iterations=2, border_value=1)
    n = _levels(a.shape, max_px)
    pa, pb, pv = _pyramid(a, n), _pyramid(b, n), _pyramid(vv.astype(np.float32), n)
    fx, fy, ev_f = _field(pa, pb, pv, max_px, 0)
    # The backward field only checks the forward one (within FB_TOLERANCE_PX): half size is enough.
    bx, by, _ = _field(pb, pa, pv, max_px, min(1, n - 1))
    h, w = a.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    ex = fx + _sample(bx, yy + fy, xx + fx)
    ey = fy + _sample(by, yy + fy, xx + fx)
    fb = np.hypot(ex, ey)
    length = np.hypot(fx, fy)
    consistent = ev_f & (fb <= FB_TOLERANCE_PX + FB_TOLERANCE_REL * length)
    before = np.abs(a - b)
    after = np.abs(_sample(a, yy + fy, xx + fx) - b)
    inner = (slice(box[0] - outer[0], box[1] - outer[0]), slice(box[2] - outer[2], box[3] - outer[2]))
    ev, co, ln = ev_f[inner], consistent[inner], length[inner]
    n_ev = int(ev.sum())
    stats = {"evidence_px": n_ev, "consistent_share": round(float(co.sum()) / n_ev, 4) if n_ev else 0.0,
             "median_px": round(float(np.median(ln[co])), 4) if co.any() else 0.0,
             "p95_px": round(float(np.percentile(ln[co], 95)), 4) if co.any() else 0.0,
             "max_px": round(float(ln.max()), 4) if ln.size else 0.0,
             "fb_error_median_px": round(float(np.median(fb[inner][ev])), 4) if n_ev else 0.0,
             "residual_before": round(float(before[inner][ev].mean()), 6) if n_ev else 0.0,
             "residual_after": round(float(after[inner][ev].mean()), 6) if n_ev else 0.0}
    return LocalFlow(fx[inner].copy(), fy[inner].copy(), co.copy(), ev.copy(), box, shape, stats)


def warp_by_flow(image: Any, flow: LocalFlow, alignment: Alignment = IDENTITY, box: tuple[int, int, int, int] | None = None,
                 order: int = 1) -> np.ndarray:
    """`image` moved into the target's geometry on `box` (default: the flow's box): the output at p
    is image(A^-1(p + d(p))), with A = `alignment` (the image's frame -> the target's, the global
    part, composed here so the image is resampled once) and d the flow (extended beyond its box by
    its edge values). float32 h×w×C (0..1 for a uint8 image; order 3: a cubic spline, not clipped)."""
    img = np.asarray(image)
    if img.ndim == 2:
        img = img[..., None]
    h, w = img.shape[:2]
    if (h, w) != tuple(flow.shape):
        raise InputError(f"warp_by_flow: the image is {w}x{h}, the flow was measured on {flow.shape[1]}x{flow.shape[0]}")
    box = _check_box(box if box is not None else flow.box, (h, w))
    dx, dy = flow.crop(box)
    y0, y1, x0, x1 = box
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    # p = A^-1(q) by the alignment model (respec/pixels/alignment.py): s'·(q - c) + c + d' about the centre c
    back = alignment.inverse()
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    sy = (yy + dy - cy) * back.scale + cy + back.dy
    sx = (xx + dx - cx) * back.scale + cx + back.dx
    scale = 1.0 / np.iinfo(img.dtype).max if img.dtype.kind in "ui" else 1.0
    # Read only the source rows and columns the box needs (a crop of a large image costs the crop).
    r0, r1 = max(0, int(np.floor(sy.min())) - 3), min(h, int(np.ceil(sy.max())) + 4)
    c0, c1 = max(0, int(np.floor(sx.min())) - 3), min(w, int(np.ceil(sx.max())) + 4)
    sub = img[r0:r1, c0:c1].astype(np.float32) * np.float32(scale)
    coords = np.stack([np.clip(sy - r0, 0, r1 - r0 - 1), np.clip(sx - c0, 0, c1 - c0 - 1)])
    out = np.stack([ndimage.map_coordinates(sub[..., c], coords, order=order, mode="nearest")
                    for c in range(sub.shape[2])], axis=2)
    return out.astype(np.float32)
