"""Drift Guard: pixels the request did not touch stay the user's pixels, turn after turn (beyond
the paper).

Every call of an in-context editor re-encodes and re-renders the whole picture: colours shift,
detail softens, some editors zoom out or shift a little on every call. The history then keeps
whatever the editor returned, and over a conversation the untouched parts of the picture drift
away from the user's. The guard runs after the editor (and after Reveal Composite) and returns

    I_{t-1} outside the edit region, the editor's pixels inside it, in I_{t-1}'s frame

so a zoom-out or a shift is undone, not accumulated. What it guarantees:

- **It shares the turn's record.** The alignment I_{t-1} -> I_t and the change mask C_t are the
  ones History Append keeps with the turn (respec/pixels/analysis_cache.py, keyed by the two images'
  digests): the guard computes nothing a second time, and the change record of its own output is
  derived from the edit's (`guarded_change`), not measured again, and returned with its result.
- **The edit region** K is C_t carried into I_{t-1}'s frame without what the editor's drift
  explains (`drift_explained`: the aligned editor pixel agrees with I_{t-1} blurred, or lies within
  the range I_{t-1} takes around it; `drop_drift`: a change component with nothing else left is
  drift and goes whole, one with an edit in it keeps the inside of the hull of its edit; a faint
  area whose colour shifted one way, in the change or next to it, is an edit, not drift:
  `coherent_residual`, `coherent_join`), joined with what the turn says should change (Reveal
  Composite's pasted pixels), grown by `margin` px
  where the editor's pixels still differ beyond drift (a soft shadow the threshold missed), holes
  filled. A user's MASK replaces it all: the user's own mask wins over the change mask.
- **Outside K nothing is touched** (the default seam, `membrane`): the output there is I_{t-1}'s
  own pixels, so a long conversation does not accumulate anything around its edits. Inside K the
  editor's pixels, with the colour step at K's edge taken away by a smooth correction field in
  K's outermost `band` px only (the difference of the two images just outside K, carried inside
  by push-pull): the edit's interior is the editor's pixels. The `multiband` seam (blend.multiband_blend over `band` px outside K) and
  the first version's linear `feather` are there to be measured against (docs/drift-guard.md).
- **The request decides what is drift** (respec/controller/request_language.py, read clause by
  clause by the post-edit step into an `EditScope`: the pixel rules read no language). On a local request a whole-picture colour shift is drift: the edit is mapped into the
  previous image's grade (respec/pixels/grade.py). A re-render, or a zoom one similarity does not
  follow, is read through the structure warp and the local motion field
  (respec/pixels/structure.py, flow.py); when the request names what it changes, re-drawn detail
  away from its change is restored (`beyond_request`, respec/pixels/edit_region.py), and where
  pixel by pixel the re-render and the edit are one, the edit region is the change of content at
  a coarse scale (`coarse_route`). A new background keeps the subject the editor kept
  (`background_route`).
- **It never removes an edit.** It steps aside (the editor's image is kept, and the record says
  why) on a global edit (the plan says so; the keyword rule, which reads the verb that governs each
  clause, not any word in it; on a request that names nothing, the colour map of the whole
  picture far from identity or the change over half the picture; any edit region over half the
  picture), on a re-framing (a zoom or shift larger than an editor's drift), on a re-render it
  cannot separate (the request names nothing, or no change of content stands out), and when the
  scene's structure moved or the picture right around the edit moved (a pose change: the edit
  pasted into the previous image would break what it is part of).
- **Only the tiles near the change are looked at** (the editor's image is warped and drift is told
  on 64-px tiles within reach of the change mask; the region on the crop around it).

Every result records in `meta.post_edit` what it kept (`edit_fraction`, the alignment it undid,
`band_px`, `margin_px`, `edit_region_psnr`: its output against the editor's on the kept pixels)
or why it stepped aside (`stepped_aside`, `reason`, `why`).

Where it fails (by construction): a change the change mask misses, that lies outside the hull
of what it found and is not a coherent colour shift over an area of 0.2 % of the picture next to
it, 3/255 or more and at least 4 times the drift around the change (its colour matches what it
covers; a tint of a near-black area; a global edit only a few per cent strong) is reverted to
I_{t-1}; the keyword rule reads a few verb patterns, not language ("add a lamp that lights the
whole picture" is local to it: the measured coverage and colour change decide); a re-render the
change record calls stable is kept only where it found a change; re-drawn detail is told from the
request's change by scale, not meaning (a sign re-drawn with its new text, an expression). The
measured steps are in docs/drift-guard.md.

The package, one module per part (the numbered steps are drift_guard's, run.py):

    run.py             drift_guard: the driver, steps 1-2     values.py     the values its steps pass on
    params.py          GuardParams, the shared constants      scope.py      EditScope (the request, as read)
    result.py          GuardResult: applied or stepped aside  trust.py      can the alignment be undone?
    frame.py           step 3: the frame, a structure warp    region.py     step 4: the edit region K
    tiles.py           the tiles near the change (Tiles)      compose.py    step 5 and the seams
    drift.py           what drift explains                    coherent.py   a faint coherent tint is an edit
    thin_lines.py      lines the edit drew                    beyond_request.py   re-drawn detail far away
    routes.py          a new background; a coarse re-render   change.py     the change records it reads, makes
    pair.py            guard_pair: the history's size, >4 MP  full_size.py  the working-size result at full size
"""
from __future__ import annotations

