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
                  (content.rim_outline, at full size: a one-pixel brim ring the grid would dilute);
                  one of RIM_FINAL_PX or more is final (Finding.final): the step steps aside unmended

Reveal Composite is not read here: its old content is the hidden region it restores, which the
editor's picture surrounds by design (a piece of I_{k-1} inside I_t is the paste itself, not a
fragment left behind). Mending it hands the editor's invention back: in the simulated benchmark,
where the truth is known, the mends lowered S_restore from 0.979 to 0.957. Reveal's result is read
by the frame-border, seam and colour checks.

Pieces that touch the frame's edge are borders.py's. When the flagged pieces hold at most
MEND_SHARE of the content the result holds (old content kept and new), they join the edit (the
mend); more, and the step's result is mostly the thing that failed: the step steps aside. A mend
joins the whole piece of old content it found, not only the part above tau: its connected component
where old and the fallback differ by half of tau (at least the content floor), grown by MEND_MARGIN_FRAC
of the shorter side. The mended picture is checked again, whole: a piece still cut steps aside.

Patchwork (content.edit_pieces): a kept edit that holds what the editor changed meets the old
picture where the two agree. A re-drawn or re-posed subject cannot be cut into blocks that way:
the Drift Guard's tile-shaped region then keeps blocks of the new face on the old one, or the old
head beside a new ear, each meeting the other along a straight cut. When PATCH_PIECES or more
pieces of the kept edit (each at least PATCH_MIN_SHARE of the picture) run through content the two
pictures do not share along CUT_SHARE of their edge, or one piece along CUT_WHOLE of it, nothing
can mend it (joining old content to the edit moves the cut, it does not close it): the step steps
aside.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from .content import CONTENT_MIN, ContentRead, edit_pieces, rim_outline
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
RIM_FINAL_PX = 40       # a rim this long (full-size px) is not mended: the edit's boundary runs along something the
                        # two pictures draw differently, and a mend moves the boundary, not the mismatch (a final
                        # finding). Looked at one by one (docs/harm.md), the guard results whose first read found a
                        # rim of 55 px or more were damaged in 8 of 11 (2 unsure, 1 clean: patchwork beside the rim,
                        # a cut ear, a cushion block); the 3 with 25 px were clean, and so was the simulated
                        # benchmark's one rim, 26 px at 256² (a share of the side would have caught it: 10 %, beside
                        # the real damaged ones' 11 % and up)
MEND_LEVEL = 0.5        # a mend joins the piece's component where the difference reaches this share of tau: its
                        # soft part (a face's shading, a fur's tips) below tau shows as much as its core
MEND_MARGIN_FRAC = 0.01  # ... grown by this share of the shorter side (grid px, at least MEND_GROW): the few
                         # pixels a mend joined before left the piece's outer half visible
PATCH_MIN_SHARE = 0.0025  # a kept-edit piece counts toward patchwork from this share of the picture (a block
                          # of a face at 512²: 650 grid px); the specks of a removal's soft edge are smaller
CUT_SHARE = 0.25        # a piece is cut when this share of its edge runs through content (on the real chains a
                        # Kontext or Gemini edit's piece reaches 0.29 at most, alone; a re-posed girl's blocks 0.26-0.69)
PATCH_PIECES = 2        # this many cut pieces are a patchwork (a Kontext or Gemini edit has one cut piece at most)
CUT_WHOLE = 0.9         # one piece cut along this share of its edge is a patch of a re-drawn subject by itself
                        # (MC-Edit direct's hair, half old half new: 0.92; a clean FLUX.2 klein replacement beside a
                        # rectangle the editor lightened: 0.87)


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
    mend = read.at_full(whole_pieces(read, ids)) & (c.written > 0)
    return CheckRead(measured, Finding(check, detail), mend)


