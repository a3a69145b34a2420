"""guard_pair: the Drift Guard on I_{t-1} -> I_t at the history's size, the entry of the post-edit
step and of the node (respec/post_edit/guard_step.py). It takes the turn's change record from the
analysis cache (`guard_change`: the one History Append keeps), runs drift_guard, at a working size
above GUARD_WORK_PIXELS, and returns with its result the change record of the image it leaves
(GuardResult.change), so that nobody measures it again."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image

from ...history import StoredImage
from ..change_record import ChangeRecord
from ..work_images import working_size
from .change import guard_change, guarded_change, with_exact_paste
from .full_size import compose_full, full_size_change
from .params import DEFAULT_GUARD, GuardParams
from .result import GuardResult
from .run import drift_guard
from .scope import EditScope

GUARD_WORK_PIXELS = 4_194_304   # a picture above this (4 MP) is guarded at a working resolution (see guard_pair)


def guard_pair(p: StoredImage, e: StoredImage, size: tuple[int, int], *, user_mask: Any = None,
               extra_region: Any = None, scope: EditScope = EditScope(), params: GuardParams = DEFAULT_GUARD,
               work_pixels: int = GUARD_WORK_PIXELS, exact: Any = None) -> GuardResult:
    """drift_guard on I_{t-1} -> I_t of one size (the node's and run_turn's path), with the turn's
    change record at `size` (the history's) from the analysis cache; the result carries the change
    record of I_{t-1} -> the image it returns (`change`: derived from the edit's when it applied,
    change.guarded_change; the edit's own when it stepped aside). exact: Reveal Composite's
    ExactPatch when it pasted this turn (change.with_exact_paste).

    Above `work_pixels` the guard runs on both pictures scaled to the working size (the size the
    change record is analysed at: work_images.working_size) and its output is made at full size by
    `compose_full`: I_{t-1}'s own pixels wherever the working-size weight is 0, else the editor's
    full-size pixels (aligned) with the working-size seam correction upsampled. Its cost is that of
    a 4 MP guard plus a resize and one pass over the edit's box (8000²: docs/drift-guard.md)."""
    work = working_size(p.size, work_pixels)
    if work == p.size:
        change = ChangeRecord.of(guard_change(p, e, size))
        res = drift_guard(p, e, change, user_mask=user_mask, extra_region=extra_region, scope=scope, params=params)
        res = with_exact_paste(res, exact)
        return replace(res, change=guarded_change(res, change, size) if res.applied else change.stored)
    p_w, e_w = (StoredImage(np.asarray(im.rgb().resize(work, Image.BILINEAR))) for im in (p, e))
    change_w = ChangeRecord.of(guard_change(p_w, e_w, work))
    res_w = drift_guard(p_w, e_w, change_w, user_mask=user_mask, extra_region=extra_region, scope=scope,
                        params=params)
    change = full_size_change(change_w, p.size)      # the edit's record at full size, kept when it steps aside
    record = {**res_w.record, "working_size": list(work)}
    if not res_w.applied:
        return GuardResult(e.array, np.ones(e.array.shape[:2], np.float32), False, res_w.reason, record,
                           change.stored)
    if "structure" in res_w.record:
        # compose_full carries the edit to full size with the turn's similarity alone; a structure
        # warp (a re-render, a zoom one similarity does not follow) would put it in the wrong place.
        reason = (f"the picture is above {work_pixels / 1e6:.0f} MP and the edit needed a structure warp (a re-render "
                  f"or zoom), which the guard applies only at up to that size: the editor's image is kept")
        record.update(applied=False, stepped_aside=True, reason=reason)
        return GuardResult(e.array, np.ones(e.array.shape[:2], np.float32), False, reason, record, change.stored)
    image, weight = compose_full(p, e, p_w, e_w, res_w, change_w, params, refine=user_mask is None)
    record["kept_fraction"] = round(float((weight > 0).mean()), 6)
    res = with_exact_paste(GuardResult(image, weight, True, res_w.reason, record), exact)
    return replace(res, change=guarded_change(res, change, size))
