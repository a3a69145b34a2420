"""What the request changed, told from what the editor re-rendered (beyond the paper).

An editor that re-renders the picture changes pixels everywhere: fur and foliage re-drawn, eyes
re-drawn a little smaller, a whole-picture colour shift. A change mask at pixel level marks all of
it. What the request asked for (a sign's new text, a hat and a jacket, a dalmatian's spots) is a
change of the picture's content at a coarser scale: new shapes and colours where nothing like them
was. `coarse_change` measures that:

1. Both images at a coarse size (longer side <= COARSE_SIDE), the edit read on the previous
   image's grid (the turn's alignment, or the structure warp of respec/pixels/structure.py),
   blurred by COARSE_SIGMA coarse px: fine texture is gone, shapes and colours stay.
2. The previous image through a robust colour fit (a whole-picture grade is no change).
3. Per pixel, the smallest colour difference over shifts of up to REACH coarse px (a re-drawn
   detail a few pixels off is no change), both ways (the edit near the previous image, and the
   previous image near the edit: a thin line removed is near nothing in the edit), the larger of
   the two, averaged over 3×3.

`main_change` keeps the areas where that residual stands out (above CHANGE_LEVEL and OVER_MEDIAN
times its median) and are large enough: the request's change. `rerendered_components` says which
components of a pixel-level change mask lie away from it and look like re-rendered detail (their
coarse residual is small and a fraction of their own pixel-level one): the Drift Guard restores
those. A faint tint is not one of them: blurring and shifting do not make it smaller.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

from .colour_fit import IDENTITY_FIT, ColourFit, fit_colour
from .masks import dilate, erode

COARSE_SIDE = 256               # the coarse grid: the longer side at most this (px) ...
COARSE_MIN_SIDE = 8             # ... and at least this many px per side
COARSE_SIGMA = 1.5              # coarse px: both pictures are blurred by this before they are compared
REACH = 2                       # coarse px: a re-drawn detail this far off is no change
CHANGE_LEVEL = 16.0 / 255.0     # a coarse residual above this ...
OVER_MEDIAN = 4.0               # ... and this many times the median residual is a change of content
MIN_AREA = 0.001                # an area of content change smaller than this share of the picture is noise
REDRAWN_RATIO = 0.35            # a component whose coarse residual is below this share of its own
                                # pixel-level residual (and below the change level) is re-drawn detail ...
MIN_PIECE = 0.002               # ... when it covers at least this share of the picture (an eye, an arm; a
                                # sliver along a resized object's edge is left to the pixel-level tests)


@dataclass(frozen=True, eq=False)
class CoarseChange:
    """The coarse content-change residual (float32 h×w, 0..1 RMS) of an edit against the previous
    image, in the previous image's frame at `factor` × its full size; `valid` where the edit had a
    source; `fit` the colour fit it was measured after; `level` the level a content change passes."""

    residual: np.ndarray
    valid: np.ndarray
    fit: ColourFit
    factor: float
    level: float

    def changed(self) -> np.ndarray:
        """bool h×w: where the residual passes the level."""
        return (self.residual > self.level) & self.valid

    def median_at(self, piece: np.ndarray, origin: tuple[int, int]) -> float:
        """The median coarse residual under a full-size bool mask `piece` whose top-left pixel is
        `origin` (y, x) of the full picture (each pixel reads its coarse pixel: nearest)."""
        ys, xs = np.nonzero(piece)
        cy = np.clip(((ys + origin[0] + 0.5) * self.factor).astype(int), 0, self.residual.shape[0] - 1)
        cx = np.clip(((xs + origin[1] + 0.5) * self.factor).astype(int), 0, self.residual.shape[1] - 1)
        return float(np.median(self.residual[cy, cx]))

    def at(self, shape: tuple[int, int], mask: np.ndarray | None = None) -> np.ndarray:
        """A coarse bool mask (default: `changed()`) at full size `shape` (nearest)."""
        m = self.changed() if mask is None else mask
        return np.asarray(Image.fromarray(m.astype(np.uint8) * 255).resize((shape[1], shape[0]), Image.NEAREST)) >= 128


def coarse_size(shape: tuple[int, int], side: int = COARSE_SIDE) -> tuple[tuple[int, int], float]:
    """((h, w) of the coarse grid, coarse / full factor) for a picture of `shape` (h, w), its longer
    side at most `side`."""
    h, w = shape
    f = min(1.0, side / float(max(h, w)))
    return (max(COARSE_MIN_SIDE, round(h * f)), max(COARSE_MIN_SIDE, round(w * f))), f


def coarse_change(previous: np.ndarray, edit_coarse: np.ndarray, valid: np.ndarray | None = None) -> CoarseChange:
    """The coarse content change (see the module docstring). previous: uint8 H×W×3 (full size);
    edit_coarse: the edit already read on a coarse grid of the previous image (`coarse_size`), float
    h×w×3 in 0..1; valid: where it had a source (default: everywhere)."""
    ch, cw = edit_coarse.shape[:2]
    f = ch / float(previous.shape[0])
    P = np.asarray(Image.fromarray(np.ascontiguousarray(previous[..., :3])).resize((cw, ch), Image.BOX),
                   np.float32) / 255.0
    E = np.asarray(edit_coarse, np.float32)
    ok = np.ones((ch, cw), bool) if valid is None else np.asarray(valid, bool)
    Pb = ndimage.gaussian_filter(P, (COARSE_SIGMA, COARSE_SIGMA, 0), mode="nearest")
    Eb = ndimage.gaussian_filter(E, (COARSE_SIGMA, COARSE_SIGMA, 0), mode="nearest")
    fit = fit_colour(Pb[::2, ::2], Eb[::2, ::2], use=ok[::2, ::2], sampled=True)   # a quarter of the grid is plenty
    Pf = fit.apply(Pb)
    # both ways: a detail re-drawn a little off is near in either image; a thin thing removed is
    # near nothing in the edit (one way the previous image shifted would explain it away)
    best = np.maximum(_nearest_match(Pf, Eb), _nearest_match(Eb, Pf))
    res = ndimage.uniform_filter(np.sqrt(best / 3.0), 3, mode="nearest").astype(np.float32)
    res[~ok] = 0.0
    med = float(np.median(res[ok])) if ok.any() else 0.0
    return CoarseChange(res, ok, fit, f, max(CHANGE_LEVEL, OVER_MEDIAN * med))


def _nearest_match(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Per pixel, the smallest squared colour distance (summed over channels) between dst and src
    shifted by up to REACH px."""
    h, w = dst.shape[:2]
    pad = np.pad(src, ((REACH, REACH), (REACH, REACH), (0, 0)), mode="edge")
    best = None
    for dy in range(-REACH, REACH + 1):
        for dx in range(-REACH, REACH + 1):
            d = pad[REACH + dy:REACH + dy + h, REACH + dx:REACH + dx + w] - dst
            r = np.einsum("...c,...c->...", d, d)
            best = r if best is None else np.minimum(best, r)
    return best