def whole_pieces(read: ContentRead, ids: np.ndarray) -> np.ndarray:
    """The grid mask a mend of the pieces `ids` joins to the edit: each piece's connected component
    where old was written and old and the fallback differ by MEND_LEVEL of tau (at least the content
    floor), grown by MEND_MARGIN_FRAC of the picture's shorter side (grid px, at least MEND_GROW)."""
    p = read.pieces
    seed = np.isin(p.labels, ids)
    level = max(CONTENT_MIN, MEND_LEVEL * read.tau)
    differs = (read.written > 0) & ((read.d > level) | seed)
    labels, _ = ndimage.label(differs, np.ones((3, 3), bool))
    whole = np.isin(labels, np.unique(labels[seed]))
    margin = max(MEND_GROW, round(MEND_MARGIN_FRAC * min(read.full) / read.factor))
    return ndimage.binary_dilation(whole, np.ones((3, 3), bool), iterations=margin) & (read.written > 0)


def patchwork(c: Composite) -> CheckRead:
    """The patchwork rule (the module docstring): the kept edit's pieces whose edge cuts through
    content (content.edit_pieces); a finding without a mend when they make a patchwork."""
    read = c.content
    if not read.has_edge:
        return CheckRead({"cut_pieces": 0})
    e = edit_pieces(read)
    grid_px = read.full[0] * read.full[1] / read.factor ** 2
    ids = np.arange(len(e.area))
    big = (ids > 0) & (e.area >= PATCH_MIN_SHARE * grid_px)
    cut = big & (e.cut_share >= CUT_SHARE)
    worst = float(e.cut_share[big].max()) if big.any() else 0.0
    measured = {"cut_pieces": int(cut.sum()), "most_cut": round(worst, 3)}
    if cut.sum() < PATCH_PIECES and worst < CUT_WHOLE:
        return CheckRead(measured)
    return CheckRead(measured, Finding(NAME, (
        f"patchwork: {int(cut.sum())} piece(s) of the kept edit meet the old picture through content the two "
        f"do not share (up to {worst:.0%} of a piece's edge; {int(e.cut[cut].sum()) * read.factor} px of cuts): "
        "a re-drawn subject kept in blocks, which joining old content to the edit cannot close")))


def reveal_not_read() -> CheckRead:
    """What the checks that do not read Reveal's paste (this one and fragments.py) record for it."""
    return CheckRead({"read": False, "why": "Reveal's old content is the hidden region it restores"})


def islands(c: Composite) -> CheckRead:
    """The islands check (the module docstring): pieces of old content inside the frame that the
    kept edit surrounds, thin ones along its edge, one-pixel rims along it (content.rim_outline), and,
    where none is left to mend, a kept edit in cut blocks (patchwork: the step steps aside). Reveal's
    paste is not read (the module docstring)."""
    if c.step == "reveal":
        return reveal_not_read()
    read = mend_or_aside(c, flagged(c.content, at_edge=False), NAME, "island(s) or outline(s)")
    if read.finding is not None and read.mend is None:
        return read
    rim = rim_outline(c)
    n = int(rim.sum())
    measured = {**read.measured, "rim_px": n}
    if n == 0 and read.finding is None:
        # nothing to mend: is the kept edit itself in cut blocks? (after a mend, the mended picture is
        # read here again: a piece still cut steps aside)
        cuts = patchwork(c)
        return CheckRead({**measured, **cuts.measured}, cuts.finding)
    if n == 0:
        return CheckRead(measured, read.finding, read.mend)
    detail = f"a rim of old content along the edit's edge ({n} px, differing from the fallback more than beyond it)"
    if n >= RIM_FINAL_PX:
        return CheckRead(measured, Finding(NAME, f"{detail}: from {RIM_FINAL_PX} px on, the edit's boundary runs "
                                                 "along something the two pictures draw differently, which a mend "
                                                 "moves but does not close", final=True))
    mend = ndimage.binary_dilation(rim, iterations=RIM_GROW) & (c.written > 0)
    if read.finding is not None:
        return CheckRead(measured, Finding(NAME, f"{read.finding.detail}; {detail}"), read.mend | mend)
    return CheckRead(measured, Finding(NAME, detail), mend)
