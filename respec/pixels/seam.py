"""The seam's colour correction by normalised convolution (beyond the paper): one rule for Reveal
Composite (respec/pixels/reveal.py `seam_correction`: I_t - the paste, read on quiet pixels just
outside the revealed region) and the Drift Guard's `feather` seam (respec/pixels/guard/compose.py:
I_{t-1} - the editor's pixels, read around the edit region).

A colour difference known on some pixels (a band along a seam) is spread smoothly over its
neighbourhood: the difference and the band's indicator are blurred alike, and their ratio is the
difference carried to each pixel, weighted by how near the band it is (Knutsson & Westin's
normalised convolution). The field is bounded to ±SPREAD_CLIP. The Drift Guard's default seam, the
membrane, reads only the pixels right at the region's edge and is bounded more tightly (its
SEAM_CLIP): it corrects drift, never content.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

SPREAD_CLIP = 0.1       # 25/255: a step at a seam beyond this is content (a shadow, an object's edge), not an
                        # editor's colour drift; a field bounded by it cannot repaint what it corrects
KNOWN_FLOOR = 1e-3      # where the blurred band weighs less than this, no band pixel is near: no correction


def spread_difference(difference: np.ndarray, known: np.ndarray, blur: Callable[[np.ndarray], np.ndarray],
                      up: Callable[[np.ndarray], np.ndarray] | None = None, clip: float = SPREAD_CLIP) -> np.ndarray:
    """The colour difference (H×W×C float) known on `known` (bool or 0..1 H×W), spread smoothly
    (normalised convolution: blur(difference · known) / blur(known), 0 where blur(known) is below
    KNOWN_FLOOR), per channel, then bounded to ±clip. `blur`: one H×W plane -> blurred (a caller
    may blur at a reduced size); `up`: each channel's field back to the caller's grid, before the
    bound (None: blur keeps the size)."""
    b = known.astype(np.float32)
    diff = difference * b[..., None]
    den = blur(b)
    planes = []
    for c in range(diff.shape[2]):
        num = blur(diff[..., c])
        plane = np.where(den > KNOWN_FLOOR, num / np.maximum(den, KNOWN_FLOOR), 0.0)
        planes.append(up(plane) if up is not None else plane)
    return np.clip(np.stack(planes, axis=2), -clip, clip)
