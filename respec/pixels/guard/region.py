"""Step 4 of the Drift Guard: the edit region K in I_{t-1}'s frame, read on the tiles near the
change (tiles.py). Each function is one sub-step of drift_guard (run.py) and returns its values:

    4a seed_of       what changed (the user's mask, else the change mask) and the turn's pasted pixels
    4b warp_near     the editor's pixels warped on the tiles near the change, drift told (a Tiles store)
    4c change_kept   the change the edit made: drift and re-drawn detail dropped, a tint and thin lines joined
    4d edit_region   K: the change grown by the margin where the editor's pixels differ beyond drift
    4e pose          a global edit region, or a pose change around it, steps aside
"""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from ..alignment import Alignment, warp
from ..change_mask import unstable_mask
from ..change_record import grid_from_info
from ..edit_region import CoarseChange, coarse_change, coarse_size
from ..masks import dilate, mask_at
from ..structure import plain_warp
from .arrays import bbox, float_rgb, open_square
from .beyond_request import beyond_request, spread_out
from .coherent import coherent_join, coherent_level, coherent_residual
from .compose import seam_reach
from .drift import drop_drift
from .params import NEAR_FRAC
from .result import GuardResult, stepped_aside
from .routes import ring_changed
from .thin_lines import change_gaps, thin_lines
from .tiles import Tiles, padded, tiles_near
from .values import Frame, GuardInputs, ScopeRead

THIN_FOLLOW = 4             # rounds of tiles a thin line is followed onto beyond those near the seed
DRIFT_MIN_SHARE = 2e-4      # a piece of change drift does not explain below this share of the picture (and a
                            # pixel) is a drifted edge or an emblem's re-sampled detail, not an edit


