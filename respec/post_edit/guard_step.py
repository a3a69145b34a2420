"""The Drift Guard as a post-edit step: the entries that read the request and the plan into an
EditScope, over the guard of respec/pixels/guard/ (whose package docstring describes it).

    edit_scope    the request and the plan, read once (the keyword rule) into the guard's EditScope
    guard_images  the Drift Guard node's entry (any editor, any size)
    GuardStep     the post-edit step of respec/turn.py's run_turn
    guard_result  its StepResult (respec/post_edit/result.py), for run_turn and the node
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from PIL import Image

from ..controller.request import check_request
from ..controller.request_language import LOCAL, places_changed, request_scope
from ..history import REVEAL_SOURCE, History, StoredImage
from ..images import check_image_size
from ..plan import Plan
from ..pixels.analysis_cache import CACHE
from ..pixels.guard import (DEFAULT_GUARD, GUARD_MASK, GUARD_WORK_PIXELS, METHOD, EditScope, GuardParams,
                            GuardResult, guard_pair)
from ..pixels.masks import history_size
from ..pixels.reveal import exact_patch
from .record import TurnSoFar
from .result import StepResult


def edit_scope(request: str = "", plan: Plan | None = None) -> EditScope:
    """What the turn asks to change, read once for the guard: the keyword rule on the user's words
    and the plan's instructions (respec/controller/request_language.py request_scope), the places a
    local request names (places_changed), and whether the plan says the edit is global."""
    synthesis = getattr(plan, "synthesis_instruction", None)
    user = getattr(plan, "user_instruction", None)
    read = request_scope(request, synthesis, user)
    places = places_changed(request or user or synthesis) if read.kind == LOCAL else None
    plan_scope = plan.edit_scope if plan is not None else None
    return EditScope(kind=read.kind, words=read.words, places=places, plan_global=plan_scope == "global")


def guard_result(res: GuardResult | None, entry: dict | None = None, image: Any = None) -> StepResult:
    """The guard's StepResult: its record (or `entry`: res None when the guard was switched off), the
    kept-edit weights as the turn's `guard_edit` mask when it changed the image, that image
    (`image`, the output as a StoredImage; None in the node's value, whose image travels on its
    IMAGE output), and the change record of the image it leaves (res.change), which run_turn keeps
    with the turn instead of measuring it again."""
    applied = res is not None and res.applied
    return StepResult(GuardStep.name, dict(entry if entry is not None else res.record),
                      image=image if applied else None, masks={GUARD_MASK: res.turn_mask()} if applied else {},
                      result=res, change=res.change if res is not None else None)


def guard_images(previous: Any, edited: Any, *, user_mask: Any = None, extra_region: Any = None,
                 request: str = "", plan: Any = None, params: GuardParams = DEFAULT_GUARD,
                 work_pixels: int = GUARD_WORK_PIXELS, exact: Any = None) -> GuardResult:
    """The drift guard on two images (the node; any editor): the shared change record is taken
    from (or put into) the analysis cache (respec/pixels/analysis_cache.py), and the change record
    of the image it returns is left there for History Append (AnalysisCache.remember_step_change:
    in a graph the guard's image reaches History Append through another node). An edit of another
    size is resized to I_{t-1}'s for the guard. The result's image and weight always have the size
    of the image it returns: I_{t-1}'s when it applied, the editor's own (not resized) when it
    stepped aside. exact: Reveal Composite's ExactPatch (respec/pixels/reveal.py) when it pasted
    this turn."""
    check_request(request or "", "the instruction")
    p = StoredImage.of(previous)
    e0 = StoredImage.of(edited)
    check_image_size(p.array.shape, "the previous image")
    check_image_size(e0.array.shape, "the edited image")
    e = e0 if e0.size == p.size else StoredImage.of(np.asarray(e0.rgb().resize(p.size, Image.BILINEAR)))
    res = guard_pair(p, e, p.size, user_mask=user_mask, extra_region=extra_region, scope=edit_scope(request, plan),
                     params=params, work_pixels=work_pixels, exact=exact)
    if not res.applied and e is not e0:     # the editor's own image, whose change record is not the resized one's
        res = replace(res, image=e0.array, weight=np.ones(e0.array.shape[:2], np.float32), change=None)
    if res.change is not None:
        CACHE.remember_step_change(p, StoredImage.of(res.image), p.size, res.change)
    return res


class GuardStep:
    """The drift guard as a post-edit step of respec.turn.run_turn (after Reveal Composite): keeps
    the `guard_edit` mask with the turn, records what it did, and hands run_turn the change record
    of its output (StepResult.change)."""

    name = "drift_guard"

    def __init__(self, params: GuardParams = DEFAULT_GUARD):
        self.params = params

    def __call__(self, history: History, record: TurnSoFar) -> StepResult:
        prev = history.current.image
        size = prev.size
        img = record.image if isinstance(record.image, StoredImage) else StoredImage.of(np.asarray(record.image))
        if img.size != size or size != history_size(history):
            return StepResult(self.name, {"method": METHOD, "applied": False, "stepped_aside": True,
                                          "reason": "the edit or I_(t-1) has another size than the history: "
                                                    "not aligned"})
        pasted = record.masks.get(REVEAL_SOURCE)
        exact = None
        if pasted is not None:      # Reveal's paste inside: I_{k-1}'s own pixels, not the colour-fitted ones
            exact = exact_patch(history, pasted, pasted.info)
        res = guard_pair(prev, img, history_size(history), extra_region=pasted.mask if pasted is not None else None,
                         scope=edit_scope(record.request, record.plan), params=self.params, exact=exact)
        return guard_result(res, image=res.image if res.applied else None)
