"""Binary masks on the history's grid: the one mask coercion, square morphology and the clean-up of
a thresholded mask (beyond the paper; shared by the change-mask rule, Reveal and the Drift Guard).

Every mask of a history lives at one size, I_0's (`history_size`): a turn of another size is
compared there, and a mask handed in at another size is resized (nearest) to it (`mask_at`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import ndimage

from ..history import History, TurnMask
from ..images import as_mask, resize_mask


def history_size(history: History) -> tuple[int, int]:
    """(width, height) every mask of this history is computed at: I_0's size."""
    return history.turns[0].image.size


def mask_at(mask: Any, shape: tuple[int, int], what: str = "mask") -> np.ndarray:
    """bool H×W at `shape` (H, W) from any mask a step is handed (a TurnMask, a bool, 0/1 or
    0..255 array, a 0..1 float mask, H×W×1 or 1×H×W): images.as_mask's rule (the one rule for
    every mask: a 0..255 scale counts above 127, a 0..1 scale above 0.5), resized nearest when its
    shape differs. `what` names the mask in the error for a mask of the wrong shape or dtype."""
    return resize_mask(as_mask(mask.mask if isinstance(mask, TurnMask) else mask, what), tuple(shape))


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Binary dilation by a (2r+1)² square (a separable max filter; the border repeats)."""
    if radius <= 0:
        return np.asarray(mask, bool)
    m = np.asarray(mask, np.uint8)
    rows, cols = np.nonzero(m.any(axis=1))[0], np.nonzero(m.any(axis=0))[0]
    if rows.size == 0:
        return np.zeros(m.shape, bool)
    # on the mask's bounding box grown by the radius (+1) only: nothing farther is reached, and the
    # box's own edge pixels are unset, as the ones beyond it are
    r = int(radius) + 1
    sl = (slice(max(0, rows[0] - r), rows[-1] + 1 + r), slice(max(0, cols[0] - r), cols[-1] + 1 + r))
    out = np.zeros(m.shape, bool)
    out[sl] = ndimage.maximum_filter(m[sl], 2 * int(radius) + 1, mode="nearest") > 0
    return out


def erode(mask: np.ndarray, radius: int) -> np.ndarray:
    """Binary erosion by a (2r+1)² square (the border repeats: touching it is not an edge)."""
    if radius <= 0:
        return np.asarray(mask, bool)
    return ndimage.minimum_filter(np.asarray(mask, np.uint8), 2 * int(radius) + 1, mode="nearest") > 0


def clean_mask(mask: np.ndarray, open_radius: int, close_radius: int, min_area: float) -> np.ndarray:
    """Opening (drop specks), closing (fill gaps), then drop components under min_area
    (a fraction of the image). Runs on the mask's bounding box (grown by both radii): nothing
    farther from a masked pixel can change."""
    mask = np.asarray(mask, bool)
    ys, xs = np.nonzero(mask.any(axis=1))[0], np.nonzero(mask.any(axis=0))[0]
    if ys.size == 0:
        return np.zeros(mask.shape, bool)
    h, w = mask.shape
    pad = 2 * (open_radius + close_radius) + 2
    y0, y1, x0, x1 = max(0, ys[0] - pad), min(h, ys[-1] + 1 + pad), max(0, xs[0] - pad), min(w, xs[-1] + 1 + pad)
    if (y1 - y0) * (x1 - x0) < 0.8 * h * w:
        out = np.zeros(mask.shape, bool)
        out[y0:y1, x0:x1] = _clean(mask[y0:y1, x0:x1], open_radius, close_radius, min_area * mask.size)
        return out
    return _clean(mask, open_radius, close_radius, min_area * mask.size)


def _clean(mask: np.ndarray, open_radius: int, close_radius: int, min_pixels: float) -> np.ndarray:
    m = dilate(erode(mask, open_radius), open_radius)
    m = erode(dilate(m, close_radius), close_radius)
    if min_pixels > 0 and m.any():
        labels, n = ndimage.label(m)
        sizes = np.bincount(labels.ravel())
        small = sizes < max(1.0, min_pixels)
        small[0] = False
        if small.any():
            m = m & ~small[labels]
    return m
