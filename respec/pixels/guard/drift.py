"""What the editor's drift explains (beyond the paper): after alignment, resampling, an editor's
blur and a sub-pixel misfit leave residuals along sharp edges that the change mask marks; the
Drift Guard does not keep them as the edit (`drift_explained`, `drop_drift`)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..colour_fit import ColourFit
from ..edit_region import convex_hull
from ..masks import dilate
from .arrays import bbox, open_square, sq_mean

DRIFT_SIGMAS = (0.0, 0.75, 1.5)     # the blurs of I_(t-1) an editor's softening is compared with (px)
RANGE_SHARE = 0.5   # a pixel this share of the drift limit outside the range of I_(t-1) around it is no edge's drift
FAINT = 0.5         # inside an edit's hull, a pixel differing by more than this share of the drift limit is the edit


def drift_explained(P: np.ndarray, E: np.ndarray, info: dict, limit: float) -> tuple[np.ndarray, np.ndarray]:
    """(explained, faint), bool H×W each. explained: the aligned editor pixels E that I_{t-1}'s
    pixels P explain as drift, not an edit. faint: the pixels that differ from every blurred P by
    more than FAINT × `limit` (a change too faint to tell from drift on its own: a tint where the
    picture is dark).
    After alignment, resampling, an editor's blur and a sub-pixel misfit leave residuals along
    sharp edges (an emblem, text) that the change mask marks. A pixel is drift when, after the
    turn's colour fit, E agrees within `limit` (3×3-mean RMS) with P blurred by one of DRIFT_SIGMAS,
    or lies within RANGE_SHARE × `limit` of the range P takes over its 3×3 neighbourhood (what any blur or
    shift of at most a pixel can produce, whatever the edge's contrast)."""
    Pf = ColourFit.from_info(info).apply(P)
    best = None
    for s in DRIFT_SIGMAS:
        bl = Pf if s == 0 else ndimage.gaussian_filter(Pf, (s, s, 0), mode="nearest")
        r = ndimage.uniform_filter(np.sqrt(sq_mean(bl - E)), 3, mode="nearest")
        best = r if best is None else np.minimum(best, r)
    lo = ndimage.minimum_filter(Pf, (3, 3, 1), mode="nearest")
    hi = ndimage.maximum_filter(Pf, (3, 3, 1), mode="nearest")
    out_of_range = np.maximum(np.maximum(lo - E, E - hi), 0.0)
    env = ndimage.uniform_filter(np.sqrt(sq_mean(out_of_range)), 3, mode="nearest")
    return (best <= limit) | (env <= RANGE_SHARE * limit), best > FAINT * limit


def drop_drift(c: np.ndarray, explained: np.ndarray, min_px: float,
               faint: np.ndarray | None = None, joined: np.ndarray | None = None,
               reach: int = 0) -> tuple[np.ndarray, int]:
    """The change mask without what drift explains (`drift_explained`). The pixels drift does not
    explain are opened (1 px) and their components under `min_px` pixels go (a drifted edge, an
    emblem's re-sampled detail): a change component with none of them left is drift and goes
    whole. Of a component with an edit in it, the pixels inside the convex hull of what drift
    cannot explain stay, explained or not (inside an edit some pixels happen to resemble what was
    there: a moved object's stripes over its old stripes are still the edit), and the rest goes (a
    drifted edge or emblem that the change mask's closing joined to the edit). Within that hull,
    `faint` pixels outside the change mask join the edit too (a tint fades where the picture is
    dark, below the change mask's threshold). Each `joined` component (a coherent area next to the
    change mask, `coherent_join`) keeps, with the change components within `reach` px of it, the
    pixels of the convex hull of them all that are changed or faint (a tinted box whose bright part
    the change mask found and whose dark part only the coherence test did). Returns (mask, pixels
    dropped: negative when faint pixels joined)."""
    if not c.any():
        return c, 0
    m = open_square(c & ~explained, 3)
    labels, n = ndimage.label(m)
    if n:
        sizes = np.bincount(labels.ravel())
        small = sizes < min_px
        small[0] = False
        m &= ~small[labels]
    kept = np.zeros_like(c)
    if m.any():
        comps, _ = ndimage.label(c)
        boxes = ndimage.find_objects(comps)
        for k in np.unique(comps[m]):
            sl = boxes[k - 1]
            comp = comps[sl] == k
            hull = convex_hull(m[sl] & comp)
            kept[sl] |= hull & (comp | faint[sl]) if faint is not None else comp & hull
    if joined is not None and joined.any():
        comps, _ = ndimage.label(c)
        jl, nj = ndimage.label(joined)
        for j in range(1, nj + 1):
            J = jl == j
            ids = np.unique(comps[dilate(J, reach) & c])
            group = np.isin(comps, ids[ids > 0]) | J
            sl = bbox(group, 0)
            inside = convex_hull(group[sl]) & (c[sl] | faint[sl]) if faint is not None else group[sl]
            kept[sl] |= inside
    return kept, int(c.sum() - kept.sum())
