"""The change record C_t of one turn: which pixels the edit changed between I_{t-1} and I_t, robust
to an editor's global drift, and whether the editor kept the scene (beyond the paper).

How C_t is computed (`change_mask`):
1. Both images at one size: the history's (I_0's). A turn of another size is resized
   (bilinear), so every mask of a history lines up.
2. A per-channel affine colour transform T (I_t ~ gain · I_{t-1} + bias) is fitted on the whole
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

The record (`ChangeResult.turn_mask`: the mask as an L image, 255 = changed, with an info dict of
the colour fit, threshold, alignment and stability) is stored with its turn (History Append;
`Turn.masks["change"]`). `change_for` / `change_between` compute it once per pair of images
(respec/pixels/analysis_cache.py); respec/pixels/provenance.py gathers every turn's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from .alignment import IDENTITY, Alignment, alignment_for, at_full_size, estimate_alignment, support, warp
from .analysis_cache import CACHE, AnalysisCache
from .change_record import ALIGNMENT, ChangeRecord
from .colour_fit import FIT_SAMPLES, ColourFit, fit_colour, grey_of, residual, robust_scale, sample_grid, smooth
from .masks import clean_mask, dilate, history_size
from .work_images import as_float_rgb, working_size
from ..history import History, StoredImage, TurnMask
from ..images import as_rgb, finite_array


METHOD = "drift-robust-v2"   # recorded in every mask's info: what computed it (v2: aligned, stability)
STABILITY_SIDE = 512          # the stability measure works with the longer side at most this ...
STABILITY_BLOCK = 16          # ... on blocks of this many pixels there
STABLE_NCC = 0.8              # a textured block whose structure correlates less than this after alignment moved
STABILITY_TEXTURE_STD = 0.015 # a block whose grey std (blurred) is below this in both images is flat ...
FLAT_DELTA = 0.03             # ... and stable when its mean agrees within this after the colour fit
NOISE_FLOOR = 16.0 / 255.0    # fixed floor: outside the change mask a residual (3×3 mean) above it is a change
RERENDER_SHARE = 0.3          # more than this share of the pixels outside the change mask unstable: a re-render
TEXTURED_HELD = 0.6           # ... or fewer than this share of the textured blocks held (a redrawn subject on
TEXTURED_MIN_BLOCKS = 8       #     a flat backdrop: the flat blocks hold whatever happened), given this many
JUDGED_SHARE = 0.25           # a stability block is judged when at least this share of its pixels is unchanged
OVER_FLOOR_SHARE = 0.25       # a block whose unchanged pixels exceed NOISE_FLOOR on more than this share moved
STABILITY_SIGMA = 1.0         # px (stability size): both greys are blurred by this before the blocks compare them
STABILITY_MARGIN = 2          # px: pixels this near the change mask (its soft rim) are no evidence of stability ...
NEAR_CHANGE_SHARE = 0.01      # ... and a stability-size pixel with more than this share of them is left out
OPEN_RADIUS_SIDE = 256        # the default opening radius: 1 px per this many px of the shorter side


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
        o = self.open_radius if self.open_radius is not None else max(1, round(min(shape) / OPEN_RADIUS_SIDE))
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
        d[ALIGNMENT] = self.alignment.record()
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
BLUR_PATCH_RADIUS = 6                # each point is blurred on its own (2r+1)² patch (3 sigma of every step fits)
BLUR_MIN_POINTS = 32                 # fewer textured (or explained) points than this: no blur measured
BLUR_MIN_GRADIENT = 0.01             # the textured points' median gradient (grey, 0..1) must reach this
BLUR_OUTLIER_K = 4.0                 # a point no softening explains within this many robust sigmas is the edit's


def editor_blur(a: np.ndarray, b: np.ndarray, fit: ColourFit) -> float:
    """The Gaussian sigma (0 or one of BLUR_STEPS) by which `b` is softer than the aligned `a`:
    on the textured half of an even grid of points (where a blur shows), the 90th percentile of
    the RMS residual of b against fit(a blurred) on each point's own 13×13 patch, over the points
    some softening explains (the edit's points, whose smallest residual is an outlier, are left
    out); a sigma is taken only when it lowers that to BLUR_GAIN of the unblurred one. A
    sharpening, a re-render or JPEG (which keeps strong edges) finds none."""
    h, w = a.shape[:2]
    r = BLUR_PATCH_RADIUS
    if h <= 4 * r or w <= 4 * r:
        return 0.0
    step = max(1, int(np.sqrt((h - 2 * r) * (w - 2 * r) / (2.0 * BLUR_SAMPLES))))
    ys, xs = np.meshgrid(np.arange(r + 1, h - r - 1, step), np.arange(r + 1, w - r - 1, step), indexing="ij")
    ys, xs = ys.ravel(), xs.ravel()
    g = grey_of(a[ys[:, None] + np.array([-1, 0, 1])[None, :], xs[:, None]])       # vertical neighbours
    g2 = grey_of(a[ys[:, None], xs[:, None] + np.array([-1, 0, 1])[None, :]])      # horizontal neighbours
    grad = np.abs(g[:, 2] - g[:, 0]) + np.abs(g2[:, 2] - g2[:, 0])
    keep = grad >= np.median(grad)
    if keep.sum() < BLUR_MIN_POINTS or float(np.median(grad[keep])) < BLUR_MIN_GRADIENT:
        return 0.0
    ys, xs = ys[keep], xs[keep]
    off = np.arange(-r, r + 1)
    patches = np.asarray(a, np.float32)[ys[:, None, None] + off[None, :, None], xs[:, None, None] + off[None, None, :]]
    target = np.asarray(b, np.float32)[ys, xs]

    def err(p):
        d = fit.apply(p) - target
        return np.sqrt(np.einsum("nc,nc->n", d, d) / 3.0)

    def centre(sg):     # gaussian_filter(patches, (0, sg, sg, 0))[:, r, r]: the second pass on the centre row only
        rows = ndimage.gaussian_filter1d(patches, sg, axis=1, mode="nearest")[:, r]
        return ndimage.gaussian_filter1d(rows, sg, axis=1, mode="nearest")[:, r]

    sigmas = (0.0,) + BLUR_STEPS
    errs = np.stack([err(centre(sg) if sg else patches[:, r, r]) for sg in sigmas])
    # The edit's points: no softening explains them (their smallest residual is an outlier)
    best_each = errs.min(axis=0)
    med, sig = robust_scale(best_each)
    explained = best_each <= med + BLUR_OUTLIER_K * max(sig, 1e-3)
    if explained.sum() < BLUR_MIN_POINTS:
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


def unstable_mask(grid: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    """The block grid as a bool H×W mask (nearest upsampling; None: nothing unstable)."""
    if grid is None or not grid.any():
        return np.zeros(shape, bool)
    h, w = shape
    return np.asarray(Image.fromarray(grid.astype(np.uint8) * 255).resize((w, h), Image.NEAREST)) >= 128


def stability_size(shape: tuple[int, int]) -> tuple[int, int]:
    """(w, h) the stability measure works at for an H×W image: the longer side at most
    STABILITY_SIDE, each side at least one block."""
    h, w = shape
    f = min(1.0, STABILITY_SIDE / float(max(h, w)))
    return (max(STABILITY_BLOCK, round(w * f)), max(STABILITY_BLOCK, round(h * f)))


def block_tiles(x: np.ndarray, blocks: tuple[int, int]) -> np.ndarray:
    """nby×nbx×B² tiles of the stability blocks of an H×W plane (its top-left nby·B × nbx·B)."""
    B = STABILITY_BLOCK
    nby, nbx = blocks
    return x[:nby * B, :nbx * B].reshape(nby, B, nbx, B).transpose(0, 2, 1, 3).reshape(nby, nbx, -1)


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
    small = stability_size(ga.shape)

    def sm(x, mode=Image.BOX):
        return np.asarray(Image.fromarray(np.asarray(x, np.float32)).resize(small, mode), np.float32)
    ga, gb = ndimage.gaussian_filter(sm(ga), STABILITY_SIGMA), ndimage.gaussian_filter(sm(gb), STABILITY_SIGMA)
    near_mask = dilate(mask, STABILITY_MARGIN)
    keep = sm((~near_mask).astype(np.float32)) > 1.0 - NEAR_CHANGE_SHARE
    supp = np.ones_like(keep) if sup is None else sm(sup.astype(np.float32)) > 0.5
    B = STABILITY_BLOCK
    blocks = (max(1, small[1] // B), max(1, small[0] // B))
    ta, tb, tw = (block_tiles(x, blocks).astype(np.float64) for x in (ga, gb, keep & supp))
    n = tw.sum(-1)
    nn = np.maximum(n, 1.0)
    ma, mb = (ta * tw).sum(-1) / nn, (tb * tw).sum(-1) / nn
    da, db = ta - ma[..., None], tb - mb[..., None]
    va, vb = (da * da * tw).sum(-1) / nn, (db * db * tw).sum(-1) / nn
    cov = (da * db * tw).sum(-1) / nn
    ncc = cov / np.sqrt(np.maximum(va * vb, 1e-12))
    textured = np.sqrt(np.maximum(va, vb)) >= STABILITY_TEXTURE_STD
    held = np.where(textured, ncc >= STABLE_NCC, np.abs(ma - mb) <= FLAT_DELTA)
    if res is not None:     # a block whose unchanged pixels mostly exceed the fixed floor did not hold either
        over = block_tiles(sm((res > NOISE_FLOOR).astype(np.float32)) > 0.5, blocks).astype(np.float64)
        held &= (over * tw).sum(-1) / nn <= OVER_FLOOR_SHARE
    outside_support = block_tiles(supp, blocks).mean(-1) < 0.5
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


def change_for(history: History, image: Any, params: ChangeParams = DEFAULT_PARAMS,
               cache: AnalysisCache = CACHE) -> TurnMask:
    """The change mask of the turn about to be appended (I_{t-1} = history's latest image,
    I_t = `image`), at the history's size, as a TurnMask for History.append(masks=...)."""
    return change_record_for(history, image, params, cache).stored


