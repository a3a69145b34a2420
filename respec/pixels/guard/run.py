"""drift_guard: the Drift Guard on one turn, one numbered story (the package docstring describes
the guard). Each step returns a small frozen value (or the GuardResult that ends the guard early)
that the driver passes on:

    1. inputs    GuardInputs   two pictures of one size, a known seam, the turn's record, the user's mask
    2. scope     ScopeRead     a global edit steps aside, a new background takes its own route, an
                               untrusted alignment (alignment.py's null model) steps aside
    3. frame     Frame         a re-framing steps aside; a re-render is read through the structure warp
                               (frame.py)
    4. region    the edit region K in I_{t-1}'s frame, read on the tiles near the change (region.py:
                 seed_of, warp_near, change_kept, edit_region, pose; the tiles: tiles.py)
    5. compose   I_{t-1} outside K, the editor's aligned pixels inside, a seam without a step (compose.py)
    6. verify    the result, read against I_{t-1} and the editor's picture in I_{t-1}'s frame
                 (respec/pixels/verify): a failure steps aside and names the check, a mend is handed
                 back mended; the background and coarse routes are verified too
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ...errors import InputError
from ...history import StoredImage
from ...images import as_array
from ..change_record import ChangeRecord
from ..alignment import IDENTITY, support, warp_float
from ..grade import colour_shift, into_grade, invertible
from ..masks import mask_at
from ..verify import Composite, verify
from .arrays import bbox, float_rgb, rgb3
from .compose import compose_edit
from .frame import read_frame, read_structure
from .params import DEFAULT_GUARD, METHOD, SEAMS, GuardParams
from .region import change_kept, edit_region, pose, seed_of, warp_near
from .result import GuardResult, applied_result, mended_result, stepped_aside
from .routes import background_route
from .scope import BACKGROUND, GLOBAL, EditScope
from .trust import untrusted
from .values import GuardInputs, ScopeRead

VERIFY_REACH_FRAC = 0.06    # the verification reads the editor's picture this share of the shorter side around
VERIFY_MIN_REACH_PX = 16    # the kept edit (a rim, an island, a speck beside it), at least this many px
VIEW_STEP = 8               # px: the background route's view is chosen on every 8th pixel of the kept edit's core


def drift_guard(previous: Any, edited: Any, change: ChangeRecord, *, user_mask: Any = None, extra_region: Any = None,
                scope: EditScope = EditScope(), params: GuardParams = DEFAULT_GUARD) -> GuardResult:
    """The drift guard on one turn, in five steps (the module docstring); steps 2-4 may end it early
    (a GuardResult that stepped aside or took another route).

    previous: I_{t-1}; edited: I_t (the editor's output, after Reveal Composite when it ran), of
    one size (uint8 arrays, PIL or StoredImage). change: the turn's change record of I_{t-1} -> I_t
    (ChangeRecord.of(guard_change(...)): mask in I_t's frame, the alignment, colour fit and
    stability). user_mask: optional H×W mask in I_{t-1}'s frame of what may change (wins over the
    change mask). extra_region: optional H×W mask in I_t's frame the turn says changes (Reveal
    Composite's pasted pixels). scope: what the request asks to change (the post-edit step reads it)."""
    # 1. Inputs: two pictures of one size, a known seam, the turn's record, the user's mask.
    inputs = read_inputs(previous, edited, change, user_mask, params)
    # 2. Scope: a global edit steps aside, a new background takes its own route.
    read = read_scope(inputs, scope)
    if isinstance(read, GuardResult):
        return verified(inputs, read, background_view(inputs, read), cutout=True) if read.applied else read
    # 3. Frame: can the alignment be undone? A re-render is read through the structure warp.
    frame = read_frame(inputs, read)
    if isinstance(frame, GuardResult):
        return verified(inputs, frame, structure_view(inputs)) if frame.applied else frame
    # 4. Region: K in I_{t-1}'s frame, read on the tiles near the change.
    seed, extra = seed_of(inputs, frame, extra_region)
    out, weight, edit_fraction = inputs.prev3.copy(), np.zeros(inputs.shape, np.float32), 0.0   # no change: I_{t-1}
    checks: dict = {}       # what the steps measured, for the record
    if (seed | extra if extra is not None else seed).any():
        tiles = warp_near(inputs, frame, seed, extra, checks)
        c_all, cc = change_kept(inputs, read, frame, tiles, seed, extra, checks)
        sl, K, region = edit_region(inputs, tiles, c_all)
        edit_fraction = float(region.sum()) / float(seed.size)
        ended = pose(inputs, frame, K, sl, cc, edit_fraction)
        if ended is not None:
            return ended
        # 5. Compose: I_{t-1} outside K, the editor's pixels inside, a seam without a step.
        out, weight = compose_edit(inputs, frame, tiles, K, sl, checks)
    region_from = "the user's mask" if inputs.user is not None else "change mask" + (
        " + the turn's pasted pixels" if extra_region is not None else "")
    res = applied_result(inputs.prev, out, weight, {**frame.base, "route": "pixels", "region_from": region_from,
                                                    "edit_fraction": round(edit_fraction, 6), **checks}, inputs.al)
    # 6. Verify: the result read against I_{t-1} and the editor's picture in I_{t-1}'s frame
    return verified(inputs, res, EditorView(frame.sample, frame.support(inputs.shape),
                                            frame.info if frame.graded else None))


