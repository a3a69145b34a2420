"""The evaluation nodes as ComfyUI calls them (pack imported as a hyphenated package)."""
from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest
import torch

from conftest import core


@pytest.fixture(scope="module")
def tiny_eval(pack):
    """One tiny (Masker, Scorer) pair for the module: building YOLO-World + SAM takes seconds."""
    torch.manual_seed(0)
    clip = core(pack, "tiny.eval_models").build_tiny_clip(0)
    return core(pack, "eval.masks").build_tiny_masker(0, clip), core(pack, "eval.metric_models").build_tiny_scorer(0, clip)


@pytest.fixture(scope="module")
def tiny_scorer(pack):
    """The tiny Scorer alone, for tests that need no masks (no YOLO-World, no SAM)."""
    torch.manual_seed(0)
    return core(pack, "eval.metric_models").build_tiny_scorer(seed=0)


def nodes(pack):
    return pack.NODE_CLASS_MAPPINGS


def run(pack, name, unique_id=None, **inputs):
    """Call a V3 node as ComfyUI does: on a class clone holding the hidden unique_id; an io.NodeOutput."""
    cls = nodes(pack)[name]
    if unique_id is not None:
        io = core(pack, "comfy").io
        cls = cls.PREPARE_CLASS_CLONE({"hidden_inputs": {io.Hidden.unique_id: unique_id}})
    return getattr(cls, cls.FUNCTION)(**inputs)


def comfy_image(seed, h=48, w=64):
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (1, h, w, 3)).astype(np.float32) / 255.0)


def history(pack, n_edits=3):
    History = core(pack, "history").History
    common = importlib.import_module(f"{pack.__name__}.nodes.common")
    h = History.start(common.image_from_comfy(comfy_image(0)))
    for t in range(1, n_edits + 1):
        h = h.append(common.image_from_comfy(comfy_image(t)), f"edit {t}")
    return h


@pytest.mark.slow
def test_occluder_mask_node_masks_each_image_of_a_batch(pack, tiny_eval):
    masker, _ = tiny_eval
    batch = torch.cat([comfy_image(1), comfy_image(2)])
    mask, record = run(pack, "ReSpecOccluderMask", masker=masker, image=batch, label="flowers").result
    assert tuple(mask.shape) == (2, 48, 64) and mask.dtype == torch.float32
    recs = json.loads(record)
    assert [r["label"] for r in recs] == ["flowers", "flowers"] and all("fallback_stage" in r for r in recs)


@pytest.mark.slow
def test_trajectory_masks_node_masks_turns_one_to_n_in_one_call(pack, tiny_eval):
    masker, _ = tiny_eval
    h = history(pack, 3)
    out = run(pack, "ReSpecTrajectoryMasks", masker=masker, history=h, occluder_label="flowers",
              new_object_labels="-\nhat\n", cumulative_new=True)
    tm, occ, new, records = out.result
    assert tm.turns == [1, 2, 3] and tuple(occ.shape) == (3, 48, 64) and tuple(new.shape) == (3, 48, 64)
    assert [r["new_labels"] for r in json.loads(records)["records"]] == [[], ["hat"], ["hat"]]


def test_new_object_labels_parse_from_lists_json_and_text(pack):
    """The Trajectory Masks widget's text (nodes/common.py) read into the core's labels per turn."""
    common = importlib.import_module(f"{pack.__name__}.nodes.common")
    labels_per_turn = core(pack, "eval.masks").labels_per_turn

    def parse_labels_per_turn(spec, n_turns):
        return labels_per_turn(common.labels_from_text(spec) if isinstance(spec, str) else spec, n_turns)

    assert parse_labels_per_turn([["hat"], "scarf, dog"], 3) == [["hat"], ["scarf", "dog"], []]
    assert parse_labels_per_turn('{"2": ["hat"]}', 3) == [[], ["hat"], []]
    assert parse_labels_per_turn("-\nhat, scarf\n", 2) == [[], ["hat", "scarf"]]
    assert parse_labels_per_turn("3: cone\n1: hat", 3) == [["hat"], [], ["cone"]]
    with pytest.raises(core(pack, "errors").InputError, match="turns 1..2"):
        parse_labels_per_turn('{"5": "x"}', 2)
    with pytest.raises(core(pack, "errors").InputError, match="3 turns"):
        parse_labels_per_turn(["a", "b", "c"], 2)
    assert parse_labels_per_turn("", 2) == [[], []]
    assert common.labels_text([[], ["hat", "scarf"]]) == "-\nhat, scarf"     # what Scenario Loader writes


