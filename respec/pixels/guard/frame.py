"""Step 3 of the Drift Guard: can the turn's alignment be undone, and in which frame is the edit
read? A re-framing steps aside; a re-render, residual motion or a whole-picture colour move is read
through the structure warp (respec/pixels/structure.py, flow.py), where the change is measured
again in I_{t-1}'s frame (or, where pixel by pixel the re-render and the edit are one, the change of
content at a coarse scale decides: routes.coarse_route)."""
from __future__ import annotations

from functools import partial

import numpy as np
from PIL import Image

from ..alignment import IDENTITY, Alignment
from ..change_mask import change_of
from ..edit_region import coarse_change, coarse_size, main_change
from ..grade import GRADE_FROM, colour_shift, invertible
from ..masks import dilate
from ..structure import BENT_FRAC, BENT_SHARE, StructureWarp, plain_warp, structure_warp, with_local_flow
from .params import NEAR_FRAC
from .result import GuardResult, stepped_aside
from .routes import coarse_route
from .trust import reframed, untrusted
from .values import Frame, GuardInputs, ScopeRead

MIN_CHANGE = 0.002        # a change mask this small after a re-render found the re-render's noise, not the edit
STRUCTURE_HELD = 0.7      # a re-rendered scene is guarded when this share of its textured structure held
FIRST_SIDE = 128          # where the content changed, for the structure warp not to measure there, is read this coarse
AGAIN_SIDE = 512          # after a structure warp the change is measured again with the longer side at most this


def _graded(local: bool, info: dict) -> bool:
    """Whether a local edit is mapped into I_{t-1}'s grade: the record's colour shift is beyond what
    the seam corrects and its colour map can be undone."""
    return local and colour_shift(info) > GRADE_FROM and invertible(info)


def read_structure(prev3: np.ndarray, cur3: np.ndarray, al: Alignment, user: np.ndarray | None) -> StructureWarp:
    """The structure warp of the turn (respec/pixels/structure.py) refined by the dense local motion
    field (respec/pixels/flow.py, up to 2 px at its working size), neither measured where the
    content changed (the user's mask, or the coarse change of content under the turn's alignment: a
    sign's new text would move its blocks' correlation peaks)."""
    edit = _edit_near(prev3, cur3, al, user)
    return with_local_flow(structure_warp(prev3, cur3, al, edit=edit), prev3, cur3, edit)


def _edit_near(prev3: np.ndarray, cur3: np.ndarray, al: Alignment, user: np.ndarray | None) -> np.ndarray:
    """Where neither the structure warp nor the local flow measures: the user's mask, or the coarse
    change of content under the turn's alignment (grown by half of NEAR_FRAC of the shorter side)."""
    if user is not None:
        return user
    shape = prev3.shape[:2]
    first = coarse_change(prev3, *plain_warp(al, shape).sample_coarse(cur3, coarse_size(shape, FIRST_SIDE)[0]))
    return dilate(first.at(shape, main_change(first)), round(NEAR_FRAC * min(shape) / 2))


def read_frame(inputs: GuardInputs, read: ScopeRead) -> GuardResult | Frame:
    """Step 3, can the alignment be undone? (a misplaced paste would damage the edit) A re-framing
    cannot; a re-render, residual motion or a whole-picture colour move is read through the
    structure warp (_through_structure)."""
    params, aside, al, shape = inputs.params, inputs.aside, inputs.al, inputs.shape
    info = inputs.info
    framing = reframed(al, shape, params)
    if framing:
        return aside(framing, why="alignment")
    why = untrusted(al, shape, params)
    rerendered = inputs.user is None and inputs.change.rerendered
    if not (why or rerendered or inputs.shift > params.global_colour
            or inputs.base["change_fraction"] > params.global_share):
        return Frame(info, al.inverse(), None, None, inputs.base, _graded(read.local, info))
    # A re-render is separated from the edit only when the request names what it changes (or the
    # user's mask does): "let her cry" names nothing, and its re-drawn eyes and tears would look
    # like re-drawn detail. Residual motion alone (an aspect change, a zoom one similarity does not
    # follow) is aligned for any local request.
    if not read.local or (not read.named and not why):
        return aside(why, why="alignment") if why else aside(
            f"the editor re-rendered the scene beyond the change (stable fraction "
            f"{float(info.get('stable_fraction', 0.0)):.2f}): it cannot be separated from the edit", why="rerender")
    # On a local request the scene's structure decides: the editor re-drew texture, zoomed or
    # shifted a little more than one similarity explains, or moved every colour.
    why = why or ("the editor re-rendered the scene beyond the change" if rerendered
                  else "the editor moved the whole picture's colours")
    return _through_structure(inputs, read, why)


