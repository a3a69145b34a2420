"""No fragments of cut objects: old content that the kept edit cuts joins the edit (a mend: the
fallback's pixels there), or the step steps aside (issue 43).

A fragment is a piece of old content kept (S, content.py) that the editor's picture does not show
and whose object, in `old`, runs on into the kept edit, where the edit shows something else (new
content, N): the object was cut by the edit's edge. The piece need not be surrounded by the edit
(islands.py) nor thin: the arc of a removed floor lamp over a window, cut where the new plant
begins; the leaf tip of a removed plant above a sofa; a smudge of old hair on a new hat's crown;
the old strokes of a word between the letters of the new one; a pale patch of old light on a wall
where the new object's shadow begins. What the edit's pixels continue into must be the editor's
picture on both sides of the cut, so the whole piece joins the edit.

A piece is a fragment when at least CONTACT_PX of its ring is the kept edit's new content; pieces
smaller than islands.MIN_PIECE_PX are noise. The mend and the step aside are islands' rule
(islands.mend_or_aside): the pieces join the edit while they hold at most islands.MEND_SHARE of the
content the result holds.
"""
from __future__ import annotations

import numpy as np

from .islands import MIN_PIECE_PX, mend_or_aside
from .values import CheckRead, Composite

NAME = "fragments"
CONTACT_PX = 3      # grid px of a piece's ring that are the kept edit's new content: the object runs on into the
                    # edit over at least this (a lamp's 2-3 px arc at 512² meets the edit over ~3-6 ring px; one or
                    # two are the 3×3 mean carrying a difference across the written edge)


def fragment_ids(c: Composite) -> np.ndarray:
    """The labels of the pieces of old content kept (content.Pieces) that the kept edit cuts: at
    least MIN_PIECE_PX grid px, and at least CONTACT_PX of their ring the edit's new content."""
    p = c.content.pieces
    ids = np.arange(len(p.area))
    return ids[(ids > 0) & (p.area >= MIN_PIECE_PX) & (p.ring_new >= CONTACT_PX)]


def fragments(c: Composite) -> CheckRead:
    """The fragments check (the module docstring): pieces of old content whose object runs on into
    the kept edit join it (a mend), or the step steps aside when they are most of what it kept."""
    if not c.content.has_edge:
        return CheckRead(c.content.record())
    return mend_or_aside(c, fragment_ids(c), NAME, "fragment(s) of objects the edit cut")