def seed_of(inputs: GuardInputs, frame: Frame, extra_region: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Step 4a, in I_{t-1}'s frame: (what changed: the user's mask, else the change mask (measured
    again through the structure warp when step 3 did); the turn's pasted pixels, or None)."""
    al = inputs.al
    seed = inputs.user if inputs.user is not None else frame.seed
    if seed is None:
        seed = inputs.change.mask if al.is_identity else warp(inputs.change.mask, frame.inv, order=0)
    extra = None
    if extra_region is not None and inputs.user is None:
        extra = mask_at(extra_region, inputs.shape, "extra_region")
        extra = extra if al.is_identity else warp(extra, al.inverse(), order=0)
    return seed, extra


def warp_near(inputs: GuardInputs, frame: Frame, seed: np.ndarray, extra: np.ndarray | None,
              checks: dict) -> Tiles:
    """Step 4b: the editor's pixels warped on the tiles near the change, drift told on those near the
    seed; a faint area coherent in colour is not drift (a tint) when it stands out of the drift
    around the change (the level, `tiles.level`, is COHERENT_OVER_DRIFT x the median smoothed
    residual on the tested tiles away from the change: an editor whose colour drift varies over the
    picture raises it, and there a tint cannot be told from drift and the rule keeps out)."""
    params, px, shape, info = inputs.params, inputs.px, inputs.shape, frame.info
    reach = px["margin"] + seam_reach(px)
    tiles = Tiles(inputs.prev3, inputs.cur3, frame, params.drift_residual,
                  tiles_near(seed, px["margin"] + 1) if inputs.user is None else set())
    tiles.warp(tiles_near(seed | extra if extra is not None else seed, reach) | tiles.test)
    if params.coherent and inputs.user is None and tiles.test:
        level = tiles.level = coherent_level(inputs.prev3, tiles.E, seed, tiles.test, info, params)
        checks["coherent_level"] = round(level * 255.0, 2)
        for tile in tiles.test if level else ():
            (Y0, Y1, X0, X1), inner = padded(tile, shape)
            y0, y1, x0, x1 = tile
            ex = tiles.explained[Y0:Y1, X0:X1].copy()
            co = coherent_residual(float_rgb(inputs.prev3[Y0:Y1, X0:X1]), tiles.E[Y0:Y1, X0:X1], info, level,
                                   params.coherent_ratio, params.coherent_sigma)
            ex &= ~open_square(ex & co, params.coherent_open)
            tiles.explained[y0:y1, x0:x1] = ex[inner]
    return tiles


def change_kept(inputs: GuardInputs, read: ScopeRead, frame: Frame, tiles: Tiles, seed: np.ndarray,
                extra: np.ndarray | None, checks: dict) -> tuple[np.ndarray, CoarseChange | None]:
    """Step 4c: (the change the edit made, the change of content at the coarse scale when a rule
    read it, else None): the seed joined with a coherent tint next to it, without what drift
    explains (drop_drift), without re-drawn detail away from the request's change (beyond_request),
    with the turn's pasted pixels."""
    if inputs.user is not None:
        return seed, None
    shape, px, params, info = inputs.shape, inputs.px, inputs.params, frame.info
    c_all = np.zeros(shape, bool)
    found, cc = seed, None
    if tiles.level and seed.any():
        joined, why_not = coherent_join(inputs.prev3, tiles.E, seed, tiles.src, info, tiles.done, tiles.warp, params,
                                        px, tiles.level)
        if joined is not None:
            checks["coherent_px_joined"] = int(joined.sum())
            found = seed | joined
            tiles.explained &= ~joined
        elif why_not:
            checks["coherent_not_joined"] = why_not
    s0 = bbox(found, 1)
    c_all[s0], dropped = drop_drift(found[s0], tiles.explained[s0], max(1.0, DRIFT_MIN_SHARE * seed.size),
                                    tiles.faint[s0], (found & ~seed)[s0], px["margin"] + params.coherent_open)
    if dropped:
        checks["drift_px_dropped"] = dropped
    if read.local and c_all.any() and spread_out(c_all, round(NEAR_FRAC * min(shape))):
        cc = coarse_change(inputs.prev3, *(frame.sw or plain_warp(inputs.al, shape)).sample_coarse(
            inputs.cur3, coarse_size(shape)[0]))
        beyond = beyond_request(inputs.prev3, tiles.E, c_all, info, cc, read.places, read.named)
        if beyond.any():
            checks["beyond_request_px_dropped"] = int(beyond.sum())
            c_all &= ~beyond
    lines = thin_lines(c_all, tiles.explained, tiles.E, inputs.prev3)
    for _ in range(THIN_FOLLOW):      # a line that leaves the tested tiles is followed onto the next ones
        more = tiles_near(lines, px["margin"] + 1) - tiles.test
        if not more:
            break
        tiles.tell(more)
        lines = thin_lines(c_all, tiles.explained, tiles.E, inputs.prev3)
    if lines.any():
        checks["thin_lines_px_joined"] = int(lines.sum())
        c_all |= lines
    gaps = change_gaps(c_all, tiles.explained)
    if gaps.any():
        checks["change_gaps_px_joined"] = int(gaps.sum())
        c_all |= gaps
    if extra is not None:
        c_all = c_all | extra
    return c_all, cc


DROPPED_EDGE = 0.5        # a Sobel response of the channels' sum (0..1 each) this strong in I_(t-1): an edge (a step
                          # of about 10/255 in every channel) ...
DROPPED_OVER = 4.0        # ... that the editor's image has less than a quarter of: an edge the edit dropped


def dropped_edges(P: np.ndarray, E: np.ndarray) -> np.ndarray:
    """bool H×W: where I_(t-1) `P` (uint8) has an edge that the editor's image `E` (float 0..1, same
    frame) has not (DROPPED_EDGE, DROPPED_OVER): an old object's anti-aliased outline beside a
    change that removed or replaced it, which differs from the editor's background by less than
    drift and, left in place, is a visible line (step1x_0004's letter edge). An added object's own
    edge is the editor's, not I_(t-1)'s: its rim stays I_(t-1)'s."""
    def strength(rgb: np.ndarray) -> np.ndarray:
        g = rgb.sum(axis=2, dtype=np.float32)
        return np.hypot(ndimage.sobel(g, 0), ndimage.sobel(g, 1))
    old = strength(P.astype(np.float32) / 255.0)
    return (old > DROPPED_EDGE) & (old > DROPPED_OVER * strength(E))


def edit_region(inputs: GuardInputs, tiles: Tiles,
                c_all: np.ndarray) -> tuple[tuple[slice, slice], np.ndarray, np.ndarray]:
    """Step 4d: (the crop around the change, K: the pixels that keep the editor's, the region: the
    change grown by the margin, holes filled), on the crop. In the margin the editor's pixels are
    kept where they differ from I_(t-1) beyond its drift (a soft shadow the threshold missed) and,
    within the rim (px["rim"]) of the change, where I_(t-1) has an edge the editor's image does not
    (`dropped_edges`: the outline of an old object the edit removed or replaced); elsewhere the
    margin is I_(t-1)'s."""
    px = inputs.px
    sl = bbox(c_all, px["margin"] + seam_reach(px)) if c_all.any() else (slice(0, 1), slice(0, 1))
    src, c = tiles.src[sl], c_all[sl]
    if inputs.user is not None:
        K = region = c & src
    else:
        grown = dilate(c, px["margin"])
        region = ndimage.binary_fill_holes(grown) & src
        rim = dilate(c, min(px["rim"], px["margin"])) & dropped_edges(inputs.prev3[sl], tiles.E[sl])
        K = ndimage.binary_fill_holes(c | rim | (grown & ~tiles.explained[sl])) & src
    if K.any():     # a filled hole can reach beyond the tiles warped so far: warp those too
        k_all = np.zeros(inputs.shape, bool)
        k_all[sl] = K
        tiles.warp(tiles_near(k_all, seam_reach(px)))
    return sl, K, region


def pose(inputs: GuardInputs, frame: Frame, K: np.ndarray, sl: tuple[slice, slice], cc: CoarseChange | None,
         edit_fraction: float) -> GuardResult | None:
    """Step 4e: a global edit region, or a pose change around it, steps aside. The pose test reads the
    stability blocks of the turn's record; after a structure warp (a re-rendered scene, whose every
    block the record calls unstable) the change of content."""
    params, shape = inputs.params, inputs.shape
    if inputs.user is not None:
        return None
    if edit_fraction > params.global_share:
        return stepped_aside(inputs.cur, frame.base, f"a global edit: the edit region covers {edit_fraction:.0%} of "
                             f"the picture (limit {params.global_share:.0%})", why="global",
                             edit_fraction=round(edit_fraction, 6))
    if not K.any():
        return None
    if frame.sw is None:
        moved = moved_around(K, sl, shape, frame.info, frame.inv)
    else:
        cc = cc or coarse_change(inputs.prev3, *frame.sw.sample_coarse(inputs.cur3, coarse_size(shape)[0]))
        k_all = np.zeros(shape, bool)
        k_all[sl] = K
        moved = ring_changed(cc, np.asarray(Image.fromarray(k_all).resize(cc.residual.shape[::-1], Image.BOX)))
    if moved > params.max_moved_around:
        return stepped_aside(inputs.cur, frame.base, f"the editor moved the picture around the edit ({moved:.0%} of "
                             f"the pixels around it changed their structure: a pose change): pasting the edit into "
                             f"the previous image would break what it is part of", why="moved",
                             moved_around=round(moved, 4), edit_fraction=round(edit_fraction, 6))
    return None


def moved_around(K: np.ndarray, sl: tuple[slice, slice], shape: tuple[int, int], info: dict,
                 inv: Alignment) -> float:
    """The share of a ring around the edit region (from `ring_gap` to `ring_gap` + 2 blocks of the
    change record's stability grid out) that lies in blocks whose structure moved or was redrawn
    after alignment (the record's `unstable_grid`, in I_(t-1)'s frame): high when the editor
    changed the pose of what the edit is part of (a cat whose head turned under its new hat)."""
    grid = grid_from_info(info)
    if grid is None or not grid.any():
        return 0.0
    block = max(shape[0] / grid.shape[0], shape[1] / grid.shape[1])
    gap, width = int(round(block / 2)), int(round(2 * block))
    y0, y1 = max(0, sl[0].start - gap - width), min(shape[0], sl[0].stop + gap + width)
    x0, x1 = max(0, sl[1].start - gap - width), min(shape[1], sl[1].stop + gap + width)
    k = np.zeros((y1 - y0, x1 - x0), bool)
    k[sl[0].start - y0:sl[0].stop - y0, sl[1].start - x0:sl[1].stop - x0] = K
    ring = dilate(k, gap + width) & ~dilate(k, gap)
    if not ring.any():
        return 0.0
    bad = unstable_mask(grid, shape)
    bad = (bad if inv.is_identity else warp(bad, inv, order=0))[y0:y1, x0:x1]
    return float((bad & ring).sum()) / float(ring.sum())
