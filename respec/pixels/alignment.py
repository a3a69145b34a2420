"""Alignment between consecutive history images: translation + uniform scale, sub-pixel (beyond
the paper).

Real editors do not keep the frame: some zoom out by 1-3 % per call or shift by a few pixels,
and a change mask or a paste made without undoing that marks (or damages) everything. For every
appended turn the geometric change between I_{t-1} and I_t is estimated and kept with the turn
(`meta["alignment"]`, and in its change mask's info); alignments compose along the history, so
any I_k can be warped into I_t's frame.

The model. A point p of I_{t-1} (pixel coordinates at the history's size) is seen in I_t at

    p' = scale · (p - c) + c + (dx, dy),      c = the image centre ((w - 1) / 2, (h - 1) / 2)

so a zoom-out is scale < 1, a shift right is dx > 0. `Alignment.compose` chains two of them
(first self, then the other), `inverse` undoes one, `warp(image, a)` resamples an image of the
earlier frame into the later frame (bilinear) and `support(a, shape)` says which output pixels
had a source.

How `estimate_alignment` finds it, robust to the edited region and to photometric drift:

1. Grey images at a coarse size (longer side <= COARSE_SIDE), lightly blurred (VAE noise).
2. Block motion: phase correlation of windowed blocks (unit-magnitude cross-power spectrum, so
   a gain, an offset or a blur of either image does not move the peak) gives each textured block
   a displacement, sub-pixel by a parabola through the peak.
3. A robust fit of the model to the block displacements (RANSAC on pairs of blocks, then least
   squares on the inliers): the edited region's blocks move differently and are outliers; an
   `ignore` mask can exclude known changes.
4. Refinement at the fine size (longer side <= FINE_SIDE): Gauss-Newton on (scale, dx, dy) plus a
   grey gain and offset, with Tukey weights (the edit's pixels get weight 0), a few rounds.
5. Motions below SNAP_PX at every image corner are no motion: the identity is returned (an
   editor that keeps the frame gets no resampling blur).
6. The fit must beat a null model (issue 43): on the fine grid's textured blocks, its match
   (normalised correlation, upper quartile) must clearly exceed that of an unrelated pair (I_{t-1}
   rolled by half its size) and not fall below that of the unaligned pair (when it does, and the
   unaligned pair beats the unrelated one, no motion is returned: the frame was kept); a motion beyond
   MAX_SHIFT_FRAC of the shorter side, or a warped frame covering less than MIN_COVERAGE of the
   picture, is a re-framing. A refused fit returns no motion with the method
   "identity (untrusted fit: <why>)" (`Alignment.untrusted_reason`): the steps that would undo it
   (the Drift Guard, Reveal Composite) step aside and name the reason. Unrelated images (where
   every block's Lucas-Kanade residual is small, so the block agreement alone calls them aligned)
   and a shift beyond what the blocks measure are refused here.

`residual_px` is the median distance between the block displacements and the fitted model on
the inlier blocks after refinement (how well one similarity explains the motion); `inliers` the
share of textured blocks that agree with it. A re-rendered picture (a new pose, redrawn texture)
has few inliers and a large residual: the change record's stability measure
(respec/pixels/change_mask.py) reads that.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..errors import InputError
from ..history import StoredImage
from ..images import finite_pixels
from .analysis_cache import CACHE, AnalysisCache
from .colour_fit import MAD_TO_SIGMA
from .work_images import work_float, working_size

METHOD = "blockphase+gn-v1"
COARSE_SIDE = 256        # block motion is measured with the longer side at most this
FINE_SIDE = 512          # ... and refined with the longer side at most this
BLOCK = 32               # block size (pixels at the coarse size)
SNAP_PX = 0.1            # a motion below this at every corner is the identity
MIN_BLOCKS = 6           # fewer textured blocks than this: no estimate (identity)
INLIER_PX = 0.75         # RANSAC inlier distance (coarse pixels)
TUKEY_C = 4.685          # Tukey's biweight cut-off in robust sigmas (95 % efficiency on Gaussian noise)
FAST_MOTION_PX = 0.5     # a coarse motion below this (every corner) that at least FAST_INLIERS of the ...
FAST_INLIERS = 0.5       # ... textured blocks agree with is tried as the identity first (one Gauss-Newton step)
EDIT_K = 4.0             # second pass: a fine-size residual above median + this many robust sigmas is the edit ...
EDIT_GROW = 7            # ... grown by a 7×7 max filter (3 px around: its gradients would read as motion) ...
EDIT_MAX_SHARE = 0.6     # ... and left out only while it covers less than this share: more is no edit but a
                         #     motion the first pass got wrong, and too little would be left to refine on
FIT_AGREE_PX = 1.0       # a block whose residual motion is within this (fine pixels) agrees with the fit
MIN_INLIERS = 0.3        # fewer agreeing textured blocks than this share: no consistent motion (a re-render),
                         # the identity is returned. Looser than the Drift Guard's min_inliers (0.5), which
                         # must trust the alignment to paste pixels; this only decides whether to warp at all.
                         # (change_mask.RERENDER_SHARE = 0.3 is another measure: unstable pixels, not blocks.)
MIN_GREY_SIDE = 8        # a grey resized for the motion keeps at least this many pixels per side ...
MIN_BLOCK_SIDE = 8       # ... and a block at least this many (an image smaller than BLOCK gets one such block)
MIN_BLOCK_STD = 0.01     # a block whose grey std is below this in either image has no texture to measure
BLOCK_IGNORE_SHARE = 0.3  # a block with more than this share of its pixels ignored (the edit) is not measured
COARSE_BLUR = 0.7        # px: the coarse greys are blurred by this before the block motion ...
FINE_BLUR = 1.0          # ... and the fine ones by this before Gauss-Newton (noise, JPEG)
FIRST_ROUNDS = 5         # Gauss-Newton rounds of the first fine pass ...
SECOND_ROUNDS = 3        # ... and of the second, without the edit (starting from the first's answer)
IRLS_ROUNDS = 3          # Tukey reweightings per Gauss-Newton round
REFINE_SAMPLES = 60_000  # pixels a Gauss-Newton round samples (an even grid): enough for 5 numbers ...
REFINE_MIN_PIXELS = 100  # ... and fewer usable than this: the round is not made
REFINE_DONE_PX = 1e-3    # a round that moves every corner by less than this (px) ends the refinement
UNMEASURED_RESIDUAL_PX = 99.0   # the residual recorded when no block agrees with the fit (beyond any limit)
UNTRUSTED = "identity (untrusted fit:"   # how the method of a fit the null model refused starts
MAX_SHIFT_FRAC = 0.25    # a fit moving a corner by more than this share of the shorter side is no editor's drift
                         # (real editors shift by at most ~9 px and zoom by 1-3 %, index_more.json) and beyond what
                         # the block motion measures (BLOCK / 2 coarse pixels): untrusted
MIN_COVERAGE = 0.7       # a fit whose warped previous frame covers less than this share of the picture left the
                         # previous frame (a re-framing: a zoom-out beyond 16 %, which MAX_SHIFT_FRAC alone allows);
                         # real editors' frames cover at least 0.94 (index_more.json), Kontext's re-framed turns in
                         # the ConvergeBench chains 0.76 (their zoom is the Drift Guard's max_scale_dev's to refuse)
MATCH_QUANTILE = 0.75    # the null test reads the upper quartile of the blocks' match: the best-matching quarter
                         # of the picture, so an edit may cover up to 3/4 of the textured blocks
NULL_MARGIN = 0.2        # ... the fit's must exceed an unrelated pair's (I_(t-1) rolled by half its size) by this
                         # (correlation): unrelated noise and a 40 % shift reach at most 0.1 over it; of 321 real
                         # editor calls (../shared/realdata) all clear 0.2 but two MTC turns that re-drew the scene
                         # (0.09, 0.15)
ID_SLACK = 0.05          # ... and may fall below the unaligned pair's by at most this: a sub-pixel fit ties with
                         # the identity (no margin can be asked of it); one that matches worse is wrong, and the
                         # identity (when it beats the unrelated pair) is returned instead


@dataclass(frozen=True)
class Alignment:
    """A translation + uniform scale about the image centre (see the module docstring), in
    pixels of the history's size; `size` = (w, h) it refers to."""

    dx: float = 0.0
    dy: float = 0.0
    scale: float = 1.0
    residual_px: float = 0.0
    method: str = "identity"
    inliers: float = 1.0
    size: tuple[int, int] | None = None

    @property
    def is_identity(self) -> bool:
        """Whether it moves nothing (no shift, scale 1)."""
        return self.dx == 0.0 and self.dy == 0.0 and self.scale == 1.0

    @property
    def untrusted_reason(self) -> str:
        """Why estimate_alignment refused its fit and returned no motion instead ('' = it did not):
        the fit did not beat the null model or was a re-framing (module docstring, step 6)."""
        return self.method[len(UNTRUSTED):-1].strip() if self.method.startswith(UNTRUSTED) else ""

    def max_motion(self, size: tuple[int, int] | None = None) -> float:
        """The largest displacement it causes at any image corner (pixels)."""
        w, h = size or self.size or (0, 0)
        rx, ry = (w - 1) / 2.0, (h - 1) / 2.0
        a = self.scale - 1.0
        return float(max(np.hypot(self.dx + sx * a * rx, self.dy + sy * a * ry)
                         for sx in (-1, 1) for sy in (-1, 1)))

    def compose(self, then: "Alignment") -> "Alignment":
        """The alignment of `self` followed by `then` (frame a -> b, then b -> c: a -> c). The
        residuals add (an upper bound), the inlier share is the smaller."""
        s = self.scale * then.scale
        return Alignment(then.scale * self.dx + then.dx, then.scale * self.dy + then.dy, s,
                         self.residual_px + then.residual_px, _join(self.method, then.method),
                         min(self.inliers, then.inliers), self.size or then.size)

    def inverse(self) -> "Alignment":
        """The alignment from the later frame back to the earlier one."""
        return Alignment(-self.dx / self.scale, -self.dy / self.scale, 1.0 / self.scale, self.residual_px,
                         self.method, self.inliers, self.size)

    def record(self) -> dict:
        """JSON-able: {dx, dy, scale, residual_px, method, inliers, size} (turn meta["alignment"])."""
        d = asdict(self)
        d.update({"dx": round(self.dx, 4), "dy": round(self.dy, 4), "scale": round(self.scale, 6),
                  "residual_px": round(self.residual_px, 4), "inliers": round(self.inliers, 4),
                  "size": list(self.size) if self.size else None})
        return d

    @classmethod
    def from_record(cls, rec: Any) -> "Alignment":
        """From `record()`'s dict (None or {}: the identity)."""
        if not rec:
            return IDENTITY
        if not isinstance(rec, dict):
            raise InputError(f"an alignment record must be a dict, got {type(rec).__name__}")
        size = rec.get("size")
        return cls(float(rec.get("dx", 0.0)), float(rec.get("dy", 0.0)), float(rec.get("scale", 1.0)),
                   float(rec.get("residual_px", 0.0)), str(rec.get("method", "identity")),
                   float(rec.get("inliers", 1.0)), tuple(int(v) for v in size) if size else None)


