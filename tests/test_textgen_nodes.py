"""The TextGenerate controller route: Controller Prompt -> (ComfyUI's TextGenerate) -> Plan from Text.

The C.2/C.3 rules themselves are tested on both routes in test_controller_parsing.py; here: what
the two nodes send and ask for, that they make the same plan as Preservation Target for the same
answer, and on_parse_failure.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import core
from controller_helpers import ScriptedAnswer, make_history, picture

FULL = {"reasoning": {"target_evidence": "the patch on the chest"}, "identity_anchor_id": 3,
        "restoration_source_id": 0, "restoration_region": "chest", "image_ids": [0, 3],
        "synthesis_instruction": "Remove the box, revealing the patch from the first image."}
REQUEST = "remove the large cardboard box"


@pytest.fixture()
def nodes(pack):
    return pack.NODE_CLASS_MAPPINGS


@pytest.fixture()
def history_cls(pack):
    return core(pack, "history").History


def prompt_inputs(history, instruction, mode="auto", skip=False, max_pixels=262144, **extra):
    return dict(history=history, instruction=instruction, restoration_mode=mode, skip_non_restoration=skip,
                max_pixels=max_pixels, restoration_template="(built-in)", midturn_template="(built-in)", **extra)


def build(nodes, history, instruction, **kw):
    return nodes["ReSpecControllerPrompt"].execute(**prompt_inputs(history, instruction, **kw)).result


def test_restoration_turn_gets_the_restoration_prompt_and_every_history_image(nodes, history_cls, pack):
    h = make_history(4, history_cls)
    text, images, call = build(nodes, h, REQUEST, mode="restoration")
    templates = core(pack, "controller.prompts")
    assert text.startswith(templates.builtin_template("restoration").rstrip())
    assert "are, in order, Image 0 to Image 3" in text and f"[Current Request] (turn 4): {REQUEST}" in text
    assert tuple(images.shape) == (4, 48, 64, 3) and images.dtype.is_floating_point
    assert float(images.max()) <= 1.0
    np.testing.assert_array_equal((images[2].numpy() * 255).round().astype(np.uint8), h.images[2].array)
    assert call.needed and call.is_restoration


def test_mid_turn_gets_the_rewrite_prompt(nodes, history_cls, pack):
    text, _, call = build(nodes, make_history(3, history_cls), "make the sky pink", mode="not restoration")
    assert text.startswith(core(pack, "controller.prompts").builtin_template("midturn").rstrip())
    assert call.needed and not call.is_restoration


def test_history_images_of_different_sizes_come_as_one_batch_at_the_current_size(nodes, history_cls):
    h = history_cls.start(picture(0, (40, 40))).append(picture(1, (48, 64)), "widen the canvas")
    _, images, _ = build(nodes, h, "make it red")
    assert tuple(images.shape) == (2, 48, 64, 3)


def test_max_pixels_shrinks_the_shared_size(nodes, history_cls):
    _, images, _ = build(nodes, make_history(3, history_cls, size=(120, 160)), "make it red", max_pixels=4800)
    assert tuple(images.shape[1:3]) == (60, 80)


def test_turn_1_asks_for_no_generated_text_and_plans_without_a_call(nodes, history_cls):
    _, images, call = build(nodes, make_history(1, history_cls), "add a red balloon")
    node = nodes["ReSpecPlanFromText"]
    assert node.check_lazy_status(call, None, "request") == []
    plan, plan_json, instruction = node.execute(call, None, "request").result
    assert plan.vlm_called is False and plan.meta["skipped"] == "first_turn" and plan.vlm_calls == 0
    assert instruction == "add a red balloon" and json.loads(plan_json)["turn"] == 1
    assert tuple(images.shape) == (1, 48, 64, 3)


def test_skipped_non_restoration_turn_asks_for_no_generated_text(nodes, history_cls):
    _, _, call = build(nodes, make_history(3, history_cls), "make the sky pink", mode="not restoration", skip=True)
    node = nodes["ReSpecPlanFromText"]
    assert node.check_lazy_status(call, None, "request") == []
    plan = node.execute(call, None, "request").result[0]
    assert plan.meta["skipped"] == "non_restoration_turn_skipped" and plan.synthesis_instruction == "make the sky pink"


def test_a_turn_that_calls_the_controller_asks_for_generated_text(nodes, history_cls):
    _, _, call = build(nodes, make_history(3, history_cls), REQUEST)
    node = nodes["ReSpecPlanFromText"]
    assert node.check_lazy_status(call, None, "request") == ["generated_text"]
    assert node.check_lazy_status(call, "{}", "request") == []
    with pytest.raises(Exception, match="generated_text"):
        node.execute(call, None, "request")


@pytest.mark.parametrize("answer", ["```json\n" + json.dumps(FULL) + "\n```",
                                    json.dumps({k: v for k, v in FULL.items() if k != "image_ids"}),
                                    "no json at all", '["not", "an", "object"]'])
def test_plan_from_text_makes_the_plan_preservation_target_makes(nodes, history_cls, answer):
    h = make_history(4, history_cls)
    vlm_plan = nodes["ReSpecPreservationTarget"].execute(
        history=h, instruction=REQUEST, vlm=ScriptedAnswer(answer), restoration_mode="auto",
        skip_non_restoration=False, restoration_template="(built-in)", midturn_template="(built-in)",
        on_parse_failure="paper").result[0]
    _, _, call = build(nodes, h, REQUEST)
    text_plan = nodes["ReSpecPlanFromText"].execute(call, answer, "paper").result[0]
    skip = {"controller", "seconds", "meta"}
    a, b = vlm_plan.to_dict(), text_plan.to_dict()
    assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}
    assert text_plan.is_restoration and text_plan.controller == "TextGenerate"
    shared_meta = ("vlm_calls", "prompt", "template", "parse", "images_shown", "restoration_mode")
    assert {k: a["meta"].get(k) for k in shared_meta} == {k: b["meta"].get(k) for k in shared_meta}


def test_on_parse_failure_request_sends_the_users_words_and_says_so(nodes, history_cls):
    _, _, call = build(nodes, make_history(4, history_cls), REQUEST)
    node = nodes["ReSpecPlanFromText"]
    paper = node.execute(call, "I would bring back the patch.", "paper").result[0]
    request = node.execute(call, "I would bring back the patch.", "request").result[0]
    assert paper.synthesis_instruction == "I would bring back the patch."
    assert request.synthesis_instruction == REQUEST
    assert request.fallbacks == paper.fallbacks + ("parse_failure_used_request",)
    # C.3 fills the same ids either way
    assert (request.restoration_source_id, request.identity_anchor_id, request.image_ids) == (0, 3, (0, 3))


def test_on_parse_failure_changes_nothing_when_the_answer_parses(nodes, history_cls):
    _, _, call = build(nodes, make_history(4, history_cls), REQUEST)
    plan = nodes["ReSpecPlanFromText"].execute(call, json.dumps(FULL), "request").result[0]
    assert plan.synthesis_instruction == FULL["synthesis_instruction"] and plan.fallbacks == ()


def test_the_plan_event_names_the_node_from_its_hidden_unique_id(nodes, history_cls, pack):
    comfy = core(pack, "comfy")
    _, _, call = build(nodes, make_history(1, history_cls), "add a red balloon")
    events = []
    remove = comfy.add_listener(lambda name, data: events.append((name, data["node"])))
    try:
        node = nodes["ReSpecPlanFromText"].PREPARE_CLASS_CLONE({"hidden_inputs": {comfy.io.Hidden.unique_id: "5"}})
        node.execute(call, None, "request")
    finally:
        remove()
    assert events == [("respec.plan", "5")]