from .params import DEFAULT_GUARD, GUARD_MASK, METHOD, NEAR_FRAC, SEAMS, GuardParams
from .scope import BACKGROUND, GLOBAL, LOCAL, EditScope
from .result import GuardResult
from .run import drift_guard
from .frame import AGAIN_SIDE, FIRST_SIDE, MIN_CHANGE, STRUCTURE_HELD, read_structure
from .routes import COARSE_MARGIN, GROW_LEVEL, MAIN_SHARE, background_route, coarse_route, grown, ring_changed
from .beyond_request import PLACES_RATIO, UNNAMED_NEAR, beyond_request, largest_groups, redrawn_like, spread_out
from .region import moved_around
from .tiles import TILE, TILE_PAD
from .coherent import (COHERENT_AWAY, COHERENT_OVER_DRIFT, COHERENT_ROUNDS, coherent_join, coherent_level,
                       coherent_residual)
from .drift import DRIFT_SIGMAS, FAINT, drift_explained, drop_drift
from .thin_lines import THIN_ALIKE, THIN_DELTA, THIN_OPEN, THIN_REACH, thin_lines
from .compose import RIM_PX, SEAM_CLIP, compose
from .change import guard_change, guarded_change, with_exact_paste
from .pair import GUARD_WORK_PIXELS, guard_pair

__all__ = [
    "AGAIN_SIDE", "BACKGROUND", "COARSE_MARGIN", "COHERENT_AWAY", "COHERENT_OVER_DRIFT", "COHERENT_ROUNDS",
    "DEFAULT_GUARD", "DRIFT_SIGMAS", "EditScope", "FAINT", "FIRST_SIDE", "GLOBAL", "GROW_LEVEL", "GUARD_MASK",
    "GUARD_WORK_PIXELS", "GuardParams", "GuardResult", "LOCAL", "MAIN_SHARE", "METHOD", "MIN_CHANGE", "NEAR_FRAC",
    "PLACES_RATIO", "RIM_PX", "SEAMS", "SEAM_CLIP", "STRUCTURE_HELD", "THIN_ALIKE", "THIN_DELTA", "THIN_OPEN",
    "THIN_REACH", "TILE", "TILE_PAD", "UNNAMED_NEAR", "background_route", "beyond_request", "coarse_route",
    "coherent_join", "coherent_level", "coherent_residual", "compose", "drift_explained", "drift_guard",
    "drop_drift", "grown", "guard_change", "guard_pair", "guarded_change", "largest_groups", "moved_around",
    "read_structure", "redrawn_like", "ring_changed", "spread_out", "thin_lines", "with_exact_paste",
]
