"""History first: the step that answers a take-back request from the history (issue 43), over the
pixel rule of respec/pixels/undo.py (whose module docstring describes it).

    undo_turn      reads the request: a restoration turn that removes (or takes back) what an
                   earlier turn k added, k the covering turn (the plan's provenance record, else
                   located now), then pixels.undo.undo_from_history; when that does not answer, a
                   request asked word for word at an earlier turn k whose picture I_{k-1} is I_{t-1}
                   again (pixels.undo.repeat_from_history)
    UndoStep       the part respec/turn.py's run_turn asks first when TurnSwitches.history_first is
                   on: when it answers, the editor and the post-edit steps are not run
    undo_result    its StepResult (respec/post_edit/result.py)
    undo_words     the words the turn's record (the panel) says
    history_answer the graph's way in (the Drift Guard node's `history_first`): undo_turn's StepResult,
                   computed once per turn and kept in the analysis cache, since ComfyUI asks the node
                   twice (whether it needs the editor's image, then its outputs)
    answers_turn   whether a StepResult is history first's answer (the editor is not needed)

Unlike Reveal Composite and the Drift Guard it runs before the edit: what the history knows, the
pack does not ask the editor.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..controller.covering import locate_covering_turn
from ..controller.object_turns import object_turns, request_clauses
from ..controller.request import check_request
from ..controller.restoration import decide_restoration, request_words, revealing_action
from ..history import History
from ..pixels.analysis_cache import CACHE, AnalysisCache
from ..pixels.undo import (DEFAULT_UNDO, METHOD, UNDO_SOURCE, UndoParams, UndoResult, repeat_from_history,
                           undo_from_history)
from .record import TurnSoFar
from .result import StepResult
from .reveal_step import removes_addition

# Words that take back an earlier edit without a removing verb ("undo the hat", "take the hat back").
_TAKE_BACK = re.compile(r"\b(undo|revert|take (?:\w+ )*?back)\b", re.IGNORECASE)


def takes_back(request: str) -> bool:
    """Whether the request asks to undo or take back an earlier edit ("undo the hat")."""
    return bool(_TAKE_BACK.search(request or ""))


def covering_for_undo(history: History, plan: Any, request: str) -> tuple[int | None, str]:
    """(k, where it came from, or why none): the plan's provenance record when it located one turn,
    else the covering turn located now; None when the request could mean several turns (the
    history does not guess: the editor and Reveal answer)."""
    rec = plan.provenance if plan is not None else None
    if rec is not None and rec.turn is not None and (not rec.ambiguous or len(rec.candidates) <= 1):
        return rec.turn, "plan (provenance)"
    found = locate_covering_turn(history, request)
    if found.turn is None:
        return None, f"no covering turn ({found.reason})"
    if found.ambiguous and len(found.candidates) > 1:
        return None, f"the request could mean turns {list(found.candidates)} ({found.reason})"
    return found.turn, f"provenance ({found.reason})"


def undo_turn(history: History, plan: Any, request: str, is_restoration: bool,
              params: UndoParams = DEFAULT_UNDO) -> tuple[UndoResult | None, dict]:
    """History first for one turn: (the undo's result, or None when it did not apply to this
    request, and the record entry saying what happened and why, in words). A take-back first; when
    it does not answer, a request repeated word for word on the same picture (`repeated_turn`)."""
    check_request(request or "", "the instruction")
    if history.next_turn < 2:
        return None, {"method": METHOD, "applied": False, "reason": "turn 1: nothing to take back"}
    res, entry = take_back(history, plan, request, is_restoration, params)
    if res is not None and res.applied:
        return res, entry
    k = repeated_turn(history, request)
    if k is not None:
        repeat = repeat_from_history(history, k)
        if repeat.applied:
            return repeat, {**repeat.record(), "words": undo_words(history, repeat)}
    return res, entry


def take_back(history: History, plan: Any, request: str, is_restoration: bool,
              params: UndoParams) -> tuple[UndoResult | None, dict]:
    """undo_turn's take-back: a restoration turn that removes (or takes back) what one earlier turn
    added, answered by undo_from_history (None and why when the request is not one)."""
    if not (is_restoration or takes_back(request)):
        return None, {"method": METHOD, "applied": False, "reason": "not a restoration turn"}
    k, found_by = covering_for_undo(history, plan, request)
    if k is None:
        return None, {"method": METHOD, "applied": False, "reason": f"history could not answer: {found_by}"}
    if not (removes_addition(history, request, k) or takes_back(request)):
        return None, {"method": METHOD, "applied": False, "covering_turn": k,
                      "reason": f"the request does not remove what turn {k} added (a move or a replace puts "
                                f"something there): the editor answers"}
    why_not = only_takes_back(history, request, k)
    if why_not:
        return None, {"method": METHOD, "applied": False, "covering_turn": k,
                      "reason": f"history could not answer: {why_not}; the editor answers"}
    res = undo_from_history(history, k, params)
    entry = {**res.record(), "covering_turn_from": found_by, "words": undo_words(history, res)}
    if not res.applied:
        entry["reason"] = f"history could not answer: {res.reason}; the editor was run"
    return res, entry


def word_list(text: str) -> list[str]:
    """A request's words in order, lower case, without spacing and punctuation (what `same_request`
    compares; restoration.request_words is their set, stemmed)."""
    return re.findall(r"[\w']+", (text or "").lower())


def same_request(a: str, b: str) -> bool:
    """Whether two requests are the same words (case, spacing and punctuation aside)."""
    wa = word_list(a)
    return bool(wa) and wa == word_list(b)


def repeated_turn(history: History, request: str) -> int | None:
    """The latest earlier turn k that asked `request` word for word of the picture the conversation
    shows now (I_{k-1} is I_{t-1}, pixel for pixel), or None."""
    now, want = history.current.image, word_list(request)
    for k in range(history.next_turn - 1, 0, -1):
        if want and word_list(history.turns[k].instruction) == want and history.image(k - 1) == now:
            return k
    return None


def only_takes_back(history: History, request: str, k: int) -> str:
    """Why taking back turn k whole would not be what the request asks ("" when it would): turn k
    did more than add one object (a second object or another edit in its request, a move or a
    replace, whose taking back would put the old object back), or the request asks for more than
    its removal (another clause: "remove the lamp and move the toolbox")."""
    added = next((a for a in object_turns(history).additions if a.turn == k), None)
    if added is None or added.how != "added":
        how = added.how if added is not None else "added nothing"
        return f"turn {k} did not add an object ({how}): taking it back would not remove it"
    made = request_clauses(history.turns[k].instruction or "")
    if len(made) != 1:
        return f"turn {k}'s request did more than add the {added_object_phrase(history, k)} ({' / '.join(made)})"
    for clause in request_clauses(request):
        action = revealing_action(clause)
        if not takes_back(clause) and (action is None or action[0] != "remove"):
            return f"the request also asks for '{clause}'"
    return ""


def undo_words(history: History, res: UndoResult) -> str:
    """What the turn's record says, in words: "taken back from history: the hat added at turn 2;
    the editor was not run" (or why the history could not answer; or "repeated from history: ..."
    for a request asked again of the same picture)."""
    if res.repeated:
        return (f"repeated from history: turn {res.covering_turn} asked the same of the same picture, so its "
                f"picture again; the editor was not run (reword the request, or switch history first off, "
                f"for a new drawing)")
    what = added_object_phrase(history, res.covering_turn)
    if res.applied:
        how = "" if res.exact else " (aligned: the frame had moved)"
        return f"taken back from history: the {what} added at turn {res.covering_turn}{how}; the editor was not run"
    return f"history could not take back the {what} added at turn {res.covering_turn} ({res.reason}); the editor was run"


def added_object_phrase(history: History, k: int) -> str:
    """The object turn k added, in the words of its own request ("hat", "red ball"); "edit" when
    the request names none."""
    added = next((a for a in object_turns(history).additions if a.turn == k), None)
    if added is None:
        return "edit"
    words = re.findall(r"[a-z]+", (history.turns[k].instruction or "").lower())
    picked: list[str] = []
    for w in words:
        if (w in added.colours or request_words(w) & added.words) and w not in picked:
            picked.append(w)
    return " ".join(picked) or " ".join(sorted(added.words)) or "edit"


def undo_result(res: UndoResult | None, entry: dict) -> StepResult:
    """The undo's StepResult: `entry`, the `undo_source` mask and the kept image when it answered."""
    applied = res is not None and res.applied
    return StepResult(UndoStep.name, dict(entry), image=res.image if applied else None,
                      masks={UNDO_SOURCE: res.turn_mask()} if applied else {}, result=res)


