"""The controller nodes as ComfyUI calls them (the pack imported as a hyphenated package)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import core
from controller_helpers import make_history, tiny_qwen_dir  # noqa: F401


@pytest.fixture()
def nodes(pack):
    return pack.NODE_CLASS_MAPPINGS


@pytest.fixture()
def history_cls(pack):
    return core(pack, "history").History


@pytest.fixture()
def vlm(nodes, tiny_qwen_dir):
    (backend,) = nodes["ReSpecVLMLoader"].execute("qwen3-vl", str(tiny_qwen_dir), "auto", "cpu", True, False,
                                                  65536, 16, "off").result
    return backend


def target_inputs(history, instruction, vlm, mode="auto", skip=False):
    return dict(history=history, instruction=instruction, vlm=vlm, restoration_mode=mode,
                skip_non_restoration=skip, restoration_template="(built-in)", midturn_template="(built-in)")


def test_loader_returns_the_same_backend_for_the_same_settings(nodes, vlm, tiny_qwen_dir):
    (again,) = nodes["ReSpecVLMLoader"].execute("qwen3-vl", str(tiny_qwen_dir), "auto", "cpu", True, False,
                                                65536, 16, "off").result
    assert again is vlm and vlm.max_pixels == 65536 and vlm.max_new_tokens == 16


def test_openai_node_builds_a_remote_backend(nodes):
    (remote,) = nodes["ReSpecOpenAIController"].execute("http://127.0.0.1:8000/v1", "served", "MY_KEY_VAR",
                                                          30, 1, 65536, 256, "json_object").result
    assert remote.url == "http://127.0.0.1:8000/v1/chat/completions" and remote.api_key_env == "MY_KEY_VAR"


def test_preservation_target_turn_1_needs_no_vlm(nodes, history_cls):
    node = nodes["ReSpecPreservationTarget"]
    h = make_history(1, history_cls)
    inputs = target_inputs(h, "add a box in front of the chest", None)
    assert node.check_lazy_status(**inputs) == []
    plan, plan_json, text = node.execute(**inputs).result
    assert plan.vlm_called is False and text == "add a box in front of the chest"
    assert json.loads(plan_json)["meta"]["vlm_calls"] == 0


def test_preservation_target_asks_for_the_vlm_only_when_it_will_call_it(nodes, history_cls):
    node = nodes["ReSpecPreservationTarget"]
    h = make_history(3, history_cls)  # turn 1 added a cardboard box
    assert node.check_lazy_status(**target_inputs(h, "make the sky pink", None)) == ["vlm"]
    assert node.check_lazy_status(**target_inputs(h, "make the sky pink", None, skip=True)) == []
    assert node.check_lazy_status(**target_inputs(h, "remove the cardboard box", None, skip=True)) == ["vlm"]


def test_preservation_target_auto_mode_plans_a_restoration_turn(nodes, history_cls, vlm):
    node = nodes["ReSpecPreservationTarget"]
    h = make_history(3, history_cls)
    plan, plan_json, text = node.execute(**target_inputs(h, "remove the cardboard box", vlm)).result
    assert plan.is_restoration and plan.vlm_called and plan.vlm_calls == 1
    assert plan.meta["restoration_decided_by"] == "auto" and plan.meta["restoration_mode"] == "auto"
    assert text == plan.synthesis_instruction
    assert json.loads(plan_json)["turn"] == 3


def test_preservation_target_ground_truth_input_overrides_the_mode(nodes, history_cls, vlm):
    node = nodes["ReSpecPreservationTarget"]
    h = make_history(3, history_cls)
    inputs = target_inputs(h, "make the sky pink", vlm, mode="not restoration")
    plan, _, _ = node.execute(**inputs, is_restoration=True).result
    assert plan.is_restoration and plan.meta["restoration_decided_by"] == "ground_truth"


def _templates_dir(pack):
    d = core(pack, "paths").templates_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_preservation_target_reads_a_template_file_from_the_templates_folder(nodes, history_cls, vlm, pack):
    f = _templates_dir(pack) / "mid.txt"
    f.write_text("My own rewrite prompt.", encoding="utf-8")
    choices = nodes["ReSpecPreservationTarget"].INPUT_TYPES()["required"]["midturn_template"][1]["options"]
    assert choices == ["(built-in)", "mid.txt"]
    inputs = target_inputs(make_history(2, history_cls), "make the sky pink", vlm)
    inputs["midturn_template"] = "mid.txt"
    plan, _, _ = nodes["ReSpecPreservationTarget"].execute(**inputs).result
    assert plan.meta["template"]["source"] == str(f.resolve())


@pytest.mark.parametrize("outside", ["../secret.txt", "/etc/hostname", "sub/../../secret.txt", "link.txt"])
def test_preservation_target_refuses_a_template_outside_the_templates_folder(nodes, history_cls, vlm, pack,
                                                                              tmp_path, outside):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET", encoding="utf-8")
    (_templates_dir(pack) / "link.txt").symlink_to(secret)
    inputs = target_inputs(make_history(2, history_cls), "make the sky pink", vlm)
    inputs["midturn_template"] = outside
    with pytest.raises(core(pack, "errors").InputError, match="outside"):
        nodes["ReSpecPreservationTarget"].execute(**inputs).result
    assert math.isnan(nodes["ReSpecPreservationTarget"].fingerprint_inputs(instruction="x", midturn_template=outside))
    # a link leaving the folder is not offered either
    listed = nodes["ReSpecPreservationTarget"].INPUT_TYPES()["required"]["midturn_template"][1]["options"]
    assert "link.txt" not in listed


def test_preservation_target_reruns_when_a_template_file_changes(nodes, pack):
    cls = nodes["ReSpecPreservationTarget"]
    f = _templates_dir(pack) / "rest.txt"
    f.write_text("v1", encoding="utf-8")
    fingerprint = cls.fingerprint_inputs
    first = fingerprint(instruction="x", restoration_template="rest.txt", midturn_template="(built-in)")
    assert fingerprint(instruction="x", restoration_template="rest.txt", midturn_template="(built-in)") == first
    f.write_text("v2", encoding="utf-8")
    assert fingerprint(instruction="x", restoration_template="rest.txt", midturn_template="(built-in)") != first
    assert fingerprint(instruction="x", restoration_template="(built-in)", midturn_template="(built-in)") == ""


def test_reference_selector_outputs_the_plan_order_as_one_batch(nodes, history_cls, pack):
    Plan = core(pack, "plan").Plan
    h = make_history(2, history_cls, size=(48, 64))
    h = h.append(np.zeros((32, 40, 3), np.uint8), "add a shipping label to the box")  # a different size
    plan = Plan(turn=3, user_instruction="remove the box", synthesis_instruction="x", is_restoration=True,
                image_ids=(0, 2))
    editor_images, current, ids = nodes["ReSpecReferenceSelector"].execute(h, plan, True).result
    assert json.loads(ids) == [0, 2]
    assert tuple(editor_images.shape) == (2, 32, 40, 3) and tuple(current.shape) == (1, 32, 40, 3)
    assert torch.equal(editor_images[1], current[0])
    off_images, _, off_ids = nodes["ReSpecReferenceSelector"].execute(h, plan, False).result
    assert json.loads(off_ids) == [2] and tuple(off_images.shape) == (1, 32, 40, 3)


def test_instruction_rewriter_switches_with_pti(nodes, pack):
    Plan = core(pack, "plan").Plan
    plan = Plan(turn=2, user_instruction="remove the box", synthesis_instruction="Remove it, revealing X.")
    node = nodes["ReSpecInstructionRewriter"]
    assert node.execute(plan, True).result == ("Remove it, revealing X.",)
    assert node.execute(plan, False).result == ("remove the box",)


def test_the_vlm_stays_loaded_by_default_in_the_loader_and_every_shipped_workflow(nodes):
    from pathlib import Path
    spec = nodes["ReSpecVLMLoader"].INPUT_TYPES()["required"]["keep_loaded"][1]
    assert spec["default"] is True and "3 s" in spec["tooltip"]       # the tooltip says what off costs
    loaders = []
    for path in sorted((Path(__file__).resolve().parents[1] / "workflows" / "api").glob("*.api.json")):
        loaders += [n for n in json.loads(path.read_text()).values() if n["class_type"] == "ReSpecVLMLoader"]
    assert loaders and all(n["inputs"]["keep_loaded"] is True for n in loaders)


def test_the_plan_and_references_events_name_the_node_from_its_hidden_unique_id(nodes, history_cls, pack):
    comfy = core(pack, "comfy")
    events = []
    remove = comfy.add_listener(lambda name, data: events.append((name, data["node"])))
    try:
        h = make_history(1, history_cls)
        target = nodes["ReSpecPreservationTarget"].PREPARE_CLASS_CLONE({"hidden_inputs": {comfy.io.Hidden.unique_id: "7"}})
        plan = target.execute(**target_inputs(h, "add a box in front of the chest", None)).result[0]
        selector = nodes["ReSpecReferenceSelector"].PREPARE_CLASS_CLONE({"hidden_inputs": {comfy.io.Hidden.unique_id: "8"}})
        selector.execute(h, plan, True)
        nodes["ReSpecReferenceSelector"].execute(h, plan, True)      # outside ComfyUI: no id
    finally:
        remove()
    assert events == [("respec.plan", "7"), ("respec.references", "8"), ("respec.references", None)]
