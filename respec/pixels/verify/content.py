"""What a step's result shows, read once for the checks that look at content (borders.py,
islands.py): where the kept picture holds old content the fallback does not have, where it holds
new content that old does not have, and the pieces of old content with what surrounds them.

The reading is made on a grid whose longer side is at most GRID_SIDE (a box mean), so that it
costs a few hundredths of a second at 1024²:

    d      the content difference |fallback - fit(old)| (largest channel, then a 3×3 mean): `fit`
           is a per-channel gain and offset from old to fallback (a robust fit on an even sample of
           the quieter side of the written edge, where the two sources show one scene), so an
           editor's colour drift is not content
    tau      the level that is content, not drift: median(d) + NOISE_K robust sigmas on the quieter side
           of the written edge (held or not; on the fit's even sample), at least CONTENT_MIN
    S      old content kept: written >= WRITTEN_FROM, d > tau and fit(kept) differs from the fallback
           by tau, where old has pixels
    N      new content kept (the kept edit): written < WRITTEN_FROM, d > tau and kept differs from
           fit(old) by tau, where the fallback has pixels

A piece is one 8-connected component of S; around it a ring RING_PX grid pixels wide (inside the
frame) says what surrounds it: its share of N is how much of it the kept edit surrounds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image
from scipy import ndimage

CROP_MARGIN_FRAC = 0.06  # the checks read the box around the written edge grown by this share of the shorter side
CROP_MIN_PX = 32        # ... at least this many px (the ring, the rim's window, the drift beside the edit)
GRID_SIDE = 512         # the checks read the pictures with the longer side at most this: at 1024² a 2 px rim
                        # is still a 1 px line, and the reading costs ~0.03 s
NOISE_K = 4.0           # content, not drift: d above median + 4 robust sigmas (as the change masks' tau) ...
CONTENT_MIN = 24 / 255  # ... and above this: an editor's drift and JPEG stay under ~15/255 after the colour fit,
                        # an object's rim (a hat brim, a leaf) is 30/255 and more
WRITTEN_FROM = 0.5      # a pixel holds old content where the written weight reaches this (half of a seam)
FIT_STEP = 4            # grid px: the colour fit old -> fallback reads every 4th pixel each way (~16k at 512²)
MIN_FIT_PX = 64         # with fewer such pixels the fit is the identity
FIT_GAIN = (0.8, 1.25)  # the fit is an editor's drift, not a new picture: gains within this (a 5 % per call
FIT_BIAS = 0.1          # drift over a few calls), offsets within ±this (0..1): a new background is content
RING_PX = 2             # grid px: a piece's ring (what surrounds it) is this wide
EDGE_PX = 1             # grid px: a piece within this of the frame's edge touches it
THIN_PX = 2             # grid px: a piece that an erosion by this many px removes is thin (at most ~4 grid px wide)


@dataclass(frozen=True, eq=False)
class Pieces:
    """The pieces of old content kept (S's components), one row per label 1..n: `area` (grid px),
    `ring` (ring px inside the frame), `ring_new` (ring px of new content), `edge` (px touching the
    frame's edge), `thin` (an erosion by THIN_PX removes it)."""

    labels: np.ndarray
    area: np.ndarray
    ring: np.ndarray
    ring_new: np.ndarray
    edge: np.ndarray
    thin: np.ndarray

    @property
    def surround(self) -> np.ndarray:
        """The share of each piece's ring that is new content (the kept edit around it)."""
        return self.ring_new / np.maximum(self.ring, 1)


@dataclass(frozen=True, eq=False)
class ContentRead:
    """A Composite read on the grid (see the module docstring): the grid's factor, the difference
    d and its level tau, old content kept (S), new content kept (N), the written weight on the grid,
    and S's pieces, all on the box around the written edge."""

    factor: int
    shape: tuple[int, int]              # the grid's (H, W): the box's, read on the grid
    box: tuple[int, int, int, int]      # (y0, y1, x0, x1): the part of the picture read (full-size px)
    full: tuple[int, int]               # the picture's (H, W)
    d: np.ndarray
    tau: float
    old_kept: np.ndarray
    new_kept: np.ndarray
    written: np.ndarray
    pieces: Pieces | None
    has_edge: bool = True               # False: the step kept old everywhere or nowhere (nothing read)
    valid: np.ndarray | None = None     # where both old and the fallback hold real pixels (None: everywhere)

    def record(self) -> dict:
        """JSON-able: the grid's factor, tau (0..255) and the shares of old and new content kept."""
        return {"grid_factor": self.factor, "content_level": round(self.tau * 255.0, 2),
                "old_kept_share": round(float(self.old_kept.mean()), 6),
                "new_kept_share": round(float(self.new_kept.mean()), 6)}

    def at_grid(self, mask: np.ndarray) -> np.ndarray:
        """A full-size bool mask on the grid (the box's part): set where any of a cell's pixels is."""
        y0, y1, x0, x1 = self.box
        crop = mask[y0:y1, x0:x1]
        return crop.copy() if self.factor == 1 else on_grid(crop, self.factor) > 0.0

    def at_full(self, mask: np.ndarray) -> np.ndarray:
        """A grid mask at the picture's full size (nearest; False beyond the box)."""
        y0, y1, x0, x1 = self.box
        out = np.zeros(self.full, bool)
        if self.factor == 1:
            out[y0:y1, x0:x1] = mask
        else:
            out[y0:y1, x0:x1] = np.asarray(Image.fromarray(mask).resize((x1 - x0, y1 - y0), Image.NEAREST), bool)
        return out

    @property
    def frame_edges(self) -> tuple[bool, bool, bool, bool]:
        """Whether the box's top, bottom, left and right sides are the frame's edges."""
        y0, y1, x0, x1 = self.box
        return y0 == 0, y1 == self.full[0], x0 == 0, x1 == self.full[1]


def edit_box(written: np.ndarray, margin: int) -> tuple[int, int, int, int] | None:
    """(y0, y1, x0, x1): the box around the written edge (where written crosses WRITTEN_FROM between
    neighbours) grown by `margin` px, within the picture; None when there is no such edge (the step
    kept old everywhere, or nothing of it)."""
    held = written >= WRITTEN_FROM
    rows = np.zeros(held.shape[0], bool)
    cols = np.zeros(held.shape[1], bool)
    dv = held[1:] != held[:-1]
    dh = held[:, 1:] != held[:, :-1]
    rows[1:] |= dv.any(axis=1)
    rows |= dh.any(axis=1)
    cols |= dv.any(axis=0)
    cols[1:] |= dh.any(axis=0)
    if not rows.any():
        return None
    ys, xs = np.nonzero(rows)[0], np.nonzero(cols)[0]
    h, w = held.shape
    return (max(0, int(ys[0]) - margin), min(h, int(ys[-1]) + 1 + margin),
            max(0, int(xs[0]) - margin), min(w, int(xs[-1]) + 1 + margin))


def grid_factor(shape: tuple[int, int]) -> int:
    """The integer factor that brings the longer side of `shape` to at most GRID_SIDE."""
    return max(1, math.ceil(max(shape) / GRID_SIDE))


def on_grid(a: np.ndarray, factor: int) -> np.ndarray:
    """A uint8 picture (H×W×3 -> float 0..1) or a float/bool plane (-> float32) on the grid (box mean)."""
    h, w = a.shape[:2]
    size = (math.ceil(w / factor), math.ceil(h / factor))
    if a.ndim == 3:
        im = Image.fromarray(np.ascontiguousarray(a))
        if factor > 1:
            im = im.resize(size, Image.BOX)
        return np.asarray(im, np.float32) / 255.0
    plane = np.ascontiguousarray(a, np.float32)
    if factor == 1:
        return plane
    return np.asarray(Image.fromarray(plane, "F").resize(size, Image.BOX), np.float32)


def colour_fit(old: np.ndarray, fallback: np.ndarray, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(gain, bias) per channel mapping `old` (float H×W×3) onto `fallback`, fitted on the `sample`
    pixels three times (each refit on the better half of the last: what the edit changed is not
    drift; the editor's drift covers the whole picture, the edit a part), within FIT_GAIN and
    FIT_BIAS. The identity when fewer than MIN_FIT_PX pixels are sampled."""
    gain, bias = np.ones(3, np.float32), np.zeros(3, np.float32)
    if int(sample.sum()) < MIN_FIT_PX:
        return gain, bias
    x, y = old[sample], fallback[sample]
    for ch in range(3):
        keep = np.ones(len(x), bool)
        for _ in range(3):
            xs, ys = x[keep, ch], y[keep, ch]
            var = float(xs.var())
            g = float(np.clip(((xs - xs.mean()) * (ys - ys.mean())).mean() / var, *FIT_GAIN)) if var > 1e-6 else 1.0
            gain[ch], bias[ch] = g, float(np.clip(ys.mean() - g * xs.mean(), -FIT_BIAS, FIT_BIAS))
            r = np.abs(y[:, ch] - (gain[ch] * x[:, ch] + bias[ch]))
            keep = r <= np.median(r)
    return gain, bias


def noise_level(vals: np.ndarray) -> float:
    """median + NOISE_K robust sigmas (1.4826 MAD) of a difference's values."""
    med = float(np.median(vals))
    return med + NOISE_K * 1.4826 * float(np.median(np.abs(vals - med)))


def largest(a: np.ndarray) -> np.ndarray:
    """The largest of an H×W×3 array's channels (H×W)."""
    return np.maximum(np.maximum(a[..., 0], a[..., 1]), a[..., 2])


def read_content(c) -> ContentRead:
    """Read a Composite `c` on the grid (the module docstring): d, tau, S, N and S's pieces, on the
    box around the written edge (CROP_MARGIN_FRAC beyond it): a piece of old content the kept edit
    surrounds or runs along lies at that edge, and the cost follows the edit's size, not the picture's."""
    full = c.kept.shape[:2]
    f = grid_factor(full)
    box = edit_box(c.written, max(CROP_MIN_PX, round(CROP_MARGIN_FRAC * min(full)), (RING_PX + 2) * f))
    if box is None:     # old everywhere, or nowhere: nothing kept from one side can surround the other's
        z = np.zeros((1, 1), bool)
        return ContentRead(f, (1, 1), (0, 1, 0, 1), full, np.zeros((1, 1), np.float32), CONTENT_MIN, z, z,
                           np.zeros((1, 1), np.float32), pieces_of(z, z, (False,) * 4), False)
    y0, y1, x0, x1 = box
    sl = (slice(y0, y1), slice(x0, x1))
    old, fb, w = on_grid(c.old[sl], f), on_grid(c.fallback[sl], f), on_grid(c.written[sl], f)
    gshape = w.shape
    old_ok = np.ones(gshape, bool) if c.old_valid is None else on_grid(c.old_valid[sl], f) >= 0.999
    fb_ok = np.ones(gshape, bool) if c.fallback_valid is None else on_grid(c.fallback_valid[sl], f) >= 0.999
    held = w >= WRITTEN_FROM
    both = old_ok & fb_ok
    sample = np.zeros(gshape, bool)
    sample[::FIT_STEP, ::FIT_STEP] = True
    # the drift is read on the quieter side of the written edge: the side the step kept from old
    # (the guard: where the editor only drifted) or the side it kept from the fallback (Reveal: the
    # editor's picture around the paste; the undo: I_{t-1} beyond the region); the other side holds
    # the edit, which is content
    best = None
    for side in (held, ~held):
        on = sample & both & side
        if int(on.sum()) < MIN_FIT_PX:
            continue
        gain, bias = colour_fit(old, fb, on)
        level = noise_level(largest(np.abs(fb[on] - (old[on] * gain + bias))))
        if best is None or level < best[0]:
            best = (level, gain, bias)
    _, gain, bias = best if best is not None else (0.0, np.ones(3, np.float32), np.zeros(3, np.float32))
    old = old * gain + bias
    d = ndimage.uniform_filter(largest(np.abs(fb - old)), size=3, mode="nearest")
    levels = [noise_level(d[sample & both & side]) for side in (held, ~held)
              if int((sample & both & side).sum()) >= MIN_FIT_PX]
    tau = max(CONTENT_MIN, min(levels) if levels else noise_level(d.ravel()))
    big = d > tau
    # the 3×3 mean carries a difference a pixel across the written edge: each side must show it itself
    kept = on_grid(c.kept[sl], f)
    S = held & big & old_ok & (largest(np.abs(kept * gain + bias - fb)) > tau)   # held: kept is in old's colours
    N = ~held & big & fb_ok & (largest(np.abs(kept - old)) > tau)
    read = ContentRead(f, gshape, box, full, d, tau, S, N, w, None, valid=both)
    return replace(read, pieces=pieces_of(S, N, read.frame_edges))


CUT_LEVEL = CONTENT_MIN  # a cut: old and the fallback differ by at least the content floor on both sides of the
                         # written edge (an editor's drift after the fit stays under ~15/255; tau itself would miss
                         # the re-posed subjects: their tau is 50-120/255, the quieter side holding content too)
CUT_REACH = 2            # grid px: the new side of a cut is read this far into the kept edit


@dataclass(frozen=True, eq=False)
class EditPieces:
    """The pieces of the kept edit (8-connected components of written < WRITTEN_FROM), one row per
    label 1..n: `area` (grid px), `edge` (the old side's px along the piece's written edge) and
    `cut` (of those, the px where old and the fallback differ by CUT_LEVEL on both
    sides: the written edge runs through content the two pictures do not share; not along a
    thin piece of old content or a strip at the frame's edge, which a mend joins)."""

    labels: np.ndarray
    area: np.ndarray
    edge: np.ndarray
    cut: np.ndarray

    @property
    def cut_share(self) -> np.ndarray:
        """The share of each piece's written edge that is cut."""
        return self.cut / np.maximum(self.edge, 1)


def edit_pieces(read: ContentRead) -> EditPieces:
    """The kept edit's pieces and how much of each one's edge cuts through content (EditPieces).
    A kept edit that holds what the editor changed meets the old picture where the two agree; a
    patch of a re-drawn subject meets it where they differ (a block of a new face on the old one)."""
    held = read.written >= WRITTEN_FROM
    eight = np.ones((3, 3), bool)
    labels, n = ndimage.label(~held, eight)
    if n == 0:
        z = np.zeros(1, np.int64)
        return EditPieces(labels, z, z, z)
    area = np.bincount(labels.ravel(), minlength=n + 1)
    near = ndimage.grey_dilation(labels, size=(3, 3))           # the old side's px beside each piece
    edge = held & (near > 0)
    if read.valid is not None:
        edge &= read.valid
    # the 3×3 mean carries a difference a pixel across the written edge: each side is read from its
    # second pixel on, within CUT_REACH of the edge
    inner_new = ~held & ~ndimage.binary_dilation(held, eight)
    inner_old = held & ~ndimage.binary_dilation(~held, eight)
    reach = 2 * CUT_REACH + 1
    new_side = ndimage.maximum_filter(np.where(inner_new, read.d, 0.0), reach)
    old_side = ndimage.maximum_filter(np.where(inner_old, read.d, 0.0), reach)
    cut = edge & (old_side > CUT_LEVEL) & (new_side > CUT_LEVEL)
    p = read.pieces
    if p is not None and len(p.area) > 1:
        # a thin piece of old content, or one at the frame's edge, is a rim or a strip that a mend
        # joins to the edit (islands.py, borders.py): the edge along it is not a cut
        owned = np.nonzero(p.thin | (p.edge > 0))[0]
        cut &= ~np.isin(p.labels, owned[owned > 0])
    return EditPieces(labels, area, np.bincount(near[edge], minlength=n + 1),
                      np.bincount(near[cut], minlength=n + 1))


def pieces_of(S: np.ndarray, N: np.ndarray, edges: tuple[bool, bool, bool, bool]) -> Pieces:
    """S's 8-connected pieces with what surrounds each (Pieces' fields); `edges`: which of the
    grid's top, bottom, left and right sides are the frame's edges."""
    labels, n = ndimage.label(S, np.ones((3, 3), bool))
    if n == 0:
        z = np.zeros(1, np.int64)
        return Pieces(labels, z, z, z, z, np.zeros(1, bool))
    area = np.bincount(labels.ravel(), minlength=n + 1)
    grown = ndimage.grey_dilation(labels, size=(2 * RING_PX + 1, 2 * RING_PX + 1))
    ring = (labels == 0) & (grown > 0)
    ring_all = np.bincount(grown[ring], minlength=n + 1)
    ring_new = np.bincount(grown[ring & N], minlength=n + 1)
    border = np.zeros(S.shape, bool)
    top, bottom, left, right = edges
    border[:EDGE_PX] |= top
    border[-EDGE_PX:] |= bottom
    border[:, :EDGE_PX] |= left
    border[:, -EDGE_PX:] |= right
    edge = np.bincount(labels[border & S], minlength=n + 1)
    core = ndimage.binary_erosion(S, np.ones((3, 3), bool), iterations=THIN_PX, border_value=1)
    thin = np.bincount(labels[core], minlength=n + 1) == 0
    return Pieces(labels, area, ring_all, ring_new, edge, thin)


OUTLINE_PX = 2          # full-size px: an outline is looked for this far outside the kept edit (an object's
                        # anti-aliased rim is 1-2 px) ...
BEYOND_IN, BEYOND_OUT = 4, 8   # ... and compared with the difference 4-8 px further out (the background's drift)
RIM_WINDOW = 17         # full-size px: both are averaged along the edge over windows this wide (a faint rim is
                        # a broken chain of pixels; averaged along it, it stands out of the drift beyond)
RIM_PIXEL_MIN = 8 / 255  # a rim pixel differs from the fallback by at least this ...
RIM_LEVEL = 4 / 255     # ... the rim's windowed mean by at least this (a brim ring left at 512²: 6-8/255) ...
OUTLINE_RATIO = 2.0     # ... and this many times the windowed difference beyond it (drift differs alike on both)
OUTLINE_LEN_FRAC = 0.025  # a rim runs at least this share of the shorter side along the edge (a brim ring at 512²
                          # shows over ~20 px of its ~70 where it is faintest; the drift's odd pixels a few)
RIM_BRIDGE = 2          # full-size px: rim pixels this close belong to one run (a faint rim is broken)
RIM_EDGE_RATIO = 9.0    # old has an edge the fallback has not: its squared Sobel gradient is this many times the
                        # fallback's (3× the magnitude): an editor's blur weakens an edge by less; a removed
                        # object's rim against a flat background has next to none in the fallback


def rim_outline(c) -> np.ndarray:
    """bool H×W (full size): the rims of old content left along the kept edit's edge. On the band
    OUTLINE_PX wide just outside the edit (where old is written), the pixels where old has an edge
    the fallback has not (old's squared grey gradient is RIM_EDGE_RATIO times the fallback's) and
    that differ from the fallback by RIM_PIXEL_MIN; averaged along the edge (RIM_WINDOW), their
    difference reaches RIM_LEVEL and OUTLINE_RATIO times the difference BEYOND_IN..BEYOND_OUT px
    further out; runs of them (gaps up to RIM_BRIDGE bridged) at least OUTLINE_LEN_FRAC of the
    shorter side long, with the fainter pixels (half of RIM_PIXEL_MIN) of the same run; not where
    that line of old content goes on beyond BEYOND_OUT (`continuing`: an object beside the edit, a
    lamp's pole). A faint brim ring, one pixel wide, that the grid's box mean would dilute below tau."""
    h, w = c.written.shape
    out = np.zeros((h, w), bool)
    read = c.content
    if not read.has_edge:
        return out
    y0, y1, x0, x1 = read.box
    sl = (slice(y0, y1), slice(x0, x1))
    held_c = c.written[sl] >= WRITTEN_FROM
    if held_c.all() or not held_c.any():
        return out
    # the city-block distance from the kept edit (one pass: the bands below are its level sets)
    dist = ndimage.distance_transform_cdt(held_c, metric="taxicab")
    near = held_c & (dist <= OUTLINE_PX)
    beyond = (dist > BEYOND_IN) & (dist <= BEYOND_OUT)
    kept, fb = c.kept[sl].astype(np.int16), c.fallback[sl].astype(np.int16)
    dk = largest(np.abs(kept - fb)).astype(np.float32) / 255.0
    old_edge = gradient(c.old[sl]) > RIM_EDGE_RATIO * gradient(c.fallback[sl])
    own = near & old_edge & (dk >= RIM_PIXEL_MIN)
    if c.old_valid is not None:
        own &= c.old_valid[sl]
    if not own.any():
        return out
    rim_level = windowed(dk * own, near)
    beyond_level = windowed(dk * beyond, beyond)
    rim = own & (rim_level >= RIM_LEVEL) & (rim_level >= OUTLINE_RATIO * beyond_level)
    labels, n = ndimage.label(ndimage.binary_dilation(rim, iterations=RIM_BRIDGE) & near, np.ones((3, 3), bool))
    if n == 0:
        return out
    length = np.bincount(labels[rim], minlength=n + 1)
    long_ = np.nonzero(length >= OUTLINE_LEN_FRAC * min(h, w))[0]
    runs = np.isin(labels, long_[long_ > 0]) & rim
    if runs.any():
        runs &= ~continuing(held_c & old_edge & (dk >= RIM_PIXEL_MIN), runs, dist)
    if runs.any():
        # the whole rim is mended: its fainter pixels (half the pixel limit) along the same run of the
        # edge too, not only where it stood out of the drift
        faint = near & old_edge & (dk >= RIM_PIXEL_MIN / 2)
        along, _ = ndimage.label(ndimage.binary_dilation(faint, iterations=RIM_BRIDGE) & near, np.ones((3, 3), bool))
        ids = np.unique(along[runs])
        out[sl] = runs | (faint & np.isin(along, ids[ids > 0]))
    return out


def continuing(lines: np.ndarray, runs: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """The pixels of `runs` whose line of old content (`lines`: old has an edge the fallback has
    not, 8-connected) reaches beyond BEYOND_OUT px from the kept edit: an object that goes on (a
    lamp's pole beside the edit), not the rim a removed object left along it."""
    labels, n = ndimage.label(lines | runs, np.ones((3, 3), bool))
    ids = np.unique(labels[runs])
    ids = ids[ids > 0]
    if len(ids) == 0:
        return np.zeros(runs.shape, bool)
    far = np.asarray(ndimage.maximum(dist, labels, ids)) > BEYOND_OUT
    return np.isin(labels, ids[far]) & runs


def windowed(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """The mean of `values` over the pixels `where` within RIM_WINDOW (0 where none)."""
    num = ndimage.uniform_filter(np.asarray(values, np.float32), RIM_WINDOW)
    den = ndimage.uniform_filter(where.astype(np.float32), RIM_WINDOW)
    return np.where(den > 1e-6, num / np.maximum(den, 1e-6), 0.0)


def gradient(rgb: np.ndarray) -> np.ndarray:
    """The grey gradient magnitude (Sobel, squared: only compared) of a uint8 H×W×3 picture."""
    g = rgb[..., 0].astype(np.float32) + rgb[..., 1] + rgb[..., 2]
    gy, gx = ndimage.sobel(g, 0), ndimage.sobel(g, 1)
    return gy * gy + gx * gx