def main_change(cc: CoarseChange) -> np.ndarray:
    """bool coarse mask: the areas of content change (opened 1 px; each at least MIN_AREA of the
    picture): what the request changed."""
    m = ndimage.binary_opening(cc.changed(), np.ones((3, 3), bool))
    labels, n = ndimage.label(m)
    if not n:
        return m
    sizes = np.bincount(labels.ravel())
    big = sizes >= MIN_AREA * m.size
    big[0] = False
    return big[labels]


def rerendered_components(c: np.ndarray, fine: np.ndarray, cc: CoarseChange, main: np.ndarray,
                          near_px: int) -> np.ndarray:
    """bool mask (full size, like `c`): the parts of the change mask `c` that look like re-rendered
    detail away from the request's change. Near the request's change (within `near_px` of the convex
    hull of each group of the `main` coarse change, at full size) nothing is dropped, nor anything
    within `near_px` of the convex hull of a component's part that is near it (a box moved over its
    own stripes changes at its edges, the rest of its outline lies between them; a sliver of a
    resized object's old place lies next to it). Each other connected piece (a whole component away
    from the change, or the far part of one that reaches it: a cat's re-drawn ear, joined to a new
    sign by re-drawn fur) is re-drawn detail when its median coarse residual is below the change level
    and below REDRAWN_RATIO of its median pixel-level residual `fine` (H×W), and it covers MIN_PIECE
    of the picture or more. A tint keeps its coarse
    residual (a blur does not remove a colour shift), so it is never one."""
    labels, n = ndimage.label(c)
    out = np.zeros(c.shape, bool)
    if not n or not main.any():     # the request's change does not show at the coarse scale (a faint tint):
        return out                  # nothing to be far from
    reach = max(1, round(near_px * cc.factor))
    near = cc.at(c.shape, dilate(hulls(main, reach), reach))       # dilated on the coarse grid: cheap
    for k, sl in enumerate(ndimage.find_objects(labels), start=1):
        comp = labels[sl] == k
        if comp.sum() < MIN_PIECE * c.size:
            continue
        core = comp & near[sl]
        rest = comp & ~dilate(convex_hull(core), near_px) if core.any() else comp
        pieces, m = ndimage.label(rest)
        for j, psl in enumerate(ndimage.find_objects(pieces), start=1):
            piece = pieces[psl] == j
            if piece.sum() < MIN_PIECE * c.size:
                continue
            co = cc.median_at(piece, (sl[0].start + psl[0].start, sl[1].start + psl[1].start))
            fi = float(np.median(fine[sl][psl][piece]))
            if co < cc.level and co < REDRAWN_RATIO * fi:
                out[sl][psl] |= piece
    return out


