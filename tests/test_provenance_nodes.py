"""The Reference Selector (provenance) and Reveal Composite nodes, and History Append keeping what
Reveal Composite pasted: a whole restoration turn through the nodes with no VLM."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from conftest import core
from synthetic_scenes import background, draw_rect, drift, rect_mask, u8

SHAPE = (96, 128)
SUITCASE = (30, 40, 70, 90)


def _hidden(node, **values):
    """The node's class for one call, holding that call's hidden values (unique_id, prompt) as ComfyUI
    gives them to a V3 node (which reads them as cls.hidden)."""
    io = sys.modules[node.__module__].io
    return node.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden[k]: v for k, v in values.items()}})


def _t(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr).float()[None] / 255.0


@pytest.fixture
def nodes(pack):
    m = pack.NODE_CLASS_MAPPINGS
    return m["ReSpecHistoryStore"], m["ReSpecHistoryAppend"], m["ReSpecProvenanceSelector"], m["ReSpecRevealComposite"]


def _two_turns(nodes):
    """An in-graph history: I_0, turn 1 adds a suitcase, turn 2 adds a lamp (through History Append)."""
    Store, Append, _, _ = nodes
    scene = background(31, SHAPE)
    hist, *_ = _hidden(Store, unique_id="1").execute("in-graph", "s", -1, "", "", image=_t(u8(scene))).result
    i1 = draw_rect(scene, SUITCASE, (0.2, 0.8, 0.3))
    i2 = draw_rect(i1, (5, 5, 25, 25), (0.9, 0.9, 0.1))
    for img, text in ((i1, "Add a large suitcase in the middle."), (i2, "Add a yellow lamp in the corner.")):
        hist, _ = Append.execute(hist, _t(u8(drift(img, noise=0.006))), text).result
    return hist, scene


def _reinvent(current: torch.Tensor) -> torch.Tensor:
    """What an editor with no evidence does when told to remove the suitcase: a flat fill."""
    cur = current[0].numpy().astype(np.float64)
    y0, x0, y1, x1 = SUITCASE
    ring = np.zeros(SHAPE, bool)
    ring[y0 - 3:y1 + 3, x0 - 3:x1 + 3] = True
    ring[y0:y1, x0:x1] = False
    return _t(u8(drift(draw_rect(cur, SUITCASE, cur[ring].mean(axis=0)), noise=0.006, seed=7)))


def test_a_restoration_turn_through_the_nodes_needs_no_vlm_and_keeps_what_was_pasted(pack, nodes):
    _, Append, Selector, Reveal = nodes
    hist, scene = _two_turns(nodes)
    request = "Remove the suitcase."
    plan, editor_images, current, ids, instruction, pj = Selector.execute(hist, request, "auto", True).result
    assert json.loads(ids) == [0, 2] and editor_images.shape[0] == 2
    assert plan.vlm_calls == 0 and not plan.vlm_called and plan.is_restoration
    assert instruction == "Remove the suitcase, revealing what was there in the first image exactly as it was."
    assert json.loads(pj)["meta"]["provenance"]["turn"] == 1
    edited = _reinvent(current)
    image, reveal, source_mask, report = Reveal.execute(hist, edited, request, True, "auto", plan=plan).result
    rep = json.loads(report)
    assert rep["applied"] and rep["covering_turn"] == 1 and rep["source_id"] == 0
    box = rect_mask(SHAPE, SUITCASE)
    assert torch.all(source_mask[0][torch.from_numpy(box)] == 1.0)
    out = np.round(image[0].numpy() * 255)[box]
    truth = u8(scene)[box].astype(float)
    assert min(np.corrcoef(out[:, c], truth[:, c])[0, 1] for c in range(3)) > 0.95
    new, _ = Append.execute(hist, image, request, instruction, plan, editor_image_ids=ids, reveal=reveal).result
    turn = new.current
    history_mod = core(pack, "history")
    assert set(turn.masks) == {history_mod.CHANGE, history_mod.REVEAL_SOURCE}
    assert turn.meta["post_edit"][0]["step"] == "reveal_composite" and turn.meta["post_edit"][0]["applied"]
    # the entry is the turn's record only (a session store keeps meta as JSON): the core's result and the
    # paste handed to a Drift Guard node travel on the value, not in the entry
    assert json.loads(json.dumps(turn.meta["post_edit"])) == turn.meta["post_edit"]
    assert reveal.exact is not None and reveal.result.applied


def test_reveal_composite_switched_off_or_on_another_turn_passes_the_edit_through(nodes):
    _, _, _, Reveal = nodes
    hist, _ = _two_turns(nodes)
    edited = _reinvent(_t(hist.current.image.array))
    image, reveal, mask, report = Reveal.execute(hist, edited, "Remove the suitcase.", False, "auto").result
    assert image is edited and json.loads(report) == {"applied": False, "reason": "switched off"}
    image, reveal, mask, report = Reveal.execute(hist, edited, "Make the sky bluer.", True, "auto").result
    assert image is edited and "not a restoration turn" in json.loads(report)["reason"] and not mask.any()


def test_with_a_vlm_plan_the_selector_keeps_its_instruction_and_picks_the_ids(pack, nodes):
    _, _, Selector, _ = nodes
    hist, _ = _two_turns(nodes)
    Plan = core(pack, "plan").Plan
    vlm_plan = Plan(turn=3, user_instruction="Remove the suitcase.", synthesis_instruction="VLM text",
                    is_restoration=True, restoration_source_id=2, identity_anchor_id=2, image_ids=(2,),
                    vlm_called=True, vlm_calls=1)
    plan, _, _, ids, instruction, _ = Selector.execute(hist, "Remove the suitcase.", "auto", True, plan=vlm_plan).result
    assert json.loads(ids) == [0, 2] and instruction == "VLM text"
    assert plan.meta["vlm_choice"]["restoration_source_id"] == 2


def test_the_selectors_panel_events_name_the_node_from_its_hidden_unique_id(pack, nodes):
    _, _, Selector, _ = nodes
    hist, _ = _two_turns(nodes)
    comfy = core(pack, "comfy")
    seen = []
    remove = comfy.add_listener(lambda name, data: seen.append((name, data["node"])))
    try:
        Selector.PREPARE_CLASS_CLONE({"hidden_inputs": {comfy.io.Hidden.unique_id: "12"}}).execute(
            hist, "Remove the suitcase.", "auto", True)
    finally:
        remove()
    assert seen == [("respec.plan", "12"), ("respec.references", "12")]


def test_history_append_refuses_a_reveal_value_from_elsewhere(nodes):
    _, Append, _, _ = nodes
    hist, _ = _two_turns(nodes)
    with pytest.raises(Exception, match="Reveal Composite"):
        Append.execute(hist, _t(hist.current.image.array), "x", reveal="not a reveal").result


def _revealed_removal(nodes):
    """The suitcase's removal through the selector and Reveal Composite: (I_0, the request, the plan,
    I_(t-1), Reveal's image, its record)."""
    _, _, Selector, Reveal = nodes
    hist, scene = _two_turns(nodes)
    request = "Remove the suitcase."
    plan, _, current, _, _, _ = Selector.execute(hist, request, "auto", True).result
    image, reveal, _, _ = Reveal.execute(hist, _reinvent(current), request, True, "auto", plan=plan).result
    return scene, request, plan, current, image, reveal