IDENTITY = Alignment()


def _join(a: str, b: str) -> str:
    if a == b or b == "identity":
        return a
    return b if a == "identity" else "composed"


def compose_all(alignments: list[Alignment]) -> Alignment:
    """The alignments of consecutive turns composed in order (empty: the identity)."""
    out = IDENTITY
    for a in alignments:
        out = out.compose(a)
    return out


# --------------------------------------------------------------------------- warping

def _source_coords(a: Alignment, shape: tuple[int, int]) -> tuple[float, float, float]:
    """(inverse scale, y offset, x offset) so that source = out * inv + offset."""
    h, w = shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    inv = 1.0 / a.scale
    return inv, cy - (cy + a.dy) * inv, cx - (cx + a.dx) * inv


def warp(image: np.ndarray, alignment: Alignment, out_shape: tuple[int, int] | None = None,
         order: int = 1, box: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """`image` (H×W or H×W×C, the earlier frame) resampled into the later frame of `alignment`
    (bilinear for order=1; order=0 for labels). Pixels with no source repeat the nearest edge;
    `support` says which. The identity returns the image itself. A bool image comes back bool.
    box = (y0, y1, x0, x1): only that crop of the output (only the source pixels it needs are
    read, so a crop of a very large image costs what the crop costs)."""
    img = np.asarray(image)
    shape = tuple(out_shape) if out_shape is not None else img.shape[:2]
    if shape != img.shape[:2]:
        raise InputError(f"warp keeps the frame's size: image {img.shape[:2]}, out_shape {shape}")
    if box is not None:
        return _warp_box(img, alignment, box, order)
    if alignment.is_identity:
        return img
    inv, oy, ox = _source_coords(alignment, shape)
    return _resample(img, np.arange(shape[0]), np.arange(shape[1]), inv, oy, ox, order)


def _axis(pos: np.ndarray, inv: float, off: float, n_in: int, order: int):
    """Source indices (and bilinear weights) along one axis for the output positions `pos`."""
    c = np.clip(np.asarray(pos, np.float64) * inv + off, 0.0, n_in - 1.0)
    if order == 0:
        return np.floor(c + 0.5).astype(np.intp), None, None
    i0 = np.floor(c).astype(np.intp)
    return i0, np.minimum(i0 + 1, n_in - 1), (c - i0).astype(np.float32)


KEYS_A = -0.5    # Keys' cubic convolution parameter (the classic "bicubic"; PIL's and OpenCV's -0.5 / -0.75)


def _keys(t: np.ndarray) -> np.ndarray:
    """The four Keys cubic weights (taps at -1, 0, 1, 2) for fractional offsets t (N,) -> N×4."""
    a = KEYS_A
    x = np.stack([1.0 + t, t, 1.0 - t, 2.0 - t], axis=1)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x <= 1.0, near, far).astype(np.float32)


