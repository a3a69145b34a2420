"""Pixel provenance: which turns changed which pixels (beyond the paper).

The paper asks a VLM to re-read the whole history to guess which past image still shows hidden
content. The history itself knows: each turn t has a change mask C_t between I_{t-1} and I_t,
and together they say, for every pixel, which turns changed it.

How C_t is computed (`change_mask`), robust to an editor's global drift:

1. Both images at one size: the history's (I_0's). A turn of another size is resized
   (bilinear), so every mask of a history lines up.
2. A per-channel affine colour transform T (I_t ≈ gain · I_{t-1} + bias) is fitted on the whole
   image by least squares, then refitted on the pixels whose residual lies within INLIER_K robust
   standard deviations (three rounds). A brightness / contrast / white-balance drift of the whole
   image is absorbed by T and is no change. The fit breaks down only when the edit covers about
   half the image or more (the inliers are then the edit).
3. The residual r = RMS over channels of |I_t - T(I_{t-1})|, averaged over 3×3 pixels (an
   editor's VAE round trip adds pixel noise that is not a change; the mean cuts it threefold),
   thresholded at median + K · MAD_TO_SIGMA · MAD of the averaged residual: the median absolute
   deviation is a noise scale that the changed pixels barely move while they cover less than
   half the image. The threshold never drops below `min_delta` (a lossless editor has MAD = 0:
   quantisation must not count). A pixel must also exceed half the threshold on its own, so the
   average does not spread a change's edge one pixel outwards.
4. Clean-up: an opening drops isolated noisy pixels, a closing fills small gaps (square
   structuring elements: separable min/max filters, fast at any radius), and connected
   components smaller than `min_area` of the image are dropped.

What it misses (by construction): a change with the colour of what it covers (a white box on a
white wall) leaves no residual; a change that is an affine colour map of the whole image (a
"make it darker" turn) is absorbed by T; an edit over half the image or more confuses the fit.

The masks are stored with their turn (History Append records them; `Turn.masks["change"]`) as
L images (255 = changed). `provenance_of(history)` gathers them, computing any that are
missing (in-graph histories, turns of stores written before masks existed).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from . import provenance_index
from .alignment import IDENTITY, Alignment, alignment_for, at_full_size, compose_all, estimate_alignment, support, warp
from .analysis_cache import CACHE
from .colour_fit import FIT_SAMPLES, ColourFit, fit_colour, grey_of, residual, robust_scale, sample_grid, smooth
from .masks import clean_mask, dilate, history_size
from .work_images import as_float_rgb, working_size
from ..errors import InputError
from ..history import CHANGE, History, StoredImage, TurnMask
from ..images import as_rgb, finite_array

METHOD = "drift-robust-v2"   # recorded in every mask's info: what computed it (v2: aligned, stability)
STABILITY_SIDE = 512          # the stability measure works with the longer side at most this ...
STABILITY_BLOCK = 16          # ... on blocks of this many pixels there
STABLE_NCC = 0.8              # a textured block whose structure correlates less than this after alignment moved
TEXTURE_STD = 0.015           # a block whose grey std (blurred) is below this in both images is flat ...
FLAT_DELTA = 0.03             # ... and stable when its mean agrees within this after the colour fit
NOISE_FLOOR = 16.0 / 255.0    # fixed floor: outside the change mask a residual (3×3 mean) above it is a change
RERENDER_SHARE = 0.3          # more than this share of the pixels outside the change mask unstable: a re-render
TEXTURED_HELD = 0.6           # ... or fewer than this share of the textured blocks held (a redrawn subject on
TEXTURED_MIN_BLOCKS = 8       #     a flat backdrop: the flat blocks hold whatever happened), given this many
JUDGED_SHARE = 0.25           # a stability block is judged when at least this share of its pixels is unchanged
OVER_FLOOR_SHARE = 0.25       # a block whose unchanged pixels exceed NOISE_FLOOR on more than this share moved


@dataclass(frozen=True)
class ChangeParams:
    """Settings of `change_mask` (the defaults are what History Append records)."""

    k: float = 4.0                  # threshold: median + k robust sigmas of the residual
    min_delta: float = 6.0 / 255.0  # and never below this RMS difference (0..1 scale)
    smooth_size: int = 3            # mean filter on the residual (pixels); 0 or 1: none
    open_radius: int | None = None  # None: max(1, min side / 256)
    close_radius: int | None = None # None: twice the opening radius
    min_area: float = 2e-4          # components smaller than this fraction of the image go

    def radii(self, shape: tuple[int, int]) -> tuple[int, int]:
        """(opening, closing) radii in pixels for an image of `shape` (H, W)."""
        o = self.open_radius if self.open_radius is not None else max(1, round(min(shape) / 256))
        c = self.close_radius if self.close_radius is not None else 2 * o
        return int(o), int(c)


DEFAULT_PARAMS = ChangeParams()


@dataclass(frozen=True, eq=False)
class ChangeResult:
    """What `change_mask` found: the mask (bool H×W at the history's size) and how."""

    mask: np.ndarray
    fit: ColourFit
    threshold: float
    resized_from: tuple[int, int] | None = None   # (w, h) of I_t when it was resized
    params: ChangeParams = field(default=DEFAULT_PARAMS)
    alignment: Alignment = IDENTITY                # I_{t-1} -> I_t (the mask is in I_t's frame)
    stability: "Stability | None" = None
    working_size: tuple[int, int] | None = None    # (w, h) analysed at, when below the history's size
    raw_residual: np.ndarray | None = field(default=None, repr=False)   # per-pixel residual (not recorded)
    editor_blur_px: float = 0.0                    # the softening of I_t that was matched before comparing

    @property
    def fraction(self) -> float:
        """The share of the image's pixels the mask marks changed."""
        return float(self.mask.mean()) if self.mask.size else 0.0

    def info(self) -> dict:
        """JSON-able record kept beside the stored mask."""
        h, w = self.mask.shape
        d = {"method": METHOD, "size": [w, h], "fraction": round(self.fraction, 6),
             "threshold": round(self.threshold, 6), "k": self.params.k, **self.fit.info()}
        if self.resized_from is not None:
            d["resized_from"] = list(self.resized_from)
        if self.working_size is not None:
            d["working_size"] = list(self.working_size)
        d["alignment"] = self.alignment.record()
        if self.editor_blur_px:
            d["editor_blur_px"] = self.editor_blur_px
        if self.stability is not None:
            d.update(self.stability.info())
        return d

    def turn_mask(self) -> TurnMask:
        """The mask as a TurnMask (L image, 255 = changed) to append with the turn."""
        return TurnMask.from_mask(self.mask, self.info())


def change_mask(prev: Any, cur: Any, size: tuple[int, int] | None = None,
                params: ChangeParams = DEFAULT_PARAMS, align: bool = True,
                alignment: Alignment | None = None) -> ChangeResult:
    """The change mask C_t between I_{t-1} (`prev`) and I_t (`cur`), robust to global colour
    drift and to a zoom / shift of the frame (see the module docstring). `size` = (width, height)
    to compare at (default: prev's). align: estimate the alignment (False: assume none);
    `alignment`: a known one (at `size`) instead. Images above WORK_PIXELS are analysed at a
    working resolution and the mask upsampled (nearest) to `size`."""
    prev_img = prev.array if isinstance(prev, StoredImage) else prev
    size = tuple(size) if size is not None else as_rgb(prev_img).size
    cur_size = as_rgb(cur.array if isinstance(cur, StoredImage) else cur).size
    work = working_size(size)
    a = as_float_rgb(prev, work)
    b = as_float_rgb(cur, work)
    f = work[0] / float(size[0])
    if alignment is not None:
        al = Alignment(alignment.dx * f, alignment.dy * f, alignment.scale, alignment.residual_px * f,
                       alignment.method, alignment.inliers, work)
    else:
        al = estimate_alignment(a, b) if align else IDENTITY
    res = change_of(a, b, params, al)
    if work != tuple(size):
        m = np.asarray(Image.fromarray(res.mask).resize(tuple(size), Image.NEAREST), bool)
        m.flags.writeable = False
        res = replace(res, mask=m, alignment=at_full_size(al, f, size), working_size=work, raw_residual=None)
    return res if cur_size == size else replace(res, resized_from=cur_size)


def change_of(a: np.ndarray, b: np.ndarray, params: ChangeParams = DEFAULT_PARAMS,
              alignment: Alignment = IDENTITY, warped: bool = False) -> ChangeResult:
    """`change_mask` on float H×W×3 images of one size (0..1); a given `alignment` (a -> b) warps
    `a` into b's frame first (warped=True: `a` already is), and pixels b shows that `a` never did
    (a zoom-out's border) are left out of the mask (they are recorded as unstable instead)."""
    a, b = finite_array(a, "change_of's first image"), finite_array(b, "change_of's second image")
    sup = None
    if not alignment.is_identity:
        if not warped:
            a = warp(a, alignment)
        sup = support(alignment, a.shape[:2])
    fit = fit_colour(a, b, use=sup)
    sigma = editor_blur(a, b, fit)
    if sigma > 0:   # the editor softened the whole picture: compare like with like (a drift, not a change)
        a = ndimage.gaussian_filter(np.asarray(a, np.float32), (sigma, sigma, 0), mode="nearest")
    raw = residual(a, b, fit)
    r = smooth(raw, params.smooth_size)
    if sup is None:
        sample = r[sample_grid(r.shape, FIT_SAMPLES)]
    else:
        v = r[sup]
        sample = v[::max(1, v.size // FIT_SAMPLES)]
    med, sig = robust_scale(sample)
    threshold = max(med + params.k * sig, params.min_delta)
    o, c = params.radii(r.shape)
    hit = (r > threshold) & (raw > threshold / 2)
    if sup is not None:
        hit &= sup
    mask = clean_mask(hit, o, c, params.min_area)
    mask.flags.writeable = False
    stab = stability(a, b, fit, mask, sup, r)
    return ChangeResult(mask, fit, float(threshold), None, params, alignment, stab, raw_residual=raw,
                        editor_blur_px=sigma)


BLUR_STEPS = (0.5, 0.75, 1.0, 1.5)   # px: the softenings an editor's call is tested for (one call to a few)
BLUR_SAMPLES = 1024                  # textured sample points the test compares
BLUR_QUANTILE = 0.9                  # the residual quantile compared: edges (a blur shows there; the median of
                                     # a lossless editor's residual is 0 whatever the blur)
BLUR_GAIN = 0.85                     # a softening is taken when it lowers that quantile to this share


def editor_blur(a: np.ndarray, b: np.ndarray, fit: ColourFit) -> float:
    """The Gaussian sigma (0 or one of BLUR_STEPS) by which `b` is softer than the aligned `a`:
    on the textured half of an even grid of points (where a blur shows), the 90th percentile of
    the RMS residual of b against fit(a blurred) on each point's own 13×13 patch, over the points
    some softening explains (the edit's points, whose smallest residual is an outlier, are left
    out); a sigma is taken only when it lowers that to BLUR_GAIN of the unblurred one. A
    sharpening, a re-render or JPEG (which keeps strong edges) finds none."""
    h, w = a.shape[:2]
    r = 6
    if h <= 4 * r or w <= 4 * r:
        return 0.0
    step = max(1, int(np.sqrt((h - 2 * r) * (w - 2 * r) / (2.0 * BLUR_SAMPLES))))
    ys, xs = np.meshgrid(np.arange(r + 1, h - r - 1, step), np.arange(r + 1, w - r - 1, step), indexing="ij")
    ys, xs = ys.ravel(), xs.ravel()
    g = grey_of(a[ys[:, None] + np.array([-1, 0, 1])[None, :], xs[:, None]])       # vertical neighbours
    g2 = grey_of(a[ys[:, None], xs[:, None] + np.array([-1, 0, 1])[None, :]])      # horizontal neighbours
    grad = np.abs(g[:, 2] - g[:, 0]) + np.abs(g2[:, 2] - g2[:, 0])
    keep = grad >= np.median(grad)
    if keep.sum() < 32 or float(np.median(grad[keep])) < 0.01:
        return 0.0
    ys, xs = ys[keep], xs[keep]
    off = np.arange(-r, r + 1)
    patches = np.asarray(a, np.float32)[ys[:, None, None] + off[None, :, None], xs[:, None, None] + off[None, None, :]]
    target = np.asarray(b, np.float32)[ys, xs]

    def err(p):
        d = fit.apply(p) - target
        return np.sqrt(np.einsum("nc,nc->n", d, d) / 3.0)

    sigmas = (0.0,) + BLUR_STEPS
    errs = np.stack([err(ndimage.gaussian_filter(patches, (0, sg, sg, 0), mode="nearest")[:, r, r] if sg
                         else patches[:, r, r]) for sg in sigmas])
    # The edit's points: no softening explains them (their smallest residual is an outlier)
    best_each = errs.min(axis=0)
    med, sig = robust_scale(best_each)
    explained = best_each <= med + 4.0 * max(sig, 1e-3)
    if explained.sum() < 32:
        return 0.0
    q = np.quantile(errs[:, explained], BLUR_QUANTILE, axis=1)
    i = int(np.argmin(q))
    return float(sigmas[i]) if i and q[i] < BLUR_GAIN * q[0] else 0.0


# --------------------------------------------------------------------------- stability

@dataclass(frozen=True, eq=False)
class Stability:
    """Whether the editor kept the scene, independent of the adaptive threshold: per block (a grid
    over the image), whether I_t's structure still agrees with the aligned I_{t-1} outside the
    change mask. `unstable` is the block grid (True = moved / redrawn / no source);
    `stable_fraction` the share of the blocks outside this turn's change that held."""

    unstable: np.ndarray
    stable_fraction: float
    rerendered: bool
    blocks: int
    textured_stable_fraction: float | None = None   # the share of the judged textured blocks that held

    def info(self) -> dict:
        """JSON-able record (stable shares and the unstable grid as '0'/'1' rows)."""
        d = {"stable_fraction": round(self.stable_fraction, 4), "rerendered": bool(self.rerendered),
             "unstable_grid": ["".join("1" if v else "0" for v in row) for row in self.unstable]}
        if self.textured_stable_fraction is not None:
            d["textured_stable_fraction"] = round(self.textured_stable_fraction, 4)
        return d

    @staticmethod
    def grid_from_info(info: dict) -> np.ndarray | None:
        """The unstable grid back from `info`'s record; None when the record has none."""
        rows = info.get("unstable_grid") if isinstance(info, dict) else None
        if not rows:
            return None
        return np.array([[ch == "1" for ch in row] for row in rows], bool)


def unstable_mask(grid: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    """The block grid as a bool H×W mask (nearest upsampling; None: nothing unstable)."""
    if grid is None or not grid.any():
        return np.zeros(shape, bool)
    h, w = shape
    return np.asarray(Image.fromarray(grid.astype(np.uint8) * 255).resize((w, h), Image.NEAREST)) >= 128


def stability(a: np.ndarray, b: np.ndarray, fit: ColourFit, mask: np.ndarray,
              sup: np.ndarray | None = None, res: np.ndarray | None = None) -> Stability:
    """The stability of b against the aligned a (see Stability), not resting on the adaptive
    threshold. Each block compares the blurred grey structure (normalised cross-correlation) on
    its pixels outside the change mask (dilated 2 px); a flat block compares its mean. A block
    mostly inside the mask is neither (the mask speaks for it); a block mostly outside the
    support is unstable. stable_fraction = the share of the pixels outside the change mask that
    lie in held blocks and whose residual `res` (3×3 mean, after the colour fit) stays below the
    fixed NOISE_FLOOR."""
    ga = fit.apply_grey(a)
    gb = grey_of(b)
    h, w = ga.shape
    f = min(1.0, STABILITY_SIDE / float(max(h, w)))
    small = (max(STABILITY_BLOCK, round(w * f)), max(STABILITY_BLOCK, round(h * f)))
    def sm(x, mode=Image.BOX):
        return np.asarray(Image.fromarray(np.asarray(x, np.float32)).resize(small, mode), np.float32)
    ga, gb = ndimage.gaussian_filter(sm(ga), 1.0), ndimage.gaussian_filter(sm(gb), 1.0)
    near_mask = dilate(mask, 2)
    keep = sm((~near_mask).astype(np.float32)) > 0.99
    supp = np.ones_like(keep) if sup is None else sm(sup.astype(np.float32)) > 0.5
    B = STABILITY_BLOCK
    nby, nbx = max(1, small[1] // B), max(1, small[0] // B)
    H, W = nby * B, nbx * B

    def tiles(x):
        return x[:H, :W].reshape(nby, B, nbx, B).transpose(0, 2, 1, 3).reshape(nby, nbx, -1)

    ta, tb, tw = tiles(ga).astype(np.float64), tiles(gb).astype(np.float64), tiles(keep & supp).astype(np.float64)
    n = tw.sum(-1)
    nn = np.maximum(n, 1.0)
    ma, mb = (ta * tw).sum(-1) / nn, (tb * tw).sum(-1) / nn
    da, db = ta - ma[..., None], tb - mb[..., None]
    va, vb = (da * da * tw).sum(-1) / nn, (db * db * tw).sum(-1) / nn
    cov = (da * db * tw).sum(-1) / nn
    ncc = cov / np.sqrt(np.maximum(va * vb, 1e-12))
    textured = np.sqrt(np.maximum(va, vb)) >= TEXTURE_STD
    held = np.where(textured, ncc >= STABLE_NCC, np.abs(ma - mb) <= FLAT_DELTA)
    if res is not None:     # a block whose unchanged pixels mostly exceed the fixed floor did not hold either
        over = tiles(sm((res > NOISE_FLOOR).astype(np.float32)) > 0.5).astype(np.float64)
        held &= (over * tw).sum(-1) / nn <= OVER_FLOOR_SHARE
    outside_support = tiles(supp).mean(-1) < 0.5
    judged = n >= JUDGED_SHARE * B * B   # enough unchanged pixels to judge the block
    unstable = (judged & ~held) | outside_support
    outside = ~near_mask if sup is None else ~near_mask & sup
    bad = unstable_mask(unstable, mask.shape)
    if res is not None:
        bad = bad | (res > NOISE_FLOOR)
    n_out = int(outside.sum())
    frac = float(1.0 - (bad & outside).sum() / n_out) if n_out else 1.0
    if sup is not None:     # the border a zoom-out exposed has no source: unstable too
        frac *= float(sup.mean())
    # Flat blocks hold whatever the editor did to the subject; the textured ones carry the evidence.
    tj = judged & textured & ~outside_support
    tfrac = float((held & tj).sum()) / int(tj.sum()) if int(tj.sum()) >= TEXTURED_MIN_BLOCKS else None
    rer = bool(1.0 - frac > RERENDER_SHARE) or (tfrac is not None and tfrac < TEXTURED_HELD)
    return Stability(unstable, frac, rer, int(unstable.size), tfrac)


NEAR_BLOCKS = 2      # a covered region's surroundings: the stability blocks within this many blocks of it


def held_near(history: History, prov: "Provenance", k: int, j: int) -> tuple[int, int, int] | None:
    """Turn j's evidence about the surroundings of C_k: (held, textured), the textured stability
    blocks within NEAR_BLOCKS blocks of C_k (carried into I_j's frame), not mostly inside C_k or
    C_j, and how many of them turn j did not mark unstable. Textured: the block's grey std
    (blurred, as `stability` measures it) reaches TEXTURE_STD in I_{j-1} or I_j. A flat block
    holds whatever the editor did to a subject next to it (a figure redrawn on a white backdrop
    inside its own change mask): it is no evidence, so it is not counted. None when turn j's
    record has no block grid (stored before it existed). (`NearEvidence(history, prov, k).held(j)`:
    a restoration turn asks it of every j = k..t-1 with one NearEvidence.)"""
    return NearEvidence(history, prov, k).held(j)


class NearEvidence:
    """`held_near` for one covering turn k and every later turn j, with what does not depend on j
    computed once (issue 32: a restoration turn asks it of every turn since k). What belongs to one
    image or one turn is kept by content across turns (each image's blurred grey at the stability
    size and its block stds, each turn's change mask per block); what belongs to C_k (its blocks,
    the blocks around it, which of their pixels C_k leaves out) is made once here; a turn j whose
    change does not reach the blocks around C_k costs a few block lookups. The figures are the
    same as computing everything each time (tests/test_provenance.py)."""

    def __init__(self, history: History, prov: "Provenance", k: int):
        self.history, self.prov, self.k = history, prov, k
        w, h = prov.size
        f = min(1.0, STABILITY_SIDE / float(max(h, w)))
        self.small = (max(STABILITY_BLOCK, round(w * f)), max(STABILITY_BLOCK, round(h * f)))
        self.shape = (h, w)
        self._blocks = None           # the grid shape the C_k parts below were made for
        self._alignment = (k, IDENTITY)

    def _for_grid(self, blocks: tuple[int, int]) -> None:
        """C_k's parts in its own frame for a block grid of this shape: its share per block, the
        bounding box (blocks) of the blocks that can be near it, and which pixels there C_k leaves."""
        if self._blocks == blocks:
            return
        B = STABILITY_BLOCK
        self._blocks = blocks
        self.c_k = self.prov.changes[self.k]
        self.ck = _change_blocks(self.history, self.prov, self.k, self.small, blocks)
        near = ndimage.binary_dilation(self.ck > 0, iterations=NEAR_BLOCKS) & (self.ck <= 0.5)
        self.near_k = near
        if not near.any():
            return
        ys, xs = np.nonzero(near)
        self.bb = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
        by0, by1, bx0, bx1 = self.bb
        self.sbox = (by0 * B, by1 * B, bx0 * B, bx1 * B)
        self.foot = _footprint(self.sbox, self.small, self.shape, 3)[0]
        self.keep_k = _keep_on_blocks(self.c_k, self.sbox, self.small, self.shape)

    def _a_kj(self, j: int) -> Alignment:
        """prov.alignment(k, j), composed one turn further from the last j asked (the loop over
        j = k..t-1 composes each turn's alignment once)."""
        last, a = self._alignment
        if j < last:
            last, a = self.k, IDENTITY
        for i in range(last + 1, j + 1):
            a = a.compose(self.prov.alignment(i - 1, i))
        self._alignment = (j, a)
        return a

    def held(self, j: int) -> tuple[int, int, int] | None:
        """held_near(history, prov, k, j)."""
        prov, history = self.prov, self.history
        grid = Stability.grid_from_info(prov.records[j]) if j < len(prov.records) else None
        if grid is None:
            return None
        B = STABILITY_BLOCK
        nby, nbx = grid.shape
        if nby * B > self.small[1] or nbx * B > self.small[0]:
            return None
        if not self._a_kj(j).is_identity:     # C_k moved in I_j's frame: every part for this j
            return self._held_moved(j, grid)
        self._for_grid(grid.shape)
        cj = _change_blocks(history, prov, j, self.small, grid.shape)
        near = self.near_k & (cj <= 0.5)
        if not near.any():
            return 0, 0, 0
        by0, by1, bx0, bx1 = self.bb
        sub = (slice(by0, by1), slice(bx0, bx1))
        # the block's texture where it is evidence: on its pixels outside both changes (an object's
        # own edge inside a block at the mask's border is no evidence about the surroundings)
        Y0, Y1, X0, X1 = self.foot
        c_j = prov.changes[j]
        keep = (self.keep_k if not c_j[Y0:Y1, X0:X1].any()
                else _keep_on_blocks(self.c_k | c_j, self.sbox, self.small, self.shape))
        return _count_held(history, j, near[sub], grid[sub], keep, self.bb, self.small, grid.shape,
                           int(near.sum()))

    def _held_moved(self, j: int, grid: np.ndarray) -> tuple[int, int, int]:
        prov, history = self.prov, self.history
        c_k, c_j = prov.in_frame(prov.changes[self.k], self.k, j), prov.changes[j]
        ck = _tiles(_at_small(c_k, self.small), grid.shape).mean(-1)
        cj = _change_blocks(history, prov, j, self.small, grid.shape)
        near = ndimage.binary_dilation(ck > 0, iterations=NEAR_BLOCKS) & (ck <= 0.5) & (cj <= 0.5)
        if not near.any():
            return 0, 0, 0
        B = STABILITY_BLOCK
        ys, xs = np.nonzero(near)
        bb = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)
        keep = _keep_on_blocks(c_k | c_j, (bb[0] * B, bb[1] * B, bb[2] * B, bb[3] * B), self.small, self.shape)
        sub = (slice(bb[0], bb[1]), slice(bb[2], bb[3]))
        return _count_held(history, j, near[sub], grid[sub], keep, bb, self.small, grid.shape, int(near.sum()))


def _count_held(history: History, j: int, near: np.ndarray, grid: np.ndarray, keep: np.ndarray,
                bb: tuple[int, int, int, int], small: tuple[int, int], blocks: tuple[int, int],
                around: int) -> tuple[int, int, int]:
    """(held, textured, around) on the blocks `bb` (by0, by1, bx0, bx1): `near` and `grid` there,
    `keep` the pixels each block's texture is measured on (at the stability size)."""
    B = STABILITY_BLOCK
    by0, by1, bx0, bx1 = bb
    kt = _tiles(keep, (by1 - by0, bx1 - bx0))
    n_keep = kt.sum(-1)
    partial = (n_keep < B * B) & (n_keep > 0) & near

    def block_std(img: StoredImage) -> np.ndarray:
        std = _block_std_all(img, small, blocks)[by0:by1, bx0:bx1].copy()   # blocks kept whole: the image's own
        if partial.any():
            ys, xs = np.nonzero(partial)
            py0, py1, px0, px1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
            g = _small_grey(img, small)[(by0 + py0) * B:(by0 + py1) * B, (bx0 + px0) * B:(bx0 + px1) * B]
            t = _tiles(g, (py1 - py0, px1 - px0)).astype(np.float64)
            kk, nk = kt[py0:py1, px0:px1], n_keep[py0:py1, px0:px1]
            m = (t * kk).sum(-1) / np.maximum(nk, 1.0)
            part = np.sqrt(((t - m[..., None]) ** 2 * kk).sum(-1) / np.maximum(nk, 1.0))
            view = std[py0:py1, px0:px1]
            sel = partial[py0:py1, px0:px1]
            view[sel] = part[sel]
        std[n_keep == 0] = 0.0
        return std

    textured = (block_std(history.turns[j].image) >= TEXTURE_STD) | (block_std(history.turns[j - 1].image) >= TEXTURE_STD)
    n = near & textured & (n_keep >= JUDGED_SHARE * B * B)
    return int((n & ~grid).sum()), int(n.sum()), around


def _tiles(x: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """nby×nbx×B² tiles of the stability blocks of an H×W plane (its top-left nby·B × nbx·B)."""
    B = STABILITY_BLOCK
    nby, nbx = blocks
    return x[:nby * B, :nbx * B].reshape(nby, B, nbx, B).transpose(0, 2, 1, 3).reshape(nby, nbx, -1)


def _at_small(x: np.ndarray, small: tuple[int, int], box: tuple[float, float, float, float] | None = None,
              out: tuple[int, int] | None = None) -> np.ndarray:
    """x (H×W) averaged (BOX) down to `small` (w, h); with `box` (x0, y0, x1, y1 of x) and `out`
    (w, h): only that part, as the crop of the whole resize would give it."""
    im = Image.fromarray(np.asarray(x, np.float32))
    if box is None:
        return np.asarray(im.resize(small, Image.BOX), np.float32)
    return np.asarray(im.resize(out, Image.BOX, box=box), np.float32)


def _footprint(sbox: tuple[int, int, int, int], small: tuple[int, int], shape: tuple[int, int],
               pad: int) -> tuple[tuple[int, int, int, int], tuple[float, float, float, float]]:
    """The full-size crop (Y0, Y1, X0, X1) under the stability-size box `sbox` grown by `pad` full
    pixels, and the box's own (x0, y0, x1, y1) within that crop (PIL's resize box)."""
    h, w = shape
    fy, fx = h / float(small[1]), w / float(small[0])
    y0, y1, x0, x1 = sbox
    Y0, Y1 = max(0, int(np.floor(y0 * fy)) - pad), min(h, int(np.ceil(y1 * fy)) + pad)
    X0, X1 = max(0, int(np.floor(x0 * fx)) - pad), min(w, int(np.ceil(x1 * fx)) + pad)
    return (Y0, Y1, X0, X1), (x0 * fx - X0, y0 * fy - Y0, x1 * fx - X0, y1 * fy - Y0)


def _keep_on_blocks(changed: np.ndarray, sbox: tuple[int, int, int, int], small: tuple[int, int],
                    shape: tuple[int, int]) -> np.ndarray:
    """float64 on the stability-size box `sbox` (y0, y1, x0, x1): 1 where a pixel lies 2 px or more
    (at full size) from `changed`, as at_small(dilate(changed, 2)) < 0.01 would give it there; the
    dilation and the resize are made on the box's footprint at full size only."""
    (Y0, Y1, X0, X1), box = _footprint(sbox, small, shape, 3)
    d = dilate(changed[Y0:Y1, X0:X1], 2).astype(np.float32)
    y0, y1, x0, x1 = sbox
    return (_at_small(d, small, box=box, out=(x1 - x0, y1 - y0)) < 0.01).astype(np.float64)


def _small_grey(img: StoredImage, small: tuple[int, int]) -> np.ndarray:
    """An image's grey, BOX-resized to `small` and blurred (1 px), as `stability` measures texture;
    once per image."""
    key = (img.digest, tuple(small))
    hit = CACHE.grey.get(key)
    if hit is None:
        hit = ndimage.gaussian_filter(grey_of(as_float_rgb(as_rgb(img.array).resize(small, Image.BOX))), 1.0)
        hit.flags.writeable = False
        CACHE.grey.put(key, hit)
    return hit


def _block_std_all(img: StoredImage, small: tuple[int, int], blocks: tuple[int, int]) -> np.ndarray:
    """Each stability block's grey std (`_small_grey`) over all its pixels; once per image."""
    key = ("std", img.digest, tuple(small), tuple(blocks))
    hit = CACHE.small.get(key)
    if hit is None:
        t = _tiles(_small_grey(img, small), blocks).astype(np.float64)
        hit = np.sqrt(((t - t.mean(-1)[..., None]) ** 2).mean(-1))
        hit.flags.writeable = False
        CACHE.small.put(key, hit)
    return hit


def _change_blocks(history: History, prov: "Provenance", t: int, small: tuple[int, int],
                   blocks: tuple[int, int]) -> np.ndarray:
    """The share of each stability block C_t (its own frame) covers, at the stability size; once per turn."""
    stored = history.turns[t].masks.get(CHANGE)
    key = ("change", stored.image.digest if stored is not None else
           (history.turns[t - 1].image.digest, history.turns[t].image.digest), tuple(small), tuple(blocks))
    hit = CACHE.small.get(key)
    if hit is None:
        hit = _tiles(_at_small(prov.changes[t], small), blocks).mean(-1)
        hit.flags.writeable = False
        CACHE.small.put(key, hit)
    return hit


def change_for(history: History, image: Any, params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """The change mask of the turn about to be appended (I_{t-1} = history's latest image,
    I_t = `image`), at the history's size, as a TurnMask for History.append(masks=...)."""
    if not isinstance(history, History):
        raise InputError(f"change_for needs a History, got {type(history).__name__}")
    return _cached_change(history.current.image, StoredImage.of(image), history_size(history), params)


def _change_key(prev: StoredImage, cur: StoredImage, size: tuple[int, int], params: ChangeParams) -> tuple:
    """A change record's key in CACHE.changes (respec/pixels/analysis_cache.py): by content."""
    return (prev.digest, cur.digest, tuple(size), params)


def _cached_change(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                   params: ChangeParams) -> TurnMask:
    key = _change_key(prev, cur, size, params)
    hit = CACHE.changes.get(key)
    if hit is not None:
        return hit
    tm = change_mask(prev, cur, size, params, alignment=alignment_for(prev, cur, size)).turn_mask()
    CACHE.changes.put(key, tm)
    return tm


def change_between(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                   params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """The change record prev -> cur at `size` (aligned first), computed once per pair of images
    (cached by their digests; what remember_change recorded is returned as it is)."""
    return _cached_change(prev, cur, tuple(size), params)


def remember_change(prev: StoredImage, cur: StoredImage, size: tuple[int, int], tm: TurnMask,
                    params: ChangeParams = DEFAULT_PARAMS) -> None:
    """Record a known change record prev -> cur (Reveal Composite computes the edit's C_t once;
    its output differs from the edit only inside C_t and on quiet seam pixels, so History Append
    and run_turn reuse it for the output instead of computing it again)."""
    CACHE.changes.put(_change_key(prev, cur, size, params), tm)


def full_size_result(res: ChangeResult, size: tuple[int, int]) -> ChangeResult:
    """A ChangeResult computed at a working size as change_mask returns it at `size` (the mask
    upsampled nearest, the alignment in full-size pixels, working_size recorded)."""
    h, w = res.mask.shape
    if (w, h) == tuple(size):
        return res
    f = w / float(size[0])
    m = np.asarray(Image.fromarray(res.mask).resize(tuple(size), Image.NEAREST), bool)
    m.flags.writeable = False
    return replace(res, mask=m, alignment=at_full_size(res.alignment, f, size), working_size=(w, h), raw_residual=None)


# --------------------------------------------------------------------------- per-pixel history

@dataclass(frozen=True)
class Provenance:
    """Per pixel, the turns that changed it. `changes[t]` is C_t (bool H×W at the history's size,
    in I_t's frame) for t = 1..T; `changes[0]` is all False (I_0 is where everything starts).
    `alignments[t]` is turn t's alignment I_{t-1} -> I_t (alignments[0] the identity);
    `unstable[t]` the pixels whose blocks turn t moved or redrew beyond its change mask (a
    re-render; a zoom-out's new border). `computed` lists the turns whose mask was not stored and
    had to be computed now."""

    changes: tuple[np.ndarray, ...]
    size: tuple[int, int]
    computed: tuple[int, ...] = ()
    alignments: tuple[Alignment, ...] = ()
    unstable: tuple[np.ndarray, ...] = ()
    records: tuple[dict, ...] = ()      # each turn's change-mask info (stable_fraction, rerendered, ...)
    index: Any = field(default=None, compare=False, repr=False)  # respec.pixels.provenance_index view, when made by it

    @property
    def turns(self) -> int:
        """T, the latest turn covered."""
        return len(self.changes) - 1

    def alignment(self, k: int, t: int | None = None) -> Alignment:
        """The composed alignment from I_k's frame to I_t's (t default: the latest)."""
        t = self.turns if t is None else t
        if not 0 <= k <= t <= self.turns:
            raise InputError(f"alignment from turn {k} to turn {t}: both must be in 0..{self.turns} with k <= t")
        al = self.alignments or (IDENTITY,) * (self.turns + 1)
        return compose_all(list(al[k + 1:t + 1]))

    def in_frame(self, mask: np.ndarray, k: int, t: int | None = None) -> np.ndarray:
        """A bool mask of I_k's frame carried into I_t's (nearest; t default: the latest)."""
        a = self.alignment(k, t)
        return mask if a.is_identity else warp(mask, a, order=0)

    def stack(self) -> np.ndarray:
        """(T+1)×H×W boolean stack of the change masks (each in its own turn's frame)."""
        return np.stack(self.changes)

    def turns_at(self, y: int, x: int) -> list[int]:
        """The turns that changed pixel (y, x), oldest first (coordinates at the history's size)."""
        return [t for t, m in enumerate(self.changes) if t > 0 and m[y, x]]

    def share(self, t: int) -> float:
        """The share of the image turn t changed."""
        return self.index.share(t) if self.index is not None else float(self.changes[t].mean())

    def last_change(self) -> np.ndarray:
        """int32 H×W: the latest turn that changed each pixel (0 = never changed)."""
        out = np.zeros(self.changes[0].shape, np.int32)
        for t, m in enumerate(self.changes):
            if t:
                out[m] = t
        return out

    def change_count(self) -> np.ndarray:
        """int32 H×W: how many turns changed each pixel."""
        return np.sum(self.stack(), axis=0, dtype=np.int32)

    def coverage(self, region: np.ndarray) -> dict[int, float]:
        """For each turn that changed part of `region` (bool H×W), the fraction of the region it
        changed."""
        region = np.asarray(region, bool)
        if region.shape != self.changes[0].shape:
            raise InputError(f"region of shape {region.shape} does not match the history's masks "
                             f"{self.changes[0].shape}; resize it to {self.size[0]}x{self.size[1]}")
        n = int(region.sum())
        if n == 0:
            return {}
        out = {}
        for t, m in enumerate(self.changes):
            if t:
                f = float((m & region).sum()) / n
                if f > 0:
                    out[t] = f
        return out

    def stable_fraction(self, t: int) -> float:
        """Turn t's stable_fraction (1.0 when its record has none)."""
        rec = self.records[t] if t < len(self.records) else {}
        return float(rec.get("stable_fraction", 1.0)) if isinstance(rec, dict) else 1.0

    def textured_stable_fraction(self, t: int) -> float:
        """Turn t's share of textured blocks that held (its stable_fraction when not recorded)."""
        rec = self.records[t] if t < len(self.records) else {}
        if isinstance(rec, dict) and rec.get("textured_stable_fraction") is not None:
            return float(rec["textured_stable_fraction"])
        return self.stable_fraction(t)

    def rerendered(self, t: int) -> bool:
        """Whether turn t's change record says the editor re-rendered the scene."""
        rec = self.records[t] if t < len(self.records) else {}
        return bool(rec.get("rerendered", False)) if isinstance(rec, dict) else False

    def unchanged_since(self, k: int, frame: int | None = None) -> np.ndarray:
        """bool H×W in I_frame's frame (default: the latest): pixels no turn after k changed,
        moved or redrew (I_k and the latest image should agree there, up to drift). A turn's
        change mask and its unstable blocks count; pixels I_k never showed (a zoom-out's border)
        are not stable."""
        frame = self.turns if frame is None else frame
        if (self.index is not None and frame == self.turns
                and all(a.is_identity for a in self.alignments[k + 1:frame + 1])):
            return self.index.unchanged_since(k)   # its map stamps C_j | unstable_j: O(H·W)
        out = np.ones(self.changes[0].shape, bool)
        for j in range(k + 1, frame + 1):
            m = self.changes[j]
            if j < len(self.unstable) and self.unstable[j] is not None:
                m = m | self.unstable[j]
            out &= ~self.in_frame(m, j, frame)
        a = self.alignment(k, frame)
        if not a.is_identity:
            out &= support(a, out.shape)
        return out


def turn_alignment(history: History, t: int) -> Alignment:
    """Turn t's stored alignment I_{t-1} -> I_t (turn meta["alignment"], else its change mask's
    info; the identity for turn 0 and for turns stored before alignment existed)."""
    if not 0 <= t < len(history.turns):
        raise InputError(f"turn {t} is not in this history (turns 0..{len(history.turns) - 1})")
    if t == 0:
        return IDENTITY
    turn = history.turns[t]
    rec = (turn.meta or {}).get("alignment") if isinstance(turn.meta, dict) else None
    if not rec:
        tm = turn.masks.get(CHANGE)
        rec = tm.info.get("alignment") if tm is not None else None
    return Alignment.from_record(rec)


def turn_change(history: History, t: int, params: ChangeParams = DEFAULT_PARAMS) -> TurnMask:
    """Turn t's change record (the stored `change` TurnMask: mask + info with alignment,
    stable_fraction, rerendered, unstable_grid), computed (and cached) when the turn has none."""
    if not 1 <= t < len(history.turns):
        raise InputError(f"turn {t} has no change record (turns 1..{len(history.turns) - 1} do)")
    tm = history.turns[t].masks.get(CHANGE)
    if tm is None:
        tm = _cached_change(history.turns[t - 1].image, history.turns[t].image, history_size(history), params)
    return tm


def provenance_of(history: History, params: ChangeParams = DEFAULT_PARAMS) -> Provenance:
    """The per-pixel change history of `history`: stored change masks where the turns have them
    (resized to the history's size if needed), computed for the turns that do not; with each
    turn's alignment and unstable blocks."""
    if not isinstance(history, History):
        raise InputError(f"provenance_of needs a History, got {type(history).__name__}")
    # The index keeps the masks' summaries and a "last change" map per history (O(H·W) per new
    # turn, each missing mask computed once); its map counts a turn's unstable blocks too.
    idx = provenance_index.index_for(history, params, _cached_change, stamp_mask=_changed_or_unstable)
    w, h = idx.size
    records = [{}] + [idx.info(t) for t in range(1, idx.turns + 1)]
    aligns = [IDENTITY] + [Alignment.from_record(((t.meta or {}).get("alignment") if isinstance(t.meta, dict) else None)
                                                 or records[t.index].get("alignment")) for t in history.turns[1:]]
    unstable = _UnstableMasks(records, (h, w))
    return Provenance(idx.masks(), idx.size, idx.computed, tuple(aligns), unstable, tuple(records), index=idx)


def _changed_or_unstable(history: History, t: int, m: np.ndarray, info: dict) -> np.ndarray:
    grid = Stability.grid_from_info(info)
    return m if grid is None or not grid.any() else m | unstable_mask(grid, m.shape)


class _UnstableMasks(Sequence):
    """unstable[t] of each turn, made from its record when asked for."""

    def __init__(self, records, shape):
        self._records, self._shape = records, shape

    def __len__(self):
        return len(self._records)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        return unstable_mask(Stability.grid_from_info(self._records[i]), self._shape)
