"""Occluder / new-object masks (appendix B.1) through the real ultralytics YOLO-World v2 (built from
its yaml) and segment-anything SAM (tiny sizes), offline."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from respec import models
from respec.errors import CorruptWeightsError, DownloadNotAllowedError, InputError, MissingWeightsError
from respec.eval import masks
from respec.eval.masks import Masker, clip_box, labels_per_turn, query_chain, simple_singular
from respec.history import History
from respec.tiny.eval_models import (build_tiny_clip, build_tiny_sam, build_tiny_yolo_world, save_tiny_eval_files,
                                     tune_detector)
from respec.tiny.eval_models import TINY_CLIP_CFG

CHAIN = ["red flowers", "flowers", "flower", "traffic cone"]


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    yolo = build_tiny_yolo_world(seed=0)
    return {"yolo": yolo, "sam": build_tiny_sam(0), "clip": build_tiny_clip(0),
            "yolo_state": {k: v.clone() for k, v in yolo.model.state_dict().items()}}


def make_masker(parts, **options) -> Masker:
    """A masker on the shared tiny models, its detector back to 'class-head biases zeroed'."""
    parts["yolo"].model.load_state_dict(parts["yolo_state"])
    parts["yolo"].predictor = None
    return Masker(parts["yolo"], parts["sam"], parts["clip"], device="cpu", **options)


def seeing(parts, concept) -> Masker:
    """A masker whose detector responds to `concept` only (see tiny.eval_models.tune_detector)."""
    m = make_masker(parts)
    tune_detector(m.yolo, m.text_features, concept, CHAIN)
    return m


def picture(seed=0, h=96, w=128):
    rng = np.random.RandomState(seed)
    return np.asarray(Image.fromarray((rng.rand(12, 16, 3) * 255).astype(np.uint8)).resize((w, h), Image.BICUBIC))


# ----------------------------------------------------------------------------- the query chain

def test_query_chain_is_label_then_last_word_then_its_singular():
    assert query_chain("bouquet of red flowers") == [(0, "label", "bouquet of red flowers"),
                                                    (1, "last_word", "flowers"), (2, "singular", "flower")]
    assert query_chain("flowers") == [(0, "label", "flowers"), (2, "singular", "flower")]   # no query twice
    assert query_chain("  ") == []


def test_simple_singular_handles_the_common_english_plurals():
    assert [simple_singular(w) for w in ("berries", "boxes", "glasses", "benches", "cups", "bus", "glass", "sheep")] \
        == ["berry", "box", "glass", "bench", "cup", "bus", "glass", "sheep"]


def test_boxes_are_clipped_to_the_image_and_empty_boxes_are_invalid():
    assert clip_box([-5, 10, 300, 50], (128, 96)) == [0.0, 10.0, 128.0, 50.0]
    assert clip_box([0.1, 0.2, 0.5, 1.5], (100, 50), normalized=True) == [10.0, 10.0, 50.0, 50.0]
    assert clip_box([200, 10, 300, 50], (128, 96)) is None          # entirely outside
    assert clip_box([10, 10, 10.5, 50], (128, 96)) is None          # no area
    assert clip_box([float("nan"), 0, 5, 5], (128, 96)) is None


# ----------------------------------------------------------------------------- detection + segmentation

@pytest.mark.slow
def test_the_label_itself_is_accepted_first(parts):
    res = seeing(parts, "red flowers").mask(picture(), "red flowers")
    r = res.record
    assert (r["status"], r["accepted_prompt"], r["fallback_stage"], r["fallback_stage_name"]) == \
        ("ok", "red flowers", 0, "label")
    assert r["confidence"] >= 0.2 and len(r["attempts"]) == 1
    assert res.mask.shape == (96, 128) and res.mask.dtype == bool
    assert r["mask_area"] == int(res.mask.sum())
    x0, y0, x1, y1 = r["box"]
    assert 0 <= x0 < x1 <= 128 and 0 <= y0 < y1 <= 96


@pytest.mark.slow
def test_the_last_word_is_tried_when_the_label_finds_nothing(parts):
    r = seeing(parts, "flowers").mask(picture(), "red flowers").record
    assert (r["accepted_prompt"], r["fallback_stage"], r["fallback_stage_name"]) == ("flowers", 1, "last_word")
    assert [a["query"] for a in r["attempts"]] == ["red flowers", "flowers"]
    assert (r["attempts"][0]["best_confidence"] or 0.0) < 0.2


@pytest.mark.slow
def test_the_singular_is_tried_after_the_last_word(parts):
    r = seeing(parts, "flower").mask(picture(), "red flowers").record
    assert (r["accepted_prompt"], r["fallback_stage"], r["fallback_stage_name"]) == ("flower", 2, "singular")
    assert [a["stage_name"] for a in r["attempts"]] == ["label", "last_word", "singular"]


@pytest.mark.slow
def test_no_accepted_detection_gives_an_all_zero_mask_of_the_image_size(parts):
    res = seeing(parts, "traffic cone").mask(picture(h=80, w=100), "red flowers")
    assert res.mask.shape == (80, 100) and not res.mask.any()
    assert res.record["status"] == "no_detection" and res.record["fallback_stage"] is None
    assert len(res.record["attempts"]) == 3


@pytest.mark.slow
def test_detections_below_the_acceptance_threshold_are_returned_but_not_accepted(parts):
    m = make_masker(parts)
    tune_detector(m.yolo, m.text_features, "flowers", CHAIN, concept_confidence=0.1)
    res = m.mask(picture(), "flowers")
    att = res.record["attempts"][0]
    assert att["boxes"] > 0 and 0.001 <= att["best_confidence"] < 0.2   # the detector ran at conf 0.001
    assert res.record["status"] == "no_detection" and not res.mask.any()
    lenient = make_masker(parts, accept=0.05)
    assert lenient.mask(picture(), "flowers").record["status"] == "ok"


@pytest.mark.slow
def test_an_invalid_box_gives_a_zero_mask_with_its_reason(parts):
    res = make_masker(parts).segment(picture(), [500, 500, 600, 600])
    assert not res.mask.any() and res.mask.shape == (96, 128)
    assert res.record["status"] == "invalid_box" and "positive area" in res.record["reason"]


@pytest.mark.slow
def test_a_sam_failure_gives_a_zero_mask_and_is_recorded(parts, monkeypatch):
    m = seeing(parts, "flowers")

    def broken(*args, **kwargs):
        raise RuntimeError("decoder exploded")
    monkeypatch.setattr(m._predictor, "predict", broken)
    res = m.mask(picture(), "flowers")
    assert not res.mask.any() and res.record["status"] == "sam_failed"
    assert "decoder exploded" in res.record["reason"] and res.record["accepted_prompt"] == "flowers"


@pytest.mark.slow
def test_sam_encodes_each_image_once_however_many_labels(parts):
    m = make_masker(parts)   # class-head biases zeroed: every query is accepted, every label reaches SAM
    img = picture(3)
    for label in ("hat", "scarf", "red flowers", "dog"):
        assert m.mask(img, label).record["status"] == "ok"
    m.mask(img.copy(), "cat")                          # same content, another array
    assert m.stats["sam_encodes"] == 1 and m.stats["sam_prompts"] == 5
    m.mask(picture(4), "hat")
    assert m.stats["sam_encodes"] == 2


@pytest.mark.slow
def test_the_detector_runs_one_class_per_query(parts):
    m = make_masker(parts)
    m.mask(picture(), "bouquet of flowers")
    head = m.yolo.model
    assert head.names == ["bouquet of flowers"] and head.model[-1].nc == 1
    assert tuple(head.txt_feats.shape) == (1, 1, 512)
    assert torch.allclose(head.txt_feats.norm(dim=-1), torch.ones(1, 1), atol=1e-5)


@pytest.mark.slow
def test_one_predictor_serves_every_query_with_the_boxes_of_a_fresh_one(parts):
    """B.1 runs one detection per query; the predictor (ultralytics' fused copy of the network) is
    built once per loaded model and only its class embedding changes between queries."""
    m = make_masker(parts)
    tune_detector(m.yolo, m.text_features, "flowers", CHAIN, concept_confidence=0.6)
    queries = [(picture(0), "flowers"), (picture(0), "traffic cone"), (picture(0), "red flowers"),
               (picture(1), "flowers"), (picture(1), "flower"), (picture(2), "flowers")]
    kept, predictors = [], []
    for img, q in queries:
        kept.append(m.detect(img, q))
        predictors.append(m.yolo.predictor)
    assert all(p is predictors[0] for p in predictors)
    fresh = []
    for img, q in queries:   # the old way: a new predictor (a new fused copy) for every query
        m.yolo.predictor = None
        m._det_cache.clear()
        fresh.append(m.detect(img, q))
    assert kept == fresh
    found = {d.query: d.n_boxes > 0 for d in kept}
    assert found["flowers"] and not found["traffic cone"]   # the swapped embedding is what ran
    assert m.yolo.predictor.model.names == {0: "flowers"}


# ----------------------------------------------------------------------------- trajectories

@pytest.mark.slow
def test_trajectory_masks_cover_every_turn_with_cumulative_new_objects(parts):
    m = make_masker(parts)
    imgs = [picture(10), picture(11), picture(12)]
    tm = m.trajectory_masks(imgs, "flowers", [[], "hat", "scarf; dog"])
    assert len(tm.occ) == len(tm.new) == 3 and tm.turns == [1, 2, 3]
    assert [r["new_labels"] for r in tm.records] == [[], ["hat"], ["hat", "scarf", "dog"]]
    assert [len(r["new_objects"]) for r in tm.records] == [0, 1, 3]
    assert not tm.new[0].any() and tm.new[2].any()
    assert m.stats["sam_encodes"] == 3                 # one per image, for 1 + 2 + 4 labels
    per_turn = m.trajectory_masks(imgs, "flowers", [[], "hat", "scarf"], cumulative_new=False)
    assert [r["new_labels"] for r in per_turn.records] == [[], ["hat"], ["scarf"]]
    json.dumps(tm.to_record())                         # records are JSON-able


@pytest.mark.slow
def test_history_masks_use_turns_one_to_n_not_the_original(parts):
    m = make_masker(parts)
    h = History.start(picture(20)).append(picture(21), "add flowers").append(picture(22), "remove the flowers")
    tm = m.history_masks(h, "flowers", [])
    assert tm.turns == [1, 2] and len(tm.occ) == 2
    with pytest.raises(InputError, match="only the original image"):
        m.history_masks(History.start(picture(20)), "flowers", [])


@pytest.mark.slow
def test_trajectory_masks_round_trip_through_a_file(parts, tmp_path):
    tm = make_masker(parts).trajectory_masks([picture(1), picture(2)], "flowers", ["hat", ""])
    tm.save(tmp_path / "m.npz")
    back = masks.TrajectoryMasks.load(tmp_path / "m.npz")
    assert all(np.array_equal(a, b) for a, b in zip(tm.occ + tm.new, back.occ + back.new))
    assert back.turns == [1, 2] and back.occluder_label == "flowers"


def test_new_object_labels_are_one_list_per_turn_of_the_trajectory():
    """The core takes Python values (the node's text format is read in nodes/common.py, tested with the nodes)."""
    assert labels_per_turn([["hat"], "scarf, dog"], 3) == [["hat"], ["scarf", "dog"], []]
    assert labels_per_turn({"2": ["hat"]}, 3) == [[], ["hat"], []]
    assert labels_per_turn([" - ", ["none", "red  hat"]], 2) == [[], ["red hat"]]
    with pytest.raises(InputError, match="turns 1..2"):
        labels_per_turn({5: "x"}, 2)
    with pytest.raises(InputError, match="3 turns"):
        labels_per_turn(["a", "b", "c"], 2)
    with pytest.raises(InputError, match="a list per turn"):
        labels_per_turn("hat", 1)


# ----------------------------------------------------------------------------- ultralytics stays offline

def _ultralytics_state():
    import ultralytics.nn.tasks
    import ultralytics.utils
    import ultralytics.utils.checks
    import ultralytics.utils.events
    return {"env": dict(os.environ), "ONLINE": ultralytics.utils.ONLINE,
            "checks.AUTOINSTALL": ultralytics.utils.checks.AUTOINSTALL,
            "SAFE_LOAD": ultralytics.nn.tasks.SAFE_LOAD, "events": ultralytics.utils.events.events.enabled,
            "Image.open": Image.open}


@pytest.mark.slow
def test_ultralytics_settings_apply_only_during_the_packs_calls(parts, monkeypatch):
    """Offline, no auto-install, no analytics and safe loading while the pack calls ultralytics;
    afterwards the environment and ultralytics' flags are exactly what they were."""
    monkeypatch.setenv("YOLO_AUTOINSTALL", "True")   # another pack's choice
    monkeypatch.delenv("YOLO_OFFLINE", raising=False)
    before = _ultralytics_state()
    seen = {}
    m = make_masker(parts)
    real_predict = m.yolo.predict

    def spy(*args, **kwargs):
        import ultralytics.nn.tasks
        import ultralytics.utils.checks
        import ultralytics.utils.events
        seen.update(offline=os.environ.get("YOLO_OFFLINE"), autoinstall=os.environ.get("YOLO_AUTOINSTALL"),
                    checks=ultralytics.utils.checks.AUTOINSTALL, safe=ultralytics.nn.tasks.SAFE_LOAD,
                    events=ultralytics.utils.events.events.enabled)
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(m.yolo, "predict", spy)
    m.mask(picture(), "flowers")
    assert seen == {"offline": "1", "autoinstall": "False", "checks": False, "safe": True, "events": False}
    assert _ultralytics_state() == before
    assert "clip" not in sys.modules                  # OpenAI's clip package was never needed


class _Payload:
    """A pickle that runs code when unpickled (what a crafted .pt would hold)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_malicious_yolo_checkpoint_does_not_run_its_pickle_code(tmp_path):
    marker = tmp_path / "payload-ran"
    folder = tmp_path / "respec_home" / "models" / "ultralytics"
    folder.mkdir(parents=True)
    evil = folder / "evil-worldv2.pt"
    torch.save({"model": _Payload(marker), "train_args": {}}, evil)
    with pytest.raises(masks.CorruptWeightsError, match="weights_only") as info:
        masks.load_yolo_world(models.resolve("ultralytics", "evil-worldv2.pt", ""))
    assert str(evil) in str(info.value)
    assert not marker.exists()
    # the control: ultralytics' default loading would have run it
    import ultralytics.nn.tasks
    try:
        ultralytics.nn.tasks.torch_safe_load(str(evil), safe_only=False)
    except Exception:
        pass
    assert marker.read_text() == "ran"


@pytest.mark.slow
def test_a_real_ultralytics_checkpoint_still_loads_safely(tmp_path):
    files = save_tiny_eval_files(tmp_path / "w")
    yolo = masks.load_yolo_world(files["yolo"])
    assert yolo.model.model[-1].nc >= 1


@pytest.mark.slow
def test_detection_leaves_torchs_thread_count_alone(parts):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        make_masker(parts).mask(picture(), "flowers")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_load_masker_finds_weights_in_the_model_folders_and_names_missing_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("RESPEC_ALLOW_DOWNLOADS", "0")
    models_dir = tmp_path / "respec_home" / "models"
    files = save_tiny_eval_files(models_dir / "ultralytics")
    with pytest.raises(DownloadNotAllowedError, match="sams"):   # the official SAM file, absent, downloads off
        masks.load_masker("tiny-worldv2.pt", "vit_b", None, str(files["clip"]), device="cpu")
    with pytest.raises(MissingWeightsError, match="ultralytics"):
        masks.load_masker("no-such-yolo.pt", device="cpu")
    yolo = masks.load_yolo_world(models.resolve("ultralytics", "tiny-worldv2.pt", ""))
    assert Path(yolo.ckpt_path).is_absolute() and Path(yolo.ckpt_path) == files["yolo"].resolve()
    assert yolo.model.model[-1].nc >= 1


def test_importing_ultralytics_leaves_pil_image_open_alone():
    """ultralytics patches PIL.Image.open process-wide; the pack puts the original back."""
    from PIL import Image
    from respec.ultralytics_scope import ultralytics_scope
    before = Image.open
    with ultralytics_scope():
        pass
    assert Image.open is before
    assert Image.open.__module__ == "PIL.Image"


def test_a_sam_checkpoint_of_the_wrong_size_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RESPEC_ALLOW_DOWNLOADS", "0")
    files = save_tiny_eval_files(tmp_path / "w")
    sam_file = tmp_path / "w" / "my-sam.pth"
    torch.save(build_tiny_sam(0).state_dict(), sam_file)          # a SAM, but not a vit_b
    with pytest.raises(CorruptWeightsError) as info:
        masks.load_masker(str(files["yolo"]), "vit_b", str(sam_file), str(files["clip"]),
                          clip_arch=TINY_CLIP_CFG, device="cpu")
    assert str(sam_file) in str(info.value) and "vit_b" in str(info.value)


def test_the_detection_settings_are_taken_out_of_a_masker_options_dict():
    options = {"sam_type": "vit_b", "imgsz": 96, "accept": 0.3}
    detect = masks.DetectSettings.take(options)
    assert detect == masks.DetectSettings(conf=masks.DETECT_CONF, accept=0.3, imgsz=96)
    assert options == {"sam_type": "vit_b"}                      # the rest are load_masker's own arguments
    assert masks.DetectSettings.take({}) == masks.DetectSettings()
