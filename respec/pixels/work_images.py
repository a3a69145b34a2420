"""A turn's images as the pixel analysis reads them: float RGB in 0..1 at the working size
(beyond the paper).

Images above WORK_PIXELS (4 MP) are analysed at a working resolution (`working_size`) and the masks
upsampled, so an 8000² turn costs about what a 2048² one does; `work_float` keeps the few resized
images one turn's alignment, change record and Reveal Composite all read (respec/pixels/analysis_cache.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from ..history import StoredImage
from ..images import as_rgb
from .analysis_cache import CACHE, AnalysisCache

WORK_PIXELS = 4_194_304       # images above this (4 MP) are analysed at a working resolution, masks upsampled


def as_float_rgb(img: Any, size: tuple[int, int] | None = None) -> np.ndarray:
    """An image (array, PIL, StoredImage) as float32 H×W×3 in 0..1, resized (bilinear) to
    `size` = (width, height) when given and different."""
    if isinstance(img, StoredImage):
        img = img.array
    if isinstance(img, np.ndarray) and img.dtype.kind == "f" and img.ndim == 3 and img.shape[2] == 3:
        # already float 0..1 RGB (an aligned image): resized per channel, never re-quantised
        if size is None or (img.shape[1], img.shape[0]) == tuple(size):
            return img.astype(np.float32, copy=False)
        return np.stack([np.asarray(Image.fromarray(img[:, :, c].astype(np.float32)).resize(
            tuple(int(v) for v in size), Image.BILINEAR)) for c in range(3)], axis=2)
    pil = as_rgb(img)
    if size is not None and pil.size != tuple(size):
        pil = pil.resize(tuple(int(s) for s in size), Image.BILINEAR)
    return np.asarray(pil, dtype=np.float32) / 255.0


def working_size(size: tuple[int, int], max_pixels: int | None = None) -> tuple[int, int]:
    """(w, h) an image of `size` is analysed at: itself up to max_pixels (default WORK_PIXELS),
    else scaled down to it."""
    max_pixels = WORK_PIXELS if max_pixels is None else max_pixels
    w, h = int(size[0]), int(size[1])
    if w * h <= max_pixels:
        return (w, h)
    f = np.sqrt(max_pixels / float(w * h))
    return (max(1, int(w * f)), max(1, int(h * f)))


def work_float(img: StoredImage, size: tuple[int, int], cache: AnalysisCache = CACHE) -> np.ndarray:
    """as_float_rgb(img, size), cached for images resized to a working size (the turn's
    alignment, its change record and Reveal Composite read the same few large images); images
    that need no resizing are converted each time (no cache: that is one pass). Kept in `cache.work`."""
    if img.size == tuple(size):
        return as_float_rgb(img)
    key = (img.digest, tuple(size))
    hit = cache.work.get(key)
    if hit is not None:
        return hit
    out = as_float_rgb(img, size)
    out.flags.writeable = False
    cache.work.put(key, out)
    return out
