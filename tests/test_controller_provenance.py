"""The provenance selector, planners and model-free rewrite (respec/controller/provenance_selector.py), and
a whole turn with 0 VLM calls plus Reveal Composite as a post-edit step (respec/turn.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from controller_helpers import ScriptedAnswer
from respec.controller.covering import locate_covering_turn
from respec.controller.provenance_selector import (NO_COVERING_TURN, PROVENANCE_AMBIGUOUS, PROVENANCE_DEFERRED,
                                                   PROVENANCE_LOW_CONFIDENCE, ProvenanceSelector, hybrid_plan,
                                                   model_free_instruction, provenance_plan, selector_parts)
from respec.controller.selection import select_references
from respec.errors import InputError
from respec.history import CHANGE, REVEAL_SOURCE, History
from respec.pixels.change_mask import change_for
from respec.post_edit.reveal_step import RevealStep
from respec.plan import Plan
from respec.turn import TurnParts, run_turn
from synthetic_scenes import background, draw_rect, drift, rect_mask, u8

SHAPE = (96, 128)
SUITCASE = (30, 40, 70, 90)
LAMP = (10, 5, 40, 25)
ADD_SUITCASE = "Add a large suitcase in the middle of the picture."
ADD_LAMP = "Add a red lamp on the left."


def _history(*turns):
    """I_0 (a textured scene) and one turn per (instruction, box or None): a box is drawn (a local
    change); None makes the turn a global colour change (a style-like edit, no local change)."""
    scene = background(21, SHAPE)
    h = History.start(u8(scene))
    img = scene
    for i, (text, box) in enumerate(turns):
        img = draw_rect(img, box, (0.2 + 0.3 * i, 0.8, 0.3)) if box else drift(img, gain=(0.8, 0.9, 1.1), noise=0)
        arr = u8(drift(img, noise=0.006, seed=10 + i))
        h = h.append(arr, text, masks={CHANGE: change_for(h, arr)})
    return h


RESTORE = json.dumps({"identity_anchor_id": 2, "restoration_source_id": 1, "image_ids": [1, 2],
                      "restoration_region": "middle",
                      "synthesis_instruction": "remove the suitcase, recovering the middle from the first image"})


# ----------------------------------------------------------------------------- locating turn k

def test_the_turn_the_request_names_and_provenance_confirms_is_the_covering_turn():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    found = locate_covering_turn(h, "Remove the suitcase.")
    assert (found.turn, found.source_id, found.evidence, found.ambiguous) == (1, 0, "request+provenance", False)
    assert found.changed[1] == pytest.approx(rect_mask(SHAPE, SUITCASE).mean(), rel=0.1)


def test_a_request_naming_nothing_uses_provenance_alone():
    h = _history(("Make it warmer", None), (ADD_SUITCASE, SUITCASE))
    found = locate_covering_turn(h, "Clear the middle of the picture.")
    # the global colour turn changed no local part: only turn 2 qualifies
    assert (found.turn, found.evidence, found.ambiguous) == (2, "provenance", False)


def test_two_candidate_turns_are_ambiguous_and_the_latest_addition_still_there_is_used():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    found = locate_covering_turn(h, "Clear that area.")
    assert found.candidates == (1, 2) and found.ambiguous and found.turn == 2


def test_a_named_turn_without_a_change_is_ambiguous():
    h = _history(("Add a suitcase in the middle", None), (ADD_LAMP, LAMP))
    found = locate_covering_turn(h, "Remove the suitcase")
    assert found.turn == 1 and found.evidence == "request" and found.ambiguous


# ----------------------------------------------------------------------------- plans

def test_the_provenance_plan_makes_no_vlm_call_and_follows_the_papers_ids():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    plan = provenance_plan(h, "Remove the suitcase.", True)
    assert plan.vlm_calls == 0 and not plan.vlm_called and plan.controller == "provenance"
    assert (plan.restoration_source_id, plan.identity_anchor_id, plan.image_ids) == (0, 2, (0, 2))
    assert plan.synthesis_instruction == ("Remove the suitcase, revealing what was there in the first image "
                                          "exactly as it was.")
    assert plan.provenance.turn == 1 and plan.fallbacks == ()


def test_the_model_free_rewrite_keeps_the_request_and_adds_the_clause():
    assert model_free_instruction("move the box to the left!") == (
        "move the box to the left, revealing what was there in the first image exactly as it was.")
    with pytest.raises(InputError, match="empty"):
        model_free_instruction("  ")


def test_a_non_restoration_turn_passes_the_request_through_without_a_call():
    h = _history((ADD_SUITCASE, SUITCASE))
    plan = provenance_plan(h, "Add a hat", False)
    assert plan.synthesis_instruction == "Add a hat" and not plan.is_restoration and plan.vlm_calls == 0


def test_ambiguous_evidence_is_deferred_to_a_connected_controller():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    vlm = ScriptedAnswer(RESTORE)
    plan = provenance_plan(h, "Clear that area.", True, backend=vlm)
    assert vlm.calls == 1 and plan.vlm_called and plan.restoration_source_id == 1
    assert PROVENANCE_AMBIGUOUS in plan.fallbacks and PROVENANCE_DEFERRED in plan.fallbacks
    assert plan.provenance.candidates == (1, 2)


def test_ambiguous_evidence_without_a_controller_says_so_in_the_plan():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    plan = provenance_plan(h, "Clear that area.", True)
    assert plan.restoration_source_id == 1 and PROVENANCE_AMBIGUOUS in plan.fallbacks


def test_no_covering_turn_falls_back_to_the_original_as_the_paper_does():
    h = _history(("Make it warmer", None))
    plan = provenance_plan(h, "Remove the shadow", True)
    assert plan.restoration_source_id == 0 and NO_COVERING_TURN in plan.fallbacks


def test_hybrid_keeps_the_vlms_instruction_and_takes_provenances_ids():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    vlm = ScriptedAnswer(RESTORE)      # the VLM picks I_1: wrong, the suitcase was added at turn 1
    plan = hybrid_plan(h, "Remove the suitcase.", True, backend=vlm)
    assert vlm.calls == 1
    assert plan.synthesis_instruction.startswith("remove the suitcase, recovering")
    assert plan.restoration_source_id == 0 and plan.image_ids == (0, 2)
    assert plan.meta["vlm_choice"]["restoration_source_id"] == 1


# ----------------------------------------------------------------------------- the selector part

def test_the_provenance_selector_overrides_a_vlm_plans_ids():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    vlm_plan = Plan(turn=3, user_instruction="Remove the suitcase.", synthesis_instruction="x",
                    is_restoration=True, restoration_source_id=1, identity_anchor_id=2, image_ids=(1, 2),
                    vlm_called=True)
    chosen = ProvenanceSelector().select(h, vlm_plan, use_history_reference=True)
    assert chosen.ids == [0, 2]
    assert select_references(h, vlm_plan).ids == [1, 2]          # the paper's selector keeps the VLM's
    off = ProvenanceSelector().select(h, vlm_plan, use_history_reference=False)
    assert off.ids == [2]


def test_selector_names():
    assert [type(p).__name__ for p in selector_parts("vlm")] == ["VLMPlanner", "PlanSelector"]
    assert [type(p).__name__ for p in selector_parts("provenance")] == ["ProvenancePlanner", "ProvenanceSelector"]
    assert [type(p).__name__ for p in selector_parts("hybrid")] == ["HybridPlanner", "ProvenanceSelector"]
    with pytest.raises(InputError, match="vlm, provenance, hybrid"):
        selector_parts("oracle")


# ----------------------------------------------------------------------------- whole turns

class Remover:
    """An editor that removes the suitcase of _history's scene when asked, re-inventing the area as
    its surroundings' mean colour (no evidence used), and adds nothing otherwise."""

    name = "remover"

    def __init__(self):
        self.calls, self.last_run = [], {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.calls.append((len(images), instruction))
        cur = np.asarray(images[-1]).astype(np.float64) / 255.0
        y0, x0, y1, x1 = SUITCASE
        ring = np.zeros(cur.shape[:2], bool)
        ring[y0 - 3:y1 + 3, x0 - 3:x1 + 3] = True
        ring[y0:y1, x0:x1] = False
        out = draw_rect(cur, SUITCASE, cur[ring].mean(axis=0))
        self.last_output = Image.fromarray(u8(drift(out, noise=0.006, seed=seed % 1000)))
        return self.last_output


def test_a_whole_restoration_turn_runs_with_no_vlm_call_and_reveals_the_hidden_pixels():
    h = _history((ADD_SUITCASE, SUITCASE), (ADD_LAMP, LAMP))
    planner, selector = selector_parts("provenance")
    editor = Remover()
    record, new = run_turn(h, "Remove the suitcase.",
                           TurnParts(editor=editor, planner=planner, selector=selector, post_edit=[RevealStep()]),
                           is_restoration=True, seed=3)
    assert record.vlm_calls == 0 and record.editor_image_ids == [0, 2]
    assert editor.calls == [(2, record.plan.synthesis_instruction)]
    entry = record.post_edit[0]
    assert entry["step"] == "reveal_composite" and entry["applied"], entry
    assert entry["covering_turn"] == 1 and entry["source_id"] == 0
    turn = new.current
    assert turn.change is not None and REVEAL_SOURCE in turn.masks
    # the suitcase's area now holds I_0's texture (colour-matched to the drift), not the flat fill
    box = rect_mask(SHAPE, SUITCASE)
    out, truth = turn.image.array[box].astype(float), h.image(0).array[box].astype(float)
    assert min(np.corrcoef(out[:, c], truth[:, c])[0, 1] for c in range(3)) > 0.95
    painted = np.asarray(editor.last_output)[box].astype(float)   # what the editor itself painted there
    assert max(np.corrcoef(painted[:, c], truth[:, c])[0, 1] for c in range(3)) < 0.3


def test_the_reveal_step_leaves_other_turns_alone():
    h = _history((ADD_SUITCASE, SUITCASE))
    planner, selector = selector_parts("provenance")
    record, new = run_turn(h, ADD_LAMP,
                           TurnParts(editor=Remover(), planner=planner, selector=selector, post_edit=[RevealStep()]),
                           is_restoration=False)
    assert record.post_edit[0]["applied"] is False and "not a restoration" in record.post_edit[0]["reason"]
    assert REVEAL_SOURCE not in new.current.masks


# ----------------------------------------------------------------------------- low confidence (a re-render)

def _rerendered_history():
    """I_0; turn 1 adds a lamp (the editor keeps the scene); turn 2 adds a suitcase and redraws the
    whole picture (a re-render field: smooth displacement and new texture), as real editors do."""
    from synthetic_scenes import rerender_field
    scene = background(21, SHAPE)
    h = History.start(u8(scene))
    i1 = u8(drift(draw_rect(scene, LAMP, (0.2, 0.8, 0.3)), noise=0.006, seed=10))
    h = h.append(i1, ADD_LAMP, masks={CHANGE: change_for(h, i1)})
    i2 = u8(rerender_field(draw_rect(i1 / 255.0, SUITCASE, (0.5, 0.8, 0.3))))
    return h.append(i2, ADD_SUITCASE, masks={CHANGE: change_for(h, i2)})


def test_a_re_rendered_scene_gives_low_confidence_and_provenance_alone_defers_to_the_c3_rule():
    h = _rerendered_history()
    assert h.turns[2].masks[CHANGE].info["rerendered"]
    plan = provenance_plan(h, "Remove the suitcase.", True)
    # the masks would say turn 2 (source I_1); a re-render makes that evidence worthless
    assert plan.provenance.turn == 2
    assert plan.meta["provenance_confidence"] < 0.5
    assert PROVENANCE_LOW_CONFIDENCE in plan.fallbacks
    assert plan.restoration_source_id == 0 and plan.image_ids == (0, 2)      # the paper's C.3: I_0
    sel = ProvenanceSelector().select(h, plan, use_history_reference=True)
    assert sel.ids == [0, 2]


def test_a_re_rendered_scene_in_hybrid_defers_to_the_controller():
    h = _rerendered_history()
    answer = json.dumps({"identity_anchor_id": 2, "restoration_source_id": 0, "image_ids": [0, 2],
                         "restoration_region": "middle",
                         "synthesis_instruction": "remove the suitcase, recovering the middle from the first image"})
    vlm = ScriptedAnswer(answer)
    plan = hybrid_plan(h, "Remove the suitcase.", True, backend=vlm)
    assert vlm.calls == 1
    assert plan.meta["provenance_confidence"] < 0.5
    assert PROVENANCE_LOW_CONFIDENCE in plan.fallbacks and PROVENANCE_DEFERRED in plan.fallbacks
    assert plan.restoration_source_id == 0 and plan.image_ids == (0, 2)      # the controller's, not provenance's 1
    # the provenance planner with a controller connected defers the same way (one call)
    vlm2 = ScriptedAnswer(answer)
    plan2 = provenance_plan(h, "Remove the suitcase.", True, backend=vlm2)
    assert vlm2.calls == 1 and plan2.restoration_source_id == 0
    assert PROVENANCE_LOW_CONFIDENCE in plan2.fallbacks and PROVENANCE_DEFERRED in plan2.fallbacks
    # and the selector keeps the plan's ids
    sel = ProvenanceSelector().select(h, plan, use_history_reference=True)
    assert sel.ids == select_references(h, plan, True).ids == [0, 2]


def test_the_same_history_without_the_re_render_is_trusted():
    scene = background(21, SHAPE)
    h = History.start(u8(scene))
    img = scene
    for i, (text, box) in enumerate(((ADD_LAMP, LAMP), (ADD_SUITCASE, SUITCASE))):
        img = draw_rect(img, box, (0.2 + 0.3 * i, 0.8, 0.3))
        arr = u8(drift(img, noise=0.006, seed=10 + i))
        h = h.append(arr, text, masks={CHANGE: change_for(h, arr)})
    plan = provenance_plan(h, "Remove the suitcase.", True)
    assert plan.meta["provenance_confidence"] > 0.8
    assert PROVENANCE_LOW_CONFIDENCE not in plan.fallbacks and plan.restoration_source_id == 1


FIGURE = (20, 50, 80, 80)      # a textured figure on a flat white backdrop
CUP = (40, 80, 52, 92)         # added at turn 1, against the figure's right side


def _figure_history(redraw: bool) -> History:
    """I_0: a textured figure on white; turn 1 adds a cup beside it (redraw: and redraws the figure
    3 px to the right with new texture, as a diffusion editor redraws a subject inside its own
    change mask); turn 2 adds a lamp on the left."""
    white = np.full(SHAPE + (3,), 0.95)
    i0 = white.copy()
    y0, x0, y1, x1 = FIGURE
    i0[y0:y1, x0:x1] = background(5, SHAPE)[y0:y1, x0:x1]
    if redraw:
        i1 = white.copy()
        i1[y0:y1, x0 + 3:x1 + 3] = background(6, SHAPE)[y0:y1, x0 + 3:x1 + 3]
    else:
        i1 = i0.copy()
    i1 = draw_rect(i1, CUP, (0.5, 0.3, 0.1))
    i2 = draw_rect(i1, LAMP, (0.9, 0.2, 0.2))
    h = History.start(u8(i0))
    for img, text in ((i1, "Add a coffee cup in her hand."), (i2, ADD_LAMP)):
        arr = u8(drift(img, noise=0.004, seed=len(h.turns)))
        h = h.append(arr, text, masks={CHANGE: change_for(h, arr)})
    return h


def test_a_figure_redrawn_inside_its_own_change_mask_on_a_flat_backdrop_gets_low_confidence():
    h = _figure_history(redraw=True)
    assert not h.turns[1].masks[CHANGE].info["rerendered"]     # the white backdrop "held" whatever happened
    plan = provenance_plan(h, "Remove the cup.", True)
    assert plan.provenance.turn == 1
    assert plan.meta["provenance_confidence"] < 0.5
    assert PROVENANCE_LOW_CONFIDENCE in plan.fallbacks
    held, textured, around = plan.meta["provenance_evidence"]["1"][2:5]
    assert textured <= 2 < around     # C_1 covers the whole figure: around it, only flat white


def test_the_same_cup_added_beside_a_figure_that_held_is_trusted():
    h = _figure_history(redraw=False)
    plan = provenance_plan(h, "Remove the cup.", True)
    assert plan.provenance.turn == 1
    assert plan.meta["provenance_confidence"] >= 0.5
    assert PROVENANCE_LOW_CONFIDENCE not in plan.fallbacks and plan.restoration_source_id == 0