def test_the_drift_guard_node_given_reveals_record_keeps_the_sources_own_pixels_inside_the_paste(pack, nodes):
    Guard = pack.NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]
    scene, request, plan, current, image, reveal = _revealed_removal(nodes)
    inside = torch.from_numpy(rect_mask(SHAPE, (SUITCASE[0] + 3, SUITCASE[1] + 3, SUITCASE[2] - 3, SUITCASE[3] - 3)))
    i0 = torch.from_numpy(u8(scene))
    with_reveal = Guard.execute(current, image, True, instruction=request, plan=plan, reveal=reveal).result
    assert "exact_inside" in json.loads(with_reveal[2].split("\n", 1)[1])
    out = torch.round(with_reveal[0][0] * 255).to(torch.uint8)
    assert torch.equal(out[inside], i0[inside])                    # I_0's bytes: no tint towards the drift
    without = torch.round(Guard.execute(current, image, True, instruction=request, plan=plan).result[0][0] * 255)
    assert not torch.equal(without.to(torch.uint8)[inside], i0[inside])


def test_the_drift_guard_given_an_edit_region_and_reveals_record_keeps_both(pack, nodes):
    """The conversations feed the guard both (issue 35's edit-region option, switched on, and issue
    32's record): inside the region the paste is I_0's own bytes, outside it I_{t-1}'s pixels."""
    Guard = pack.NODE_CLASS_MAPPINGS["ReSpecDriftGuard"]
    scene, request, plan, current, image, reveal = _revealed_removal(nodes)
    y0, x0, y1, x1 = SUITCASE
    region = torch.from_numpy(rect_mask(SHAPE, (y0 - 4, x0 - 4, y1 + 4, x1 + 4)).astype(np.float32))[None]
    out, weight, report, _ = Guard.execute(current, image, True, mask=region, instruction=request, plan=plan,
                                           reveal=reveal).result
    record = json.loads(report.split("\n", 1)[1])
    assert record["region_from"] == "the user's mask" and "exact_inside" in record
    out = torch.round(out[0] * 255).to(torch.uint8)
    inside = torch.from_numpy(rect_mask(SHAPE, (y0 + 3, x0 + 3, y1 - 3, x1 - 3)))
    assert torch.equal(out[inside], torch.from_numpy(u8(scene))[inside])       # the paste: I_0's bytes
    far = ~torch.from_numpy(rect_mask(SHAPE, (y0 - 12, x0 - 12, y1 + 12, x1 + 12)))
    assert torch.equal(out[far], torch.round(current[0] * 255).to(torch.uint8)[far])   # elsewhere: I_(t-1)'s