@pytest.mark.slow
def test_occur_score_node_scores_the_history_against_a_reference_turn(pack, tiny_eval):
    masker, scorer = tiny_eval
    h = history(pack, 3)
    tm = masker.history_masks(h, "flowers", [])
    comfy = core(pack, "comfy")
    events = []
    remove = comfy.add_listener(lambda name, data: events.append((name, data)))
    try:
        out = run(pack, "ReSpecOccurScore", unique_id="7", scorer=scorer, masks=tm, psnr_cap=50.0, reference_turn=1,
                  history=h)
    finally:
        remove()
    s_restore, s_preserve, s_tc, regions, record = out.result
    rec = json.loads(record)
    assert rec["reference_turn"] == 1 and rec["S_TC"] == pytest.approx(s_tc)
    assert tuple(regions.shape) == (2, 48, 64)
    assert s_tc == pytest.approx((s_restore + s_preserve) / 2) or math.isnan(s_tc)
    assert events and events[-1][0] == "respec.scores" and events[-1][1]["node"] == "7"
    published = events[-1][1]["regions"]
    assert set(published) == {"R_restore", "R_preserve"} and published["R_restore"]["url"].startswith("/respec/masks/")
    assert out.ui["respec_scores"][0]["S_TC"] == rec["S_TC"]


def test_occur_score_node_reports_nan_as_null_with_the_reason(pack, tiny_scorer):
    scorer = tiny_scorer
    TrajectoryMasks = core(pack, "eval.masks").TrajectoryMasks
    empty = TrajectoryMasks([np.zeros((48, 64), bool)] * 2, [np.zeros((48, 64), bool)] * 2)
    out = run(pack, "ReSpecOccurScore", scorer=scorer, masks=empty, psnr_cap=50.0, reference_turn=-1,
              final_image=comfy_image(5), reference_image=comfy_image(6))
    s_restore = out.result[0]
    rec = json.loads(out.result[4])
    assert math.isnan(s_restore) and rec["S_restore"] is None and "not found on any turn" in rec["reasons"][0]


def test_occur_score_node_needs_a_final_image_and_a_reference(pack, tiny_scorer):
    scorer = tiny_scorer
    errors = core(pack, "errors")
    TrajectoryMasks = core(pack, "eval.masks").TrajectoryMasks
    tm = TrajectoryMasks([np.zeros((48, 64), bool)], [np.zeros((48, 64), bool)])
    def score(**inputs):
        return run(pack, "ReSpecOccurScore", scorer=scorer, masks=tm, psnr_cap=50.0, **inputs)
    with pytest.raises(errors.InputError, match="final image"):
        score(reference_turn=-1, reference_image=comfy_image(1))
    with pytest.raises(errors.InputError, match="I_ref"):
        score(reference_turn=-1, final_image=comfy_image(1))
    with pytest.raises(errors.InputError, match="no history"):
        score(reference_turn=0, final_image=comfy_image(1))


class ScriptedJudge:
    """Stands in for a remote judge service at its edge: chat() returns the queued reply."""

    name = "scripted"

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def chat(self, parts, *, system=None, max_new_tokens=768, json_schema=None):
        self.calls.append(parts)
        return self.reply


def test_instruction_judge_node_outputs_s_if_and_the_record(pack):
    def judge_node(backend, unique_id=None):
        return run(pack, "ReSpecInstructionJudge", unique_id=unique_id, backend=backend, before=comfy_image(1),
                   after=comfy_image(2), instruction="add a hat", max_new_tokens=128, use_json_schema=True)
    judge = ScriptedJudge('```json\n{"score": 1, "reason": "weak"}\n```')
    out = judge_node(judge, unique_id="3")
    s_if, record = out.result
    assert s_if == pytest.approx(1 / 3) and json.loads(record)["reason"] == "weak"
    assert sum(not isinstance(p, str) for p in judge.calls[0]) == 2
    s_if, record = judge_node(ScriptedJudge("no idea")).result
    assert math.isnan(s_if) and json.loads(record)["ok"] is False


def test_reference_check_node_compares_restoration_source_with_ground_truth(pack):
    Plan = core(pack, "plan").Plan
    plan = Plan(turn=3, user_instruction="remove", synthesis_instruction="remove", is_restoration=True,
                restoration_source_id=1)
    assert run(pack, "ReSpecReferenceCheck", plan=plan, ground_truth_turn=1).result[:2] == (True, 1)
    assert run(pack, "ReSpecReferenceCheck", plan=plan, ground_truth_turn=0).result[0] is False


def test_loader_nodes_name_missing_weights(pack):
    errors = core(pack, "errors")
    with pytest.raises((errors.MissingWeightsError, errors.DownloadNotAllowedError), match="respec_metrics"):
        run(pack, "ReSpecScorerLoader", lpips_trunk="missing-alexnet.pth", clip_weights="missing-clip.safetensors",
            allow_download=False, device="cpu")
    with pytest.raises((errors.MissingWeightsError, errors.DownloadNotAllowedError), match="ultralytics"):
        run(pack, "ReSpecMaskerLoader", yolo_weights="missing-yolo.pt", sam_type="vit_h",
            sam_weights="(matches sam_type)", clip_weights="missing-clip.safetensors", accept_threshold=0.2,
            allow_download=False, device="cpu")
