"""One ReSpec turn (respec/turn.py): what each switch gives the editor, what the record says,
the selector and post-edit parts, and the timing hook. No model: a scripted controller answer
and an editor that records its inputs."""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import FrozenInstanceError

import numpy as np
import pytest
from PIL import Image

from controller_helpers import ScriptedAnswer, make_history, picture
from respec.controller.planner import PlanOptions, VLMPlanner, plan_turn
from respec.controller.selection import Selection
from respec.errors import InputError
from respec.post_edit.result import StepResult
from respec.turn import EDITOR_IMAGE_IDS, PlanSelector, TurnParts, TurnSwitches, run_turn

RESTORE = json.dumps({"reasoning": {"occluder": "box"}, "identity_anchor_id": 3, "restoration_source_id": 0,
                      "restoration_region": "chest", "image_ids": [0, 3],
                      "synthesis_instruction": "remove the box, showing the chest as in the first image"})


class Recorder:
    """An editor that records (images, instruction, kwargs) and returns a grey image of the asked size."""

    name = "recorder"

    def __init__(self):
        self.calls, self.last_run = [], {}

    def edit(self, images, instruction, *, output_size, seed, steps=None, guidance=None):
        self.calls.append((images, instruction, dict(output_size=output_size, seed=seed, steps=steps,
                                                     guidance=guidance)))
        self.last_run = {"seed": seed, "steps": steps}
        return Image.new("RGB", output_size, (seed % 256, 0, 0))


def _history():
    return make_history(4)    # I_0..I_3; turn 4 is next (its request is a restoration)


def test_full_respec_sends_the_plans_references_and_rewritten_instruction():
    editor, vlm = Recorder(), ScriptedAnswer(RESTORE)
    record, new = run_turn(_history(), "remove the large cardboard box", TurnParts(editor=editor, backend=vlm),
                           is_restoration=True, seed=11, steps=3)
    images, text, kw = editor.calls[0]
    assert record.editor_image_ids == [0, 3] and len(images) == 2
    assert np.array_equal(np.asarray(images[0]), _history().image(0).array)
    assert text == record.sent_instruction == "remove the box, showing the chest as in the first image"
    assert kw == {"output_size": (64, 48), "seed": 11, "steps": 3, "guidance": None}
    assert vlm.calls == 1 and record.vlm_calls == 1 and record.plan.restoration_source_id == 0
    # The new history holds the turn, and its meta is the record (what results rows read).
    assert new.next_turn == 5 and new.current.plan is record.plan
    assert new.current.meta[EDITOR_IMAGE_IDS] == [0, 3] and new.current.meta["seed"] == 11
    assert new.current.sent_instruction == record.sent_instruction
    assert set(record.seconds) == {"controller", "select", "rewrite", "editor", "provenance"}
    assert new.current.change is not None      # C_t is kept with the turn, as History Append does


@pytest.mark.parametrize("use_pti,use_hrs,ids,sent", [
    (True, False, [3], "remove the box, showing the chest as in the first image"),
    (False, True, [0, 3], "remove the large cardboard box"),
])
def test_the_pti_and_hrs_switches_act_on_the_instruction_and_the_images(use_pti, use_hrs, ids, sent):
    editor = Recorder()
    record, _ = run_turn(_history(), "remove the large cardboard box",
                         TurnParts(editor=editor, backend=ScriptedAnswer(RESTORE)),
                         TurnSwitches(use_pti=use_pti, use_hrs=use_hrs), is_restoration=True)
    assert record.editor_image_ids == ids and editor.calls[0][1] == sent and len(editor.calls[0][0]) == len(ids)


def test_without_the_controller_the_editor_gets_the_request_and_the_current_image():
    editor = Recorder()
    record, new = run_turn(_history(), "remove the large cardboard box", TurnParts(editor=editor, backend=None),
                           TurnSwitches(use_controller=False), is_restoration=True)
    assert record.plan is None and record.vlm_calls == 0 and record.editor_image_ids == [3]
    assert editor.calls[0][1] == "remove the large cardboard box" and new.current.meta["fallbacks"] == []


def test_skipping_non_restoration_turns_makes_no_call():
    vlm = ScriptedAnswer("{}")
    record, _ = run_turn(_history(), "make it sunny", TurnParts(editor=Recorder(), backend=vlm),
                         TurnSwitches(skip_non_restoration=True), is_restoration=False)
    assert vlm.calls == 0 and record.sent_instruction == "make it sunny" and record.editor_image_ids == [3]
    # the pass-through plan is plan_turn's own for a skipped turn, whatever the planner part
    assert record.plan == plan_turn(_history(), "make it sunny", vlm, False, PlanOptions(skip_non_restoration=True))


def test_the_switches_are_one_frozen_value_checked_when_made():
    switches = TurnSwitches(use_pti=False)
    with pytest.raises(FrozenInstanceError):
        switches.use_pti = True
    with pytest.raises(InputError, match="use_hrs must be True or False"):
        TurnSwitches(use_hrs="no")     # a string would read as True
    with pytest.raises(InputError, match="unknown restoration mode 'sometimes'"):
        TurnSwitches(restoration_mode="sometimes")


