"""Seams: the composite has no edge along its boundary that neither source has (issue 43).

Where `written` goes from 0 to >0 the composite passes from the fallback's pixels to `old`'s.
Blended without a step, kept = w·old + (1 - w)·fallback, and its gradient is
w·gradold + (1 - w)·gradfallback + (old - fallback)·gradw. The first two terms are never larger than the
larger of the sources' own gradients (the triangle inequality, per channel); the third is the
seam: a colour or brightness difference between the sources, laid down where the weight changes.
So the check compares, on the boundary band, the gradient of `kept` with the larger of the
gradients of `fallback` and `old` at the same place: what exceeds both by more than SEAM_STEP is
an edge neither source has. A run of such places at least SEAM_MIN_CELLS long is a visible line:
a Finding ("seam"). Nothing is mended: a seam is the step's colour, not old content to give back.

It runs on a grid of block means (at most GRID_SIDE cells a side): a step that survives a 4×4
mean at 1024² is one a viewer sees, the noise of an editor's pixels does not, and the check costs a
few milliseconds. A step spread over a wide blend (the multi-band blend's coarse colour) gives a
small gradient per cell and is not a line; the colour check (colour.py) reads colours, not edges.
"""
from __future__ import annotations

import numpy as np
from PIL import Image
from scipy import ndimage

from .values import CheckRead, Composite, Finding

NAME = "seam"
GRID_SIDE = 256          # the grid's longer side at most (cells); the block is the smallest integer that fits
SEAM_STEP = 0.05         # 13/255 per cell of a block-mean gradient beyond both sources': a step a viewer
                         # sees as a line; an editor's noise in a 4×4 mean stays far below it
SOURCE_SLACK = 1.25      # the sources' gradient may be 25 % steeper in kept: a colour fit's gain (<= 1.5 in
                         # Reveal's checks, near 1 on real turns) scales old's edges
SEAM_MIN_CELLS = 8       # a connected run of seam cells this long is a line (1/32 of the grid's side)
WRITTEN_EPS = 1.0 / 255.0  # `written` below this is 0: the fallback's pixel


def block_of(shape: tuple[int, int], side: int = GRID_SIDE) -> int:
    """The block side (px) of the grid for an H×W picture: the smallest with at most `side` cells a side."""
    return max(1, int(np.ceil(max(shape) / side)))


def block_mean(x: np.ndarray, b: int) -> np.ndarray:
    """Means over b×b blocks of a uint8 H×W×3 picture or a float H×W plane (a ragged last block is
    the mean of what it holds), float32 on the picture's 0..255 scale or the plane's own. PIL's box
    reduction: a tenth of numpy's reshaped mean at 1024²."""
    if x.ndim == 3:
        im = Image.fromarray(np.ascontiguousarray(x, np.uint8), "RGB")
    else:
        im = Image.fromarray(np.ascontiguousarray(x, np.float32), "F")
    return np.asarray(im.reduce(b) if b > 1 else im, np.float32)


def block_means_at(x: np.ndarray, b: int, cells: np.ndarray) -> np.ndarray:
    """Means over the b×b blocks of a uint8 H×W×3 picture at the grid cells `cells` (bool, the grid
    of `block_mean`'s whole blocks), 0..1, float32 h×w×3 (0 elsewhere). Only those blocks are read:
    along a boundary that is a thin ring of the picture."""
    hb, wb = x.shape[0] // b, x.shape[1] // b
    cells = cells[:hb, :wb]
    s0, s1, s2 = x.strides
    blocks = np.lib.stride_tricks.as_strided(x, (hb, wb, b, b, 3), (s0 * b, s1 * b, s0, s1, s2), writeable=False)
    ri, ci = np.nonzero(cells)
    out = np.zeros((hb, wb, 3), np.float32)
    out[ri, ci] = blocks[ri, ci].reshape(len(ri), b * b, 3).sum(axis=1, dtype=np.float32) / np.float32(255 * b * b)
    return out


def gradient(x: np.ndarray) -> np.ndarray:
    """Per-cell gradient magnitude of an h×w×3 grid (forward differences, 0 on the last row and
    column), the largest over channels: float32 h×w."""
    out = np.zeros(x.shape[:2], np.float32)
    for ch in range(x.shape[2]):       # channel by channel: numpy's reductions over a last axis of 3 are slow
        p = x[..., ch]
        gx = np.zeros_like(p)
        gy = np.zeros_like(p)
        gx[:, :-1] = p[:, 1:] - p[:, :-1]
        gy[:-1] = p[1:] - p[:-1]
        np.maximum(out, np.sqrt(gx * gx + gy * gy), out=out)
    return out


def boundary_band(written: np.ndarray, b: int) -> np.ndarray:
    """Cells of the b×b grid the composite's boundary crosses (a block whose mean of `written` is
    neither 0 nor 1: it holds both written = 0 and written > 0, or a partly written pixel), grown by
    one cell so a step between blocks is in it. One reduction of the plane: no full-size mask."""
    m = block_mean(written, b)         # (a NaN block compares False: not in the band)
    tol = WRITTEN_EPS / (b * b)       # one pixel's WRITTEN_EPS in the block's mean
    band = (m > tol) & (m < 1.0 - tol)
    return ndimage.binary_dilation(band, np.ones((3, 3), bool)) if band.any() else band


def check_seams(c: Composite) -> CheckRead:
    """The seam check (module docstring): kept's block-mean gradient on the boundary band beyond the
    larger of fallback's and old's (old's only where its frame is valid) by more than SEAM_STEP, in
    a connected run of at least SEAM_MIN_CELLS cells, is a Finding. Only the band's blocks (and their
    right and lower neighbours, for the differences) of the pictures are read."""
    b = block_of(c.kept.shape[:2])
    hb, wb = c.kept.shape[0] // b, c.kept.shape[1] // b
    band = boundary_band(np.asarray(c.written, np.float32), b)[:hb, :wb]
    if not band.any():
        return CheckRead({"band_cells": 0, "seam_cells": 0, "longest": 0, "max_excess": 0.0, "block": b})
    need = band.copy()
    need[:, 1:] |= band[:, :-1]
    need[1:] |= band[:-1]
    g_kept = gradient(block_means_at(c.kept, b, need))
    g_src = gradient(block_means_at(c.fallback, b, need))
    g_old = gradient(block_means_at(c.old, b, need))
    if c.old_valid is not None:
        # old's gradient counts only where its warped frame is whole (frame borders are borders.py's check)
        valid = block_mean(np.asarray(c.old_valid, np.float32), b)[:hb, :wb] >= 1.0
        whole = valid.copy()            # a forward difference reads the cell and its right and lower neighbours
        whole[:, :-1] &= valid[:, 1:]
        whole[:-1] &= valid[1:]
        g_old = np.where(whole, g_old, 0.0)
    excess = np.where(band, g_kept - SOURCE_SLACK * np.maximum(g_src, g_old), 0.0)
    seam = excess > SEAM_STEP
    longest = 0
    if seam.any():
        labels, n = ndimage.label(seam, np.ones((3, 3), bool))
        longest = int(np.bincount(labels.ravel())[1:].max()) if n else 0
    measured = {"band_cells": int(band.sum()), "seam_cells": int(seam.sum()), "longest": longest,
                "max_excess": round(float(excess.max()), 4), "block": b}
    if longest < SEAM_MIN_CELLS:
        return CheckRead(measured)
    return CheckRead(measured, Finding(NAME, f"a new edge along the composite's boundary, {longest} cells of "
                                             f"{b} px long, up to {excess.max() * 255:.0f}/255 steeper than "
                                             "either source there"))
