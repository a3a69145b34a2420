"""Thin lines the edit drew (beyond the paper): a necklace's chain next to its pendant, which the
change mask's threshold and opening missed, joins the edit region when it leads away from the edit
and stands out of what lies beside it (`thin_lines`)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from ..masks import dilate
from .arrays import bbox

THIN_OPEN = 11             # a change drift does not explain that an opening this wide (px) removes almost whole
THIN_SURVIVES = 0.1        # (at most this share of it survives: a line, not a re-drawn area's rim) ...
THIN_REACH = 0.06          # ... and that reaches this share of the shorter side away from the edit it touches joins it,
THIN_DELTA = 40.0 / 255.0  # ... unless the pixels beside it that have its colour (within this, largest channel) ...
THIN_ALIKE = 0.25          # ... are more than this share of them (the moved edge of an area, not a line)


def thin_lines(c: np.ndarray, explained: np.ndarray, E: np.ndarray, P: np.ndarray) -> np.ndarray:
    """The lines the edit drew next to its change `c` that the change mask's threshold and opening
    missed (a necklace's chain next to its pendant): components of what drift does not explain
    (`explained` False) that touch `c`, that a THIN_OPEN px opening removes (at most THIN_SURVIVES of
    them survives it: a line, not a re-drawn area's rim), that reach THIN_REACH of the shorter
    side away from `c` (a line leading away from the edit, not a streak along its rim; half of it
    for a line that runs out of the picture, a wire hanging from the top edge) and that stand out of
    what lies along them in the editor's image `E` (at most THIN_ALIKE of the pixels beside the line
    have its colour: a ridge, not the edge of an area that moved, whose one side is the line's own
    colour). The line's colour is read on its core, where E differs from I_(t-1) `P` the most (a
    pale wire's soft sides are nearly the wall's colour). A re-drawn area is not thin; a thin
    re-drawn strand away from the edit does not touch it."""
    out = np.zeros_like(c)
    if not c.any():
        return out
    sl = bbox(c | ~explained, THIN_OPEN)
    u = ~explained[sl] & ~c[sl]
    if not u.any():
        return out
    labels, _ = ndimage.label(u, np.ones((3, 3), bool))
    touching = np.unique(labels[dilate(c[sl], 1) & u])
    reach = THIN_REACH * min(c.shape)
    boxes = ndimage.find_objects(labels)
    h, w = u.shape
    for k in touching[touching > 0]:
        bs = boxes[k - 1]
        # a line that runs out of the picture (a wire hanging from the top edge) needs half the reach
        need = reach / 2 if _at_border(sl, bs, c.shape) else reach
        if max(bs[0].stop - bs[0].start, bs[1].stop - bs[1].start) < need:
            continue        # most touching pieces are small: nothing more is read for them
        comp = labels[bs] == k
        if comp.sum() < need:
            continue
        # the opening by a square, as a separable minimum then maximum filter (a line: at most a
        # tenth of it survives)
        pad = np.pad(comp, THIN_OPEN)
        opened = ndimage.maximum_filter(ndimage.minimum_filter(pad, THIN_OPEN, mode="constant"), THIN_OPEN,
                                        mode="constant")[THIN_OPEN:-THIN_OPEN, THIN_OPEN:-THIN_OPEN] & comp
        if opened.sum() > THIN_SURVIVES * comp.sum():
            continue
        # the distance to the change on the component's box grown by `reach` (exact for "reaches it")
        r = int(np.ceil(reach))
        ys = slice(max(0, bs[0].start - r), min(h, bs[0].stop + r))
        xs = slice(max(0, bs[1].start - r), min(w, bs[1].stop + r))
        away = ndimage.distance_transform_edt(~c[sl][ys, xs])
        inner = (slice(bs[0].start - ys.start, bs[0].stop - ys.start), slice(bs[1].start - xs.start, bs[1].stop - xs.start))
        if away[inner][comp].max() >= need and _ridge(comp, E[sl], P[sl], bs):
            out[sl][bs] |= comp
    return out


def _at_border(sl: tuple[slice, slice], bs: tuple[slice, slice], shape: tuple[int, ...]) -> bool:
    """Whether the component with box `bs` on the crop `sl` touches the picture's border (its box is
    tight: a box on the border row or column holds a pixel of it there)."""
    y0, x0 = sl[0].start + bs[0].start, sl[1].start + bs[1].start
    y1, x1 = sl[0].start + bs[0].stop, sl[1].start + bs[1].stop
    return y0 == 0 or x0 == 0 or y1 == shape[0] or x1 == shape[1]


def _ridge(comp: np.ndarray, E: np.ndarray, P: np.ndarray, bs: tuple[slice, slice]) -> bool:
    """Whether the line `comp` (on the crop `bs` of E's frame) stands out of the pixels beside it in
    E: at most THIN_ALIKE of those within THIN_OPEN px have the median colour of its core (its
    pixels where E differs from P by at least half its 90th percentile; within THIN_DELTA)."""
    h, w = E.shape[:2]
    y0, x0 = max(0, bs[0].start - THIN_OPEN), max(0, bs[1].start - THIN_OPEN)
    y1, x1 = min(h, bs[0].stop + THIN_OPEN), min(w, bs[1].stop + THIN_OPEN)
    line = np.zeros((y1 - y0, x1 - x0), bool)
    line[bs[0].start - y0:bs[0].stop - y0, bs[1].start - x0:bs[1].stop - x0] = comp
    beside = dilate(line, THIN_OPEN) & ~dilate(line, 1)
    crop = E[y0:y1, x0:x1]
    before = P[y0:y1, x0:x1][line]
    before = before / np.float32(255.0) if before.dtype == np.uint8 else before     # E's 0..1 scale
    moved = np.abs(crop[line] - before).max(axis=1)
    core = crop[line][moved >= 0.5 * np.percentile(moved, 90)]
    alike = np.abs(crop[beside] - np.median(core, axis=0)).max(axis=1) <= THIN_DELTA
    return bool(alike.mean() <= THIN_ALIKE) if beside.any() else False


GAP_MAX_PX = 4.0           # a gap (below) holds at most this times the reach (THIN_REACH of the shorter side) in px


def change_gaps(c: np.ndarray, explained: np.ndarray) -> np.ndarray:
    """Gaps in the change `c`: components of what drift does not explain (`explained` False) beside
    `c` that touch it at two places or more (a bridge between two parts of the change: the stretch
    of a removed annotation's red line that the change mask missed between two it caught), of at
    most GAP_MAX_PX x the reach in px. Left to I_(t-1) such a stretch stays behind as a fragment of
    the removed line."""
    out = np.zeros_like(c)
    if not c.any() or explained.all():
        return out
    sl = bbox(c, THIN_OPEN)
    u = ~explained[sl] & ~c[sl]
    if not u.any():
        return out
    eight = np.ones((3, 3), bool)
    labels, _ = ndimage.label(u, eight)
    edge = dilate(c[sl], 1) & u            # where the pieces touch the change
    limit = GAP_MAX_PX * THIN_REACH * min(c.shape)
    boxes = ndimage.find_objects(labels)
    for k in np.unique(labels[edge]):
        if k == 0:
            continue
        bs = boxes[k - 1]
        comp = labels[bs] == k
        if comp.sum() > limit:
            continue
        _, places = ndimage.label(comp & edge[bs], eight)
        if places >= 2:
            out[sl][bs] |= comp
    return out