@dataclass(frozen=True)
class EditorView:
    """How the verification reads the editor's picture in I_{t-1}'s frame: `sample(cur3, box)` (float
    RGB on the box), where it has pixels, and the colour record to map it into I_{t-1}'s grade with
    (None: not graded), as the guard's composite did."""

    sample: Callable[[np.ndarray, tuple[int, int, int, int]], np.ndarray]
    support: np.ndarray
    grade: dict | None = None


def background_view(inputs: GuardInputs, res: GuardResult) -> EditorView:
    """The background route's view of the editor's picture: the turn's alignment undone, or none,
    whichever its composite used (the one whose pixels agree with the kept edit's core)."""
    h, w = inputs.shape
    rows, cols = np.arange(0, h, VIEW_STEP), np.arange(0, w, VIEW_STEP)
    core = (res.weight >= 1.0)[::VIEW_STEP, ::VIEW_STEP]
    kept = float_rgb(rgb3(res.image)[::VIEW_STEP, ::VIEW_STEP])[core]
    best = None
    for inv in (inputs.al.inverse(), IDENTITY):
        seen = warp_float(inputs.cur3, inv, rows=rows, cols=cols)[core]
        err = float(np.abs(seen - kept).mean()) if len(kept) else 0.0
        if best is None or err < best[0]:
            best = (err, inv)
    inv = best[1]
    return EditorView(lambda cur3, box: warp_float(cur3, inv, box=box), support(inv, inputs.shape))


def structure_view(inputs: GuardInputs) -> EditorView:
    """The coarse route's view of the editor's picture: through the structure warp, read again (the
    route does not keep it; read_structure is deterministic, and the route is taken on re-renders only)."""
    sw = read_structure(inputs.prev3, inputs.cur3, inputs.al, inputs.user)
    h, w = inputs.shape
    return EditorView(sw.sample, sw.support((0, h, 0, w)))


def verified(inputs: GuardInputs, res: GuardResult, view: EditorView, cutout: bool = False) -> GuardResult:
    """The applied result `res` after its verification (respec/pixels/verify): kept = its image,
    fallback = the editor's picture read in I_{t-1}'s frame (`view`) around the kept edit (I_{t-1}
    beyond VERIFY_REACH_FRAC of it: nothing was kept from the editor there), old = I_{t-1}, written
    = 1 - weight; cutout: the background route's (the subject kept whole). A failure steps aside and
    names the check; a mend hands back the mended picture."""
    shape = inputs.shape
    edited = res.weight > 0
    fallback = inputs.prev3.copy()
    if edited.any():
        sl = bbox(edited, max(VERIFY_MIN_REACH_PX, round(VERIFY_REACH_FRAC * min(shape))))
        box = (sl[0].start, sl[0].stop, sl[1].start, sl[1].stop)
        E = view.sample(inputs.cur3, box)
        if view.grade is not None:
            E = into_grade(E, view.grade)
        fallback[sl] = np.clip(np.round(E * 255.0), 0, 255).astype(np.uint8)
    verdict = verify(Composite("guard", np.ascontiguousarray(rgb3(res.image)), fallback, inputs.prev3,
                               (1.0 - res.weight).astype(np.float32), None, view.support, cutout))
    if not verdict.passed:
        return stepped_aside(inputs.cur, inputs.base, verdict.reason(), why="verify", verify=verdict.record())
    return mended_result(res, verdict) if verdict.mended else replace(
        res, record={**res.record, "verify": verdict.record()})