def test_a_planner_gets_its_controller_options_when_it_is_made():
    vlm = ScriptedAnswer(RESTORE)
    record, _ = run_turn(_history(), "remove the large cardboard box",
                         TurnParts(editor=Recorder(), backend=vlm,
                                   planner=VLMPlanner(history_mode="bounded", max_history_images=2)),
                         is_restoration=True)
    assert len(record.plan.meta["images_shown"]) == 2 and record.plan.meta["history_images"]
    with pytest.raises(InputError, match="unknown controller option.*history_images"):
        VLMPlanner(history_images="bounded")


def test_without_a_flag_the_restoration_mode_decides_and_says_how():
    record, _ = run_turn(_history(), "remove the large cardboard box",
                         TurnParts(editor=Recorder(), backend=ScriptedAnswer(RESTORE)))
    assert record.is_restoration is True
    assert record.plan.meta["restoration_decided_by"] == "auto" and "turn 1 added" in record.plan.meta["restoration_reason"]
    forced, _ = run_turn(_history(), "remove the large cardboard box",
                         TurnParts(editor=Recorder(), backend=ScriptedAnswer("{}")),
                         TurnSwitches(restoration_mode="not restoration"))
    assert forced.is_restoration is False and forced.editor_image_ids == [3]


def test_the_record_keeps_the_plan_and_selection_fallbacks_in_order():
    bad = json.dumps({**json.loads(RESTORE), "image_ids": [0, 9]})
    record, new = run_turn(_history(), "remove the large cardboard box",
                           TurnParts(editor=Recorder(), backend=ScriptedAnswer(bad)), is_restoration=True)
    assert record.selection.dropped_ids == [9] and record.fallbacks[-1] == "image_id_not_in_history_dropped"
    assert new.current.meta["fallbacks"] == record.fallbacks


def test_a_selector_is_a_part_the_turn_only_calls():
    class Oldest:
        name = "oldest"

        def select(self, history, plan, *, use_history_reference):
            first = history.images[0]
            return Selection([first], [0], history.current.image, ["oldest_only"])

    editor = Recorder()
    record, _ = run_turn(_history(), "remove the large cardboard box",
                         TurnParts(editor=editor, backend=ScriptedAnswer(RESTORE), selector=Oldest()),
                         is_restoration=True)
    assert record.editor_image_ids == [0] and "oldest_only" in record.fallbacks
    assert np.array_equal(np.asarray(editor.calls[0][0][0]), _history().image(0).array)
    assert isinstance(PlanSelector().select(_history(), record.plan, use_history_reference=True), Selection)


def test_post_edit_steps_may_change_the_image_and_are_recorded_in_order():
    class Invert:
        name = "invert"

        def __call__(self, history, record):
            return StepResult(self.name, {"changed": True}, image=Image.fromarray(255 - np.asarray(record.image)))

    class Measure:
        name = "measure"

        def __call__(self, history, record):
            return StepResult(self.name, {"mean": float(np.asarray(record.image).mean())})

    record, new = run_turn(_history(), "make it sunny",
                           TurnParts(editor=Recorder(), backend=None, post_edit=[Invert(), Measure()]),
                           TurnSwitches(use_controller=False), is_restoration=False, seed=30)
    assert [e["step"] for e in record.post_edit] == ["invert", "measure"]
    assert record.post_edit[1]["mean"] == pytest.approx((225 + 255 + 255) / 3)   # measured after the inversion
    assert np.array_equal(new.current.image.array, np.asarray(record.image))
    assert new.current.meta["post_edit"] == record.post_edit and "post:invert" in record.seconds


def test_a_post_edit_step_that_returns_no_step_result_is_refused_with_its_name():
    class OldShape:
        name = "old_shape"

        def __call__(self, history, record):
            return record.image, {"changed": False}      # the (image, entry) pair steps returned before issue 37

    with pytest.raises(InputError, match="'old_shape' must return a StepResult"):
        run_turn(_history(), "make it sunny", TurnParts(editor=Recorder(), backend=None, post_edit=[OldShape()]),
                 TurnSwitches(use_controller=False), is_restoration=False, seed=31)


def test_the_timing_hook_wraps_every_stage_that_ran():
    seen = []

    @contextmanager
    def hook(stage):
        seen.append(("enter", stage))
        yield
        seen.append(("exit", stage))

    run_turn(_history(), "remove the large cardboard box",
             TurnParts(editor=Recorder(), backend=ScriptedAnswer(RESTORE), timing=hook), is_restoration=True)
    assert [s for kind, s in seen if kind == "enter"] == ["controller", "select", "rewrite", "editor", "provenance"]
    assert seen.count(("exit", "editor")) == 1


def test_a_turn_that_needs_a_controller_without_one_says_so():
    with pytest.raises(InputError, match="needs a controller"):
        run_turn(_history(), "remove the large cardboard box", TurnParts(editor=Recorder(), backend=None),
                 is_restoration=True)


def test_the_first_turn_makes_no_call_and_edits_the_original():
    from respec.history import History
    vlm, editor = ScriptedAnswer(RESTORE), Recorder()
    record, new = run_turn(History.start(picture(0)), "add a box", TurnParts(editor=editor, backend=vlm))
    assert vlm.calls == 0 and record.editor_image_ids == [0] and record.sent_instruction == "add a box"
    assert len(new) == 2