def _through_structure(inputs: GuardInputs, read: ScopeRead, why: str) -> GuardResult | Frame:
    """Step 3 on a re-render (`why`): the structure warp must hold; the change is measured again
    through it in I_{t-1}'s frame (the Frame's new seed and record), or, where pixel by pixel the
    re-render and the edit are one, the change of content decides (coarse_route)."""
    params, shape, al = inputs.params, inputs.shape, inputs.al
    edit = _edit_near(inputs.prev3, inputs.cur3, al, inputs.user)
    sw = structure_warp(inputs.prev3, inputs.cur3, al, edit=edit)
    moved = _moved(sw, why)
    if moved:       # decided by the structure warp alone: the local motion field (read_structure's) is not measured
        record = {**sw.record(), "local_flow": {"used": False, "why": "not measured: the structure warp decided"}}
        return stepped_aside(inputs.cur, {**inputs.base, "structure": record}, moved, why="moved", route_why=why)
    sw = with_local_flow(sw, inputs.prev3, inputs.cur3, edit)
    base = {**inputs.base, "structure": sw.record()}
    aside = partial(stepped_aside, inputs.cur, base)
    # the change again, with the edit read through the structure warp, in I_(t-1)'s frame, at a
    # working size (the tiles read the edit at full size where they need it)
    wshape, _ = coarse_size(shape, AGAIN_SIDE)
    E_w, _ = sw.sample_coarse(inputs.cur3, wshape)
    P_w = np.asarray(Image.fromarray(np.ascontiguousarray(inputs.prev3)).resize(wshape[::-1], Image.BOX),
                     np.float32) / 255.0
    again = change_of(P_w, E_w, warped=True)
    if inputs.user is None and (again.fraction < MIN_CHANGE or again.fraction > params.global_share
                                or inputs.shift > params.global_colour):
        # pixel by pixel the re-render and the edit are one (the change mask's threshold rose above
        # the edit, or it covers most of the picture, or the colours moved too far for it): the
        # change of content decides, when the request names what it changes
        if not read.named:
            return aside(f"{why}: after a structure warp the edit still cannot be told from the re-render, and "
                         "the request names nothing to keep apart", why="rerender", route_why=why)
        return coarse_route(inputs.prev, inputs.cur3, sw, inputs.user, base, params, aside, why, read.places)
    info = {**inputs.info, **again.info(), "alignment": al.record()}
    seed = again.mask if again.mask.shape == shape else np.asarray(
        Image.fromarray(again.mask).resize((shape[1], shape[0]), Image.NEAREST), bool)
    # the record and the seed are now in I_(t-1)'s frame: no motion left to undo
    return Frame(info, IDENTITY, sw, seed, {**base, "route_why": why, "change_fraction": round(again.fraction, 6)},
                 _graded(read.local, info))


def _moved(sw: StructureWarp, why: str) -> str:
    """Why the scene moved beyond what the guard may restore around the edit ('' = it did not): the
    structure warp did not hold (a new pose or a re-framing), or part of the scene moved on its own."""
    if sw.held < STRUCTURE_HELD:
        return (f"{why}, and the scene's structure did not hold: after a structure warp only {sw.held:.0%} "
                f"of its textured blocks agree (limit {STRUCTURE_HELD:.0%}): a new pose or a re-framing")
    if sw.bent > BENT_SHARE:
        return (f"{why}, and part of the scene moved on its own: after a structure warp {sw.bent:.1%} of the "
                f"picture still moves by more than {BENT_FRAC:.0%} of its side where the rest does not (limit "
                f"{BENT_SHARE:.0%}): a new pose, which restoring around the edit would break")
    return ""