def _cubic_axis(pos: np.ndarray, inv: float, off: float, n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """(N×4 source indices, N×4 Keys weights) along one axis; the border repeats."""
    c = np.clip(np.asarray(pos, np.float64) * inv + off, 0.0, n_in - 1.0)
    i0 = np.floor(c).astype(np.intp)
    idx = np.clip(i0[:, None] + np.arange(-1, 3)[None, :], 0, n_in - 1)
    return idx, _keys(c - i0)


def _resample_cubic(img: np.ndarray, rows: np.ndarray, cols: np.ndarray, inv: float, oy: float, ox: float,
                    as_float: bool) -> np.ndarray:
    """The similarity warp with Keys' cubic kernel, separably (4 taps per axis): sharper than
    bilinear, which low-passes by up to a 0.5 px box at half-pixel offsets. For pastes, where the
    pixels are kept; the analysis stays bilinear. Float out (0..1 for a uint8 image when
    as_float), not clipped: the kernel overshoots a little at edges."""
    h, w = img.shape[:2]
    iy, wy = _cubic_axis(rows, inv, oy, h)
    ix, wx = _cubic_axis(cols, inv, ox, w)
    r0, r1, c0, c1 = int(iy.min()), int(iy.max()) + 1, int(ix.min()), int(ix.max()) + 1
    sub = img[r0:r1, c0:c1].astype(np.float32)
    if as_float and img.dtype.kind in "ui":
        sub *= np.float32(1.0 / np.iinfo(img.dtype).max)
    iy, ix = iy - r0, ix - c0
    ey = (slice(None),) + (None,) * (sub.ndim - 1)
    rws = sum(sub[iy[:, k]] * wy[:, k][ey] for k in range(4))
    ex = (None, slice(None)) + (None,) * (sub.ndim - 2)
    return sum(rws[:, ix[:, k]] * wx[:, k][ex] for k in range(4))


def _resample(img: np.ndarray, rows: np.ndarray, cols: np.ndarray, inv: float, oy: float, ox: float, order: int,
              as_float: bool = False) -> np.ndarray:
    """The similarity warp as two separable 1-D resamplings (a scale and a shift need no 2-D
    interpolation: bilinear is separable, nearest is an index), edges repeated like ndimage's
    mode 'nearest'. The output `rows` × `cols` of the later frame (a box is np.arange of its
    sides, as for _resample_cubic). as_float: a uint8 image comes back float32 in 0..1, unrounded."""
    h, w = img.shape[:2]
    iy0, iy1, wy = _axis(rows, inv, oy, h, order)
    ix0, ix1, wx = _axis(cols, inv, ox, w, order)
    # Only the source columns (and rows) the output needs are read: a crop of a large image
    # costs what the crop costs.
    c0, c1 = int(ix0.min()), int((ix0 if ix1 is None else ix1).max()) + 1
    r0, r1 = int(iy0.min()), int((iy0 if iy1 is None else iy1).max()) + 1
    img = img[r0:r1, c0:c1]
    iy0, ix0 = iy0 - r0, ix0 - c0
    if order == 0:
        return img[iy0][:, ix0]
    iy1, ix1 = iy1 - r0, ix1 - c0
    ft = np.float64 if img.dtype == np.float64 else np.float32
    ey = (slice(None),) + (None,) * (img.ndim - 1)
    ex = (None, slice(None)) + (None,) * (img.ndim - 2)
    # a + (b - a)·wy, then left + (right - left)·wx, in place on the fresh gathers (the same float
    # operations in the same order, a quarter of the time of the expression's temporaries and of a
    # fancy index along axis 1: np.take)
    a, b = img[iy0].astype(ft, copy=False), img[iy1].astype(ft, copy=False)   # fancy indexing copied them
    b -= a
    b *= wy[ey].astype(ft)
    b += a
    left, out = np.take(b, ix0, axis=1), np.take(b, ix1, axis=1)
    out -= left
    out *= wx[ex].astype(ft)
    out += left
    if img.dtype == bool:
        return out >= 0.5
    if img.dtype.kind in "ui":
        if as_float:
            return out * ft(1.0 / np.iinfo(img.dtype).max)
        return np.clip(np.round(out), np.iinfo(img.dtype).min, np.iinfo(img.dtype).max).astype(img.dtype)
    return out.astype(img.dtype, copy=False)


def warp_float(img: np.ndarray, alignment: Alignment, box: tuple[int, int, int, int] | None = None,
               rows: np.ndarray | None = None, cols: np.ndarray | None = None, order: int = 1) -> np.ndarray:
    """Like `warp` with order 1, but a uint8 image comes back float32 in 0..1 (no rounding), and
    only a `box` (y0, y1, x0, x1) or a grid of output `rows` × `cols` of the later frame is made.
    order=3: Keys' cubic kernel (a paste's pixels; not clipped)."""
    img = np.asarray(img)
    h, w = img.shape[:2]
    if alignment.is_identity:       # no interpolation: a crop (or a gather) and a scale
        if rows is not None or cols is not None:
            out = img[np.arange(h) if rows is None else rows][:, np.arange(w) if cols is None else cols]
        else:
            y0, y1, x0, x1 = box if box is not None else (0, h, 0, w)
            out = img[y0:y1, x0:x1]
        scale = 1.0 / np.iinfo(img.dtype).max if img.dtype.kind in "ui" else 1.0
        ft = np.float64 if img.dtype == np.float64 else np.float32
        return out.astype(ft) * ft(scale) if scale != 1.0 else out.astype(ft)
    inv, oy, ox = _source_coords(alignment, (h, w))
    if order == 3:
        if rows is None and cols is None:
            y0, y1, x0, x1 = box if box is not None else (0, h, 0, w)
            rows, cols = np.arange(y0, y1), np.arange(x0, x1)
        rows = np.arange(h) if rows is None else rows
        cols = np.arange(w) if cols is None else cols
        return _resample_cubic(img, rows, cols, inv, oy, ox, as_float=True)
    if rows is not None or cols is not None:
        rows = np.arange(h) if rows is None else rows
        cols = np.arange(w) if cols is None else cols
        return _resample(img, rows, cols, inv, oy, ox, 1, as_float=True)
    y0, y1, x0, x1 = box if box is not None else (0, h, 0, w)
    return _resample(img, np.arange(y0, y1), np.arange(x0, x1), inv, oy, ox, 1, as_float=True)


def _warp_box(img: np.ndarray, alignment: Alignment, box: tuple[int, int, int, int], order: int) -> np.ndarray:
    """warp(img, alignment)[y0:y1, x0:x1]: only the source rows and columns it needs are read."""
    y0, y1, x0, x1 = (int(v) for v in box)
    inv, oy, ox = _source_coords(alignment, img.shape[:2])
    return _resample(img, np.arange(y0, y1), np.arange(x0, x1), inv, oy, ox, order)


def support(alignment: Alignment, shape: tuple[int, int], margin: float = 0.5) -> np.ndarray:
    """bool H×W of the later frame: pixels whose source lies inside the earlier image (a zoom-out
    or shift exposes a border the earlier image never showed)."""
    h, w = shape
    if alignment.is_identity:
        return np.ones(shape, bool)
    inv, oy, ox = _source_coords(alignment, shape)
    ys = np.arange(h) * inv + oy
    xs = np.arange(w) * inv + ox
    okx = (xs >= -margin) & (xs <= w - 1 + margin)
    oky = (ys >= -margin) & (ys <= h - 1 + margin)
    return oky[:, None] & okx[None, :]


# --------------------------------------------------------------------------- estimation

def grey(img: Any) -> np.ndarray:
    """float32 H×W luminance-ish grey (channel mean) in 0..1 of an image array (uint8 or 0..1)."""
    a = np.asarray(img)
    scale = 1.0 / 255.0 if a.dtype == np.uint8 else 1.0
    if a.ndim == 3:
        if a.shape[2] >= 3:   # a matmul with (1/3, 1/3, 1/3): one pass, no float RGB copy
            return (a[:, :, :3] @ np.full(3, scale / 3.0, np.float32)).astype(np.float32, copy=False)
        a = a[:, :, 0]
    return (a.astype(np.float32) * np.float32(scale)) if scale != 1.0 else a.astype(np.float32, copy=False)


def resize_grey(g: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    """(g with its longer side at most max_side (area average), the factor small / full)."""
    h, w = g.shape
    f = min(1.0, max_side / float(max(h, w)))
    if f >= 1.0:
        return g, 1.0
    nw, nh = max(MIN_GREY_SIDE, round(w * f)), max(MIN_GREY_SIDE, round(h * f))
    small = np.asarray(Image.fromarray(g).resize((nw, nh), Image.BOX), np.float32)
    return small, nw / float(w)


@dataclass(frozen=True, eq=False)
class BlockMotion:
    """Per-block displacement of `cur` relative to `ref` (pixels of the grid's image): centres
    (N×2, x y), displacements (N×2, dx dy), peak heights (N,), and which blocks were textured."""

    centres: np.ndarray
    shifts: np.ndarray
    peaks: np.ndarray
    textured: np.ndarray
    block: int


def block_motion(ref: np.ndarray, cur: np.ndarray, block: int = BLOCK, stride: int | None = None,
                 ignore: np.ndarray | None = None, min_std: float = MIN_BLOCK_STD) -> BlockMotion:
    """Phase-correlation displacement of each block of `cur` against `ref` (grey H×W of one
    size). Blocks with too little texture (std < min_std in either image) or mostly inside
    `ignore` are marked untextured (their shift is 0 and means nothing). All blocks are cut out
    as strided views and transformed in one batched FFT."""
    h, w = ref.shape
    stride = stride or block
    if h < block or w < block:
        block = max(MIN_BLOCK_SIDE, min(h, w))
        stride = block
    if h < block or w < block:      # smaller than one block: nothing to measure
        return BlockMotion(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0), np.zeros(0, bool), block)
    view_a = np.lib.stride_tricks.sliding_window_view(np.asarray(ref, np.float32), (block, block))[::stride, ::stride]
    view_b = np.lib.stride_tricks.sliding_window_view(np.asarray(cur, np.float32), (block, block))[::stride, ::stride]
    ny, nx = view_a.shape[:2]
    A = view_a.reshape(ny * nx, block, block)
    B = view_b.reshape(ny * nx, block, block)
    sa, sb = A.std(axis=(1, 2)), B.std(axis=(1, 2))
    tex = (sa >= min_std) & (sb >= min_std)
    if ignore is not None:
        iv = np.lib.stride_tricks.sliding_window_view(np.asarray(ignore, np.float32), (block, block))[::stride, ::stride]
        tex &= iv.reshape(ny * nx, -1).mean(axis=1) <= BLOCK_IGNORE_SHARE
    yy, xx = np.meshgrid(np.arange(ny) * stride, np.arange(nx) * stride, indexing="ij")
    cents = np.stack([xx.ravel() + (block - 1) / 2.0, yy.ravel() + (block - 1) / 2.0], axis=1)
    win = np.outer(np.hanning(block), np.hanning(block)).astype(np.float32)
    fa = np.fft.rfft2((A - A.mean(axis=(1, 2), keepdims=True)) * win)
    fb = np.fft.rfft2((B - B.mean(axis=(1, 2), keepdims=True)) * win)
    cross = fb * np.conj(fa)
    cross /= np.maximum(np.abs(cross), 1e-9)
    corr = np.fft.irfft2(cross, s=(block, block))
    n = len(corr)
    flat = corr.reshape(n, -1)
    idx = flat.argmax(axis=1)
    py, px = np.unravel_index(idx, (block, block))
    peaks = flat[np.arange(n), idx]
    i = np.arange(n)
    c0 = corr[i, py, px]
    sy = _parabola_v(corr[i, (py - 1) % block, px], c0, corr[i, (py + 1) % block, px])
    sx = _parabola_v(corr[i, py, (px - 1) % block], c0, corr[i, py, (px + 1) % block])
    dy, dx = py + sy, px + sx
    shifts = np.stack([np.where(dx > block / 2, dx - block, dx), np.where(dy > block / 2, dy - block, dy)], axis=1)
    return BlockMotion(cents.astype(np.float64), shifts.astype(np.float64), peaks, tex, block)


def _parabola_v(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Sub-pixel offset of a peak b between neighbours a and c (vectorised, clipped to ±0.5)."""
    d = a - 2 * b + c
    safe = np.where(np.abs(d) < 1e-12, 1.0, d)
    return np.where(np.abs(d) < 1e-12, 0.0, np.clip(0.5 * (a - c) / safe, -0.5, 0.5))


def _fit_lsq(c: np.ndarray, s: np.ndarray, centre: tuple[float, float]) -> tuple[float, float, float]:
    """Least-squares (a = scale - 1, dx, dy) with s = a · (c - centre) + d."""
    rx, ry = c[:, 0] - centre[0], c[:, 1] - centre[1]
    n = len(c)
    M = np.zeros((2 * n, 3))
    M[:n, 0], M[:n, 1] = rx, 1.0
    M[n:, 0], M[n:, 2] = ry, 1.0
    rhs = np.concatenate([s[:, 0], s[:, 1]])
    sol, *_ = np.linalg.lstsq(M, rhs, rcond=None)
    return float(sol[0]), float(sol[1]), float(sol[2])


def _model_err(c, s, centre, p) -> np.ndarray:
    a, dx, dy = p
    px = a * (c[:, 0] - centre[0]) + dx
    py = a * (c[:, 1] - centre[1]) + dy
    return np.hypot(s[:, 0] - px, s[:, 1] - py)


def fit_similarity(bm: BlockMotion, shape: tuple[int, int], inlier_px: float = INLIER_PX,
                   iters: int = 200, seed: int = 0) -> tuple[tuple[float, float, float], np.ndarray]:
    """Robust (a = scale - 1, dx, dy) from block motion (RANSAC on pairs of textured blocks, then
    least squares on the inliers): ((a, dx, dy), bool inlier mask over the blocks)."""
    h, w = shape
    centre = ((w - 1) / 2.0, (h - 1) / 2.0)
    idx = np.nonzero(bm.textured)[0]
    inl = np.zeros(len(bm.shifts), bool)
    if len(idx) < 2:
        return (0.0, 0.0, 0.0), inl
    c, s = bm.centres[idx], bm.shifts[idx]
    rng = np.random.default_rng(seed)
    best, best_n = None, -1
    # The plain median translation is the first hypothesis (most edits are local).
    hyps = [(0.0, float(np.median(s[:, 0])), float(np.median(s[:, 1])))]
    for _ in range(iters):
        i, j = rng.choice(len(idx), 2, replace=False)
        if np.hypot(*(c[i] - c[j])) < 1e-6:
            continue
        hyps.append(_fit_lsq(c[[i, j]], s[[i, j]], centre))
    for p in hyps:
        n = int((_model_err(c, s, centre, p) <= inlier_px).sum())
        if n > best_n:
            best, best_n = p, n
    keep = _model_err(c, s, centre, best) <= inlier_px
    for _ in range(2):
        if keep.sum() >= 2:
            best = _fit_lsq(c[keep], s[keep], centre)
            keep = _model_err(c, s, centre, best) <= inlier_px
    inl[idx[keep]] = True
    return best, inl


def _refine(ref: np.ndarray, cur: np.ndarray, a: Alignment, ignore: np.ndarray | None,
            rounds: int) -> Alignment:
    """Gauss-Newton refinement of (scale, dx, dy) with a grey gain/offset and Tukey weights, at
    the grid of `ref`/`cur` (one size); `a` in that grid's pixels."""
    h, w = ref.shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    step = max(1, int(np.sqrt(h * w / REFINE_SAMPLES)))
    sl = (slice(None, None, step), slice(None, None, step))
    yy, xx = np.mgrid[0:h:step, 0:w:step].astype(np.float32)     # the sampled pixels' coordinates
    ry, rx = yy - cy, xx - cx
    cur_s = cur[sl]
    for _ in range(rounds):
        wp = warp(ref, a)
        sup = support(a, (h, w), margin=-1.0)
        use = sup if ignore is None else sup & ~ignore
        u_s = use[sl]
        W, C = wp[sl][u_s], cur_s[u_s]
        if W.size < REFINE_MIN_PIXELS:
            return a
        # the gradients on the sampled pixels only (np.gradient of the sampled rows along x, of the
        # sampled columns along y: the same differences as of the whole picture, a fraction of it)
        Ix = np.gradient(wp[::step], axis=1)[:, ::step][u_s]
        Iy = np.gradient(wp[:, ::step], axis=0)[::step][u_s]
        Rx, Ry = rx[u_s], ry[u_s]
        # cur ~ g · W(p - delta(p)) + b, delta = (da · rx + ddx, da · ry + ddy): linear in (g, b, g·delta...).
        M = np.stack([W, np.ones_like(W), -(Ix * Rx + Iy * Ry), -Ix, -Iy], axis=1).astype(np.float64)
        wts = None
        for k in range(IRLS_ROUNDS):      # IRLS with Tukey weights on the normal equations (5×5)
            Mw = M if wts is None else M * wts[:, None]     # the first round's weights are all 1
            sol = np.linalg.lstsq(Mw.T @ M, Mw.T @ C, rcond=None)[0]
            if k == IRLS_ROUNDS - 1:    # the last round's weights would not be used
                break
            r = C - M @ sol
            sig = MAD_TO_SIGMA * np.median(np.abs(r - np.median(r))) + 1e-6
            u = r / (TUKEY_C * sig)
            wts = np.where(np.abs(u) < 1, (1 - u ** 2) ** 2, 0.0)
        g = sol[0] if abs(sol[0]) > 1e-3 else 1.0
        da, ddx, ddy = sol[2] / g, sol[3] / g, sol[4] / g
        corr = Alignment(float(ddx), float(ddy), float(1.0 + da))
        a = a.compose(corr)
        if max(abs(ddx), abs(ddy), abs(da) * max(h, w)) < REFINE_DONE_PX:
            break
    return a


def residual_motion(ref: np.ndarray, cur: np.ndarray, block: int = BLOCK, ignore: np.ndarray | None = None,
                    min_eig: float = 2e-6) -> tuple[np.ndarray, np.ndarray]:
    """Per block (a regular grid of block×block tiles, row-major), the length of the residual
    displacement of `cur` against `ref` (grey H×W of one size, already aligned) by one
    Lucas-Kanade step with a per-block gain and offset removed, and whether the block had the
    texture to measure it (both directions: smallest eigenvalue of the structure tensor per pixel
    above min_eig; not mostly in `ignore`). Returns (lengths, textured) as flat arrays."""
    ux, uy, tex = residual_flow(ref, cur, block, ignore, min_eig)
    return np.where(tex, np.hypot(ux, uy), 0.0), tex


def residual_flow(ref: np.ndarray, cur: np.ndarray, block: int = BLOCK, ignore: np.ndarray | None = None,
                  min_eig: float = 2e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`residual_motion`'s displacement as a vector per block: (dx, dy, textured), flat arrays in
    the blocks' row-major order (dx, dy are 0 where the block had no texture)."""
    h, w = ref.shape
    nby, nbx = h // block, w // block
    if nby == 0 or nbx == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, bool)
    H, W = nby * block, nbx * block

    def tiles(x):
        return x[:H, :W].reshape(nby, block, nbx, block).transpose(0, 2, 1, 3).reshape(nby * nbx, -1)

    a, b = tiles(ref).astype(np.float64), tiles(cur).astype(np.float64)
    gy, gx = np.gradient(ref)
    gx, gy = tiles(gx).astype(np.float64), tiles(gy).astype(np.float64)
    a0, b0 = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    gain = np.sqrt((b0 ** 2).mean(1) / np.maximum((a0 ** 2).mean(1), 1e-12))
    it = b0 - a0 * gain[:, None]
    sxx, syy, sxy = (gx * gx).mean(1), (gy * gy).mean(1), (gx * gy).mean(1)
    bx, by = -(gx * it).mean(1) / np.maximum(gain, 1e-6), -(gy * it).mean(1) / np.maximum(gain, 1e-6)
    det = sxx * syy - sxy ** 2
    tr = sxx + syy
    lam_min = tr / 2 - np.sqrt(np.maximum(tr ** 2 / 4 - det, 0))
    tex = lam_min > min_eig
    safe = np.where(np.abs(det) > 1e-18, det, 1.0)
    ux = (syy * bx - sxy * by) / safe
    uy = (sxx * by - sxy * bx) / safe
    if ignore is not None:
        tex &= tiles(np.asarray(ignore, np.float32)).mean(1) <= BLOCK_IGNORE_SHARE
    return np.where(tex, ux, 0.0), np.where(tex, uy, 0.0), tex


def fit_refused(al: Alignment, size: tuple[int, int]) -> str:
    """Why a fitted alignment (pixels of `size` = (w, h)) is no editor's drift but a re-framing
    ('' = it may be one): a motion beyond MAX_SHIFT_FRAC of the shorter side, or a warped previous
    frame covering less than MIN_COVERAGE of the picture."""
    w, h = size
    motion = al.max_motion(size)
    if motion > MAX_SHIFT_FRAC * min(w, h):
        return f"a motion of {motion:.1f} px is over {MAX_SHIFT_FRAC:.0%} of the picture's shorter side"
    # the previous frame [0, w) × [0, h) lands on scale · (p - c) + c + d; its overlap with the picture
    cx, cy = (w - 1) / 2.0, (h - 1) / 2.0
    x0, x1 = (np.array([-0.5, w - 0.5]) - cx) * al.scale + cx + al.dx
    y0, y1 = (np.array([-0.5, h - 0.5]) - cy) * al.scale + cy + al.dy
    cover = max(0.0, min(x1, w - 0.5) - max(x0, -0.5)) * max(0.0, min(y1, h - 0.5) - max(y0, -0.5)) / (w * h)
    if cover < MIN_COVERAGE:
        return f"the previous frame covers {cover:.0%} of the picture (limit {MIN_COVERAGE:.0%})"
    return ""


def _block_match(ref: np.ndarray, cur: np.ndarray, block: int) -> np.ndarray:
    """Per block×block tile (row-major, as residual_flow's), the normalised cross-correlation of
    `ref` and `cur` (a gain and an offset per block do not change it)."""
    h, w = cur.shape
    nby, nbx = h // block, w // block

    def tiles(x):
        t = x[:nby * block, :nbx * block].reshape(nby, block, nbx, block).transpose(0, 2, 1, 3).reshape(nby * nbx, -1)
        t = t - t.mean(1, keepdims=True)
        return t / np.maximum(np.sqrt((t * t).sum(1, keepdims=True)), 1e-9)

    return (tiles(ref) * tiles(cur)).sum(1)


def beats_null(ref: np.ndarray, warped: np.ndarray, cur: np.ndarray, a: Alignment,
               ignore: np.ndarray | None) -> tuple[str, str]:
    """The null-model test of the fit `a` (`warped` = grey `ref` warped by it into `cur`'s frame, one
    size): on the textured blocks mostly inside the warped frame (and not mostly in `ignore`), the
    upper quartile of the blocks' match (normalised correlation) of `cur` against the fit, against
    the unaligned pair (`ref` itself) and against an unrelated pair (`ref` rolled by half its size).
    Returns (what holds, why): ("fit", "") when the fit matches no worse than the unaligned pair
    (ID_SLACK) and beats the unrelated one by NULL_MARGIN; ("identity", why) when the unaligned pair
    matches better and itself beats the unrelated one (the fit is wrong, the frame was kept);
    ("none", why) when neither beats the unrelated pair. Too few blocks to judge: ("fit", "")."""
    h, w = cur.shape
    nby, nbx = h // BLOCK, w // BLOCK
    if nby * nbx < MIN_BLOCKS:
        return "fit", ""

    def tile_mean(x):
        return x[:nby * BLOCK, :nbx * BLOCK].reshape(nby, BLOCK, nbx, BLOCK).mean(axis=(1, 3)).ravel()

    sq = tile_mean(cur * cur) - tile_mean(cur) ** 2
    # a block partly outside the warped frame (its edge repeated) is judged, as a partly ignored one is
    sourced = tile_mean(support(a, (h, w), margin=-1.0).astype(np.float32)) >= 1.0 - BLOCK_IGNORE_SHARE
    judged = (sq >= MIN_BLOCK_STD ** 2) & sourced
    if ignore is not None:
        judged &= tile_mean(ignore.astype(np.float32)) <= BLOCK_IGNORE_SHARE
    if judged.sum() < MIN_BLOCKS:
        return "fit", ""

    def match(img):
        return float(np.quantile(_block_match(img, cur, BLOCK)[judged], MATCH_QUANTILE))

    fit, unaligned, unrelated = match(warped), match(ref), match(np.roll(ref, (h // 2, w // 2), axis=(0, 1)))
    best, choice = (fit, "fit") if fit >= unaligned - ID_SLACK else (unaligned, "identity")
    if best < unrelated + NULL_MARGIN:
        return "none", (f"it matches the picture no better than an unrelated pair does (correlation {best:.2f} "
                        f"against {unrelated:.2f}, margin {NULL_MARGIN})")
    if choice == "identity":
        return "identity", f"the unaligned pair matches better than the fit (correlation {unaligned:.2f} against {fit:.2f})"
    return "fit", ""


def _scaled(a: Alignment, f: float, method: str, residual: float, inliers: float,
            size: tuple[int, int] | None) -> Alignment:
    """An alignment measured on a grid f times the full size, in full-size pixels (the centre
    maps to the centre, so only the translation scales)."""
    return Alignment(a.dx / f, a.dy / f, a.scale, residual, method, inliers, size)


def estimate_alignment(prev: Any, cur: Any, ignore: np.ndarray | None = None,
                       snap_px: float = SNAP_PX) -> Alignment:
    """The alignment of `cur` (I_t) relative to `prev` (I_{t-1}): arrays of one size (H×W×C
    uint8 or float 0..1, or grey H×W). `ignore`: optional bool H×W of pixels to leave out (known
    changes). See the module docstring for the method; the result is in pixels of that size.
    Images smaller than 2×2 or holding NaN are refused (InputError)."""
    g0, g1 = grey(finite_pixels(prev, "I_(t-1)")), grey(finite_pixels(cur, "I_t"))
    if g0.shape != g1.shape:
        raise InputError(f"alignment needs images of one size, got {g0.shape} and {g1.shape}; "
                         "resize I_t to the history's size first")
    h, w = g0.shape
    size = (w, h)
    # Coarse: block motion + robust similarity.
    c0, f = resize_grey(g0, COARSE_SIDE)
    c1, _ = resize_grey(g1, COARSE_SIDE)
    c0, c1 = ndimage.gaussian_filter(c0, COARSE_BLUR), ndimage.gaussian_filter(c1, COARSE_BLUR)
    ig_c = None if ignore is None else (resize_grey(np.asarray(ignore, np.float32), COARSE_SIDE)[0] > 0.5)
    bm = block_motion(c0, c1, BLOCK, BLOCK // 2, ig_c)
    n_tex = int(bm.textured.sum())
    if n_tex < MIN_BLOCKS:
        return Alignment(method="identity (too little texture to align)", inliers=0.0, size=size)
    (ca, cdx, cdy), inl = fit_similarity(bm, c0.shape)
    coarse_inliers = float(inl.sum()) / n_tex
    a_c = Alignment(cdx, cdy, 1.0 + ca)
    # Fine: Gauss-Newton at up to FINE_SIDE, then the block residual on that grid.
    f0, ff = resize_grey(g0, FINE_SIDE)
    f1, _ = resize_grey(g1, FINE_SIDE)
    f0, f1 = ndimage.gaussian_filter(f0, FINE_BLUR), ndimage.gaussian_filter(f1, FINE_BLUR)
    ig_f = None if ignore is None else (resize_grey(np.asarray(ignore, np.float32), FINE_SIDE)[0] > 0.5)
    ig_f0 = ig_f        # the caller's known changes only: the null test must not leave out what the fit fails on
    a_f = Alignment(a_c.dx * ff / f, a_c.dy * ff / f, a_c.scale)
    if a_c.max_motion(c0.shape[::-1]) < FAST_MOTION_PX and coarse_inliers >= FAST_INLIERS:
        # Identity fast path (most editors keep the frame): one Gauss-Newton step about the
        # identity needs no resampling; when it too finds less than snap_px, so be it.
        step = _refine(f0, f1, IDENTITY, ig_f, rounds=1)
        if _scaled(step, ff, METHOD, 0.0, 1.0, size).max_motion(size) < snap_px:
            return Alignment(residual_px=0.0, method="identity", inliers=coarse_inliers, size=size)
    a_f = _refine(f0, f1, a_f, ig_f, rounds=FIRST_ROUNDS)
    # Second pass without the edit: pixels the fitted motion leaves far off (and 3 px around
    # them: their gradients would explain part of the change as motion) are left out.
    r = np.abs(f1 - warp(f0, a_f))
    med = float(np.median(r))
    sig = MAD_TO_SIGMA * float(np.median(np.abs(r - med))) + 1e-4
    out = ndimage.maximum_filter((r > med + EDIT_K * sig).astype(np.uint8), EDIT_GROW) > 0
    if 0.0 < out.mean() < EDIT_MAX_SHARE:
        ig_f = out if ig_f is None else (ig_f | out)
        a_f = _refine(f0, f1, a_f, ig_f, rounds=SECOND_ROUNDS)
    w0 = warp(f0, a_f)
    d, tex = residual_motion(w0, f1, BLOCK, ig_f)
    agree = tex & (d <= FIT_AGREE_PX)
    inliers = float(agree.sum()) / max(1, int(tex.sum()))
    residual = float(np.median(d[agree])) / ff if agree.any() else float("inf")
    full = _scaled(a_f, ff, METHOD, residual if np.isfinite(residual) else UNMEASURED_RESIDUAL_PX, min(inliers, 1.0),
                   size)
    if inliers < MIN_INLIERS:
        return Alignment(method="identity (no consistent motion: the editor re-rendered)", residual_px=full.residual_px,
                         inliers=inliers, size=size)
    held, null_why = beats_null(f0, w0, f1, a_f, ig_f0)
    refused = fit_refused(full, size) or (null_why if held == "none" else "")
    if refused:
        return Alignment(method=f"{UNTRUSTED} {refused})", residual_px=full.residual_px, inliers=inliers, size=size)
    if held == "identity":      # the editor kept the frame; the fit followed the edit or noise
        return Alignment(residual_px=full.residual_px, method=f"identity (no motion: {null_why})", inliers=inliers,
                         size=size)
    if full.max_motion(size) < snap_px:
        return Alignment(residual_px=full.residual_px, method="identity", inliers=full.inliers, size=size)
    return full


def at_full_size(al: Alignment, f: float, size: tuple[int, int]) -> Alignment:
    """An alignment measured at a working size f times `size` (w, h), in `size`'s pixels (the
    translation and the residual scale; the zoom and the method do not)."""
    return Alignment(al.dx / f, al.dy / f, al.scale, al.residual_px / f, al.method, al.inliers, tuple(size))


def alignment_for(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                  cache: AnalysisCache = CACHE) -> Alignment:
    """The alignment I_{t-1} (`prev`) -> I_t (`cur`) at the history's `size` (w, h), kept in
    `cache.alignments` by the two images' digests: Reveal Composite, the Drift Guard, the change
    record and History Append estimate it once per turn."""
    hit = cache.alignments.get((prev.digest, cur.digest, tuple(size)))
    if hit is not None:
        return hit
    work = working_size(size)
    if prev.size == tuple(work) and cur.size == tuple(work):
        al = estimate_alignment(prev.array, cur.array)      # grey straight from uint8: no float RGB copies
    else:
        al = estimate_alignment(work_float(prev, work, cache), work_float(cur, work, cache))
    if work != tuple(size):
        al = at_full_size(al, work[0] / float(size[0]), size)
    remember_alignment(prev, cur, size, al, cache)
    return al


def remember_alignment(prev: StoredImage, cur: StoredImage, size: tuple[int, int], al: Alignment,
                       cache: AnalysisCache = CACHE) -> None:
    """Record a known alignment prev -> cur (e.g. Reveal Composite's output keeps the edit's
    geometry), so the turn's change record reuses it."""
    cache.alignments.put((prev.digest, cur.digest, tuple(size)), al)
