"""Reveal Composite as a post-edit step: the entries that read the request, the plan and the
history's object turns, over the pixel rule of respec/pixels/reveal.py (whose module docstring
describes the composite).

    covering_turn_for   which earlier turn k covered what this restoration reveals
    removes_addition    whether the request removes what turn k added (then its whole region is pasted)
    reveal_turn         Reveal Composite for one turn (the node's and the step's entry)
    RevealStep          the post-edit step of respec/turn.py's run_turn
    reveal_result       its StepResult (respec/post_edit/result.py), for run_turn and the node
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..controller.covering import locate_covering_turn
from ..controller.object_turns import object_turns, request_clauses
from ..controller.request import check_request
from ..controller.restoration import request_words, revealing_action
from ..history import History, StoredImage
from ..images import to_uint8
from ..pixels.alignment import warp
from ..pixels.change_mask import change_record_for
from ..pixels.masks import history_size
from ..pixels.reveal import DEFAULT_REVEAL, RevealParams, RevealResult, reveal_for, reveal_masks
from .record import TurnSoFar
from .result import StepResult


class RevealStep:
    """Reveal Composite as a post-edit step of respec.turn.run_turn (`--reveal-composite`).

    On a restoration turn it finds the covering turn k (from the plan when the provenance or
    hybrid planner located it, else from provenance now), pastes I_{k-1}'s pixels where the
    geometry held, keeps the `reveal_source` mask with the turn, and records what it did; other
    turns pass through untouched."""

    name = "reveal_composite"

    def __init__(self, params: RevealParams = DEFAULT_REVEAL):
        self.params = params

    def __call__(self, history: History, record: TurnSoFar) -> StepResult:
        res, entry = reveal_turn(history, record.image, record.plan, record.request, record.is_restoration,
                                 self.params)
        return reveal_result(res, entry, image=res.image if res is not None and res.applied else None)


def reveal_turn(history: History, edited: Any, plan: Any, request: str, is_restoration: bool,
                params: RevealParams = DEFAULT_REVEAL) -> tuple[RevealResult | None, dict]:
    """Reveal Composite for one turn (the post-edit step and the node): (the result, or None when
    it did not run, and the record entry saying what happened and why)."""
    check_request(request or "", "the instruction")
    if not is_restoration or history.next_turn < 2:
        return None, {"applied": False, "reason": "not a restoration turn"}
    k, found_by = covering_turn_for(history, plan, request, edited)
    if k is None:
        return None, {"applied": False, "reason": f"no covering turn found ({found_by})"}
    complete = removes_addition(history, request, k)
    res = reveal_for(history, edited, k, params, complete=complete)
    return res, {**res.record(), "covering_turn": k, "covering_turn_from": found_by, "removal_completed": complete}


def removes_addition(history: History, request: str, k: int) -> bool:
    """Whether the request removes what turn k added (a clause with a removing verb that names
    its object, or names nothing at all): then Reveal pastes the object's whole region. A move or
    a replace puts something in its place or nearby: only what was revealed is pasted."""
    added = next((a for a in object_turns(history).additions if a.turn == k), None)
    for clause in request_clauses(request):
        action = revealing_action(clause)
        if action is None or action[0] != "remove":
            continue
        named = request_words(clause) - {w for w in request_words(action[1])}
        if added is None or not named or named & added.words:
            return True
    return False


def _change_in_previous_frame(history: History, edited: Any) -> np.ndarray | None:
    """This edit's change mask C_t carried into I_{t-1}'s frame (None when I_t has another size)."""
    img = edited if isinstance(edited, StoredImage) else StoredImage.of(
        to_uint8(edited) if np.asarray(edited).dtype.kind == "f" else edited)
    if img.size != history_size(history) or history.current.image.size != img.size:
        return None
    change = change_record_for(history, img)
    al = change.alignment
    return change.mask if al.is_identity else warp(change.mask, al.inverse(), order=0)


def reveal_result(res: RevealResult | None, entry: dict, image: Any = None, exact: Any = None) -> StepResult:
    """Reveal Composite's StepResult: `entry` (reveal_turn's), the `reveal_source` mask when it
    pasted, and its image (`image`: the output; None in the node's value, whose image travels on
    its IMAGE output). exact: the ExactPatch a Drift Guard node after it reads (the node's value)."""
    applied = res is not None and res.applied
    return StepResult(RevealStep.name, dict(entry), image=image if applied else None,
                      masks=reveal_masks(res) if applied else {}, result=res, exact=exact if applied else None)


def covering_turn_for(history: History, plan: Any, request: str, edited: Any = None) -> tuple[int | None, str]:
    """(k, where it came from): the plan's provenance record when a provenance or hybrid planner
    made one, else provenance located now: for a request that names nothing, among the additions
    this edit's own change (`edited` against I_{t-1}) overlaps; the plan's restoration_source_id + 1
    breaks a tie."""
    rec = plan.provenance if plan is not None else None
    if rec is not None and rec.turn is not None and not rec.ambiguous:
        return rec.turn, "plan (provenance)"
    found = locate_covering_turn(history, request)
    if found.ambiguous and found.evidence == "provenance" and edited is not None:
        found = locate_covering_turn(history, request, change=_change_in_previous_frame(history, edited))
    src = getattr(plan, "restoration_source_id", None) if plan is not None else None
    if found.ambiguous and src is not None and (src + 1) in found.candidates:
        return src + 1, "provenance candidates, the plan's restoration source chose"
    return found.turn, f"provenance ({found.reason})"

