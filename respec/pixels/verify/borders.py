"""Frame borders: where `old`'s warped frame and the kept frame disagree, old pixels are never
written (issue 43). Three things in the result break it:

    old where old has none     written > WRITTEN_EPS where old_valid is false: the step wrote the
                               warp's padding (mended with the fallback's pixels where it has them)
    old framing the edit       the kept edit (new content) runs within STRIP_REACH of a strip where the
                               fallback, read in kept's frame, has no pixels, along FRAMED_LEN_FRAC of
                               the picture's shorter side, so the old picture
                               fills that strip beside the new content: a new background framed by
                               strips of the old one (no mend: the fallback has nothing there)
    a strip at the edge        a piece of old content that touches the frame's edge and that the kept
                               edit surrounds on the inside, or a thin one along it (the editor
                               re-framed, or removed what reached the edge): a strip of a removed
                               plant along the border, carried to every later turn (islands.py's
                               rules and mend, for the pieces at the edge)
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from .islands import flagged, mend_or_aside
from .values import CheckRead, Composite, Finding

NAME = "borders"
WRITTEN_EPS = 0.02      # a written weight below this is a blend's far tail (under 5/255 of any difference)
MIN_UNSEEN_PX = 16      # full-size px: fewer written where old has no pixels is a resampling edge, not a strip
STRIP_REACH = 3         # grid px: new content this close to where the fallback has no pixels meets that strip ...
FRAMED_LEN_FRAC = 0.1   # ... along at least this share of the grid's shorter side (a strip framing a new background
                        # runs along whole sides; a re-render's few drifted pixels near a warped border do not)


def borders(c: Composite) -> CheckRead:
    """The frame-borders check (the module docstring)."""
    read = c.content
    if c.old_valid is not None:
        unseen = (c.written > WRITTEN_EPS) & ~c.old_valid
        n = int(unseen.sum())
        if n >= MIN_UNSEEN_PX:
            detail = f"old pixels written in {n} px where old's warped frame has none (the frame moved)"
            if c.fallback_valid is not None and (unseen & ~c.fallback_valid).any():
                return CheckRead({**read.record(), "unseen_px": n}, Finding(NAME, detail + " and the fallback "
                                                                                  "has none either"))
            return CheckRead({**read.record(), "unseen_px": n}, Finding(NAME, detail), unseen)
    if c.fallback_valid is not None:
        on_grid = read.at_grid(~c.fallback_valid)
        if on_grid.any():
            near = ndimage.binary_dilation(on_grid, iterations=STRIP_REACH) & read.new_kept
            n = int(near.sum())
            if n >= STRIP_REACH * FRAMED_LEN_FRAC * min(read.shape):
                return CheckRead({**read.record(), "framed_px": n * read.factor ** 2},
                                 Finding(NAME, f"the new content meets a strip where the fallback has no pixels "
                                               f"({n * read.factor ** 2} px of it within {STRIP_REACH * read.factor} px): "
                                               f"the old picture frames the edit"))
    return mend_or_aside(c, flagged(read, at_edge=True), NAME, "strip(s) at the frame's edge")