def change_record_for(history: History, image: Any, params: ChangeParams = DEFAULT_PARAMS,
                      cache: AnalysisCache = CACHE) -> ChangeRecord:
    """`change_for`'s record, typed (respec/pixels/change_record.py)."""
    return change_record_between(history.current.image, StoredImage.of(image), history_size(history), params, cache)


def _change_key(prev: StoredImage, cur: StoredImage, size: tuple[int, int], params: ChangeParams) -> tuple:
    """A change record's key in the analysis cache's `changes` (respec/pixels/analysis_cache.py): by content."""
    return (prev.digest, cur.digest, tuple(size), params)


def change_record_between(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                          params: ChangeParams = DEFAULT_PARAMS, cache: AnalysisCache = CACHE) -> ChangeRecord:
    """The change record prev -> cur at `size` (aligned first), typed, computed once per pair of
    images (kept in `cache.changes` by their digests; what remember_change recorded is returned as it is)."""
    key = _change_key(prev, cur, size, params)
    hit = cache.changes.get(key)
    if hit is not None:
        return hit
    tm = change_mask(prev, cur, size, params, alignment=alignment_for(prev, cur, size, cache)).turn_mask()
    rec = ChangeRecord.of(tm)
    cache.changes.put(key, rec)
    return rec


def change_between(prev: StoredImage, cur: StoredImage, size: tuple[int, int],
                   params: ChangeParams = DEFAULT_PARAMS, cache: AnalysisCache = CACHE) -> TurnMask:
    """The change record prev -> cur at `size` as the store keeps it (`change_record_between`'s TurnMask)."""
    return change_record_between(prev, cur, tuple(size), params, cache).stored


def remember_change(prev: StoredImage, cur: StoredImage, size: tuple[int, int], tm: "TurnMask | ChangeRecord",
                    params: ChangeParams = DEFAULT_PARAMS, cache: AnalysisCache = CACHE) -> None:
    """Record a known change record prev -> cur (Reveal Composite computes the edit's C_t once;
    its output differs from the edit only inside C_t and on quiet seam pixels, so History Append
    and run_turn reuse it for the output instead of computing it again)."""
    cache.changes.put(_change_key(prev, cur, size, params), ChangeRecord.of(tm))


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
