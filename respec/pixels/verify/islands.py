"""No islands, no slivers, no outlines: old content that the kept edit surrounds or cuts joins the
edit (a mend: the fallback's pixels there), or the step steps aside (issue 43).

What it looks at is the result (content.py): the pieces of old content the kept picture holds
where the fallback shows something else (S), and what surrounds each piece. A piece is flagged
when

    an island     the kept edit (new content, N) makes up ISLAND_SURROUND of its ring: a fragment of
                  the old subject floating beside the new one, an ear of the old head beside a new
                  head, a leaf speck inside the editor's removal
    an outline    it is thin (THIN_PX, content.py) and the kept edit makes up OUTLINE_SURROUND of its
                  ring: the rim of a removed hat brim, ball or cone left along the edit's edge (its
                  one side is the edit, the other the unchanged picture)
    a rim         a run of pixels just outside the kept edit that differ from the fallback twice as
                  much as the picture beyond them, where old has an edge the fallback has not
                  (content.rim_outline, at full size: a one-pixel brim ring the grid would dilute)

Pieces that touch the frame's edge are borders.py's. When the flagged pieces hold at most
MEND_SHARE of the content the result holds (old content kept and new), they join the edit (the
mend); more, and the step's result is mostly the thing that failed: the step steps aside.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from .content import ContentRead, rim_outline
from .values import CheckRead, Composite, Finding

NAME = "islands"
MIN_PIECE_PX = 4        # grid px: a smaller piece is the difference map's noise, not content (a leaf speck at
                        # 1024² is 4-8 grid px)
ISLAND_SURROUND = 0.6   # the kept edit makes up this share of a piece's ring: it surrounds the piece
OUTLINE_SURROUND = 0.3  # a thin piece whose ring is this much the kept edit lies along the edit's edge: an
                        # outline (a rim between the edit and the unchanged picture touches it on ~half its ring)
MEND_SHARE = 0.5        # the flagged pieces join the edit when they are at most this share of the content the
                        # result holds (old and new kept): more, and the result is mostly what failed
MEND_GROW = 1           # grid px: a mend reaches this far beyond the piece (its soft rim, the grid's rounding)
RIM_GROW = 1            # full-size px: a rim's mend reaches this far beyond it (its anti-aliased neighbours)


def flagged(read: ContentRead, at_edge: bool) -> np.ndarray:
    """The labels of the pieces that are islands or outlines (content.Pieces), among those touching
    the frame's edge (`at_edge`) or those not touching it."""
    p = read.pieces
    ids = np.arange(len(p.area))
    sized = (ids > 0) & (p.area >= MIN_PIECE_PX) & ((p.edge > 0) == at_edge)
    hit = (p.surround >= ISLAND_SURROUND) | (p.thin & (p.surround >= OUTLINE_SURROUND))
    return ids[sized & hit]


def mend_or_aside(c: Composite, ids: np.ndarray, check: str, what: str) -> CheckRead:
    """The CheckRead for the flagged pieces `ids` of `c`'s reading: nothing found when there are
    none; else a finding that names them (`what`), with a mend (the pieces, grown by MEND_GROW, at
    full size, where old was written) when they hold at most MEND_SHARE of the content kept."""
    read = c.content
    p = read.pieces
    total = int(read.old_kept.sum()) + int(read.new_kept.sum())
    area = int(p.area[ids].sum())
    measured = {**read.record(), f"{check}_pieces": int(len(ids)), f"{check}_px": area * read.factor ** 2}
    if len(ids) == 0:
        return CheckRead(measured)
    share = area / max(total, 1)
    measured[f"{check}_share"] = round(share, 4)
    worst = ids[np.argmax(p.area[ids])]
    detail = (f"{len(ids)} {what} of old content ({area * read.factor ** 2} px, {share:.0%} of the content kept; "
              f"the largest {int(p.area[worst]) * read.factor ** 2} px, {p.surround[worst]:.0%} of its rim the new edit)")
    if share > MEND_SHARE:
        return CheckRead(measured, Finding(check, detail + f": more than {MEND_SHARE:.0%} of what the step kept"))
    grid = np.isin(p.labels, ids)
    grid = ndimage.binary_dilation(grid, iterations=MEND_GROW) & (read.written > 0)
    mend = read.at_full(grid) & (c.written > 0)
    return CheckRead(measured, Finding(check, detail), mend)


def islands(c: Composite) -> CheckRead:
    """The islands check (the module docstring): pieces of old content inside the frame that the
    kept edit surrounds, thin ones along its edge, and one-pixel rims along it (content.rim_outline)."""
    read = mend_or_aside(c, flagged(c.content, at_edge=False), NAME, "island(s) or outline(s)")
    if read.finding is not None and read.mend is None:
        return read
    rim = rim_outline(c)
    n = int(rim.sum())
    measured = {**read.measured, "rim_px": n}
    if n == 0:
        return CheckRead(measured, read.finding, read.mend)
    mend = ndimage.binary_dilation(rim, iterations=RIM_GROW) & (c.written > 0)
    detail = f"a rim of old content along the edit's edge ({n} px, differing from the fallback more than beyond it)"
    if read.finding is not None:
        return CheckRead(measured, Finding(NAME, f"{read.finding.detail}; {detail}"), read.mend | mend)
    return CheckRead(measured, Finding(NAME, detail), mend)