class UndoStep:
    """History first (TurnSwitches.history_first): run_turn asks it after the plan and before the
    edit; when its StepResult has an image, the turn keeps it and the editor is not run."""

    name = "history_undo"

    def __init__(self, params: UndoParams = DEFAULT_UNDO):
        self.params = params

    def __call__(self, history: History, record: TurnSoFar) -> StepResult:
        res, entry = undo_turn(history, record.plan, record.request, record.is_restoration, self.params)
        return undo_result(res, entry)


def answers_turn(value: Any) -> bool:
    """Whether `value` is history first's StepResult with an answer: the turn keeps its image and the
    editor's image is not needed (in a graph: the editor is not run)."""
    return isinstance(value, StepResult) and value.step == UndoStep.name and value.image is not None


def history_answer(history: History, plan: Any, request: str, params: UndoParams = DEFAULT_UNDO,
                   cache: AnalysisCache = CACHE) -> StepResult:
    """History first for one turn of a graph: undo_turn's StepResult (`answers_turn` tells whether the
    history answered), the restoration flag the plan's (else decided from the request, 'auto').
    Computed once per (history, plan, request, params) and kept in `cache.undo_answers`: ComfyUI asks
    the node twice, whether it needs the editor's image (check_lazy_status), then for its outputs."""
    key = (history.fingerprint, _plan_key(plan), request or "", params)
    found = cache.undo_answers.get(key)
    if found is None:
        flag = plan.is_restoration if plan is not None else decide_restoration("auto", history, request)[0]
        found = undo_result(*undo_turn(history, plan, request, flag, params))
        cache.undo_answers.put(key, found)
    return found


def _plan_key(plan: Any) -> str:
    # The plan's whole wire form: its flag and its provenance record both decide the answer.
    return "" if plan is None else json.dumps(plan.to_dict(), sort_keys=True, default=str)