def convex_hull(mask: np.ndarray) -> np.ndarray:
    """bool mask of the pixels whose centres lie within half a pixel of the convex hull of
    `mask`'s pixels (the mask itself when it has no 2-D hull)."""
    edge = mask & ~erode(mask, 1)
    ys, xs = np.nonzero(edge)
    if len(ys) < 3:
        return mask
    try:
        hull = ConvexHull(np.column_stack([xs, ys]).astype(np.float64))
    except QhullError:          # all on one line
        return mask
    y0, x0 = ys.min(), xs.min()
    yy, xx = np.mgrid[y0:ys.max() + 1, x0:xs.max() + 1]
    inside = np.ones(yy.shape, bool)
    for a, b, off in hull.equations:
        inside &= a * xx + b * yy + off <= 0.5
    out = np.zeros_like(mask)
    out[y0:ys.max() + 1, x0:xs.max() + 1] = inside
    return out | mask


def hulls(m: np.ndarray, reach: int) -> np.ndarray:
    """`m` with each group of its components (those within `reach` px of one another) replaced by
    their convex hull: the subject the changes sit on (a hat and a jacket: the beaver wearing them)."""
    groups, n = ndimage.label(dilate(m, reach))
    out = m.copy()
    for k, sl in enumerate(ndimage.find_objects(groups), start=1):
        out[sl] |= convex_hull(m[sl] & (groups[sl] == k))
    return out


SUBJECT_LEVEL = 12.0 / 255.0    # a new background: where the edit stays within this of the previous image (blurred,
                                # after a colour fit on those pixels) is the subject the request kept
MIN_SUBJECT = 0.01              # ... which covers at least this share of the picture
SUBJECT_MEDIAN_SHARE = 0.5      # when the editor moved every colour, the level is this share of the median difference
MIN_SUBJECT_SEED = 64           # fewer agreeing coarse pixels than this (before the fit): no subject
SUBJECT_OPENING = 5             # coarse px: the subject is opened by a square this wide (specks, thin rims)


def kept_subject(P: np.ndarray, E: np.ndarray, valid: np.ndarray | None = None) -> tuple[np.ndarray, ColourFit]:
    """On a request for a new background: (bool mask of the subject the editor kept, the colour fit
    of the edit to the previous image on it). P, E: the previous image and the edit in its frame
    (float H×W×3, 0..1). The background changed nearly everywhere, so a fit on the whole picture
    would fit the new background: the subject is first where the two agree without a fit (both
    blurred by COARSE_SIGMA px, within SUBJECT_LEVEL, or half the picture's median difference when
    the editor moved every colour), the fit is made there, and the subject is where they agree after
    it: opened, its components of at least MIN_SUBJECT of the picture, holes filled."""
    ok = np.ones(P.shape[:2], bool) if valid is None else valid
    Pb = ndimage.gaussian_filter(P, (COARSE_SIGMA, COARSE_SIGMA, 0), mode="nearest")
    Eb = ndimage.gaussian_filter(E, (COARSE_SIGMA, COARSE_SIGMA, 0), mode="nearest")
    r0 = np.sqrt(((Eb - Pb) ** 2).mean(axis=2))
    first = (r0 < max(SUBJECT_LEVEL, SUBJECT_MEDIAN_SHARE * float(np.median(r0[ok])))) & ok
    if first.sum() < MIN_SUBJECT_SEED:
        return np.zeros(P.shape[:2], bool), IDENTITY_FIT
    fit = fit_colour(Pb, Eb, use=first)
    r = np.sqrt(((Eb - fit.apply(Pb)) ** 2).mean(axis=2))
    m = ndimage.binary_opening((r < SUBJECT_LEVEL) & ok, np.ones((SUBJECT_OPENING, SUBJECT_OPENING), bool))
    labels, n = ndimage.label(m)
    if not n:
        return m, fit
    sizes = np.bincount(labels.ravel())
    big = sizes >= MIN_SUBJECT * m.size
    big[0] = False
    return ndimage.binary_fill_holes(big[labels]), fit