def read_inputs(previous: Any, edited: Any, change: ChangeRecord, user_mask: Any,
                params: GuardParams) -> GuardInputs:
    """Step 1: the two images (one size), the seam, the turn's record, the user's mask."""
    prev = as_array(previous.array if isinstance(previous, StoredImage) else previous)
    cur = as_array(edited.array if isinstance(edited, StoredImage) else edited)
    if prev.shape[:2] != cur.shape[:2]:
        raise InputError(f"the drift guard needs I_(t-1) and I_t of one size, got {prev.shape[1]}x{prev.shape[0]} "
                         f"and {cur.shape[1]}x{cur.shape[0]}; resize the edit to the previous image's size first")
    if params.seam not in SEAMS:
        raise InputError(f"unknown seam {params.seam!r}; use one of {', '.join(SEAMS)}")
    shape = prev.shape[:2]
    px = params.pixels(shape)
    base = {"method": METHOD, "alignment": change.alignment.record(), "margin_px": px["margin"],
            "band_px": px["band"], "seam": params.seam, "change_fraction": round(change.fraction, 6)}
    user = None
    if user_mask is not None:
        user = mask_at(user_mask, shape, "the user's mask")
        if not user.any():
            user = None     # an empty mask says nothing: the change mask decides
    return GuardInputs(prev, cur, rgb3(prev), rgb3(cur), change, user, params, px, base,
                       colour_shift(dict(change.info)))


def read_scope(inputs: GuardInputs, scope: EditScope) -> GuardResult | ScopeRead:
    """Step 2, a global edit? The user's mask says the edit is local, and so do the request's words
    (`scope`, read with the keyword rule unless params.keywords is off): then a whole-picture colour
    shift is the editor's drift, mapped back into the previous grade."""
    params, aside = inputs.params, inputs.aside
    if inputs.user is not None:
        return ScopeRead(local=True, places=None, named=True)
    read = scope if params.keywords else None
    if scope.plan_global:
        return aside("the plan says this is a global edit", why="global")
    if read is not None and read.kind == GLOBAL:
        return aside(f"a global edit by the keyword rule ({read.words!r})", why="global")
    if read is not None and read.kind == BACKGROUND:
        return background_route(inputs.prev, inputs.cur, inputs.al, inputs.base, params, inputs.aside, read.words)
    if inputs.al.untrusted_reason:
        # the fit did not beat the null model (alignment.py, step 6): the change record compared
        # pixels that do not correspond, so its colour shift and coverage say nothing either
        return aside(untrusted(inputs.al, inputs.shape, params), why="alignment")
    places = read.places if read is not None else None
    found = ScopeRead(local=read is not None, places=places, named=places is not None)
    if inputs.shift > params.global_colour and not (found.places is not None and invertible(inputs.info)):
        return aside(f"a global colour or lighting change: the whole picture's colours moved by "
                     f"{inputs.shift * 255:.0f}/255 (limit {params.global_colour * 255:.0f})", why="global",
                     colour_shift=round(inputs.shift, 4))
    if inputs.base["change_fraction"] > params.global_share and found.places is None:
        return aside(f"a global edit: the change covers {inputs.base['change_fraction']:.0%} of the picture "
                     f"(limit {params.global_share:.0%})", why="global")
    return found
