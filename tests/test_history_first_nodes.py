"""History first in the chat graphs (issue 43): the Drift Guard node's `history_first` answers a
take-back request from the history, and the editor's image reaches it through a lazy input that
check_lazy_status does not ask for on such a turn, so ComfyUI never runs the editor; History Append
keeps the turn as run_turn does (editor_run false, no editor images, the undo_source mask, the words)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from conftest import core
from synthetic_scenes import background, draw_rect, drift, u8

SHAPE = (96, 128)
BOX = (30, 12, 62, 44)                    # (y0, x0, y1, x1): the red box, on the left
ADD, REMOVE = "Add a red box on the left.", "Remove the red box."
WORDS = "taken back from history: the red box added at turn 1; the editor was not run"


def _hidden(node, **values):
    """The node's class for one call, holding that call's hidden values (unique_id, prompt) as ComfyUI
    gives them to a V3 node (which reads them as cls.hidden)."""
    io = sys.modules[node.__module__].io
    return node.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden[k]: v for k, v in values.items()}})


def _t(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr).float()[None] / 255.0


def _u8(image: torch.Tensor) -> np.ndarray:
    return torch.round(image[0] * 255).to(torch.uint8).numpy()


@pytest.fixture
def nodes(pack):
    m = pack.NODE_CLASS_MAPPINGS
    return {name: m[name] for name in ("ReSpecHistoryStore", "ReSpecHistoryAppend", "ReSpecProvenanceSelector",
                                       "ReSpecDriftGuard")}


@pytest.fixture(autouse=True)
def cold(pack):
    """Each test starts with no kept answer (the cache is the process's)."""
    core(pack, "pixels.analysis_cache").CACHE.undo_answers.clear()


def _added(nodes):
    """An in-graph history whose turn 1 added a red box (through History Append): (history, I_0)."""
    scene = background(7, SHAPE)
    hist, *_ = _hidden(nodes["ReSpecHistoryStore"], unique_id="1").execute("in-graph", "s", -1, "", "",
                                                                           image=_t(u8(scene))).result
    hist, _ = nodes["ReSpecHistoryAppend"].execute(hist, _t(u8(drift(draw_rect(scene, BOX, (0.9, 0.1, 0.1)),
                                                                     noise=0.004))), ADD).result
    return hist, u8(scene)


def _turn(nodes, hist, request):
    """The chat graph's turn up to the guard: the provenance selector's (plan, current image, image ids)
    and the guard's inputs with history first on and the editor's branch not yet evaluated (None)."""
    plan, _, current, ids, _, _ = nodes["ReSpecProvenanceSelector"].execute(hist, request, "auto", True).result
    inputs = dict(previous=current, edited=None, enabled=True, instruction=request, plan=plan, reveal=None,
                  history=hist, history_first=True)
    return plan, ids, inputs


def test_check_lazy_status_asks_for_nothing_on_a_turn_the_history_answers(nodes):
    hist, _ = _added(nodes)
    _, _, inputs = _turn(nodes, hist, REMOVE)
    assert nodes["ReSpecDriftGuard"].check_lazy_status(**inputs) == []


def test_check_lazy_status_asks_for_the_editors_image_on_any_other_turn(nodes):
    hist, _ = _added(nodes)
    _, _, inputs = _turn(nodes, hist, "Add a blue ball on the right.")
    guard = nodes["ReSpecDriftGuard"]
    assert guard.check_lazy_status(**inputs) == ["edited", "reveal"]
    # mask and reveal not connected (absent) are never asked for: ComfyUI refuses a request for them
    del inputs["reveal"]
    assert guard.check_lazy_status(**inputs) == ["edited"]
    # the switch off: the editor always runs, even on a turn the history could answer
    _, _, off = _turn(nodes, hist, REMOVE)
    assert guard.check_lazy_status(**{**off, "history_first": False}) == ["edited", "reveal"]


def test_the_answer_is_the_image_before_the_addition_exactly_with_no_editors_image(nodes):
    hist, i0 = _added(nodes)
    _, _, inputs = _turn(nodes, hist, REMOVE)
    image, mask, report, value = nodes["ReSpecDriftGuard"].execute(**inputs).result
    assert np.array_equal(_u8(image), i0)                       # I_{k-1} = I_0, byte for byte
    assert value.step == "history_undo" and value.entry["applied"] is True
    assert report.split("\n", 1)[0] == WORDS
    assert mask.shape == (1, *SHAPE) and float(mask.max()) == 1.0  # the pixels taken from I_0


def test_the_answer_is_computed_once_for_check_lazy_status_and_the_outputs(nodes, pack, monkeypatch):
    undo_step = core(pack, "post_edit.undo_step")
    calls = []
    real = undo_step.undo_turn
    monkeypatch.setattr(undo_step, "undo_turn", lambda *a, **k: calls.append(1) or real(*a, **k))
    hist, _ = _added(nodes)
    _, _, inputs = _turn(nodes, hist, REMOVE)
    guard = nodes["ReSpecDriftGuard"]
    guard.check_lazy_status(**inputs)
    guard.execute(**inputs).result
    assert len(calls) == 1
    # keyed by the turn: another request on the same history is answered on its own
    _, _, other = _turn(nodes, hist, "Add a blue ball on the right.")
    guard.check_lazy_status(**other)
    assert len(calls) == 2


def test_history_append_keeps_the_turn_as_run_turn_does(nodes):
    hist, i0 = _added(nodes)
    plan, ids, inputs = _turn(nodes, hist, REMOVE)
    image, _, _, value = nodes["ReSpecDriftGuard"].execute(**inputs).result
    append = nodes["ReSpecHistoryAppend"]
    assert append.check_lazy_status(history=hist, image=image, instruction=REMOVE, reveal=None, guard=value) == []
    new, _ = append.execute(hist, image, REMOVE, sent_instruction="Remove the red box, revealing ...", plan=plan,
                            meta=json.dumps({"editor": "flux2-klein"}), editor_image_ids=ids, guard=value).result
    turn = new.current
    assert np.array_equal(turn.image.array, i0)
    assert turn.meta["editor_run"] is False and turn.meta["editor_image_ids"] == []
    assert turn.sent_instruction == "" and turn.meta["editor"] == "flux2-klein"
    assert "undo_source" in turn.masks and "change" in turn.masks
    (entry,) = turn.meta["post_edit"]
    assert entry["step"] == "history_undo" and entry["words"] == WORDS


def test_history_append_asks_for_reveals_record_on_a_turn_the_editor_made(nodes):
    hist, _ = _added(nodes)
    _, _, inputs = _turn(nodes, hist, "Add a blue ball on the right.")
    edited = _t(u8(draw_rect(background(7, SHAPE), (40, 80, 70, 110), (0.1, 0.2, 0.9))))
    image, _, _, value = nodes["ReSpecDriftGuard"].execute(**{**inputs, "edited": edited, "reveal": None}).result
    assert [v.step for v in value] == ["history_undo", "drift_guard"]     # history first said why not
    append = nodes["ReSpecHistoryAppend"]
    assert append.check_lazy_status(reveal=None, guard=value) == ["reveal"]
    assert append.check_lazy_status(guard=value) == []                   # not connected: never asked for
    new, _ = append.execute(hist, image, "Add a blue ball on the right.", guard=value).result
    steps = [e["step"] for e in new.current.meta["post_edit"]]
    assert steps == ["history_undo", "drift_guard"] and "editor_run" not in new.current.meta
    assert new.current.meta["post_edit"][0]["applied"] is False


@pytest.mark.parametrize("change, message", [
    (dict(history_first="yes"), "history_first' must be true or false"),
    (dict(history_first=1), "history_first' must be true or false"),
    (dict(history=None), "history_first needs 'history'"),
    (dict(history="a history"), "History Store or Append"),
    (dict(previous="shifted"), "not the history's current image"),
    (dict(plan="other turn"), "the plan was made for turn"),
])
def test_hostile_history_first_inputs_are_refused_clearly_and_change_nothing(nodes, pack, change, message):
    errors = core(pack, "errors")
    cache = core(pack, "pixels.analysis_cache").CACHE.undo_answers
    hist, _ = _added(nodes)
    plan, _, inputs = _turn(nodes, hist, REMOVE)
    if change.get("previous") == "shifted":
        change = {"previous": torch.roll(inputs["previous"], 3, dims=2)}
    if change.get("plan") == "other turn":
        change = {"plan": nodes["ReSpecProvenanceSelector"].execute(hist.rewind(0), REMOVE, "auto",
                                                                      True).result[0]}
    bad = {**inputs, **change}
    guard = nodes["ReSpecDriftGuard"]
    for call in (guard.check_lazy_status, guard.execute):
        with pytest.raises(errors.InputError, match=message):
            call(**bad)
    assert len(cache) == 0 and len(hist) == 2          # nothing answered, nothing kept


def test_history_append_refuses_an_answered_turn_with_another_image_or_a_reveal_record(nodes, pack):
    errors = core(pack, "errors")
    hist, _ = _added(nodes)
    plan, _, inputs = _turn(nodes, hist, REMOVE)
    image, _, _, value = nodes["ReSpecDriftGuard"].execute(**inputs).result
    append = nodes["ReSpecHistoryAppend"]
    with pytest.raises(errors.InputError, match="'image' is not its image"):
        append.execute(hist, inputs["previous"], REMOVE, plan=plan, guard=value).result
    with pytest.raises(errors.InputError, match="Reveal Composite's record"):
        reveal = core(pack, "post_edit.reveal_step").reveal_result(None, {"applied": False, "reason": "x"})
        append.execute(hist, image, REMOVE, plan=plan, guard=value, reveal=reveal).result
    for bad in ("a record", (value, value, value), ()):
        with pytest.raises(errors.InputError, match="Drift Guard"):
            append.execute(hist, image, REMOVE, plan=plan, guard=bad).result


def test_the_panel_reads_history_firsts_step_and_mask_by_the_cores_names(pack):
    """js/lib/respec_view.js shows the words of the meta.post_edit entry named HISTORY_STEP and the
    undo_source overlay (its tests: js/tests/respec_view.test.mjs): the names the core records."""
    from pathlib import Path
    js = (Path(__file__).resolve().parent.parent / "js" / "lib" / "respec_view.js").read_text(encoding="utf-8")
    assert f'export const HISTORY_STEP = "{core(pack, "post_edit.undo_step").UndoStep.name}";' in js
    overlays = js.split("export const TURN_OVERLAYS = {", 1)[1].split("};", 1)[0]
    assert f"  {core(pack, 'pixels.undo').UNDO_SOURCE}: {{" in overlays


def test_the_same_request_after_its_undo_is_answered_with_its_picture_and_the_editor_is_not_asked_for(nodes):
    hist, i0 = _added(nodes)
    plan, ids, inputs = _turn(nodes, hist, REMOVE)
    image, _, _, value = nodes["ReSpecDriftGuard"].execute(**inputs).result
    hist, _ = nodes["ReSpecHistoryAppend"].execute(hist, image, REMOVE, plan=plan, editor_image_ids=ids,
                                                   guard=value).result
    _, _, again = _turn(nodes, hist, ADD)
    guard = nodes["ReSpecDriftGuard"]
    assert guard.check_lazy_status(**again) == []                   # the sampler is not run
    image, _, report, value = guard.execute(**again).result
    assert np.array_equal(_u8(image), hist.image(1).array)           # turn 1's picture, byte for byte
    assert report.startswith("repeated from history: turn 1 asked the same of the same picture")
    assert guard.check_lazy_status(**{**again, "history_first": False}) == ["edited", "reveal"]
