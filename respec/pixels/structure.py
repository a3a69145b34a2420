"""The scene's structure between two images an editor re-rendered: a smooth motion field on top of
the turn's alignment, measured on edges (beyond the paper).

Some editors re-draw texture on every call (fur, foliage, water) and warp the frame a little more
than one similarity explains: Qwen-Image-Edit's original release zooms by about 1 % with a
different scale on each axis and shifts by 4-5 px; LongCat changes a 16:9 picture's aspect. The
turn's alignment (respec/pixels/alignment.py: one translation + uniform scale, judged on fine
texture) then leaves a few pixels of motion and calls itself untrusted. What stayed is the scene's
structure: the outlines of the cat, the sign, the trees. `structure_warp` measures it:

1. Both images' grey at a working size (longer side <= WORK_SIDE), the edit warped by the turn's
   alignment into the previous image's frame; both turned into edge strength (the gradient
   magnitude of the grey blurred by EDGE_SIGMA px), which a re-drawn texture's fine detail and an
   editor's colour shift barely move.
2. Coarse to fine (PASSES: 64-px blocks, then 32-px blocks, half overlapping), each block's
   displacement by phase correlation; a block is kept when its correlation peak is clear and it
   agrees with the median of its neighbours within NEIGHBOUR_AGREE_PX (robust: an edit, a new pose or a
   flat area gives a block that disagrees or no peak); the kept ones are spread into a smooth field
   by normalised convolution. Each pass measures what the previous one left.
3. The field is capped at MAX_FIELD (a share of the shorter side): a larger motion is not an
   editor's drift but a new pose or a re-framing, which no field should paste over.

`StructureWarp.sample` reads the edit on the previous image's pixel grid (bilinear), only on the
box asked for. `held` says how much of the picture's textured structure agrees after the warp
(blurred-grey correlation >= HELD_NCC per block): the Drift Guard pastes with it only when the
scene held.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import warnings

import numpy as np
from PIL import Image
from scipy import ndimage

from .alignment import Alignment, block_motion, grey, resize_grey, warp
from .flow import estimate_flow

WORK_SIDE = 384                   # the field is measured with the longer side at most this (px)
EDGE_SIGMA = 1.5                  # px: the grey is blurred by this before its gradient (edge strength)
PASSES = ((64, 32), (32, 16))     # (block, stride) at the working size
MIN_PEAK = 0.15                   # a phase-correlation peak below this is no measurement
NEIGHBOUR_AGREE_PX = 1.5          # a block farther than this from its neighbours' median is an outlier
MAX_FIELD = 0.03                  # the field is capped at this share of the shorter side
HELD_BLOCK = 32                   # the structure check's blocks (working px) ...
HELD_SIGMA = 2.0                  # ... compare the grey blurred by this ...
HELD_NCC = 0.6                    # ... and hold from this correlation ...
HELD_TEXTURE_STD = 0.02           # ... unless flatter than this (grey std) in both images: then not judged ...
HELD_IGNORE_SHARE = 0.3           # ... or more than this share of the block lies in the ignored region
SPREAD_PASSES = ((4.0, 1e-4), (1.0, 0.05))   # (sigma in blocks, density floor) of the field's normalised
                                  # convolution: the wide fill first, the near one over it
FLOW_SIDE = 512                   # the local motion field is measured with the longer side at most this ...
FLOW_PAD = 0.1                    # ... around the edit grown by this share of the side (where its pixels are pasted)
FLOW_MIN_WORK_SIDE = 16           # ... at a working size of at least this many px per side
BENT_FRAC = 0.02                  # a field departing from one affine map by more than this share of the shorter side ...
BENT_SHARE = 0.01                 # ... over more than this share of the picture: part of the scene moved on its own


@dataclass(frozen=True, eq=False)
class StructureWarp:
    """Where each pixel of the previous image's frame is seen in the edit: the turn's alignment
    (previous -> edit) followed by a residual displacement field (`dx`, `dy`: edit-frame pixels at
    full size, sampled on the working grid; `factor` = working size / full size). `held` is the
    share of textured blocks whose structure agrees after it, `field_px` the field's largest length
    (full-size px)."""

    alignment: Alignment
    dx: np.ndarray
    dy: np.ndarray
    factor: float
    shape: tuple[int, int]
    held: float
    field_px: float
    flow_dx: np.ndarray | None = None     # the local motion field on top (full size, previous frame), when measured
    flow_dy: np.ndarray | None = None
    flow: dict | None = None              # its record (respec/pixels/flow.py), or why it was not used

    @cached_property
    def _field_full(self) -> tuple[np.ndarray, np.ndarray]:
        """(dy, dx) of the smooth field at every full-size pixel (a bilinear resize, read once)."""
        h, w = self.shape
        return tuple(np.asarray(Image.fromarray(np.asarray(v, np.float32)).resize((w, h), Image.BILINEAR))
                     for v in (self.dy, self.dx))

    @property
    def moved(self) -> float:
        """The share of the textured blocks whose structure did not hold."""
        return 1.0 - self.held

    @cached_property
    def bent(self) -> float:
        """The share of the picture where the field departs from its best affine map by more than
        BENT_FRAC of the shorter side. An editor's zoom that differs per axis, or a shear, is affine
        and leaves this near 0; a part of the scene that moved where the rest did not (an arm in a new
        pose) does not."""
        h, w = self.dx.shape
        if h * w <= 4:
            return 0.0
        yy, xx = np.mgrid[0:h, 0:w]
        A = np.stack([np.ones(h * w), yy.ravel() / h, xx.ravel() / w], axis=1)
        off = [v.ravel() - A @ np.linalg.lstsq(A, v.ravel().astype(np.float64), rcond=None)[0]
               for v in (self.dx, self.dy)]
        return float(np.mean(np.hypot(*off) > BENT_FRAC * min(self.shape)))

    def coords(self, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) in the edit's full-size frame of the previous frame's pixels in `box`
        (y0, y1, x0, x1)."""
        y0, y1, x0, x1 = box
        h, w = self.shape
        yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
        # on the pixel grid the smooth field is an image resize and the local motion a crop (the
        # field at p rather than p + d(p): it changes by far less than a pixel over d's 1-2 px)
        fy, fx = (v[y0:y1, x0:x1] for v in self._field_full)
        if self.flow_dx is not None:
            yy, xx = yy + self.flow_dy[y0:y1, x0:x1], xx + self.flow_dx[y0:y1, x0:x1]
        a = self.alignment
        cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
        return a.scale * (yy - cy) + cy + a.dy + fy, a.scale * (xx - cx) + cx + a.dx + fx

    def coords_of(self, yy: np.ndarray, xx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cols) in the edit's full-size frame of previous-frame positions (yy, xx)."""
        h, w = self.shape
        cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
        if self.flow_dx is not None:        # p + d(p): the local motion, in the previous frame
            at = [np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            yy = yy + ndimage.map_coordinates(self.flow_dy, at, order=1, mode="nearest")
            xx = xx + ndimage.map_coordinates(self.flow_dx, at, order=1, mode="nearest")
        a = self.alignment
        f = self.factor
        gy, gx = (yy + 0.5) * f - 0.5, (xx + 0.5) * f - 0.5
        fy = ndimage.map_coordinates(self.dy, [gy, gx], order=1, mode="nearest")
        fx = ndimage.map_coordinates(self.dx, [gy, gx], order=1, mode="nearest")
        return a.scale * (yy - cy) + cy + a.dy + fy, a.scale * (xx - cx) + cx + a.dx + fx

    def sample(self, image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
        """The edit `image` (uint8 or float H×W×C, the edit's frame) on the previous frame's pixels
        of `box`: float32, 0..1 for uint8."""
        return self.sample_with_support(image, box)[0]

    def sample_with_support(self, image: np.ndarray, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
        """(`sample`, `support`) of one reading of the coordinates."""
        img = np.asarray(image)
        rows, cols = self.coords(box)
        h, w = self.shape
        ok = (rows >= -0.5) & (rows <= h - 0.5) & (cols >= -0.5) & (cols <= w - 0.5)
        scale = 1.0 / 255.0 if img.dtype == np.uint8 else 1.0
        chans = img.shape[2] if img.ndim == 3 else 1
        src = img.reshape(img.shape[0], img.shape[1], chans)
        # read from the channel as it is (a uint8 channel is not copied to float for every box: the
        # interpolation reads its values as they are and writes float32)
        out = np.stack([ndimage.map_coordinates(src[..., c], [rows, cols], order=1, mode="nearest",
                                                output=np.float32) for c in range(chans)], axis=2)
        out *= np.float32(scale)
        return (out if img.ndim == 3 else out[..., 0]), ok

    def sample_coarse(self, image: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The edit `image` (uint8 H×W×3, the edit's frame, full size) read on a coarse grid of the
        previous frame of `shape` (h, w) (each coarse pixel a box of full-size pixels): (float32
        h×w×3 in 0..1, bool where it had a source). The edit is box-downsampled first (no aliasing)."""
        h, w = self.shape
        ch, cw = shape
        fy, fx = ch / float(h), cw / float(w)
        img = np.asarray(image)[..., :3]
        small = np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize((cw, ch), Image.BOX), np.float32) / 255.0
        yy, xx = np.mgrid[0:ch, 0:cw].astype(np.float32)
        rows, cols = self.coords_of((yy + 0.5) / fy - 0.5, (xx + 0.5) / fx - 0.5)
        rows, cols = (rows + 0.5) * fy - 0.5, (cols + 0.5) * fx - 0.5
        out = np.stack([ndimage.map_coordinates(small[..., c], [rows, cols], order=1, mode="nearest")
                        for c in range(3)], axis=2)
        ok = (rows >= -0.5) & (rows <= ch - 0.5) & (cols >= -0.5) & (cols <= cw - 0.5)
        return out, ok

    def support(self, box: tuple[int, int, int, int]) -> np.ndarray:
        """bool mask of `box`: the pixels whose source lies inside the edit."""
        rows, cols = self.coords(box)
        h, w = self.shape
        return (rows >= -0.5) & (rows <= h - 0.5) & (cols >= -0.5) & (cols <= w - 0.5)

    def record(self) -> dict:
        """JSON-able summary for the guard's record."""
        out = {"held": round(self.held, 4), "field_px": round(self.field_px, 2), "bent": round(self.bent, 4)}
        if self.flow is not None:
            out["local_flow"] = self.flow
        return out


def _edges(g: np.ndarray) -> np.ndarray:
    b = ndimage.gaussian_filter(g, EDGE_SIGMA)
    return np.hypot(ndimage.sobel(b, 0), ndimage.sobel(b, 1)).astype(np.float32)


def _pass(A: np.ndarray, B: np.ndarray, block: int, stride: int,
          edit: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pass: per-block displacement of B against A (working px), the robust ones spread into a
    smooth grid: (dx, dy, kept) on the pass's block grid. Blocks mostly inside `edit` are not
    measured (a sign's new text moves the correlation peak: that is the edit, not the frame)."""
    bm = block_motion(A, B, block, stride, ignore=edit)
    ny = (A.shape[0] - block) // stride + 1
    nx = (A.shape[1] - block) // stride + 1
    if ny < 1 or nx < 1 or len(bm.shifts) != ny * nx:
        return np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1), bool)
    sx, sy = bm.shifts[:, 0].reshape(ny, nx), bm.shifts[:, 1].reshape(ny, nx)
    ok = (bm.textured & (bm.peaks > MIN_PEAK)).reshape(ny, nx)
    # the median of each block's measured neighbours (3×3, itself included)
    mx, my = _neighbour_median(sx, ok), _neighbour_median(sy, ok)
    kept = ok & (np.hypot(sx - mx, sy - my) <= NEIGHBOUR_AGREE_PX)
    return _spread(sx, kept), _spread(sy, kept), kept


def _neighbour_median(v: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per grid cell, the median of the `ok` values among its 3×3 neighbours (itself included)."""
    ny, nx = v.shape
    pad = np.pad(np.where(ok, v, np.nan), 1, constant_values=np.nan)
    stack = np.stack([pad[i:i + ny, j:j + nx] for i in range(3) for j in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # a cell with no measured neighbour
        m = np.nanmedian(stack, axis=0)
    return np.where(np.isnan(m), v, m)


def _spread(v: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Normalised convolution of the kept values over the grid (near: 1 block; where none is near,
    4 blocks; where none at all, 0)."""
    w = kept.astype(np.float64)
    out = np.zeros_like(v, dtype=np.float64)
    for sigma, floor in SPREAD_PASSES:      # the wide fill first, the near one over it
        den = ndimage.gaussian_filter(w, sigma, mode="nearest")
        num = ndimage.gaussian_filter(np.where(kept, v, 0.0), sigma, mode="nearest")
        out = np.where(den > floor, num / np.maximum(den, floor), out)
    return out


def _on_pixels(f: np.ndarray, shape: tuple[int, int], block: int, stride: int) -> np.ndarray:
    """A pass's block grid (block centres at stride·i + (block-1)/2) sampled at every pixel."""
    ys = np.clip((np.arange(shape[0]) - (block - 1) / 2.0) / stride, 0, f.shape[0] - 1)
    xs = np.clip((np.arange(shape[1]) - (block - 1) / 2.0) / stride, 0, f.shape[1] - 1)
    Y, X = np.meshgrid(ys, xs, indexing="ij")
    return ndimage.map_coordinates(f, [Y, X], order=1, mode="nearest").astype(np.float32)


def _held(A: np.ndarray, B: np.ndarray, ignore: np.ndarray | None) -> float:
    """The share of textured HELD_BLOCK blocks (not mostly in `ignore`) whose blurred grey correlates
    at HELD_NCC or more."""
    a, b = ndimage.gaussian_filter(A, HELD_SIGMA), ndimage.gaussian_filter(B, HELD_SIGMA)
    n = HELD_BLOCK
    ny, nx = a.shape[0] // n, a.shape[1] // n
    if ny == 0 or nx == 0:
        return 1.0

    def tiles(x):
        return x[:ny * n, :nx * n].reshape(ny, n, nx, n).transpose(0, 2, 1, 3).reshape(ny * nx, -1).astype(np.float64)

    ta, tb = tiles(a), tiles(b)
    da, db = ta - ta.mean(1, keepdims=True), tb - tb.mean(1, keepdims=True)
    sa, sb = np.sqrt((da ** 2).mean(1)), np.sqrt((db ** 2).mean(1))
    judged = np.maximum(sa, sb) >= HELD_TEXTURE_STD
    if ignore is not None:
        judged &= tiles(ignore.astype(np.float32)).mean(1) <= HELD_IGNORE_SHARE
    if not judged.any():
        return 1.0
    ncc = (da * db).mean(1) / np.maximum(sa * sb, 1e-12)
    return float((ncc[judged] >= HELD_NCC).mean())


def plain_warp(alignment: Alignment, shape: tuple[int, int]) -> StructureWarp:
    """The turn's alignment alone as a StructureWarp (no residual field), for `shape` (h, w)."""
    z = np.zeros((2, 2), np.float32)
    return StructureWarp(alignment, z, z, 1.0 / max(1, max(shape)), tuple(shape), 1.0, 0.0)


def structure_warp(previous: np.ndarray, edited: np.ndarray, alignment: Alignment,
                   edit: np.ndarray | None = None) -> StructureWarp:
    """The structure warp previous -> edited (images of one size, uint8 or float; `alignment` the
    turn's, previous -> edited, at that size). `edit`: optional bool mask (previous frame, any
    size) of what the request changed: not measured (the field there is its surroundings'), and left
    out of the `held` share. See the module docstring."""
    g0, f = resize_grey(grey(previous), WORK_SIDE)
    g1, _ = resize_grey(grey(edited), WORK_SIDE)
    h, w = np.asarray(previous).shape[:2]
    small = Alignment(alignment.dx * f, alignment.dy * f, alignment.scale)
    g1w = g1 if small.is_identity else warp(g1, small.inverse())
    A, B0 = _edges(g0), _edges(g1w)
    fy = np.zeros(A.shape, np.float32)
    fx = np.zeros(A.shape, np.float32)
    yy, xx = np.mgrid[0:A.shape[0], 0:A.shape[1]].astype(np.float32)
    B = B0
    cap = MAX_FIELD * min(A.shape)
    ig = None
    if edit is not None:
        ig = np.asarray(Image.fromarray(np.asarray(edit, np.uint8) * 255).resize(A.shape[::-1], Image.BILINEAR)) > 0
    for block, stride in PASSES:
        if min(A.shape) < block:
            continue
        px, py, _ = _pass(A, B, block, stride, ig)
        fx += _on_pixels(px, A.shape, block, stride)
        fy += _on_pixels(py, A.shape, block, stride)
        np.clip(fx, -cap, cap, out=fx)
        np.clip(fy, -cap, cap, out=fy)
        B = ndimage.map_coordinates(B0, [yy + fy, xx + fx], order=1, mode="nearest")
    g1f = ndimage.map_coordinates(g1w, [yy + fy, xx + fx], order=1, mode="nearest")
    held = _held(g0, g1f, ig)
    # a displacement v (working px, previous frame) is s·v/f px in the full-size edit
    k = np.float32(alignment.scale / f)
    return StructureWarp(alignment, fx * k, fy * k, f, (h, w), held, float(np.hypot(fx, fy).max()) / f)


def with_local_flow(sw: StructureWarp, previous: np.ndarray, edited: np.ndarray,
                    edit: np.ndarray | None = None) -> StructureWarp:
    """`sw` refined by the dense local motion field of respec/pixels/flow.py (pyramid Lucas-Kanade,
    forward-backward checked, up to its MAX_FLOW_PX at a working size of FLOW_SIDE): what the
    structure warp's 32-64 px blocks leave, a face warped by a pixel or two. Measured around `edit`
    (bool, previous frame; grown by FLOW_PAD of the side), outside it; used only when the flow
    module calls it usable (else `flow` records why, and the warp is unchanged). Beyond its box the
    field is zero."""
    h, w = sw.shape
    f = min(1.0, FLOW_SIDE / float(max(h, w)))
    shape = (max(FLOW_MIN_WORK_SIDE, round(h * f)), max(FLOW_MIN_WORK_SIDE, round(w * f)))
    small = np.asarray(Image.fromarray(np.ascontiguousarray(np.asarray(previous)[..., :3])).resize(
        (shape[1], shape[0]), Image.BOX), np.float32) / 255.0
    e_small, ok = sw.sample_coarse(edited, shape)
    valid = ok
    if edit is not None:
        valid = ok & ~(np.asarray(Image.fromarray(np.asarray(edit, np.uint8) * 255).resize(
            (shape[1], shape[0]), Image.BILINEAR)) > 0)
    box = None
    if edit is not None and np.asarray(edit).any():      # the field is needed where the edit is pasted
        ys, xs = np.nonzero(np.asarray(Image.fromarray(np.asarray(edit, np.uint8) * 255).resize(
            (shape[1], shape[0]), Image.NEAREST)) > 0)
        pad = round(FLOW_PAD * max(shape))
        box = (max(0, ys.min() - pad), min(shape[0], ys.max() + 1 + pad),
               max(0, xs.min() - pad), min(shape[1], xs.max() + 1 + pad))
    flow = estimate_flow(e_small, small, valid=valid, box=box)
    usable, why = flow.usable()
    if not usable:
        return replace(sw, flow={"used": False, "why": why})
    full = flow.scaled(h / float(shape[0]), (h, w))
    dx = np.zeros((h, w), np.float32)
    dy = np.zeros((h, w), np.float32)
    y0, y1, x0, x1 = full.box
    dx[y0:y1, x0:x1], dy[y0:y1, x0:x1] = full.dx, full.dy
    return replace(sw, flow_dx=dx, flow_dy=dy, flow={"used": True, **flow.record()})
